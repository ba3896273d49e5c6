"""ProducePurgatory.check_hw_moved's one-produce shortcut (issue 29: at low and half load one
produce waits per partition) against the general path, the reference kept here: random acks=all
produces over a few partitions (some of several partitions, some with a partition replaced
meanwhile, so a reached entry is not completed after all) and random high watermark moves
complete the same produces, in the same order, and leave the same heaps."""

from __future__ import annotations

import heapq
import random

from broker.delayed_produce import DelayedProduce, ProducePartitionStatus, ProducePurgatory
from protocol.clock import MockTime
from protocol.errors import ErrorCode


def reference_check_hw_moved(self, key, high_watermark):
    heap = self._heaps.get(key)
    if not heap or heap[0][0] > high_watermark:
        return 0
    reached = []
    while heap and heap[0][0] <= high_watermark:
        reached.append(heapq.heappop(heap))
    if not heap:
        del self._heaps[key]
    done = 0
    for entry in reached:
        op = entry[2]
        if op.completed:
            continue
        if op.try_complete():
            done += 1
        elif any(s.acks_pending and s.key == key and s.required_offset == entry[0] for s in op.statuses):
            heapq.heappush(self._heaps.setdefault(key, []), entry)
    return done


class ReferencePurgatory(ProducePurgatory):
    check_hw_moved = reference_check_hw_moved  # type: ignore[assignment]


class FakePartition:
    def __init__(self) -> None:
        self.hw = 0
        self.stale = False  # a replaced partition: its HW says nothing of the produce's offsets

    def check_enough_replicas_reach_offset(self, required_offset):
        return (not self.stale and self.hw >= required_offset), ErrorCode.NONE


class Source:
    def __init__(self) -> None:
        self.partitions = {("t", i): FakePartition() for i in range(3)}


def run(cls, seed, lean=False):
    """``lean``: a produce of one partition is tried, then parked with ProducePurgatory.park
    (ReplicaManager.append_records' one partition), not try_complete_else_watch."""
    rng = random.Random(seed)
    source = Source()
    purgatory = cls("produce", MockTime())
    completed = []
    leo = {key: 0 for key in source.partitions}
    for n in range(3000):
        if rng.random() < 0.5:
            keys = rng.sample(sorted(source.partitions), rng.choice([1, 1, 1, 2, 3]))
            statuses = []
            for key in keys:
                leo[key] += rng.randrange(1, 4)
                statuses.append(ProducePartitionStatus(key, leo[key], [key[1], ErrorCode.NONE, 0, -1, 0]))
            op = DelayedProduce(rng.choice([30000, 500]), statuses, source, lambda n=n: completed.append(n))
            if lean and len(keys) == 1:
                if not op.try_complete():
                    purgatory.park(op, keys[0], statuses[0])
            else:
                purgatory.try_complete_else_watch(op, keys)
        elif rng.random() < 0.05:
            purgatory.time.sleep(rng.choice([100, 600]))
        else:
            key = rng.choice(sorted(source.partitions))
            partition = source.partitions[key]
            partition.stale = rng.random() < 0.05
            partition.hw = min(leo[key], partition.hw + rng.randrange(0, 6))
            purgatory.check_hw_moved(key, partition.hw)
    heaps = {k: sorted((r, s) for r, s, _ in h) for k, h in purgatory._heaps.items()}
    watchers = {k: len(ops) for k, ops in purgatory._watchers.items()}
    queues = {d: len(q.entries) for d, q in purgatory._delay_queues.items()}
    return completed, heaps, watchers, queues, purgatory.expired


def test_the_one_produce_shortcut_completes_as_the_general_path():
    for seed in range(5):
        fast = run(ProducePurgatory, seed)
        assert fast == run(ReferencePurgatory, seed)
        assert len(fast[0]) > 500


def test_park_leaves_what_try_complete_else_watch_leaves():
    for seed in range(5):
        assert run(ProducePurgatory, seed, lean=True) == run(ProducePurgatory, seed)
