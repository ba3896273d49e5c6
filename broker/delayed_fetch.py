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

from typing import Callable, Protocol

from .fetch_params import FetchParams
from .partition import FETCH_LOG_END, Partition
from .purgatory import DelayedOperation


class FetchSource(Protocol):
    """The two calls a DelayedFetch makes (the ReplicaManager provides them)."""

    def get_partition(self, topic: str, partition: int) -> Partition | None: ...

    def read_from_local_log(self, params: FetchParams, topics) -> list: ...


class DelayedFetch(DelayedOperation):
    __slots__ = ("params", "topics", "replica_manager", "callback", "_positions")

    def __init__(self, delay_ms: float, params: FetchParams, topics, replica_manager: FetchSource,
                 callback: Callable[[list], None]) -> None:
        super().__init__(delay_ms)
        self.params = params
        self.topics = topics  # [(topic, [FetchPartition])]
        self.replica_manager = replica_manager
        self.callback = callback
        # Per fetched partition, in request order: (its log, (segment base, position) of the
        # fetch offset) when parked — Kafka's fetchOffsetMetadata.
        positions = []
        get_partition = replica_manager.get_partition
        for topic, parts in topics:
            for fp in parts:
                partition = get_partition(topic, fp.partition)
                log = partition.log if partition is not None else None
                meta = None
                if log is not None and log.log_start_offset <= fp.fetch_offset <= log.log_end_offset:
                    meta = log.offset_metadata(fp.fetch_offset)
                positions.append((log, meta))
        self._positions = positions

    def try_complete(self) -> bool:
        params = self.params
        get_partition = self.replica_manager.get_partition
        from_leo = params.isolation == FETCH_LOG_END
        min_bytes = params.min_bytes
        positions = self._positions
        accumulated = 0
        i = 0
        for topic, parts in self.topics:
            for fp in parts:
                parked_log, fetch_meta = positions[i]
                i += 1
                partition = get_partition(topic, fp.partition)
                if partition is None or partition.log is None or partition.log is not parked_log or fetch_meta is None:
                    return self.force_complete()
                if params.require_leader and not partition.is_leader:
                    return self.force_complete()
                log = partition.log
                fetch_offset = fp.fetch_offset
                if fetch_offset > log.log_end_offset or fetch_offset < log.log_start_offset:
                    return self.force_complete()
                end = log.log_end_offset if from_leo else log.high_watermark
                if end > fetch_offset:
                    if min_bytes <= 1:
                        return self.force_complete()
                    end_base, end_position = log.log_end_offset_metadata() if from_leo else log.high_watermark_metadata()
                    fetch_base, fetch_position = fetch_meta
                    if end_base != fetch_base:
                        # A newer segment (a whole segment of new data or a roll), or the end
                        # moved below the fetch offset's segment (truncation): answer now.
                        return self.force_complete()
                    accumulated += min(end_position - fetch_position, fp.partition_max_bytes)
                    if accumulated >= min_bytes:
                        return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.callback(self.replica_manager.read_from_local_log(self.params, self.topics))
