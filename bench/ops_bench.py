"""Running-a-cluster numbers (issue 27), in process: prints, never asserts.

plan     protocol/balance.py's plan_balance for a new broker joining a cluster of 1,000
         partitions RF 3 on three brokers (and with four racks): milliseconds per plan over
         ROUNDS runs (median, min, max), replicas moved, replica counts after.
autobalancer  the controller's partition autobalancer deciding one tick over those partitions
         (it runs on the controller's event queue): broker 4 new (node_add), and balanced
         (continuous, nothing to do): milliseconds per decision.
records  the controller's metadata records for that move, written by the real
         ReplicationControlManager: the PartitionChangeRecord that starts each move, and the one
         that completes it when the new replica joins the ISR (AlterPartition); encoded bytes per
         partition moved (Kafka's ApiMessageAndVersion frames, as the metadata log stores them).

quotas   broker/client_quota_manager.py's record_and_get_throttle_time_ms, the bookkeeping a
         request pays: with 1,000 user quotas configured and requests of 1,000 clients in turn
         (each within its quota), against the same call with no quota configured, in the same
         run: ns per request over ROUNDS runs (median, min, max), and with valgrind installed,
         instructions per request (bench/instructions.py; a count, not a time).

move     real processes (a controller and brokers 1 and 2, on 127.0.0.1): the rate at which an
         unthrottled reassignment copies a partition of MOVE_MB from broker 1 to broker 2
         (AlterPartitionReassignments [1] -> [2]), against the rate at which broker 2, as an
         ordinary follower of a partition [1, 2] of the same size, catches up after a restart
         (it was killed while the partition filled): the unthrottled follower fetch rate. Both
         are the slope of broker 2's .log bytes over time between 10 % and 90 % of the
         partition (sampled every 20 ms), so neither the restart nor the reassignment's start
         counts. Rounds alternate which goes first; MB/s median [min-max] of each, and the
         ratio of the medians (the issue asks >= 0.8); and the CPU seconds the leader and the
         follower spent per 100 MB in that span (/proc), a cost the machine's other load moves
         less than the rate. Bounded: every wait has a deadline.

    .venv/bin/python bench/ops_bench.py [--partitions 1000] [--rounds 7] [--only plan|quotas|move]
                                        [--move-mb 200] [--move-rounds 4]

Without --only, every mode but move runs (move starts processes and writes ~4 x MOVE_MB per
round to a temporary directory). The machine is shared: the load average is printed with the
numbers; the quota numbers are the bookkeeping a request pays, not the muting of a throttled
connection."""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.cluster_control import BrokerRegistration, ClusterControlManager  # noqa: E402
from controller.configuration_control import ConfigurationControlManager  # noqa: E402
from controller.replication_control import ReplicationControlManager  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.balance import plan_balance, replica_counts  # noqa: E402
from protocol.messages import APIS  # noqa: E402
from protocol.messages.metadata_records import MetadataRecordType as T, encode_record  # noqa: E402


def request(api_key: int, version: int, **fields):
    msg = APIS[api_key].request
    return msg.parse(version, msg.build(version, fields))


def assignment(n: int) -> dict[int, list[int]]:
    brokers = [1, 2, 3]
    return {p: brokers[p % 3:] + brokers[:p % 3] for p in range(n)}


def bench_plan(n: int, rounds: int, racks: bool) -> dict[int, list[int]]:
    current = assignment(n)
    brokers = {b: (f"rack-{b}" if racks else None) for b in (1, 2, 3, 4)}
    times, moves = [], {}
    for _ in range(rounds):
        t0 = time.perf_counter()
        moves = plan_balance(brokers, current)
        times.append((time.perf_counter() - t0) * 1000)
    after = {p: moves.get(p, r) for p, r in current.items()}
    moved = sum(len(set(after[p]) - set(current[p])) for p in current)
    reordered = sum(1 for p in moves if set(moves[p]) == set(current[p]))
    print(f"plan {n} partitions RF 3, 3 -> 4 brokers{' (4 racks)' if racks else ''}: "
          f"median {statistics.median(times):.1f} ms (min {min(times):.1f}, max {max(times):.1f}, {rounds} runs); "
          f"{moved} replicas move, {reordered} partitions only reordered (preferred leaders); "
          f"replicas per broker after {dict(sorted(replica_counts(after, brokers).items()))}")
    return moves


def cluster_with_topic(current: dict[int, list[int]], cluster=None, configs=None):
    """Control managers of brokers 1-4 and a topic "t" with ``current``'s replicas, the records
    replayed: (cluster, configs, replication). ``cluster``/``configs``: reuse those."""
    if cluster is None:
        cluster = ClusterControlManager("bench-cluster-id-000000")
        for b in (1, 2, 3, 4):
            cluster.replay(BrokerRegistration(b, uuid.UUID(int=b), 100 + b, (), None, False, False).to_record())
    configs = configs if configs is not None else ConfigurationControlManager({"min.insync.replicas": "1"})
    repl = ReplicationControlManager(cluster, configs, default_num_partitions=1, default_replication_factor=1,
                                     rng=random.Random(1))
    created = repl.create_topics(request(ApiKey.CREATE_TOPICS, 7, topics=[{
        "name": "t", "num_partitions": -1, "replication_factor": -1, "configs": [],
        "assignments": [{"partition_index": p, "broker_ids": r} for p, r in current.items()]}],
        validate_only=False).topics)
    for r in created.records:
        (configs if r.type == T.CONFIG else repl).replay(r)
    return cluster, configs, repl


def bench_records(n: int, moves: dict[int, list[int]]) -> None:
    current = assignment(n)
    _cluster, configs, repl = cluster_with_topic(current)

    def apply(records) -> None:
        for r in records:
            (configs if r.type == T.CONFIG else repl).replay(r)

    moving = {p: r for p, r in moves.items() if set(r) != set(current[p])}
    start = repl.alter_partition_reassignments(request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, timeout_ms=1000,
                                                       allow_replication_factor_change=True, topics=[{
                                                           "name": "t", "partitions": [
                                                               {"partition_index": p, "replicas": r}
                                                               for p, r in sorted(moving.items())]}]).topics, True)
    apply(start.records)
    start_bytes = sum(len(encode_record(r)) for r in start.records)
    info = repl.topic("t")
    done_bytes = 0
    for p in sorted(moving):
        part = info.parts[p]
        pd = {"partition_index": p, "leader_epoch": part.leader_epoch, "partition_epoch": part.partition_epoch,
              "leader_recovery_state": 0,
              "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in part.replicas]}
        result = repl.alter_partition(request(ApiKey.ALTER_PARTITION, 3, broker_id=part.leader,
                                              broker_epoch=100 + part.leader, topics=[
                                                  {"topic_id": info.topic_id, "topic_name": "t",
                                                   "partitions": [pd]}]), 3)
        apply(result.records)
        done_bytes += sum(len(encode_record(r)) for r in result.records)
    left = sum(1 for p in moving if info.parts[p].adding or info.parts[p].removing)
    print(f"records for moving {len(moving)} partitions: start {start_bytes:,} B "
          f"({start_bytes / len(moving):.0f} B/partition), completion {done_bytes:,} B "
          f"({done_bytes / len(moving):.0f} B/partition), total {(start_bytes + done_bytes) / len(moving):.0f} "
          f"B/partition; {left} still moving after the AlterPartitions")


def bench_autobalancer(n: int, rounds: int) -> None:
    """The controller's partition autobalancer: one tick's decision (it runs on the controller's
    event queue, so this is how long the queue waits), with broker 4 newly joined (node_add: the
    first batch of moves) and in a balanced cluster (continuous: the tick that finds nothing)."""
    from controller.partition_autobalancer import AutobalancerConfig, PartitionAutobalancer
    from protocol.clock import MockTime

    cluster, configs, repl = cluster_with_topic(assignment(n))
    results = {}
    for label, mode in (("node_add, broker 4 new", "node_add"), ("continuous", "continuous")):
        balancer = PartitionAutobalancer(AutobalancerConfig(mode=mode, concurrent_moves=n), MockTime(), cluster, repl,
                                         configs)
        balancer.activate()  # broker 4 holds nothing: a node_add balance is due
        times, decided = [], {}
        for _ in range(rounds):
            t0 = time.perf_counter()
            decided = balancer.decide()
            times.append((time.perf_counter() - t0) * 1000)
        results[label] = (times, len(decided))
    # a balanced cluster: the assignment the plan leads to
    balanced = plan_balance({b: None for b in (1, 2, 3, 4)}, assignment(n))
    steady = {p: balanced.get(p, r) for p, r in assignment(n).items()}
    _c, _configs, repl2 = cluster_with_topic(steady, cluster, configs)
    balancer = PartitionAutobalancer(AutobalancerConfig(mode="continuous"), MockTime(), cluster, repl2, configs)
    balancer.activate()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        assert not balancer.decide()
        times.append((time.perf_counter() - t0) * 1000)
    results["continuous, balanced (nothing to do)"] = (times, 0)
    for label, (times, moves) in results.items():
        print(f"autobalancer tick, {n} partitions RF 3 on 4 brokers, {label}: median {statistics.median(times):.1f} ms "
              f"(min {min(times):.1f}, max {max(times):.1f}, {rounds} runs); {moves} moves decided")


# log.segment.delete.delay.ms 0: a dropped round's files go at once (drop_topics waits for it), not a
# minute later in the middle of another round's measurement (unlinking 100s of MB of page cache
# is the broker's system CPU)
MOVE_PROPS = {"broker.heartbeat.interval.ms": 500, "broker.session.timeout.ms": 3000,
              "replica.lag.time.max.ms": 5000, "log.segment.bytes": 67_108_864, "log.segment.delete.delay.ms": 0}


def fill_partition(bootstrap: str, topic: str, size: int) -> None:
    """``size`` bytes of ~100 KB records into partition 0 (acks=1: a stopped follower does not hold it)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
                         "message.max.bytes": 1_000_000})
    value = bytes(range(256)) * 390
    for _ in range(size // len(value) + 1):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{topic}: records left unacknowledged")


def log_bytes(directory: Path) -> int:
    try:
        return sum(f.stat().st_size for f in directory.glob("*.log"))
    except FileNotFoundError:  # a segment rolled or the directory appeared between glob and stat
        return 0


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU of process ``pid`` so far (Linux /proc)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def copy_rate(cluster, directory: Path, total: int, timeout_s: float = 300) -> tuple[float, tuple[float, float]]:
    """(bytes/s, (CPU seconds of broker 1, the leader, and of broker 2 per 100 MB)) while ``directory``'s .log files grow
    from 10 % to 90 % of ``total``: the rate is the least-squares slope of (time, bytes)
    samples every 20 ms in that span; the CPU is what brokers 1 and 2 used in it (a cost the
    machine's other load moves less than the rate)."""
    samples: list[tuple[float, int]] = []
    cpu: list[tuple[int, float]] = []  # (bytes, CPU seconds) at the span's ends
    deadline = time.monotonic() + timeout_s
    while True:
        size = log_bytes(directory)
        samples.append((time.monotonic(), size))
        if (not cpu and size >= 0.1 * total) or (len(cpu) == 1 and size >= 0.9 * total):
            cpu.append((size, cpu_seconds(cluster.brokers[1].pid), cpu_seconds(cluster.brokers[2].pid)))
        if size >= total:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{directory.name}: {size:,} of {total:,} bytes copied after {timeout_s:.0f} s")
        time.sleep(0.02)
    if len(cpu) == 2:
        copied = max(cpu[1][0] - cpu[0][0], 1)
        cost = ((cpu[1][1] - cpu[0][1]) / copied * 1e8, (cpu[1][2] - cpu[0][2]) / copied * 1e8)
    else:
        cost = (float("nan"), float("nan"))
    span = [(t, n) for t, n in samples if 0.1 * total <= n <= 0.9 * total]
    if len(span) < 2 or span[-1][0] == span[0][0]:  # copied between two samples: a bound, from the whole run
        first = next(t for t, n in samples if n > 0)
        return total / max(samples[-1][0] - first, 0.02), cost
    n = len(span)
    mt = sum(t for t, _ in span) / n
    mb = sum(b for _, b in span) / n
    return sum((t - mt) * (b - mb) for t, b in span) / sum((t - mt) ** 2 for t, _ in span), cost


def measure_catch_up(cluster, topic: str, size: int) -> tuple[float, tuple[float, float]]:
    """Broker 2 follows ``topic`` [1, 2]; killed, the partition fills; restarted, it catches up."""
    import asyncio
    from tests.cluster.test_reassign_cli import create

    asyncio.run(create(cluster, topic, [[1, 2]]))
    cluster.brokers[2].kill()
    fill_partition(cluster.bootstrap, topic, size)
    total = log_bytes(cluster.brokers[1].log_dir / f"{topic}-0")
    cluster.brokers[2].launch()
    try:
        return copy_rate(cluster, cluster.brokers[2].log_dir / f"{topic}-0", total)
    finally:
        cluster.brokers[2].wait_ready(60)
        cluster.wait_live([1, 2], 60)


def measure_reassignment(cluster, topic: str, size: int) -> tuple[float, tuple[float, float]]:
    """``topic`` [1] fills, then moves to [2] (AlterPartitionReassignments, no throttle)."""
    import asyncio
    from protocol.client import KafkaClient
    from tests.cluster.test_reassign_cli import create

    asyncio.run(create(cluster, topic, [[1]]))
    fill_partition(cluster.bootstrap, topic, size)
    total = log_bytes(cluster.brokers[1].log_dir / f"{topic}-0")

    async def move() -> None:
        client = KafkaClient(cluster.bootstrap, client_id="ops-bench")
        try:
            results = await client.alter_partition_reassignments({(topic, 0): [2]})
            if any(code for code, _message in results.values()):
                raise RuntimeError(f"AlterPartitionReassignments: {results}")
        finally:
            await client.close()
    asyncio.run(move())
    return copy_rate(cluster, cluster.brokers[2].log_dir / f"{topic}-0", total)


def drop_topics(cluster, names: list[str]) -> None:
    import asyncio
    from protocol.client import KafkaClient

    async def drop() -> None:
        client = KafkaClient(cluster.bootstrap, client_id="ops-bench")
        try:
            await client.delete_topics(names)
        finally:
            await client.close()
    asyncio.run(drop())
    deadline = time.monotonic() + 60
    while any(d.name.startswith(tuple(f"{n}-" for n in names)) for b in cluster.brokers.values()
              if b.log_dir.exists() for d in b.log_dir.iterdir()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{names}: still on disk 60 s after being deleted")
        time.sleep(0.1)


def bench_move(size_mb: int, rounds: int) -> None:
    import tempfile
    from controller.launcher import LocalCluster

    size = size_mb * 1_000_000
    with tempfile.TemporaryDirectory(prefix="ops-bench-move-") as tmp:
        cluster = LocalCluster(Path(tmp) / "c", 2, broker_props=MOVE_PROPS).start()
        catch_up, moved, cpu = [], [], {"catch-up": [], "move": []}
        try:
            for r in range(rounds):
                order = (("catch-up", catch_up), ("move", moved))
                for what, out in (order if r % 2 == 0 else order[::-1]):
                    rate, cost = (measure_catch_up(cluster, f"cu-{r}", size) if what == "catch-up"
                                  else measure_reassignment(cluster, f"mv-{r}", size))
                    out.append(rate / 1e6)
                    cpu[what].append(cost)
                    print(f"  round {r + 1}: {what} {rate / 1e6:.1f} MB/s, CPU s per 100 MB: leader {cost[0]:.2f}, "
                          f"follower {cost[1]:.2f} "
                          f"(load average {os.getloadavg()[0]:.2f})", flush=True)
                drop_topics(cluster, [f"cu-{r}", f"mv-{r}"])  # the disk is shared: ~4 x MOVE_MB a round
        finally:
            cluster.kill()
    ratio = statistics.median(moved) / statistics.median(catch_up)
    print(f"move {size_mb} MB partition, broker 1 -> 2, unthrottled, {rounds} rounds: reassignment median "
          f"{statistics.median(moved):.1f} MB/s [{min(moved):.1f}-{max(moved):.1f}]; follower catch-up median "
          f"{statistics.median(catch_up):.1f} MB/s [{min(catch_up):.1f}-{max(catch_up):.1f}]; ratio {ratio:.2f} "
          f"(per round: {', '.join(f'{m / c:.2f}' for m, c in zip(moved, catch_up))})")
    for side, i in (("leader", 0), ("follower", 1)):
        print(f"{side}'s CPU seconds per 100 MB copied: " + "; ".join(
            f"{what} median {statistics.median(c[i] for c in v):.2f} [{min(c[i] for c in v):.2f}-"
            f"{max(c[i] for c in v):.2f}]" for what, v in cpu.items()))


QUOTA_CLIENTS = 1000


def quota_workload(configured: bool):
    """(call, argument list): the calls a broker would make, one per request."""
    from broker.client_quota_manager import ClientQuotaManager

    quotas = ({frozenset([("user", f"user-{i}")]): {"producer_byte_rate": 1e12} for i in range(QUOTA_CLIENTS)}
              if configured else {})
    manager = ClientQuotaManager("producer_byte_rate", quotas)
    clients = [(f"user-{i}", f"client-{i}") for i in range(QUOTA_CLIENTS)]
    return manager.record_and_get_throttle_time_ms, clients


def quota_loop(configured: bool, n: int) -> float:
    """Seconds for ``n`` requests spread over the clients (clock readings advance 1 ms per 100)."""
    record, clients = quota_workload(configured)
    for user, client in clients:  # warm: every client resolved once
        record(user, client, 1000, 0)
    k = len(clients)
    t0 = time.perf_counter()
    for i in range(n):
        user, client = clients[i % k]
        record(user, client, 1000, i // 100)
    return time.perf_counter() - t0


def quota_child(configured: bool, n: int) -> None:
    """The callgrind child: ``n`` requests, the same as quota_loop's, counted inside
    instructions.measured (one lambda call per request on both sides)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from instructions import measured
    record, clients = quota_workload(configured)
    for user, client in clients:
        record(user, client, 1000, 0)
    k = len(clients)
    counter = iter(range(1 << 62))

    def one() -> None:
        i = next(counter)
        user, client = clients[i % k]
        record(user, client, 1000, i // 100)
    measured(one, n)


def bench_quotas(rounds: int, n: int = 200_000) -> None:
    on, off = [], []
    for _ in range(rounds):  # interleaved, so both sides see the same machine
        on.append(quota_loop(True, n) / n * 1e9)
        off.append(quota_loop(False, n) / n * 1e9)
    print(f"quota bookkeeping per request ({n:,} requests, {QUOTA_CLIENTS} clients, {rounds} runs each, "
          f"loop overhead included on both sides): quotas configured median {statistics.median(on):.0f} ns "
          f"(min {min(on):.0f}, max {max(on):.0f}); none configured median {statistics.median(off):.0f} ns "
          f"(min {min(off):.0f}, max {max(off):.0f}); difference {statistics.median(on) - statistics.median(off):.0f} ns")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from instructions import available, per_iteration
    if available():
        counts = {side: per_iteration([sys.executable, __file__, "--_child", side], n=20_000, low=2_000)
                  for side in ("on", "off")}
        print(f"instructions per request (callgrind): quotas configured {counts['on']:.0f}, none configured "
              f"{counts['off']:.0f}, difference {counts['on'] - counts['off']:.0f}")
    else:
        print("instructions: valgrind not installed (apt-get install valgrind)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", choices=("plan", "quotas", "move"))
    parser.add_argument("--move-mb", type=int, default=200, help="move: the partition's size (MB)")
    parser.add_argument("--move-rounds", type=int, default=4)
    parser.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)  # side, iterations (bench/instructions.py)
    args = parser.parse_args()
    if args._child:
        quota_child(args._child[0] == "on", int(args._child[1]))
        return
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"(shared machine: other work runs beside this)")
    if args.only == "move":
        bench_move(args.move_mb, args.move_rounds)
        return
    if args.only != "quotas":
        moves = bench_plan(args.partitions, args.rounds, racks=False)
        bench_plan(args.partitions, args.rounds, racks=True)
        bench_records(args.partitions, moves)
        bench_autobalancer(args.partitions, args.rounds)
    if args.only != "plan":
        bench_quotas(args.rounds)


if __name__ == "__main__":
    main()
