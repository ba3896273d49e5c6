"""KafkaServer: builds the broker from its config, starts it and shuts it down gracefully.

Startup: lock and identify the log dirs (meta.properties), load every log (recovery),
build the metadata cache, the fetcher manager, the ReplicaManager and KafkaApis with their
collaborators, start the listeners, bring the embedded controller's topics online (embedded
mode) or wait for LeaderAndIsr (external mode), schedule the background passes (retention,
flush, checkpoints, ISR shrink) on the injected clock.

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
import uuid
from typing import Callable

from protocol.client import DEFAULT_NETWORK, SYSTEM_TIME, Network
from protocol.clock import Time
from storage import LogManager
from storage.checkpoint import write_atomically

from .apis import KafkaApis
from .config import ConfigError, Endpoint, KafkaConfig, read_properties
from .config_repository import ConfigRepository
from .embedded_controller import EmbeddedController
from .fetcher import ReplicaFetcherManager
from .metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache
from .network import SocketServer
from .producer_ids import FILE_NAME as PRODUCER_ID_FILE, LocalBlockSource, ProducerIdManager
from .replica_manager import ReplicaManager
from .topic_admin import NotController, TopicAdmin

log = logging.getLogger("kbroker.server")


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
        self.config_repository: ConfigRepository | None = None
        self.fetcher_manager: ReplicaFetcherManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.embedded_controller: EmbeddedController | None = None
        self.topic_admin: TopicAdmin | None = None
        self.apis: KafkaApis | None = None
        self.socket_server: SocketServer | None = None
        self.producer_ids: ProducerIdManager | None = None
        self._locks: list[int] = []
        self._timers: dict[str, object] = {}
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbroker-flush")
        self._flush_idle = asyncio.Event()  # cleared while a background flush runs in the executor
        self._flush_idle.set()
        self.started = False
        self.bound_ports: dict[str, int] = {}

    # -- startup ---------------------------------------------------------------------------
    async def startup(self) -> None:
        cfg = self.config
        for d in cfg.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self._lock_log_dirs()
        self._load_meta_properties()
        self.metadata_cache = MetadataCache(self.broker_id)
        self.metadata_cache.cluster_id = self.cluster_id
        self.config_repository = configs = ConfigRepository(cfg, self.broker_id, self.metadata_cache)
        self.log_manager = LogManager(cfg.log_dirs, configs.default_log_config(), time=self.time,
                                      topic_config=configs.log_config_for)
        reports = self.log_manager.startup()
        log.info("loaded %d partition logs from %s", len(reports) if reports is not None else 0,
                 ", ".join(str(d) for d in cfg.log_dirs))
        # The seam for the controller: it will hand out producer id blocks instead.
        self.producer_ids = ProducerIdManager(LocalBlockSource(cfg.log_dirs[0] / PRODUCER_ID_FILE, self.broker_id))
        self.fetcher_manager = ReplicaFetcherManager(
            broker_id=self.broker_id, time=self.time, metadata_cache=self.metadata_cache, config=cfg,
            network=self.network, listener_name=self.inter_broker_listener)
        self.replica_manager = ReplicaManager(
            broker_id=self.broker_id, time=self.time, log_manager=self.log_manager,
            metadata_cache=self.metadata_cache, log_config_for=configs.log_config_for,
            replica_lag_time_max_ms=cfg["replica.lag.time.max.ms"], fetcher_manager=self.fetcher_manager)
        if self.embedded:
            self.embedded_controller = EmbeddedController(cfg, self.broker_id, self.metadata_cache, self.replica_manager)
            self.topic_admin = self.embedded_controller
        else:
            self.topic_admin = NotController()
        self.apis = KafkaApis(
            replica_manager=self.replica_manager, metadata_cache=self.metadata_cache, topic_admin=self.topic_admin,
            config_repository=configs, producer_ids=self.producer_ids, inter_broker_listener=self.inter_broker_listener)
        self.socket_server = SocketServer(
            self.apis, max_request_size=cfg["socket.request.max.bytes"], max_inflight=cfg["queued.max.requests"],
            send_buffer=cfg["socket.send.buffer.bytes"], receive_buffer=cfg["socket.receive.buffer.bytes"])
        for ep in cfg.listeners:
            port = await self.socket_server.start(ep.listener_name, ep.host, ep.port)
            self.bound_ports[ep.listener_name] = port
            log.info("listening on %s://%s:%d", ep.listener_name, ep.host or "0.0.0.0", port)
        self._register_self()
        if self.embedded_controller is not None:
            self.embedded_controller.start()
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
        if not self._flush_idle.is_set():
            return
        plans = self.log_manager.flush_dirty_logs()
        if not plans:
            return
        self._flush_idle.clear()
        loop = asyncio.get_running_loop()

        def run_all():
            for plan in plans:
                plan.run()

        def done(fut: asyncio.Future) -> None:
            self._flush_idle.set()
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
        await self.fetcher_manager.shutdown()
        await self._flush_idle.wait()  # a background flush still running finishes (and is recorded) first
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
