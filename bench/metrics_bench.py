#!/usr/bin/env python3
"""What metrics cost: the same broker with metrics on (and served) against
metrics.enabled=false, same load, alternating per round (on/off, then off/on); then scrape
time and page size with 1,000 hosted partitions.

Produce load: shared/bench/kafka_load.py (100-byte records, ``--records-per-batch`` per
batch, acks=1, 4 partitions, 4 connections, depth 8) with ``--server-pid``, so the broker's
CPU µs per request is measured in the window. ``--scrape-interval N`` also scrapes the
metrics-on broker every N s during its load (its CPU then includes rendering the page).
Prints, per metric, each side's median and range over the rounds, the ratio of the medians
and the range of per-round ratios; never asserts.

First, the request path alone in this process (``--micro-rounds``): a KafkaConnection over a
mock transport answering 10 requests per read at once, with and without RequestMetrics,
alternating, timed in process CPU time (so other processes on a busy machine do not count) —
the socket layer's metrics cost per request without the noise of a whole broker.

``--instructions N``: the in-process Produce path's instructions per request, on and off, under
callgrind (bench/instructions.py): a count, the same on a busy machine; with ``--fetch``, a
consumer Fetch's too (10 batches of 10 records read from offset 0, answered at once).

    python bench/metrics_bench.py [--rounds 5] [--duration 5] [--records-per-batch 10] [--partitions 1000]
                                  [--instructions 3000]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import instructions as callgrind  # noqa: E402  (bench/instructions.py)
from transports import NullTransport  # noqa: E402  (bench/transports.py)
from controller.launcher import BrokerProcess, free_port  # noqa: E402

LOAD = REPO.parent / "shared" / "bench" / "kafka_load.py"


def produce(bootstrap: str, pid: int, args) -> dict:
    cmd = [sys.executable, str(LOAD), "--mode", "produce", "--bootstrap", bootstrap, "--topic", "bench",
           "--server-pid", str(pid), "--uvloop", "--partitions", "4", "--connections", "4", "--depth", "8",
           "--acks", "1", "--record-size", "100", "--records-per-batch", str(args.records_per_batch),
           "--duration", str(args.duration)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration * 6 + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"kafka_load.py failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read()


def run_broker(args, metrics: bool) -> dict:
    root = Path(tempfile.mkdtemp(prefix="kbroker-metrics-bench-"))
    mport = free_port()
    overrides = {"log.retention.check.interval.ms": 3600000}
    overrides.update({"metrics.listener": f"http://127.0.0.1:{mport}"} if metrics else {"metrics.enabled": "false"})
    broker = BrokerProcess(root / "data", port=free_port(), overrides=overrides)
    stop = threading.Event()
    scraper = None
    try:
        broker.start()
        if metrics and args.scrape_interval > 0:  # scraped during the load, as a Prometheus would
            def scrape() -> None:
                while not stop.wait(args.scrape_interval):
                    get(f"http://127.0.0.1:{mport}/metrics")
            scraper = threading.Thread(target=scrape, daemon=True)
            scraper.start()
        return produce(broker.bootstrap, broker.pid, args)
    finally:
        stop.set()
        if scraper is not None:
            scraper.join(5)
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def scrape_cost(args, per_partition: bool) -> dict:
    """A broker hosting ``args.partitions`` partitions (one record each): /metrics timed N times."""
    root = Path(tempfile.mkdtemp(prefix="kbroker-metrics-scrape-"))
    mport = free_port()
    broker = BrokerProcess(root / "data", port=free_port(), overrides={
        "metrics.listener": f"http://127.0.0.1:{mport}", "log.segment.bytes": 1 << 20,
        "metrics.partition.series.enabled": str(per_partition).lower(), "log.retention.check.interval.ms": 3600000})
    try:
        broker.start()
        subprocess.run([sys.executable, "-m", "cli", "topics", "create", "-b", broker.bootstrap, "-t", "many",
                        "--partitions", str(args.partitions)], check=True, capture_output=True, cwd=REPO)
        lines = "".join(f"{p}:x\n" for p in range(args.partitions))
        subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", "many", "-K", ":"], input=lines.encode(),
                       check=True, capture_output=True)
        url = f"http://127.0.0.1:{mport}/metrics"
        get(url)
        times, cpu, size = [], [], 0
        last = None
        for _ in range(args.scrapes + 1):
            t0 = time.perf_counter()
            page = get(url)
            times.append(time.perf_counter() - t0)
            size = len(page)
            # the broker's own account: CPU of its event loop thread spent on pages so far
            spent = float(re.search(rb"^kbroker_metrics_scrape_cpu_seconds_total (\S+)$", page, re.M).group(1))
            if last is not None:
                cpu.append(spent - last)
            last = spent
        times = times[1:]
        return {"median_ms": statistics.median(times) * 1000, "min_ms": min(times) * 1000, "max_ms": max(times) * 1000,
                "cpu_median_ms": statistics.median(cpu) * 1000, "cpu_min_ms": min(cpu) * 1000,
                "cpu_max_ms": max(cpu) * 1000, "bytes": size}
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def sides(round_index: int) -> tuple[str, str]:
    """The order of the two sides in a round: on/off, then off/on, alternating."""
    return ("on", "off") if round_index % 2 == 0 else ("off", "on")


def cpu_us_per_request(conn, data: bytes, n: int) -> float:
    """µs of process CPU per request: ``data`` (10 requests) fed to ``conn`` n / 10 times."""
    conn.connection_made(NullTransport())
    t0 = time.process_time()
    for _ in range(n // 10):
        conn.data_received(data)
    return (time.process_time() - t0) / n * 1e6


def micro(rounds: int, n: int = 20000) -> tuple[list[float], list[float]]:
    """µs of process CPU per request through KafkaConnection, metrics on and off, alternating."""
    import struct

    from broker.metrics import RequestMetrics
    from broker.network import KafkaConnection, SocketServer
    from protocol.client import SYSTEM_TIME
    from protocol.fast_codecs import encode_request_header

    class Answer:
        def handle(self, ctx) -> None:
            ctx.send_response(b"\x00\x00\x00\x04abcd")

    def frame(correlation_id: int) -> bytes:
        raw = encode_request_header(0, 9, correlation_id, "bench", True) + b"x" * 100
        return struct.pack(">i", len(raw)) + raw

    data = b"".join(frame(i) for i in range(10))

    def run(metrics_on: bool) -> float:
        metrics = RequestMetrics() if metrics_on else None
        server = SocketServer(Answer(), max_request_size=1 << 20, max_inflight=100, metrics=metrics,
                              now=SYSTEM_TIME.nanoseconds)
        return cpu_us_per_request(KafkaConnection(server, "PLAINTEXT"), data, n)

    on: list[float] = []
    off: list[float] = []
    for i in range(rounds):
        for side in sides(i):
            (on if side == "on" else off).append(run(side == "on"))
    return on, off


def micro_produce(rounds: int, n: int = 5000) -> tuple[list[float], list[float]]:
    """µs of process CPU per Produce (10 records, acks=1) through a whole broker in this
    process — KafkaConnection, KafkaApis, ReplicaManager, Partition, Log — metrics on and off
    (two combined nodes), alternating: the data path's metrics cost without the load generator,
    the kernel or other processes in the figure."""
    import asyncio

    from broker.config import KafkaConfig
    from broker.network import KafkaConnection
    from controller.kafka_raft_server import KafkaRaftServer
    from protocol.client import KafkaClient
    from protocol.fast_codecs import encode_produce_request
    from protocol.records import Record, build_batch

    batch = bytes(build_batch([Record(value=b"v" * 100, timestamp=1)] * 10))
    data = b"".join(b"".join(bytes(c) for c in encode_produce_request(7, i, "bench", 1, 30000, [("bench", [(0, batch)])]))
                    for i in range(10))

    async def main() -> tuple[list[float], list[float]]:
        root = Path(tempfile.mkdtemp(prefix="kbroker-metrics-micro-"))
        nodes = {}
        try:
            for side in ("on", "off"):
                # The timed rounds hold the loop: no session may expire meanwhile.
                node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(root / side),
                                                    "metrics.enabled": str(side == "on").lower(),
                                                    "broker.session.timeout.ms": 3_600_000}))
                await node.startup()
                nodes[side] = node
                async with KafkaClient(f"127.0.0.1:{node.bound_port()}") as client:
                    await client.create_topics([("bench", 1, 1, None)])

            def run(side: str) -> float:
                return cpu_us_per_request(KafkaConnection(nodes[side].broker.socket_server, "PLAINTEXT"), data, n)

            on: list[float] = []
            off: list[float] = []
            for i in range(rounds):
                for side in sides(i):
                    (on if side == "on" else off).append(run(side))
                    await asyncio.sleep(0.05)  # heartbeats and timers between rounds
            for side, node in nodes.items():
                log_ = node.broker.replica_manager.get_partition("bench", 0).log
                assert log_.log_end_offset >= rounds * n * 10 // 10, (side, log_.log_end_offset)  # every produce landed
            return on, off
        finally:
            for node in nodes.values():
                await node.shutdown()
            shutil.rmtree(root, ignore_errors=True)

    return asyncio.run(main())


def _fetch_requests() -> bytes:
    """10 consumer Fetch v11 requests (no session, no wait) of partition bench-0 from offset 0:
    each answered at once with the 10 batches _produce_child appended first (up to 1 MiB)."""
    from protocol.fast_codecs import FetchPartition, FetchRequest, encode_fetch_request

    request = FetchRequest(11, -1, 0, 1, 1 << 20, 0, 0, -1, [("bench", [FetchPartition(0, -1, 0, -1, 1 << 20)])], [],
                           "")
    return b"".join(bytes(encode_fetch_request(11, i, "bench", request)) for i in range(10))


def _produce_child(side: str, reads: int, api: str = "produce") -> None:
    """One side of micro_produce, ``reads`` reads of 10 Produce requests each, for callgrind; with
    ``api`` "fetch", one such read first, then ``reads`` reads of 10 consumer Fetch requests."""
    import asyncio

    from broker.config import KafkaConfig
    from broker.network import KafkaConnection
    from controller.kafka_raft_server import KafkaRaftServer
    from protocol.client import KafkaClient
    from protocol.fast_codecs import encode_produce_request
    from protocol.records import Record, build_batch

    batch = bytes(build_batch([Record(value=b"v" * 100, timestamp=1)] * 10))
    data = b"".join(b"".join(bytes(c) for c in encode_produce_request(7, i, "bench", 1, 30000, [("bench", [(0, batch)])]))
                    for i in range(10))
    fetches = _fetch_requests() if api == "fetch" else b""

    async def main() -> None:
        root = Path(tempfile.mkdtemp(prefix="kbroker-metrics-count-"))
        node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(root / side),
                                            "metrics.enabled": str(side == "on").lower(),
                                            "broker.session.timeout.ms": 3_600_000}))
        try:
            await node.startup()
            async with KafkaClient(f"127.0.0.1:{node.bound_port()}") as client:
                await client.create_topics([("bench", 1, 1, None)])
            conn = KafkaConnection(node.broker.socket_server, "PLAINTEXT")
            conn.connection_made(NullTransport())
            if fetches:
                conn.data_received(data)
                callgrind.measured(lambda: conn.data_received(fetches), reads)
                assert conn.requests == 10 + reads * 10 and not conn.inflight, conn.requests
                return
            callgrind.measured(lambda: conn.data_received(data), reads)
            assert node.broker.replica_manager.get_partition("bench", 0).log.log_end_offset == reads * 100
        finally:
            await node.shutdown()
            shutil.rmtree(root, ignore_errors=True)

    asyncio.run(main())


def count_instructions(n: int, api: str = "produce") -> None:
    """Instructions per Produce (or consumer Fetch) request through a whole broker in process
    (micro_produce's path), metrics on and off, counted by callgrind: immune to the machine's noise."""
    if not callgrind.available():
        print("valgrind is not installed; instruction counts skipped\n")
        return
    reads = max(1, n // 10)
    per = {side: callgrind.per_iteration([sys.executable, __file__, "--_child", side, api], reads, 20) / 10
           for side in ("on", "off")}
    what = ("Produce (10 records of 100 B, acks=1)" if api == "produce" else
            "consumer Fetch v11 (no session, no wait; answered with 10 batches of 10 records of 100 B)")
    print(f"{what} through a whole broker in process, instructions per request "
          f"under callgrind (the difference of runs of 200 and {200 + reads * 10} requests):")
    print(f"  metrics on  {per['on']:10,.0f}")
    print(f"  metrics off {per['off']:10,.0f}")
    print(f"  on minus off: {per['on'] - per['off']:+,.0f} instructions ({(per['on'] - per['off']) / per['off']:+.2%})\n",
          flush=True)


def spread(values: list[float]) -> str:
    return f"{min(values):.4g}..{max(values):.4g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--records-per-batch", type=int, default=10,
                        help="small batches weigh the per-request cost (default %(default)s)")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--no-scrape-cost", action="store_true")
    parser.add_argument("--micro-rounds", type=int, default=11, help="in-process request-path rounds (0: skip)")
    parser.add_argument("--scrape-interval", type=float, default=0.0,
                        help="scrape the metrics-on broker every N s during the load (0: never: the hot path alone)")
    parser.add_argument("--instructions", type=int, default=0, metavar="N",
                        help="also count instructions per Produce request, metrics on and off, under callgrind "
                             "over N requests (a count: immune to the machine's noise; takes minutes)")
    parser.add_argument("--fetch", action="store_true",
                        help="with --instructions: also count a consumer Fetch request, metrics on and off")
    parser.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        _produce_child(args._child[0], int(args._child[2]), args._child[1])
        return 0
    if args.instructions:
        count_instructions(args.instructions)
        if args.fetch:
            count_instructions(args.instructions, "fetch")

    if args.micro_rounds:
        report_micro("request path in process (KafkaConnection, mock transport, 10 requests per read)",
                     *micro(args.micro_rounds), args.micro_rounds)
        report_micro("Produce (10 records of 100 B, acks=1) through a whole broker in process (connection, KafkaApis, "
                     "ReplicaManager, Log)", *micro_produce(args.micro_rounds), args.micro_rounds, ratio=True)

    runs: dict[str, list[dict]] = {"on": [], "off": []}
    for i in range(args.rounds):
        for side in sides(i):
            runs[side].append(run_broker(args, side == "on"))
        on, off = runs["on"][-1], runs["off"][-1]
        print(f"round {i + 1}: on {on['records_per_s']:.0f} rec/s {on['server_cpu_us_per_request']:.1f} µs/req | "
              f"off {off['records_per_s']:.0f} rec/s {off['server_cpu_us_per_request']:.1f} µs/req", flush=True)
    if args.rounds:
        report(runs, args)
    if not args.no_scrape_cost:
        print(f"\nscrape of a broker hosting {args.partitions} partitions ({args.scrapes} scrapes; the CPU "
              "its event loop spent on each page (kbroker_metrics_scrape_cpu_seconds_total) and the client's wall time)")
        for per_partition in (True, False):
            r = scrape_cost(args, per_partition)
            print(f"  per-partition series {'on ' if per_partition else 'off'}: loop CPU per page median "
                  f"{r['cpu_median_ms']:.1f} ms (range {r['cpu_min_ms']:.1f}..{r['cpu_max_ms']:.1f}); wall median "
                  f"{r['median_ms']:.0f} ms (range {r['min_ms']:.0f}..{r['max_ms']:.0f}); page {r['bytes'] / 1024:.0f} KiB",
                  flush=True)
    return 0


def report_micro(what: str, on: list[float], off: list[float], rounds: int, ratio: bool = False) -> None:
    diffs = [a - b for a, b in zip(on, off)]
    print(f"{what}, process CPU µs per request, {rounds} alternating rounds:")
    print(f"  metrics on  median {statistics.median(on):.2f} (range {spread(on)})")
    print(f"  metrics off median {statistics.median(off):.2f} (range {spread(off)})")
    tail = f"; off/on {statistics.median(off) / statistics.median(on):.3f}" if ratio else ""
    print(f"  on minus off: median {statistics.median(diffs):+.2f} µs, per-round {spread(diffs)}{tail}\n", flush=True)


def report(runs: dict[str, list[dict]], args) -> None:
    print(f"\nproduce, {args.records_per_batch} records of 100 B per request, acks=1, {args.rounds} rounds of "
          f"{args.duration:g} s (metrics on: served, "
          + (f"scraped every {args.scrape_interval:g} s)" if args.scrape_interval else "not scraped during the load)"))
    print(f"{'metric':32} {'on median':>10} {'on range':>18} {'off median':>10} {'off range':>18} "
          f"{'on/off':>7} {'per-round on/off':>18}")
    for key in ("records_per_s", "server_cpu_us_per_request", "p50_ms", "p99_ms"):
        on = [r[key] for r in runs["on"]]
        off = [r[key] for r in runs["off"]]
        ratios = [a / b for a, b in zip(on, off) if b]
        print(f"{key:32} {statistics.median(on):10.4g} {spread(on):>18} {statistics.median(off):10.4g} "
              f"{spread(off):>18} {statistics.median(on) / statistics.median(off):7.3f} {spread(ratios):>18}")
    diffs = [a["server_cpu_us_per_request"] - b["server_cpu_us_per_request"] for a, b in zip(runs["on"], runs["off"])]
    print(f"CPU µs per request, on minus off: median {statistics.median(diffs):+.2f}, per-round {spread(diffs)}")

if __name__ == "__main__":
    sys.exit(main())
