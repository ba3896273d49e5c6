"""KafkaScheduler's periodic tasks on the injected clock, that never die silently.

A task runs every ``interval_ms``. When it raises (a checkpoint hitting EMFILE or a full
disk, a retention pass failing), the failure is logged — the traceback the first time, one
line for each further failure in a row — and the task is retried with exponential backoff
(``retry_backoff_ms`` doubling, capped at the interval) instead of waiting a whole period;
when it succeeds again that is logged too and the normal period resumes. A task is never
dropped: only ``cancel`` (shutdown) stops it.

A task whose function returns a future (work it handed to a thread: the checkpoints' writes)
is done when the future is: its failure is the future's, and the next run is scheduled from
then on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from protocol.clock import Time, TimerHandle

log = logging.getLogger("kbroker.scheduler")

RETRY_BACKOFF_MS = 100


class PeriodicTask:
    __slots__ = ("name", "interval_ms", "fn", "time", "retry_backoff_ms", "failures", "runs", "_timer", "_cancelled")

    def __init__(self, name: str, interval_ms: float, fn: Callable[[], object], time: Time,
                 retry_backoff_ms: float = RETRY_BACKOFF_MS) -> None:
        self.name = name
        self.interval_ms = interval_ms
        self.fn = fn
        self.time = time
        self.retry_backoff_ms = retry_backoff_ms
        self.failures = 0  # in a row
        self.runs = 0
        self._timer: TimerHandle | None = None
        self._cancelled = False

    def start(self) -> "PeriodicTask":
        self._timer = self.time.schedule(self.interval_ms, self._run)
        return self

    def cancel(self) -> None:
        self._cancelled = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def next_delay_ms(self) -> float:
        if not self.failures:
            return self.interval_ms
        return min(self.interval_ms, self.retry_backoff_ms * (1 << min(self.failures - 1, 30)))

    def _run(self) -> None:
        self._timer = None
        if self._cancelled:
            return
        self.runs += 1
        try:
            pending = self.fn()
        except Exception as exc:
            return self._finished(exc)
        if isinstance(pending, asyncio.Future):
            # work handed to a thread (a checkpoint's fsyncs, loop.run_in_executor): the pass ends
            # when it does; the next one is scheduled then, so two never overlap. (An asyncio
            # future only: its done callbacks run on the loop, a concurrent.futures one's on the
            # thread that completes it, where scheduling the next pass is not safe.)
            pending.add_done_callback(self._done)
            return
        self._finished(None)

    def _done(self, future) -> None:
        if future.cancelled():
            return self._finished(RuntimeError("cancelled"))
        self._finished(future.exception())

    def _finished(self, exc: BaseException | None) -> None:
        if self._cancelled:
            return
        if exc is not None:
            self.failures += 1
            if self.failures == 1:
                log.error("background task %s failed; retrying in %.0f ms", self.name, self.next_delay_ms(),
                          exc_info=exc)
            else:
                log.error("background task %s failed again (%d in a row): %s: %s; retrying in %.0f ms", self.name,
                          self.failures, type(exc).__name__, exc, self.next_delay_ms())
        else:
            if self.failures:
                log.info("background task %s succeeded after %d failure(s)", self.name, self.failures)
                self.failures = 0
        if not self._cancelled:
            self._timer = self.time.schedule(self.next_delay_ms(), self._run)
