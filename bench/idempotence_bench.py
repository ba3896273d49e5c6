#!/usr/bin/env python3
"""Produce with idempotence on vs off, same broker process, alternating runs.

One kbroker process; each run produces 100-byte records in 148-record batches (~16 KiB)
with acks=-1 over 4 connections (one partition each, 5 requests in flight, the most an
idempotent producer allows), to a fresh topic. "on" batches carry a producer id from
InitProducerId, its epoch and consecutive sequences; "off" batches carry -1. Both modes
stamp and re-checksum every batch on the client side the same way, so the client does equal
work; what differs is only the broker's producer-state check. Reports records/s and the
broker's CPU µs per request (from /proc), medians over rounds, and the on/off ratio
(the goal is ≥ 0.95).

    python bench/idempotence_bench.py [--rounds 5] [--duration 6]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import struct
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.launcher import BrokerProcess, free_port  # noqa: E402
from crc32c import crc32c  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.client import BrokerConnection  # noqa: E402
from protocol.records import (ATTRIBUTES_OFFSET, CRC_OFFSET, PRODUCER_ID_OFFSET, Record,  # noqa: E402
                              build_batch)

CLK_TCK = os.sysconf("SC_CLK_TCK")
PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, epoch, base sequence (inside the CRC)
U32 = struct.Struct(">I")
RECORDS_PER_BATCH = 148


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def run(port: int, topic: str, idempotent: bool, duration: float, depth: int = 5) -> int:
    template = build_batch([Record(value=b"x" * 100, timestamp=1_700_000_000_000 + i)
                            for i in range(RECORDS_PER_BATCH)])
    admin = BrokerConnection("127.0.0.1", port)
    await admin.connect()
    resp = await admin.request(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": topic, "num_partitions": 4, "replication_factor": 1}], "timeout_ms": 10000})
    assert resp.topics[0].error_code == 0, resp
    pid, epoch = -1, -1
    if idempotent:
        r = await admin.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
        pid, epoch = r.producer_id, r.producer_epoch
    admin.close()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration
    acked = [0] * 4

    async def partition_loop(p: int) -> None:
        conn = BrokerConnection("127.0.0.1", port)
        await conn.connect()
        sequence = 0
        inflight: set[asyncio.Task] = set()

        async def send(seq: int) -> None:
            batch = bytearray(template)
            PRODUCER_FIELDS.pack_into(batch, PRODUCER_ID_OFFSET, pid, epoch, seq if idempotent else -1)
            U32.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
            [(_t, [(_p, error, _b, _l, _s)])] = await conn.produce(-1, 30000, [(topic, [(p, batch)])])
            if error:
                raise RuntimeError(f"produce error {error}")
            acked[p] += RECORDS_PER_BATCH

        while loop.time() < deadline:
            while len(inflight) < depth:
                task = loop.create_task(send(sequence))
                sequence += RECORDS_PER_BATCH
                inflight.add(task)
            done, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()
        if inflight:
            await asyncio.gather(*inflight)
        conn.close()

    await asyncio.gather(*(partition_loop(p) for p in range(4)))
    return sum(acked)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=6.0)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kbroker-ibench-"))
    broker = BrokerProcess(root / "data", port=free_port(), overrides={"log.retention.check.interval.ms": 3600000})
    results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    try:
        import uvloop
        broker.start()
        for r in range(args.rounds):
            for mode in ("off", "on"):
                before = cpu_seconds(broker.pid)
                records = uvloop.run(run(broker.port, f"idem-{mode}-{r}", mode == "on", args.duration))
                cpu = cpu_seconds(broker.pid) - before
                requests = records / RECORDS_PER_BATCH
                results[mode].append((records / args.duration, cpu / requests * 1e6))
                print(f"round {r + 1} idempotence {mode:3s}: {records / args.duration:>11,.0f} records/s, "
                      f"broker {cpu / requests * 1e6:6.1f} µs CPU/request", flush=True)
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    med = {m: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for m, v in results.items()}
    print()
    print(f"medians over {args.rounds} rounds (acks=-1, 4 partitions x 5 in flight, 148 x 100-byte records/batch)")
    print(f"  idempotence off  {med['off'][0]:>11,.0f} records/s  {med['off'][1]:6.1f} µs CPU/request")
    print(f"  idempotence on   {med['on'][0]:>11,.0f} records/s  {med['on'][1]:6.1f} µs CPU/request")
    print(f"  on / off         {med['on'][0] / med['off'][0]:11.3f} (records/s)   "
          f"{med['on'][1] / med['off'][1]:6.3f} (CPU per request)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
