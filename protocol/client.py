"""The asyncio Kafka client: the CLI, the replica fetchers, the controller and the load
generator all talk to brokers through it.

Layers, bottom up:

* ``Network`` opens TCP connections. It is the one place that does; everything above takes
  a ``network=`` so a simulated network can stand in for it.
* ``BrokerConnection`` is an ``asyncio.Protocol`` over ``Framer`` (aiokafka's conn.py
  shape): requests are pipelined and matched to responses in FIFO order through a deque of
  (correlation id, future); a mismatch means the stream is out of sync and the connection
  is closed. It negotiates versions with ApiVersions on connect (KIP-511 fallback
  included). Long-tail APIs go through the construct schemas (``request``); Produce and
  Fetch go through the hand-written codecs of ``protocol.fast_codecs``.
* ``KafkaClient`` keeps the cluster view from Metadata, pools one connection per broker,
  retries retriable errors with backoff, and offers the admin helpers.
* ``Producer`` batches records per partition (RecordBatch v2) and sends one Produce request
  per leader; ``Consumer`` fetches manually assigned partitions from their leaders.

Time is injected (``protocol.clock.Time``): request timeouts, linger, backoff and delivery
timeouts are all scheduled through it, never through ``time.time()``.
"""

from __future__ import annotations

import asyncio
import collections
import importlib.metadata
import itertools
import logging
import random
import socket
import struct
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Mapping, NamedTuple, Sequence, TypeVar

from . import fast_codecs
from .api_keys import ApiKey
from .clock import SYSTEM_TIME, Time
from .compression import Compression
from .errors import (CorruptRecordError, ErrorCode, KafkaError, LeaderNotAvailableError, OffsetOutOfRangeError,
                     RequestTimedOutError, UnknownTopicOrPartitionError, UnsupportedVersionError, error_for)
from .framing import Framer, FrameTooLarge, NegativeFrameSize
from .messages import APIS, request_is_flexible, response_is_flexible
from .records import (Record, batch_body, build_batch, compute_crc, decode_records, increment_sequence,
                      iter_batch_headers)

log = logging.getLogger("kbroker.client")

T = TypeVar("T")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# A response length above this is garbage on the wire, not a response (Fetch max_bytes is 50 MiB by default).
MAX_RESPONSE_BYTES = 1 << 30
# ApiVersions is first sent at v3, as librdkafka does: v3 is the first flexible version (it
# carries our software name); v4 changes nothing we read.
_FIRST_API_VERSIONS_VERSION = 3
try:
    _SOFTWARE_VERSION = importlib.metadata.version("kbroker")
except importlib.metadata.PackageNotFoundError:  # running from a source tree that is not installed
    _SOFTWARE_VERSION = "0"


class KafkaConnectionError(KafkaError):
    """A connection to a broker could not be opened, or was lost. Retriable (after a
    metadata refresh), like Kafka's NETWORK_EXCEPTION whose code it carries."""

    error_code = ErrorCode.NETWORK_EXCEPTION
    retriable = True
    invalid_metadata = True


class TopicPartition(NamedTuple):
    """A partition of a topic."""

    topic: str
    partition: int


async def sleep(time: Time, ms: float) -> None:
    """Sleep through the injected clock (``MockTime`` fires it when a test advances time)."""
    future = asyncio.get_running_loop().create_future()
    handle = time.schedule(ms, lambda: future.done() or future.set_result(None))
    try:
        await future
    finally:
        handle.cancel()


def _error(code: int, what: str, message: str | None = None) -> KafkaError:
    """The KafkaError subclass for ``code``, with a message naming what failed."""
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error code {code}"
    return error_for(code, f"{what}: {message or name}")


# ---------------------------------------------------------------------------------------------
# Network and connections

class Network:
    """Opens outgoing TCP connections: the one place the client creates sockets, so that a
    simulated network can replace it (pass ``network=`` to any class below)."""

    async def open_connection(self, host: str, port: int, protocol_factory: Callable[[], asyncio.Protocol],
                              timeout_s: float) -> tuple[asyncio.Transport, asyncio.Protocol]:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout_s):
            return await loop.create_connection(protocol_factory, host, port)


DEFAULT_NETWORK = Network()


class _InFlight(NamedTuple):
    correlation_id: int
    future: asyncio.Future
    timer: object  # the clock's timer handle


class BrokerConnection(asyncio.Protocol):
    """One TCP connection to one broker, single use: ``await connect()``, then any number of
    concurrent ``request``/``produce``/``fetch`` calls, then ``close()``.

    Requests are written in call order and their responses matched in the same order, by
    correlation id. Each request has a timeout on the injected clock; when it expires the
    request fails with RequestTimedOutError and the connection is closed (its later
    responses could no longer be matched). Losing the connection fails every pending request
    with ``KafkaConnectionError``.
    """

    def __init__(self, host: str, port: int, *, client_id: str | None = "kbroker",
                 network: Network = DEFAULT_NETWORK, time: Time = SYSTEM_TIME,
                 request_timeout_ms: int = 30000) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.api_versions: dict[int, tuple[int, int]] = {}  # the broker's ranges, from ApiVersions
        self._network = network
        self._time = time
        self._transport: asyncio.Transport | None = None
        self._framer = Framer(MAX_RESPONSE_BYTES)
        self._inflight: collections.deque[_InFlight] = collections.deque()
        self._correlation_ids = itertools.count()
        self._writable = asyncio.Event()
        self._closed: KafkaConnectionError | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._closed is None

    async def connect(self) -> None:
        """Open the connection and negotiate API versions."""
        try:
            await self._network.open_connection(self.host, self.port, lambda: self, self.request_timeout_ms / 1000)
        except (OSError, TimeoutError) as exc:
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {exc or 'timed out'}") from exc
        try:
            await self._negotiate_api_versions()
        except BaseException:
            self.close()
            raise

    async def _negotiate_api_versions(self) -> None:
        version = _FIRST_API_VERSIONS_VERSION
        api = APIS[ApiKey.API_VERSIONS]
        while True:
            body = api.request.build(version, {"client_software_name": "kbroker",
                                               "client_software_version": _SOFTWARE_VERSION})
            frame = await self._send(self._encoder(ApiKey.API_VERSIONS, version, body), True, self.request_timeout_ms)
            # The response header is v0 even for flexible versions. A broker that does not
            # speak ``version`` answers UNSUPPORTED_VERSION with a v0 body listing the
            # versions of ApiVersions it does speak (KIP-511).
            (error,) = _I16.unpack_from(frame, 4)
            unsupported = error == ErrorCode.UNSUPPORTED_VERSION
            response = api.response.parse(0 if unsupported else version, frame, 4)
            if unsupported and version > 0:
                theirs = {k.api_key: k.max_version for k in response.api_keys}.get(ApiKey.API_VERSIONS, 0)
                version = min(version - 1, theirs)
                continue
            if response.error_code:
                raise _error(response.error_code, f"ApiVersions v{version} to {self.host}:{self.port}")
            self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            return

    def version_for(self, api_key: int, min_v: int | None = None, max_v: int | None = None) -> int:
        """The highest version of ``api_key`` both sides speak (within [min_v, max_v] if given)."""
        api = APIS.get(api_key)
        theirs = self.api_versions.get(api_key)
        name = api.name if api is not None else f"API key {api_key}"
        if api is None or theirs is None:
            side = "kbroker's client" if api is None else f"the broker at {self.host}:{self.port}"
            raise UnsupportedVersionError(f"{side} does not support {name}")
        lo = max(api.min_version, theirs[0], 0 if min_v is None else min_v)
        hi = min(api.max_version, theirs[1], api.max_version if max_v is None else max_v)
        if lo > hi:
            raise UnsupportedVersionError(
                f"no common version of {name}: the client speaks {api.min_version}-{api.max_version}"
                f"{'' if min_v is None and max_v is None else f' (here {min_v}-{max_v})'}, "
                f"the broker at {self.host}:{self.port} {theirs[0]}-{theirs[1]}")
        return hi

    async def request(self, api_key: int, body: Mapping, version: int | None = None):
        """Send a long-tail request built from its construct schema; returns the parsed
        response body (a construct ``Container``)."""
        api = APIS[api_key]
        if version is None:
            version = self.version_for(api_key)
        frame = await self._send(self._encoder(api_key, version, api.request.build(version, body)), True,
                                 self.request_timeout_ms)
        pos = fast_codecs.skip_tagged_fields(frame, 4) if response_is_flexible(api_key, version) else 4
        return api.response.parse(version, frame, pos)

    async def produce(self, acks: int, timeout_ms: int, topics, version: int | None = None):
        """Send a Produce request; ``topics`` is [(topic, [(partition, record batch bytes)])].

        Returns [(topic, [(partition, error, base_offset, log_append_time, log_start_offset)])],
        or None with acks=0, which the broker never answers: it returns once written.
        """
        if version is None:
            version = self.version_for(ApiKey.PRODUCE, max_v=fast_codecs.PRODUCE_VERSIONS[1])
        frame = await self._send(
            lambda cid: fast_codecs.encode_produce_request(version, cid, self.client_id, acks, timeout_ms, topics),
            acks != 0, self.request_timeout_ms + timeout_ms)
        return None if frame is None else fast_codecs.decode_produce_response(version, frame, 4)

    async def fetch(self, request: fast_codecs.FetchRequest, version: int | None = None) -> fast_codecs.FetchResponse:
        """Send a Fetch request; the records of the response are memoryviews of its frame."""
        if version is None:
            version = self.version_for(ApiKey.FETCH, max_v=fast_codecs.FETCH_VERSIONS[1])
        frame = await self._send(lambda cid: (fast_codecs.encode_fetch_request(version, cid, self.client_id, request),),
                                 True, self.request_timeout_ms + request.max_wait_ms)
        return fast_codecs.decode_fetch_response(version, memoryview(frame), 4)

    def close(self, error: KafkaConnectionError | None = None) -> None:
        """Close the connection; pending requests fail with ``error`` (default: "closed")."""
        self._fail_pending(error or KafkaConnectionError(f"connection to {self.host}:{self.port} closed"))
        if self._transport is not None:
            self._transport.close()

    # -- request plumbing ------------------------------------------------------------------

    def _encoder(self, api_key: int, version: int, body: bytes) -> Callable[[int], tuple]:
        flexible = request_is_flexible(api_key, version)

        def encode(correlation_id: int) -> tuple:
            header = fast_codecs.encode_request_header(api_key, version, correlation_id, self.client_id, flexible)
            return _I32.pack(len(header) + len(body)), header, body
        return encode

    async def _send(self, encode: Callable[[int], Sequence], expect_response: bool, timeout_ms: float):
        """Write the frame ``encode(correlation_id)`` gives; return the response frame (or
        None without one). Waits first while the transport's buffer is full."""
        if not self._writable.is_set():
            await self._writable.wait()
        if self._closed is not None or self._transport is None:
            raise KafkaConnectionError(str(self._closed or f"{self} is not connected"))
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        self._transport.writelines(encode(correlation_id))
        if not expect_response:
            return None
        future = asyncio.get_running_loop().create_future()
        timer = self._time.schedule(timeout_ms, lambda: self._on_timeout(future, timeout_ms))
        self._inflight.append(_InFlight(correlation_id, future, timer))
        return await future

    def _on_timeout(self, future: asyncio.Future, timeout_ms: float) -> None:
        if not future.done():
            future.set_exception(RequestTimedOutError(f"{self.host}:{self.port} sent no response within {timeout_ms:g} ms"))
            self.close(KafkaConnectionError(f"connection to {self.host}:{self.port} closed after a request timed out"))

    def _fail_pending(self, error: KafkaConnectionError) -> None:
        if self._closed is None:
            self._closed = error
        self._writable.set()  # wake writers, who then see the connection is closed
        while self._inflight:
            entry = self._inflight.popleft()
            entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_exception(error)

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._framer.feed(data)
        except (FrameTooLarge, NegativeFrameSize) as exc:
            self.close(KafkaConnectionError(f"{self.host}:{self.port} sent a bad response size: {exc}"))
            return
        for frame in frames:
            got = _I32.unpack_from(frame)[0] if len(frame) >= 4 else None
            expected = self._inflight[0].correlation_id if self._inflight else None
            if got is None or got != expected:
                self.close(KafkaConnectionError(
                    f"connection to {self.host}:{self.port} out of sync: response for correlation id {got}, "
                    f"expected {expected}"))
                return
            entry = self._inflight.popleft()
            entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_pending(KafkaConnectionError(
            f"connection to {self.host}:{self.port} lost" + (f": {exc}" if exc else "")))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()


# ---------------------------------------------------------------------------------------------
# Cluster view and client

class BrokerMetadata(NamedTuple):
    """A broker as Metadata describes it."""

    node_id: int
    host: str
    port: int
    rack: str | None


class PartitionMetadata(NamedTuple):
    """A partition as Metadata describes it (leader -1: none)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    error_code: int


class TopicMetadata(NamedTuple):
    """A topic as Metadata describes it, with its partitions by id."""

    name: str
    error_code: int
    is_internal: bool
    partitions: dict[int, PartitionMetadata]


@dataclass
class ClusterMetadata:
    """What the Metadata responses said: brokers, controller, topics and their partitions."""

    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    topics: dict[str, TopicMetadata] = field(default_factory=dict)

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, or -1 when unknown."""
        p = self.partition(topic, partition)
        return -1 if p is None or p.leader not in self.brokers else p.leader


class ConfigEntry(NamedTuple):
    """One configuration key of a DescribeConfigs answer."""

    name: str
    value: str | None
    source: int  # DescribeConfigs ConfigSource: 1 topic, 4 static broker, 5 default, ...
    read_only: bool
    sensitive: bool


def _parse_address(server: str) -> tuple[str, int]:
    host, sep, port = server.strip().rpartition(":")
    if not sep:
        return server.strip(), 9092
    return host.strip("[]"), int(port)


class KafkaClient:
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
        self._connecting: dict[tuple[str, int], asyncio.Task] = {}

    async def __aenter__(self) -> "KafkaClient":
        await self.refresh_metadata()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self) -> None:
        for task in self._connecting.values():
            task.cancel()
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # -- connections -----------------------------------------------------------------------

    async def _connect(self, address: tuple[str, int]) -> BrokerConnection:
        conn = self._conns.get(address)
        if conn is not None and conn.connected:
            return conn
        task = self._connecting.get(address)
        if task is None:  # one connect per address, however many callers want it
            task = asyncio.ensure_future(self._open(address))
            self._connecting[address] = task
            task.add_done_callback(lambda _t: self._connecting.pop(address, None))
        return await asyncio.shield(task)

    async def _open(self, address: tuple[str, int]) -> BrokerConnection:
        conn = BrokerConnection(*address, client_id=self.client_id, network=self.network, time=self.time,
                                request_timeout_ms=self.request_timeout_ms)
        await conn.connect()
        self._conns[address] = conn
        return conn

    async def connection(self, node_id: int) -> BrokerConnection:
        """The pooled connection to broker ``node_id`` (opened if needed)."""
        broker = self.cluster.brokers.get(node_id)
        if broker is None:
            await self.refresh_metadata()
            broker = self.cluster.brokers.get(node_id)
            if broker is None:
                raise _error(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id}", "not in the cluster metadata")
        return await self._connect((broker.host, broker.port))

    async def leader_connection(self, topic: str, partition: int) -> BrokerConnection:
        """The connection to the partition's current leader."""
        return await self.connection(await self.leader_for(topic, partition))

    async def any_connection(self) -> BrokerConnection:
        """A connection to some live broker (the open ones first, then the known brokers,
        then the bootstrap servers)."""
        last_error: KafkaError | None = None
        for address in self._candidates():
            try:
                return await self._connect(address)
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

    def _update_cluster(self, response, replace_topics: bool) -> None:
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
            raise _error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic)
        if t.error_code:
            raise _error(t.error_code, topic)
        if not t.partitions:
            raise _error(ErrorCode.LEADER_NOT_AVAILABLE, topic, "no partitions yet")
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
                await self.refresh_metadata(list(topics))
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                log.debug("metadata refresh failed: %r", exc)

    # -- admin -----------------------------------------------------------------------------

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

    async def _topics_admin(self, api_key: int, results_field: str, body: Mapping) -> None:
        """Send CreateTopics/DeleteTopics to the controller, again if it moved (NOT_CONTROLLER);
        other per-topic errors are final, as in Kafka's AdminClient."""
        async def attempt() -> list:
            conn = await self._controller_connection()
            response = await conn.request(api_key, body)
            results = [(r.name, r.error_code, r.get("error_message")) for r in response[results_field]]
            if any(code == ErrorCode.NOT_CONTROLLER for _name, code, _message in results):
                raise _error(ErrorCode.NOT_CONTROLLER, APIS[api_key].name)
            return results
        for name, code, message in await self.with_retries(attempt):
            if code:
                raise _error(code, name, message)

    async def describe_configs(self, topic: str) -> list[ConfigEntry]:
        """The topic's configuration, every key with its value and where it comes from."""
        async def attempt():
            conn = await self.any_connection()
            return await conn.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": 2, "resource_name": topic, "configuration_keys": None}]})
        response = await self.with_retries(attempt)
        result = response.results[0]
        if result.error_code:
            raise _error(result.error_code, topic, result.error_message)
        return [ConfigEntry(c.name, c.value, c.get("config_source", -1), c.read_only, c.is_sensitive)
                for c in result.configs]

    async def init_producer_id(self, transaction_timeout_ms: int = 60000) -> tuple[int, int]:
        """A new (producer id, epoch) for an idempotent producer, from any broker."""
        async def attempt():
            conn = await self.any_connection()
            response = await conn.request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout_ms": transaction_timeout_ms})
            if response.error_code:
                raise _error(response.error_code, "InitProducerId")
            return response.producer_id, response.producer_epoch
        return await self.with_retries(attempt)

    async def list_offsets(self, topic: str, partition: int, timestamp: int,
                           isolation_level: int = 0) -> tuple[int, int]:
        """(offset, timestamp) for ``timestamp``: -2 the earliest offset, -1 the latest (the
        high watermark, or the last stable offset with isolation_level 1), else the first
        record at or after that time ((-1, -1) when there is none)."""
        found = await self.offsets_for_times({(topic, partition): timestamp}, isolation_level)
        return found[TopicPartition(topic, partition)] or (-1, -1)

    async def offsets_for_times(self, timestamps: Mapping[tuple[str, int], int], isolation_level: int = 0
                                ) -> dict[TopicPartition, tuple[int, int] | None]:
        """``list_offsets`` for many partitions at once, one request per leader; a partition
        with no record at or after its timestamp maps to None."""
        pending = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        found: dict[TopicPartition, tuple[int, int] | None] = {}

        async def ask(node: int, tps: list[TopicPartition]) -> list[KafkaError]:
            conn = await self.connection(node)
            by_topic: dict[str, list] = collections.defaultdict(list)
            for tp in tps:
                by_topic[tp.topic].append({"partition_index": tp.partition, "timestamp": pending[tp]})
            version = conn.version_for(ApiKey.LIST_OFFSETS, min_v=2 if isolation_level else None)
            response = await conn.request(ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}, version)
            errors = []
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        errors.append(_error(p.error_code, f"ListOffsets {t.name}-{p.partition_index}"))
                    elif tp in pending:
                        del pending[tp]
                        found[tp] = None if p.offset < 0 else (p.offset, p.timestamp)
            return errors

        async def attempt() -> None:
            by_leader: dict[int, list[TopicPartition]] = collections.defaultdict(list)
            for tp in pending:
                by_leader[await self.leader_for(*tp)].append(tp)
            results = await asyncio.gather(*(ask(n, tps) for n, tps in by_leader.items()), return_exceptions=True)
            errors = [e for r in results for e in (r if isinstance(r, list) else [r])]
            if errors:  # a retriable one first, so that the partitions still pending are retried
                raise next((e for e in errors if isinstance(e, KafkaError) and e.retriable), errors[0])
        await self.with_retries(attempt, {tp.topic for tp in pending})
        return found


# ---------------------------------------------------------------------------------------------
# Producer

def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``Utils.murmur2`` of the Java client), as an unsigned 32-bit int."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h = ((h ^ tail[0]) * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The Java client's keyed partitioning: ``toPositive(murmur2(key)) % numPartitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written."""

    topic: str
    partition: int
    offset: int  # -1 when unknown (acks=0, or a duplicate the broker had already written)
    timestamp: int


_BATCH_OVERHEAD = 61  # the RecordBatch header
_RECORD_OVERHEAD = 12  # length, attributes, deltas and lengths: a generous estimate


def _record_size(r: Record) -> int:
    size = _RECORD_OVERHEAD + len(r.key or b"") + len(r.value or b"")
    for k, v in r.headers:
        size += 4 + len(k) + len(v or b"")
    return size


class _Batch:
    """The records of one partition that travel (and are retried) as one RecordBatch."""

    __slots__ = ("tp", "records", "futures", "size", "created_ms", "attempts", "retry_at_ms", "payload",
                 "producer_id", "base_sequence", "done")

    def __init__(self, tp: TopicPartition, created_ms: float) -> None:
        self.tp = tp
        self.records: list[Record] = []
        self.futures: list[asyncio.Future] = []
        self.size = _BATCH_OVERHEAD
        self.created_ms = created_ms
        self.attempts = 0
        self.retry_at_ms = 0.0
        self.payload: bytes | None = None  # built at the first send, kept for retries
        self.producer_id = -1
        self.base_sequence = -1
        self.done = asyncio.get_running_loop().create_future()  # resolves (to None) when settled

    def succeed(self, base_offset: int, log_append_time: int) -> None:
        for i, (record, future) in enumerate(zip(self.records, self.futures)):
            if not future.done():
                future.set_result(RecordMetadata(
                    self.tp.topic, self.tp.partition, base_offset + i if base_offset >= 0 else -1,
                    log_append_time if log_append_time >= 0 else record.timestamp))
        self.done.set_result(None)

    def fail(self, exc: BaseException) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(exc)
        self.done.set_result(None)


class Producer:
    """Sends records in batches, aiokafka/Java style.

    ``await send(...)`` queues a record and returns a future that resolves to its
    ``RecordMetadata`` once the broker acknowledged it (at once with offset -1 for acks=0).
    A background task closes batches when full (``batch_size``) or after ``linger_ms``, and
    sends one Produce request per leader holding one batch per partition, at most
    ``max_in_flight`` requests per connection.

    Ordering per partition survives retries: without idempotence, a partition has one batch
    in flight at a time (when retries are on). With ``enable_idempotence`` the producer asks
    for a producer id once and stamps it, the epoch and per-partition sequence numbers into
    each batch; a retried batch keeps its sequence, so the broker can drop a duplicate, and
    up to ``max_in_flight`` (<= 5) batches per partition may be in flight. A batch that fails
    after being stamped (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, expiry, ...)
    leaves a hole in its partition's sequence: its records fail, and the producer takes a new
    producer id before sending more rather than let later batches be rejected or reordered.
    """

    def __init__(self, client: KafkaClient, *, acks: int | str = 1, compression: str | int = "none",
                 linger_ms: float = 5, batch_size: int = 16384, max_in_flight: int = 5,
                 partitioner: str | Callable[[bytes, int], int] = "murmur2", enable_idempotence: bool = False,
                 request_timeout_ms: int = 30000, delivery_timeout_ms: int = 120000, retries: int = 2**31 - 1,
                 retry_backoff_ms: int = 100, buffer_memory: int = 32 * 1024 * 1024) -> None:
        acks = -1 if acks == "all" else int(acks)
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be 0, 1 or -1 (all), not {acks}")
        if enable_idempotence and (acks != -1 or max_in_flight > 5 or retries < 1):
            raise ValueError("an idempotent producer needs acks=-1 (all), retries > 0 and max_in_flight <= 5")
        if partitioner == "murmur2":
            partitioner = murmur2_partition
        elif not callable(partitioner):
            raise ValueError(f"partitioner must be 'murmur2' or a callable, not {partitioner!r}")
        self._client = client
        self._time = client.time
        self._acks = acks
        self._compression = Compression.parse(compression)
        self._linger_ms = linger_ms
        self._batch_size = batch_size
        self._max_in_flight = max_in_flight
        self._partitioner = partitioner
        self._idempotent = enable_idempotence
        self._request_timeout_ms = request_timeout_ms
        self._delivery_timeout_ms = delivery_timeout_ms
        self._retries = retries
        self._retry_backoff_ms = retry_backoff_ms
        self._buffer_memory = buffer_memory
        self._max_in_flight_per_partition = max_in_flight if enable_idempotence or retries == 0 else 1
        self._queues: dict[TopicPartition, collections.deque[_Batch]] = {}
        self._unsettled: set[_Batch] = set()
        self._inflight_partition: collections.Counter[TopicPartition] = collections.Counter()
        self._inflight_node: collections.Counter[int] = collections.Counter()
        self._buffered = 0
        self._sticky: dict[str, list[int]] = {}  # topic -> [partition, bytes sent to it]
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_sequence: dict[TopicPartition, int] = {}
        self._need_producer_id = enable_idempotence
        self._refresh_needed = False
        self._next_refresh_ms = 0.0
        self._flushing = 0
        self._closed = False
        self._wakeup = asyncio.Event()
        self._space = asyncio.Event()
        self._sender: asyncio.Task | None = None
        self._requests: set[asyncio.Task] = set()

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None,
                   headers: Iterable[tuple[str, bytes | None]] = (), partition: int | None = None,
                   timestamp_ms: int | None = None) -> asyncio.Future:
        """Queue one record; returns the future of its RecordMetadata. Waits while more than
        ``buffer_memory`` bytes are queued."""
        self._ensure_running()
        while self._buffered >= self._buffer_memory:
            self._space.clear()
            await self._space.wait()
        partitions = await self._client.partitions_for(topic, allow_auto_create=True)
        record = Record(timestamp=self._time.milliseconds() if timestamp_ms is None else timestamp_ms,
                        key=key, value=value, headers=list(headers))
        size = _record_size(record)
        if partition is None:
            partition = self._choose_partition(topic, key, len(partitions), size)
        elif partition not in partitions:
            raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition}")
        future = asyncio.get_running_loop().create_future()
        self._append(TopicPartition(topic, partition), record, size, future)
        return future

    async def flush(self) -> None:
        """Send everything queued now, without waiting for linger, and wait until it settled."""
        waiting = [b.done for b in self._unsettled]
        if not waiting:
            return
        self._flushing += 1
        self._wakeup.set()
        try:
            await asyncio.wait(waiting)
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        """Flush, then stop the sender."""
        await self.flush()
        self._closed = True
        if self._sender is not None:
            self._sender.cancel()
            try:
                await self._sender
            except asyncio.CancelledError:
                pass

    def _ensure_running(self) -> None:
        if self._closed:
            raise RuntimeError("the producer is closed")
        if self._sender is None:
            self._sender = asyncio.ensure_future(self._run())
        elif self._sender.done():
            raise RuntimeError("the producer's sender task failed") from self._sender.exception()

    def _choose_partition(self, topic: str, key: bytes | None, count: int, size: int) -> int:
        """Keyed records by the partitioner; the others stick to one partition until a batch's
        worth of bytes went there, then move to the next (KIP-794's uniform sticky partitioner)."""
        if key is not None:
            return self._partitioner(key, count)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky[0] >= count:
            sticky = self._sticky[topic] = [random.randrange(count), 0]
        elif sticky[1] >= self._batch_size:
            sticky[:] = [(sticky[0] + 1) % count, 0]
        sticky[1] += size
        return sticky[0]

    def _append(self, tp: TopicPartition, record: Record, size: int, future: asyncio.Future) -> None:
        queue = self._queues.setdefault(tp, collections.deque())
        if queue and queue[-1].payload is None and queue[-1].size + size <= self._batch_size:
            batch = queue[-1]
        else:
            batch = _Batch(tp, self._time.monotonic_ms())
            queue.append(batch)
            self._unsettled.add(batch)
            self._wakeup.set()  # the sender has a new linger deadline, and maybe a full batch
        batch.records.append(record)
        batch.futures.append(future)
        batch.size += size
        self._buffered += size
        if batch.size >= self._batch_size:
            self._wakeup.set()

    # -- the sender task -------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                self._wakeup.clear()
                await self._prepare()
                wait_ms = self._drain(self._time.monotonic_ms())
                handle = None if wait_ms is None else self._time.schedule(wait_ms, self._wakeup.set)
                try:
                    await self._wakeup.wait()
                finally:
                    if handle is not None:
                        handle.cancel()
        except Exception as exc:
            log.exception("producer sender failed")
            for batch in list(self._unsettled):
                self._settle(batch)
                batch.fail(exc)
            raise

    async def _prepare(self) -> None:
        """Refresh metadata when a leader is unknown; get a producer id when one is needed."""
        now = self._time.monotonic_ms()
        if self._refresh_needed and now >= self._next_refresh_ms:
            self._refresh_needed = False
            self._next_refresh_ms = now + self._retry_backoff_ms
            try:
                await self._client.refresh_metadata({tp.topic for tp in self._queues})
            except KafkaError as exc:
                log.warning("producer metadata refresh failed: %s", exc)
                self._refresh_needed = True
        if self._need_producer_id and not self._requests and any(self._queues.values()):
            try:
                self._producer_id, self._producer_epoch = await self._client.init_producer_id()
            except KafkaError as exc:
                log.warning("cannot get a producer id: %s", exc)
                for queue in self._queues.values():
                    while queue:
                        self._fail(queue.popleft(), exc)
                return
            log.info("producer id %d, epoch %d", self._producer_id, self._producer_epoch)
            self._next_sequence.clear()
            self._need_producer_id = False

    def _drain(self, now: float) -> float | None:
        """Send every ready batch it may; return how long until the next one may be ready."""
        wait_ms: float | None = None
        by_node: dict[int, list[_Batch]] = collections.defaultdict(list)
        for tp, queue in self._queues.items():
            while queue and now - queue[0].created_ms >= self._delivery_timeout_ms:
                self._fail(queue.popleft(), RequestTimedOutError(
                    f"{tp.topic}-{tp.partition}: not delivered within {self._delivery_timeout_ms} ms"))
            if not queue or self._need_producer_id or self._inflight_partition[tp] >= self._max_in_flight_per_partition:
                continue
            batch = queue[0]
            linger_end = batch.created_ms + self._linger_ms
            if batch.retry_at_ms > now:
                wait_ms = _earliest(wait_ms, batch.retry_at_ms - now)
                continue
            if not (len(queue) > 1 or batch.size >= self._batch_size or self._flushing or now >= linger_end):
                wait_ms = _earliest(wait_ms, linger_end - now)
                continue
            leader = self._client.cluster.leader(*tp)
            if leader < 0:
                self._refresh_needed = True
                wait_ms = _earliest(wait_ms, self._retry_backoff_ms)
            elif self._inflight_node[leader] < self._max_in_flight:
                by_node[leader].append(queue.popleft())
        for node, batches in by_node.items():
            self._dispatch(node, batches)
        return wait_ms

    def _dispatch(self, node: int, batches: list[_Batch]) -> None:
        for batch in batches:
            if self._idempotent and batch.producer_id != self._producer_id:
                batch.producer_id = self._producer_id
                batch.base_sequence = self._next_sequence.get(batch.tp, 0)
                self._next_sequence[batch.tp] = increment_sequence(batch.base_sequence, len(batch.records))
                batch.payload = None
            if batch.payload is None:
                batch.payload = build_batch(
                    batch.records, compression=self._compression, producer_id=batch.producer_id,
                    producer_epoch=self._producer_epoch if self._idempotent else -1,
                    base_sequence=batch.base_sequence)
            batch.attempts += 1
            self._inflight_partition[batch.tp] += 1
        self._inflight_node[node] += 1
        task = asyncio.ensure_future(self._send_request(node, batches))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _send_request(self, node: int, batches: list[_Batch]) -> None:
        try:
            by_topic: dict[str, list] = collections.defaultdict(list)
            for batch in batches:
                by_topic[batch.tp.topic].append((batch.tp.partition, batch.payload))
            conn = await self._client.connection(node)
            response = await conn.produce(self._acks, self._request_timeout_ms, list(by_topic.items()))
        except Exception as exc:
            for batch in batches:
                self._retry_or_fail(batch, exc)
        else:
            results = {} if response is None else {(topic, p[0]): p[1:4] for topic, parts in response for p in parts}
            for batch in batches:
                if response is None:  # acks=0: written is all we will ever know
                    error, base_offset, log_append_time = ErrorCode.NONE, -1, -1
                else:
                    error, base_offset, log_append_time = results.get(batch.tp, (ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1))
                if error in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):  # a duplicate was written before
                    self._settle(batch)
                    batch.succeed(base_offset if error == ErrorCode.NONE else -1, log_append_time)
                else:
                    self._retry_or_fail(batch, _error(error, f"produce to {batch.tp.topic}-{batch.tp.partition}"))
        finally:
            self._inflight_node[node] -= 1
            for batch in batches:
                self._inflight_partition[batch.tp] -= 1
            self._wakeup.set()

    def _retry_or_fail(self, batch: _Batch, exc: Exception) -> None:
        now = self._time.monotonic_ms()
        if not (isinstance(exc, KafkaError) and exc.retriable and batch.attempts <= self._retries
                and now - batch.created_ms < self._delivery_timeout_ms):
            self._fail(batch, exc)
            return
        log.debug("retrying %s-%d after %r", batch.tp.topic, batch.tp.partition, exc)
        if exc.invalid_metadata:
            self._refresh_needed = True
        batch.retry_at_ms = now + self._retry_backoff_ms
        # Back in front of the batches never sent, after the retried ones with lower sequences.
        queue = self._queues[batch.tp]
        i = 0
        while i < len(queue) and 0 <= queue[i].base_sequence < batch.base_sequence:
            i += 1
        queue.insert(i, batch)

    def _fail(self, batch: _Batch, exc: BaseException) -> None:
        if self._idempotent and batch.producer_id == self._producer_id >= 0:
            self._need_producer_id = True  # a hole in the partition's sequence: start afresh
        self._settle(batch)
        batch.fail(exc)

    def _settle(self, batch: _Batch) -> None:
        self._unsettled.discard(batch)
        self._buffered -= batch.size - _BATCH_OVERHEAD
        self._space.set()


def _earliest(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


# ---------------------------------------------------------------------------------------------
# Consumer

class ConsumerRecord(NamedTuple):
    """A record as the consumer returns it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


_EARLIEST, _LATEST = -2, -1


class Consumer:
    """Reads manually assigned partitions (no consumer group).

    ``assign`` the partitions, optionally ``seek``, then ``await getmany(timeout_ms)`` or
    ``async for record in consumer``. Seeks to the beginning, the end or a timestamp are
    resolved lazily (ListOffsets) at the next fetch or ``position`` call; a partition with no
    position starts per ``auto_offset_reset`` ("earliest", "latest" or "none": raise).

    Each round sends one Fetch per leader covering its partitions. Records below the
    position inside the first batch are skipped, a truncated trailing batch is dropped (the
    next fetch starts at it), control batches and (with isolation_level 1) aborted
    transactions are skipped. Leader changes trigger a metadata refresh; OFFSET_OUT_OF_RANGE
    resets the position per ``auto_offset_reset``.
    """

    def __init__(self, client: KafkaClient, *, isolation_level: int = 0, max_wait_ms: int = 500,
                 min_bytes: int = 1, max_bytes: int = 52428800, max_partition_fetch_bytes: int = 1048576,
                 check_crcs: bool = True, auto_offset_reset: str = "earliest", retry_backoff_ms: int = 100) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}")
        self._client = client
        self._time = client.time
        self._isolation_level = isolation_level
        self._max_wait_ms = max_wait_ms
        self._min_bytes = min_bytes
        self._max_bytes = max_bytes
        self._max_partition_fetch_bytes = max_partition_fetch_bytes
        self._check_crcs = check_crcs
        self._auto_offset_reset = auto_offset_reset
        self._retry_backoff_ms = retry_backoff_ms
        self._positions: dict[TopicPartition, int | None] = {}
        self._resets: dict[TopicPartition, int] = {}  # pending seeks by timestamp (-2 earliest, -1 latest)
        self._buffer: collections.deque[ConsumerRecord] = collections.deque()
        self._refresh_needed = False

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Consume exactly these (topic, partition)s from now on."""
        self._positions = {TopicPartition(*tp): None for tp in partitions}
        self._resets.clear()
        self._buffer.clear()

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        tp = self._assigned(tp)
        self._resets.pop(tp, None)
        self._positions[tp] = offset
        self._drop_buffered(tp)

    def seek_to_beginning(self, *tps: tuple[str, int]) -> None:
        """Seek these partitions (all assigned ones if none given) to their earliest offset."""
        for tp in tps or list(self._positions):
            self._seek_to_timestamp(tp, _EARLIEST)

    def seek_to_end(self, *tps: tuple[str, int]) -> None:
        """Seek these partitions (all assigned ones if none given) to their end."""
        for tp in tps or list(self._positions):
            self._seek_to_timestamp(tp, _LATEST)

    def seek_to_timestamp(self, tp: tuple[str, int], timestamp_ms: int) -> None:
        """Seek to the first record with a timestamp >= ``timestamp_ms`` (the end if none)."""
        if timestamp_ms < 0:
            raise ValueError(f"timestamp must be >= 0, not {timestamp_ms}")
        self._seek_to_timestamp(tp, timestamp_ms)

    def _seek_to_timestamp(self, tp: tuple[str, int], timestamp: int) -> None:
        tp = self._assigned(tp)
        self._resets[tp] = timestamp
        self._drop_buffered(tp)

    async def position(self, tp: tuple[str, int]) -> int:
        """The offset of the next record to be returned for ``tp``."""
        tp = self._assigned(tp)
        await self._update_positions()
        return self._positions[tp]

    def _assigned(self, tp: tuple[str, int]) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._positions:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned")
        return tp

    def _drop_buffered(self, tp: TopicPartition) -> None:
        self._buffer = collections.deque(r for r in self._buffer if (r.topic, r.partition) != tp)

    async def _update_positions(self) -> None:
        for tp, position in self._positions.items():
            if position is None and tp not in self._resets:
                if self._auto_offset_reset == "none":
                    raise OffsetOutOfRangeError(f"{tp.topic}-{tp.partition} has no position and auto_offset_reset is none")
                self._resets[tp] = _EARLIEST if self._auto_offset_reset == "earliest" else _LATEST
        if not self._resets:
            return
        resets = dict(self._resets)
        found = await self._client.offsets_for_times(resets, self._isolation_level)
        beyond = [tp for tp, result in found.items() if result is None]  # no record that late: the end
        if beyond:
            found.update(await self._client.offsets_for_times(dict.fromkeys(beyond, _LATEST), self._isolation_level))
        for tp, timestamp in resets.items():
            if self._resets.get(tp) == timestamp:  # not seeked elsewhere meanwhile
                del self._resets[tp]
                self._positions[tp] = found[tp][0]

    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The records fetched within ``timeout_ms`` (at most one round once any arrive)."""
        if self._buffer:
            out: dict[TopicPartition, list[ConsumerRecord]] = collections.defaultdict(list)
            while self._buffer:
                r = self._buffer.popleft()
                out[TopicPartition(r.topic, r.partition)].append(r)
            return dict(out)
        deadline = self._time.monotonic_ms() + timeout_ms
        while True:
            await self._update_positions()
            remaining = max(0.0, deadline - self._time.monotonic_ms())
            records = await self._fetch(int(min(self._max_wait_ms, remaining)))
            if records or self._time.monotonic_ms() >= deadline:
                return records

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._buffer:
            for records in (await self.getmany(self._max_wait_ms)).values():
                self._buffer.extend(records)
        return self._buffer.popleft()

    async def _fetch(self, max_wait_ms: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        if self._refresh_needed:
            self._refresh_needed = False
            try:
                await self._client.refresh_metadata({tp.topic for tp in self._positions})
            except KafkaConnectionError as exc:
                log.warning("consumer metadata refresh failed: %s", exc)
        by_leader: dict[int, dict[TopicPartition, int]] = collections.defaultdict(dict)
        for tp, position in self._positions.items():
            leader = self._client.cluster.leader(*tp)
            if leader < 0:
                self._refresh_needed = True
            elif position is not None:
                by_leader[leader][tp] = position
        if by_leader:
            results = await asyncio.gather(*(self._fetch_from(node, offsets, max_wait_ms)
                                             for node, offsets in by_leader.items()))
        else:
            results = []
        if self._refresh_needed and max_wait_ms:  # some leader is unknown or failed: do not hammer
            await sleep(self._time, min(self._retry_backoff_ms, max_wait_ms))
        return {tp: records for result in results for tp, records in result.items()}

    async def _fetch_from(self, node: int, offsets: dict[TopicPartition, int], max_wait_ms: int
                          ) -> dict[TopicPartition, list[ConsumerRecord]]:
        by_topic: dict[str, list[fast_codecs.FetchPartition]] = collections.defaultdict(list)
        for tp, offset in offsets.items():
            epoch = self._client.cluster.partition(*tp).leader_epoch
            by_topic[tp.topic].append(fast_codecs.FetchPartition(
                tp.partition, epoch, offset, -1, self._max_partition_fetch_bytes))
        try:
            conn = await self._client.connection(node)
            version = conn.version_for(ApiKey.FETCH, max_v=fast_codecs.FETCH_VERSIONS[1])
            request = fast_codecs.FetchRequest(version, -1, max_wait_ms, self._min_bytes, self._max_bytes,
                                           self._isolation_level, 0, -1, list(by_topic.items()), [], "")
            response = await conn.fetch(request, version)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.info("fetch from broker %d failed: %s", node, exc)
            self._refresh_needed = True
            return {}
        if response.error_code:
            raise _error(response.error_code, f"fetch from broker {node}")
        out = {}
        for topic, partitions in response.responses:
            for data in partitions:
                tp = TopicPartition(topic, data.partition)
                if tp not in offsets or self._positions.get(tp) != offsets[tp]:
                    continue  # seeked or unassigned while the fetch was out
                records = self._partition_records(tp, data, offsets[tp])
                if records:
                    out[tp] = records
        return out

    def _partition_records(self, tp: TopicPartition, data: fast_codecs.FetchPartitionData,
                           offset: int) -> list[ConsumerRecord]:
        error = data.error_code
        if error == ErrorCode.OFFSET_OUT_OF_RANGE and self._auto_offset_reset != "none":
            log.info("%s-%d: offset %d out of range, resetting to %s", tp.topic, tp.partition, offset,
                     self._auto_offset_reset)
            self._positions[tp] = None
            return []
        if error and error_for(error).invalid_metadata:
            self._refresh_needed = True
            return []
        if error:
            raise _error(error, f"fetch {tp.topic}-{tp.partition} at offset {offset}")
        return self._decode(tp, data.records, offset, data.aborted_transactions)

    def _decode(self, tp: TopicPartition, buf, offset: int, aborted) -> list[ConsumerRecord]:
        out = []
        position = offset
        # read_committed: a transactional batch of a producer whose aborted transaction has
        # begun (first_offset <= the batch) is skipped, until that producer's abort marker.
        aborted = sorted(aborted or (), key=lambda a: a[1])
        next_aborted, aborting = 0, set()
        for pos, header in iter_batch_headers(buf or b""):  # stops before a truncated trailing batch
            if header.next_offset <= position:
                continue
            if header.magic != 2:
                raise CorruptRecordError(f"{tp.topic}-{tp.partition}: a magic {header.magic} batch at offset "
                                         f"{header.base_offset}; only magic 2 is supported")
            if self._check_crcs and compute_crc(buf, pos, header.size) != header.crc:
                raise CorruptRecordError(f"{tp.topic}-{tp.partition}: CRC mismatch in the batch at offset "
                                         f"{header.base_offset}")
            position = header.next_offset
            while next_aborted < len(aborted) and aborted[next_aborted][1] <= header.last_offset:
                aborting.add(aborted[next_aborted][0])
                next_aborted += 1
            if header.is_control:
                aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
            for r in decode_records(header, batch_body(buf, pos, header)):
                if r.offset >= offset:
                    out.append(ConsumerRecord(tp.topic, tp.partition, r.offset, r.timestamp, header.timestamp_type,
                                              r.key, r.value, r.headers))
        self._positions[tp] = position
        return out
