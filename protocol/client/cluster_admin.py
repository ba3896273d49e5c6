"""The cluster-operations helpers of ``KafkaClient`` (issue 27): partition reassignments
(KIP-455), log dirs, DeleteRecords, DescribeCluster, configs of any resource, client quotas.

``ClusterAdminMixin`` is mixed into ``KafkaClient`` beside ``AdminMixin``; it uses the client's
connections, metadata and retries, and nothing else.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, NamedTuple, Sequence, TypeVar

from ..api_keys import ApiKey
from ..errors import ErrorCode, KafkaError
from .connection import BrokerConnection, wire_error
from .metadata import ClusterMetadata, TopicPartition

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
        async def leader_for(self, topic: str, partition: int) -> int: ...
        async def ask_leaders(self, pending: Iterable[TopicPartition],
                              ask: Callable[[int, list[TopicPartition]], Awaitable[Sequence[Exception]]]) -> None: ...
        async def refresh_metadata(self, topics: Iterable[str] | None = None,
                                   allow_auto_create: bool = False) -> ClusterMetadata: ...
        async def _topics_admin(self, api_key: int, results_field: str, body: Mapping[str, Any]) -> None: ...

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

    # -- DeleteRecords (to each partition's leader), DescribeLogDirs (to each broker) -----

    async def delete_records(self, offsets: Mapping[TP, int], timeout_ms: int = 30000) -> dict[TopicPartition, int]:
        """Move each partition's log start offset to ``offset`` (-1: its high watermark);
        per partition, its new low watermark. A partition's error is raised (retriable ones,
        a leader that moved, retried)."""
        pending = {TopicPartition(*tp): off for tp, off in offsets.items()}
        done: dict[TopicPartition, int] = {}

        async def ask(node: int, tps: list[TopicPartition]) -> list[Exception]:
            conn = await self.connection(node)
            by_topic: dict[str, list[dict[str, int]]] = collections.defaultdict(list)
            for tp in tps:
                by_topic[tp.topic].append({"partition_index": tp.partition, "offset": pending[tp]})
            response = await conn.request(ApiKey.DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()], "timeout_ms": timeout_ms})
            errors: list[Exception] = []
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        errors.append(wire_error(p.error_code, f"DeleteRecords {t.name}-{p.partition_index}"))
                    elif tp in pending:
                        del pending[tp]
                        done[tp] = p.low_watermark
            return errors

        await self.with_retries(lambda: self.ask_leaders(pending, ask), sorted({tp.topic for tp in pending}))
        return done

    async def describe_log_dirs(self, broker_ids: Iterable[int] | None = None,
                                partitions: Iterable[tuple[str, int]] | None = None) -> dict[int, list[LogDirInfo]]:
        """Per broker (all live ones by default), its log dirs: path, error, total and usable
        bytes, and the size and offset lag of each partition (of ``partitions``, or all)."""
        if broker_ids is None:
            broker_ids = sorted((await self.refresh_metadata([])).brokers)
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = collections.defaultdict(list)
            for topic, partition in partitions:
                by_topic[topic].append(partition)
            topics = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
        out: dict[int, list[LogDirInfo]] = {}
        for node in broker_ids:
            async def attempt(node: int = node) -> Any:
                conn = await self.connection(node)
                response = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": topics})
                if response.get("error_code", 0):
                    raise wire_error(response.error_code, f"DescribeLogDirs of broker {node}")
                return response
            response = await self.with_retries(attempt)
            out[node] = [LogDirInfo(r.log_dir, r.error_code, r.get("total_bytes", -1), r.get("usable_bytes", -1),
                                    {TopicPartition(t.name, p.partition_index): (p.partition_size, p.offset_lag)
                                     for t in r.topics for p in t.partitions})
                         for r in response.results]
        return out

    async def describe_cluster(self) -> Any:
        """DescribeCluster: cluster id, controller id, brokers (with racks) and the cluster
        operations this principal may perform (a bit set)."""
        async def attempt() -> Any:
            conn = await self.any_connection()
            response = await conn.request(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True})
            if response.error_code:
                raise wire_error(response.error_code, "DescribeCluster", response.error_message)
            return response
        return await self.with_retries(attempt)


    # -- partitions and configs of any resource ------------------------------------------

    async def create_partitions(self, topic: str, total: int, timeout_ms: int = 30000) -> None:
        """CreatePartitions: ``topic`` grows to ``total`` partitions (its error raised)."""
        await self._topics_admin(ApiKey.CREATE_PARTITIONS, "results", {
            "topics": [{"name": topic, "count": total, "assignments": None}], "timeout_ms": timeout_ms,
            "validate_only": False})

    async def describe_resource_configs(self, resource_type: int, name: str,
                                        node: int | None = None) -> list[tuple[str, str | None, int, bool, bool]]:
        """DescribeConfigs of a topic (2) or broker (4; name "" the cluster-wide defaults), sent to
        ``node`` (a broker's own configs are asked of it) or any broker; each key as (name, value,
        source, read_only, sensitive)."""
        async def attempt() -> Any:
            conn = await (self.connection(node) if node is not None else self.any_connection())
            return await conn.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": False, "include_documentation": False})
        response = await self.with_retries(attempt)
        result = response.results[0]
        if result.error_code:
            raise wire_error(result.error_code, name or "broker defaults", result.error_message)
        return [(c.name, c.value, c.get("config_source", -1), c.read_only, c.is_sensitive) for c in result.configs]

    async def incremental_alter_configs(self, resource_type: int, name: str,
                                        ops: Iterable[tuple[str, int, str | None]], node: int | None = None) -> None:
        """IncrementalAlterConfigs of one resource: ``ops`` are (key, operation: 0 SET 1 DELETE
        2 APPEND 3 SUBTRACT, value), sent to ``node`` (Kafka's AdminClient sends a broker's own
        configs to that broker) or any broker; the resource's error is raised."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": False}

        async def attempt() -> Any:
            conn = await (self.connection(node) if node is not None else self.any_connection())
            return await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, body)
        response = await self.with_retries(attempt)
        r = response.responses[0]
        if r.error_code:
            raise wire_error(r.error_code, name or "broker defaults", r.error_message)

    async def unregister_broker(self, broker_id: int) -> None:
        """UnregisterBroker (64) through any broker, which forwards it to the controller."""
        async def attempt() -> Any:
            conn = await self.any_connection()
            response = await conn.request(ApiKey.UNREGISTER_BROKER, {"broker_id": broker_id})
            _retry_if_not_controller(response.error_code)
            return response
        response = await self.with_retries(attempt)
        if response.error_code:
            raise wire_error(response.error_code, f"UnregisterBroker {broker_id}", response.error_message)
    # -- client quotas (KIP-546): any broker forwards them to the controller -------------

    async def alter_client_quotas(self, entries: Iterable[tuple[Mapping[str, str | None], Mapping[str, float | None]]],
                                  validate_only: bool = False) -> list[KafkaError | None]:
        """AlterClientQuotas (49): ``entries`` are (entity, ops): the entity as
        {entity type: name, None for the default}, e.g. {"user": "alice", "client-id": None};
        ops as {key: value, None to remove it}. Per entry, None or its error."""
        body = {"validate_only": validate_only, "entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
             "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None} for k, v in ops.items()]}
            for entity, ops in entries]}

        async def attempt() -> Any:
            conn = await self.any_connection()
            response = await conn.request(ApiKey.ALTER_CLIENT_QUOTAS, body)
            for e in response.entries:
                _retry_if_not_controller(e.error_code)
            return response
        response = await self.with_retries(attempt)
        return [wire_error(e.error_code, "AlterClientQuotas", e.error_message) if e.error_code else None
                for e in response.entries]

    async def describe_client_quotas(self, components: Iterable[tuple[str, int, str | None]] = (),
                                     strict: bool = False) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """DescribeClientQuotas (48): ``components`` are (entity type, match type: 0 exact
        name, 1 the default, 2 any, name); none matches every entity. Each matching entity
        ({type: name, None for the default}) with its quotas; the request's error is raised."""
        body = {"components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
                "strict": strict}

        async def attempt() -> Any:
            conn = await self.any_connection()
            response = await conn.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, body)
            _retry_if_not_controller(response.error_code)
            return response
        response = await self.with_retries(attempt)
        if response.error_code:
            raise wire_error(response.error_code, "DescribeClientQuotas", response.error_message)
        return [({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry["values"]})
                for entry in response.entries or ()]


class LogDirInfo(NamedTuple):
    """One log dir of a broker, as DescribeLogDirs gives it."""

    path: str
    error_code: int
    total_bytes: int
    usable_bytes: int
    partitions: dict[TopicPartition, tuple[int, int]]  # (size in bytes, offset lag)
