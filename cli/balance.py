"""``kbroker cluster balance``: even replicas and preferred leaders across the live brokers,
racks apart (``broker.rack``), moving as little data as it can (protocol/balance.py).

    kbroker cluster balance [-t TOPIC ...] [--exclude-internal] [--output-json-file F]
    kbroker cluster balance --execute [--timeout S] [--no-wait] [--no-elect]

Without ``--execute`` it only proposes: a table of replicas and preferred leaders per broker,
before and after, the bytes that would be copied (sizes from DescribeLogDirs), the current
assignment (keep it to roll back) and the proposal, both in kafka-reassign-partitions.sh's
JSON plan format (``kbroker cluster reassign --execute`` takes it).

``--execute`` starts the moves (AlterPartitionReassignments: only the partitions whose replicas
change, or whose order changes for a preferred leader), waits until none is listed as moving
(a progress bar of the bytes copied), then runs a preferred leader election on the partitions
of the plan, so the leaderships follow the new first replicas.

Only live brokers take replicas. A partition that is being moved already, or that has a
replica on a broker that is not live, stays as it is (an offline replica is not moved by a
balance: ``decommission`` and the controller's autobalancer handle brokers that leave)."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from cli.common import error_name
from cli.reassign import _names, _plan_json, moving_bytes
from protocol.balance import leader_counts, plan_balance, replica_counts
from protocol.client import KafkaClient
from protocol.client.metadata import TopicPartition
from protocol.errors import ErrorCode

POLL_S = 0.5
PREFERRED = 0


async def _sizes(client: KafkaClient, brokers: list[int]) -> dict[TopicPartition, int]:
    """Each partition's size: its largest replica, from DescribeLogDirs ({} if it cannot be read)."""
    sizes: dict[TopicPartition, int] = {}
    try:
        described = await client.describe_log_dirs(brokers)
    except Exception:  # noqa: BLE001 - sizes only order the moves; without them counts still even out
        return sizes
    for dirs in described.values():
        for d in dirs:
            for tp, (size, _lag) in d.partitions.items():
                sizes[tp] = max(sizes.get(tp, 0), size)
    return sizes


async def propose(client: KafkaClient, topics: list[str] | None = None, exclude_internal: bool = False):
    """(brokers {id: rack}, current assignment, plan, sizes, offline-held partitions)."""
    cluster = await client.refresh_metadata(topics)
    racks = {b: m.rack for b, m in cluster.brokers.items()}
    current = {TopicPartition(t.name, p.partition): list(p.replicas)
               for t in cluster.topics.values() if not t.error_code and not (exclude_internal and t.is_internal)
               for p in t.partitions.values()}
    moving = await client.list_partition_reassignments()
    offline = {tp for tp, r in current.items() if any(b not in racks for b in r)}
    fixed = set(moving) | offline
    sizes = await _sizes(client, sorted(racks))
    plan = plan_balance(racks, current, sizes=sizes, movable=lambda tp: tp not in fixed)
    return racks, current, plan, sizes, offline, set(moving)


def summary(racks: dict[int, str | None], current: dict, plan: dict, sizes: dict) -> Table:
    after = {tp: plan.get(tp, r) for tp, r in current.items()}
    brokers = sorted(racks)
    before_r, after_r = replica_counts(current, brokers), replica_counts(after, brokers)
    before_l, after_l = leader_counts(current, brokers), leader_counts(after, brokers)
    table = Table(title="Replicas and preferred leaders per broker")
    for column in ("broker", "rack", "replicas before", "replicas after", "leaders before", "leaders after"):
        table.add_column(column, justify="left" if column == "rack" else "right")
    for b in sorted(set(before_r) | set(after_r)):
        table.add_row(str(b) + ("" if b in racks else " (offline)"), racks.get(b) or "-", str(before_r.get(b, 0)),
                      str(after_r.get(b, 0)), str(before_l.get(b, 0)), str(after_l.get(b, 0)))
    return table


def _moved(current: dict, plan: dict, sizes: dict) -> tuple[int, int, int]:
    """(replicas copied, bytes copied, partitions only reordered)."""
    replicas = copied = reordered = 0
    for tp, target in plan.items():
        new = set(target) - set(current[tp])
        replicas += len(new)
        copied += len(new) * sizes.get(tp, 0)
        reordered += not new
    return replicas, copied, reordered


async def run(client: KafkaClient, args: argparse.Namespace) -> int:
    racks, current, plan, sizes, offline, moving = await propose(client, args.topic, args.exclude_internal)
    console = Console()
    console.print(summary(racks, current, plan, sizes))
    replicas, copied, reordered = _moved(current, plan, sizes)
    print(f"{len(plan)} partition(s) in the plan: {replicas} replica(s) to copy ({copied:,} B), "
          f"{reordered} partition(s) only reordered for their preferred leader")
    if moving:
        print(f"left as they are, being moved already: {_names(moving)}")
    if offline:
        print(f"left as they are, with a replica on a broker that is not live: {_names(offline)}")
    if args.output_json_file:
        Path(args.output_json_file).write_text(_plan_json(plan) + "\n")
    if not plan:
        print("The cluster is balanced: nothing to move.")
        return 0
    print("Current partition replica assignment")
    print(_plan_json({tp: current[tp] for tp in plan}))
    print()
    print("Proposed partition reassignment configuration")
    print(_plan_json(plan))
    if not args.execute:
        return 0
    return await execute(client, plan, args)


async def execute(client: KafkaClient, plan: dict[TopicPartition, list[int]], args: argparse.Namespace) -> int:
    print()
    results = await client.alter_partition_reassignments(plan)
    failed = {tp: r for tp, r in results.items() if r[0]}
    started = sorted(tp for tp in results if tp not in failed)
    if started:
        print(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} for {_names(started)}")
    for tp, (code, message) in sorted(failed.items()):
        print(f"Error reassigning partition {tp.topic}-{tp.partition}: {error_name(code)}"
              f"{': ' + message if message else ''}")
    if args.no_wait or not started:
        return 1 if failed else 0
    if not await wait_moved(client, started, args.timeout):
        return 1
    if not args.no_elect:
        elected = await client.elect_leaders(started, PREFERRED)
        bad = sorted((tp, code) for tp, code in elected.items()
                     if code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED))
        done = sum(1 for code in elected.values() if code == ErrorCode.NONE)
        print(f"Preferred leader election: {done} leadership(s) moved to the new preferred replicas")
        for tp, code in bad:
            print(f"Error completing leader election (PREFERRED) for partition {tp.topic}-{tp.partition}: "
                  f"{error_name(code)}")
        if bad:
            failed.update({tp: (code, None) for tp, code in bad})
    print("Balanced." if not failed else "Balanced, with the errors above.")
    return 1 if failed else 0


async def wait_moved(client: KafkaClient, partitions: list[TopicPartition], timeout_s: float) -> bool:
    """Wait until none of ``partitions`` is being moved, with a progress bar of the bytes copied."""
    deadline = time.monotonic() + timeout_s
    with Progress(TextColumn("moving {task.fields[n]} partition(s)"), BarColumn(), DownloadColumn(),
                  console=Console(), transient=False) as progress:
        task = progress.add_task("move", total=1, n=len(partitions))
        while True:
            ongoing = await client.list_partition_reassignments(partitions)
            if not ongoing:
                progress.update(task, completed=progress.tasks[0].total, n=0)
                return True
            done, total = await moving_bytes(client, ongoing)
            progress.update(task, total=max(total, 1), completed=done, n=len(ongoing))
            if time.monotonic() > deadline:
                progress.stop()
                print(f"Timed out after {timeout_s:.0f} s: still moving {_names(ongoing)} "
                      f"(they go on; see kbroker cluster reassign --list)")
                return False
            await asyncio.sleep(POLL_S)
