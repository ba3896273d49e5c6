"""A future whose result resumes the task awaiting it at once, in the turn of the event loop
that delivers the result, instead of one turn later.

An ``asyncio.Future`` always schedules its done callbacks with ``call_soon``: a task awaiting a
response resumes only after every other callback of the loop turn that read it. A follower's
fetcher (broker/fetcher.py) reads a Fetch response in ``data_received`` while the same turn
reads producers' requests on other sockets; each is processed there (about 100 µs for a 16 KiB
produce), and only then did the fetcher append what it got and send its next Fetch, the one
that tells the leader its new log end and lets the leader's high watermark (and every acks=all
produce waiting on it) move. On a loaded machine a long turn is also more likely to lose the
core before it ends. ``EagerFuture`` resumes the task inside ``set_result``: the next Fetch
leaves before the rest of the turn's reads are processed.

The rules, which asyncio's Task relies on (it treats any object with ``_asyncio_future_blocking``
as a future: ``add_done_callback(wakeup, context=...)``, ``result()``, ``cancel(msg)``):

* ``set_result`` from outside a task (a protocol callback, a timer) runs the done callbacks
  at once, each in its own context. Called while a task is running (a test's task, the
  simulator's network resuming reading from one), it schedules them as ``asyncio.Future``
  does: a task cannot be stepped while another one runs.
* ``set_exception`` and ``cancel`` always schedule them (the error paths stay as they were).
* A done callback added without a context runs in a copy of the context of its adding, as
  with an ``asyncio.Future``.
* A callback whose context cannot be entered in ``set_result`` (``context.run`` raising
  RuntimeError: ``set_result`` called inside that very context, which a task's wake-up only
  meets there) is scheduled instead: a task's wake-up is never lost, a fetcher never parked.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Callable, Generator, Generic, TypeVar

T = TypeVar("T")

_PENDING = "PENDING"
_CANCELLED = "CANCELLED"
_FINISHED = "FINISHED"


class EagerFuture(Generic[T]):
    """The subset of ``asyncio.Future`` a task awaiting it uses, plus ``set_result`` /
    ``set_exception`` (see the module doc)."""

    __slots__ = ("_loop", "_state", "_result", "_exception", "_callbacks", "_asyncio_future_blocking",
                 "_cancel_message")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._state = _PENDING
        self._result: T | None = None
        self._exception: BaseException | None = None
        self._callbacks: list[tuple[Callable[[Any], object], contextvars.Context]] = []
        self._asyncio_future_blocking = False
        self._cancel_message: str | None = None

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> T:
        if self._state == _CANCELLED:
            raise asyncio.CancelledError(self._cancel_message)
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("result is not set")
        if self._exception is not None:
            raise self._exception.with_traceback(self._exception.__traceback__)
        return self._result  # type: ignore[return-value]

    def exception(self) -> BaseException | None:
        if self._state == _CANCELLED:
            raise asyncio.CancelledError(self._cancel_message)
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("exception is not set")
        return self._exception

    def add_done_callback(self, fn: Callable[[Any], object], *, context: contextvars.Context | None = None) -> None:
        if context is None:
            context = contextvars.copy_context()
        if self._state != _PENDING:
            self._loop.call_soon(fn, self, context=context)
        else:
            self._callbacks.append((fn, context))

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        kept = [(f, c) for f, c in self._callbacks if f != fn]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    def cancel(self, msg: str | None = None) -> bool:
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._cancel_message = msg
        self._schedule_callbacks()
        return True

    def set_result(self, result: T) -> None:
        if self._state != _PENDING:
            raise asyncio.InvalidStateError(f"{self._state}: {self!r}")
        self._result = result
        self._state = _FINISHED
        if asyncio.current_task(self._loop) is not None:
            self._schedule_callbacks()
            return
        callbacks, self._callbacks = self._callbacks, []
        for fn, context in callbacks:
            try:
                context.run(fn, self)
            except RuntimeError:
                # The context is already entered (set_result runs inside it), or a task's wake-up
                # found a task running: neither ran the callback. The loop runs it a turn later,
                # as an asyncio.Future would have. (A callback raising RuntimeError after running
                # would run twice; a task's wake-up never does: its step keeps what it raises.)
                self._loop.call_soon(fn, self, context=context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # as the loop does with a failed callback: reported, not raised
                self._loop.call_exception_handler({"message": "exception in an EagerFuture done callback",
                                                   "exception": exc, "future": self})

    def set_exception(self, exception: BaseException) -> None:
        if self._state != _PENDING:
            raise asyncio.InvalidStateError(f"{self._state}: {self!r}")
        if isinstance(exception, type):
            exception = exception()
        self._exception = exception
        self._state = _FINISHED
        self._schedule_callbacks()

    def _schedule_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for fn, context in callbacks:
            self._loop.call_soon(fn, self, context=context)

    def __await__(self) -> Generator[Any, None, T]:
        if self._state == _PENDING:  # (done(), inline)
            self._asyncio_future_blocking = True
            yield self
        state = self._state
        if state == _PENDING:
            raise RuntimeError("await wasn't used with future")
        if state == _FINISHED and self._exception is None:
            return self._result  # type: ignore[return-value]  # (result()'s answer, without its call)
        return self.result()

    __iter__ = __await__

    def __repr__(self) -> str:
        return f"<EagerFuture {self._state}>"
