"""ControllerChannelManager (the ZooKeeper-era controller's name): the controller's requests to brokers.

One ordered queue per broker and one sender task per queue, one request in flight. The
controller enqueues *items* that already hold the state to send (captured when the records
behind them were decided, released here only after they were durable):

* ``UpdateMetadataItem``: partition states of any topics, each topic's id and config
  overrides, the live brokers, and the security records (ACLs, SCRAM credentials: the whole
  set in a full state, the changes otherwise);
* ``LeaderAndIsrItem``: partition states for partitions the broker replicates, the
  endpoints of their leaders, and whether it is the broker's full state;
* ``StopReplicaItem``: partitions to stop (and delete);
* ``Barrier``: a callback run once everything before it was acknowledged (the controller
  learns that a broker has received its full state this way).

An item of the same kind as the last one queued (and not yet in flight) is merged into it
(newer partition states replace older ones), so a burst of changes becomes one request per
kind while the order between kinds is kept: a new topic's UpdateMetadata (with its configs)
reaches a broker before the LeaderAndIsr that makes it create the log.

A full UpdateMetadata (a new controller's, or a registering broker's) is the same for every
broker: the controller hands them all one item, encoded once, each request getting only its
broker's epoch written in (with 10,000 partitions encoding one costs seconds).

Requests carry the controller id and epoch, and the target broker's epoch. A request that
fails (connection refused or lost, timeout) is retried after a backoff on the injected
clock, doubling up to a maximum; the queue waits meanwhile. Errors in responses are logged
(STALE_CONTROLLER_EPOCH means a newer controller exists). A broker that registers again
gets a fresh queue: whatever was queued for its previous incarnation is dropped.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import uuid
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from protocol.api_keys import ApiKey
from protocol.client import DEFAULT_NETWORK, BrokerConnection, Network, sleep
from protocol.clock import Time
from protocol.errors import ErrorCode, UnsupportedVersionError
from protocol.fast_codecs import (LeaderAndIsrLiveLeader, LeaderAndIsrPartitionState, LeaderAndIsrRequest,
                                  LeaderAndIsrTopicState, UpdateMetadataBroker, UpdateMetadataEndpoint,
                                  UpdateMetadataPartitionState, UpdateMetadataRequest, UpdateMetadataTopicConfig,
                                  UpdateMetadataTopicState, decode_leader_and_isr_response,
                                  encode_leader_and_isr_request, encode_update_metadata_request)
from protocol.messages import APIS

log = logging.getLogger("kbroker.controller.channel")

LEADER_DURING_DELETE = -2       # UpdateMetadata leader / StopReplica epoch of a partition being deleted
REQUEST_TYPE_INCREMENTAL = 1    # AbstractControlRequest.Type (KIP-516)
REQUEST_TYPE_FULL = 2
# Versions spoken to brokers: the first ones with topic ids (LeaderAndIsr 5, UpdateMetadata 7)
# and topic configs (UpdateMetadata 6+), up to the newest.
LEADER_AND_ISR_VERSIONS = (5, 7)
UPDATE_METADATA_VERSIONS = (7, 8)
STOP_REPLICA_VERSIONS = (3, 4)
# Where UpdateMetadata's broker epoch sits in the encoded body: after controller id (int32),
# isKRaftController (bool, v8+) and controller epoch (int32).
_BROKER_EPOCH_AT = {7: 8, 8: 9}
_I64 = struct.Struct(">q")


class PartitionState(NamedTuple):
    topic: str
    topic_id: uuid.UUID
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    is_new: bool = False
    leader_recovery_state: int = 0
    adding: tuple[int, ...] = ()     # a reassignment in progress (KIP-455)
    removing: tuple[int, ...] = ()


class LiveBroker(NamedTuple):
    broker_id: int
    endpoints: tuple[tuple[str, str, int, int], ...]  # (listener, host, port, security protocol)
    rack: str | None


@dataclass
class UpdateMetadataItem:
    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    live_brokers: tuple[LiveBroker, ...] = ()
    full: bool = False
    # Security records (ACLs, SCRAM credentials), each framed as in the metadata log: the whole
    # set in a full state, the records of the changes otherwise (in order).
    records: tuple[bytes, ...] = ()
    # (version, controller epoch) -> the request body encoded for broker epoch 0: a full state
    # item is shared by every broker and encoded once (_encoded_update_metadata).
    encoded: dict[tuple[int, int], bytes] = field(default_factory=dict, compare=False, repr=False)

    def merge(self, newer: "UpdateMetadataItem") -> "UpdateMetadataItem":
        # A newer full state holds every security record; changes after an older one replay on top of it.
        records = newer.records if newer.full else self.records + newer.records
        return UpdateMetadataItem({**self.partitions, **newer.partitions}, {**self.topic_configs, **newer.topic_configs},
                                  newer.live_brokers, self.full or newer.full, records)


@dataclass
class LeaderAndIsrItem:
    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    leaders: dict[int, tuple[str, int]] = field(default_factory=dict)  # broker id -> (host, port)
    full: bool = False

    def merge(self, newer: "LeaderAndIsrItem") -> "LeaderAndIsrItem":
        if newer.full:  # a full state supersedes whatever was pending
            return newer
        return LeaderAndIsrItem({**self.partitions, **newer.partitions}, {**self.leaders, **newer.leaders}, self.full)


@dataclass
class StopReplicaItem:
    partitions: dict[tuple[str, int], tuple[int, bool]] = field(default_factory=dict)  # -> (leader epoch, delete)

    def merge(self, newer: "StopReplicaItem") -> "StopReplicaItem":
        return StopReplicaItem({**self.partitions, **newer.partitions})


@dataclass
class Barrier:
    callback: Callable[[], None]

    def merge(self, newer):  # never merged
        raise TypeError("barriers are not merged")


class _BrokerQueue:
    def __init__(self, broker_id: int, broker_epoch: int, host: str, port: int) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.host = host
        self.port = port
        self.items: collections.deque = collections.deque()
        self.in_flight = False
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.conn: BrokerConnection | None = None
        self.failures = 0
        self.sent = 0

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class ControllerChannelManager:
    def __init__(self, controller_id: int, *, time: Time, network: Network = DEFAULT_NETWORK,
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 2000) -> None:
        self.controller_id = controller_id
        self.controller_epoch = -1
        self.time = time
        self.network = network
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self._queues: dict[int, _BrokerQueue] = {}
        self.stale_epoch = False  # a broker answered STALE_CONTROLLER_EPOCH: a newer controller exists
        # Told each broker's LeaderAndIsr answer: (topic id, partition, error code) per partition.
        self.on_leader_and_isr_answer: Callable[[int, list[tuple[uuid.UUID, int, int]]], None] | None = None

    # -- brokers -------------------------------------------------------------------------

    def add_broker(self, broker_id: int, broker_epoch: int, host: str, port: int) -> None:
        """A broker (re)registered: a fresh queue; anything queued for an earlier registration is dropped."""
        old = self._queues.pop(broker_id, None)
        if old is not None:
            old.close()
        q = _BrokerQueue(broker_id, broker_epoch, host, port)
        q.task = asyncio.get_running_loop().create_task(self._send_loop(q), name=f"controller-channel-{broker_id}")
        q.task.add_done_callback(lambda t, b=broker_id: self._on_task_done(b, t))
        self._queues[broker_id] = q

    def remove_broker(self, broker_id: int) -> None:
        q = self._queues.pop(broker_id, None)
        if q is not None:
            q.close()

    def brokers(self) -> list[int]:
        return sorted(self._queues)

    def _on_task_done(self, broker_id: int, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the request sender for broker %d failed", broker_id, exc_info=task.exception())

    # -- queueing ------------------------------------------------------------------------

    def enqueue(self, broker_id: int, item) -> None:
        q = self._queues.get(broker_id)
        if q is None:
            return  # not registered (any more): nothing to send to
        items = q.items
        mergeable_tail = items and not (len(items) == 1 and q.in_flight)
        if mergeable_tail and type(items[-1]) is type(item) and not isinstance(item, Barrier):
            items[-1] = items[-1].merge(item)
        else:
            items.append(item)
        q.wakeup.set()

    def enqueue_full_state(self, broker_id: int, update_metadata: UpdateMetadataItem, leader_and_isr: LeaderAndIsrItem,
                           on_delivered: Callable[[], None]) -> None:
        self.enqueue(broker_id, update_metadata)
        self.enqueue(broker_id, leader_and_isr)
        self.enqueue(broker_id, Barrier(on_delivered))

    def is_idle(self, broker_id: int) -> bool:
        """Nothing queued or in flight for the broker (True for an unknown broker)."""
        q = self._queues.get(broker_id)
        return q is None or (not q.items and not q.in_flight)

    def pending(self, broker_id: int) -> int:
        q = self._queues.get(broker_id)
        return 0 if q is None else len(q.items)

    # -- sending -------------------------------------------------------------------------

    async def _connection(self, q: _BrokerQueue) -> BrokerConnection:
        if q.conn is None or not q.conn.connected:
            if q.conn is not None:
                q.conn.close()
            q.conn = None
            conn = BrokerConnection(q.host, q.port, client_id=f"controller-{self.controller_id}", network=self.network,
                                    time=self.time, request_timeout_ms=self.request_timeout_ms)
            await conn.connect()
            q.conn = conn
        return q.conn

    async def _send_loop(self, q: _BrokerQueue) -> None:
        backoff = self.retry_backoff_ms
        while True:
            if not q.items:
                q.wakeup.clear()
                await q.wakeup.wait()
                continue
            item = q.items[0]
            if isinstance(item, Barrier):
                q.items.popleft()
                try:
                    item.callback()
                except Exception:
                    log.exception("barrier callback for broker %d failed", q.broker_id)
                continue
            q.in_flight = True
            try:
                conn = await self._connection(q)
                api_key, version, body = self._build(item, q, conn)
                if isinstance(body, bytes):
                    raw = await conn.request_raw(api_key, version, body)
                    if api_key == ApiKey.LEADER_AND_ISR:  # an answer for every partition: hand-written
                        response = decode_leader_and_isr_response(version, raw, 0)
                    else:
                        response = APIS[api_key].response.parse(version, raw, 0)
                else:
                    response = await conn.request(api_key, body, version)
            except UnsupportedVersionError as exc:
                log.error("cannot send to broker %d: %s; dropping %s", q.broker_id, exc, type(item).__name__)
                q.items.popleft()
                q.in_flight = False
                continue
            except Exception as exc:  # connection refused or lost, timeout, a response that does not parse
                q.failures += 1
                level = logging.WARNING if q.failures == 1 else logging.DEBUG
                log.log(level, "request to broker %d at %s:%d failed (%s); retrying in %d ms", q.broker_id, q.host,
                        q.port, exc, backoff)
                if q.conn is not None:
                    q.conn.close()
                    q.conn = None
                await sleep(self.time, backoff)
                backoff = min(backoff * 2, self.retry_backoff_max_ms)
                continue
            if q.failures:
                log.info("broker %d at %s:%d reachable again after %d failed attempts", q.broker_id, q.host, q.port,
                         q.failures)
            q.failures = 0
            backoff = self.retry_backoff_ms
            q.items.popleft()
            q.in_flight = False
            q.sent += 1
            self._check_response(q, api_key, response)
            if isinstance(item, LeaderAndIsrItem) and self.on_leader_and_isr_answer is not None:
                self._report_leader_and_isr(q.broker_id, item, response)

    def _check_response(self, q: _BrokerQueue, api_key: int, response) -> None:
        name = ApiKey(api_key).name
        if response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH:
            self.stale_epoch = True
            log.warning("broker %d rejected %s: controller epoch %d is stale (a newer controller exists)", q.broker_id,
                        name, self.controller_epoch)
            return
        if response.error_code:
            log.warning("broker %d answered %s with %s", q.broker_id, name, _error_name(response.error_code))
            return
        errors = []
        if api_key == ApiKey.LEADER_AND_ISR:
            errors = [(p.topic_name, p.partition_index, p.error_code) for t in response.topics for p in t.partition_errors
                      if p.error_code]
        elif api_key == ApiKey.STOP_REPLICA:
            errors = [(p.topic_name, p.partition_index, p.error_code) for p in response.partition_errors if p.error_code]
        if errors:
            log.warning("broker %d answered %s with partition errors: %s", q.broker_id, name,
                        ", ".join(f"{t or ''}-{p}: {_error_name(c)}" for t, p, c in errors[:10]))

    def _report_leader_and_isr(self, broker_id: int, item: LeaderAndIsrItem, response) -> None:
        ids = {topic: s.topic_id for (topic, _p), s in item.partitions.items()}
        # v5+ answers by topic id, earlier versions by name.
        results = [(t.topic_id, p.partition_index, p.error_code) for t in response.topics for p in t.partition_errors]
        results += [(ids[p.topic_name], p.partition_index, p.error_code) for p in response.partition_errors
                    if p.topic_name in ids]
        if response.error_code:
            results = [(s.topic_id, s.partition, response.error_code) for s in item.partitions.values()]
        try:
            self.on_leader_and_isr_answer(broker_id, results)  # type: ignore[misc]
        except Exception:
            log.exception("handling the LeaderAndIsr answer of broker %d failed", broker_id)

    # -- request bodies ------------------------------------------------------------------

    def _build(self, item, q: _BrokerQueue, conn: BrokerConnection) -> tuple[int, int, dict | bytes]:
        """(API key, version, the request body: a dict to encode, or bytes already encoded).
        LeaderAndIsr and UpdateMetadata (a full state: every partition) go through the
        hand-written codecs of protocol/fast_codecs.py."""
        epoch = self.controller_epoch
        if isinstance(item, UpdateMetadataItem):
            version = conn.version_for(ApiKey.UPDATE_METADATA, *UPDATE_METADATA_VERSIONS)
            if item.full:
                return ApiKey.UPDATE_METADATA, version, self._encoded_update_metadata(item, version, q.broker_epoch)
            return ApiKey.UPDATE_METADATA, version, encode_update_metadata_request(
                version, self.update_metadata_body(item, q.broker_epoch))
        if isinstance(item, LeaderAndIsrItem):
            version = conn.version_for(ApiKey.LEADER_AND_ISR, *LEADER_AND_ISR_VERSIONS)
            return ApiKey.LEADER_AND_ISR, version, encode_leader_and_isr_request(
                version, self.leader_and_isr_body(item, q.broker_epoch))
        if isinstance(item, StopReplicaItem):
            version = conn.version_for(ApiKey.STOP_REPLICA, *STOP_REPLICA_VERSIONS)
            topics: dict[str, list] = {}
            for (topic, partition), (leader_epoch, delete) in sorted(item.partitions.items()):
                topics.setdefault(topic, []).append({"partition_index": partition, "leader_epoch": leader_epoch,
                                                     "delete_partition": delete})
            return ApiKey.STOP_REPLICA, version, {
                "controller_id": self.controller_id, "controller_epoch": epoch, "broker_epoch": q.broker_epoch,
                "topic_states": [{"topic_name": t, "partition_states": ps} for t, ps in topics.items()]}
        raise TypeError(f"unknown channel item {item!r}")

    def _encoded_update_metadata(self, item: UpdateMetadataItem, version: int, broker_epoch: int) -> bytes:
        """A full UpdateMetadata (every partition: tens of thousands of entries) is encoded
        once for all brokers, then only its broker epoch is written in: an int64 after the
        fixed-size controller id, isKRaftController (v8+) and controller epoch."""
        key = (version, self.controller_epoch)
        encoded = item.encoded.get(key)
        if encoded is None:
            encoded = encode_update_metadata_request(version, self.update_metadata_body(item, 0))
            item.encoded[key] = encoded
        at = _BROKER_EPOCH_AT[version]
        return encoded[:at] + _I64.pack(broker_epoch) + encoded[at + 8:]

    def update_metadata_body(self, item: UpdateMetadataItem, broker_epoch: int) -> UpdateMetadataRequest:
        epoch = self.controller_epoch
        topics: dict[str, UpdateMetadataTopicState] = {}
        for (topic, _p), s in sorted(item.partitions.items()):
            t = topics.get(topic)
            if t is None:
                t = topics[topic] = UpdateMetadataTopicState(topic, s.topic_id, [])
            t.partition_states.append(UpdateMetadataPartitionState(
                s.partition, epoch, s.leader, s.leader_epoch, s.isr, s.partition_epoch, s.replicas, s.offline_replicas))
        for topic, configs in item.topic_configs.items():
            if topic in topics:
                topics[topic].topic_configs = [UpdateMetadataTopicConfig(k, v) for k, v in sorted(configs.items())]
        return UpdateMetadataRequest(
            self.controller_id, epoch, broker_epoch, REQUEST_TYPE_FULL if item.full else REQUEST_TYPE_INCREMENTAL,
            list(topics.values()),
            [UpdateMetadataBroker(b.broker_id, [UpdateMetadataEndpoint(port, host, listener, sp)
                                                for listener, host, port, sp in b.endpoints], b.rack)
             for b in item.live_brokers], metadata_records=list(item.records))

    def leader_and_isr_body(self, item: LeaderAndIsrItem, broker_epoch: int) -> LeaderAndIsrRequest:
        epoch = self.controller_epoch
        topics: dict[str, LeaderAndIsrTopicState] = {}
        for (topic, _p), s in sorted(item.partitions.items()):
            t = topics.get(topic)
            if t is None:
                t = topics[topic] = LeaderAndIsrTopicState(topic, s.topic_id, [])
            t.partition_states.append(LeaderAndIsrPartitionState(
                s.partition, epoch, s.leader, s.leader_epoch, s.isr, s.partition_epoch, s.replicas, s.adding, s.removing,
                s.is_new, s.leader_recovery_state))
        return LeaderAndIsrRequest(
            self.controller_id, epoch, broker_epoch, REQUEST_TYPE_FULL if item.full else REQUEST_TYPE_INCREMENTAL,
            list(topics.values()),
            [LeaderAndIsrLiveLeader(b, host, port) for b, (host, port) in sorted(item.leaders.items())])

    async def close(self) -> None:
        queues = list(self._queues.values())
        self._queues.clear()
        for q in queues:
            q.close()
        for q in queues:
            if q.task is not None:
                try:
                    await q.task
                except (asyncio.CancelledError, Exception):
                    pass


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
