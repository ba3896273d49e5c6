"""DelayedDeleteRecords: a DeleteRecords waiting until every live replica has moved its log
start offset past the offset asked for (Kafka's DelayedDeleteRecords).

The leader moves its own log start offset at once; followers learn it from the next fetch
answer and report theirs in their next fetch request. The partition's low watermark is the
smallest log start offset over the leader and its followers on live brokers
(``Partition.low_watermark``). Completion cases, per partition still pending:
  A. this broker no longer hosts the partition  → UNKNOWN_TOPIC_OR_PARTITION
  B. this broker is no longer its leader         → NOT_LEADER_OR_FOLLOWER
  C. low watermark ≥ the offset asked for        → NONE, with that low watermark
Each pending partition starts at REQUEST_TIMED_OUT (low watermark -1), so expiring is just completing.
"""

from __future__ import annotations

from typing import Callable

from protocol.errors import ErrorCode

from .delayed_produce import PartitionSource
from .purgatory import DelayedOperation


class DeleteRecordsPartitionStatus:
    __slots__ = ("key", "required_offset", "result", "pending")

    def __init__(self, key: tuple[str, int], required_offset: int, result: dict) -> None:
        self.key = key
        self.required_offset = required_offset
        self.result = result  # {"partition_index", "low_watermark", "error_code"}
        self.pending = result["error_code"] == ErrorCode.NONE
        if self.pending:
            result["error_code"], result["low_watermark"] = ErrorCode.REQUEST_TIMED_OUT, -1


class DelayedDeleteRecords(DelayedOperation):
    __slots__ = ("statuses", "replica_manager", "is_alive", "callback")

    def __init__(self, delay_ms: float, statuses: list[DeleteRecordsPartitionStatus], replica_manager: PartitionSource,
                 is_alive: Callable[[int], bool], callback: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.replica_manager = replica_manager
        self.is_alive = is_alive
        self.callback = callback

    def try_complete(self) -> bool:
        pending = False
        for status in self.statuses:
            if not status.pending:
                continue
            partition = self.replica_manager.get_partition(*status.key)
            low = -1
            if partition is None:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not partition.is_leader or partition.log is None:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                low = partition.low_watermark(self.is_alive)
                if low < status.required_offset:
                    pending = True
                    continue
                error = ErrorCode.NONE
            status.pending = False
            status.result["error_code"], status.result["low_watermark"] = error, low
        if pending:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        self.callback()
