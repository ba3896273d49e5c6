"""Issue 12 §4: produce latency with Fetch long-polls parked (DelayedFetch).

One broker process (``python -m broker serve``), one partition produced to with acks=1 over
a raw connection, one request at a time; latency is request sent -> response read. Three
cases in the same run, repeated in rounds that alternate:

* none:  no fetch parked;
* same:  N fetches parked on the produced partition (min_bytes 2^30, max_wait 120 s), so each
         produce checks every one of them and completes none;
* other: N fetches parked on another partition.

Prints p50/p99 per case and round, the medians over rounds, and the ratios against "none".
Numbers, never pass/fail.
Usage: python bench/robustness_bench.py [--parked 1000] [--produces 2000] [--rounds 3] [--before ../main]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.robustness.resources_support import create_topics, fetch_frame, produce  # noqa: E402
from controller.launcher import REPO  # noqa: E402
from tests.support import BrokerProcess  # noqa: E402


def produce_latencies(port: int, topic: str, n: int) -> list[float]:
    s = socket.create_connection(("127.0.0.1", port))
    out = []
    value = b"x" * 100
    for i in range(n):
        t0 = time.perf_counter()
        assert produce(s, topic, 0, value, correlation_id=i) == 0
        out.append((time.perf_counter() - t0) * 1000)
    s.close()
    return out


def park(port: int, topic: str, n: int) -> list[socket.socket]:
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        # At the log end (a large offset is out of range; ask for the current end via a huge wait).
        s.sendall(fetch_frame(topic, 0, 0, max_wait_ms=120_000, min_bytes=1 << 30, correlation_id=i))
        socks.append(s)
    return socks


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_cases(broker: BrokerProcess, args, label: str, results: dict, r: int) -> None:
    for case in ("none", "same", "other"):
        socks = [] if case == "none" else park(broker.port, "hot" if case == "same" else "cold", args.parked)
        time.sleep(0.5)  # let the broker park them all before measuring (bench only)
        lat = produce_latencies(broker.port, "hot", args.produces)
        for s in socks:
            s.close()
        p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
        results.setdefault((label, case), []).append((p50, p99))
        print(f"round {r} {label:6s} {case:5s}: p50 {p50:.3f} ms  p99 {p99:.3f} ms", flush=True)
        time.sleep(0.5)  # the closed connections go away


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parked", type=int, default=1000)
    ap.add_argument("--produces", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", type=Path, help="another checkout (e.g. main before this change) measured alongside")
    args = ap.parse_args()
    trees = [("this", REPO)] + ([("before", args.before.resolve())] if args.before else [])
    with tempfile.TemporaryDirectory() as tmp:
        brokers = []
        try:
            for label, repo in trees:
                broker = BrokerProcess(Path(tmp) / label / "data", repo=repo).start()
                brokers.append((label, broker))
                create_topics(broker.bootstrap, [("hot", 1), ("cold", 1)])
                produce_latencies(broker.port, "hot", 500)  # warm-up
            results: dict = {}
            for r in range(args.rounds):
                for label, broker in brokers:
                    run_cases(broker, args, label, results, r)
            print(f"\nload average at the end: {os.getloadavg()}")
            for label, _ in brokers:
                med = {}
                for case in ("none", "same", "other"):
                    v = results[(label, case)]
                    med[case] = statistics.median(x[0] for x in v)
                    p99 = statistics.median(x[1] for x in v)
                    spread = [x[0] for x in v]
                    print(f"{label:6s} {case:5s}: median p50 {med[case]:.3f} ms (rounds {min(spread):.3f}-"
                          f"{max(spread):.3f}), median p99 {p99:.3f} ms")
                base = med["none"]
                print(f"{label:6s}: {args.parked} parked on the produced partition add {med['same'] - base:+.3f} ms "
                      f"to the p50 ({med['same'] / base:.2f}x); on another partition {med['other'] - base:+.3f} ms "
                      f"({med['other'] / base:.2f}x)")
        finally:
            for _, broker in brokers:
                broker.kill()


if __name__ == "__main__":
    main()
