"""DeleteRecords (21) on a partition leader, Kafka's ``ReplicaManager.deleteRecords`` and
``DelayedDeleteRecords``: the leader moves its log start offset to the requested offset (-1: the
high watermark; above it, or below -1, OFFSET_OUT_OF_RANGE), and the answer waits until the
partition's low watermark (the smallest log start offset of the leader and of the followers
that reported one in their fetches) has reached it, or the request's timeout
(REQUEST_TIMED_OUT). Followers learn the new log start offset from the leader's fetch
responses and report theirs in their next fetch."""

from __future__ import annotations

from typing import Callable

from protocol.errors import ErrorCode

from .partition import Partition
from .purgatory import DelayedOperation

Key = tuple[str, int]


def low_watermark(partition: Partition) -> int:
    """Kafka's lowWatermarkIfLeader: the smallest known log start offset of the replicas."""
    assert partition.log is not None
    starts = [r.log_start_offset for r in partition.remote_replicas.values() if r.log_start_offset >= 0]
    return min([partition.log.log_start_offset, *starts])


class DelayedDeleteRecords(DelayedOperation):
    __slots__ = ("pending", "results", "lookup", "respond")

    def __init__(self, delay_ms: float, pending: dict[Key, int], results: dict[Key, tuple[int, int]],
                 lookup: Callable[[str, int], Partition | None],
                 respond: Callable[[dict[Key, tuple[int, int]]], None]) -> None:
        """``pending``: partition -> the offset its low watermark must reach; ``results``:
        (low watermark, error) of the partitions already answered."""
        super().__init__(delay_ms)
        self.pending = dict(pending)
        self.results = results
        self.lookup = lookup
        self.respond = respond

    def try_complete(self) -> bool:
        for key, required in list(self.pending.items()):
            partition = self.lookup(*key)
            if partition is None or not partition.is_leader or partition.log is None:
                self.results[key] = (-1, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                del self.pending[key]
                continue
            low = low_watermark(partition)
            if low >= required:
                self.results[key] = (low, ErrorCode.NONE)
                del self.pending[key]
        return not self.pending and self.force_complete()

    def on_complete(self) -> None:
        for key in self.pending:
            self.results[key] = (-1, ErrorCode.REQUEST_TIMED_OUT)
        self.respond(self.results)
