#!/usr/bin/env python3
"""Replicated produce: three brokers on this machine, RF=3, acks=all, min.insync.replicas=2.

Three broker processes without a controller of their own (process.roles=broker) get a
4-partition topic from the static controller (leaders spread over the brokers), then shared/bench/kafka_load.py produces
100-byte records in ~16 KiB batches with acks=-1:

1. at full load (4 connections, depth 8): records/s, p50/p99, each broker's CPU µs per
   request (``--server-pid`` of the broker leading the most partitions; all three are
   sampled for CPU here from /proc);
2. at about half that rate (fewer requests in flight: the closed-loop tool has no rate
   limit, so concurrency is stepped down until the rate is nearest half): p50/p99.

During each run every follower's lag (leader LEO - follower LEO, via ListOffsets with the
debugging replica id) is sampled every 100 ms. Prints medians over rounds; never asserts.

    python bench/replication_bench.py [--rounds 3] [--duration 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.launcher import BrokerProcess, free_port  # noqa: E402
from controller.static import PartitionAssignment, StaticController  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402

LOAD = REPO.parent / "shared" / "bench" / "kafka_load.py"
TOPIC = "rbench"
PARTITIONS = 4
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def load(bootstrap: str, pid: int, duration: float, connections: int, depth: int) -> dict:
    cmd = [sys.executable, str(LOAD), "--mode", "produce", "--bootstrap", bootstrap, "--topic", TOPIC,
           "--no-create", "--partitions", str(PARTITIONS), "--connections", str(connections), "--depth", str(depth),
           "--acks", "-1", "--record-size", "100", "--records-per-batch", "148", "--duration", str(duration),
           "--server-pid", str(pid), "--uvloop"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * 6 + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"kafka_load.py failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


async def leo(ctrl: StaticController, broker: int) -> dict[int, int]:
    resp = await (await ctrl.conn(broker)).request(ApiKey.LIST_OFFSETS, {"replica_id": -2, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": p, "timestamp": -1} for p in range(PARTITIONS)]}]},
        version=1)
    return {p.partition_index: p.offset for p in resp.topics[0].partitions if p.error_code == 0}


class LagSampler:
    """Samples follower lag every 100 ms on its own thread and event loop."""

    def __init__(self, brokers: dict[int, tuple[str, int]], assignments: list[PartitionAssignment]) -> None:
        self.brokers = brokers
        self.assignments = assignments
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        ctrl = StaticController(self.brokers)
        try:
            while not self._stop.is_set():
                leos = {b: await leo(ctrl, b) for b in self.brokers}
                for a in self.assignments:
                    lead = leos[a.leader].get(a.partition)
                    for f in a.replicas:
                        if f != a.leader and lead is not None and a.partition in leos[f]:
                            self.samples.append(lead - leos[f][a.partition])
                await asyncio.sleep(0.1)
        finally:
            await ctrl.close()

    def __enter__(self) -> "LagSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


def one_round(args) -> dict:
    root = Path(tempfile.mkdtemp(prefix="kbroker-rbench-"))
    procs = {i: BrokerProcess(root / f"data{i}", port=free_port(), broker_id=i, overrides={
        "process.roles": "broker", "min.insync.replicas": 2,
        "log.retention.check.interval.ms": 3600000}) for i in (1, 2, 3)}
    try:
        for p in procs.values():
            p.start()
        brokers = {i: ("127.0.0.1", p.port) for i, p in procs.items()}
        assignments = [PartitionAssignment(TOPIC, p, leader=1 + p % 3, leader_epoch=0,
                                           isr=[1 + (p + k) % 3 for k in range(3)],
                                           replicas=[1 + (p + k) % 3 for k in range(3)])
                       for p in range(PARTITIONS)]

        async def assign():
            ctrl = StaticController(brokers)
            try:
                await ctrl.assign(assignments)
            finally:
                await ctrl.close()
        asyncio.run(assign())
        bootstrap = procs[1].bootstrap
        out = {}
        for label, connections, depth in [("full", 4, 8)] + [("half", c, d) for c, d in args.half_steps]:
            before = {i: cpu_seconds(p.pid) for i, p in procs.items()}
            with LagSampler(brokers, assignments) as lag:
                res = load(bootstrap, procs[1].pid, args.duration, connections, depth)
            after = {i: cpu_seconds(p.pid) for i, p in procs.items()}
            window = args.duration + 1.0  # the tool's warm-up second is in the CPU window too
            res["cpu_util_per_broker"] = {i: round((after[i] - before[i]) / window, 2) for i in procs}
            res["lag_max"] = max(lag.samples) if lag.samples else None
            res["lag_median"] = statistics.median(lag.samples) if lag.samples else None
            res["concurrency"] = f"{connections}x{depth}"
            out.setdefault(label, []).append(res)
        return out
    finally:
        for p in procs.values():
            p.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0)
    args = ap.parse_args()
    args.half_steps = [(2, 4), (2, 2), (1, 2), (1, 1)]
    full, halves = [], []
    for r in range(args.rounds):
        res = one_round(args)
        f = res["full"][0]
        full.append(f)
        target = f["records_per_s"] / 2
        half = min(res["half"], key=lambda x: abs(x["records_per_s"] - target))
        halves.append(half)
        print(f"round {r + 1}: full {f['records_per_s']:>9,.0f} rec/s p50 {f['p50_ms']:.2f} p99 {f['p99_ms']:.2f} ms "
              f"cpu/req(leader of p1,p4) {f['server_cpu_us_per_request']:.0f} µs, cpu util {f['cpu_util_per_broker']}, "
              f"lag max {f['lag_max']} median {f['lag_median']} | nearest half ({half['concurrency']}): "
              f"{half['records_per_s']:>9,.0f} rec/s p50 {half['p50_ms']:.2f} p99 {half['p99_ms']:.2f} ms, "
              f"lag max {half['lag_max']}", flush=True)
    med = statistics.median
    print()
    print(f"medians over {args.rounds} rounds: RF=3, acks=all, min.insync.replicas=2, 4 partitions, 100-byte records, "
          f"148/batch")
    print(f"  full load   records/s {med(x['records_per_s'] for x in full):>12,.0f}   p50 "
          f"{med(x['p50_ms'] for x in full):6.2f} ms   p99 {med(x['p99_ms'] for x in full):6.2f} ms   "
          f"broker-1 CPU µs/request {med(x['server_cpu_us_per_request'] for x in full):6.0f}")
    print(f"  ~half rate  records/s {med(x['records_per_s'] for x in halves):>12,.0f}   p50 "
          f"{med(x['p50_ms'] for x in halves):6.2f} ms   p99 {med(x['p99_ms'] for x in halves):6.2f} ms")
    print(f"  follower lag (records) at full load: median of medians {med(x['lag_median'] for x in full)}, "
          f"max of maxima {max(x['lag_max'] for x in full)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
