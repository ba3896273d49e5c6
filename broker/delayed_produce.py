"""DelayedProduce: an acks=-1 produce waiting for the high watermark to pass its writes.

Completion cases, checked per partition still pending (Kafka's DelayedProduce):
  A. this broker no longer hosts the partition  → UNKNOWN_TOPIC_OR_PARTITION
  B. this broker is no longer its leader         → NOT_LEADER_OR_FOLLOWER
  C. HW ≥ the required offset                    → NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND
     if the ISR shrank below min.insync.replicas while waiting
Each pending partition starts at REQUEST_TIMED_OUT, so expiring is just completing.

``ProducePurgatory`` indexes the waiting produces of each partition by the offset the high
watermark must reach (case C), so that a HW move tries only the produces it reached; every
other change (leadership, ISR, the partition going away) still tries them all.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from typing import Callable, Hashable, Iterable, Protocol

from protocol.errors import ErrorCode

from .partition import Partition
from .purgatory import DelayedOperation, DelayedOperationPurgatory

log = logging.getLogger("kbroker.purgatory")


class PartitionSource(Protocol):
    """What a DelayedProduce reads (the ReplicaManager's): the hosted partitions by (topic,
    partition), read directly (not get_partition: a call per try, issue 29)."""

    partitions: dict[tuple[str, int], Partition]


class ProducePartitionStatus:
    __slots__ = ("key", "required_offset", "result", "acks_pending")

    def __init__(self, key: tuple[str, int], required_offset: int, result: list) -> None:
        self.key = key
        self.required_offset = required_offset
        self.result = result  # [partition, error, base_offset, log_append_time, log_start_offset]
        self.acks_pending = result[1] == ErrorCode.NONE
        if self.acks_pending:
            result[1] = ErrorCode.REQUEST_TIMED_OUT


class DelayedProduce(DelayedOperation):
    __slots__ = ("statuses", "replica_manager", "callback")

    def __init__(self, delay_ms: float, statuses: list[ProducePartitionStatus], replica_manager: PartitionSource,
                 callback: Callable[[], None]) -> None:
        # DelayedOperation.__init__'s fields, set here: no super() call per acks=all produce (issue 29)
        self.delay_ms = delay_ms
        self.completed = False
        self._timer = None
        self._keys = ()
        self._purgatory = None
        self.statuses = statuses
        self.replica_manager = replica_manager
        self.callback = callback

    def try_complete(self) -> bool:
        pending = False
        partitions = self.replica_manager.partitions
        for status in self.statuses:
            if not status.acks_pending:
                continue
            partition = partitions.get(status.key)
            if partition is None:
                done, error = True, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                done, error = partition.check_enough_replicas_reach_offset(status.required_offset)
            if done:
                status.acks_pending = False
                status.result[1] = error
            else:
                pending = True
        if pending:
            return False
        return self.force_complete()

    def force_complete(self) -> bool:
        # DelayedOperation.force_complete with _finish and on_complete inline (two calls less per
        # produce)
        if self.completed:
            return False
        self.completed = True
        timer = self._timer
        if timer is not None:
            timer.cancel()
            self._timer = None
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._unwatch(self)
        try:
            self.callback()
        except Exception:  # a failing callback must not break whoever triggered completion
            log.exception("DelayedProduce.on_complete failed")
        return True

    def on_complete(self) -> None:
        self.callback()


class ProducePurgatory(DelayedOperationPurgatory):
    """The Produce purgatory: Kafka's watchers by partition, and per partition a heap of its
    waiting produces ordered by the offset the high watermark must reach for them.

    ``check_hw_moved`` is the path of a moved high watermark (a follower's fetch, an append at
    RF=1): it tries only the produces whose required offset the new HW reached, where
    ``check_and_complete`` tried every produce waiting on the partition on every move (with
    8 produces in flight on a partition, each HW move tried all 8; at full load 3-4 tries per
    produce, 5-8 % of a leader's CPU). A produce of several partitions is tried when each of its
    partitions is reached, and completes at the last. Leadership, ISR and partition changes
    go through ``check_and_complete`` (cases A, B, and an ISR that shrank: the HW may jump)."""

    def __init__(self, name: str, time) -> None:
        super().__init__(name, time, timer_per_delay=True)  # one timer per delay (issue 29)
        self._heaps: dict[Hashable, list[tuple[int, int, DelayedOperation]]] = {}
        self._seq = itertools.count()

    def watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> None:
        DelayedOperationPurgatory.watch(self, op, keys)  # (the base directly: no super() per produce)
        if isinstance(op, DelayedProduce):
            for status in op.statuses:
                if status.acks_pending:
                    heapq.heappush(self._heaps.setdefault(status.key, []),
                                   (status.required_offset, next(self._seq), op))

    def park(self, op: DelayedProduce, key: Hashable, status: ProducePartitionStatus) -> None:
        """``watch(op, (key,))`` of a produce of one partition, its ``status`` waiting (tried:
        ReplicaManager.append_records' one partition, every acks=all produce of a
        single-partition producer, issue 29): its steps for that case, inline
        (tests/broker/test_produce_purgatory.py compares them)."""
        self._watch_one(op, key)
        heap = self._heaps.get(key)
        if heap is None:
            self._heaps[key] = [(status.required_offset, next(self._seq), op)]
        else:
            heapq.heappush(heap, (status.required_offset, next(self._seq), op))

    def check_hw_moved(self, key: Hashable, high_watermark: int) -> int:
        """``key``'s high watermark moved up to ``high_watermark``: complete what it completes.
        Returns how many completed."""
        heap = self._heaps.get(key)
        if not heap or heap[0][0] > high_watermark:
            return 0
        if len(heap) == 1:  # one produce waiting here, reached (low and half load: issue 29)
            del self._heaps[key]
            reached = heap  # (its one entry; nothing else holds the list now)
        else:
            reached = []
            while heap and heap[0][0] <= high_watermark:
                reached.append(heapq.heappop(heap))
            if not heap:
                del self._heaps[key]
        # (taken out first: a completion unwatches its op, which may compact or drop this heap)
        done = 0
        for entry in reached:
            op = entry[2]
            if op.completed:
                continue
            if op.try_complete():
                done += 1
            elif any(s.acks_pending and s.key == key and s.required_offset == entry[0]
                     for s in op.statuses):  # type: ignore[attr-defined]
                # (not reached after all, e.g. a partition replaced meanwhile: kept, never lost;
                # another status of the op on this key, at a later offset, has its own entry)
                heapq.heappush(self._heaps.setdefault(key, []), entry)
        return done

    def _unwatch(self, op: DelayedOperation) -> None:
        keys = op._keys
        watchers = self._watchers
        for key in keys:
            # DelayedOperationPurgatory._unwatch's, inline
            ops = watchers.get(key)
            live = None
            if ops is not None:
                ops.pop(op, None)
                if ops:
                    live = ops
                else:
                    del watchers[key]
            heap = self._heaps.get(key)
            if heap is None:
                continue
            if not live:
                del self._heaps[key]
            elif len(heap) > 2 * len(live) + 64:  # completed entries leave lazily; compact
                heap[:] = [e for e in heap if not e[2].completed]
                heapq.heapify(heap)
        op._keys = ()
