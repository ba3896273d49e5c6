"""``kbroker cluster reassign`` and ``kbroker cluster decommission``: moving replicas (KIP-455)
over the protocol, with kafka-reassign-partitions.sh's JSON plan format and messages.

    kbroker cluster reassign --generate --topics-to-move-json-file F --broker-list 2,3,4
    kbroker cluster reassign --execute --reassignment-json-file F [--additional] [--throttle BYTES/s]
    kbroker cluster reassign --verify --reassignment-json-file F [--preserve-throttles]
    kbroker cluster reassign --cancel --reassignment-json-file F
    kbroker cluster reassign --list
    kbroker cluster decommission --broker N [--timeout S] [--no-unregister]

A plan is ``{"version": 1, "partitions": [{"topic": T, "partition": P, "replicas": [..],
"log_dirs": ["any", ..]}]}``. ``--generate`` prints the current assignment of the topics (keep
it to roll back) and a proposal over the brokers listed (protocol/balance.py: replicas off the
brokers not listed, racks apart, counts even, as little moved as it can). ``--execute`` refuses
while partitions are moving unless ``--additional``. ``--verify`` says, per partition, whether
its move is complete, with the bytes the new replicas hold against what they must copy (a
progress bar, from DescribeLogDirs); it exits 1 while any is in progress.

``--throttle BYTES/s`` (KIP-73), as kafka-reassign-partitions.sh sets it: every broker the moves
involve (their current and new replicas) gets ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` (dynamic broker configs), and each moving topic
``leader.replication.throttled.replicas`` (the partitions' current replicas, "p:b,...") and
``follower.replication.throttled.replicas`` (their new replicas); the moves already in progress
count too, so ``--additional --throttle`` changes the rate of a running move. ``--verify``, once
every partition of the plan has moved, clears the rates on every broker and the throttled
replicas of the plan's topics (unless ``--preserve-throttles``). ``--replica-alter-log-dirs-throttle``
is refused: kbroker has no AlterReplicaLogDirs (KIP-113).

``decommission`` moves every replica off broker N (onto the other live brokers, racks apart),
waits until no partition lists N, then waits for N to stop and unregisters it
(UnregisterBroker). A partition that cannot keep its replication factor without N (too few
other brokers) moves to its replicas less N, unless that leaves it below its
min.insync.replicas: then the whole decommission is refused, naming those partitions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

from cli.common import UsageError, error_name
from protocol.balance import plan_balance
from protocol.client import KafkaClient
from protocol.client.metadata import TopicPartition

TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
POLL_S = 0.5
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
             "replica.alter.log.dirs.io.max.bytes.per.second")
REPLICAS_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def _plan_json(assignment: dict[TopicPartition, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for tp, r in sorted(assignment.items())]}, separators=(",", ":"))


def _read_plan(path: str) -> dict[TopicPartition, list[int]]:
    try:
        data = json.loads(Path(path).read_text())
        plan = {TopicPartition(p["topic"], int(p["partition"])): [int(r) for r in p["replicas"]]
                for p in data["partitions"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"cannot read the reassignment plan {path}: {exc}") from None
    if not plan:
        raise UsageError(f"the reassignment plan {path} names no partition")
    return plan


async def _assignment(client: KafkaClient, topics: list[str] | None = None) -> dict[TopicPartition, list[int]]:
    cluster = await client.refresh_metadata(topics)
    return {TopicPartition(t.name, p.partition): list(p.replicas)
            for t in cluster.topics.values() if not t.error_code for p in t.partitions.values()}


def _names(tps) -> str:
    return ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))


async def run(client: KafkaClient, args: argparse.Namespace) -> int:
    modes = [m for m in ("generate", "execute", "verify", "cancel", "list") if getattr(args, m)]
    if len(modes) != 1:
        raise UsageError("give exactly one of --generate, --execute, --verify, --cancel, --list")
    return await {"generate": generate, "execute": execute, "verify": verify, "cancel": cancel,
                  "list": list_moving}[modes[0]](client, args)


async def generate(client: KafkaClient, args: argparse.Namespace) -> int:
    if not args.topics_to_move_json_file or not args.broker_list:
        raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    try:
        topics = [t["topic"] for t in json.loads(Path(args.topics_to_move_json_file).read_text())["topics"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"cannot read {args.topics_to_move_json_file}: {exc}") from None
    wanted = [int(b) for b in args.broker_list.split(",") if b.strip()]
    cluster = await client.refresh_metadata(topics)
    current = {tp: r for tp, r in (await _assignment(client, topics)).items() if tp.topic in topics}
    racks = {b: (cluster.brokers[b].rack if b in cluster.brokers else None) for b in wanted}
    moves = plan_balance(racks, current)
    proposed = {tp: moves.get(tp, r) for tp, r in current.items()}
    print("Current partition replica assignment")
    print(_plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(_plan_json(proposed))
    return 0


def move_map(ongoing: dict, plan: dict[TopicPartition, list[int]], current: dict[TopicPartition, list[int]]
             ) -> dict[TopicPartition, tuple[list[int], list[int]]]:
    """Kafka's calculateProposedMoveMap: per partition moving (in progress or planned), (its
    sources: the replicas it had before any move, its destinations: the new ones)."""
    moves: dict[TopicPartition, tuple[list[int], list[int]]] = {}
    for tp, m in ongoing.items():
        sources = [r for r in m.replicas if r not in m.adding]
        targets = [r for r in m.replicas if r not in m.removing]
        moves[tp] = (sources, [r for r in targets if r not in sources])
    for tp, target in plan.items():
        sources = moves[tp][0] if tp in moves else list(current.get(tp, []))
        moves[tp] = (sources, [r for r in target if r not in sources])
    return moves


def throttled_replicas(moves: dict[TopicPartition, tuple[list[int], list[int]]]
                       ) -> dict[str, tuple[str, str]]:
    """Per topic, (leader.replication.throttled.replicas, follower.replication.throttled.replicas):
    every source replica of a moving partition, and every destination (Kafka's
    calculateLeaderThrottles / calculateFollowerThrottles)."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    for tp, (sources, destinations) in sorted(moves.items()):
        leader.setdefault(tp.topic, []).extend(f"{tp.partition}:{b}" for b in sources)
        follower.setdefault(tp.topic, []).extend(f"{tp.partition}:{b}" for b in destinations)
    return {topic: (",".join(leader[topic]), ",".join(follower.get(topic, []))) for topic in leader}


async def set_throttles(client: KafkaClient, moves: dict[TopicPartition, tuple[list[int], list[int]]],
                        rate: int) -> None:
    """Kafka's modifyReassignmentThrottle: the throttled replicas of every moving topic, the
    rates on every broker the moves involve (each asked of that broker)."""
    for topic, (leader, follower) in sorted(throttled_replicas(moves).items()):
        await client.incremental_alter_configs(TOPIC, topic, [(REPLICAS_KEYS[0], SET, leader),
                                                              (REPLICAS_KEYS[1], SET, follower)])
    brokers = sorted({b for sources, destinations in moves.values() for b in [*sources, *destinations]})
    for broker in brokers:
        await client.incremental_alter_configs(BROKER, str(broker), [(RATE_KEYS[0], SET, str(rate)),
                                                                     (RATE_KEYS[1], SET, str(rate))], broker)
    print(f"The inter-broker throttle limit was set to {rate} B/s")


async def clear_throttles(client: KafkaClient, topics: list[str]) -> None:
    """Kafka's clearAllThrottles: the rates off every broker of the cluster, the throttled
    replicas off the plan's topics."""
    brokers = sorted(b.broker_id for b in (await client.describe_cluster()).brokers)
    print(f"Clearing broker-level throttles on broker{'s' if len(brokers) > 1 else ''} "
          f"{','.join(str(b) for b in brokers)}")
    for broker in brokers:
        await client.incremental_alter_configs(BROKER, str(broker), [(k, DELETE, None) for k in RATE_KEYS], broker)
    print(f"Clearing topic-level throttles on topic{'s' if len(topics) > 1 else ''} {','.join(topics)}")
    for topic in topics:
        await client.incremental_alter_configs(TOPIC, topic, [(k, DELETE, None) for k in REPLICAS_KEYS])


async def execute(client: KafkaClient, args: argparse.Namespace) -> int:
    if not args.reassignment_json_file:
        raise UsageError("--execute needs --reassignment-json-file")
    if getattr(args, "replica_alter_log_dirs_throttle", None) is not None:
        raise UsageError("--replica-alter-log-dirs-throttle: kbroker does not move replicas between log dirs "
                         "(AlterReplicaLogDirs, KIP-113, is not implemented), so there is nothing to throttle")
    throttle = getattr(args, "throttle", None)
    if throttle is not None and throttle < 0:
        raise UsageError("--throttle must be at least 0 (bytes/s)")
    plan = _read_plan(args.reassignment_json_file)
    ongoing = await client.list_partition_reassignments()
    if ongoing and not args.additional:
        raise UsageError("Cannot execute because there is an existing partition assignment. Use --additional to "
                         "override this and create a new partition assignment in addition to the existing one.")
    current = await _assignment(client, sorted({tp.topic for tp in plan} | {tp.topic for tp in ongoing}))
    print("Current partition replica assignment")
    print()
    print(_plan_json({tp: current[tp] for tp in plan if tp in current}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
              "throttle is removed.")
        await set_throttles(client, move_map(ongoing, plan, current), throttle)
    results = await client.alter_partition_reassignments(plan)
    failed = {tp: r for tp, r in results.items() if r[0]}
    started = [tp for tp in results if tp not in failed]
    if started:
        print(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} for {_names(started)}")
    for tp, (code, message) in sorted(failed.items()):
        print(f"Error reassigning partition(s):\n{tp.topic}-{tp.partition}: {error_name(code)}"
              f"{': ' + message if message else ''}")
    return 1 if failed else 0


async def moving_bytes(client: KafkaClient, moving: dict) -> tuple[int, int]:
    """(bytes the adding replicas hold, bytes they must hold): each adding replica against the
    largest copy of its partition, from DescribeLogDirs of the brokers involved."""
    brokers = sorted({b for m in moving.values() for b in m.replicas})
    sizes: dict[tuple[TopicPartition, int], int] = {}
    try:
        described = await client.describe_log_dirs(brokers, list(moving))
    except Exception:  # a broker down: no progress figures, the verdicts still hold
        return 0, 0
    for broker, dirs in described.items():
        for d in dirs:
            for tp, (size, _lag) in d.partitions.items():
                sizes[(tp, broker)] = sizes.get((tp, broker), 0) + size
    done = total = 0
    for tp, m in moving.items():
        full = max((sizes.get((tp, b), 0) for b in m.replicas if b not in m.adding), default=0)
        for b in m.adding:
            total += full
            done += min(sizes.get((tp, b), 0), full)
    return done, total


async def verify(client: KafkaClient, args: argparse.Namespace) -> int:
    if not args.reassignment_json_file:
        raise UsageError("--verify needs --reassignment-json-file")
    plan = _read_plan(args.reassignment_json_file)
    ongoing = await client.list_partition_reassignments(list(plan))
    current = await _assignment(client, sorted({tp.topic for tp in plan}))
    print("Status of partition reassignment:")
    pending = False
    for tp, target in sorted(plan.items()):
        if tp in ongoing:
            pending = True
            print(f"Reassignment of partition {tp.topic}-{tp.partition} is still in progress.")
        elif current.get(tp) == target:
            print(f"Reassignment of partition {tp.topic}-{tp.partition} is completed.")
        else:
            pending = True
            print(f"There is no active reassignment of partition {tp.topic}-{tp.partition}, but replica set is "
                  f"{current.get(tp)} rather than {target}.")
    moving = {tp: m for tp, m in ongoing.items() if tp in plan}
    if moving:
        done, total = await moving_bytes(client, moving)
        with Progress(TextColumn("moving {task.fields[n]} partition(s)"), BarColumn(), DownloadColumn(),
                      TextColumn("{task.fields[left]} left"), console=Console(), transient=False) as progress:
            progress.add_task("move", total=max(total, 1), completed=done, n=len(moving),
                              left=f"{max(total - done, 0):,} B")
    if not pending and not getattr(args, "preserve_throttles", False):
        # every move of the plan is done: the throttles go (Kafka's verify clears them all then)
        await clear_throttles(client, sorted({tp.topic for tp in plan}))
    return 1 if pending else 0


async def cancel(client: KafkaClient, args: argparse.Namespace) -> int:
    if not args.reassignment_json_file:
        raise UsageError("--cancel needs --reassignment-json-file")
    plan = _read_plan(args.reassignment_json_file)
    results = await client.alter_partition_reassignments({tp: None for tp in plan})
    cancelled = [tp for tp, (code, _m) in results.items() if code == 0]
    failed = {tp: r for tp, r in results.items() if r[0]}
    if cancelled:
        print(f"Successfully cancelled partition reassignment{'s' if len(cancelled) > 1 else ''} for: "
              f"{_names(cancelled)}")
    for tp, (code, message) in sorted(failed.items()):
        print(f"Error cancelling partition reassignment for {tp.topic}-{tp.partition}: {error_name(code)}"
              f"{': ' + message if message else ''}")
    return 1 if failed else 0


async def list_moving(client: KafkaClient, args: argparse.Namespace) -> int:
    ongoing = await client.list_partition_reassignments()
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, m in sorted(ongoing.items()):
        print(f"{tp.topic}-{tp.partition}: replicas: {','.join(map(str, m.replicas))}. "
              f"adding: {','.join(map(str, m.adding))}. removing: {','.join(map(str, m.removing))}.")
    return 0


# -- decommission --------------------------------------------------------------------------

async def decommission_plan(client: KafkaClient, broker: int) -> dict[TopicPartition, list[int]]:
    """Where every replica of ``broker`` goes; raises UsageError naming the partitions that would
    fall below their min.insync.replicas."""
    cluster = await client.refresh_metadata()
    current = await _assignment(client)
    hosted = {tp: r for tp, r in current.items() if broker in r}
    racks = {b: m.rack for b, m in cluster.brokers.items()}
    moves = plan_balance(racks, hosted, exclude={broker}, even=False, leaders=False)
    plan: dict[TopicPartition, list[int]] = {}
    below = []
    min_isr: dict[str, int] = {}
    for tp, replicas in hosted.items():
        target = moves.get(tp, replicas)
        if broker in target:  # nowhere to go: the partition shrinks
            target = [r for r in target if r != broker]
            if tp.topic not in min_isr:
                entries = await client.describe_resource_configs(TOPIC, tp.topic)
                min_isr[tp.topic] = int(next((v for k, v, *_ in entries if k == "min.insync.replicas"), "1") or 1)
            if len(target) < max(min_isr[tp.topic], 1):
                below.append((tp, len(target), min_isr[tp.topic]))
                continue
        plan[tp] = target
    if below:
        raise UsageError(f"refusing to decommission broker {broker}: " + "; ".join(
            f"{tp.topic}-{tp.partition} would keep {n} replica(s), below its min.insync.replicas={m}"
            for tp, n, m in sorted(below)))
    return plan


async def decommission(client: KafkaClient, args: argparse.Namespace) -> int:
    broker = args.broker
    cluster = await client.refresh_metadata([])
    if broker not in cluster.brokers:
        raise UsageError(f"broker {broker} is not a live broker of this cluster")
    plan = await decommission_plan(client, broker)
    deadline = time.monotonic() + args.timeout
    if plan:
        results = await client.alter_partition_reassignments(plan)
        failed = {tp: r for tp, r in results.items() if r[0]}
        for tp, (code, message) in sorted(failed.items()):
            print(f"Error moving {tp.topic}-{tp.partition} off broker {broker}: {error_name(code)}"
                  f"{': ' + message if message else ''}")
        if failed:
            return 1
        print(f"Moving {len(plan)} partition(s) off broker {broker}: {_names(plan)}")
    while True:
        current = await _assignment(client)
        left = sorted(tp for tp, r in current.items() if broker in r)
        if not left and not await client.list_partition_reassignments(list(plan)):
            break
        if time.monotonic() > deadline:
            print(f"Timed out: broker {broker} still holds {_names(left) or 'partitions being moved'}")
            return 1
        await asyncio.sleep(POLL_S)
    print(f"Broker {broker} holds no replicas.")
    if args.no_unregister:
        return 0
    print(f"Stop broker {broker} now; it is unregistered once it has stopped (waiting up to {args.timeout:.0f} s).")
    while broker in (await client.refresh_metadata([])).brokers:
        if time.monotonic() > deadline:
            print(f"Timed out waiting for broker {broker} to stop; not unregistered")
            return 1
        await asyncio.sleep(POLL_S)
    await client.unregister_broker(broker)
    print(f"Broker {broker} is unregistered.")
    return 0

