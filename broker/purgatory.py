"""DelayedOperation and DelayedOperationPurgatory, Kafka's contract on one event loop.

A delayed operation is a request that cannot be answered yet (a Fetch waiting for
min_bytes, a Produce with acks=-1 waiting for the high watermark). The contract:

* ``try_complete()`` checks whether the operation can finish now and, if so, calls
  ``force_complete()`` and returns True. Never awaits.
* ``force_complete()`` runs ``on_complete()`` exactly once, whoever gets there first
  (a state change, the timeout, shutdown) and cancels the timer (a timer of its own: a shared
  one, below, just skips it when it fires).
* On timeout, ``force_complete()`` then ``on_expiration()``.
* ``try_complete_else_watch(op, keys)`` tries, registers the operation under each key,
  then arms the timer. Kafka tries again after registering (another request thread may
  have changed the state in between); on one loop nothing runs in between, so a second try
  would give the same answer: it is not made (a check per parked fetch and per acks=all
  produce, issue 29).
* ``watch(op, keys)`` registers it and arms the timer without the try, for a caller that has
  just found it cannot complete (a follower's fetch that read nothing at the LEO).
* Whoever changes state calls ``check_and_complete(key)``.
* ``cancel()`` drops a waiting operation without completing it: the connection that asked
  for it closed, so nobody is left to answer (Kafka lets such operations run to their
  timeout; here the watchers and the timer are given back at once).

No locks or shards (one loop, one thread); no timing wheel: expiry goes through the
injected clock's ``schedule`` (``loop.call_later`` in production). A completed operation
unregisters itself from all its keys at once, so watcher lists never hold dead entries.

Timers: by default each operation arms its own and cancels it when it completes. A purgatory
made with ``timer_per_delay=True`` (Produce and Fetch: an acks=all produce parked 3 operations
at its leader, a call_later and a cancel each: with this, 1.9-2.2 % fewer leader instructions
per produce, bench/replication_instructions.py, issue 29) instead
keeps, per exact ``delay_ms``, a FIFO of its operations (watched later, due later: their
deadlines are in arrival order) and ONE timer, armed for the head's deadline. A completed
operation is not taken out (no work when it completes): the timer, when it fires, drops the
completed heads, expires the heads that are due, and re-arms for the next live one. Dead entries
stay bounded: completed heads are dropped on each append, and a FIFO longer than twice its last
compacted length (+64) is compacted. Past ``MAX_DELAY_QUEUES`` distinct delays (a consumer's
max_wait_ms is its own), an operation with a new delay arms its own timer as before.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Hashable, Iterable

from protocol.clock import Time, TimerHandle

log = logging.getLogger("kbroker.purgatory")


class DelayedOperation:
    __slots__ = ("delay_ms", "completed", "_timer", "_keys", "_purgatory")

    def __init__(self, delay_ms: float) -> None:
        # (DelayedFetch and DelayedProduce set these fields themselves, without calling this: a
        # field added here is added there too)
        self.delay_ms = delay_ms
        self.completed = False
        self._timer: TimerHandle | None = None
        self._keys: tuple = ()
        self._purgatory: "DelayedOperationPurgatory | None" = None

    # -- to override -----------------------------------------------------------------
    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        raise NotImplementedError

    def on_expiration(self) -> None:
        pass

    # -- the contract ------------------------------------------------------------------
    def force_complete(self) -> bool:
        """Complete now; True only for the one caller that actually completed it."""
        if not self._finish():
            return False
        try:
            self.on_complete()
        except Exception:  # a failing callback must not break whoever triggered completion
            log.exception("%s.on_complete failed", type(self).__name__)
        return True

    def cancel(self) -> bool:
        """Drop the operation without completing it (its requester went away: the connection
        closed): no ``on_complete``, timer cancelled (or skipped, if shared), unwatched. True if
        it was still waiting."""
        if not self._finish():
            return False
        if self._purgatory is not None:
            self._purgatory.cancelled += 1
        return True

    def _finish(self) -> bool:
        """Mark it completed, cancel its timer and unwatch it; False if it already was.
        (DelayedProduce.force_complete does this inline: a change here is made there too.)"""
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._purgatory is not None:
            self._purgatory._unwatch(self)
        return True

    def _expire(self) -> None:
        self._timer = None
        if self.force_complete():
            if self._purgatory is not None:
                self._purgatory.expired += 1
            self.on_expiration()


class _Firing:
    """The timer of a delay queue while it fires: a watch meanwhile arms nothing (the firing
    re-arms for the head when done)."""

    __slots__ = ()

    def cancel(self) -> None:
        pass


_FIRING = _Firing()


class _DelayQueue:
    """The waiting operations of one purgatory with one ``delay_ms``: (deadline, op) in
    deadline order (arrival order), completed ones included until dropped, and one timer for
    the head it was armed for (``armed``: that head's deadline)."""

    __slots__ = ("purgatory", "delay_ms", "wait_ms", "entries", "timer", "armed", "limit")

    def __init__(self, purgatory: "DelayedOperationPurgatory", delay_ms: float) -> None:
        self.purgatory = purgatory
        self.delay_ms = delay_ms
        self.wait_ms = delay_ms if delay_ms > 0 else 0.0  # an operation's deadline: watched + this
        self.entries: deque[tuple[float, DelayedOperation]] = deque()
        self.timer: TimerHandle | None = None
        self.armed = 0.0
        self.limit = 64  # compact past this length

    def fire(self) -> None:
        """The head it was armed for is due: expire it, drop completed heads, expire every
        other head due by now, re-arm for the first live one."""
        purgatory = self.purgatory
        time = purgatory.time
        self.timer = _FIRING
        entries = self.entries
        # (the armed head expires even if the clock reads a hair earlier than its deadline: a
        # loop's timer may fire early by its resolution, a simulated clock by a rounding)
        due = max(time.monotonic_ms(), self.armed)
        try:
            while entries:
                deadline, op = entries[0]
                if op.completed:
                    entries.popleft()
                elif deadline <= due:
                    entries.popleft()
                    op._expire()  # (may watch more operations here: appended, not armed)
                else:
                    break
        finally:
            self.timer = None
            while entries and entries[0][1].completed:
                entries.popleft()
            if entries:
                deadline = entries[0][0]
                self.armed = deadline
                self.timer = time.schedule(deadline - time.monotonic_ms(), self.fire)
            else:
                queues = purgatory._delay_queues
                if queues is not None and queues.get(self.delay_ms) is self:
                    del queues[self.delay_ms]  # (drained: a delay seen once leaves no queue behind)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.entries.clear()


class DelayedOperationPurgatory:
    MAX_DELAY_QUEUES = 16

    def __init__(self, name: str, time: Time, timer_per_delay: bool = False) -> None:
        self.name = name
        self.time = time
        self._watchers: dict[Hashable, dict[DelayedOperation, None]] = {}
        self.expired = 0
        self.cancelled = 0
        # delay_ms -> its queue, with timer_per_delay (the module's docstring); None: a timer per op
        self._delay_queues: dict[float, _DelayQueue] | None = {} if timer_per_delay else None

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """True if the operation completed right away; otherwise it is watched and timed."""
        if op.try_complete():
            return True
        self.watch(op, keys)
        return False

    def watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> None:
        """Watch and time ``op`` without trying it first: for a caller that has just found it
        cannot complete (a follower's fetch that read nothing, ReplicaManager.fetch_messages),
        where the try would only look again at what was just looked at."""
        op._purgatory = self
        op._keys = keys = tuple(keys)
        watchers = self._watchers
        for key in keys:
            watchers.setdefault(key, {})[op] = None
        self._arm(op)

    def _watch_one(self, op: DelayedOperation, key: Hashable) -> None:
        """``watch(op, (key,))``'s steps for one key (the purgatories' ``park``: FetchPurgatory's
        follower fetch at the LEO, ProducePurgatory's produce of one partition; issue 29)."""
        op._purgatory = self
        op._keys = (key,)
        watchers = self._watchers
        ops = watchers.get(key)
        if ops is None:
            watchers[key] = {op: None}
        else:
            ops[op] = None
        self._arm(op)

    def _arm(self, op: DelayedOperation) -> None:
        """watch's timing of ``op`` (its timer, or its place in its delay's queue)."""
        queues = self._delay_queues
        if queues is None:
            op._timer = self.time.schedule(op.delay_ms, op._expire)
            return
        queue = queues.get(op.delay_ms)
        if queue is None:
            delay = op.delay_ms
            if len(queues) >= self.MAX_DELAY_QUEUES:
                op._timer = self.time.schedule(delay, op._expire)
                return
            queue = queues[delay] = _DelayQueue(self, delay)
        entries = queue.entries
        deadline = self.time.monotonic_ms() + queue.wait_ms
        if entries and entries[0][1].completed:
            # Completed heads leave (the last operation watched, most of the time: issue 29).
            # Then the queue is no longer than after the last watch, which left it within its
            # limit: nothing to compact.
            entries.popleft()
            while entries and entries[0][1].completed:
                entries.popleft()
            entries.append((deadline, op))
            if queue.timer is None:
                queue.armed = deadline
                queue.timer = self.time.schedule(queue.delay_ms, queue.fire)
            return
        entries.append((deadline, op))
        if queue.timer is None:
            queue.armed = deadline
            queue.timer = self.time.schedule(queue.delay_ms, queue.fire)
        elif len(entries) > queue.limit:
            # completed entries behind a live head: compact (amortized: the limit doubles past
            # what is left)
            live = [e for e in entries if not e[1].completed]
            entries.clear()
            entries.extend(live)
            queue.limit = 2 * len(live) + 64

    def check_and_complete(self, key: Hashable) -> int:
        """Try every operation watching ``key``; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        done = 0
        for op in list(ops):
            if not op.completed and op.try_complete():
                done += 1
        return done

    def _unwatch(self, op: DelayedOperation) -> None:
        watchers = self._watchers
        for key in op._keys:
            ops = watchers.get(key)
            if ops is not None:
                ops.pop(op, None)
                if not ops:
                    del watchers[key]
        op._keys = ()

    def watched(self) -> int:
        """Operations currently watched (each counted once per key, as Kafka's metric does)."""
        return sum(len(ops) for ops in self._watchers.values())

    def delayed(self) -> int:
        """Distinct operations waiting."""
        return len({op for ops in self._watchers.values() for op in ops})

    def complete_all(self) -> int:
        """Force-complete every waiting operation (shutdown): they answer with what they have,
        key by key in the order they were watched (a dict: a set of operations iterates in
        the order of their addresses, which a simulated run cannot replay)."""
        ops = dict.fromkeys(op for ops in self._watchers.values() for op in ops)
        done = sum(1 for op in ops if op.force_complete())
        queues = self._delay_queues
        if queues:
            for delay, queue in list(queues.items()):
                if all(op.completed for _, op in queue.entries):  # (a callback may have watched more)
                    queue.cancel()  # no timer stays armed for completed operations only
                    del queues[delay]
        return done

    def delay_queue_entries(self) -> int:
        """Entries, live or completed, in the delay queues (with ``timer_per_delay``)."""
        return sum(len(q.entries) for q in (self._delay_queues or {}).values())
