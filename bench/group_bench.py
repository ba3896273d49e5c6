#!/usr/bin/env python3
"""Consumer-group figures of kbroker, each next to a peer measured in the same run:

* OffsetCommit: commits/s of one group committing 100 partitions per request, one request at a
  time, and the p99 latency — next to Produce (acks=all, one 100-record batch per request,
  records of the same size) on the same broker: the group write path against the data path.
* Rebalance 3 → 2: three GroupConsumers (the client package) share a 6-partition topic; one
  closes (LeaveGroup); the time until the other two are in the new generation with all 6
  partitions — next to the first join of 3 members (an empty group becoming stable).
* Coordinator load: a __consumer_offsets partition holding 100,000 offset commit records
  (one group, 1,000 commits of 100 partitions), loaded as a new leader does (read the log,
  replay the records) — next to reading the same log alone.
* Group consume vs assign consume: all records of a 6-partition topic read by a GroupConsumer
  and by a plain Consumer with the partitions assigned, alternating, same data (goal ≥ 0.9×).

Medians and ranges over ``--rounds``; never asserts. The broker is a real process
(``python -m broker serve``, combined node, group.initial.rebalance.delay.ms=0).

    python bench/group_bench.py [--rounds 3] [--records 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.launcher import BrokerProcess  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.client import Consumer, GroupConsumer, KafkaClient, Producer, TopicPartition  # noqa: E402


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):,.1f} (range {min(values):,.1f}–{max(values):,.1f}, n={len(values)})"


def p99(samples: list[float]) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * 0.99))]


async def offset_commit_round(bootstrap: str, seconds: float) -> tuple[float, float, float, float]:
    """(commits/s, p99 ms, produce requests/s, produce p99 ms)."""
    async with KafkaClient(bootstrap, client_id="bench") as client:
        conn = await client.any_connection()
        while (await conn.request(ApiKey.FIND_COORDINATOR, {"key": "bench-commit", "key_type": 0}, 2)).error_code:
            await asyncio.sleep(0.05)
        lat: list[float] = []
        i = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            body = {"group_id": "bench-commit", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
                {"name": "bench-commits", "partitions": [{"partition_index": p, "committed_offset": i, "committed_metadata": ""}
                                                         for p in range(100)]}]}
            t0 = time.perf_counter()
            r = await conn.request(ApiKey.OFFSET_COMMIT, body, 7)
            lat.append((time.perf_counter() - t0) * 1000)
            assert all(p.error_code == 0 for t in r.topics for p in t.partitions)
            i += 1
        commits = len(lat) / seconds
        # the peer: acks=all produce of 100 records of about an offset record's size, one request at a time
        from protocol.records import Record, build_batch
        plat: list[float] = []
        end = time.perf_counter() + seconds
        leader = await client.leader_connection("bench-commits", 0)
        while time.perf_counter() < end:
            batch = build_batch([Record(key=b"k" * 40, value=b"v" * 40) for _ in range(100)],
                                now_ms=int(time.time() * 1000))
            t0 = time.perf_counter()
            await leader.produce(-1, 30000, [("bench-commits", [(0, batch)])])
            plat.append((time.perf_counter() - t0) * 1000)
        return commits, p99(lat), len(plat) / seconds, p99(plat)


async def rebalance_round(bootstrap: str, topic: str, group: str) -> tuple[float, float]:
    """(ms for 3 members to become stable from empty, ms for 3 → 2 after one closes)."""
    async with KafkaClient(bootstrap, client_id="bench-a") as ca, KafkaClient(bootstrap, client_id="bench-b") as cb, \
            KafkaClient(bootstrap, client_id="bench-c") as cc:
        members = [GroupConsumer(c, group, [topic], session_timeout_ms=10000, heartbeat_interval_ms=100)
                   for c in (ca, cb, cc)]
        stop = asyncio.Event()

        async def poll(m: GroupConsumer) -> None:
            while not stop.is_set():
                await m.getmany(50)

        t0 = time.perf_counter()
        tasks = [asyncio.ensure_future(poll(m)) for m in members]

        def stable(ms: list[GroupConsumer]) -> bool:
            gens = {m.generation_id for m in ms}
            return len(gens) == 1 and not any(m._rejoin for m in ms) and \
                sorted(tp for m in ms for tp in m.assignment) == [TopicPartition(topic, p) for p in range(6)]

        while not stable(members):
            await asyncio.sleep(0.005)
        join_ms = (time.perf_counter() - t0) * 1000
        stop_one = members[2]
        tasks[2].cancel()
        t0 = time.perf_counter()
        await stop_one.close()
        while not stable(members[:2]):
            await asyncio.sleep(0.005)
        leave_ms = (time.perf_counter() - t0) * 1000
        stop.set()
        for t in tasks[:2]:
            await t
        for m in members[:2]:
            await m.close()
        return join_ms, leave_ms


def load_round(tmp: Path) -> tuple[float, float, float]:
    """(ms to load 100,000 offset records as a new coordinator, ms to only read them, the longest
    slice in ms: the longest the event loop is held by the load at a time)."""
    from broker.coordinator import GROUP_METADATA_TOPIC_NAME, GroupCoordinatorAdapter, GroupCoordinatorConfig
    from broker.coordinator.offsets_topic import OffsetsTopic
    from broker.metadata_cache import MetadataCache, PartitionInfo
    from broker.partition import LeaderAndIsrState
    from broker.replica_manager import ReplicaManager
    from protocol.clock import MockTime
    from protocol.messages import APIS
    from storage import LogConfig, LogManager

    time_ = MockTime()
    config = LogConfig()
    logs = LogManager([tmp], config, time=time_)
    logs.startup()
    cache = MetadataCache(1)
    for p in range(100):
        cache.update_partition("t", None, PartitionInfo(p, 1, 0, [1], [1]))
    rm = ReplicaManager(broker_id=1, time=time_, log_manager=logs, metadata_cache=cache, log_config_for=lambda t: config)
    gc_config = GroupCoordinatorConfig(offsets_topic_num_partitions=1)

    def build() -> tuple[GroupCoordinatorAdapter, OffsetsTopic]:
        ot = OffsetsTopic(time=time_, replica_manager=rm, metadata_cache=cache, topic_admin=None,  # type: ignore[arg-type]
                          num_partitions=1, replication_factor=1, commit_timeout_ms=5000, topic_configs=dict)
        gc = GroupCoordinatorAdapter(gc_config, time_, ot.append, ot.read_partition, ot.partition_exists)
        gc.startup(enable_metadata_expiration=False)
        return gc, ot

    gc, ot = build()
    ot.attach(gc)
    rm.become_leader_or_follower(0, 1, [LeaderAndIsrState(GROUP_METADATA_TOPIC_NAME, 0, 1, 1, 0, [1], 0, [1])])
    api = APIS[ApiKey.OFFSET_COMMIT]
    errors: set[int] = set()
    for i in range(1000):
        body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
            {"name": "t", "partitions": [{"partition_index": p, "committed_offset": i, "committed_metadata": ""}
                                         for p in range(100)]}]}
        req = api.request.parse(7, api.request.build(7, body))
        gc.offset_commit(req, 7, lambda b: errors.update(p["error_code"] for t in b["topics"] for p in t["partitions"]))
    assert errors == {0}, errors
    # a new coordinator (another broker's view of the same log): time its load
    _, ot2 = build()
    t0 = time.perf_counter()
    got: list = []
    ot2.read_partition(0, got.append)
    n = sum(1 for _ in got[0])
    read_ms = (time.perf_counter() - t0) * 1000
    assert n == 100_000, n
    # the load runs in slices on the event loop: a ticker measures the longest the loop is held
    async def load_on_loop() -> tuple[float, float]:
        from protocol.client.clock import SYSTEM_TIME
        gc2 = GroupCoordinatorAdapter(gc_config, SYSTEM_TIME, ot2.append, ot2.read_partition, ot2.partition_exists)
        gc2.startup(enable_metadata_expiration=False)
        manager = gc2.coordinator.group_manager
        longest = 0.0
        done = False

        async def ticker() -> None:
            nonlocal longest
            last = time.perf_counter()
            while not done:
                await asyncio.sleep(0)
                now = time.perf_counter()
                longest, last = max(longest, (now - last) * 1000), now

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        gc2.on_elected(0, 1)
        while manager.is_partition_loading(0):
            await asyncio.sleep(0)
        load_ms = (time.perf_counter() - t0) * 1000
        done = True
        await task
        assert manager.get_group("g").num_offsets == 100
        gc2.shutdown()
        return load_ms, longest

    load_ms, longest = asyncio.run(load_on_loop())
    logs.shutdown()
    return load_ms, read_ms, longest


async def consume_round(bootstrap: str, topic: str, total: int, group: str, mode: str) -> tuple[float, float, float]:
    """Reading the whole topic, as a group member or with the partitions assigned: (records/s,
    ms until the first records — for a member, the join, SyncGroup and OffsetFetch are in there —,
    records per CPU second of this client process)."""
    async with KafkaClient(bootstrap, client_id=f"bench-{mode}") as client:
        n = 0
        first = 0.0
        t0, cpu0 = time.perf_counter(), time.process_time()
        source: GroupConsumer | Consumer
        if mode == "group":
            source = GroupConsumer(client, group, [topic], auto_offset_reset="earliest")
        else:
            source = Consumer(client, auto_offset_reset="earliest")
            source.assign([TopicPartition(topic, p) for p in range(6)])
            source.seek_to_beginning()
        while n < total:
            batch = await source.getmany(1000)
            n += sum(len(v) for v in batch.values())
            if n and not first:
                first = time.perf_counter() - t0
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        if isinstance(source, GroupConsumer):
            await source.close(commit=False)
        return n / elapsed, first * 1000, n / cpu


async def setup(bootstrap: str, records: int) -> None:
    async with KafkaClient(bootstrap, client_id="bench-setup") as client:
        await client.create_topics([("bench-commits", 100, 1, None), ("bench-rebalance", 6, 1, None),
                                    ("bench-consume", 6, 1, None)])
        producer = Producer(client, acks=1, linger_ms=5)
        for i in range(records):
            await producer.send("bench-consume", value=b"x" * 100, partition=i % 6)
        await producer.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--seconds", type=float, default=3.0, help="per OffsetCommit / Produce measurement")
    ap.add_argument("--load-only", action="store_true", help="only the coordinator load rounds (no broker)")
    ap.add_argument("--consume-only", action="store_true", help="only the group vs assign consume rounds")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores)")
    if args.load_only:
        rounds = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="group-load-") as t:
                rounds.append(load_round(Path(t)))
            print(f"load {rounds[-1][0]:.0f} ms (read {rounds[-1][1]:.0f} ms, longest slice {rounds[-1][2]:.1f} ms)",
                  flush=True)
        loads, reads, slices = (list(x) for x in zip(*rounds))
        print(f"Coordinator load of 100,000 offset records ms: {spread(loads)}; peer: reading the log alone ms: "
              f"{spread(reads)}; ratio {statistics.median(loads) / statistics.median(reads):.2f}")
        print(f"  longest slice of the load (the event loop held at a time) ms: {spread(slices)}")
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        return
    with tempfile.TemporaryDirectory(prefix="group-bench-") as d:
        broker = BrokerProcess(Path(d) / "data", overrides={"group.initial.rebalance.delay.ms": 0}).start()
        try:
            asyncio.run(setup(broker.bootstrap, args.records))
            commits, commit_p99, produces, produce_p99, joins, leaves, loads, reads, group_rates, assign_rates = \
                ([] for _ in range(10))
            slices: list[float] = []
            consumed: dict[str, list[tuple[float, float, float]]] = {"group": [], "assign": []}
            if args.consume_only:  # the coordinator (and __consumer_offsets) set up outside the rounds
                asyncio.run(consume_round(broker.bootstrap, "bench-consume", 1, "bench-warm-up", "group"))
            for r in range(args.rounds):
                line = f"round {r + 1}: "
                if not args.consume_only:
                    c, cp, p, pp = asyncio.run(offset_commit_round(broker.bootstrap, args.seconds))
                    commits.append(c), commit_p99.append(cp), produces.append(p), produce_p99.append(pp)
                    j, lv = asyncio.run(rebalance_round(broker.bootstrap, "bench-rebalance", f"bench-rb-{r}"))
                    joins.append(j), leaves.append(lv)
                    with tempfile.TemporaryDirectory(prefix="group-load-") as t:
                        lo, rd, sl = load_round(Path(t))
                    loads.append(lo), reads.append(rd), slices.append(sl)
                    line += (f"commit {c:,.0f}/s p99 {cp:.1f} ms | produce {p:,.0f}/s | 3 join {j:.0f} ms, 3→2 {lv:.0f} "
                             f"ms | load {lo:.0f} ms (read {rd:.0f} ms, longest slice {sl:.1f} ms) | ")
                order = ["group", "assign"] if r % 2 == 0 else ["assign", "group"]
                for mode in order:
                    consumed[mode].append(asyncio.run(consume_round(broker.bootstrap, "bench-consume", args.records,
                                                                    f"bench-c-{r}", mode)))
                (g, gf, gc), (a, af, ac) = consumed["group"][-1], consumed["assign"][-1]
                group_rates.append(g), assign_rates.append(a)
                print(line + f"group {g:,.0f} rec/s (first records {gf:.0f} ms), assign {a:,.0f} rec/s (first {af:.0f} ms)"
                      f", paired ratio {g / a:.2f}; per client CPU s: group {gc:,.0f}, assign {ac:,.0f}", flush=True)
        finally:
            broker.stop()
    med = statistics.median
    print()
    paired = [g / a for g, a in zip(group_rates, assign_rates)]
    cpu_paired = [g[2] / a[2] for g, a in zip(consumed["group"], consumed["assign"])]
    consume_summary = (
        f"Consume {args.records:,} records: group records/s {spread(group_rates)}; assign records/s "
        f"{spread(assign_rates)}; ratio group/assign {med(group_rates) / med(assign_rates):.2f} (goal ≥ 0.9); "
        f"paired by round (same load): median {med(paired):.2f} (range {min(paired):.2f}–{max(paired):.2f})\n"
        f"  until the first records ms: group {spread([g[1] for g in consumed['group']])}; assign "
        f"{spread([a[1] for a in consumed['assign']])}\n"
        f"  records per client CPU second, paired ratio group/assign: median {med(cpu_paired):.2f} "
        f"(range {min(cpu_paired):.2f}–{max(cpu_paired):.2f})")
    if args.consume_only:
        print(consume_summary)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        return
    print(f"OffsetCommit (100 partitions/commit) commits/s: {spread(commits)}; p99 ms: {spread(commit_p99)}")
    print(f"  peer Produce acks=all (100 records/request) requests/s: {spread(produces)}; p99 ms: {spread(produce_p99)}")
    print(f"  ratio commit/produce: {med(commits) / med(produces):.2f}")
    print(f"Rebalance 3 → 2 (one member closes) ms: {spread(leaves)}; peer: empty → 3 members stable ms: {spread(joins)}")
    print(f"Coordinator load of 100,000 offset records ms: {spread(loads)}; peer: reading the log alone ms: "
          f"{spread(reads)}; ratio {med(loads) / med(reads):.2f}")
    print(f"  longest slice of the load (the event loop held at a time) ms: {spread(slices)}")
    print(consume_summary)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
