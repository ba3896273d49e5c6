"""DelayedOperationPurgatory.watch's shortcut (issue 29: when the queue's head is completed,
it leaves and no compaction is looked at) against the full watch, the reference kept here:
random watches, completions, cancellations and timer firings over a few delays leave both
purgatories with the same delay queues, entry for entry, and the same expirations."""

from __future__ import annotations

import random

from broker.purgatory import DelayedOperationPurgatory, _DelayQueue
from protocol.clock import MockTime

from tests.broker.test_purgatory import Op


def reference_watch(self, op, keys):
    keys = tuple(keys)
    op._purgatory = self
    op._keys = keys
    for key in keys:
        self._watchers.setdefault(key, {})[op] = None
    queues = self._delay_queues
    delay = op.delay_ms
    queue = queues.get(delay)
    if queue is None:
        if len(queues) >= self.MAX_DELAY_QUEUES:
            op._timer = self.time.schedule(delay, op._expire)
            return
        queue = queues[delay] = _DelayQueue(self, delay)
    entries = queue.entries
    while entries and entries[0][1].completed:
        entries.popleft()
    deadline = self.time.monotonic_ms() + (delay if delay > 0 else 0.0)
    entries.append((deadline, op))
    if queue.timer is None:
        queue.armed = deadline
        queue.timer = self.time.schedule(delay, queue.fire)
    elif len(entries) > queue.limit:
        live = [e for e in entries if not e[1].completed]
        entries.clear()
        entries.extend(live)
        queue.limit = 2 * len(live) + 64


class ReferencePurgatory(DelayedOperationPurgatory):
    watch = reference_watch  # type: ignore[assignment]


def run(cls, seed: int):
    rng = random.Random(seed)
    time = MockTime()
    purgatory = cls("p", time, timer_per_delay=True)
    waiting: list[Op] = []
    ops: list[Op] = []
    shapes = []
    for i in range(4000):
        if i % 1000 == 0:  # a head that waits (a long-poll): what completes behind it piles up
            op = Op(5000)
            op.n = len(ops)
            ops.append(op)
            purgatory.watch(op, [0])
        r = rng.random()
        if r < 0.45:
            op = Op(rng.choice([0, 5, 50, 500, 5000]))
            op.n = len(ops)
            ops.append(op)
            waiting.append(op)
            purgatory.watch(op, [rng.randrange(3)])
        elif r < 0.8 and waiting:
            # the oldest (the head: a produce, a fetch answered in turn), the newest (behind a
            # head that waits: completed entries pile up), or any
            op = waiting.pop(rng.choice([0, 0, -1, -1, rng.randrange(len(waiting))]))
            (op.force_complete if rng.random() < 0.9 else op.cancel)()
        elif r < 0.83:
            time.sleep(rng.choice([1, 5, 40]))
            waiting = [op for op in waiting if not op.completed]
        shapes.append(sorted((d, [(dl, o.n) for dl, o in q.entries], q.limit, q.armed)
                             for d, q in (purgatory._delay_queues or {}).items()))
    return shapes, [(op.completions, op.expirations) for op in ops]


def test_the_shortcut_leaves_the_queues_as_the_full_watch_does():
    for seed in range(4):
        fast = run(DelayedOperationPurgatory, seed)
        assert fast == run(ReferencePurgatory, seed)
        assert any(e for _, e in fast[1]) and max(len(q[1]) for s in fast[0] for q in s) > 64
