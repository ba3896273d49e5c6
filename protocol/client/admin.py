"""The admin helpers of ``KafkaClient``: create and delete topics, describe configs, get a
producer id, list offsets (by timestamp, earliest or latest), create, describe and delete ACLs,
describe and alter SCRAM credentials.

``AdminMixin`` is mixed into ``KafkaClient``; it uses the client's connections, metadata and
retries, and nothing else.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import secrets
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, NamedTuple, Sequence, TypeVar

from ..acl import AclBinding, AclBindingFilter
from ..api_keys import ApiKey
from ..errors import ErrorCode, KafkaError
from ..messages import APIS
from .connection import BrokerConnection, wire_error
from .metadata import ClusterMetadata, TopicPartition

T = TypeVar("T")
TP = TypeVar("TP", bound=tuple[str, int])  # a TopicPartition or a plain (topic, partition)


class ConfigEntry(NamedTuple):
    """One configuration key of a DescribeConfigs answer."""

    name: str
    value: str | None
    source: int  # DescribeConfigs ConfigSource: 1 topic, 4 static broker, 5 default, ...
    read_only: bool
    sensitive: bool


# SCRAM mechanisms as AlterUserScramCredentials names them (Kafka's ScramMechanism types) and
# the hash of each (RFC 5802 Hi() is PBKDF2 with HMAC of it).
SCRAM_MECHANISMS: dict[str, tuple[int, str]] = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
SCRAM_MECHANISM_NAMES: dict[int, str] = {type_id: name for name, (type_id, _h) in SCRAM_MECHANISMS.items()}
DEFAULT_SCRAM_ITERATIONS = 4096  # kafka-configs.sh's default


class ScramUpsertion(NamedTuple):
    user: str
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    password: str
    iterations: int = DEFAULT_SCRAM_ITERATIONS


def scram_salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, iterations) of the mechanism: what AlterUserScramCredentials carries
    (the password itself never leaves the client, as with Kafka's admin client)."""
    return hashlib.pbkdf2_hmac(SCRAM_MECHANISMS[mechanism][1], password.encode("utf-8"), salt, iterations)


def _binding(r: Any, acl: Any) -> AclBinding:
    return AclBinding(r.resource_type, r.resource_name, r.get("pattern_type", 3), acl.principal, acl.host,
                      acl.operation, acl.permission_type)


class AdminMixin:
    """The admin helpers, written against the calls of ``KafkaClient`` declared below."""

    if TYPE_CHECKING:  # provided by KafkaClient
        cluster: ClusterMetadata
        async def with_retries(self, attempt: Callable[[], Awaitable[T]], topics: Iterable[str] = ()) -> T: ...
        async def connection(self, node_id: int) -> BrokerConnection: ...
        async def any_connection(self) -> BrokerConnection: ...
        async def leader_for(self, topic: str, partition: int) -> int: ...
        async def _controller_connection(self) -> BrokerConnection: ...

    async def create_topics(self, topics: Iterable[tuple[str, int, int, Mapping[str, str] | None]],
                            timeout_ms: int = 30000, validate_only: bool = False) -> None:
        """Create topics given as (name, partitions, replication_factor, configs); raises the
        first topic's error (TopicAlreadyExistsError, InvalidPartitionsError, ...)."""
        await self._topics_admin(ApiKey.CREATE_TOPICS, "topics", {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
                       for name, partitions, replication_factor, configs in topics],
            "timeout_ms": timeout_ms, "validate_only": validate_only})

    async def delete_topics(self, names: Iterable[str], timeout_ms: int = 30000) -> None:
        """Delete topics; raises the first topic's error (UnknownTopicOrPartitionError, ...)."""
        await self._topics_admin(ApiKey.DELETE_TOPICS, "responses", {"topic_names": list(names),
                                                                     "timeout_ms": timeout_ms})

    async def _topics_admin(self, api_key: int, results_field: str, body: Mapping[str, Any]) -> None:
        """Send CreateTopics/DeleteTopics to the controller, again if it moved (NOT_CONTROLLER);
        other per-topic errors are final, as in Kafka's AdminClient."""
        async def attempt() -> list[tuple[str, int, str | None]]:
            conn = await self._controller_connection()
            response = await conn.request(api_key, body)
            results = [(r.name, r.error_code, r.get("error_message")) for r in response[results_field]]
            if any(code == ErrorCode.NOT_CONTROLLER for _name, code, _message in results):
                raise wire_error(ErrorCode.NOT_CONTROLLER, APIS[api_key].name)
            return results
        for name, code, message in await self.with_retries(attempt):
            if code:
                raise wire_error(code, name, message)

    async def elect_leaders(self, partitions: Iterable[tuple[str, int]] | None, election_type: int = 0,
                            timeout_ms: int = 60000) -> dict[TopicPartition, int]:
        """ElectLeaders (0 preferred, 1 unclean) for ``partitions`` (None: every partition, and
        the answer leaves out those needing no election); each partition's error code (0: a
        leader was elected; ELECTION_NOT_NEEDED: the wanted one leads already). Sent to the
        controller (a broker relays it), again if it moved."""
        body: dict[str, Any] = {"election_type": election_type, "timeout_ms": timeout_ms, "topic_partitions": None}
        if partitions is not None:
            by_topic: dict[str, list[int]] = collections.defaultdict(list)
            for topic, partition in partitions:
                by_topic[topic].append(partition)
            body["topic_partitions"] = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]

        async def attempt() -> Any:  # the ElectLeaders response
            conn = await self._controller_connection()
            version = conn.version_for(ApiKey.ELECT_LEADERS, min_v=1 if election_type else None)
            response = await conn.request(ApiKey.ELECT_LEADERS, body, version)
            if response.get("error_code", 0):
                raise wire_error(response.error_code, "ElectLeaders")
            return response
        response = await self.with_retries(attempt)
        return {TopicPartition(r.topic, p.partition_id): p.error_code
                for r in response.replica_election_results for p in r.partition_result}

    async def describe_configs(self, topic: str) -> list[ConfigEntry]:
        """The topic's configuration, every key with its value and where it comes from."""
        async def attempt() -> Any:  # the DescribeConfigs response
            conn = await self.any_connection()
            return await conn.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": 2, "resource_name": topic, "configuration_keys": None}]})
        response = await self.with_retries(attempt)
        result = response.results[0]
        if result.error_code:
            raise wire_error(result.error_code, topic, result.error_message)
        return [ConfigEntry(c.name, c.value, c.get("config_source", -1), c.read_only, c.is_sensitive)
                for c in result.configs]

    async def init_producer_id(self, transaction_timeout_ms: int = 60000) -> tuple[int, int]:
        """A new (producer id, epoch) for an idempotent producer, from any broker."""
        async def attempt() -> tuple[int, int]:
            conn = await self.any_connection()
            response = await conn.request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout_ms": transaction_timeout_ms})
            if response.error_code:
                raise wire_error(response.error_code, "InitProducerId")
            return response.producer_id, response.producer_epoch
        return await self.with_retries(attempt)

    async def list_offsets(self, topic: str, partition: int, timestamp: int,
                           isolation_level: int = 0) -> tuple[int, int]:
        """(offset, timestamp) for ``timestamp``: -2 the earliest offset, -1 the latest (the
        high watermark, or the last stable offset with isolation_level 1), else the first
        record at or after that time ((-1, -1) when there is none)."""
        found = await self.offsets_for_times({(topic, partition): timestamp}, isolation_level)
        return found[TopicPartition(topic, partition)] or (-1, -1)

    async def offsets_for_times(self, timestamps: Mapping[TP, int], isolation_level: int = 0, *,
                                leader_epochs: dict[TopicPartition, int] | None = None
                                ) -> dict[TopicPartition, tuple[int, int] | None]:
        """``list_offsets`` for many partitions at once, one request per leader; a partition
        with no record at or after its timestamp maps to None. With ``leader_epochs`` (a
        consumer's reset, KIP-320), each partition is asked with the leader epoch the metadata
        knows as its current_leader_epoch (a fenced or unknown one is retried after a metadata
        refresh) and ``leader_epochs`` receives the epoch of the offset found (-1 unknown)."""
        pending = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        found: dict[TopicPartition, tuple[int, int] | None] = {}

        async def ask(node: int, tps: list[TopicPartition]) -> list[KafkaError]:
            conn = await self.connection(node)
            by_topic: dict[str, list[dict[str, int]]] = collections.defaultdict(list)
            for tp in tps:
                entry = {"partition_index": tp.partition, "timestamp": pending[tp]}
                if leader_epochs is not None:
                    meta = self.cluster.partition(*tp)
                    entry["current_leader_epoch"] = -1 if meta is None else meta.leader_epoch
                by_topic[tp.topic].append(entry)
            version = conn.version_for(ApiKey.LIST_OFFSETS, min_v=2 if isolation_level else None)
            response = await conn.request(ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}, version)
            errors = []
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        errors.append(wire_error(p.error_code, f"ListOffsets {t.name}-{p.partition_index}"))
                    elif tp in pending:
                        del pending[tp]
                        found[tp] = None if p.offset < 0 else (p.offset, p.timestamp)
                        if leader_epochs is not None:
                            leader_epochs[tp] = p.get("leader_epoch", -1)
            return errors

        await self.with_retries(lambda: self.ask_leaders(pending, ask), sorted({tp.topic for tp in pending}))
        return found

    async def ask_leaders(self, pending: Iterable[TopicPartition],
                          ask: Callable[[int, list[TopicPartition]], Awaitable[Sequence[Exception]]]) -> None:
        """One attempt of a per-partition request sent to the leaders: ``ask(node, partitions)``
        for each leader at once, returning the partitions' errors; raises one of them, a retriable
        one first, so that ``with_retries`` retries the partitions still pending."""
        by_leader: dict[int, list[TopicPartition]] = collections.defaultdict(list)
        for tp in pending:
            by_leader[await self.leader_for(*tp)].append(tp)
        results = await asyncio.gather(*(ask(n, tps) for n, tps in by_leader.items()), return_exceptions=True)
        errors: list[BaseException] = []
        for r in results:
            if isinstance(r, BaseException):
                errors.append(r)
            else:
                errors.extend(r)
        if errors:
            raise next((e for e in errors if isinstance(e, KafkaError) and e.retriable), errors[0])

    # -- ACLs (KIP-140) and SCRAM credentials (KIP-554); any broker answers (or forwards) them --

    async def create_acls(self, bindings: Iterable[AclBinding]) -> list[KafkaError | None]:
        """CreateAcls: per binding, None (created, or there already) or its error."""
        creations = [{"resource_type": b.resource_type, "resource_name": b.resource_name,
                      "resource_pattern_type": b.pattern_type, "principal": b.principal, "host": b.host,
                      "operation": b.operation, "permission_type": b.permission_type} for b in bindings]

        async def attempt() -> Any:
            conn = await self.any_connection()
            response = await conn.request(ApiKey.CREATE_ACLS, {"creations": creations},
                                          conn.version_for(ApiKey.CREATE_ACLS, min_v=1))
            _raise_if_not_controller(r.error_code for r in response.results)
            return response
        response = await self.with_retries(attempt)
        return [wire_error(r.error_code, "CreateAcls", r.error_message) if r.error_code else None
                for r in response.results]

    async def describe_acls(self, acl_filter: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        """DescribeAcls: the bindings matching ``acl_filter``; raises the request's error
        (SecurityDisabledError without an authorizer, ClusterAuthorizationFailedError, ...)."""
        async def attempt() -> Any:
            conn = await self.any_connection()
            return await conn.request(ApiKey.DESCRIBE_ACLS, {
                "resource_type_filter": acl_filter.resource_type, "resource_name_filter": acl_filter.resource_name,
                "pattern_type_filter": acl_filter.pattern_type, "principal_filter": acl_filter.principal,
                "host_filter": acl_filter.host, "operation": acl_filter.operation,
                "permission_type": acl_filter.permission_type}, conn.version_for(ApiKey.DESCRIBE_ACLS, min_v=1))
        response = await self.with_retries(attempt)
        if response.error_code:
            raise wire_error(response.error_code, "DescribeAcls", response.error_message)
        return [_binding(r, a) for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """DeleteAcls: per filter, the bindings it deleted; raises the first filter's error."""
        body = {"filters": [{"resource_type_filter": f.resource_type, "resource_name_filter": f.resource_name,
                             "pattern_type_filter": f.pattern_type, "principal_filter": f.principal,
                             "host_filter": f.host, "operation": f.operation, "permission_type": f.permission_type}
                            for f in filters]}

        async def attempt() -> Any:
            conn = await self.any_connection()
            response = await conn.request(ApiKey.DELETE_ACLS, body, conn.version_for(ApiKey.DELETE_ACLS, min_v=1))
            _raise_if_not_controller(r.error_code for r in response.filter_results)
            return response
        response = await self.with_retries(attempt)
        out = []
        for r in response.filter_results:
            if r.error_code:
                raise wire_error(r.error_code, "DeleteAcls", r.error_message)
            out.append([_binding(m, m) for m in r.matching_acls])
        return out

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                              ) -> dict[str, list[tuple[str, int]]]:
        """Each user's SCRAM credentials as (mechanism, iterations); every user with one when
        ``users`` is None. A named user without credentials raises ResourceNotFoundError."""
        names = None if users is None else list(users)

        async def attempt() -> Any:
            conn = await self.any_connection()
            return await conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {
                "users": None if names is None else [{"name": n} for n in names]})
        response = await self.with_retries(attempt)
        if response.error_code:
            raise wire_error(response.error_code, "DescribeUserScramCredentials", response.error_message)
        out: dict[str, list[tuple[str, int]]] = {}
        for r in response.results:
            if r.error_code:
                raise wire_error(r.error_code, r.user, r.error_message)
            out[r.user] = [(SCRAM_MECHANISM_NAMES.get(c.mechanism, str(c.mechanism)), c.iterations)
                           for c in r.credential_infos]
        return out

    async def alter_user_scram_credentials(self, upsertions: Iterable[ScramUpsertion] = (),
                                           deletions: Iterable[tuple[str, str]] = ()) -> dict[str, KafkaError | None]:
        """AlterUserScramCredentials: set credentials (a fresh random salt each, the salted
        password computed here) and delete others ((user, mechanism)); per user, None or its
        error."""
        ups = []
        for u in upsertions:
            salt = secrets.token_bytes(32)
            ups.append({"name": u.user, "mechanism": SCRAM_MECHANISMS[u.mechanism][0], "iterations": u.iterations,
                        "salt": salt, "salted_password": scram_salted_password(u.mechanism, u.password, salt,
                                                                               u.iterations)})
        body = {"deletions": [{"name": user, "mechanism": SCRAM_MECHANISMS[m][0]} for user, m in deletions],
                "upsertions": ups}

        async def attempt() -> Any:
            conn = await self.any_connection()
            response = await conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
            _raise_if_not_controller(r.error_code for r in response.results)
            return response
        response = await self.with_retries(attempt)
        return {r.user: wire_error(r.error_code, r.user, r.error_message) if r.error_code else None
                for r in response.results}


def _raise_if_not_controller(codes: Iterable[int]) -> None:
    """A request the controller decides, answered NOT_CONTROLLER / REQUEST_TIMED_OUT (no
    controller reached yet): retried."""
    for code in codes:
        if code in (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT):
            raise wire_error(code, "the controller")
