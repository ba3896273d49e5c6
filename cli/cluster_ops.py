"""Running a cluster from the command line (issue 27), over the protocol only:

    kbroker topics trim -t T [-p P ...] --before OFFSET | --before-time T   DeleteRecords (kafka-delete-records.sh)
    kbroker cluster log-dirs [--broker N ...] [-t T ...]                    DescribeLogDirs (kafka-log-dirs.sh)

``trim --before-time`` finds, per partition, the first offset at or after the time (ListOffsets
by timestamp) and deletes what is before it; a partition with no record that late is emptied
up to its high watermark."""

from __future__ import annotations

import argparse
import datetime

from rich.console import Console
from rich.table import Table

from cli.common import UsageError, error_name
from protocol.client import KafkaClient


def parse_time(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 date-time (UTC unless it says otherwise)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--before-time takes epoch ms or an ISO 8601 date-time, not {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return int(when.timestamp() * 1000)


async def trim(client: KafkaClient, args: argparse.Namespace) -> int:
    if (args.before is None) == (args.before_time is None):
        raise UsageError("give one of --before OFFSET and --before-time T")
    partitions = args.partition or await client.partitions_for(args.topic)
    if args.before is not None:
        offsets = {(args.topic, p): args.before for p in partitions}
    else:
        ts = parse_time(args.before_time)
        found = await client.offsets_for_times({(args.topic, p): ts for p in partitions})
        offsets = {(tp.topic, tp.partition): -1 if hit is None else hit[0] for tp, hit in found.items()}
    low = await client.delete_records(offsets)
    print("Records delete operation completed:")
    for tp in sorted(low):
        print(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {low[tp]}")
    return 0


def _bytes(n: int) -> str:
    if n < 0:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


async def log_dirs(client: KafkaClient, args: argparse.Namespace) -> int:
    partitions = None
    if args.topic:
        partitions = [(t, p) for t in args.topic for p in await client.partitions_for(t)]
    described = await client.describe_log_dirs(args.broker, partitions)
    out = Console()
    table = Table("broker", "log dir", "partition", "size", "offset lag", "error", title="Log dirs")
    failed = False
    for broker, dirs in sorted(described.items()):
        for d in dirs:
            if d.error_code:
                failed = True
            usage = f"{_bytes(d.total_bytes - d.usable_bytes)} used of {_bytes(d.total_bytes)}" \
                if d.total_bytes >= 0 else ""
            table.add_row(str(broker), d.path, f"({len(d.partitions)} partitions) {usage}",
                          _bytes(sum(size for size, _lag in d.partitions.values())), "",
                          error_name(d.error_code) if d.error_code else "")
            for tp, (size, lag) in sorted(d.partitions.items()):
                table.add_row("", "", f"{tp.topic}-{tp.partition}", str(size), str(lag), "")
    out.print(table)
    return 1 if failed else 0
