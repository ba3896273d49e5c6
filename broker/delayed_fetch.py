"""DelayedFetch: a Fetch long-poll waiting for min_bytes (or max_wait_ms).

It completes early when (Kafka's cases) a partition is no longer hosted or no longer led
here, the fetch offset fell outside the log (truncation), or enough bytes have become
readable: new data for a follower (LEO moved), a moved high watermark for a consumer.
On completion it reads again and answers with whatever is there then.
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
    __slots__ = ("params", "topics", "replica_manager", "callback")

    def __init__(self, delay_ms: float, params: FetchParams, topics, replica_manager: FetchSource,
                 callback: Callable[[list], None]) -> None:
        super().__init__(delay_ms)
        self.params = params
        self.topics = topics  # [(topic, [FetchPartition])]
        self.replica_manager = replica_manager
        self.callback = callback

    def try_complete(self) -> bool:
        params = self.params
        get_partition = self.replica_manager.get_partition
        accumulated = 0
        for topic, parts in self.topics:
            for fp in parts:
                partition = get_partition(topic, fp.partition)
                if partition is None or partition.log is None:
                    return self.force_complete()
                if params.require_leader and not partition.is_leader:
                    return self.force_complete()
                log = partition.log
                end = log.log_end_offset if params.isolation == FETCH_LOG_END else log.high_watermark
                if fp.fetch_offset > log.log_end_offset or fp.fetch_offset < log.log_start_offset:
                    return self.force_complete()
                if end > fp.fetch_offset:
                    if params.min_bytes <= 1:
                        return self.force_complete()
                    data = log.read(fp.fetch_offset, fp.partition_max_bytes, max_offset=end, min_one_batch=True)
                    accumulated += len(data.records)
                    if accumulated >= params.min_bytes:
                        return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.callback(self.replica_manager.read_from_local_log(self.params, self.topics))
