"""FetchPurgatory's lean cases against its general path, the reference (issue 29): ``park``
(a follower's fetch parked at the LEO, ReplicaManager.fetch_messages) against
``watch(op, (key,), (key, True, threshold))``, and what ``lean`` switches: ``_unwatch`` of a
fetch in a wake-up heap, check_appended's inline DelayedFetch.reached, and
DelayedFetch.force_complete (DelayedOperation's, with _finish and on_complete inline; lean off:
DelayedOperation's itself, on_complete called). Two purgatories go through the same random
parks, watches, appends, completions, cancellations and timer firings (in delay queues, or a
timer per fetch); they must complete the same fetches with the same answers and keep the same
watchers, heaps, delay queues and pending timers."""

from __future__ import annotations

import random

import pytest

from broker.delayed_fetch import DelayedFetch, FetchPurgatory
from broker.fetch_params import FetchParams
from broker.purgatory import DelayedOperation
from protocol.clock import MockTime
from protocol.fast_codecs import FetchPartition

KEYS = [("t", 0), ("t", 1), ("u", 0)]


class _Log:
    """Positions only: its offsets stay 0, where the fetches are (try_complete keeps them waiting)."""

    log_end_offset = log_start_offset = high_watermark = last_stable_offset = 0

    def __init__(self) -> None:
        self.end = (0, 0)
        self.hw = (0, 0)

    def log_end_offset_metadata(self):
        return self.end

    def high_watermark_metadata(self):
        return self.hw


class _Partition:
    def __init__(self, log: _Log) -> None:
        self.log = log
        self.is_leader = True


class _Quotas:
    """ReplicationQuotas with a leader throttle set (what DelayedFetch.reached asks)."""

    class leader:
        throttled = {"t": None}


class _Source:
    """A FetchSource whose partitions never stop a fetch early (try_complete runs on the
    unindexed ones) and whose read is a marker of the fetch."""

    def __init__(self, logs: dict) -> None:
        self.partitions = {key: _Partition(log) for key, log in logs.items()}
        self.replication_quotas: _Quotas | None = None
        self.reads: list = []

    def leader_throttled(self, partition, replica_id):
        return False

    def read_from_local_log(self, params, topics, from_purgatory=False):
        self.reads.append((params.replica_id, [(t, [fp.partition for fp in parts]) for t, parts in topics],
                           from_purgatory))
        return [("read", len(self.reads))]


class _Other(DelayedOperation):
    """A fetch-purgatory operation that is no DelayedFetch (never indexed)."""

    __slots__ = ("n",)

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        pass


def _run(seed: int, lean: bool):
    rng = random.Random(seed)
    time = MockTime()
    purgatory = FetchPurgatory("Fetch", time)
    if not lean:
        purgatory.lean = False
    if seed % 2:
        purgatory.MAX_DELAY_QUEUES = 0  # a timer per fetch (the purgatory's case past its delay queues)
    logs = {key: _Log() for key in KEYS}
    source = _Source(logs)
    answers: list = []
    ops: list = []
    waiting: list = []
    shapes = []
    for _ in range(1500):
        r = rng.random()
        if r < 0.35:
            key = rng.choice(KEYS)
            log = logs[key]
            n = len(ops)
            params = FetchParams(rng.choice([2, 3]), rng.choice([500, 500, 100]), 1, 1 << 20, 0)
            fp = FetchPartition(key[1], -1, 0, 0, 1 << 20)
            op = DelayedFetch(params.max_wait_ms, params, [(key[0], [fp])], source,
                              lambda results, n=n: answers.append((n, results)), [(log, log.end)])
            threshold = (log.end[0], log.end[1] + rng.choice([1, 1, 50]))
            if lean:
                purgatory.park(op, key, threshold)
            else:
                purgatory.watch(op, (key,), (key, True, threshold))
            ops.append(op)
            waiting.append(op)
        elif r < 0.42:
            # not indexed: a DelayedFetch of several partitions, or another operation
            if rng.random() < 0.5:
                op = _Other(rng.choice([500, 100]))
                op.n = len(ops)
            else:
                params = FetchParams(-1, 500, 1, 1 << 20, 0)
                topics = [("t", [FetchPartition(0, -1, 0, 0, 1 << 20), FetchPartition(1, -1, 0, 0, 1 << 20)])]
                op = DelayedFetch(500, params, topics, source, lambda results, n=len(ops): answers.append((n, results)),
                                  [(logs[("t", 0)], None), (logs[("t", 1)], None)])
            purgatory.watch(op, [("t", 0), ("t", 1)])
            ops.append(op)
            waiting.append(op)
        elif r < 0.62:
            key = rng.choice(KEYS)
            log = logs[key]
            log.end = (log.end[0], log.end[1] + rng.choice([1, 10, 100]))
            if rng.random() < 0.3:
                log.hw = log.end
            purgatory.check_appended(key, log)
        elif r < 0.75 and waiting:
            op = waiting.pop(rng.randrange(len(waiting)))
            (op.force_complete if rng.random() < 0.8 else op.cancel)()
        elif r < 0.8:
            purgatory.check_and_complete(rng.choice(KEYS))
        elif r < 0.85:
            time.sleep(rng.choice([10, 100, 600]))
        elif r < 0.88:
            # KIP-73's leader throttle set, or not: a woken follower's fetch is tried (its log's
            # offsets keep it waiting), or completed (check_appended's reached)
            source.replication_quotas = _Quotas() if source.replication_quotas is None else None
        waiting = [op for op in waiting if not op.completed]
        index = {id(op): i for i, op in enumerate(ops)}
        shapes.append((
            sorted((key, sorted(index[id(op)] for op in watching)) for key, watching in purgatory._watchers.items()),
            sorted((key, sorted((e[0], index[id(e[2])]) for e in heap)) for key, heap in purgatory._heaps.items()),
            sorted((d, [(dl, index[id(op)]) for dl, op in q.entries]) for d, q in purgatory._delay_queues.items()),
            [op._keys for op in ops], purgatory.expired, purgatory.cancelled, time.pending_timers()))
    return shapes, answers, source.reads


@pytest.mark.parametrize("seed", range(6))
def test_the_lean_fetch_purgatory_paths_leave_what_the_general_ones_leave(seed):
    lean, general = _run(seed, True), _run(seed, False)
    assert lean[1] == general[1]
    assert lean[2] == general[2]
    for i, (a, b) in enumerate(zip(lean[0], general[0])):
        assert a == b, i
    assert len(lean[1]) > 100  # (fetches were answered: appends, expirations, completions)


def test_a_failing_callback_does_not_break_the_completion(caplog):
    time = MockTime()
    purgatory = FetchPurgatory("Fetch", time)
    log = _Log()
    source = _Source({("t", 0): log})

    def fail(results):
        raise RuntimeError("boom")

    op = DelayedFetch(500, FetchParams(2, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 0, 0, 1 << 20)])],
                      source, fail, [(log, log.end)])
    purgatory.park(op, ("t", 0), (0, 1))
    assert op.force_complete()
    assert not op.force_complete()
    assert "DelayedFetch.on_complete failed" in caplog.text
    assert not purgatory._watchers and not purgatory._heaps
