"""KafkaServer: builds the broker from its config, starts it and shuts it down gracefully.

Startup: lock and identify the log dirs (meta.properties), load every log (recovery),
build the metadata cache and ReplicaManager, bring the embedded controller's topics online
(embedded mode) or wait for LeaderAndIsr (external mode), start the listeners, schedule the
background passes (retention, flush, checkpoints, ISR shrink) on the injected clock.

Shutdown (SIGTERM/SIGINT in ``kbroker serve``): stop accepting, answer waiting requests,
let in-flight requests finish, then flush, checkpoint and write the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import fcntl
import logging
import os
import re
import uuid
from typing import Callable

from protocol.client import DEFAULT_NETWORK, SYSTEM_TIME, Network
from protocol.clock import Time
from protocol.errors import ErrorCode
from storage import LogConfig, LogManager
from storage.checkpoint import write_atomically

from .apis import KafkaApis
from .config import ConfigError, Endpoint, KafkaConfig, read_properties
from .fetcher import ReplicaFetcherManager
from .metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionInfo, TopicInfo
from .network import SocketServer
from .producer_ids import FILE_NAME as PRODUCER_ID_FILE, LocalBlockSource, ProducerIdManager
from .partition import LeaderAndIsrState
from .replica_manager import ReplicaManager
from .single_node import TOPICS_FILE, TopicRecord, TopicStore

log = logging.getLogger("kbroker.server")

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249
_CONFIG_SOURCE_TOPIC = 1
_CONFIG_SOURCE_STATIC_BROKER = 4
_CONFIG_SOURCE_DEFAULT = 5


def validate_topic_name(name: str) -> str | None:
    """Kafka's Topic.validate: the reason a name is illegal, or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name is longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL_TOPIC.match(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


# Kafka topic configs kbroker accepts without acting on them (so tools that set them keep working).
_PASSIVE_TOPIC_CONFIGS = frozenset({
    "cleanup.policy", "delete.retention.ms", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
    "max.compaction.lag.ms", "preallocate", "unclean.leader.election.enable", "message.downconversion.enable",
    "message.timestamp.difference.max.ms", "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
    "message.format.version", "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "local.retention.ms", "local.retention.bytes", "remote.storage.enable",
})


def validate_topic_configs(configs: dict[str, str], defaults: dict[str, str]) -> str | None:
    """The reason a CreateTopics config set is invalid (Kafka's INVALID_CONFIG), or None."""
    known = set(LogConfig().to_topic_properties())
    for key, value in configs.items():
        if key == "compression.type":
            if value != "producer":
                return "compression.type: kbroker stores batches as produced; only 'producer' is supported"
        elif key not in known and key not in _PASSIVE_TOPIC_CONFIGS:
            return f"Unknown topic config name: {key}"
    try:
        LogConfig.from_topic_properties({**defaults, **configs})
    except ValueError as exc:
        return str(exc)
    return None


class KafkaServer:
    def __init__(self, config: KafkaConfig, time: Time = SYSTEM_TIME, network: Network = DEFAULT_NETWORK) -> None:
        self.config = config
        self.time = time
        self.network = network
        self.broker_id = config.broker_id
        self.cluster_id: str | None = None
        self.embedded = config["kbroker.controller.mode"] == "embedded"
        self.log_manager: LogManager | None = None
        self.metadata_cache: MetadataCache | None = None
        self.replica_manager: ReplicaManager | None = None
        self.apis: KafkaApis | None = None
        self.socket_server: SocketServer | None = None
        self.topic_store: TopicStore | None = None
        self.producer_ids: ProducerIdManager | None = None
        self._locks: list[int] = []
        self._timers: dict[str, object] = {}
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbroker-flush")
        self._flush_inflight = False
        self.started = False
        self.bound_ports: dict[str, int] = {}

    # -- startup ---------------------------------------------------------------------------
    async def startup(self) -> None:
        cfg = self.config
        for d in cfg.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self._lock_log_dirs()
        self._load_meta_properties()
        self.log_manager = LogManager(cfg.log_dirs, self.default_log_config(), time=self.time,
                                      topic_config=self.log_config_for)
        reports = self.log_manager.startup()
        log.info("loaded %d partition logs from %s", len(reports) if reports is not None else 0,
                 ", ".join(str(d) for d in cfg.log_dirs))
        # The seam for the controller: it will hand out producer id blocks instead.
        self.producer_ids = ProducerIdManager(LocalBlockSource(cfg.log_dirs[0] / PRODUCER_ID_FILE, self.broker_id))
        self.metadata_cache = MetadataCache(self.broker_id)
        self.metadata_cache.cluster_id = self.cluster_id
        self.replica_manager = ReplicaManager(
            broker_id=self.broker_id, time=self.time, log_manager=self.log_manager,
            metadata_cache=self.metadata_cache, log_config_for=self.log_config_for,
            replica_lag_time_max_ms=cfg["replica.lag.time.max.ms"])
        self.replica_manager.fetcher_manager = ReplicaFetcherManager(
            self.replica_manager, cfg, network=self.network, listener_name=self.inter_broker_listener)
        self.apis = KafkaApis(self)
        self.socket_server = SocketServer(
            self.apis, max_request_size=cfg["socket.request.max.bytes"], max_inflight=cfg["queued.max.requests"],
            send_buffer=cfg["socket.send.buffer.bytes"], receive_buffer=cfg["socket.receive.buffer.bytes"])
        for ep in cfg.listeners:
            port = await self.socket_server.start(ep.listener_name, ep.host, ep.port)
            self.bound_ports[ep.listener_name] = port
            log.info("listening on %s://%s:%d", ep.listener_name, ep.host or "0.0.0.0", port)
        self._register_self()
        if self.embedded:
            self._start_embedded_controller()
        self._schedule_background_tasks()
        self.started = True
        log.info("broker %d started (cluster %s, %s controller)", self.broker_id, self.cluster_id,
                 "embedded" if self.embedded else "external")

    def _lock_log_dirs(self) -> None:
        for d in self.config.log_dirs:
            fd = os.open(d / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise ConfigError(f"log.dirs: {d} is in use by another broker process (.lock is held)") from None
            self._locks.append(fd)

    def _load_meta_properties(self) -> None:
        """Kafka's meta.properties: the broker id and cluster id this data belongs to."""
        found: dict[str, str] = {}
        for d in self.config.log_dirs:
            path = d / "meta.properties"
            if path.exists():
                props = read_properties(path)
                for key in ("broker.id", "cluster.id"):
                    if key in props and key in found and found[key] != props[key]:
                        raise ConfigError(f"log.dirs: {path} has {key}={props[key]}, another dir has {found[key]}")
                    if key in props:
                        found[key] = props[key]
        stored_id = int(found["broker.id"]) if "broker.id" in found else None
        if self.broker_id < 0:
            self.broker_id = stored_id if stored_id is not None else 1001  # Kafka's first generated id
        elif stored_id is not None and stored_id != self.broker_id:
            raise ConfigError(f"broker.id: configured {self.broker_id} but the data in log.dirs belongs to "
                              f"broker {stored_id} (meta.properties)")
        self.cluster_id = found.get("cluster.id") or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        text = f"#kbroker meta.properties\nversion=0\nbroker.id={self.broker_id}\ncluster.id={self.cluster_id}\n"
        for d in self.config.log_dirs:
            path = d / "meta.properties"
            if not path.exists() or read_properties(path).get("broker.id") != str(self.broker_id):
                write_atomically(path, text.encode())

    @property
    def inter_broker_listener(self) -> str:
        """The listener other brokers (followers' fetchers) connect to: the first one."""
        return self.config.listeners[0].listener_name

    def advertised_endpoints(self) -> list[Endpoint]:
        advertised = self.config.advertised_listeners or self.config.listeners
        out = []
        for ep in advertised:
            port = ep.port or self.bound_ports.get(ep.listener_name, 0)
            host = ep.host or "127.0.0.1"
            if host in ("0.0.0.0", "::"):
                host = "127.0.0.1"
            out.append(Endpoint(ep.listener_name, host, port))
        return out

    def _register_self(self) -> None:
        eps = {ep.listener_name: BrokerEndpoint(ep.listener_name, ep.host, ep.port) for ep in self.advertised_endpoints()}
        self.metadata_cache.brokers[self.broker_id] = BrokerInfo(self.broker_id, eps)
        if self.embedded:
            self.metadata_cache.controller_id = self.broker_id

    # -- topic configs ---------------------------------------------------------------------
    def default_log_config(self) -> LogConfig:
        return LogConfig.from_topic_properties(self.config.topic_defaults())

    def topic_overrides(self, topic: str) -> dict[str, str]:
        if self.topic_store is not None and topic in self.topic_store.topics:
            return self.topic_store.topics[topic].configs
        info = self.metadata_cache.topics.get(topic) if self.metadata_cache else None
        return info.configs if info is not None else {}

    def log_config_for(self, topic: str) -> LogConfig:
        overrides = self.topic_overrides(topic)
        if not overrides:
            return self.default_log_config()
        return LogConfig.from_topic_properties({**self.config.topic_defaults(), **overrides})

    def describe_configs(self, resource_type: int, name: str) -> tuple[int, str | None, list]:
        """(error, message, [(name, value, read_only, source)]) for DescribeConfigs."""
        if resource_type == 2:  # TOPIC
            if not self.metadata_cache.contains_topic(name):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist", []
            overrides = self.topic_overrides(name)
            defaults = self.config.topic_defaults()
            entries = [(k, overrides.get(k, v), False, _CONFIG_SOURCE_TOPIC if k in overrides else _CONFIG_SOURCE_DEFAULT)
                       for k, v in sorted(defaults.items())]
            entries += [(k, v, False, _CONFIG_SOURCE_TOPIC) for k, v in sorted(overrides.items()) if k not in defaults]
            return ErrorCode.NONE, None, entries
        if resource_type == 4:  # BROKER
            if name and name != str(self.broker_id):
                return ErrorCode.INVALID_REQUEST, f"this is broker {self.broker_id}, not {name}", []
            entries = []
            for key, value in sorted(self.config.values.items()):
                if value is None:
                    continue
                if isinstance(value, list):
                    text = ",".join(value)
                else:
                    text = str(value).lower() if isinstance(value, bool) else str(value)
                source = _CONFIG_SOURCE_STATIC_BROKER if key in self.config.originals else _CONFIG_SOURCE_DEFAULT
                entries.append((key, text, True, source))
            return ErrorCode.NONE, None, entries
        return ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported", []

    # -- embedded controller ---------------------------------------------------------------
    def _start_embedded_controller(self) -> None:
        self.topic_store = TopicStore(self.config.log_dirs[0] / TOPICS_FILE)
        self.topic_store.load()
        for record in self.topic_store.topics.values():
            self._bring_online(record)

    def _bring_online(self, record: TopicRecord) -> None:
        states = []
        info = TopicInfo(record.name, record.topic_id, {}, dict(record.configs))
        for p, replicas in sorted(record.assignment.items()):
            epoch = record.leader_epochs.get(p, 0)
            states.append(LeaderAndIsrState(record.name, p, 0, self.broker_id, epoch, list(replicas), 0, list(replicas)))
            info.partitions[p] = PartitionInfo(p, self.broker_id, epoch, list(replicas), list(replicas))
        self.metadata_cache.put_topic(info)
        self.replica_manager.become_leader_or_follower(self.broker_id, 0, states)

    def maybe_auto_create_topic(self, name: str, allow: bool) -> int:
        if validate_topic_name(name) is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if not (allow and self.config["auto.create.topics.enable"] and self.embedded):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        code, message = self.create_topic(name, -1, -1, {}, {})
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("auto-creating topic %r failed: %s", name, message)
            return code
        return ErrorCode.NONE

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     assignments: dict[int, list[int]], configs: dict[str, str | None],
                     validate_only: bool = False) -> tuple[int, str | None]:
        if not self.embedded:
            return ErrorCode.NOT_CONTROLLER, "topics are created by the controller"
        reason = validate_topic_name(name)
        if reason is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, reason
        if name in self.topic_store.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        collides = [t for t in self.topic_store.topics if t.replace(".", "_") == name.replace(".", "_")]
        if collides:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic {name!r} collides with existing topic {collides[0]!r}"
        brokers = sorted(self.metadata_cache.brokers)
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                return ErrorCode.INVALID_REQUEST, "give either assignments or partitions/replication factor"
            if sorted(assignments) != list(range(len(assignments))):
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1"
            for p, replicas in assignments.items():
                if not replicas or len(set(replicas)) != len(replicas) or any(b not in brokers for b in replicas):
                    return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"partition {p}: replicas {replicas} are not distinct live brokers")
            assignment = {p: list(r) for p, r in assignments.items()}
        else:
            n = self.config["num.partitions"] if num_partitions == -1 else num_partitions
            rf = self.config["default.replication.factor"] if replication_factor == -1 else replication_factor
            if n < 1:
                return ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            if rf < 1:
                return ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            if rf > len(brokers):
                return ErrorCode.INVALID_REPLICATION_FACTOR, (
                    f"Replication factor: {rf} larger than available brokers: {len(brokers)}.")
            assignment = {p: [brokers[(p + i) % len(brokers)] for i in range(rf)] for p in range(n)}
        clean = {k: v for k, v in configs.items() if v is not None}
        problem = validate_topic_configs(clean, self.config.topic_defaults())
        if problem is not None:
            return ErrorCode.INVALID_CONFIG, problem
        if validate_only:
            return ErrorCode.NONE, None
        record = TopicRecord(name, uuid.uuid4(), assignment, clean, {p: 0 for p in assignment})
        self.topic_store.put(record)
        self._bring_online(record)
        log.info("created topic %s: %d partitions, configs %s", name, len(assignment), clean or "{}")
        return ErrorCode.NONE, None

    def delete_topic(self, name: str) -> tuple[int, str | None]:
        if not self.embedded:
            return ErrorCode.NOT_CONTROLLER, "topics are deleted by the controller"
        if not self.config["delete.topic.enable"]:
            return ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false"
        record = self.topic_store.topics.get(name)
        if record is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
        self.topic_store.remove(name)
        self.metadata_cache.remove_topic(name)
        self.replica_manager.stop_replicas([(name, p) for p in record.assignment], delete=True)
        log.info("deleted topic %s", name)
        return ErrorCode.NONE, None

    # -- background passes -----------------------------------------------------------------
    def _schedule_periodic(self, name: str, interval_ms: int, fn: Callable[[], None]) -> None:
        if interval_ms <= 0 or interval_ms >= 2**62:
            return

        def run() -> None:
            try:
                fn()
            except Exception:
                log.exception("background task %s failed", name)
            if self.started:
                self._timers[name] = self.time.schedule(interval_ms, run)

        self._timers[name] = self.time.schedule(interval_ms, run)

    def _schedule_background_tasks(self) -> None:
        cfg = self.config
        lm = self.log_manager
        self._schedule_periodic("log-retention", cfg["log.retention.check.interval.ms"], lm.cleanup_logs)
        self._schedule_periodic("log-flush", min(cfg.flush_interval_ms, 1000), self._flush_pass)
        self._schedule_periodic("recovery-point-checkpoint", cfg["log.flush.offset.checkpoint.interval.ms"],
                                lm.checkpoint_recovery_points)
        self._schedule_periodic("log-start-offset-checkpoint", cfg["log.flush.start.offset.checkpoint.interval.ms"],
                                lm.checkpoint_log_start_offsets)
        self._schedule_periodic("highwatermark-checkpoint", cfg["replica.high.watermark.checkpoint.interval.ms"],
                                lm.checkpoint_high_watermarks)
        self._schedule_periodic("isr-expiration", max(1, cfg["replica.lag.time.max.ms"] // 2),
                                self.replica_manager.maybe_shrink_isr)
        self._schedule_periodic("producer-id-expiration", cfg["producer.id.expiration.check.interval.ms"],
                                lm.remove_expired_producers)

    def _flush_pass(self) -> None:
        """fsync what the flush policy asks for, plus segments that rolled since the last pass
        (so recovery after a crash only rescans the active segment), off the event loop."""
        if self._flush_inflight:
            return
        plans = self.log_manager.flush_dirty_logs()
        if not plans:
            return
        self._flush_inflight = True
        loop = asyncio.get_running_loop()

        def run_all():
            for plan in plans:
                plan.run()

        def done(fut: asyncio.Future) -> None:
            self._flush_inflight = False
            if fut.exception() is not None:
                log.error("background flush failed: %s", fut.exception())
                return
            for plan in plans:
                plan.log.complete_flush(plan)

        asyncio.ensure_future(loop.run_in_executor(self._executor, run_all)).add_done_callback(done)

    # -- shutdown --------------------------------------------------------------------------
    async def shutdown(self) -> None:
        if not self.started:
            self._release_locks()
            return
        log.info("broker %d shutting down", self.broker_id)
        self.started = False
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.socket_server.stop_accepting()
        self.replica_manager.shutdown()
        timeout_s = self.config["kbroker.shutdown.timeout.ms"] / 1000
        if not await self.socket_server.wait_for_inflight(timeout_s):
            log.warning("shutdown: requests still in flight after %.1fs; closing their connections", timeout_s)
        self.socket_server.close_all()
        await self.replica_manager.fetcher_manager.shutdown()
        while self._flush_inflight:
            await asyncio.sleep(0.01)
        self._executor.shutdown(wait=True)
        self.log_manager.shutdown()
        self._release_locks()
        log.info("broker %d shut down cleanly", self.broker_id)

    def _release_locks(self) -> None:
        for fd in self._locks:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._locks.clear()

    def bound_port(self, listener_name: str = "PLAINTEXT") -> int:
        return self.bound_ports[listener_name]
