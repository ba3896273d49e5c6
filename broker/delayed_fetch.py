"""DelayedFetch: a Fetch long-poll waiting for min_bytes (or max_wait_ms).

It completes early when (Kafka's cases) a partition is no longer hosted or no longer led
here, the fetch offset fell outside the log (truncation), or enough bytes have become
readable: new data for a follower (LEO moved), a moved high watermark for a consumer.
On completion it reads again and answers with whatever is there then.

``try_complete`` runs on every append to a watched partition, for every fetch parked there,
so it never reads the log (Kafka's DelayedFetch.tryComplete): when the fetch is parked it
remembers where its fetch offset lies (segment, byte position: ``Log.offset_metadata``);
the bytes readable since are the distance to the end it may read to (LEO or high watermark,
whose position the log keeps), capped at the partition's max bytes. Reaching a newer segment
completes it, as Kafka does.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Callable, Hashable, Iterable, Protocol

from .fetch_params import FetchParams
from .partition import FETCH_LOG_END, FETCH_TXN_COMMITTED, Partition
from .purgatory import DelayedOperation, DelayedOperationPurgatory, log

if TYPE_CHECKING:
    from storage import Log

    from .replication_quota import ReplicationQuotas

WAKE_NEVER = 1 << 62  # a position no segment reaches: only a newer segment wakes the fetch


class FetchSource(Protocol):
    """What a DelayedFetch reads (the ReplicaManager provides it): the hosted partitions, looked
    up in the dict itself (``try_complete`` runs per append, per parked fetch: no call on top of
    the dict's ``get``), and the read that answers the fetch."""

    partitions: dict[tuple[str, int], Partition]
    replication_quotas: "ReplicationQuotas | None"

    def leader_throttled(self, partition: Partition, replica_id: int) -> bool: ...

    def read_from_local_log(self, params: FetchParams, topics, from_purgatory: bool = False) -> list: ...


class DelayedFetch(DelayedOperation):
    __slots__ = ("params", "topics", "replica_manager", "callback", "_positions", "indexed")

    def __init__(self, delay_ms: float, params: FetchParams, topics, replica_manager: FetchSource,
                 callback: Callable[[list], None], positions: list | None = None) -> None:
        # DelayedOperation.__init__'s fields, set here: no super() call per parked fetch (issue 29)
        self.delay_ms = delay_ms
        self.completed = False
        self._timer = None
        self._keys = ()
        self._purgatory = None
        self.params = params
        self.topics = topics  # [(topic, [FetchPartition])]
        self.replica_manager = replica_manager
        self.callback = callback
        self.indexed = False  # in a FetchPurgatory's wake-up heap
        # Per fetched partition, in request order: (its log, (segment base, position) of the
        # fetch offset) when parked — Kafka's fetchOffsetMetadata. ``positions``: the caller
        # worked them out (ReplicaManager.fetch_messages: a follower at the LEO).
        if positions is not None:
            self._positions = positions
            return
        positions = []
        get_partition = replica_manager.partitions.get
        for topic, parts in topics:
            for fp in parts:
                partition = get_partition((topic, fp.partition))
                log = partition.log if partition is not None else None
                meta = None
                if log is not None and log.log_start_offset <= fp.fetch_offset <= log.log_end_offset:
                    meta = log.offset_metadata(fp.fetch_offset)
                positions.append((log, meta))
        self._positions = positions

    def wake_level(self) -> tuple[tuple[str, int], bool, tuple[int, int]] | None:
        """For a fetch of one partition: (partition, whether it reads to the LEO, the end
        position (segment base, byte position) from which it completes). The end reaching it
        is what ``try_complete`` would find enough; None for fetches of several partitions."""
        if len(self._positions) != 1 or self.params.isolation == FETCH_TXN_COMMITTED:
            # (read_committed reads to the last stable offset, whose position no heap level
            # follows: such fetches are tried on every append)
            return None
        log, meta = self._positions[0]
        if log is None or meta is None:
            return None
        topic, parts = self.topics[0]
        fp = parts[0]
        min_bytes = max(1, self.params.min_bytes)
        base, position = meta
        threshold = position + min_bytes if fp.partition_max_bytes >= min_bytes else WAKE_NEVER
        return (topic, fp.partition), self.params.isolation == FETCH_LOG_END, (base, threshold)

    def try_complete(self) -> bool:
        params = self.params
        get_partition = self.replica_manager.partitions.get
        isolation = params.isolation
        from_leo = isolation == FETCH_LOG_END
        committed = isolation == FETCH_TXN_COMMITTED
        require_leader = params.require_leader
        min_bytes = params.min_bytes
        positions = self._positions
        accumulated = 0
        i = 0
        throttled = None
        if params.replica_id >= 0:
            quotas = self.replica_manager.replication_quotas
            if quotas is not None and quotas.leader.throttled:  # KIP-73 leader throttle set: ask per partition
                throttled = self.replica_manager.leader_throttled
        for topic, parts in self.topics:
            for fp in parts:
                parked_log, fetch_meta = positions[i]
                i += 1
                partition = get_partition((topic, fp.partition))
                if partition is None:
                    return self.force_complete()
                log = partition.log
                if log is None or log is not parked_log or fetch_meta is None:
                    return self.force_complete()
                if require_leader and not partition.is_leader:
                    return self.force_complete()
                fetch_offset = fp.fetch_offset
                leo = log.log_end_offset
                if fetch_offset > leo or fetch_offset < log.log_start_offset:
                    return self.force_complete()
                if throttled is not None and throttled(partition, params.replica_id):
                    continue  # Kafka: a throttled replica's new data does not complete the fetch early
                end = leo if from_leo else (log.last_stable_offset if committed else log.high_watermark)
                if end > fetch_offset:
                    if min_bytes <= 1:
                        return self.force_complete()
                    if from_leo:
                        end_base, end_position = log.log_end_offset_metadata()
                    elif committed:
                        end_base, end_position = log.last_stable_offset_metadata()
                    else:
                        end_base, end_position = log.high_watermark_metadata()
                    fetch_base, fetch_position = fetch_meta
                    if end_base != fetch_base:
                        # A newer segment (a whole segment of new data or a roll), or the end
                        # moved below the fetch offset's segment (truncation): answer now.
                        return self.force_complete()
                    accumulated += min(end_position - fetch_position, fp.partition_max_bytes)
                    if accumulated >= min_bytes:
                        return self.force_complete()
        return False

    def reached(self) -> bool:
        """What ``try_complete`` answers once the end of this fetch's one partition reached its
        ``wake_level`` (FetchPurgatory.check_appended), without its checks: every one of them
        that is not about the end completes the fetch too (a partition gone or changed, not
        led, the offset outside the log), and an end at or past the level is one the fetch
        completes at. Only a follower whose data the leader throttles (KIP-73) waits on: it
        is tried as before. A try per woken fetch, two per acks=all produce at its leader
        (issue 29). Any new reason for try_complete to keep a fetch waiting must be added here
        (and in check_appended, which has this inline)."""
        if self.params.replica_id >= 0:
            quotas = self.replica_manager.replication_quotas
            if quotas is not None and quotas.leader.throttled:
                return self.try_complete()
        return self.force_complete()

    def force_complete(self) -> bool:
        # DelayedOperation.force_complete with _finish and on_complete inline (a completion per
        # parked follower fetch, two per acks=all produce at its leader, issue 29): a change
        # there is made here too. That one, the reference, is what a fetch of a purgatory with
        # ``lean`` off (or of none: never parked) gets (tests/broker/test_fetch_purgatory_lean.py)
        if self.completed:
            return False
        purgatory = self._purgatory
        if purgatory is None or not purgatory.lean:
            return DelayedOperation.force_complete(self)
        self.completed = True
        timer = self._timer
        if timer is not None:
            timer.cancel()
            self._timer = None
        purgatory._unwatch(self)
        try:
            # (from_purgatory=True, passed positionally: issue 29)
            self.callback(self.replica_manager.read_from_local_log(self.params, self.topics, True))
        except Exception:  # a failing callback must not break whoever triggered completion
            log.exception("DelayedFetch.on_complete failed")
        return True

    def on_complete(self) -> None:
        # (force_complete has this inline; this is the general path's: a purgatory's ``lean`` off)
        # (from_purgatory=True, passed positionally: issue 29)
        self.callback(self.replica_manager.read_from_local_log(self.params, self.topics, True))


class FetchPurgatory(DelayedOperationPurgatory):
    """The Fetch purgatory: watchers keyed by partition (Kafka's), and for each partition two
    heaps of its single-partition fetches — those reading to the high watermark (consumers)
    and those reading to the LEO (followers) — ordered by the end position that completes
    them (``DelayedFetch.wake_level``).

    ``check_appended`` is the append path: the partition's end only moved forward, so only
    the fetches whose wake-up position it reached are tried (plus fetches of several
    partitions, which are always tried): 1,000 fetches parked on a partition cost a heap peek
    per append, not 1,000 checks. Every other change (leadership, truncation, ISR) goes
    through ``check_and_complete``, which tries them all.
    """

    def __init__(self, name: str, time) -> None:
        super().__init__(name, time, timer_per_delay=True)  # one timer per delay (issue 29)
        self._heaps: dict[tuple[Hashable, bool], list[tuple[tuple[int, int], int, DelayedFetch]]] = {}
        self._unindexed: dict[Hashable, dict[DelayedOperation, None]] = {}
        self._seq = itertools.count()

    def watch(self, op: DelayedOperation, keys: Iterable[Hashable],
              wake: tuple[tuple[str, int], bool, tuple[int, int]] | None = None) -> None:
        """``wake``: ``op.wake_level()`` when the caller knows it (ReplicaManager.fetch_messages)."""
        keys = tuple(keys)
        DelayedOperationPurgatory.watch(self, op, keys)
        if wake is None:
            wake = op.wake_level() if isinstance(op, DelayedFetch) else None
            if wake is None:
                for key in keys:
                    self._unindexed.setdefault(key, {})[op] = None
                return
        key, from_leo, threshold = wake
        assert isinstance(op, DelayedFetch)
        op.indexed = True
        heapq.heappush(self._heaps.setdefault((key, from_leo), []), (threshold, next(self._seq), op))

    def park(self, op: "DelayedFetch", key: Hashable, threshold: tuple[int, int]) -> None:
        """``watch(op, (key,), (key, True, threshold))``, its steps for that case inline (a
        follower's fetch parked at the LEO, ReplicaManager.fetch_messages: two per acks=all
        produce at its leader, issue 29); tests/broker/test_fetch_purgatory_lean.py compares them."""
        self._watch_one(op, key)
        op.indexed = True
        heap = self._heaps.get((key, True))
        if heap is None:
            self._heaps[(key, True)] = [(threshold, next(self._seq), op)]
        else:
            heapq.heappush(heap, (threshold, next(self._seq), op))

    def check_appended(self, key: Hashable, log: "Log") -> int:
        """After an append to ``key``'s ``log`` (and any move of its high watermark that
        followed): complete what the new end completes. Returns how many completed."""
        if key not in self._watchers:
            return 0
        done = 0
        unindexed = self._unindexed.get(key)
        if unindexed:
            for op in list(unindexed):
                if not op.completed and op.try_complete():
                    done += 1
        # the followers' heap (to the LEO), then the consumers' (to the high watermark), each
        # popped while its head's level is reached; an op reached() keeps waiting (a KIP-73
        # throttle) goes back. (The two written out, not a loop: every append, issue 29.)
        heaps = self._heaps
        heap = heaps.get((key, True))
        if heap:
            level = log.log_end_offset_metadata()
            again = None
            lean = self.lean
            while heap and heap[0][0] <= level:
                entry = heapq.heappop(heap)
                op = entry[2]
                if op.completed:
                    continue
                # op.reached(), inline (a woken follower's fetch, two per acks=all produce); with
                # ``lean`` off, reached() itself (the reference, tests/broker/test_fetch_purgatory_lean.py)
                if not lean:
                    reached = op.reached()
                elif op.params.replica_id >= 0:
                    quotas = op.replica_manager.replication_quotas
                    reached = (op.try_complete() if quotas is not None and quotas.leader.throttled
                               else op.force_complete())
                else:
                    reached = op.force_complete()
                if reached:
                    done += 1
                elif again is None:
                    again = [entry]
                else:
                    again.append(entry)
            if again is not None:
                for entry in again:
                    heapq.heappush(heap, entry)
        heap = heaps.get((key, False))
        if heap:
            level = log.high_watermark_metadata()
            again = None
            while heap and heap[0][0] <= level:
                entry = heapq.heappop(heap)
                op = entry[2]
                if op.completed:
                    continue
                if op.reached():
                    done += 1
                elif again is None:
                    again = [entry]
                else:
                    again.append(entry)
            if again is not None:
                for entry in again:
                    heapq.heappush(heap, entry)
        return done

    # _unwatch's case of an indexed fetch, check_appended's inline DelayedFetch.reached and
    # DelayedFetch.force_complete's inline steps (False: the general path for all three,
    # tests/broker/test_fetch_purgatory_lean.py, tests/broker/test_apis_lean.py)
    lean = True

    def _unwatch(self, op: DelayedOperation) -> None:
        keys = op._keys
        if len(keys) == 1 and op.__class__ is DelayedFetch and op.indexed and self.lean:
            # A fetch in a wake-up heap (one key, never among the unindexed): the general path's
            # steps for it below, inline (every completed follower fetch, issue 29)
            key = keys[0]
            watchers = self._watchers
            live = watchers.get(key)
            if live is not None:
                live.pop(op, None)
                if not live:
                    del watchers[key]
                    live = None
            op._keys = ()
            heaps = self._heaps
            heap = heaps.get((key, True))
            if heap is not None:
                if not live:
                    del heaps[(key, True)]
                elif len(heap) > 2 * len(live) + 64:  # completed entries leave lazily; compact
                    heap[:] = [e for e in heap if not e[2].completed]
                    heapq.heapify(heap)
            heap = heaps.get((key, False))
            if heap is not None:
                if not live:
                    del heaps[(key, False)]
                elif len(heap) > 2 * len(live) + 64:
                    heap[:] = [e for e in heap if not e[2].completed]
                    heapq.heapify(heap)
            return
        DelayedOperationPurgatory._unwatch(self, op)
        all_unindexed = self._unindexed
        if all_unindexed:
            for key in keys:
                unindexed = all_unindexed.get(key)
                if unindexed is not None:
                    unindexed.pop(op, None)
                    if not unindexed:
                        del all_unindexed[key]
        if isinstance(op, DelayedFetch) and op.indexed:
            # (an indexed fetch has one key; its two heaps written out, as in check_appended)
            for key in keys:
                live = self._watchers.get(key)
                heaps = self._heaps
                heap = heaps.get((key, True))
                if heap is not None:
                    if not live:
                        del heaps[(key, True)]
                    elif len(heap) > 2 * len(live) + 64:  # completed entries leave lazily; compact
                        heap[:] = [e for e in heap if not e[2].completed]
                        heapq.heapify(heap)
                heap = heaps.get((key, False))
                if heap is not None:
                    if not live:
                        del heaps[(key, False)]
                    elif len(heap) > 2 * len(live) + 64:
                        heap[:] = [e for e in heap if not e[2].completed]
                        heapq.heapify(heap)
