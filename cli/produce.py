"""``kbroker produce``: one record per input line (stdin or a file), through ``protocol.client.Producer``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
from typing import AsyncIterator, Callable

from cli.render import FileProgress
from protocol.client import KafkaClient, Producer


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


async def run(client: KafkaClient, args: argparse.Namespace) -> int:
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
            progress = stack.enter_context(FileProgress(os.fstat(stream.fileno()).st_size))
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
