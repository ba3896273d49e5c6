"""``KafkaClient``: the cluster view from Metadata, one pooled connection per broker, and
retries of retriable errors with backoff (the admin helpers come from ``AdminMixin``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from ..api_keys import ApiKey
from ..clock import Time
from ..errors import ErrorCode, KafkaError, LeaderNotAvailableError, RequestTimedOutError, UnknownTopicOrPartitionError
from .admin import AdminMixin
from .cluster_admin import ClusterAdminMixin
from .clock import SYSTEM_TIME, sleep
from .connection import DEFAULT_NETWORK, BrokerConnection, KafkaConnectionError, Network, wire_error
from .metadata import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata

log = logging.getLogger("kbroker.client")

T = TypeVar("T")


def _parse_address(server: str) -> tuple[str, int]:
    host, sep, port = server.strip().rpartition(":")
    if not sep:
        return server.strip(), 9092
    return host.strip("[]"), int(port)


class KafkaClient(AdminMixin, ClusterAdminMixin):
    """A cluster-aware client: bootstraps from any of ``bootstrap_servers``, keeps the cluster
    view (``cluster``), pools one connection per broker, and retries retriable errors with
    exponential backoff, refreshing metadata between attempts.

    Use it as ``async with KafkaClient("host:9092") as client:`` or call ``close()``.
    """

    def __init__(self, bootstrap_servers: str | Iterable[str], *, client_id: str = "kbroker",
                 network: Network = DEFAULT_NETWORK, time: Time = SYSTEM_TIME, request_timeout_ms: int = 30000,
                 metadata_max_age_ms: int = 300000, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000) -> None:
        servers = bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else bootstrap_servers
        self.bootstrap_servers = [_parse_address(s) for s in servers if s.strip()]
        if not self.bootstrap_servers:
            raise ValueError("no bootstrap servers given")
        self.client_id = client_id
        self.network = network
        self.time = time
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.cluster = ClusterMetadata()
        self._metadata_refreshed_ms: float | None = None
        self._conns: dict[tuple[str, int], BrokerConnection] = {}
        # Connections of their own for coordinator requests (see coordinator_connection).
        self._coordinator_conns: dict[tuple[str, int], BrokerConnection] = {}
        self._connecting: dict[tuple[tuple[str, int], bool], asyncio.Task[BrokerConnection]] = {}

    async def __aenter__(self) -> "KafkaClient":
        await self.refresh_metadata()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        for task in self._connecting.values():
            task.cancel()
        for pool in (self._conns, self._coordinator_conns):
            for conn in pool.values():
                conn.close()
            pool.clear()

    # -- connections -----------------------------------------------------------------------

    async def _connect(self, address: tuple[str, int], coordinator: bool = False) -> BrokerConnection:
        pool = self._coordinator_conns if coordinator else self._conns
        conn = pool.get(address)
        if conn is not None and conn.connected:
            return conn
        key = (address, coordinator)
        task = self._connecting.get(key)
        if task is None:  # one connect per address and pool, however many callers want it
            task = asyncio.ensure_future(self._open(address, pool))
            self._connecting[key] = task
            task.add_done_callback(lambda _t: self._connecting.pop(key, None))
        return await asyncio.shield(task)

    async def _open(self, address: tuple[str, int], pool: dict[tuple[str, int], BrokerConnection]) -> BrokerConnection:
        conn = BrokerConnection(*address, client_id=self.client_id, network=self.network, time=self.time,
                                request_timeout_ms=self.request_timeout_ms)
        await conn.connect()
        pool[address] = conn
        return conn

    async def connection(self, node_id: int) -> BrokerConnection:
        """The pooled connection to broker ``node_id`` (opened if needed)."""
        return await self._connect(await self._address(node_id))

    async def coordinator_connection(self, node_id: int) -> BrokerConnection:
        """A pooled connection to broker ``node_id`` for group (and transaction) coordinator
        requests only, as Java's clients address the coordinator as node Integer.MAX_VALUE - id:
        a broker answers a connection's requests in order, so a commit or heartbeat on the
        connection a consumer's long-poll Fetch is parked on would wait up to its max_wait_ms."""
        return await self._connect(await self._address(node_id), coordinator=True)

    async def _address(self, node_id: int) -> tuple[str, int]:
        broker = self.cluster.brokers.get(node_id)
        if broker is None:
            await self.refresh_metadata()
            broker = self.cluster.brokers.get(node_id)
            if broker is None:
                raise wire_error(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id}", "not in the cluster metadata")
        return broker.host, broker.port

    async def leader_connection(self, topic: str, partition: int) -> BrokerConnection:
        """The connection to the partition's current leader."""
        return await self.connection(await self.leader_for(topic, partition))

    async def any_connection(self, coordinator: bool = False) -> BrokerConnection:
        """A connection to some live broker (the open ones first, then the known brokers,
        then the bootstrap servers); ``coordinator``: from the coordinator pool (for
        FindCoordinator: not behind a parked Fetch either)."""
        last_error: KafkaError | None = None
        for address in self._candidates():
            try:
                return await self._connect(address, coordinator)
            except KafkaConnectionError as exc:
                last_error = exc
        raise last_error or KafkaConnectionError("no broker to connect to")

    def _candidates(self) -> list[tuple[str, int]]:
        known = [(b.host, b.port) for b in self.cluster.brokers.values()]
        live = [a for a, c in self._conns.items() if c.connected]
        random.shuffle(known)
        return list(dict.fromkeys(live + known + self.bootstrap_servers))

    async def _controller_connection(self) -> BrokerConnection:
        if self.cluster.controller_id in self.cluster.brokers:
            return await self.connection(self.cluster.controller_id)
        return await self.any_connection()

    # -- metadata --------------------------------------------------------------------------

    async def refresh_metadata(self, topics: Iterable[str] | None = None,
                               allow_auto_create: bool = False) -> ClusterMetadata:
        """Ask a broker for metadata of ``topics`` (None: all topics) and update ``cluster``.
        Tries every candidate broker before giving up with KafkaConnectionError."""
        names = None if topics is None else list(topics)
        last_error: KafkaError | None = None
        for address in self._candidates():
            try:
                conn = await self._connect(address)
                version = conn.version_for(ApiKey.METADATA)
                wanted: list[dict[str, str]] | None
                if names is None:
                    wanted = [] if version == 0 else None  # v0 has no null: an empty list means all
                else:
                    wanted = [{"name": n} for n in names]
                response = await conn.request(ApiKey.METADATA, {
                    "topics": wanted, "allow_auto_topic_creation": allow_auto_create}, version)
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                last_error = exc
                continue
            self._update_cluster(response, replace_topics=names is None)
            return self.cluster
        raise last_error or KafkaConnectionError("no broker to ask for metadata")

    def _update_cluster(self, response: Any, replace_topics: bool) -> None:  # response: a Metadata Container
        cluster = self.cluster
        cluster.brokers = {b.node_id: BrokerMetadata(b.node_id, b.host, b.port, b.get("rack"))
                           for b in response.brokers}
        cluster.controller_id = response.get("controller_id", -1)
        cluster.cluster_id = response.get("cluster_id")
        topics = {}
        for t in response.topics:
            partitions = {p.partition_index: PartitionMetadata(
                t.name, p.partition_index, p.leader_id, p.get("leader_epoch", -1), list(p.replica_nodes),
                list(p.isr_nodes), list(p.get("offline_replicas", [])), p.error_code) for p in t.partitions}
            known = cluster.topics.get(t.name)
            if known is not None:
                # KIP-320, as Kafka's Metadata.updateLatestMetadata: a lagging broker's answer with
                # an older leader epoch does not replace what a newer one said.
                for index, p in partitions.items():
                    old = known.partitions.get(index)
                    if old is not None and 0 <= p.leader_epoch < old.leader_epoch:
                        log.debug("%s-%d: keeping leader epoch %d, not the older %d", t.name, index,
                                  old.leader_epoch, p.leader_epoch)
                        partitions[index] = old
            topics[t.name] = TopicMetadata(t.name, t.error_code, t.get("is_internal", False), partitions)
        if replace_topics:
            cluster.topics = topics
        else:
            cluster.topics.update(topics)
        self._metadata_refreshed_ms = self.time.monotonic_ms()

    def _metadata_expired(self) -> bool:
        refreshed = self._metadata_refreshed_ms
        return refreshed is None or self.time.monotonic_ms() - refreshed >= self.metadata_max_age_ms

    async def _topic(self, topic: str, allow_auto_create: bool = False, refresh: bool = False) -> TopicMetadata:
        """The topic's metadata, refreshed when asked, missing, stale or in error; raises its error."""
        t = self.cluster.topics.get(topic)
        if refresh or t is None or t.error_code or not t.partitions or self._metadata_expired():
            await self.refresh_metadata([topic], allow_auto_create)
            t = self.cluster.topics.get(topic)
        if t is None:
            raise wire_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic)
        if t.error_code:
            raise wire_error(t.error_code, topic)
        if not t.partitions:
            raise wire_error(ErrorCode.LEADER_NOT_AVAILABLE, topic, "no partitions yet")
        return t

    async def partitions_for(self, topic: str, allow_auto_create: bool = False) -> list[int]:
        """The topic's partition ids, waiting (with retries) while it is being created."""
        t = await self.with_retries(lambda: self._topic(topic, allow_auto_create))
        return sorted(t.partitions)

    async def leader_for(self, topic: str, partition: int) -> int:
        """The node id of the partition's leader, waiting (with retries) while there is none."""
        async def attempt() -> int:
            t = await self._topic(topic, refresh=self.cluster.leader(topic, partition) < 0)
            if partition not in t.partitions:
                raise UnknownTopicOrPartitionError(f"{topic}-{partition}: no such partition")
            leader = self.cluster.leader(topic, partition)
            if leader < 0:
                raise LeaderNotAvailableError(f"{topic}-{partition}: no leader")
            return leader
        return await self.with_retries(attempt, [topic])

    async def with_retries(self, attempt: Callable[[], Awaitable[T]], topics: Iterable[str] = ()) -> T:
        """Run ``attempt`` until it succeeds, retrying retriable KafkaErrors with exponential
        backoff, for up to ``request_timeout_ms``. Between attempts it refreshes the metadata
        of ``topics`` (none: just brokers and controller)."""
        deadline = self.time.monotonic_ms() + self.request_timeout_ms
        backoff = self.retry_backoff_ms
        while True:
            try:
                return await attempt()
            except KafkaError as exc:
                if not exc.retriable or self.time.monotonic_ms() + backoff > deadline:
                    raise
                log.debug("retrying in %d ms after %r", backoff, exc)
            await sleep(self.time, backoff)
            backoff = min(backoff * 2, self.retry_backoff_max_ms)
            try:
                await self.refresh_metadata(sorted(set(topics)))  # (sorted: the same request whatever set order)
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                log.debug("metadata refresh failed: %r", exc)
