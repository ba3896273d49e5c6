"""DelayedProduce: an acks=-1 produce waiting for the high watermark to pass its writes.

Completion cases, checked per partition still pending (Kafka's DelayedProduce):
  A. this broker no longer hosts the partition  → UNKNOWN_TOPIC_OR_PARTITION
  B. this broker is no longer its leader         → NOT_LEADER_OR_FOLLOWER
  C. HW ≥ the required offset                    → NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND
     if the ISR shrank below min.insync.replicas while waiting
Each pending partition starts at REQUEST_TIMED_OUT, so expiring is just completing.
"""

from __future__ import annotations

from typing import Callable, Protocol

from protocol.errors import ErrorCode

from .partition import Partition
from .purgatory import DelayedOperation


class PartitionSource(Protocol):
    """The one call a DelayedProduce makes (the ReplicaManager provides it)."""

    def get_partition(self, topic: str, partition: int) -> Partition | None: ...


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
        super().__init__(delay_ms)
        self.statuses = statuses
        self.replica_manager = replica_manager
        self.callback = callback

    def try_complete(self) -> bool:
        pending = False
        for status in self.statuses:
            if not status.acks_pending:
                continue
            partition = self.replica_manager.get_partition(*status.key)
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

    def on_complete(self) -> None:
        self.callback()
