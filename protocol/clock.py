"""Injected time, as Kafka's ``Time`` / ``MockTime``.

Everything that decides by time (purgatory expiry, ISR lag, segment.ms, retention.ms,
LogAppendTime, flush.ms, session timeouts) reads a ``Time`` object and never calls
``time.time()`` itself, so tests drive time by hand and need no sleeps.

``schedule(delay_ms, callback)`` is the one way to ask for a callback later. ``MockTime``
keeps a heap and fires due callbacks when a test calls ``sleep``/``advance``; the real
clock, ``protocol.client.SystemTime``, puts them on the running event loop
(``loop.call_later``) and lives with the client, since this module needs no event loop.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Time:
    """Interface: wall-clock milliseconds, a monotonic clock, and scheduled callbacks."""

    def milliseconds(self) -> int:
        raise NotImplementedError

    def monotonic_ms(self) -> float:
        raise NotImplementedError

    def nanoseconds(self) -> int:
        raise NotImplementedError

    def schedule(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        raise NotImplementedError


class _MockTimer:
    __slots__ = ("deadline", "seq", "callback", "cancelled")

    def __init__(self, deadline: float, seq: int, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.seq = seq
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: "_MockTimer") -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)


class MockTime(Time):
    """Time that moves only when told to. Scheduled callbacks fire, in deadline order,
    during ``sleep``/``advance``."""

    def __init__(self, start_ms: int = 1_700_000_000_000, monotonic_start_ms: float = 1_000_000.0) -> None:
        self._wall_ms: float = start_ms
        self._mono_ms = monotonic_start_ms
        self._timers: list[_MockTimer] = []
        self._seq = itertools.count()

    def milliseconds(self) -> int:
        return int(self._wall_ms)

    def monotonic_ms(self) -> float:
        return self._mono_ms

    def nanoseconds(self) -> int:
        return int(self._mono_ms * 1_000_000)

    def schedule(self, delay_ms: float, callback: Callable[[], None]) -> _MockTimer:
        timer = _MockTimer(self._mono_ms + max(0.0, delay_ms), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def sleep(self, ms: float) -> None:
        """Advance both clocks by ``ms``, firing every timer that comes due on the way."""
        target = self._mono_ms + ms
        while self._timers and self._timers[0].deadline <= target:
            timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            step = timer.deadline - self._mono_ms
            if step > 0:
                self._mono_ms += step
                self._wall_ms += step
            timer.callback()
        step = target - self._mono_ms
        if step > 0:
            self._mono_ms += step
            self._wall_ms += step

    advance = sleep

    def pending_timers(self) -> int:
        return sum(1 for t in self._timers if not t.cancelled)
