"""The asyncio-backed clock, and sleeping on any clock.

``protocol.clock`` holds the ``Time`` interface and ``MockTime``, which need no event loop;
``SystemTime`` schedules its callbacks on the running asyncio loop, so it lives here with the
rest of the I/O side.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time as _time
from typing import Callable

from ..clock import Time, TimerHandle


_running = threading.local()  # .loop: the loop running_loop last found running in this thread
if hasattr(os, "register_at_fork"):
    # a child forked from inside a running loop copies it, running: it is not the child's
    os.register_at_fork(after_in_child=lambda: _running.__dict__.clear())


def running_loop() -> asyncio.AbstractEventLoop:
    """``asyncio.get_running_loop()`` without its system call: CPython 3.11's checks the
    process id on every call (getpid(), which glibc no longer caches), and a broker asked for
    it per parked operation's timer, per client request: 3 of a leader's 12.6 system calls per
    acks=all produce at low rate, 2 of a follower's 6 (bench/replication_instructions.py
    --syscalls; issue 29). The loop found last in this thread is kept while it runs (one loop
    runs per thread at a time; is_running is a flag read); otherwise asked again, which raises
    RuntimeError outside a running loop as get_running_loop does."""
    loop = getattr(_running, "loop", None)
    if loop is None or not loop.is_running():
        loop = _running.loop = asyncio.get_running_loop()
    return loop


class SystemTime(Time):
    def milliseconds(self) -> int:
        return _time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return _time.monotonic() * 1000.0

    # The C function itself, no Python frame: request metrics read it a few times per request.
    nanoseconds = staticmethod(_time.monotonic_ns)

    def schedule(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        return running_loop().call_later(max(0.0, delay_ms) / 1000.0, callback)


SYSTEM_TIME = SystemTime()


async def sleep(time: Time, ms: float) -> None:
    """Sleep through the injected clock (``MockTime`` fires it when a test advances time)."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    handle = time.schedule(ms, wake)
    try:
        await future
    finally:
        handle.cancel()


async def yield_now() -> None:
    """Let every other ready task run once (no clock: ``MockTime`` fires a zero sleep only
    when a test advances it), as a non-blocking poll does."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.set_result, None)
    await future
