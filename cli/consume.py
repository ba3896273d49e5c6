"""``kbroker consume``: print records through ``protocol.client.Consumer``, formatted with kcat's tokens."""

from __future__ import annotations

import argparse
import sys
from typing import Awaitable, Callable, Collection

from cli.common import UsageError
from protocol.client import Consumer, ConsumerRecord, GroupConsumer, KafkaClient, TopicPartition

_FORMAT_FIELDS: dict[str, Callable[[ConsumerRecord], bytes]] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: b"%d" % r.partition,
    "o": lambda r: b"%d" % r.offset,
    "k": lambda r: r.key or b"",
    "K": lambda r: b"%d" % (-1 if r.key is None else len(r.key)),
    "v": lambda r: r.value or b"",
    "s": lambda r: r.value or b"",
    "S": lambda r: b"%d" % (-1 if r.value is None else len(r.value)),
    "T": lambda r: b"%d" % r.timestamp,
    "h": lambda r: b",".join(k.encode() + b"=" + (v or b"") for k, v in r.headers),
}
_ESCAPES = {"n": b"\n", "t": b"\t"}


def compile_format(fmt: str) -> Callable[[ConsumerRecord], bytes]:
    """kcat's -f tokens: %t %p %o %k %K %v %s %S %T %h, and \\n \\t %%."""
    parts: list[bytes | Callable[[ConsumerRecord], bytes]] = []
    i = 0
    while i < len(fmt):
        c, nxt = fmt[i], fmt[i + 1:i + 2]
        if c == "%" and nxt == "%":
            parts.append(b"%")
        elif c == "%" and nxt in _FORMAT_FIELDS:
            parts.append(_FORMAT_FIELDS[nxt])
        elif c == "\\" and nxt in _ESCAPES:
            parts.append(_ESCAPES[nxt])
        elif c in "%\\":
            raise UsageError(f"--format: unknown token {fmt[i:i + 2]!r}")
        else:
            parts.append(c.encode())
            i -= 1
        i += 2
    return lambda r: b"".join(p if isinstance(p, bytes) else p(r) for p in parts)


async def _poll(consumer: Consumer | GroupConsumer, wait_ms: int) -> list[ConsumerRecord]:
    """One getmany, its records in one list."""
    batch = await consumer.getmany(wait_ms)
    return [r for rs in batch.values() for r in rs]


async def _reached_end(client: KafkaClient, isolation_level: int, ends: dict[TopicPartition, int],
                       partitions: Collection[TopicPartition],
                       position: Callable[[TopicPartition], Awaitable[int]]) -> bool:
    """-e: every one of ``partitions`` read to its end, the end it had when first checked
    (asked then, kept in ``ends``). The client's ListOffsets goes to each partition's leader, and a
    leader that moved (NOT_LEADER_OR_FOLLOWER, a lost connection) is asked again after a metadata
    refresh (``KafkaClient.with_retries``, the client's retry backoff)."""
    new = [tp for tp in partitions if tp not in ends]
    if new:
        found = await client.offsets_for_times(dict.fromkeys(new, -1), isolation_level)
        ends.update((tp, offset) for tp, (offset, _ts) in found.items())
    return all([await position(tp) >= ends[tp] for tp in partitions])


async def _print_records(client: KafkaClient, args: argparse.Namespace, render: Callable[[ConsumerRecord], bytes],
                         take: Callable[[int, int | None], Awaitable[list[ConsumerRecord]]],
                         at_end: Callable[[], Awaitable[bool]] | None = None) -> int:
    """The poll loop of both modes: ``take(wait_ms, room)`` the next records (at most ``room``,
    None: no limit) and print them, until --max-messages are printed, --timeout-ms passed with
    none, or ``at_end()``. Returns how many were printed."""
    out = sys.stdout.buffer
    count = 0
    idle_since = client.time.monotonic_ms()
    while args.max_messages is None or count < args.max_messages:
        if at_end is not None and await at_end():
            break
        wait_ms = 1000
        if args.timeout_ms is not None:
            wait_ms = idle_since + args.timeout_ms - client.time.monotonic_ms()
            if wait_ms <= 0:
                break
        records = await take(int(wait_ms), None if args.max_messages is None else args.max_messages - count)
        if records:
            out.write(b"".join(render(r) for r in records))
            out.flush()
            count += len(records)
            idle_since = client.time.monotonic_ms()
    return count


async def run_group(client: KafkaClient, args: argparse.Namespace) -> int:
    """-g GROUP: a member of the group; its partitions from the committed offsets, a commit
    after every batch printed and on exit (LeaveGroup then)."""
    if args.partition is not None or args.offset is not None or args.timestamp is not None or args.end:
        raise UsageError("-g/--group takes the group's partitions and committed offsets: "
                         "not with --partition, --offset, --timestamp or --end")
    render = compile_format(args.format)
    consumer = GroupConsumer(client, args.group, [args.topic], assignors=args.assignor or ("range", "roundrobin"),
                             auto_offset_reset="earliest" if args.from_beginning else "latest",
                             isolation_level=args.isolation_level)
    at_end: Callable[[], Awaitable[bool]] | None = None
    if args.exit_at_end:
        ends: dict[TopicPartition, int] = {}

        async def reached_end() -> bool:
            """As kcat -G -e: every partition of the member's current assignment read to the end
            it had when first assigned (none assigned: nothing to read). Before the first join,
            and while a rebalance is pending, never."""
            return consumer.stable and await _reached_end(client, args.isolation_level, ends, consumer.assignment,
                                                          consumer.consumer.position)

        at_end = reached_end

    async def take(wait_ms: int, room: int | None) -> list[ConsumerRecord]:
        records = await _poll(consumer, wait_ms)
        if room is not None and len(records) > room:
            records = records[:room]
            last: dict[TopicPartition, int] = {}
            for r in records:
                last[TopicPartition(r.topic, r.partition)] = r.offset + 1
            await consumer.commit(last)
        elif records:
            await consumer.commit()
        return records

    try:
        count = await _print_records(client, args, render, take, at_end)
    finally:
        await consumer.close(commit=args.max_messages is None)
    print(f"consumed {count} messages", file=sys.stderr)
    return 0


async def run(client: KafkaClient, args: argparse.Namespace) -> int:
    if args.group is not None:
        return await run_group(client, args)
    partitions = await client.partitions_for(args.topic)
    if args.partition is not None:
        if args.partition not in partitions:
            raise UsageError(f"{args.topic} has no partition {args.partition}")
        partitions = [args.partition]
    tps = [TopicPartition(args.topic, p) for p in partitions]
    render = compile_format(args.format)
    consumer = Consumer(client, isolation_level=args.isolation_level, auto_offset_reset="latest")
    consumer.assign(tps)
    if args.from_beginning:
        consumer.seek_to_beginning()
    elif args.offset is not None:
        if args.offset < 0:
            raise UsageError(f"--offset must be >= 0, not {args.offset}")
        for tp in tps:
            consumer.seek(tp, args.offset)
    elif args.timestamp is not None:
        for tp in tps:
            consumer.seek_to_timestamp(tp, args.timestamp)
    else:
        consumer.seek_to_end()
    at_end: Callable[[], Awaitable[bool]] | None = None
    if args.exit_at_end:
        end_offsets: dict[TopicPartition, int] = {}

        async def reached_end() -> bool:
            return await _reached_end(client, args.isolation_level, end_offsets, tps, consumer.position)

        at_end = reached_end

    async def take(wait_ms: int, room: int | None) -> list[ConsumerRecord]:
        records = await _poll(consumer, wait_ms)
        return records if room is None else records[:room]

    try:
        count = await _print_records(client, args, render, take, at_end)
    finally:
        consumer.close()
    print(f"consumed {count} messages", file=sys.stderr)
    return 0
