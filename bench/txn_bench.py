#!/usr/bin/env python3
"""Transactions on a 3-broker kbroker cluster (a controller and three broker processes), with
confluent-kafka (librdkafka) as the client, the issue's Performance section:

1. produce: transactional (a commit every 100 ms) vs idempotent non-transactional, both acks=all,
   16 KiB batches (batch.size 16384, linger.ms 5), 100-byte records, to a fresh 3-partition
   RF-3 topic each run; records/s, rounds alternating which mode goes first; the goal is a
   transactional / idempotent ratio ≥ 0.85.
2. consume (transactions of 1,000 records): the same committed data read from the beginning to its end with
   isolation.level=read_committed vs read_uncommitted (goal ≥ 0.9), and a topic where 10 % of
   the transactions were aborted (goal ≥ 0.8); rate = offsets of the log passed per second
   (read_committed delivers 10 % fewer records from the same log).
3. commit latency at half load: a transactional producer at half the rate phase 1 measured,
   committing every 100 ms; per commit the client's commit_transaction() time after a flush
   (EndTxn until PrepareCommit is acknowledged), and the coordinators' own EndTxn → every marker
   acknowledged (kafka_server_transaction_end_txn_to_markers_seconds, the difference of two
   scrapes around this phase, so only its commits count; quantiles as bucket upper bounds).
   The goal is p99 ≤ 20 ms for EndTxn → markers acknowledged.

Prints medians and ranges over the rounds, per-round ratios, and the load average (the
machine may be shared: the numbers are noisy). Never pass/fail.

    python bench/txn_bench.py [--rounds 3] [--duration 5] [--records 100000]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer  # noqa: E402
from confluent_kafka import TopicPartition as TP  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from controller.launcher import LocalCluster  # noqa: E402

PARTITIONS = 3
VALUE = b"x" * 100
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 16384, "queue.buffering.max.messages": 200000}


def create(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, PARTITIONS, 3)], operation_timeout=30).values():
        f.result(30)


def produce(bootstrap: str, topic: str, transactional: bool, duration: float, *, rate: float | None = None,
            abort_every: int = 0, max_records: int | None = None, per_txn: int | None = None,
            commit_times: list[float] | None = None) -> int:
    """Records/s acknowledged in ``duration`` s (or, with ``max_records``, the records
    acknowledged), a commit every 100 ms when transactional, or every ``per_txn`` records (every
    ``abort_every``-th transaction aborted); ``rate``: records/s at most. ``commit_times`` gets
    each commit_transaction() duration in ms."""
    conf = {"bootstrap.servers": bootstrap, **PRODUCER}
    if transactional:
        conf["transactional.id"] = f"bench-{topic}"
    else:
        conf["enable.idempotence"] = True
    p = Producer(conf)
    acked = [0]

    def on_delivery(err, _msg) -> None:
        if err is None:
            acked[0] += 1

    if transactional:
        p.init_transactions(30)
    start = time.monotonic()
    deadline = start + duration
    sent = txn = 0
    while time.monotonic() < deadline and (max_records is None or sent < max_records):
        if transactional:
            p.begin_transaction()
        txn_end = time.monotonic() + 0.1
        txn_first = sent
        while (time.monotonic() < txn_end if per_txn is None else sent - txn_first < per_txn) \
                and (max_records is None or sent < max_records):
            if rate is not None and sent > rate * (time.monotonic() - start):
                time.sleep(0.001)
                p.poll(0)
                continue
            try:
                p.produce(topic, value=VALUE, partition=sent % PARTITIONS, on_delivery=on_delivery)
                sent += 1
            except BufferError:
                p.poll(0.005)
            if sent % 1000 == 0:
                p.poll(0)
        txn += 1
        if transactional:
            if abort_every and txn % abort_every == 0:
                p.flush(30)
                p.abort_transaction(30)
            else:
                if commit_times is not None:
                    # the records first, so commit_transaction() is EndTxn's round trip alone
                    # (it would flush them otherwise)
                    p.flush(30)
                t0 = time.perf_counter()
                p.commit_transaction(30)
                if commit_times is not None:
                    commit_times.append((time.perf_counter() - t0) * 1000)
    p.flush(60)
    elapsed = time.monotonic() - start
    return acked[0] if max_records is not None else int(acked[0] / elapsed)


def consume_rate(bootstrap: str, topic: str, isolation: str) -> tuple[float, int]:
    """(offsets of the log passed per second, records delivered) reading every partition from
    the beginning to its end (the LSO for read_committed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
                  "fetch.max.bytes": 52428800})
    ends = {p: c.get_watermark_offsets(TP(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
    c.assign([TP(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    at_end: set[int] = set()
    delivered = 0
    start = time.perf_counter()
    while len(at_end) < PARTITIONS:
        for m in c.consume(1000, 1.0):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                continue
            delivered += 1
    elapsed = time.perf_counter() - start
    c.close()
    return sum(ends.values()) / elapsed, delivered


def marker_p99(cluster: LocalCluster) -> float:
    """The largest, over the brokers, coordinator p99 of Prepare* → markers acknowledged (ms)."""
    worst = 0.0
    for b in cluster.brokers.values():
        if b.metrics_port is None:
            continue
        text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
        m = re.search(r"^kafka_server_transaction_marker_latency_p99_seconds(?:\{[^}]*\})? ([0-9.e+-]+)$", text, re.M)
        if m:
            worst = max(worst, float(m.group(1)) * 1000)
    return worst


def end_txn_buckets(cluster: LocalCluster) -> dict[float, float]:
    """The coordinators' EndTxn -> every marker acknowledged histogram, summed over the brokers:
    {upper bound in ms: cumulative count}."""
    total: dict[float, float] = {}
    for b in cluster.brokers.values():
        if b.metrics_port is None:
            continue
        text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
        for le, n in re.findall(r'^kafka_server_transaction_end_txn_to_markers_seconds_bucket\{le="([^"]+)"\} '
                                r'([0-9.e+]+)$', text, re.M):
            bound = float("inf") if le == "+Inf" else float(le) * 1000
            total[bound] = total.get(bound, 0.0) + float(n)
    return total


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> tuple[float, int]:
    """(the upper bound, ms, of the bucket holding the ``q`` quantile of what was observed
    between the two scrapes, the number observed)."""
    bounds = sorted(after)
    window = [after[b] - before.get(b, 0.0) for b in bounds]
    n = int(window[-1]) if window else 0
    for bound, cumulative in zip(bounds, window):
        if n and cumulative >= q * n:
            return bound, n
    return float("nan"), n


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    return f"median {fmt.format(statistics.median(values))} (range {fmt.format(min(values))} – {fmt.format(max(values))})"


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * 0.99))] if s else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per produce run")
    ap.add_argument("--records", type=int, default=100000, help="records of each consume topic")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kbroker-txnbench-"))
    cluster = LocalCluster(root, 3, metrics=True,
                           broker_props={"log.retention.check.interval.ms": 3600000},
                           controller_props={"default.replication.factor": 3})
    print(f"load average at start: {os.getloadavg()}", flush=True)
    try:
        cluster.start()
        b = cluster.bootstrap
        produced: dict[str, list[float]] = {"txn": [], "idem": []}
        ratios = []
        for r in range(args.rounds):
            order = ("idem", "txn") if r % 2 == 0 else ("txn", "idem")
            got = {}
            for mode in order:
                topic = f"p-{mode}-{r}"
                create(b, topic)
                got[mode] = produce(b, topic, mode == "txn", args.duration)
                produced[mode].append(got[mode])
                print(f"round {r + 1} produce {mode:4s}: {got[mode]:>9,} records/s", flush=True)
            ratios.append(got["txn"] / got["idem"])
        print(f"  load average: {os.getloadavg()}", flush=True)

        # consume: committed data, and data with every 10th transaction aborted
        create(b, "c-committed")
        create(b, "c-aborted")
        produce(b, "c-committed", True, 600, max_records=args.records, per_txn=1000)
        produce(b, "c-aborted", True, 600, max_records=args.records, per_txn=1000, abort_every=10)
        consumed: dict[tuple[str, str], list[float]] = {}
        delivered: dict[tuple[str, str], int] = {}
        for r in range(args.rounds):
            for topic in ("c-committed", "c-aborted"):
                modes = ("read_uncommitted", "read_committed") if r % 2 == 0 else ("read_committed", "read_uncommitted")
                for iso in modes:
                    rate, n = consume_rate(b, topic, iso)
                    consumed.setdefault((topic, iso), []).append(rate)
                    delivered[(topic, iso)] = n
                    print(f"round {r + 1} consume {topic:11s} {iso:16s}: {rate:>9,.0f} offsets/s ({n:,} records)",
                          flush=True)
        print(f"  load average: {os.getloadavg()}", flush=True)

        # commit latency at half the transactional rate
        half = statistics.median(produced["txn"]) / 2
        create(b, "lat")
        commits: list[float] = []
        buckets_before = end_txn_buckets(cluster)
        produce(b, "lat", True, max(10.0, args.duration * 2), rate=half, commit_times=commits)
        buckets_after = end_txn_buckets(cluster)
        markers = marker_p99(cluster)
        e2e_median, e2e_n = bucket_quantile(buckets_before, buckets_after, 0.5)
        e2e_p99, _n = bucket_quantile(buckets_before, buckets_after, 0.99)

        print()
        print("=== results (3 brokers, RF 3, acks=all, 100-byte records, confluent-kafka "
              f"{__import__('confluent_kafka').libversion()[0]}) ===")
        print(f"load average at end: {os.getloadavg()}")
        print(f"produce idempotent     : {spread(produced['idem'])} records/s")
        print(f"produce transactional  : {spread(produced['txn'])} records/s (a commit every 100 ms)")
        print(f"  txn / idempotent     : {spread(ratios, '{:.3f}')} per round  (goal ≥ 0.85)")
        for topic, goal in (("c-committed", "0.9"), ("c-aborted", "0.8")):
            rc, ru = consumed[(topic, "read_committed")], consumed[(topic, "read_uncommitted")]
            per_round = [a / b_ for a, b_ in zip(rc, ru)]
            print(f"consume {topic:11s} read_uncommitted: {spread(ru)} offsets/s "
                  f"({delivered[(topic, 'read_uncommitted')]:,} records)")
            print(f"consume {topic:11s} read_committed  : {spread(rc)} offsets/s "
                  f"({delivered[(topic, 'read_committed')]:,} records)")
            print(f"  committed / uncommitted: {spread(per_round, '{:.3f}')} per round  (goal ≥ {goal})")
        print(f"commit at half load ({half:,.0f} records/s, {len(commits)} commits): commit_transaction() after a "
              f"flush (EndTxn's round trip) median {statistics.median(commits):.1f} ms, p99 {p99(commits):.1f} ms, "
              f"max {max(commits):.1f} ms")
        print(f"  coordinators' EndTxn → every marker acknowledged, these {e2e_n} commits only: median ≤ "
              f"{e2e_median:g} ms, p99 ≤ {e2e_p99:g} ms (histogram bucket bounds; goal p99 ≤ 20)")
        print(f"  (Prepare* written → markers acknowledged p99, worst broker, last 1,000 transactions of the whole "
              f"run, full-load phases included: {markers:.1f} ms)")
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
