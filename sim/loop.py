"""The simulator's event loop: simulated time, one seeded scheduler for every node.

``SimLoop`` is an asyncio event loop whose clock is a number it moves itself. When no
callback is ready it jumps to the next timer, so a second of a timer's wait costs nothing;
nothing ever sleeps and no file descriptor is polled. Every callback runs on behalf of a
*process* (``Process``: a controller, a broker or a client incarnation), found in the
``contextvars`` context the callback was scheduled with (``PROCESS``, inherited by every
task and callback a process creates). Each process has its own FIFO queue, so the order
asyncio promises within one process holds; which process runs next is a choice of the
seeded PRNG, as the order of independent processes on real machines is free. A process
that crashed (``Process.alive`` False) never runs again: its queued callbacks and timers
are dropped when they come up.

Every callback costs ``STEP_SECONDS`` of simulated time (code takes time to run), so a
loop that polls without waiting still sees the clock move, as it would on a machine.

``run_in_executor`` runs the function inline, as a callback of the calling process after
a short simulated delay (plus the node's slow-disk delay: ``Process.executor_delay``),
so background work (flush plans, the log cleaner, the controller's fsyncs) interleaves
with the rest without threads.

``create_connection`` and ``create_server`` go to the simulated network (sim/network.py)
attached to the loop: production code opens connections and listens exactly as it does
on a real loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import heapq
import random
import weakref
from asyncio import format_helpers
from typing import Any, Callable

from protocol.clock import Time, TimerHandle

# The process a callback runs for (None: the simulator's own driver).
PROCESS: contextvars.ContextVar["Process | None"] = contextvars.ContextVar("sim_process", default=None)

WALL_CLOCK_START_MS = 1_700_000_000_000  # what SimTime.milliseconds() reads at simulated time 0
STEP_SECONDS = 2e-6  # the simulated CPU time of one callback
BUSY_STEPS = 500_000  # callbacks in a row without the loop ever waiting: a livelock (a second of CPU at STEP_SECONDS)


class Process:
    """One incarnation of a simulated process on a machine (a restart is a new Process)."""

    __slots__ = ("name", "machine", "incarnation", "alive", "executor_delay_ms", "paused_until", "key", "key_bytes",
                 "tasks")

    def __init__(self, name: str, machine: str, incarnation: int) -> None:
        self.name = name
        self.machine = machine
        self.incarnation = incarnation
        self.alive = True
        self.executor_delay_ms = 0.0  # extra delay of executor work (a slow disk)
        self.paused_until = 0.0  # a stalled process (a long GC pause): nothing runs before this loop time
        self.key = f"{name}#{incarnation}"
        self.key_bytes = self.key.encode()  # (what the trace hashes with every delivery)
        # Its tasks not yet gone (SimLoop.kill), by creation sequence: a WeakSet would iterate in
        # address order, and the graveyard's finalization order with it.
        self.tasks: weakref.WeakValueDictionary[int, asyncio.Task] = weakref.WeakValueDictionary()

    def context(self) -> contextvars.Context:
        """A fresh context that runs code as this process."""
        ctx = contextvars.Context()
        ctx.run(PROCESS.set, self)
        return ctx

    def __repr__(self) -> str:
        return f"<Process {self.key}{'' if self.alive else ' dead'}>"


class _Handle(asyncio.Handle):
    """asyncio's Handle without its per-handle debug-mode check (the simulator's loop never
    runs in debug mode): a run makes one or more per callback."""

    __slots__ = ()

    def __init__(self, callback, args, loop, context):  # noqa: D107 - the fields of asyncio.Handle
        self._context = context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = None


class _TimerHandle(asyncio.TimerHandle):
    __slots__ = ()

    def __init__(self, when, callback, args, loop, context):  # noqa: D107 - the fields of asyncio.TimerHandle
        self._context = context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = None
        self._when = when
        self._scheduled = True


class SimulationStuck(RuntimeError):
    """Nothing is ready and no timer is pending, yet the loop was asked to go on."""


class SimLoop(asyncio.BaseEventLoop):
    def __init__(self, rng: random.Random, trace: Any = None) -> None:
        super().__init__()
        self.rng = rng
        self.trace = trace
        self._now = 0.0
        self._queues: dict[Process | None, collections.deque[asyncio.Handle]] = {}
        self._order: list[Process | None] = []  # processes with a non-empty queue, in the order they became so
        self.network: Any = None  # sim/network.py's SimNetwork, set by whoever builds the simulation
        self.steps = 0
        self.after_step: Callable[[], None] | None = None  # the checks, run after every callback
        self.step_seconds = STEP_SECONDS
        self._busy = 0  # callbacks since the loop last waited for a timer
        self._busy_by: dict[str, int] = {}
        self._dropped = False  # closed: whatever is scheduled now is dropped
        # Timers: a heap of (when, sequence, handle): due at the same time, first come first
        # served (asyncio's heap of handles is not stable); cancelled ones are dropped lazily,
        # or all at once when they are most of the heap (_timer_handle_cancelled: nine timers
        # in ten are cancelled request timeouts, and a small heap is cheaper to push and pop;
        # the order timers come due in is the same, (when, sequence) being unique).
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []
        self._timer_seq = 0
        self._timers_cancelled = 0
        # No process is paused at or after this loop time (Process.paused_until of every
        # process is below it): until then, each step looks for paused processes.
        self._pause_horizon = 0.0
        # The tasks of killed processes, kept until the run is over: a task that nothing
        # references any more is finalized, and closing its coroutine runs its ``finally`` and
        # ``except BaseException`` blocks (a server's clean-up on a failed start, say) as
        # whatever process happens to run then. A killed process runs no code: its tasks are
        # only finalized after the run (Simulation._finalize), where the simulated disk refuses
        # the descriptors its crash closed.
        self._graveyard: list[asyncio.Task] = []
        self._task_seq = 0
        self.errors: list[dict[str, Any]] = []  # exceptions that reached the loop's handler (live processes)
        self.set_exception_handler(self._on_error)

    # -- clock ---------------------------------------------------------------------------
    def time(self) -> float:
        return self._now

    # -- scheduling ----------------------------------------------------------------------
    def call_at(self, when, callback, *args, context=None):  # type: ignore[override]
        if self._closed:
            self._check_closed()
        timer = _TimerHandle(when, callback, args, self, contextvars.copy_context() if context is None else context)
        self._timer_seq += 1
        heapq.heappush(self._timers, (when, self._timer_seq, timer))
        return timer

    def create_task(self, coro, *, name=None, context=None):  # type: ignore[override]
        task = super().create_task(coro, name=name, context=context)
        process = PROCESS.get() if context is None else context.get(PROCESS)
        if process is not None:
            self._task_seq += 1
            process.tasks[self._task_seq] = task
        return task

    def call_later(self, delay, callback, *args, context=None):  # type: ignore[override]
        return self.call_at(self._now + delay, callback, *args, context=context)

    def call_soon(self, callback, *args, context=None):  # type: ignore[override]
        if self._closed:
            self._check_closed()
        handle = _Handle(callback, args, self, contextvars.copy_context() if context is None else context)
        self._enqueue(handle)
        return handle

    def _timer_handle_cancelled(self, handle) -> None:  # type: ignore[override]
        if handle._scheduled:
            self._timers_cancelled += 1
            timers = self._timers
            if self._timers_cancelled > 64 and self._timers_cancelled * 2 > len(timers):
                self._timers = [t for t in timers if not t[2]._cancelled]
                heapq.heapify(self._timers)
                self._timers_cancelled = 0

    def _call_soon(self, callback, args, context):  # type: ignore[override]
        handle = _Handle(callback, args, self, contextvars.copy_context() if context is None else context)
        self._enqueue(handle)
        return handle

    def _enqueue(self, handle: asyncio.Handle) -> None:
        if self._dropped:
            handle._cancelled = True
            return
        process = handle._context.get(PROCESS)  # type: ignore[attr-defined]
        if process is not None and not process.alive:
            handle._cancelled = True  # (a dead process's timer coming due, or a callback sent to it)
            return
        queue = self._queues.get(process)
        if queue is None:
            queue = self._queues[process] = collections.deque()
        if not queue:
            self._order.append(process)
        queue.append(handle)

    def _note_busy(self, process: Process | None) -> None:
        """The last thousand callbacks before a livelock is declared: whose they were."""
        name = process.key if process is not None else "sim"
        self._busy_by[name] = self._busy_by.get(name, 0) + 1
        if self._busy >= BUSY_STEPS:
            busiest = sorted(self._busy_by.items(), key=lambda kv: -kv[1])[:3]
            self._busy = 0
            self._busy_by = {}
            raise SimulationStuck(f"livelock: {BUSY_STEPS} callbacks without waiting once for a timer (the last "
                                  f"thousand: {', '.join(f'{k} {v}' for k, v in busiest)})")

    def pause(self, process: Process, until: float) -> None:
        """``process`` stalls until loop time ``until`` (a long GC pause)."""
        process.paused_until = until
        if until > self._pause_horizon:
            self._pause_horizon = until

    def kill(self, process: Process) -> None:
        """``process`` crashed: nothing of it runs again (timers and callbacks still to come
        are dropped as they come up)."""
        process.alive = False
        self._graveyard.extend(process.tasks.values())  # in creation order (see _graveyard)
        queue = self._queues.pop(process, None)
        if queue:
            for handle in queue:
                handle._cancelled = True
            self._order.remove(process)

    def discard_all(self) -> None:
        """Drop every queued callback and timer (the run is over)."""
        for queue in self._queues.values():
            for handle in queue:
                handle._cancelled = True
        self._queues.clear()
        self._order.clear()
        for _when, _seq, timer in self._timers:
            timer._cancelled = True
        self._timers.clear()
        self._timers_cancelled = 0
        self._graveyard.clear()

    def _check_closed(self) -> None:
        # A closed simulation's coroutines are finalized whenever their last reference goes:
        # what they schedule on the way out is dropped, not an error.
        if self._closed and not self._dropped:
            raise RuntimeError("Event loop is closed")

    def close(self) -> None:
        self.discard_all()
        self._dropped = True
        super().close()

    def call_soon_threadsafe(self, callback, *args, context=None):  # type: ignore[override]
        raise RuntimeError("the simulator runs no threads: call_soon_threadsafe was called")

    def _write_to_self(self) -> None:
        pass

    def _process_events(self, event_list) -> None:  # pragma: no cover - no selector
        pass

    def _run_once(self) -> None:
        # Steps until the loop is asked to stop, rather than one step per call of asyncio's
        # run_forever (whose loop only calls this and checks _stopping): the same steps in the
        # same order, without a method call and the re-reads of every attribute per step.
        # (What a callback may replace is read again each step: the timer heap, which
        # _timer_handle_cancelled rebuilds, and after_step, which the runner sets and clears.)
        queues = self._queues
        order = self._order
        heappop = heapq.heappop
        randrange = self.rng.randrange
        enqueue = self._enqueue
        while True:
            timers = self._timers
            now = self._now
            while timers:
                top = timers[0]
                if top[0] > now and not top[2]._cancelled:
                    break
                handle = heappop(timers)[2]
                handle._scheduled = False
                if not handle._cancelled:
                    enqueue(handle)
                elif self._timers_cancelled:
                    self._timers_cancelled -= 1
            eligible = order
            if now < self._pause_horizon:
                for process in order:
                    if process is not None and process.paused_until > now:  # a stalled process waits
                        eligible = [p for p in order if p is None or p.paused_until <= now]
                        break
            if not eligible:
                # Nothing can run now: on to the next timer, or the end of a pause.
                if order:  # (every process with work is paused)
                    wake = [p.paused_until for p in order if p is not None]
                    if timers:
                        wake.append(timers[0][0])
                    self._now = max(now, min(wake))
                elif timers:  # (the usual case: the next timer, due later than now as popped above)
                    self._now = max(now, timers[0][0])
                else:
                    if self._stopping:
                        return
                    raise SimulationStuck("no callback is ready and no timer is pending")
                self._busy = 0
                if self._stopping:
                    return
                handle = None  # (what a step leaves goes when it ends, as when each step was a call)
                continue
            # The one free choice: which process runs next.
            process = eligible[randrange(len(eligible))] if len(eligible) > 1 else eligible[0]
            queue = queues[process]
            handle = queue.popleft()
            if not queue:
                order.remove(process)
            if handle._cancelled:
                if self._stopping:
                    return
                handle = None
                continue
            self.steps += 1
            # asyncio's Handle._run, inline
            try:
                handle._context.run(handle._callback, *handle._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - to the exception handler, as Handle._run does
                self._callback_failed(handle, exc)
            self._now += self.step_seconds  # a callback takes time: a loop that never waits still moves the clock
            self._busy += 1
            if self._busy >= BUSY_STEPS - 1000:
                self._note_busy(process)
            after_step = self.after_step
            if after_step is not None:
                after_step()
            if self._stopping:
                return
            handle = after_step = None

    def _callback_failed(self, handle: asyncio.Handle, exc: BaseException) -> None:
        """What asyncio's Handle._run does with an exception of its callback."""
        callback, args = handle._callback, handle._args  # type: ignore[attr-defined]
        context: dict[str, Any] = {"message": f"Exception in callback {format_helpers._format_callback_source(callback, args)}",
                                   "exception": exc, "handle": handle}
        if handle._source_traceback:  # type: ignore[attr-defined]
            context["source_traceback"] = handle._source_traceback  # type: ignore[attr-defined]
        self.call_exception_handler(context)

    # -- executors: inline ---------------------------------------------------------------
    def run_in_executor(self, executor, func, *args):  # type: ignore[override]
        future = self.create_future()
        process = PROCESS.get()
        delay_ms = self.rng.uniform(0.05, 2.0) + (process.executor_delay_ms if process is not None else 0.0)

        def run() -> None:
            if future.cancelled():
                return
            try:
                result = func(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting code, as a thread pool would
                if not future.cancelled():
                    future.set_exception(exc)
                return
            if not future.cancelled():
                future.set_result(result)

        self.call_later(delay_ms / 1000.0, run)
        return future

    def set_default_executor(self, executor) -> None:  # pragma: no cover
        raise RuntimeError("the simulator runs no executors")

    # -- network ---------------------------------------------------------------------------
    async def create_connection(self, protocol_factory, host=None, port=None, **kwargs):  # type: ignore[override]
        if kwargs.get("ssl") is not None:
            raise NotImplementedError("the simulated network carries PLAINTEXT only")
        return await self.network.connect(protocol_factory, host, port)

    async def create_server(self, protocol_factory, host=None, port=None, **kwargs):  # type: ignore[override]
        if kwargs.get("ssl") is not None:
            raise NotImplementedError("the simulated network carries PLAINTEXT only")
        return self.network.listen(protocol_factory, host, port)

    async def getaddrinfo(self, *args, **kwargs):  # pragma: no cover
        raise NotImplementedError("the simulated network resolves no names")

    def add_signal_handler(self, sig, callback, *args):  # pragma: no cover
        raise NotImplementedError("no signals in the simulator")

    # -- errors ----------------------------------------------------------------------------
    def _on_error(self, loop, context: dict[str, Any]) -> None:
        process = PROCESS.get()
        handle = context.get("handle") or context.get("future")
        if handle is not None:
            ctx = getattr(handle, "_context", None)
            if ctx is not None:
                process = ctx.get(PROCESS)
        if process is not None and not process.alive:
            return  # a dead process's tasks, destroyed: nothing to report
        message = context.get("message", "")
        if "was destroyed but it is pending" in message:
            return  # the simulation ended with tasks waiting (every process is dropped, not stopped)
        exc = context.get("exception")
        entry = {"process": process.key if process is not None else "sim", "message": message,
                 "exception": f"{type(exc).__name__}: {exc}" if exc is not None else None}
        self.errors.append(entry)
        if self.trace is not None:
            self.trace.event(process.key if process is not None else "sim", "loop-error",
                             f"{message} {entry['exception'] or ''}".strip())


class SimTime(Time):
    """``protocol.clock.Time`` over the loop's simulated clock: wall-clock milliseconds start
    at WALL_CLOCK_START_MS, the monotonic clock at 0."""

    def __init__(self, loop: SimLoop) -> None:
        self.loop = loop

    def milliseconds(self) -> int:
        return WALL_CLOCK_START_MS + int(self.loop._now * 1000.0)

    def monotonic_ms(self) -> float:
        return self.loop._now * 1000.0

    def nanoseconds(self) -> int:
        return int(self.loop._now * 1e9)

    def schedule(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        loop = self.loop
        return loop.call_at(loop._now + (delay_ms / 1000.0 if delay_ms > 0.0 else 0.0), callback)
