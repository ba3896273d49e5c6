"""``kbroker groups list | describe -g G | delete -g G | reset-offsets -g G ...``: consumer groups,
as kafka-consumer-groups.sh shows and changes them (ListGroups, DescribeGroups, OffsetFetch,
ListOffsets, DeleteGroups, OffsetCommit), through ``protocol.client.GroupAdmin``."""

from __future__ import annotations

import argparse
import datetime

from rich.console import Console
from rich.table import Table

from cli.common import UsageError
from protocol.client import GroupAdmin, KafkaClient, TopicPartition, decode_member_assignment

stdout = Console(width=200)


async def list_groups(client: KafkaClient, args: argparse.Namespace) -> int:
    for group_id, _protocol_type, _state in await GroupAdmin(client).list_groups():
        print(group_id)
    return 0


async def describe(client: KafkaClient, args: argparse.Namespace) -> int:
    """kafka-consumer-groups.sh --describe: per partition the committed offset, the log end
    offset, the lag and the member it is assigned to."""
    admin = GroupAdmin(client)
    group = await admin.describe(args.group)
    committed = await admin.committed(args.group)
    owner: dict[TopicPartition, tuple[str, str, str]] = {}
    for m in group.members:
        for tp in decode_member_assignment(m.member_assignment) if group.protocol_type == "consumer" else []:
            owner[tp] = (m.member_id, m.client_host, m.client_id)
    partitions = sorted(set(committed) | set(owner))
    ends = {tp: offset for tp, (offset, _ts) in
            (await client.offsets_for_times(dict.fromkeys(partitions, -1))).items()} if partitions else {}
    print(f"Consumer group '{args.group}': state {group.group_state}, protocol {group.protocol_data or '-'}, "
          f"{len(group.members)} members")
    table = Table("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID")
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp, -1)
        lag = "-" if current is None or end < 0 else str(max(0, end - current))
        member, host, client_id = owner.get(tp, ("-", "-", "-"))
        table.add_row(args.group, tp.topic, str(tp.partition), "-" if current is None else str(current),
                      str(end), lag, member, host, client_id)
    stdout.print(table)
    return 0


async def delete(client: KafkaClient, args: argparse.Namespace) -> int:
    await GroupAdmin(client).delete(args.group)
    print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
    return 0


def _timestamp_ms(text: str) -> int:
    """--to-datetime: ISO 8601 (kafka-consumer-groups.sh: YYYY-MM-DDTHH:mm:SS.sss, local time
    unless an offset is given) or milliseconds since the epoch."""
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime: {text!r} is not YYYY-MM-DDTHH:mm:SS[.sss][+HH:MM] or epoch ms") from None
    return int(dt.timestamp() * 1000)


async def reset_offsets(client: KafkaClient, args: argparse.Namespace) -> int:
    """New committed offsets for the group's partitions of a topic: printed, and committed with
    --execute (a dry run otherwise, as kafka-consumer-groups.sh). Only for a group without
    active members (Kafka: the group must be inactive)."""
    admin = GroupAdmin(client)
    group = await admin.describe(args.group)
    if group.group_state not in ("Empty", "Dead"):
        raise UsageError(f"Assignments can only be reset if the group '{args.group}' is inactive, "
                         f"but the current state is {group.group_state}.")
    partitions = await client.partitions_for(args.topic)
    tps = [TopicPartition(args.topic, p) for p in partitions]
    earliest = {tp: o for tp, (o, _t) in (await client.offsets_for_times(dict.fromkeys(tps, -2))).items()}
    latest = {tp: o for tp, (o, _t) in (await client.offsets_for_times(dict.fromkeys(tps, -1))).items()}
    if args.to_earliest:
        target = earliest
    elif args.to_latest:
        target = latest
    elif args.to_offset is not None:
        target = {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in tps}
    else:
        ts = _timestamp_ms(args.to_datetime)
        found = await client.offsets_for_times(dict.fromkeys(tps, ts))
        target = {tp: (o if o >= 0 else latest[tp]) for tp, (o, _t) in found.items()}
    table = Table("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
    for tp in tps:
        table.add_row(args.group, tp.topic, str(tp.partition), str(target[tp]))
    stdout.print(table)
    if args.execute:
        await admin.commit(args.group, target)
    else:
        print("Dry run: nothing was committed (add --execute to commit these offsets).")
    return 0
