"""``kbroker``: run a broker, and talk to any Kafka-protocol broker (kbroker or Apache Kafka).

    kbroker serve [-c server.properties] [--override key=value ...]
    kbroker topics create|list|describe|delete ...
    kbroker produce -t TOPIC [-f FILE] ...
    kbroker consume -t TOPIC [--from-beginning | --offset N | --timestamp T | --end] ...
    kbroker metadata [-t TOPIC ...]
    kbroker dump-log FILE [--print-records]

The client commands use ``protocol.client`` and nothing but standard protocol behaviour.
Data goes to stdout as raw bytes; progress, summaries and errors go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from typing import AsyncIterator, Callable

import uvloop
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from protocol.client import Consumer, ConsumerRecord, KafkaClient, Producer, TopicPartition
from protocol.errors import ErrorCode, KafkaError, TopicAlreadyExistsError, error_for

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
stderr = Console(stderr=True)


class UsageError(Exception):
    """A bad argument that argparse cannot catch; printed as ``kbroker: <message>``, exit 2."""


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


# ---------------------------------------------------------------------------------------------
# serve

def cmd_serve(args: argparse.Namespace) -> int:
    from broker.config import ConfigError, KafkaConfig

    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        uvloop.run(_serve(KafkaConfig.load(args.config, args.override)))
    except ConfigError as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    return 0


async def _serve(config) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut it down gracefully."""
    from broker.server import KafkaServer

    server = KafkaServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.startup()
        await stop.wait()
        logging.getLogger("kbroker").info("signal received, shutting down")
    finally:
        await server.shutdown()


# ---------------------------------------------------------------------------------------------
# topics and metadata

async def cmd_topics_create(client: KafkaClient, args: argparse.Namespace) -> int:
    try:
        await client.create_topics([(args.topic, args.partitions, args.replication_factor, dict(args.config))])
    except TopicAlreadyExistsError:
        if not args.if_not_exists:
            raise
        return 0
    print(f"Created topic {args.topic}.")
    return 0


async def cmd_topics_list(client: KafkaClient, args: argparse.Namespace) -> int:
    cluster = await client.refresh_metadata()
    for name in sorted(cluster.topics):
        print(name)
    return 0


async def cmd_topics_describe(client: KafkaClient, args: argparse.Namespace) -> int:
    topic = (await client.refresh_metadata([args.topic])).topics[args.topic]
    if topic.error_code:
        raise error_for(topic.error_code, f"{args.topic}: {_error_name(topic.error_code)}")
    configs = await client.describe_configs(args.topic)
    out = Console()
    out.print(f"Topic: [bold]{topic.name}[/]  partitions: {len(topic.partitions)}  "
              f"replication factor: {len(next(iter(topic.partitions.values())).replicas)}")
    out.print(_partitions_table([topic]))
    table = Table("config", "value", "source", title="Configs")
    for entry in sorted(configs, key=lambda e: e.name):
        value = "(sensitive)" if entry.sensitive else entry.value
        table.add_row(escape(entry.name), "null" if value is None else escape(value),
                      _CONFIG_SOURCES.get(entry.source, str(entry.source)))
    out.print(table)
    return 0


_CONFIG_SOURCES = {1: "topic", 2: "dynamic broker", 3: "dynamic default", 4: "static broker", 5: "default",
                   6: "dynamic broker logger", 7: "client metrics", 8: "group"}


async def cmd_topics_delete(client: KafkaClient, args: argparse.Namespace) -> int:
    await client.delete_topics([args.topic])
    print(f"Deleted topic {args.topic}.")
    return 0


def _partitions_table(topics) -> Table:
    table = Table("topic", "partition", "leader", "epoch", "replicas", "isr", "error")
    for topic in topics:
        if topic.error_code:
            table.add_row(topic.name, "", "", "", "", "", _error_name(topic.error_code))
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition):
            table.add_row(topic.name, str(p.partition), str(p.leader), str(p.leader_epoch),
                          ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
                          _error_name(p.error_code) if p.error_code else "")
    return table


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


async def cmd_metadata(client: KafkaClient, args: argparse.Namespace) -> int:
    cluster = await client.refresh_metadata(args.topic or None)
    out = Console()
    out.print(f"cluster id: {cluster.cluster_id}  controller: {cluster.controller_id}")
    brokers = Table("node", "host", "port", "rack", title="Brokers")
    for b in sorted(cluster.brokers.values()):
        marker = " (controller)" if b.node_id == cluster.controller_id else ""
        brokers.add_row(f"{b.node_id}{marker}", b.host, str(b.port), b.rack or "")
    out.print(brokers)
    names = args.topic or sorted(cluster.topics)
    out.print(_partitions_table(cluster.topics[name] for name in names if name in cluster.topics))
    return 0


# ---------------------------------------------------------------------------------------------
# produce

def _read_chunks(stream, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> None:
    """Feed ``stream``'s bytes into ``queue`` from a daemon thread (b"" marks the end), so the
    producer keeps sending while input is awaited, and Ctrl-C is not held up by a read."""
    def run() -> None:
        try:
            while chunk := stream.read1(1 << 16):
                asyncio.run_coroutine_threadsafe(queue.put(chunk), loop).result()
        finally:
            asyncio.run_coroutine_threadsafe(queue.put(b""), loop)
    threading.Thread(target=run, name="kbroker-input", daemon=True).start()


async def _lines(stream, on_bytes: Callable[[int], None]) -> AsyncIterator[bytes]:
    """The lines of ``stream`` without their newline (a last line without one included)."""
    queue: asyncio.Queue = asyncio.Queue(maxsize=4)
    _read_chunks(stream, asyncio.get_running_loop(), queue)
    pending = b""
    while chunk := await queue.get():
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            yield line
        on_bytes(len(chunk))
    if pending:
        yield pending


async def cmd_produce(client: KafkaClient, args: argparse.Namespace) -> int:
    producer = Producer(client, acks=args.acks, compression=args.compression, linger_ms=args.linger_ms,
                        batch_size=args.batch_size, enable_idempotence=args.idempotent)
    headers = [(k, v.encode()) for k, v in args.header]
    separator = args.key_separator.encode() if args.key_separator else None
    delivered = failed = 0
    first_error: BaseException | None = None

    def on_delivery(future: asyncio.Future) -> None:
        nonlocal delivered, failed, first_error
        if future.exception() is None:
            delivered += 1
        else:
            failed += 1
            first_error = first_error or future.exception()

    started = client.time.monotonic_ms()
    with contextlib.ExitStack() as stack:
        stream, progress = sys.stdin.buffer, None
        if args.file:
            stream = stack.enter_context(open(args.file, "rb"))
            progress = stack.enter_context(_FileProgress(os.fstat(stream.fileno()).st_size))
        async for line in _lines(stream, progress.advance if progress else lambda n: None):
            key = None
            if separator is not None and separator in line:
                key, line = line.split(separator, 1)
            future = await producer.send(args.topic, line, key=key, headers=headers, partition=args.partition)
            future.add_done_callback(on_delivery)
            if progress:
                progress.records += 1
        await producer.close()
    seconds = max(client.time.monotonic_ms() - started, 1.0) / 1000
    print(f"{delivered} records in {seconds:.2f} s ({delivered / seconds:,.0f} records/s)", file=sys.stderr)
    if failed:
        print(f"kbroker: {failed} records failed: {first_error}", file=sys.stderr)
        return 1
    return 0


class _FileProgress:
    """A rich progress bar over a file's bytes, with the records produced and their rate."""

    def __init__(self, size: int) -> None:
        self.records = 0
        self._progress = Progress(
            TextColumn("producing"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[rate]}"), console=stderr)
        self._task = self._progress.add_task("produce", total=size, rate="")

    def advance(self, nbytes: int) -> None:
        elapsed = self._progress.tasks[0].elapsed or 0
        rate = f"{self.records:,} records, {self.records / elapsed:,.0f}/s" if elapsed else ""
        self._progress.update(self._task, advance=nbytes, rate=rate)

    def __enter__(self) -> "_FileProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._progress.stop()


# ---------------------------------------------------------------------------------------------
# consume

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


async def cmd_consume(client: KafkaClient, args: argparse.Namespace) -> int:
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
    end_offsets = None
    if args.exit_at_end:
        found = await client.offsets_for_times(dict.fromkeys(tps, -1), args.isolation_level)
        end_offsets = {tp: offset for tp, (offset, _ts) in found.items()}
    out = sys.stdout.buffer
    count = 0
    idle_since = client.time.monotonic_ms()
    while args.max_messages is None or count < args.max_messages:
        if end_offsets is not None and all([await consumer.position(tp) >= end for tp, end in end_offsets.items()]):
            break
        wait_ms = 1000
        if args.timeout_ms is not None:
            wait_ms = idle_since + args.timeout_ms - client.time.monotonic_ms()
            if wait_ms <= 0:
                break
        batch = await consumer.getmany(int(wait_ms))
        records = [r for rs in batch.values() for r in rs]
        if args.max_messages is not None:
            records = records[:args.max_messages - count]
        if records:
            out.write(b"".join(render(r) for r in records))
            out.flush()
            count += len(records)
            idle_since = client.time.monotonic_ms()
    print(f"consumed {count} messages", file=sys.stderr)
    return 0


def cmd_dump_log(args: argparse.Namespace) -> int:
    from storage.dump import dump
    return dump(args.file, out=sys.stdout, print_records=args.print_records)


# ---------------------------------------------------------------------------------------------
# argument parsing and main

def _acks(text: str) -> int:
    if text == "all":
        return -1
    if text not in ("0", "1", "-1"):
        raise argparse.ArgumentTypeError("acks must be 0, 1, -1 or all")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kbroker", description="An asyncio broker for the Kafka wire protocol.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run a broker")
    serve.add_argument("-c", "--config", help="server.properties file")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="set a configuration key (repeatable)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                       help="stderr logging level (default INFO)")
    serve.set_defaults(run=cmd_serve, client=False)

    def client_command(name: str, run, help: str, parent=commands) -> argparse.ArgumentParser:
        sub = parent.add_parser(name, help=help)
        sub.add_argument("-b", "--bootstrap-server", default=os.environ.get("KBROKER_BOOTSTRAP_SERVER", DEFAULT_BOOTSTRAP),
                         help="host:port[,host:port...] (default $KBROKER_BOOTSTRAP_SERVER or %(default)s)")
        sub.set_defaults(run=run, client=True)
        return sub

    topics = commands.add_parser("topics", help="create, list, describe or delete topics")
    topic_commands = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = client_command("create", cmd_topics_create, "create a topic", topic_commands)
    create.add_argument("-t", "--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists")
    client_command("list", cmd_topics_list, "list topic names", topic_commands)
    describe = client_command("describe", cmd_topics_describe, "show partitions and configs", topic_commands)
    describe.add_argument("-t", "--topic", required=True)
    delete = client_command("delete", cmd_topics_delete, "delete a topic", topic_commands)
    delete.add_argument("-t", "--topic", required=True)

    produce = client_command("produce", cmd_produce, "produce one record per input line")
    produce.add_argument("-t", "--topic", required=True)
    produce.add_argument("-f", "--file", help="read lines from FILE instead of stdin")
    produce.add_argument("-K", "--key-separator", metavar="SEP", help="key = the text before the first SEP")
    produce.add_argument("-H", "--header", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    produce.add_argument("--acks", type=_acks, default=-1, help="0, 1, -1 or all (default all)")
    produce.add_argument("-p", "--partition", type=int)
    produce.add_argument("-z", "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    produce.add_argument("--linger-ms", type=float, default=5)
    produce.add_argument("--batch-size", type=int, default=16384)
    produce.add_argument("--idempotent", action="store_true", help="enable the idempotent producer (needs acks all)")

    consume = client_command("consume", cmd_consume, "print records")
    consume.add_argument("-t", "--topic", required=True)
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=int, help="start at this offset")
    start.add_argument("--timestamp", type=int, metavar="T", help="start at the first record at or after T (ms)")
    start.add_argument("--end", action="store_true", help="start at the end (the default)")
    consume.add_argument("-p", "--partition", type=int, help="only this partition (default: all)")
    consume.add_argument("-n", "--max-messages", type=int)
    consume.add_argument("-f", "--format", default="%s\\n", metavar="FMT",
                         help="kcat-style: %%t %%p %%o %%k %%K %%v/%%s %%S %%T %%h \\n \\t %%%% (default %%s\\n)")
    consume.add_argument("--timeout-ms", type=int, help="stop when no record arrived for this long")
    consume.add_argument("-e", "--exit-at-end", action="store_true",
                         help="stop once every partition reached the end offset it had at start")
    consume.add_argument("--isolation-level", type=_isolation_level, default=0,
                         help="read_uncommitted (0, default) or read_committed (1)")

    metadata = client_command("metadata", cmd_metadata, "show brokers, controller, topics and partitions")
    metadata.add_argument("-t", "--topic", action="append", help="only these topics (repeatable)")

    dump_log = commands.add_parser("dump-log", help="print the batches of a .log segment file")
    dump_log.add_argument("file")
    dump_log.add_argument("--print-records", action="store_true")
    dump_log.set_defaults(run=cmd_dump_log, client=False)
    return parser


def _isolation_level(text: str) -> int:
    levels = {"0": 0, "read_uncommitted": 0, "1": 1, "read_committed": 1}
    if text not in levels:
        raise argparse.ArgumentTypeError("expected read_uncommitted (0) or read_committed (1)")
    return levels[text]


async def _run_client(args: argparse.Namespace) -> int:
    async with KafkaClient(args.bootstrap_server, client_id="kbroker-cli") as client:
        return await args.run(client, args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.client:
            logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="kbroker: %(message)s")
            return uvloop.run(_run_client(args))
        return args.run(args)
    except UsageError as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Whoever read our stdout went away (``| head``): not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (KafkaError, ValueError, OSError) as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 1
