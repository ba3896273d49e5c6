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


def run(cls, seed):
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
            op = DelayedProduce(30000, statuses, source, lambda n=n: completed.append(n))
            purgatory.try_complete_else_watch(op, keys)
        else:
            key = rng.choice(sorted(source.partitions))
            partition = source.partitions[key]
            partition.stale = rng.random() < 0.05
            partition.hw = min(leo[key], partition.hw + rng.randrange(0, 6))
            purgatory.check_hw_moved(key, partition.hw)
    heaps = {k: sorted((r, s) for r, s, _ in h) for k, h in purgatory._heaps.items()}
    return completed, heaps


def test_the_one_produce_shortcut_completes_as_the_general_path():
    for seed in range(5):
        fast = run(ProducePurgatory, seed)
        assert fast == run(ReferencePurgatory, seed)
        assert len(fast[0]) > 500
