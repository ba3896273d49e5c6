#!/usr/bin/env python3
"""Issue 12 §5: one broker hosting 10,000 partitions.

One broker process (``python -m broker serve``, under ``prlimit --nofile=SOFT:HARD`` when
``--nofile`` is given), 10 topics of 1,000 partitions ("wide") and one of 100 ("narrow").
Then, in each of ``--rounds`` rounds:

* the first pass right after the broker started (round 0: after the topics were created;
  later rounds: after the previous round's kill -9 and recovery): one request to each chunk
  of 100 partitions, every partition once: records/s (the cost of touching each log first);
* a 3 s warm-up over all partitions (every round alike), then produce throughput (acks=1,
  one connection, 4 requests in flight, each request one batch of 10 x 100-byte records to
  each of 100 partitions) over the 100 narrow partitions and over all 10,000 (request after
  request, round-robin), interleaved in 2 s slices (narrow, wide, narrow, ...) for
  ``--seconds`` each, so that whatever else the machine does falls on both alike; the ratio
  wide/narrow of records/s, and the broker's CPU per request for both;
* RSS and descriptors of the broker after producing (every partition holds data), and the
  RSS's file-backed part (mapped pages of segment files and write windows: page cache the
  kernel may reclaim, not the broker's own memory);
* clean start: SIGTERM, wait for the exit, start again: seconds from launch to live (its
  Metadata lists it) and to every partition served (a Fetch answers without error);
* kill -9 recovery: one more produce round over all partitions (unflushed), SIGKILL, start:
  the same two times (every log is recovered from its recovery point).

Prints each round, then the median and spread (min-max) over the rounds; never pass/fail.
Usage: python bench/partitions_bench.py [--rounds 3] [--seconds 10] [--nofile 1024:1024]
                                        [--topics 10] [--per-topic 1000] [--override KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.robustness.partitions_support import PartitionsClient, produce_for  # noqa: E402
from tests.robustness.resources_support import create_topics, fd_count, rss_bytes  # noqa: E402
from tests.support import BrokerProcess  # noqa: E402

PER_REQUEST = 100
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def chunks_of(topics: list[str], per_topic: int) -> list[tuple[str, list[int]]]:
    out = []
    for start in range(0, per_topic, PER_REQUEST):
        for topic in topics:  # round-robin over topics too: consecutive requests touch different logs
            out.append((topic, list(range(start, min(start + PER_REQUEST, per_topic)))))
    return out


SLICE_S = 2.0  # interleaved narrow/wide slices
WARMUP_S = 3.0


def interleaved(broker: BrokerProcess, runs: dict[str, list], seconds: float) -> dict[str, tuple[float, float]]:
    """Each of ``runs`` (name -> chunks) for ``seconds`` in all, in SLICE_S slices taken in
    turn: name -> (records/s, broker CPU µs per request)."""
    totals = {name: [0, 0, 0.0, 0.0] for name in runs}  # records, requests, seconds, CPU seconds
    for _ in range(max(1, round(seconds / SLICE_S))):
        for name, chunks in runs.items():
            cpu0 = cpu_seconds(broker.pid)
            records, requests, elapsed = produce_for(broker.port, chunks, min(SLICE_S, seconds))
            t = totals[name]
            t[0] += records
            t[1] += requests
            t[2] += elapsed
            t[3] += cpu_seconds(broker.pid) - cpu0
    return {name: (t[0] / t[2], t[3] * 1e6 / max(1, t[1])) for name, t in totals.items()}


def first_pass(broker: BrokerProcess, chunks) -> float:
    """records/s of one request to each chunk (every partition once), e.g. right after a start."""
    records, _requests, elapsed = produce_for(broker.port, chunks, 600.0, max_requests=len(chunks))
    return records / elapsed


def all_served(broker: BrokerProcess, topics: dict[str, int]) -> bool:
    for topic, n in topics.items():
        with PartitionsClient(broker.port, topic, n, per_request=500) as client:
            if client.not_served():
                return False
    return True


def timed_start(broker: BrokerProcess, topics: dict[str, int], timeout_s: float) -> tuple[float, float]:
    """(seconds to live, seconds to every partition served), from launch."""
    t0 = time.monotonic()
    broker.launch()
    broker.wait_ready(timeout_s)
    live = time.monotonic() - t0
    while not all_served(broker, topics):
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError("partitions not served")
        time.sleep(0.1)
    return live, time.monotonic() - t0


def summary(name: str, values: list[float], unit: str, fmt: str = ".1f") -> str:
    med = statistics.median(values)
    return f"{name:34s} median {med:{fmt}} {unit} (min {min(values):{fmt}} - max {max(values):{fmt}}, n={len(values)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--per-topic", type=int, default=1000)
    ap.add_argument("--nofile", help="SOFT:HARD for prlimit (default: this shell's limits)")
    ap.add_argument("--start-timeout", type=float, default=600.0)
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config override (repeatable), e.g. log.open.files.max=20000")
    args = ap.parse_args()
    wide = [f"wide{i}" for i in range(args.topics)]
    topics = {**{t: args.per_topic for t in wide}, "narrow": PER_REQUEST}
    total = args.topics * args.per_topic
    prefix = ["prlimit", f"--nofile={args.nofile}", "--"] if args.nofile else []
    results: dict[str, list[float]] = {}

    def note(key: str, value: float) -> None:
        results.setdefault(key, []).append(value)

    with tempfile.TemporaryDirectory(prefix="kbroker-partitions-") as tmp:
        overrides = dict(kv.split("=", 1) for kv in args.override)
        broker = BrokerProcess(Path(tmp) / "data", prefix=prefix, overrides=overrides)
        try:
            broker.start(args.start_timeout)
            t0 = time.monotonic()
            for topic, n in topics.items():
                create_topics(broker.bootstrap, [(topic, n)])
            while not all_served(broker, topics):
                time.sleep(0.2)
            print(f"created {total} + {PER_REQUEST} partitions in {time.monotonic() - t0:.1f} s; "
                  f"limits: {open(f'/proc/{broker.pid}/limits').read().split('Max open files')[1].split()[:2]}",
                  flush=True)
            narrow = chunks_of(["narrow"], PER_REQUEST)
            spread = chunks_of(wide, args.per_topic)
            for r in range(args.rounds):
                note("first pass after start records/s", first_pass(broker, spread))
                produce_for(broker.port, spread, WARMUP_S)
                rates = interleaved(broker, {"narrow": narrow, "wide": spread}, args.seconds)
                (narrow_rate, narrow_cpu), (wide_rate, wide_cpu) = rates["narrow"], rates["wide"]
                note("narrow records/s", narrow_rate)
                note("wide records/s", wide_rate)
                note("wide/narrow throughput", wide_rate / narrow_rate)
                note("narrow CPU us/request", narrow_cpu)
                note("wide CPU us/request", wide_cpu)
                rss, fds = rss_bytes(broker.pid) / 2**20, fd_count(broker.pid)
                note("RSS MiB (after producing)", rss)
                note("RSS file-backed MiB (after producing)", rss_bytes(broker.pid, "RssFile") / 2**20)
                note("descriptors (after producing)", fds)
                assert broker.stop(args.start_timeout) == 0
                live, served = timed_start(broker, topics, args.start_timeout)
                note("clean start: live s", live)
                note("clean start: all served s", served)
                note("RSS MiB (after clean start)", rss_bytes(broker.pid) / 2**20)
                note("descriptors (after clean start)", fd_count(broker.pid))
                for topic in wide:  # unflushed data in every partition, then SIGKILL
                    with PartitionsClient(broker.port, topic, args.per_topic) as client:
                        client.produce_round(1000 + r)
                broker.kill()
                live, served = timed_start(broker, topics, args.start_timeout)
                note("kill -9 recovery: live s", live)
                note("kill -9 recovery: all served s", served)
                print(f"round {r}: first pass {results['first pass after start records/s'][-1]:,.0f} rec/s; "
                      f"narrow {narrow_rate:,.0f} rec/s ({narrow_cpu:.0f} us/req), wide {wide_rate:,.0f} "
                      f"rec/s ({wide_cpu:.0f} us/req), ratio {wide_rate / narrow_rate:.2f}; RSS {rss:.0f} MiB, "
                      f"{fds} fds; clean start {results['clean start: live s'][-1]:.1f} s live / "
                      f"{results['clean start: all served s'][-1]:.1f} s served; kill -9 {live:.1f} s live / "
                      f"{served:.1f} s served", flush=True)
            print(f"\nload average at the end: {os.getloadavg()}; {total} partitions; "
                  f"{args.seconds:.0f} s each of narrow and wide per round, in 2 s slices")
            for key, values in results.items():
                fmt = ".2f" if "/" in key and "s" not in key.split()[-1] else ".1f"
                print(summary(key, values, "", ".2f" if key == "wide/narrow throughput" else fmt))
        finally:
            broker.kill()


if __name__ == "__main__":
    main()
