"""The cluster-operations helpers of ``KafkaClient`` (issue 27): partition reassignments
(KIP-455), log dirs, DeleteRecords, DescribeCluster, configs of any resource, client quotas.

``ClusterAdminMixin`` is mixed into ``KafkaClient`` beside ``AdminMixin``; it uses the client's
connections, metadata and retries, and nothing else.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, NamedTuple, TypeVar

from ..api_keys import ApiKey
from ..errors import ErrorCode
from .connection import BrokerConnection, wire_error
from .metadata import TopicPartition

T = TypeVar("T")
TP = TypeVar("TP", bound=tuple[str, int])


class OngoingReassignment(NamedTuple):
    """A partition being moved: its replicas now (the target, then those leaving), and which
    are being added and removed."""

    replicas: list[int]
    adding: list[int]
    removing: list[int]


def _retry_if_not_controller(code: int) -> None:
    """NOT_CONTROLLER / REQUEST_TIMED_OUT at the top level (no controller reached yet): retried."""
    if code in (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT):
        raise wire_error(code, "the controller")


class ClusterAdminMixin:
    """The cluster-operations helpers, written against the calls of ``KafkaClient`` declared below."""

    if TYPE_CHECKING:  # provided by KafkaClient
        async def with_retries(self, attempt: Callable[[], Awaitable[T]], topics: Iterable[str] = ()) -> T: ...
        async def connection(self, node_id: int) -> BrokerConnection: ...
        async def any_connection(self) -> BrokerConnection: ...
        async def _controller_connection(self) -> BrokerConnection: ...

    # -- partition reassignment (KIP-455): any broker forwards it to the controller --------

    async def alter_partition_reassignments(self, moves: Mapping[TP, Iterable[int] | None],
                                            timeout_ms: int = 60000) -> dict[TopicPartition, tuple[int, str | None]]:
        """Move each partition to its replicas (None: cancel its reassignment in progress);
        per partition, (error code, message)."""
        by_topic: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for (topic, partition), replicas in moves.items():
            by_topic[topic].append({"partition_index": partition,
                                    "replicas": None if replicas is None else list(replicas)})
        body = {"timeout_ms": timeout_ms, "allow_replication_factor_change": True,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        async def attempt() -> Any:
            conn = await self._controller_connection()
            response = await conn.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, body)
            _retry_if_not_controller(response.error_code)
            if response.error_code:
                raise wire_error(response.error_code, "AlterPartitionReassignments", response.error_message)
            return response
        response = await self.with_retries(attempt)
        return {TopicPartition(t.name, p.partition_index): (p.error_code, p.error_message)
                for t in response.responses for p in t.partitions}

    async def list_partition_reassignments(self, partitions: Iterable[tuple[str, int]] | None = None,
                                           timeout_ms: int = 60000) -> dict[TopicPartition, OngoingReassignment]:
        """The reassignments in progress (of ``partitions``, or all)."""
        topics: list[dict[str, Any]] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = collections.defaultdict(list)
            for topic, partition in partitions:
                by_topic[topic].append(partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]

        async def attempt() -> Any:
            conn = await self._controller_connection()
            response = await conn.request(ApiKey.LIST_PARTITION_REASSIGNMENTS,
                                          {"timeout_ms": timeout_ms, "topics": topics})
            _retry_if_not_controller(response.error_code)
            if response.error_code:
                raise wire_error(response.error_code, "ListPartitionReassignments", response.error_message)
            return response
        response = await self.with_retries(attempt)
        return {TopicPartition(t.name, p.partition_index): OngoingReassignment(
            list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in response.topics for p in t.partitions}
