"""QuorumController (Kafka's): one event queue, decide, record, replay.

Theory of operation:

* Every request and every timer becomes an event on one asyncio queue, processed in order
  by one task; an event runs synchronously, so nothing else sees the state mid-change.
* An event's operation reads the state and returns a ControllerResult: the records that
  would change it and the response. It never changes state itself.
* The records are appended to the metadata store as one batch (written, not yet fsynced)
  and replayed at once, so the next event sees them. ``replay`` is the only code that
  changes state, and loading at start is the same replay over snapshot + log.
* Everything seen outside — the response, and the requests to brokers derived from the
  records (captured now, with the state as of this event) — waits in the
  ControllerPurgatory under the offset of the last record written so far, and is released
  when an fsync covers it (group commit). Reads wait the same way, so nothing not yet
  durable is ever revealed. A failed fsync is fatal: the state is ahead of the disk.
* At start the controller claims a new epoch (durably), sends every registered broker its
  full state, and gives every unfenced broker a fresh session.

Brokers: registration (fenced), heartbeats (touch the session; unfence once the broker
has acknowledged its full state), session expiry (fence; leaderships move), controlled
shutdown (heartbeat want_shut_down: leave every ISR and leadership, then should_shut_down
once the broker leads nothing and has received everything sent to it, and fence it).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import uuid
from dataclasses import dataclass, field
from typing import Callable, Sequence

from broker.metrics import TIME_BUCKETS, FastHistogram
from broker.security.authorizer import (AclBindingFilter, AuthorizerMetrics, StandardAcl, StandardAuthorizer,
                                        parse_super_users)
from broker.security.metadata import BROKER_RECORD_TYPES, describe_acls_resources
from protocol.clock import Time, TimerHandle
from protocol.errors import ErrorCode
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType as T, encode_record, make_record

from .broker_heartbeat import BrokerHeartbeatManager
from .channel_manager import (LEADER_DURING_DELETE, Barrier, LeaderAndIsrItem, LiveBroker, PartitionState,
                              StopReplicaItem, UpdateMetadataItem)
from .acl_control import AclControlManager
from .cluster_control import FENCE, UNFENCE, ClusterControlManager
from .configuration_control import BROKER, TOPIC, ConfigurationControlManager, broker_resource_problem
from .controller_purgatory import ControllerPurgatory
from .controller_result import ControllerResult
from .creation_watch import CreationWatch
from .metadata_store import MetadataStore
from .partition_autobalancer import AutobalancerConfig, LogDirUsage, PartitionAutobalancer
from .partition_change import NO_LEADER, NO_LEADER_CHANGE
from .producer_id_control import ProducerIdControlManager
from .replication_control import PREFERRED_ELECTION, ZERO_UUID, ReplicationControlManager
from .client_quota_control import ClientQuotaControlManager, describe as describe_client_quotas
from .scram_control import ScramControlManager

log = logging.getLogger("kbroker.controller")

METADATA_VERSION_FEATURE = "metadata.version"
# Kafka's metadata.version 3.3-IV3: the record layouts this controller writes (see
# protocol/messages/metadata_records.py WRITE_VERSIONS).
METADATA_VERSION = 7
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
# The session expiry check waits this long after its deadline: one turn of the loop, so the
# sockets are read first (a timer, unlike a ready callback, never runs before the next poll).
FENCE_CHECK_DEFER_MS = 1


@dataclass(frozen=True)
class QuorumControllerConfig:
    node_id: int
    cluster_id: str
    session_timeout_ms: int = 9000
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    num_partitions: int = 1
    default_replication_factor: int = 1
    delete_topic_enable: bool = True
    topic_defaults: dict = field(default_factory=dict)
    topic_default_sources: dict = field(default_factory=dict)  # DescribeConfigs' config_source of each default
    snapshot_max_bytes: int = 20 * 1024 * 1024
    snapshot_max_interval_ms: int = 3_600_000
    # authorizer.class.name set: the controller keeps an authorizer over its ACLs (ControllerApis)
    authorizer_enabled: bool = False
    super_users: frozenset = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    autobalancer: AutobalancerConfig = field(default_factory=AutobalancerConfig)

    @classmethod
    def from_kafka_config(cls, config, cluster_id: str) -> "QuorumControllerConfig":
        return cls(
            node_id=config.node_id, cluster_id=cluster_id,
            session_timeout_ms=config["broker.session.timeout.ms"],
            unclean_leader_election_enable=config["unclean.leader.election.enable"],
            auto_leader_rebalance_enable=config["auto.leader.rebalance.enable"],
            leader_imbalance_check_interval_ms=config["leader.imbalance.check.interval.seconds"] * 1000,
            leader_imbalance_per_broker_percentage=config["leader.imbalance.per.broker.percentage"],
            num_partitions=config["num.partitions"], default_replication_factor=config["default.replication.factor"],
            delete_topic_enable=config["delete.topic.enable"], topic_defaults=config.topic_defaults(),
            topic_default_sources=config.topic_default_sources(),
            snapshot_max_bytes=config["metadata.log.max.record.bytes.between.snapshots"],
            snapshot_max_interval_ms=config["metadata.log.max.snapshot.interval.ms"],
            authorizer_enabled=bool(config["authorizer.class.name"]),
            super_users=parse_super_users(config["super.users"]),
            allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"],
            autobalancer=AutobalancerConfig.from_kafka_config(config))


class ControllerStoppedError(Exception):
    """The controller stopped (or failed) before the event could run."""


@dataclass
class _Event:
    name: str
    op: Callable[[], ControllerResult]
    future: asyncio.Future
    enqueued_ms: float = 0.0


@dataclass
class _FullState:
    epoch: int
    token: int
    delivered: bool = False


class QuorumController:
    def __init__(self, config: QuorumControllerConfig, store: MetadataStore, *, time: Time, channel=None,
                 rng: random.Random | None = None, on_fatal: Callable[[BaseException], None] | None = None,
                 authorizer_metrics: AuthorizerMetrics | None = None,
                 bootstrap: Sequence[ApiMessageAndVersion] = (), bootstrap_source: str = "") -> None:
        """``bootstrap``: the records of ``kbroker storage format`` (bootstrap.checkpoint, KIP-900),
        appended with the first records when the metadata log is empty, and ignored otherwise."""
        self.config = config
        self.bootstrap = list(bootstrap)
        self.bootstrap_source = bootstrap_source
        self._log_was_empty = False
        self.node_id = config.node_id
        self.cluster_id = config.cluster_id
        self.store = store
        self.time = time
        self.channel = channel
        self.on_fatal = on_fatal
        self.rng = rng or random.Random()
        self.cluster = ClusterControlManager(config.cluster_id)
        self.configs = ConfigurationControlManager(config.topic_defaults, config.unclean_leader_election_enable,
                                                   config.topic_default_sources)
        self.replication = ReplicationControlManager(
            self.cluster, self.configs, default_num_partitions=config.num_partitions,
            default_replication_factor=config.default_replication_factor,
            delete_topic_enable=config.delete_topic_enable, rng=self.rng)
        self.producer_ids = ProducerIdControlManager(self.cluster)
        self.autobalancer = PartitionAutobalancer(config.autobalancer, time, self.cluster, self.replication, self.configs)
        # The authorizer ControllerApis checks requests with (None: no authorizer.class.name);
        # the AclControlManager keeps its bindings in step with the replayed records.
        self.authorizer: StandardAuthorizer | None = (StandardAuthorizer(
            config.super_users, config.allow_everyone_if_no_acl_found, authorizer_metrics, config.node_id)
            if config.authorizer_enabled else None)
        self.acls = AclControlManager(self.authorizer, self.rng)
        self.scram = ScramControlManager()
        self.quotas = ClientQuotaControlManager()
        self.heartbeats = BrokerHeartbeatManager(time, config.session_timeout_ms)
        self.features: dict[str, int] = {}
        self.purgatory = ControllerPurgatory()
        self.epoch = -1
        self.active = False
        # Metrics (ControllerEventManager, ControllerStats): cheap to keep, read when scraped.
        self.event_queue_time = FastHistogram(TIME_BUCKETS)
        self.event_processing_time = FastHistogram(TIME_BUCKETS)
        self.leader_elections = 0
        self.fatal_error: BaseException | None = None
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._last_written = -1
        self._full_state: dict[int, _FullState] = {}
        self._full_state_tokens = itertools.count()
        self._wanted_full_state: set[int] = set()  # per event: brokers to send their full state
        self._channel_adds: set[int] = set()       # per event: brokers whose channel queue starts afresh
        self._timers: dict[str, TimerHandle] = {}
        self._fence_deadline: float | None = None
        self._fence_queued = False
        self._snapshot_bytes_mark = 0  # store.bytes_written when the last snapshot was taken
        self._last_snapshot_offset = 0
        self.loaded_snapshot_offset = 0
        self._snapshot_task: asyncio.Task | None = None
        self._background: dict[asyncio.Task, None] = {}  # (not a set: cancelled in a replayable order)
        self.creation_watch = CreationWatch(time, self._take_back)
        if channel is not None:
            channel.on_leader_and_isr_answer = self.creation_watch.answered

    # ==================================================================================
    # lifecycle

    async def start(self) -> None:
        """Load (snapshot + log, replayed), claim an epoch, take over: full state to every
        registered broker, a fresh session for every unfenced one, timers."""
        loaded = await self.store.load()
        self._log_was_empty = not loaded.snapshot_records and not loaded.log_records
        for record in loaded.snapshot_records:
            self.replay(record)
        for _offset, record in loaded.log_records:
            self.replay(record)
        self._last_snapshot_offset = self.loaded_snapshot_offset = loaded.snapshot_offset
        log.info("loaded the metadata: snapshot at %d (%d records) + %d log records; %d brokers, %d topics, "
                 "%d partitions", loaded.snapshot_offset, len(loaded.snapshot_records), len(loaded.log_records),
                 len(self.cluster.brokers), len(self.replication.topics),
                 sum(len(t.parts) for t in self.replication.topics.values()))
        self.epoch = await self.store.claim_epoch()
        self._last_written = self.store.end_offset - 1
        if self.channel is not None:
            self.channel.controller_epoch = self.epoch
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller-events")
        self.active = True
        await self._submit("activate", self._activate)
        log.info("controller %d active in epoch %d (cluster %s)", self.node_id, self.epoch, self.cluster_id)

    def _activate(self) -> ControllerResult:
        records = []
        if METADATA_VERSION_FEATURE not in self.features:
            records.append(make_record(T.FEATURE_LEVEL, name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION))
        if self._log_was_empty and self.bootstrap:
            # Kafka's ActivationRecordsGenerator: the bootstrap records open an empty log (the
            # metadata.version is this controller's).
            records.extend(r for r in self.bootstrap if not (r.type == T.FEATURE_LEVEL
                                                             and r.name == METADATA_VERSION_FEATURE))
            users = sorted({r.name for r in self.bootstrap if r.type == T.USER_SCRAM_CREDENTIAL})
            log.info("The metadata log appears to be empty. Appending %d bootstrap record(s) from %s%s",
                     len(records), self.bootstrap_source or "the bootstrap metadata",
                     f" (SCRAM credentials of {', '.join(users)})" if users else "")
        elif self.bootstrap:
            log.debug("the metadata log is not empty: %s is not used", self.bootstrap_source)
        self._log_was_empty = False
        for broker_id, reg in sorted(self.cluster.brokers.items()):
            if not reg.fenced:
                self.heartbeats.touch(broker_id)
            self._channel_adds.add(broker_id)
            self._wanted_full_state.add(broker_id)
        self._schedule_periodic("leader-rebalance", self.config.leader_imbalance_check_interval_ms,
                                self.config.auto_leader_rebalance_enable, "auto leader rebalance",
                                self._auto_rebalance)
        self.autobalancer.activate()
        self._schedule_periodic("partition-autobalancer", self.config.autobalancer.tick_interval_ms,
                                self.config.autobalancer.mode != "off", "partition autobalancer",
                                self._autobalance)
        self._schedule_periodic("snapshot", self.config.snapshot_max_interval_ms,
                                self.config.snapshot_max_interval_ms > 0, "periodic snapshot", self._periodic_snapshot)
        return ControllerResult(records, None)

    async def stop(self) -> None:
        self.active = False
        self.autobalancer.deactivate()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._task is not None:
            self._queue.put_nowait(None)
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for task in list(self._background):
            task.cancel()
        self.creation_watch.close()
        self.purgatory.fail_all(ControllerStoppedError("controller stopped"))

    def _fatal(self, exc: BaseException) -> None:
        if self.fatal_error is not None:
            return
        self.fatal_error = exc
        self.active = False
        log.error("controller %d cannot go on: %s", self.node_id, exc)
        self.purgatory.fail_all(ControllerStoppedError(f"controller failed: {exc}"))
        if self.on_fatal is not None:
            self.on_fatal(exc)

    # ==================================================================================
    # the event queue

    def _submit(self, name: str, op: Callable[[], ControllerResult]) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        if self._queue is None or not self.active or self.fatal_error is not None:
            future.set_exception(ControllerStoppedError(f"controller is not active ({name})"))
            return future
        self._queue.put_nowait(_Event(name, op, future, self.time.monotonic_ms()))
        return future

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            if event is None:
                break
            if self.fatal_error is not None:
                event.future.set_exception(ControllerStoppedError(f"controller failed: {self.fatal_error}"))
                continue
            started = self.time.monotonic_ms()
            self.event_queue_time.observe((started - event.enqueued_ms) / 1000.0)
            try:
                self._process(event)
                self.event_processing_time.observe((self.time.monotonic_ms() - started) / 1000.0)
            except Exception as exc:  # replay or effects broke: the state may be half changed
                log.exception("controller event %s failed after its records were written", event.name)
                if not event.future.done():
                    event.future.set_exception(exc)
                self._fatal(exc)
        while not self._queue.empty():
            event = self._queue.get_nowait()
            if event is not None and not event.future.done():
                event.future.set_exception(ControllerStoppedError("controller stopped"))

    def _process(self, event: _Event) -> None:
        self._wanted_full_state = set()
        self._channel_adds = set()
        try:
            result = event.op()
        except Exception as exc:
            log.exception("controller event %s failed", event.name)
            event.future.set_exception(exc)
            return
        records = result.records
        removed = {}
        moved_off: dict[tuple[uuid.UUID, int], frozenset[int]] = {}  # replicas a change takes away
        if records:
            try:
                last = self.store.append(records, self.epoch)
            except Exception as exc:
                event.future.set_exception(exc)
                self._fatal(exc)
                return
            first = last - len(records) + 1
            for record in records:
                if record.type == T.PARTITION_CHANGE and record.leader not in (NO_LEADER_CHANGE, NO_LEADER):
                    self.leader_elections += 1
            for i, record in enumerate(records):
                if record.type == T.PARTITION_CHANGE and record.replicas is not None:
                    before = self.replication.partition(record.topic_id, record.partition_id)
                    if before is not None:
                        gone = frozenset(before.replicas) - frozenset(record.replicas)
                        key = (record.topic_id, record.partition_id)
                        moved_off[key] = moved_off.get(key, frozenset()) | gone
                if record.type == T.REMOVE_TOPIC:
                    info = self.replication.topics.get(record.topic_id)
                    if info is not None:
                        removed[info.name] = (info.topic_id, dict(info.parts))
                self.replay(record, first + i)
            for name, (topic_id, parts) in list(removed.items()):
                again = self.replication.topics.get(topic_id)
                if again is not None:  # new partitions taken back (_take_back): only they go
                    removed[name] = (topic_id, {pid: p for pid, p in parts.items() if pid not in again.parts})
            self._last_written = last
        effects = self._effects(records, removed, moved_off)
        response, future = result.response, event.future

        def release() -> None:
            for effect in effects:
                effect()
            if not future.done():
                future.set_result(response)

        def fail(exc: BaseException) -> None:
            if not future.done():
                future.set_exception(exc)

        self.purgatory.add(self._last_written, release, fail)
        durable = self.store.durable_end_offset
        if self._last_written < durable:
            self.purgatory.complete_up_to(durable - 1)
        else:
            self.store.wait_durable(self._last_written).add_done_callback(self._on_durable)
        self._after_event()

    def _on_durable(self, future: asyncio.Future) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            self._fatal(exc)
            return
        self.purgatory.complete_up_to(self.store.durable_end_offset - 1)

    def _after_event(self) -> None:
        self._reschedule_fence_timer()
        if self.store.bytes_written - self._snapshot_bytes_mark >= self.config.snapshot_max_bytes:
            self._start_snapshot()

    # ==================================================================================
    # replay: the only code that changes state

    def replay(self, record: ApiMessageAndVersion, offset: int | None = None) -> None:
        t = record.type
        if t in (T.REGISTER_BROKER, T.UNREGISTER_BROKER, T.FENCE_BROKER, T.UNFENCE_BROKER, T.BROKER_REGISTRATION_CHANGE):
            new_broker = t == T.REGISTER_BROKER and not self.cluster.is_registered(record.broker_id)
            self.cluster.replay(record)
            self.autobalancer.replayed(record, new_broker)
        elif t in (T.TOPIC, T.PARTITION, T.PARTITION_CHANGE, T.REMOVE_TOPIC):
            self.replication.replay(record)
        elif t == T.CONFIG:
            self.configs.replay(record)
        elif t == T.PRODUCER_IDS:
            self.producer_ids.replay(record)
        elif t in (T.ACCESS_CONTROL_ENTRY, T.REMOVE_ACCESS_CONTROL_ENTRY):
            self.acls.replay(record)
        elif t in (T.USER_SCRAM_CREDENTIAL, T.REMOVE_USER_SCRAM_CREDENTIAL):
            self.scram.replay(record)
        elif t == T.CLIENT_QUOTA:
            self.quotas.replay(record)
        elif t == T.FEATURE_LEVEL:
            self.features[record.name] = record.feature_level
        elif t == T.NO_OP:
            pass
        else:
            raise ValueError(f"no replay for {record!r}")

    def snapshot_records(self) -> list[ApiMessageAndVersion]:
        """Records that recreate the whole state (what a snapshot holds)."""
        features = [make_record(T.FEATURE_LEVEL, name=k, feature_level=v) for k, v in sorted(self.features.items())]
        return (features + self.cluster.snapshot_records() + self.replication.snapshot_records()
                + self.configs.snapshot_records() + self.producer_ids.snapshot_records()
                + self.security_records() + self.quotas.snapshot_records())

    def security_records(self) -> list[ApiMessageAndVersion]:
        """The ACL bindings and SCRAM credentials as records: what a broker's full state carries."""
        return self.acls.snapshot_records() + self.scram.snapshot_records()

    def state_summary(self) -> dict:
        """The whole replicated state as plain values (tests compare it across reloads)."""
        return {
            "features": dict(self.features),
            "brokers": {i: (r.incarnation_id, r.epoch, r.listeners, r.rack, r.fenced, r.in_controlled_shutdown)
                        for i, r in sorted(self.cluster.brokers.items())},
            "topics": {info.name: (info.topic_id, {p: info.parts[p] for p in sorted(info.parts)})
                       for info in sorted(self.replication.topics.values(), key=lambda i: i.name)},
            "configs": {k: dict(v) for k, v in sorted(self.configs.configs.items())},
            "broker_configs": {k: dict(v) for k, v in sorted(self.configs.broker_configs.items())},
            "next_producer_id": self.producer_ids.next_producer_id,
            "acls": dict(self.acls.acls),
            "scram": dict(self.scram.credentials),
            "quotas": {entity: dict(values) for entity, values in self.quotas.quotas.items()},
        }

    # ==================================================================================
    # effects: what brokers are told, captured when decided, released when durable

    def _live_brokers(self) -> tuple[LiveBroker, ...]:
        return tuple(LiveBroker(r.broker_id, tuple((e.name, e.host, e.port, e.security_protocol) for e in r.listeners),
                                r.rack) for r in self.cluster.unfenced_brokers())

    def _partition_state(self, topic: str, topic_id: uuid.UUID, pid: int, part, is_new: bool = False) -> PartitionState:
        offline = tuple(r for r in part.replicas if not self.cluster.is_unfenced(r))
        return PartitionState(topic, topic_id, pid, part.leader, part.leader_epoch, part.isr, part.partition_epoch,
                              part.replicas, offline, is_new, part.leader_recovery_state, part.adding, part.removing)

    def _leader_endpoints(self, states) -> dict[int, tuple[str, int]]:
        out = {}
        for s in states:
            reg = self.cluster.registration(s.leader)
            endpoint = reg.endpoint() if reg is not None else None
            if endpoint is not None:
                out[s.leader] = (endpoint.host, endpoint.port)
        return out

    def _full_update_metadata(self) -> UpdateMetadataItem:
        """Every partition's state, every topic's configs, the live brokers: the same for each
        broker, so one item serves all of them (the channel encodes it once)."""
        partitions = {(info.name, pid): self._partition_state(info.name, info.topic_id, pid, part)
                      for info, pid, part in self.replication.all_partitions()}
        configs = {info.name: self.configs.topic_configs(info.name) for info in self.replication.topics.values()}
        return UpdateMetadataItem(partitions, configs, self._live_brokers(), full=True,
                                  records=tuple(encode_record(r) for r in self.security_records()
                                                + self.quotas.snapshot_records()
                                                + self.configs.broker_snapshot_records()))

    def _full_leader_and_isr(self, broker_id: int, full: UpdateMetadataItem) -> LeaderAndIsrItem:
        mine = {key: state for key, state in full.partitions.items() if broker_id in state.replicas}
        return LeaderAndIsrItem(mine, self._leader_endpoints(mine.values()), full=True)

    def _effects(self, records: list[ApiMessageAndVersion], removed: dict,
                 moved_off: dict[tuple[uuid.UUID, int], frozenset[int]] | None = None) -> list[Callable[[], None]]:
        channel = self.channel
        if channel is None:
            return []
        changed: dict[tuple[uuid.UUID, int], bool] = {}
        config_topics: set[str] = set()
        brokers_changed = False
        # the security records, client quotas and dynamic broker configs (not topic configs:
        # those go with their topic's state)
        security = [encode_record(r) for r in records if r.type in BROKER_RECORD_TYPES
                    and (r.type != T.CONFIG or r.resource_type == BROKER)]
        for r in records:
            t = r.type
            if t == T.PARTITION:
                changed[(r.topic_id, r.partition_id)] = True
            elif t == T.PARTITION_CHANGE:
                changed.setdefault((r.topic_id, r.partition_id), False)
            elif t == T.CONFIG and r.resource_type == TOPIC:
                config_topics.add(r.resource_name)
            elif t == T.REGISTER_BROKER:
                self._channel_adds.add(r.broker_id)
                self._full_state.pop(r.broker_id, None)
                self._wanted_full_state.add(r.broker_id)
                brokers_changed = True
            elif t in (T.FENCE_BROKER, T.UNFENCE_BROKER, T.BROKER_REGISTRATION_CHANGE, T.UNREGISTER_BROKER):
                brokers_changed = True
                if t == T.FENCE_BROKER or (t == T.BROKER_REGISTRATION_CHANGE and r.fenced == FENCE):
                    self._full_state.pop(r.id if t == T.FENCE_BROKER else r.broker_id, None)
                    self.creation_watch.broker_gone(r.id if t == T.FENCE_BROKER else r.broker_id)
                if t == T.UNREGISTER_BROKER:
                    self.creation_watch.broker_gone(r.broker_id)
                if t == T.UNFENCE_BROKER or (t == T.BROKER_REGISTRATION_CHANGE and r.fenced == UNFENCE):
                    self._wanted_full_state.add(r.id if t == T.UNFENCE_BROKER else r.broker_id)
        effects: list[Callable[[], None]] = []
        # Brokers that registered (or all of them, at takeover): a fresh channel queue.
        for broker_id in sorted(self._channel_adds):
            reg = self.cluster.registration(broker_id)
            endpoint = reg.endpoint() if reg is not None else None
            if endpoint is not None:
                effects.append(lambda b=broker_id, e=reg.epoch, ep=endpoint: channel.add_broker(b, e, ep.host, ep.port))
        # Full states, for brokers registering, unfencing, asking, or at takeover.
        full_targets = sorted(b for b in self._wanted_full_state if self.cluster.is_registered(b))
        full_metadata = self._full_update_metadata() if full_targets else None
        for broker_id in full_targets:
            reg = self.cluster.registration(broker_id)
            token = next(self._full_state_tokens)
            self._full_state[broker_id] = _FullState(reg.epoch, token)
            assert full_metadata is not None
            um, lisr = full_metadata, self._full_leader_and_isr(broker_id, full_metadata)
            effects.append(lambda b=broker_id, um=um, lisr=lisr, e=reg.epoch, tok=token: channel.enqueue_full_state(
                b, um, lisr, lambda: self._full_state_delivered(b, e, tok)))
        # Incremental changes, to every other registered broker.
        if not (changed or config_topics or removed or brokers_changed or security or moved_off):
            return effects
        partitions: dict[tuple[str, int], PartitionState] = {}
        for (topic_id, pid), is_new in changed.items():
            info = self.replication.topics.get(topic_id)
            if info is None or pid not in info.parts:
                continue
            partitions[(info.name, pid)] = self._partition_state(info.name, topic_id, pid, info.parts[pid], is_new)
        topic_configs = {}
        for name in {s.topic for s in partitions.values()} | config_topics:
            info = self.replication.topic(name)
            if info is None:
                continue
            topic_configs[name] = self.configs.topic_configs(name)
            if name in config_topics:  # a config change re-sends the topic's partitions with its configs
                for pid, part in info.parts.items():
                    partitions.setdefault((name, pid), self._partition_state(name, info.topic_id, pid, part))
        deleted: dict[tuple[str, int], PartitionState] = {}
        stop: dict[int, StopReplicaItem] = {}
        for name, (topic_id, parts) in removed.items():
            for pid, part in parts.items():
                deleted[(name, pid)] = PartitionState(name, topic_id, pid, LEADER_DURING_DELETE, part.leader_epoch,
                                                      part.isr, part.partition_epoch, part.replicas)
                for replica in part.replicas:
                    stop.setdefault(replica, StopReplicaItem()).partitions[(name, pid)] = (LEADER_DURING_DELETE, True)
        # Replicas a reassignment completed (or cancelled) took away: stopped and deleted, at the
        # new leader epoch (one the removed replica has not seen: its StopReplica is not fenced).
        for (topic_id, pid), gone in (moved_off or {}).items():
            info = self.replication.topics.get(topic_id)
            part = info.parts.get(pid) if info is not None else None
            if part is None:
                continue
            for replica in gone:
                if replica not in part.replicas:
                    stop.setdefault(replica, StopReplicaItem()).partitions[(info.name, pid)] = (part.leader_epoch, True)
        um = UpdateMetadataItem({**partitions, **deleted}, topic_configs, self._live_brokers(), records=tuple(security))
        lisr_for: dict[int, dict] = {}
        for key, state in partitions.items():
            if (state.topic_id, state.partition) in changed:
                for replica in state.replicas:
                    lisr_for.setdefault(replica, {})[key] = state
        targets = sorted(set(self.cluster.brokers) - set(full_targets))
        for broker_id in targets:
            mine = lisr_for.get(broker_id)
            lisr = LeaderAndIsrItem(mine, self._leader_endpoints(mine.values())) if mine else None
            sr = stop.get(broker_id)

            def send(b=broker_id, lisr=lisr, sr=sr) -> None:
                channel.enqueue(b, um)
                if lisr is not None:
                    channel.enqueue(b, lisr)
                if sr is not None:
                    channel.enqueue(b, sr)
            effects.append(send)
        # Replicas of deleted topics that are no longer registered get nothing; those getting a
        # full state get the StopReplica too (a full state does not delete what it omits).
        for broker_id in full_targets:
            if broker_id in stop:
                effects.append(lambda b=broker_id, sr=stop[broker_id]: channel.enqueue(b, sr))
        return effects

    def _full_state_delivered(self, broker_id: int, epoch: int, token: int) -> None:
        state = self._full_state.get(broker_id)
        if state is not None and state.epoch == epoch and state.token == token:
            state.delivered = True
            log.info("broker %d (epoch %d) has its full state", broker_id, epoch)

    def caught_up(self, broker_id: int) -> bool:
        """Whether the broker acknowledged the full state sent for its current registration
        (always, without a channel: nothing to wait for)."""
        if self.channel is None:
            return True
        reg = self.cluster.registration(broker_id)
        state = self._full_state.get(broker_id)
        return reg is not None and state is not None and state.epoch == reg.epoch and state.delivered

    # ==================================================================================
    # timers (on the injected clock; each firing becomes an event)

    def _schedule_periodic(self, name: str, interval_ms: int, enabled: bool, event_name: str,
                           op: Callable[[], ControllerResult]) -> None:
        if not enabled or interval_ms <= 0:
            return

        def fire() -> None:
            if not self.active:
                return
            self._submit(event_name, op)
            self._timers[name] = self.time.schedule(interval_ms, fire)

        self._timers[name] = self.time.schedule(interval_ms, fire)

    def _reschedule_fence_timer(self) -> None:
        delay = self.heartbeats.next_expiry_ms()
        if delay is None:
            timer = self._timers.pop("fence", None)
            if timer is not None:
                timer.cancel()
            self._fence_deadline = None
            return
        deadline = self.time.monotonic_ms() + delay
        if self._fence_deadline == deadline and "fence" in self._timers:
            return
        timer = self._timers.pop("fence", None)
        if timer is not None:
            timer.cancel()
        self._fence_deadline = deadline
        self._timers["fence"] = self.time.schedule(delay, self._on_fence_timer)

    def _on_fence_timer(self) -> None:
        """A session may have expired. The check runs as an event queued after one more turn
        of the loop that reads the sockets: a heartbeat that arrived while the loop was held
        (a long callback) is read and counted first, instead of losing the race to a timer
        that came due meanwhile (libuv runs due timers before it polls). Kafka's fencing, too,
        is a deferred event that runs behind the requests already received."""
        self._timers.pop("fence", None)
        self._fence_deadline = None
        if self.active and not self._fence_queued and "fence-check" not in self._timers:
            self._timers["fence-check"] = self.time.schedule(FENCE_CHECK_DEFER_MS, self._queue_fence_check)

    def _queue_fence_check(self) -> None:
        self._timers.pop("fence-check", None)
        if self.active and not self._fence_queued:
            self._fence_queued = True
            self._submit("fence stale brokers", self._fence_stale_broker)

    def _fence_stale_broker(self) -> ControllerResult:
        """Fence the broker whose session expired longest ago; one per event (each fencing
        sees the one before it), another event follows while more are expired."""
        self._fence_queued = False
        expired = self.heartbeats.expired()
        if not expired:
            return ControllerResult([], None)
        broker_id = expired[0]
        self.heartbeats.remove(broker_id)
        if len(expired) > 1:
            self._fence_queued = True
            self._submit("fence stale brokers", self._fence_stale_broker)
        reg = self.cluster.registration(broker_id)
        if reg is None or reg.fenced:
            return ControllerResult([], None)
        log.info("broker %d sent no heartbeat for %d ms: fencing it", broker_id, self.config.session_timeout_ms)
        return ControllerResult(self._fence_records(broker_id), None)

    def _fence_records(self, broker_id: int) -> list[ApiMessageAndVersion]:
        self.heartbeats.remove(broker_id)
        return self.replication.handle_broker_fenced(broker_id) + [self.cluster.fence_record(broker_id)]

    def _autobalance(self) -> ControllerResult:
        return ControllerResult(self.autobalancer.tick(), None)

    def _auto_rebalance(self) -> ControllerResult:
        return ControllerResult(
            self.replication.maybe_balance_partition_leaders(self.config.leader_imbalance_per_broker_percentage), None)

    # ==================================================================================
    # snapshots

    def _periodic_snapshot(self) -> ControllerResult:
        if self.store.end_offset > self._last_snapshot_offset:
            self._start_snapshot()
        return ControllerResult([], None)

    def _start_snapshot(self) -> None:
        """Capture the state now (at the current end offset) and write it once that offset is durable."""
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        offset = self.store.end_offset
        if offset <= self._last_snapshot_offset:
            return
        records = self.snapshot_records()
        epoch = self.epoch
        self._snapshot_bytes_mark = self.store.bytes_written

        async def write() -> None:
            try:
                await self.store.wait_durable(offset - 1)
                await self.store.snapshot(records, offset, epoch)
                self._last_snapshot_offset = offset
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("metadata snapshot at offset %d failed", offset)

        task = asyncio.get_running_loop().create_task(write(), name=f"controller-snapshot-{offset}")
        self._snapshot_task = task
        self._background[task] = None
        task.add_done_callback(self._background.pop)

    async def snapshot_now(self) -> int:
        """Write a snapshot of the current state (tests, tools); returns its offset."""
        def op() -> ControllerResult:
            self._start_snapshot()
            return ControllerResult([], None)

        await self._submit("snapshot", op)
        if self._snapshot_task is not None:
            await asyncio.shield(self._snapshot_task)
        return self._last_snapshot_offset

    # ==================================================================================
    # operations (each one event)

    def register_broker(self, request) -> asyncio.Future:
        def op() -> ControllerResult:
            if request.cluster_id != self.cluster_id:
                log.warning("broker %d registration refused: cluster id %r, this cluster is %r", request.broker_id,
                            request.cluster_id, self.cluster_id)
                return ControllerResult([], {"error_code": ErrorCode.INCONSISTENT_CLUSTER_ID, "broker_epoch": -1})
            if not request.listeners:
                return ControllerResult([], {"error_code": ErrorCode.INVALID_REQUEST, "broker_epoch": -1})
            same = self.cluster.same_registration(request)
            if same is not None:
                return ControllerResult([], {"error_code": ErrorCode.NONE, "broker_epoch": same.epoch})
            records = []
            existing = self.cluster.registration(request.broker_id)
            if existing is not None and not existing.fenced:
                # A new incarnation: the old one is gone (restarted): its leaderships move first.
                log.info("broker %d registers with a new incarnation %s: fencing the old one %s", request.broker_id,
                         request.incarnation_id, existing.incarnation_id)
                records += self._fence_records(request.broker_id)
            epoch = self.store.end_offset + len(records)
            records.append(self.cluster.registration_records(request, epoch))
            log.info("broker %d registered (incarnation %s, epoch %d, %s)", request.broker_id, request.incarnation_id,
                     epoch, ", ".join(f"{e.name}://{e.host}:{e.port}" for e in request.listeners))
            return ControllerResult(records, {"error_code": ErrorCode.NONE, "broker_epoch": epoch})
        return self._submit("broker registration", op)

    def broker_heartbeat(self, request) -> asyncio.Future:
        # Counted when received, not only when its event runs (as Kafka's controller updates
        # the contact time before queueing the heartbeat): a heartbeat waiting in the queue
        # behind long work keeps its broker's session.
        reg = self.cluster.registration(request.broker_id)
        if reg is not None and reg.epoch == request.broker_epoch and self.heartbeats.tracked(request.broker_id):
            self.heartbeats.touch(request.broker_id)
        usage = getattr(request, "log_dir_usage", None)
        if reg is not None and reg.epoch == request.broker_epoch and usage:
            self.autobalancer.report_usage(request.broker_id, [LogDirUsage(d.total_bytes, d.used_bytes)
                                                               for d in usage])
        return self._submit("broker heartbeat", lambda: self._heartbeat(request))

    def _heartbeat(self, request) -> ControllerResult:
        broker_id = request.broker_id
        reg = self.cluster.registration(broker_id)
        if reg is None or reg.epoch != request.broker_epoch:
            return ControllerResult([], {"error_code": ErrorCode.STALE_BROKER_EPOCH, "is_caught_up": False,
                                         "is_fenced": True, "should_shut_down": False})
        if not reg.fenced:
            self.heartbeats.touch(broker_id)
        caught_up = self.caught_up(broker_id)
        records: list[ApiMessageAndVersion] = []
        fenced = reg.fenced
        should_shut_down = False
        if request.want_shut_down:
            if reg.fenced:
                should_shut_down = True
            elif not reg.in_controlled_shutdown:
                log.info("broker %d asks to shut down: moving its leaderships away", broker_id)
                records = [self.cluster.controlled_shutdown_record(broker_id)]
                records += self.replication.handle_broker_controlled_shutdown(broker_id)
            elif not self.replication.partitions_led_by(broker_id) and (
                    self.channel is None or self.channel.is_idle(broker_id)):
                log.info("broker %d leads nothing and has everything sent to it: it may shut down", broker_id)
                should_shut_down = True
                records = self._fence_records(broker_id)
                fenced = True
        elif request.want_fence:
            if not reg.fenced:
                records = self._fence_records(broker_id)
                fenced = True
        elif reg.fenced:
            if caught_up:
                log.info("broker %d caught up: unfencing it", broker_id)
                records = [self.cluster.unfence_record(broker_id)]
                records += self.replication.handle_broker_unfenced(broker_id)
                self.heartbeats.touch(broker_id)
                fenced = False
            elif broker_id not in self._full_state or self._full_state[broker_id].epoch != reg.epoch:
                self._wanted_full_state.add(broker_id)
        return ControllerResult(records, {"error_code": ErrorCode.NONE, "is_caught_up": caught_up,
                                          "is_fenced": fenced, "should_shut_down": should_shut_down})

    def controlled_shutdown(self, request, version: int) -> asyncio.Future:
        def op() -> ControllerResult:
            broker_id = request.broker_id
            reg = self.cluster.registration(broker_id)
            if reg is None:
                return ControllerResult([], {"error_code": ErrorCode.BROKER_NOT_AVAILABLE, "remaining_partitions": []})
            if version >= 2 and request.broker_epoch not in (-1, reg.epoch):
                return ControllerResult([], {"error_code": ErrorCode.STALE_BROKER_EPOCH, "remaining_partitions": []})
            records = []
            if not reg.fenced and not reg.in_controlled_shutdown:
                log.info("broker %d asks for a controlled shutdown: moving its leaderships away", broker_id)
                records = [self.cluster.controlled_shutdown_record(broker_id)]
                records += self.replication.handle_broker_controlled_shutdown(broker_id)
            moved = {(r.topic_id, r.partition_id) for r in records if r.type == T.PARTITION_CHANGE and r.leader != -2}
            remaining = [{"topic_name": t, "partition_index": p} for t, p in self.replication.partitions_led_by(broker_id)
                         if (self.replication.topic(t).topic_id, p) not in moved]
            return ControllerResult(records, {"error_code": ErrorCode.NONE, "remaining_partitions": remaining})
        return self._submit("controlled shutdown", op)

    def alter_partition(self, request, version: int) -> asyncio.Future:
        return self._submit("alter partition", lambda: self.replication.alter_partition(request, version))

    def allocate_producer_ids(self, request) -> asyncio.Future:
        return self._submit("allocate producer ids", lambda: self.producer_ids.generate_next_producer_ids(
            request.broker_id, request.broker_epoch))

    def create_topics(self, request, version: int) -> asyncio.Future:
        """Answered once the new topics' replicas answered their LeaderAndIsr (up to the
        request's timeout_ms): a topic a broker could not create is taken back and answered
        KAFKA_STORAGE_ERROR (creation_watch.py)."""
        def op() -> ControllerResult:
            result = self.replication.create_topics(request.topics, request.validate_only)
            replicas: dict[uuid.UUID, dict[int, list[int]]] = {}
            for record in result.records:
                if record.type == T.PARTITION:
                    replicas.setdefault(record.topic_id, {})[record.partition_id] = list(record.replicas)
            for r in result.response:
                if not r["error_code"] and not request.validate_only:
                    log.info("created topic %s (%d partitions, replication factor %d)", r["name"], r["num_partitions"],
                             r["replication_factor"])
                    if self.channel is not None:
                        self.creation_watch.watch((r["topic_id"], 0), r["name"], replicas.get(r["topic_id"], {}),
                                                  self.cluster.is_active)
            return ControllerResult(result.records, {"throttle_time_ms": 0, "topics": result.response})
        committed = self._submit("create topics", op)
        if request.validate_only or request.timeout_ms <= 0 or self.channel is None:
            return committed

        def watched(t: dict) -> tuple[uuid.UUID, int]:
            return t["topic_id"], 0

        def failed(t: dict, code: int, message: str | None) -> dict:
            return {"name": t["name"], "topic_id": ZERO_UUID, "error_code": code, "error_message": message,
                    "num_partitions": -1, "replication_factor": -1, "configs": None}
        return self._answer_once_created(committed, "topics", watched, failed, request.timeout_ms)

    def _answer_once_created(self, committed: asyncio.Future, field: str,
                             watched: Callable[[dict], tuple[uuid.UUID, int] | None],
                             failed: Callable[[dict, int, str | None], dict], timeout_ms: int) -> asyncio.Future:
        """The answer of CreateTopics / CreatePartitions once the creation watches of its
        successful entries (``response[field]``; ``watched(entry)``: its watch key) ended, up
        to ``timeout_ms``; an entry taken back becomes ``failed(entry, code, message)``."""
        task = asyncio.get_running_loop().create_task(
            self._await_created(committed, field, watched, failed, timeout_ms), name="creation-answer")
        self._background[task] = None
        task.add_done_callback(self._background.pop)
        return task

    async def _await_created(self, committed: asyncio.Future, field: str,
                             watched: Callable[[dict], tuple[uuid.UUID, int] | None],
                             failed: Callable[[dict, int, str | None], dict], timeout_ms: int) -> dict:
        response = await committed
        created = [(i, t, key) for i, t in enumerate(response[field]) if not t["error_code"]
                   for key in [watched(t)] if key is not None]
        if not created:
            return response
        outcomes = [self.creation_watch.outcome(key) for _i, _t, key in created]
        waited = asyncio.get_running_loop().create_future()

        def stop_waiting(_f: object = None) -> None:
            if not waited.done():
                waited.set_result(None)
        timer = self.time.schedule(timeout_ms, stop_waiting)
        asyncio.gather(*outcomes).add_done_callback(stop_waiting)
        try:
            await waited
        finally:
            timer.cancel()
        for (i, t, key), outcome in zip(created, outcomes):
            code, message = outcome.result() if outcome.done() else (ErrorCode.NONE, None)
            failure = self.creation_watch.failure(key)
            if failure is not None:
                code, message = ErrorCode.KAFKA_STORAGE_ERROR, failure
            if code:
                response[field][i] = failed(t, code, message)
        return response

    def _take_back(self, key: tuple[uuid.UUID, int], name: str, reason: str) -> None:
        """New partitions a replica could not create (creation_watch.py): remove the topic
        (key (id, 0)), or its partitions from ``key[1]`` on. Kafka's metadata has no record that
        removes partitions, so the topic is removed and added again in the same batch, with its
        id, configs and the partitions it keeps as they are (their leaders and epochs too);
        ``_process`` tells the brokers to delete only the partitions dropped. Once that is
        committed and every broker has acknowledged what came before, the watch hears so."""
        topic_id, first = key

        def op() -> ControllerResult:
            info = self.replication.topics.get(topic_id)
            if info is None or len(info.parts) <= first:
                return ControllerResult([], None)
            log.info("removing %s %s: %s", "topic" if first == 0 else f"partitions from {first} on of", name, reason)
            records = [make_record(T.REMOVE_TOPIC, topic_id=topic_id)]
            if first > 0:
                records.append(make_record(T.TOPIC, name=name, topic_id=topic_id))
                records += self.configs.topic_config_records(name)
                records += [info.parts[pid].to_record(topic_id, pid) for pid in sorted(info.parts) if pid < first]
            return ControllerResult(records, None)

        def removed(future: asyncio.Future) -> None:
            if future.cancelled() or future.exception() is not None:
                return  # the controller stopped: the next one loads the topic, the brokers recreate it
            channel = self.channel
            brokers = channel.brokers() if channel is not None else []
            left = set(brokers)
            if not left:
                self.creation_watch.rolled_back(key)
                return
            for b in brokers:
                def heard(b: int = b) -> None:
                    left.discard(b)
                    if not left:
                        self.creation_watch.rolled_back(key)
                channel.enqueue(b, Barrier(heard))  # type: ignore[union-attr]
        self._submit("take back new partitions", op).add_done_callback(removed)

    def delete_topics(self, request, version: int) -> asyncio.Future:
        def op() -> ControllerResult:
            if version >= 6:
                names = [t.name for t in request.topics if t.name is not None]
                ids = [t.topic_id for t in request.topics if t.name is None]
            else:
                names, ids = list(request.topic_names), []
            result = self.replication.delete_topics(names, ids)
            for r in result.response:
                if not r["error_code"]:
                    log.info("deleting topic %s", r["name"])
            return ControllerResult(result.records, {"throttle_time_ms": 0, "responses": result.response})
        return self._submit("delete topics", op)

    def create_partitions(self, request) -> asyncio.Future:
        """Answered, like CreateTopics, once the new partitions' replicas answered their
        LeaderAndIsr (up to timeout_ms); new partitions a broker could not create are taken
        back and the topic answered KAFKA_STORAGE_ERROR."""
        first_new: dict[str, tuple[uuid.UUID, int]] = {}

        def op() -> ControllerResult:
            before = {t.name: len(info.parts) for t in request.topics
                      for info in [self.replication.topic(t.name)] if info is not None}
            result = self.replication.create_partitions(request.topics, request.validate_only)
            replicas: dict[uuid.UUID, dict[int, list[int]]] = {}
            for record in result.records:
                if record.type == T.PARTITION:
                    replicas.setdefault(record.topic_id, {})[record.partition_id] = list(record.replicas)
            for r in result.response:
                info = self.replication.topic(r["name"])
                if r["error_code"] or request.validate_only or info is None or self.channel is None:
                    continue
                key = (info.topic_id, before[r["name"]])
                first_new[r["name"]] = key
                self.creation_watch.watch(key, r["name"], replicas.get(info.topic_id, {}), self.cluster.is_active)
            return ControllerResult(result.records, {"throttle_time_ms": 0, "results": result.response})
        committed = self._submit("create partitions", op)
        if request.validate_only or request.timeout_ms <= 0 or self.channel is None:
            return committed

        def failed(r: dict, code: int, message: str | None) -> dict:
            return {"name": r["name"], "error_code": code, "error_message": message}
        return self._answer_once_created(committed, "results", lambda r: first_new.get(r["name"]), failed,
                                         request.timeout_ms)

    def alter_partition_reassignments(self, request, version: int) -> asyncio.Future:
        allow = request.allow_replication_factor_change if version >= 1 else True
        return self._submit("alter partition reassignments",
                            lambda: self.replication.alter_partition_reassignments(request.topics, allow))

    def list_partition_reassignments(self, request) -> asyncio.Future:
        return self._submit("list partition reassignments", lambda: ControllerResult(
            [], self.replication.list_partition_reassignments(request.topics)))

    def unregister_broker(self, request) -> asyncio.Future:
        """UnregisterBroker (Kafka's ReplicationControlManager.unregisterBroker): the broker leaves
        every ISR and leadership it holds, then an UnregisterBrokerRecord removes its
        registration; one never registered is BROKER_ID_NOT_REGISTERED. A broker that is still
        running registers again at its next heartbeat, as in Kafka; stop it first."""
        def op() -> ControllerResult:
            broker_id = request.broker_id
            reg = self.cluster.registration(broker_id)
            if reg is None:
                log.warning("UnregisterBroker of broker %d refused: BROKER_ID_NOT_REGISTERED", broker_id)
                return ControllerResult([], {"throttle_time_ms": 0, "error_code": ErrorCode.BROKER_ID_NOT_REGISTERED,
                                             "error_message": f"Broker ID {broker_id} is not currently registered"})
            self.heartbeats.remove(broker_id)
            records = self.replication.handle_broker_fenced(broker_id)
            records.append(make_record(T.UNREGISTER_BROKER, broker_id=broker_id, broker_epoch=reg.epoch))
            log.info("unregistering broker %d (epoch %d)", broker_id, reg.epoch)
            return ControllerResult(records, {"throttle_time_ms": 0, "error_code": 0, "error_message": None})
        return self._submit("unregister broker", op)

    def elect_leaders(self, request, version: int) -> asyncio.Future:
        election_type = request.election_type if version >= 1 else PREFERRED_ELECTION
        return self._submit("elect leaders", lambda: self.replication.elect_leaders(
            election_type, request.topic_partitions))

    def incremental_alter_configs(self, request) -> asyncio.Future:
        def apply(topic: str, resource):
            return self.configs.incremental_alter(topic, [(c.name, c.config_operation, c.value) for c in resource.configs])

        def broker_apply(name: str, resource):
            return self.configs.broker_incremental_alter(name, [(c.name, c.config_operation, c.value)
                                                                for c in resource.configs])
        return self._submit("incremental alter configs", lambda: self._alter_configs(request, apply, broker_apply))

    def alter_configs(self, request) -> asyncio.Future:
        def apply(topic: str, resource):
            return self.configs.legacy_alter(topic, {c.name: c.value for c in resource.configs})

        def broker_apply(name: str, resource):
            return self.configs.broker_legacy_alter(name, {c.name: c.value for c in resource.configs})
        return self._submit("alter configs", lambda: self._alter_configs(request, apply, broker_apply))

    def _alter_configs(self, request, apply, broker_apply) -> ControllerResult:
        records, responses = [], []
        keys = [(r.resource_type, r.resource_name) for r in request.resources]
        for resource in request.resources:
            key = (resource.resource_type, resource.resource_name)
            code, message, found = ErrorCode.NONE, None, []
            if keys.count(key) > 1:
                code, message = ErrorCode.INVALID_REQUEST, "Duplicate resource in the request."
            elif resource.resource_type == TOPIC:
                if self.replication.topic(resource.resource_name) is None:
                    code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (
                        f"Topic '{resource.resource_name}' does not exist.")
                else:
                    code, message, found = apply(resource.resource_name, resource)
            elif resource.resource_type == BROKER:
                code, message, found = broker_apply(resource.resource_name, resource)
                if not code and found and not request.validate_only:
                    log.info("dynamic broker configs of %s changed: %s", f"broker {resource.resource_name}"
                             if resource.resource_name else "the cluster-wide default", ", ".join(
                                 f"{r.name}={r.value}" if r.value is not None else f"{r.name} deleted" for r in found))
            else:
                code, message = ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type}."
            if not code and not request.validate_only:
                records += found
            responses.append({"error_code": code, "error_message": message, "resource_type": resource.resource_type,
                              "resource_name": resource.resource_name})
        return ControllerResult(records, {"throttle_time_ms": 0, "responses": responses})

    def create_acls(self, request, version: int) -> asyncio.Future:
        """CreateAcls (v0: every binding LITERAL): one result per creation."""
        bindings = [StandardAcl.of(c.resource_type, c.resource_name, c.resource_pattern_type if version >= 1 else 3,
                                   c.principal, c.host, c.operation, c.permission_type) for c in request.creations]

        def op() -> ControllerResult:
            result = self.acls.create_acls(bindings)
            return ControllerResult(result.records, {"throttle_time_ms": 0, "results": [
                {"error_code": code, "error_message": message} for code, message in result.response]})
        return self._submit("create acls", op)

    def delete_acls(self, request, version: int) -> asyncio.Future:
        """DeleteAcls: per filter, the bindings it matched (and deleted)."""
        filters = [AclBindingFilter.of(f.resource_type_filter, f.resource_name_filter,
                                       f.pattern_type_filter if version >= 1 else 3, f.principal_filter, f.host_filter,
                                       f.operation, f.permission_type) for f in request.filters]

        def op() -> ControllerResult:
            result = self.acls.delete_acls(filters)
            return ControllerResult(result.records, {"throttle_time_ms": 0, "filter_results": [
                {"error_code": code, "error_message": message, "matching_acls": [
                    {"error_code": 0, "error_message": None, "resource_type": int(a.resource_type),
                     "resource_name": a.resource_name, "pattern_type": int(a.pattern_type), "principal": a.principal,
                     "host": a.host, "operation": int(a.operation), "permission_type": int(a.permission_type)}
                    for a in matched]} for code, message, matched in result.response]})
        return self._submit("delete acls", op)

    def describe_acls(self, acl_filter: AclBindingFilter) -> asyncio.Future:
        """DescribeAcls' answer from the controller's own bindings."""
        def op() -> ControllerResult:
            return ControllerResult([], {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
                                         "resources": describe_acls_resources(
                                             acl for acl in self.acls.acls.values() if acl_filter.matches(acl))})
        return self._submit("describe acls", op)

    def alter_user_scram_credentials(self, request) -> asyncio.Future:
        deletions = [(d.name, d.mechanism) for d in request.deletions]
        upsertions = [(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                      for u in request.upsertions]

        def op() -> ControllerResult:
            result = self.scram.alter_credentials(deletions, upsertions)
            return ControllerResult(result.records, {"throttle_time_ms": 0, "results": result.response})
        return self._submit("alter user scram credentials", op)

    def alter_client_quotas(self, request) -> asyncio.Future:
        """AlterClientQuotas (client_quota_control.py); ``validate_only``: the answer, no records."""
        def op() -> ControllerResult:
            result = self.quotas.alter_client_quotas(request.entries)
            return ControllerResult([] if request.validate_only else result.records,
                                    {"throttle_time_ms": 0, "entries": result.response})
        return self._submit("alter client quotas", op)

    def describe_client_quotas(self, request) -> asyncio.Future:
        """DescribeClientQuotas' answer from the controller's own quotas."""
        def op() -> ControllerResult:
            code, message, entries = describe_client_quotas(self.quotas.quotas, request.components, request.strict)
            return ControllerResult([], {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                                         "entries": entries})
        return self._submit("describe client quotas", op)

    # -- reads (no records; answered once everything decided before them is durable) -----

    def describe_configs(self, request) -> asyncio.Future:
        def op() -> ControllerResult:
            results = []
            for r in request.resources:
                if r.resource_type == TOPIC and self.replication.topic(r.resource_name) is not None:
                    results.append({"error_code": ErrorCode.NONE, "error_message": None, "resource_type": TOPIC,
                                    "resource_name": r.resource_name,
                                    "configs": self.configs.describe(r.resource_name, r.configuration_keys)})
                elif r.resource_type == BROKER and broker_resource_problem(r.resource_name) is None:
                    # the dynamic configs this controller keeps (a broker answers with all its configs)
                    results.append({"error_code": ErrorCode.NONE, "error_message": None, "resource_type": BROKER,
                                    "resource_name": r.resource_name,
                                    "configs": self.configs.describe_broker(r.resource_name, r.configuration_keys)})
                elif r.resource_type == TOPIC:
                    results.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    "error_message": f"Topic '{r.resource_name}' does not exist.",
                                    "resource_type": TOPIC, "resource_name": r.resource_name, "configs": []})
                else:
                    results.append({"error_code": ErrorCode.INVALID_REQUEST,
                                    "error_message": f"resource type {r.resource_type} is not described here",
                                    "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []})
            return ControllerResult([], {"throttle_time_ms": 0, "results": results})
        return self._submit("describe configs", op)

    def metadata(self, topics: list[str] | None, listener: str | None = None) -> asyncio.Future:
        """Metadata as this controller sees it: unfenced brokers, every topic (or ``topics``)."""
        def op() -> ControllerResult:
            brokers = []
            for reg in self.cluster.unfenced_brokers():
                ep = reg.endpoint(listener) or reg.endpoint()
                if ep is not None:
                    brokers.append({"node_id": reg.broker_id, "host": ep.host, "port": ep.port, "rack": reg.rack})
            names = sorted(self.replication.topics_by_name) if topics is None else topics
            out = []
            for name in names:
                info = self.replication.topic(name)
                if info is None:
                    out.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []})
                    continue
                parts = []
                for pid in sorted(info.parts):
                    p = info.parts[pid]
                    parts.append({"error_code": ErrorCode.NONE if p.has_leader else ErrorCode.LEADER_NOT_AVAILABLE,
                                  "partition_index": pid, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
                                  "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
                                  "offline_replicas": [r for r in p.replicas if not self.cluster.is_unfenced(r)]})
                out.append({"error_code": ErrorCode.NONE, "name": name, "topic_id": info.topic_id,
                            "is_internal": name in INTERNAL_TOPICS, "partitions": parts})
            return ControllerResult([], {"throttle_time_ms": 0, "brokers": brokers, "cluster_id": self.cluster_id,
                                         "controller_id": self.node_id, "topics": out})
        return self._submit("metadata", op)
