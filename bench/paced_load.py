#!/usr/bin/env python3
"""An open-loop produce load: kafka_load.py's requests, sent on a fixed schedule.

shared/bench/kafka_load.py is a closed loop: a connection sends its next request when a
response comes back, so a slower broker is simply offered less, and a stall delays the
requests that would have been sent meanwhile without any of them counting it (coordinated
omission). Here request k is due at ``start + k / rate``, whatever came back: the same
frames as kafka_load.py (its own builders, imported from shared/bench/kafka_load.py: Produce
v3, one RecordBatch of --records-per-batch records of --record-size bytes per request), the
partitions taken in turn, each request on the connection to its partition's leader (one
connection per leader and group of partitions, as kafka_load.py assigns them), any number in
flight. Latency is taken from the request's *scheduled* time to its response, so a request
the client could only send late (its loop busy, the machine's cores taken) counts its whole
wait; the send -> response time alone is reported beside it.

The schedule is kept by the event loop's timer (uvloop's, with --uvloop: millisecond
resolution), waking at each due time, at most once per millisecond, and writing every request
due by then in one write per connection: at a few thousand requests/s a request may leave up
to 1 ms after its time (``late_p50_ms``/``late_p99_ms`` say how late), which is in the scheduled
latency, as a timer firing late is: a client that wanted to send then could not. A connection
holding --max-inflight requests sends no more
until answers come back (those requests stay due and count from their scheduled time), so a
broker that cannot keep up leaves a bounded backlog, reported as ``behind_max``.

Output: one JSON line, as kafka_load.py's: records_per_s (acknowledged in the window),
requests, p50_ms/p99_ms/max_ms (scheduled -> response), send_p50_ms/send_p99_ms/send_max_ms
(written -> response), late_p99_ms (scheduled -> written), errors, target_requests_per_s,
and with --server-pid the server's CPU as kafka_load.py gives it.

    python bench/paced_load.py --bootstrap 127.0.0.1:9092 --topic t --partitions 4 --rate 2000 \\
        --connections 4 --acks -1 --record-size 100 --records-per-batch 148 --duration 8 --uvloop
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import json
import struct
import sys
import time
from pathlib import Path

LOAD = Path(__file__).resolve().parent.parent.parent / "shared" / "bench" / "kafka_load.py"


def _kafka_load():
    spec = importlib.util.spec_from_file_location("kafka_load", LOAD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kafka_load"] = module
    spec.loader.exec_module(module)
    return module


kl = _kafka_load()
I32 = struct.Struct(">i")


class PacedConnection(asyncio.BufferedProtocol):
    """One connection: requests written when the schedule says, answers matched in order."""

    def __init__(self, args, stats: "PacedStats") -> None:
        self.args, self.stats = args, stats
        self.transport: asyncio.Transport | None = None
        self.corr = 0
        self.inflight: collections.deque = collections.deque()  # (corr, scheduled, sent, frame)
        self.due: collections.deque = collections.deque()       # (scheduled, frame) not written yet
        self.buf = bytearray(1 << 16)
        self.view = memoryview(self.buf)
        self.filled = 0
        self.reply: asyncio.Future | None = None
        self.closed = asyncio.get_running_loop().create_future()

    async def handshake(self) -> None:
        self.corr += 1
        msg = kl.request_header(kl.API_API_VERSIONS, 0, self.corr, self.args.client_id) + kl.api_versions_body()
        self.reply = asyncio.get_running_loop().create_future()
        self.transport.write(I32.pack(len(msg)) + msg)
        await asyncio.wait_for(self.reply, timeout=self.args.drain_timeout)

    def send_due(self, now: float) -> None:
        """Writes the due requests, up to --max-inflight in flight, in one write."""
        parts = []
        room = self.args.max_inflight - len(self.inflight)
        while self.due and room > 0:
            scheduled, frame = self.due.popleft()
            self.corr = (self.corr + 1) & 0x7FFFFFFF
            self.inflight.append((self.corr, scheduled, now, frame))
            parts += (frame.head, I32.pack(self.corr), frame.tail)
            room -= 1
        if parts:
            self.transport.write(b"".join(parts))

    # asyncio.BufferedProtocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view[self.filled:]

    def buffer_updated(self, nbytes: int) -> None:
        self.filled += nbytes
        now = time.perf_counter()
        data, pos, end = self.buf, 0, self.filled
        answered = False
        while end - pos >= 4:
            (size,) = I32.unpack_from(data, pos)
            start, stop = pos + 4, pos + 4 + size
            if stop > end:
                break
            pos = stop
            if self.reply is not None:
                self.reply.set_result(bytes(data[start:stop]))
                self.reply = None
                continue
            corr, scheduled, sent, frame = self.inflight.popleft()
            (got,) = I32.unpack_from(data, start)
            if got != corr:
                self.stats.error(f"correlation id {got}, expected {corr}")
                self.transport.close()
                return
            ok = size == frame.ok_size and data.startswith(frame.ok_start, start + 4)
            if not ok:  # decoded in full: each failed partition counted
                ok = True
                for _p, error in kl.parse_produce_response(kl.Decoder(bytes(data[start:stop]), 4),
                                                           self.args.produce_version):
                    if error:
                        ok = False
                        self.stats.error(f"produce error {error}")
            if ok:
                self.stats.completed(scheduled, sent, now, frame.records)
            answered = True
        if pos:
            rest = end - pos
            if rest:
                self.buf[:rest] = self.view[pos:end].tobytes()
            self.filled = rest
        if self.filled >= 4:
            (size,) = I32.unpack_from(self.buf)
            if 4 + size > len(self.buf):
                buf = bytearray(4 + size)
                buf[:self.filled] = self.view[:self.filled]
                self.buf, self.view = buf, memoryview(buf)
        if answered and self.due:
            self.send_due(now)

    def connection_lost(self, exc) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.set_exception(exc or ConnectionError("closed"))
        if self.inflight or self.due:
            self.stats.error("connection lost")
        if not self.closed.done():
            self.closed.set_result(None)


SLOW_S = 0.005  # --slow-out lists the requests slower than this


class PacedStats:
    def __init__(self) -> None:
        self.window_start = 0.0
        self.window_end = float("inf")
        self.requests = 0
        self.requests_total = 0  # answered, warm-up included
        self.records = 0
        self.latency: list[float] = []    # scheduled -> response
        self.service: list[float] = []    # written -> response
        self.late: list[float] = []       # scheduled -> written
        self.slow: list[tuple[float, float, float]] = []  # (scheduled, latency, late) of those over SLOW_S
        self.errors = 0
        self.error_codes: collections.Counter = collections.Counter()

    def completed(self, scheduled: float, sent: float, now: float, records: int) -> None:
        self.requests_total += 1
        if self.window_start <= scheduled < self.window_end:
            self.requests += 1
            self.records += records
            self.latency.append(now - scheduled)
            self.service.append(now - sent)
            self.late.append(sent - scheduled)
            if now - scheduled > SLOW_S:
                self.slow.append((scheduled, now - scheduled, sent - scheduled))

    def error(self, what: str) -> None:
        self.errors += 1
        self.error_codes[what] += 1


async def run(args) -> dict:
    conn = await kl.Connection(*kl.parse_hostport(args.bootstrap), args.client_id).open()
    try:
        versions = await kl.negotiate(conn, args)
        brokers, parts = await kl.find_leaders(conn, args, False, versions)
    finally:
        await conn.close()
    leader_of = {p.partition: p.leader for p in parts}
    groups = []
    for ps in kl.assign(list(range(args.partitions)), args.connections):
        by_leader = collections.defaultdict(list)
        for p in ps:
            by_leader[leader_of[p]].append(p)
        groups += [(kl.address_of(args, brokers, leader), lps) for leader, lps in by_leader.items()]
    stats = PacedStats()
    loop = asyncio.get_running_loop()
    # the partitions in turn, each with its connection and its frame (built before the clock)
    turn = []
    conns = []
    for (host, port), ps in groups:
        kl.check_loopback(host, port)
        _, c = await loop.create_connection(lambda: PacedConnection(args, stats), host, port)
        await c.handshake()
        conns.append(c)
        for frame, p in zip(kl.build_produce_frames(args, ps), ps):
            turn.append((p, c, frame))
    turn.sort(key=lambda t: t[0])
    interval = 1.0 / args.rate
    start = time.perf_counter() + 0.05
    stats.window_start = start + args.warmup
    stats.window_end = stats.window_start + args.duration
    total = int((args.warmup + args.duration) * args.rate)
    cpu = kl.Cpu(args.server_pid, stats.window_start)
    sampler = asyncio.create_task(cpu.sample_at_window_start())
    done = loop.create_future()
    behind_max = 0
    k = 0

    def tick() -> None:
        nonlocal k, behind_max
        now = time.perf_counter()
        touched = set()
        while k < total and start + k * interval <= now:
            _p, c, frame = turn[k % len(turn)]
            c.due.append((start + k * interval, frame))
            touched.add(c)
            k += 1
        for c in touched:
            c.send_due(now)
        behind_max = max(behind_max, sum(len(c.due) for c in conns))
        if k < total:
            # never less than 1 ms ahead: uvloop rounds a timer to whole milliseconds, and one
            # under 0.5 ms becomes call_soon, a busy loop taking a core from the brokers
            loop.call_later(max(0.001, start + k * interval - time.perf_counter()), tick)
        else:
            done.set_result(None)

    loop.call_at(loop.time() + max(0.0, start - time.perf_counter()), tick)
    await done
    cpu.stop(min(time.perf_counter(), stats.window_end))
    sampler.cancel()
    deadline = time.perf_counter() + args.drain_timeout
    while any(c.inflight or c.due for c in conns) and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    unanswered = sum(len(c.inflight) + len(c.due) for c in conns)
    if unanswered:
        stats.error(f"{unanswered} unanswered at the end")
    for c in conns:
        c.transport.close()
    for c in conns:
        await c.closed

    def pct(values: list[float], q: float) -> float | None:
        return kl.percentile_ms(sorted(values), q)
    result = {
        "mode": "paced-produce",
        "target_requests_per_s": args.rate,
        "records_per_s": round(stats.records / args.duration),
        "requests": stats.requests,
        "requests_per_s": round(stats.requests / args.duration),
        "requests_total": stats.requests_total,
        "errors": stats.errors,
        "p50_ms": pct(stats.latency, 0.50), "p99_ms": pct(stats.latency, 0.99),
        "max_ms": pct(stats.latency, 1.0),
        "send_p50_ms": pct(stats.service, 0.50), "send_p99_ms": pct(stats.service, 0.99),
        "send_max_ms": pct(stats.service, 1.0),
        "late_p50_ms": pct(stats.late, 0.50), "late_p99_ms": pct(stats.late, 0.99),
        "behind_max": behind_max,
        "connections": len(conns),
        "duration_s": args.duration,
        "warmup_s": args.warmup,
    }
    result.update(cpu.report(stats.records, stats.requests))
    if stats.error_codes:
        result["error_codes"] = dict(stats.error_codes)
    if args.slow_out:
        # (time.perf_counter is CLOCK_MONOTONIC here: the brokers' time.monotonic_ns, in seconds)
        with open(args.slow_out, "w") as f:
            json.dump({"window": [stats.window_start, stats.window_end], "slow": stats.slow}, f)
    return result


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--rate", type=float, required=True, help="Produce requests per second, all connections")
    p.add_argument("--connections", type=int, default=1, help="as kafka_load.py's (grouped by leader)")
    p.add_argument("--max-inflight", type=int, default=1000, help="per connection")
    p.add_argument("--record-size", type=int, default=100)
    p.add_argument("--key-size", type=int, default=0)
    p.add_argument("--batch-bytes", type=int, default=16384)
    p.add_argument("--records-per-batch", type=int, default=None)
    p.add_argument("--acks", type=int, choices=[1, -1], default=-1)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--slow-out", default=None, metavar="PATH",
                   help=f"write the requests slower than {SLOW_S * 1e3:g} ms (scheduled time, latency, late; "
                        "CLOCK_MONOTONIC s) as JSON")
    p.add_argument("--drain-timeout", type=float, default=30.0)
    p.add_argument("--timeout-ms", type=int, default=30000)
    p.add_argument("--server-pid", type=int, default=None)
    p.add_argument("--client-id", default="paced-load")
    p.add_argument("--uvloop", action="store_true")
    args = p.parse_args(argv)
    if args.rate <= 0 or args.partitions < 1 or args.connections < 1:
        p.error("--rate, --partitions and --connections must be positive")
    # what kafka_load.py's builders and control plane read
    args.mode, args.produce_version, args.bootstrap_only, args.replication = "produce", 3, False, 1
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.uvloop:
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    result = asyncio.run(run(args))
    print(json.dumps(result), flush=True)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
