"""KafkaServer: the broker role of a process (Kafka's BrokerServer): builds the broker from
its config, starts it and shuts it down gracefully.

Startup: lock and identify the log dirs (meta.properties), load every log (recovery),
build the metadata cache, the fetcher manager, the ReplicaManager and KafkaApis with their
collaborators, start the listeners (those not named by controller.listener.names) and
schedule the background passes (retention, flush, checkpoints, ISR shrink) on the injected
clock. Then, with a controller (``controller.quorum.bootstrap.servers``, or the process's own
controller in combined mode, reached over its listener like any other), the
BrokerLifecycleManager registers and heartbeats, and startup returns once the controller has
unfenced this broker and its metadata lists it live; ISR changes go to the controller
(AlterPartitionManager), producer id blocks come from it (RPCProducerIdManager) and admin
requests are forwarded to it (ForwardingManager, ControllerTopicAdmin).

A broker with ``process.roles=broker`` and no controller.quorum.bootstrap.servers has no
controller: it only applies the LeaderAndIsr / UpdateMetadata / StopReplica it is sent (by a
static controller: tests and benchmarks), commits ISR changes locally and hands out producer
ids from a local counter file. It says so in a WARNING at startup.

Shutdown (SIGTERM/SIGINT in ``kbroker serve``): a controlled shutdown first (the controller
moves this broker's leaderships away, bounded by broker.session.timeout.ms), then stop
accepting, answer waiting requests, let in-flight requests finish, then flush, checkpoint
and write the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import fcntl
import gc
import logging
import os
import uuid
from typing import Callable

from protocol.client import DEFAULT_NETWORK, SYSTEM_TIME, Network
from protocol.clock import Time
from storage import LogManager, fileio
from storage.checkpoint import write_atomically
from storage.log_cleaner import LogCleaner
from storage.log import run_flush_plans
from storage.log_manager import CheckpointSnapshot

from . import heap
from .alter_partition_manager import AlterPartitionManager
from .apis import KafkaApis
from .broker_lifecycle import BrokerLifecycleManager, Listener
from .cleaner_threads import CleanerThreads
from .client_quota_manager import ClientQuotas
from .config import DYNAMIC_LOG_KEYS, ConfigError, Endpoint, KafkaConfig, read_properties
from .config_repository import ConfigRepository
from .dynamic_config import DynamicBrokerConfig
from .replication_quota import ReplicationQuotas
from .controller_channel import ControllerChannel
from .coordinator import GroupCoordinatorAdapter, GroupCoordinatorConfig
from .coordinator.group_metadata_manager import GROUP_METADATA_TOPIC_NAME
from .coordinator.offsets_topic import OffsetsTopic
from .transaction import TRANSACTION_STATE_TOPIC_NAME, TransactionConfig, TransactionCoordinator
from .transaction.handlers import TransactionApis
from .transaction.markers import TxnMarkerChannel
from .transaction.verification import TransactionVerifier
from .fetcher import ReplicaFetcherManager
from .forwarding import ControllerTopicAdmin, Forwarding, ForwardingManager, MetadataWaiters, NoControllerForwarding
from .metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache
from .metrics import BrokerCollector, BrokerTopicStats, RequestMetrics
from .metrics_endpoint import ProcessMetrics
from .security.authorizer import StandardAuthorizer
from .security.bootstrap import BootstrapError, seed_credentials, write_credentials
from .security.credentials import CredentialCache
from .network import SocketServer
from .partition import LOCAL_ALTER_PARTITION, AlterPartitionSender
from .producer_ids import (FILE_NAME as PRODUCER_ID_FILE, LocalBlockSource, ProducerIdGenerator, ProducerIdManager,
                           RPCProducerIdManager)
from .replica_manager import ReplicaManager
from .scheduler import PeriodicTask
from .security.links import network_for, start_listener
from .security.reconfigure import ListenerReconfiguration
from .topic_admin import NotController, TopicAdmin

log = logging.getLogger("kbroker.server")

LEGACY_TOPICS_FILE = "kbroker-topics.json"  # the embedded controller's topic store (before process.roles)


class KafkaServer:
    def __init__(self, config: KafkaConfig, time: Time = SYSTEM_TIME, network: Network = DEFAULT_NETWORK,
                 controller_servers: list[tuple[str, int]] | None = None, metrics: "ProcessMetrics | None" = None) -> None:
        """``controller_servers``: where the controllers are, when not (only) in
        controller.quorum.bootstrap.servers — a combined process passes its own controller's
        bound address. ``metrics``: the process's registry and endpoint (one of its own,
        not served, when not given)."""
        if "broker" not in config.process_roles:
            raise ConfigError(f"process.roles={','.join(config.process_roles)} does not include broker")
        if not config.broker_listeners:
            raise ConfigError("listeners: a broker needs a listener that is not a controller listener "
                              f"({', '.join(config['controller.listener.names'] or [])})")
        self.config = config
        self.time = time
        self.network = network
        # Outgoing links authenticate as the listener they reach says (broker/security/listeners.py):
        # followers to leaders on the inter-broker listener, the broker to the controller on its listener.
        self.inter_broker_network = network_for(config, self.inter_broker_listener,
                                                config.security.inter_broker_mechanism, network)
        controller_names = config["controller.listener.names"] or []
        self.controller_network = network_for(config, controller_names[0].upper() if controller_names else None,
                                              config.security.controller_mechanism, network)
        self.broker_id = config.broker_id
        self.cluster_id: str | None = None
        self.controller_servers = list(controller_servers or config.controller_quorum_bootstrap_servers)
        self.log_manager: LogManager | None = None
        self.metadata_cache: MetadataCache | None = None
        self.config_repository: ConfigRepository | None = None
        self.fetcher_manager: ReplicaFetcherManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.topic_admin: TopicAdmin | None = None
        self.forwarding: Forwarding | None = None
        self.apis: KafkaApis | None = None
        self.group_coordinator: GroupCoordinatorAdapter | None = None
        self.offsets_topic: OffsetsTopic | None = None
        self.txn_state_topic: OffsetsTopic | None = None
        self.txn_coordinator: TransactionCoordinator | None = None
        self.txn_markers: TxnMarkerChannel | None = None
        self.txn_verifier: TransactionVerifier | None = None
        self.log_cleaner: LogCleaner | None = None
        self.cleaner_threads: CleanerThreads | None = None
        self.socket_server: SocketServer | None = None
        self.producer_ids: ProducerIdGenerator | None = None
        self.lifecycle: BrokerLifecycleManager | None = None
        self.alter_partition_manager: AlterPartitionManager | None = None
        self.metadata_waiters = MetadataWaiters(time)
        self._channels: list[ControllerChannel] = []
        self._locks: list[int] = []
        self._timers: dict[str, PeriodicTask] = {}
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbroker-flush")
        self._flush_idle = asyncio.Event()  # cleared while a background flush runs in the executor
        self._flush_idle.set()
        self.started = False
        self.bound_ports: dict[str, int] = {}
        self.metrics = metrics if metrics is not None else ProcessMetrics(config, time, serve=False)
        self.collector: BrokerCollector | None = None  # replication, purgatories, logs (when metrics are on)
        self.reconfiguration: ListenerReconfiguration | None = None  # TLS key stores reloaded live
        self.dynamic_config: DynamicBrokerConfig | None = None  # dynamic broker configs (KIP-226)
        self.replication_quotas: ReplicationQuotas | None = None  # KIP-73 replication throttles
        # The broker's one cache of SCRAM credentials: filled from the controller's records
        # (KafkaApis' UpdateMetadata), read by the SCRAM authenticator.
        self.credential_cache = CredentialCache()
        # authorizer.class.name's authorizer (None: every request allowed); its ACLs come from
        # the controller's records too.
        self.authorizer: StandardAuthorizer | None = StandardAuthorizer.from_config(
            config, self.metrics.authorizer_metrics())

    @property
    def has_controller(self) -> bool:
        return bool(self.controller_servers)

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch if self.lifecycle is not None else -1

    # -- startup ---------------------------------------------------------------------------
    async def startup(self) -> None:
        """Start everything, then (with a controller) wait until the controller has unfenced
        this broker and the metadata it sent lists it live."""
        try:
            await self.start_services()
            if self.lifecycle is not None:
                await self.wait_until_live()
        finally:
            heap.release()  # (start_services froze what it loaded; see there)

    async def start_services(self) -> None:
        cfg = self.config
        for d in cfg.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self._lock_log_dirs()
        self._load_meta_properties()
        if self.has_controller:
            # The credentials the controller gave it last time, else kbroker storage format's
            # --add-scram (KIP-900): SCRAM on the inter-broker listener works before the
            # controller's first metadata (which replaces them) arrives over it.
            try:
                seed_credentials(self.credential_cache, cfg.metadata_log_dir, f"broker {self.broker_id}")
            except BootstrapError as exc:
                raise ConfigError(f"metadata.log.dir: {exc}") from None
        self.metadata_cache = cache = MetadataCache(self.broker_id)
        cache.cluster_id = self.cluster_id
        cache.listeners.append(self.metadata_waiters.metadata_updated)
        self.config_repository = configs = ConfigRepository(cfg, self.broker_id, cache)
        self.log_manager = LogManager(cfg.log_dirs, configs.default_log_config(), time=self.time,
                                      topic_config=configs.log_config_for,
                                      max_open_files=cfg["log.open.files.max"])
        heap.hold()  # (see below: in one process with the controller, its metadata is loaded by now)
        loading_since = self.time.monotonic_ms()
        reports = self.log_manager.startup()
        recovery_seconds = (self.time.monotonic_ms() - loading_since) / 1000.0
        log.info("loaded %d partition logs from %s", len(reports) if reports is not None else 0,
                 ", ".join(str(d) for d in cfg.log_dirs))
        # What start-up loads (the controller's metadata, every log's segments and indexes:
        # millions of objects with 10,000 partitions) stays out of the cyclic collector's sight
        # until this broker is live (``startup``): its full collections scanned it all again and
        # again while the start's requests were applied, 0.3-0.5 s each, seconds in all.
        # (A frozen object is still freed when its last reference goes; unfreezing gives the
        # collector back whatever became cyclic garbage meanwhile.) broker/heap.py counts the holds.
        gc.freeze()
        for d in cfg.log_dirs:
            if (d / LEGACY_TOPICS_FILE).exists():
                log.warning("%s is the topic list of the removed embedded controller: the controller does not know "
                            "these topics; create them again (their logs in %s are kept and reused)",
                            d / LEGACY_TOPICS_FILE, d)
        alter_partition: AlterPartitionSender = LOCAL_ALTER_PARTITION
        if self.has_controller:
            self.lifecycle = self._lifecycle_manager()
            self.alter_partition_manager = alter_partition = AlterPartitionManager(
                broker_id=self.broker_id, time=self.time, channel=self._channel("alter-partition"),
                broker_epoch=lambda: self.broker_epoch, topic_id_of=self._topic_id_of)
            self.producer_ids = RPCProducerIdManager(broker_id=self.broker_id, time=self.time,
                                                     channel=self._channel("producer-ids"),
                                                     broker_epoch=lambda: self.broker_epoch)
            forwarding = ForwardingManager(self._channel("forwarding"), time=self.time, metadata_cache=cache,
                                           waiters=self.metadata_waiters,
                                           timeout_ms=cfg["controller.socket.timeout.ms"],
                                           applied=lambda topic, info: self.replica_manager.has_applied(topic, info))
            self.forwarding = forwarding
            self.topic_admin = ControllerTopicAdmin(forwarding, cfg, cache)
        else:
            log.warning("broker %d has no controller (process.roles=broker without controller.quorum.bootstrap."
                        "servers): it applies only the LeaderAndIsr/UpdateMetadata it is sent, commits ISR changes "
                        "itself and allocates producer ids locally", self.broker_id)
            self.producer_ids = ProducerIdManager(LocalBlockSource(cfg.log_dirs[0] / PRODUCER_ID_FILE, self.broker_id))
            self.forwarding = NoControllerForwarding()
            self.topic_admin = NotController()
        self.fetcher_manager = ReplicaFetcherManager(
            broker_id=self.broker_id, time=self.time, metadata_cache=cache, config=cfg,
            network=self.inter_broker_network, listener_name=self.inter_broker_listener)
        metrics_on = self.metrics.enabled
        topic_stats = BrokerTopicStats() if metrics_on else None
        request_metrics = RequestMetrics() if metrics_on else None
        self.fetcher_manager.topic_stats = topic_stats
        self.fetcher_manager.on_truncated_below_recovery_point = self.log_manager.checkpoint_recovery_points_after_truncation
        self.replica_manager = ReplicaManager(
            broker_id=self.broker_id, time=self.time, log_manager=self.log_manager,
            metadata_cache=cache, log_config_for=configs.log_config_for,
            replica_lag_time_max_ms=cfg["replica.lag.time.max.ms"], fetcher_manager=self.fetcher_manager,
            alter_partition=alter_partition, topic_stats=topic_stats)
        self._start_group_coordinator()
        self.apis = apis = KafkaApis(
            replica_manager=self.replica_manager, metadata_cache=cache, topic_admin=self.topic_admin,
            config_repository=configs, producer_ids=self.producer_ids, inter_broker_listener=self.inter_broker_listener,
            forwarding=self.forwarding, broker_epoch=lambda: self.broker_epoch,
            group_coordinator=self.group_coordinator, offsets_topic=self.offsets_topic, request_metrics=request_metrics,
            authorizer=self.authorizer, credential_cache=self.credential_cache,
            fetch_session_cache_slots=cfg["max.incremental.fetch.session.cache.slots"])
        # Client quotas (KIP-13/55/124): the controller's ClientQuotaRecords, enforced per request
        apis.quotas = ClientQuotas(apis.security_metadata.client_quotas, self.time, samples=cfg["quota.window.num"],
                                   window_seconds=cfg["quota.window.size.seconds"])
        apis.security_metadata.on_quotas_changed = apis.quotas.quotas_changed
        # Dynamic broker configs (KIP-226): the controller's ConfigRecords of BROKER resources,
        # applied without a restart (broker/dynamic_config.py)
        self.dynamic_config = DynamicBrokerConfig(cfg, self.broker_id)
        configs.dynamic = self.dynamic_config
        apis.security_metadata.on_broker_configs = self.dynamic_config.apply
        self.dynamic_config.listeners.append(self._dynamic_configs_changed)
        # KIP-73 replication throttles: rates from the dynamic broker configs, replicas from the topic configs
        self.replication_quotas = ReplicationQuotas(
            self.broker_id, self.time, samples=cfg["replication.quota.window.num"],
            window_seconds=cfg["replication.quota.window.size.seconds"],
            leader_rate=cfg["leader.replication.throttled.rate"], follower_rate=cfg["follower.replication.throttled.rate"])
        self.replica_manager.replication_quotas = self.replication_quotas
        self.fetcher_manager.follower_quota = self.replication_quotas.follower
        if self.has_controller:  # the credentials the controller gives it: where the next start begins
            self.apis.security_metadata.on_credentials_changed = lambda: write_credentials(
                cfg.metadata_log_dir, self.credential_cache, self.time.milliseconds())
        self._start_transaction_coordinator(apis)
        self.socket_server = SocketServer(
            self.apis, max_request_size=cfg["socket.request.max.bytes"], max_inflight=cfg["queued.max.requests"],
            send_buffer=cfg["socket.send.buffer.bytes"], receive_buffer=cfg["socket.receive.buffer.bytes"],
            time=self.time, connections_max_idle_ms=cfg["connections.max.idle.ms"],
            queued_max_request_bytes=cfg["queued.max.request.bytes"],
            metrics=request_metrics, now=self.time.nanoseconds)
        # The fetches parked on what a read's produces appended to are tried once, at its end.
        self.socket_server.read_hooks = (self.replica_manager.begin_read, self.replica_manager.end_read)
        if metrics_on:
            self.collector = BrokerCollector(self, self.metrics.per_partition)
            self.collector.recovery_seconds = recovery_seconds
            for collector in (topic_stats, request_metrics, self.socket_server, self.collector, self.apis.quotas,
                              self.replication_quotas):
                self.metrics.registry.register(collector)
        if self.lifecycle is not None:
            self.apis.hold_until_live()  # wait_until_live serves them
            self.apis.hold_until_registered()  # the lifecycle's registration releases them
        self.apis.listener_reconfiguration = self.reconfiguration = ListenerReconfiguration(
            self.broker_id, cfg.security, self.socket_server)
        for ep in cfg.broker_listeners:
            port = await start_listener(self.socket_server, cfg, ep, self.credential_cache)
            self.bound_ports[ep.listener_name] = port
        self._schedule_background_tasks()
        self.started = True
        if self.lifecycle is not None:
            self.lifecycle.listeners = self._registration_listeners()
            self.lifecycle.start()
            log.info("broker %d started; registering with the controller at %s", self.broker_id,
                     ", ".join(f"{h}:{p}" for h, p in self.controller_servers))
        else:
            self._register_self()
            log.info("broker %d started (cluster %s, no controller)", self.broker_id, self.cluster_id)

    def _start_group_coordinator(self) -> None:
        """The group coordinator on __consumer_offsets: it writes through the ReplicaManager and
        follows the leadership of that topic's partitions."""
        assert self.replica_manager is not None and self.metadata_cache is not None and self.topic_admin is not None
        gc_config = GroupCoordinatorConfig.from_values(self.config.values)
        self.offsets_topic = offsets_topic = OffsetsTopic(
            time=self.time, replica_manager=self.replica_manager, metadata_cache=self.metadata_cache,
            topic_admin=self.topic_admin, num_partitions=gc_config.offsets_topic_num_partitions,
            replication_factor=gc_config.offsets_topic_replication_factor,
            commit_timeout_ms=gc_config.offsets_commit_timeout_ms,
            topic_configs=lambda: coordinator.offsets_topic_configs())
        coordinator = GroupCoordinatorAdapter(gc_config, self.time, offsets_topic.append, offsets_topic.read_partition,
                                              offsets_topic.partition_exists)
        self.group_coordinator = coordinator
        offsets_topic.attach(coordinator)
        coordinator.startup()

    def _start_transaction_coordinator(self, apis: KafkaApis) -> None:
        """The transaction coordinator on __transaction_state, built like the group coordinator;
        its markers go to partition leaders over the inter-broker listener."""
        assert self.replica_manager is not None and self.metadata_cache is not None and self.topic_admin is not None
        if not self.has_controller:
            return  # no controller to create __transaction_state through
        txn_config = TransactionConfig.from_values(self.config.values)
        gc = self.group_coordinator
        on_markers = getattr(gc, "on_transaction_completed", None) if gc is not None else None
        self.txn_state_topic = state_topic = OffsetsTopic(
            time=self.time, replica_manager=self.replica_manager, metadata_cache=self.metadata_cache,
            topic_admin=self.topic_admin, num_partitions=txn_config.num_partitions,
            replication_factor=txn_config.replication_factor, commit_timeout_ms=txn_config.append_timeout_ms,
            topic_configs=lambda: coordinator.topic_configs(), topic=TRANSACTION_STATE_TOPIC_NAME)
        self.txn_markers = markers = TxnMarkerChannel(
            broker_id=self.broker_id, time=self.time, metadata_cache=self.metadata_cache,
            replica_manager=self.replica_manager, network=self.inter_broker_network,
            listener_name=self.inter_broker_listener, on_local_markers=on_markers)
        assert self.producer_ids is not None
        coordinator = TransactionCoordinator(txn_config, self.time, state_topic.append, state_topic.read_partition,
                                             self.producer_ids, markers)
        self.txn_coordinator = coordinator
        state_topic.attach(coordinator)
        coordinator.startup()
        apis.attach_transactions(TransactionApis(apis, coordinator, state_topic, on_markers))
        if self.config.values.get("transaction.partition.verification.enable", True):
            self.txn_verifier = apis.txn_verifier = TransactionVerifier(
                broker_id=self.broker_id, metadata_cache=self.metadata_cache, coordinator=coordinator, channel=markers,
                state_topic_name=TRANSACTION_STATE_TOPIC_NAME)
            if gc is not None:
                verifier, rm = self.txn_verifier, self.replica_manager
                gc.coordinator.txn_verify = lambda index, tid, pid, epoch, done: verifier.verify_offsets(
                    rm.get_partition(GROUP_METADATA_TOPIC_NAME, index), tid, pid, epoch, done)

    async def wait_until_live(self) -> None:
        """Until the controller has unfenced this broker and its UpdateMetadata lists it live
        (so a client asking right away finds it); then prefetch a producer id block."""
        assert self.lifecycle is not None and self.metadata_cache is not None
        await asyncio.shield(self.lifecycle.initial_unfence)
        live: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        cache = self.metadata_cache
        self.metadata_waiters.wait(lambda: self.broker_id in cache.brokers, 2**31,
                                   lambda ok: live.done() or live.set_result(ok))
        await live
        assert self.apis is not None
        self.apis.live()
        if isinstance(self.producer_ids, RPCProducerIdManager):
            self.producer_ids.maybe_request_next_block()
        log.info("broker %d is live (cluster %s, broker epoch %d, controller %d)", self.broker_id, self.cluster_id,
                 self.broker_epoch, cache.controller_id)

    def _channel(self, purpose: str, timeout_ms: int | None = None) -> ControllerChannel:
        channel = ControllerChannel(self.controller_servers, broker_id=self.broker_id, purpose=purpose, time=self.time,
                                    network=self.controller_network,
                                    request_timeout_ms=timeout_ms or self.config["controller.socket.timeout.ms"])
        self._channels.append(channel)
        return channel

    def _lifecycle_manager(self) -> BrokerLifecycleManager:
        cfg = self.config
        # A heartbeat that gets no answer for half a session is abandoned (and the next
        # controller tried) while this broker's session can still be saved.
        timeout = max(1, min(cfg["controller.socket.timeout.ms"], cfg["broker.session.timeout.ms"] // 2))
        return BrokerLifecycleManager(
            broker_id=self.broker_id, time=self.time, channel=self._channel("heartbeat", timeout), listeners=[],
            rack=cfg["broker.rack"], cluster_id=self.cluster_id, heartbeat_interval_ms=cfg["broker.heartbeat.interval.ms"],
            on_cluster_id=self._on_cluster_id, on_registered=self._on_registered, log_dir_usage=self._log_dir_usage)

    def _log_dir_usage(self) -> list[dict]:
        """The file system usage of each log dir (statvfs, microseconds), for the heartbeat: used
        bytes against used + available, as df counts Use% (blocks reserved for root are neither)."""
        out = []
        for d in self.config.log_dirs:
            try:
                usage = fileio.disk_usage(d)
            except OSError:
                continue
            out.append({"total_bytes": usage.used + usage.free, "used_bytes": usage.used})
        return out

    def _registration_listeners(self) -> list[Listener]:
        """The advertised broker endpoints, the inter-broker listener first (the one the
        controller and other brokers connect to)."""
        eps = self.advertised_endpoints()
        eps.sort(key=lambda ep: ep.listener_name != self.inter_broker_listener)
        listeners = self.config.security.listeners
        return [Listener(ep.listener_name, ep.host, ep.port,
                         listeners[ep.listener_name].protocol_id if ep.listener_name in listeners else 0)
                for ep in eps]

    def _on_registered(self) -> None:
        if self.apis is not None:
            self.apis.registered()

    def _on_cluster_id(self, cluster_id: str) -> None:
        """First contact with the controller told the cluster id: it is this data's from now on."""
        self.cluster_id = cluster_id
        if self.metadata_cache is not None:
            self.metadata_cache.cluster_id = cluster_id
        self._write_meta_properties()

    def _topic_id_of(self, topic: str):
        info = self.metadata_cache.topics.get(topic) if self.metadata_cache is not None else None
        return info.topic_id if info is not None else None

    def _lock_log_dirs(self) -> None:
        for d in self.config.log_dirs:
            fd = fileio.open(d / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fileio.close(fd)
                raise ConfigError(f"log.dirs: {d} is in use by another broker process (.lock is held)") from None
            self._locks.append(fd)

    def _load_meta_properties(self) -> None:
        """Kafka's meta.properties: the broker id and cluster id this data belongs to. With a
        controller and no cluster id yet, the cluster id comes from the controller on first
        contact (and is written then); without one, it is generated here."""
        found: dict[str, str] = {}
        for d in self.config.log_dirs:
            path = d / "meta.properties"
            if path.exists():
                props = read_properties(path)
                if "broker.id" not in props and "node.id" in props:
                    props["broker.id"] = props["node.id"]  # written by a controller sharing the directory
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
        self.cluster_id = found.get("cluster.id")
        if self.cluster_id is None and not self.has_controller:
            self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if self.cluster_id is not None:
            self._write_meta_properties()

    def _write_meta_properties(self) -> None:
        for d in self.config.log_dirs:
            path = d / "meta.properties"
            props = read_properties(path) if path.exists() else {}
            if props.get("broker.id") == str(self.broker_id) and props.get("cluster.id") == self.cluster_id:
                continue
            props.pop("version", None)
            props.update({"broker.id": str(self.broker_id), "cluster.id": str(self.cluster_id)})
            text = "#kbroker meta.properties\nversion=0\n" + "".join(f"{k}={v}\n" for k, v in props.items())
            write_atomically(path, text.encode())

    @property
    def inter_broker_listener(self) -> str:
        """The listener other brokers (followers' fetchers) and the controller connect to:
        inter.broker.listener.name, or the listener named after security.inter.broker.protocol,
        or the first broker listener."""
        return self.config.security.inter_broker_listener or self.config.broker_listeners[0].listener_name

    def advertised_endpoints(self) -> list[Endpoint]:
        controller_names = {n.upper() for n in (self.config["controller.listener.names"] or [])}
        advertised = [ep for ep in (self.config.advertised_listeners or self.config.listeners)
                      if ep.listener_name not in controller_names]
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
        """A background pass every ``interval_ms`` that logs and retries with backoff when it
        fails, and never stops before shutdown (broker/scheduler.py)."""
        if interval_ms <= 0 or interval_ms >= 2**62:
            return
        self._timers[name] = PeriodicTask(name, interval_ms, fn, self.time).start()

    def _schedule_background_tasks(self) -> None:
        cfg = self.config
        lm = self.log_manager
        self._schedule_periodic("log-retention", cfg["log.retention.check.interval.ms"], lm.cleanup_logs)
        # segments and partition dirs renamed .deleted / -delete go after file.delete.delay.ms (per topic; the
        # broker's default sets the pace, at least once a second)
        self._schedule_periodic("delete-files", min(1000, max(10, cfg["log.segment.delete.delay.ms"])), lm.delete_due)
        self._schedule_periodic("log-flush", min(cfg.flush_interval_ms, 1000), self._flush_pass)
        # the checkpoints are taken on the loop and written (fsyncs) on the flush thread
        self._schedule_periodic("recovery-point-checkpoint", cfg["log.flush.offset.checkpoint.interval.ms"],
                                lambda: self._write_off_loop(lm.snapshot_recovery_points()))
        self._schedule_periodic("log-start-offset-checkpoint", cfg["log.flush.start.offset.checkpoint.interval.ms"],
                                lambda: self._write_off_loop(lm.snapshot_log_start_offsets()))
        self._schedule_periodic("highwatermark-checkpoint", cfg["replica.high.watermark.checkpoint.interval.ms"],
                                lambda: self._write_off_loop(lm.snapshot_high_watermarks()))
        # (with it, the replicas a full disk kept from being created are retried: ReplicaManager.retry_failed_replicas)
        self._schedule_periodic("isr-expiration", max(1, cfg["replica.lag.time.max.ms"] // 2), self._isr_expiration)
        self._schedule_periodic("producer-id-expiration", cfg["producer.id.expiration.check.interval.ms"],
                                lm.remove_expired_producers)
        if cfg["log.cleaner.enable"]:
            # compaction passes run on log.cleaner.threads threads, off the event loop (broker/cleaner_threads.py)
            self.log_cleaner = LogCleaner(self.time, lm.all_logs)
            self.cleaner_threads = CleanerThreads(self.log_cleaner, cfg["log.cleaner.threads"],
                                                  lm.checkpoint_cleaner_offsets)
            self._schedule_periodic("log-cleaner", max(1, cfg["log.cleaner.backoff.ms"]),
                                    self.cleaner_threads.maybe_clean)

    def _isr_expiration(self) -> None:
        """The ISR-expiration pass: shrink the ISRs this broker leads, then retry the replicas
        a storage error kept from being created. Each runs whatever the other raised (a
        partition's shrink failing must not keep a recovered disk's replicas offline)."""
        rm = self.replica_manager
        for step in (rm.maybe_shrink_isr, rm.retry_failed_replicas):
            try:
                step()
            except Exception:
                log.exception("ISR expiration: %s failed", step.__name__)

    def _dynamic_configs_changed(self, changed: set[str]) -> None:
        """Dynamic broker configs changed (their values are in self.config already): what read
        them once takes the new values."""
        if changed & (DYNAMIC_LOG_KEYS | {"producer.id.expiration.ms"}) and self.replica_manager is not None:
            # the topic defaults moved: every log takes its LogConfig again (topics' own overrides still win)
            self.replica_manager.topic_configs_changed({topic for topic, _p in self.log_manager.all_logs()})
        if changed & {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}:
            if self.replication_quotas is not None:
                self.replication_quotas.configs_changed(self.config)
        if "log.cleaner.threads" in changed and self.cleaner_threads is not None:
            self.cleaner_threads.resize(self.config["log.cleaner.threads"])
        if "log.cleaner.backoff.ms" in changed and self.cleaner_threads is not None:
            timer = self._timers.pop("log-cleaner", None)
            if timer is not None:
                timer.cancel()
            self._schedule_periodic("log-cleaner", max(1, self.config["log.cleaner.backoff.ms"]),
                                    self.cleaner_threads.maybe_clean)

    def _write_off_loop(self, snapshot: CheckpointSnapshot) -> asyncio.Future:
        """``snapshot.write()`` on the flush thread (after a flush pass running there); the
        PeriodicTask that asked waits for it. Shutdown drains the thread before the final
        checkpoints, which an older snapshot then cannot overwrite (CheckpointSnapshot)."""
        return asyncio.get_running_loop().run_in_executor(self._executor, snapshot.write)

    def _flush_pass(self) -> None:
        """fsync what the flush policy asks for, plus segments that rolled since the last pass
        (so recovery after a crash only rescans the active segment), off the event loop. The
        leader epoch files are not this pass's: a log's flush writes its file before the
        recovery point passes an entry, a clean shutdown writes the rest (storage/epoch_cache.py)."""
        if not self._flush_idle.is_set():
            return
        plans = self.log_manager.flush_dirty_logs()
        if not plans:
            return
        self._flush_idle.clear()
        loop = asyncio.get_running_loop()
        durations: list[int] = []
        now = self.time.nanoseconds

        def done(fut: asyncio.Future) -> None:
            self._flush_idle.set()
            if self.collector is not None:
                for ns in durations:
                    self.collector.log_flush.observe(ns * 1e-9)
            if fut.exception() is not None:
                log.error("background flush failed: %s", fut.exception())
                return
            succeeded, failures = fut.result()
            for plan in succeeded:
                plan.log.complete_flush(plan)
            if failures:  # their recovery points stay; the next pass tries again
                plan, exc = failures[0]
                log.error("background flush of %s failed: %s%s", plan, exc,
                          f" (and {len(failures) - 1} more in this pass)" if len(failures) > 1 else "")

        asyncio.ensure_future(loop.run_in_executor(self._executor, run_flush_plans, plans, now, durations)
                              ).add_done_callback(done)

    # -- shutdown --------------------------------------------------------------------------
    async def shutdown(self) -> None:
        if not self.started:
            self._release_locks()
            return
        log.info("broker %d shutting down", self.broker_id)
        if self.lifecycle is not None:
            await self._controlled_shutdown()
        self.started = False
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self.txn_coordinator is not None:
            self.txn_coordinator.shutdown()
        for closing in (self.lifecycle, self.alter_partition_manager, self.producer_ids, self.forwarding,
                        self.txn_markers, self.txn_verifier):
            close = getattr(closing, "close", None)
            if close is not None:
                close()
        self.metadata_waiters.close()
        self.socket_server.stop_accepting()
        if self.group_coordinator is not None:
            self.group_coordinator.shutdown()
        self.replica_manager.shutdown()
        timeout_s = self.config["kbroker.shutdown.timeout.ms"] / 1000
        if not await self.socket_server.wait_for_inflight(timeout_s):
            log.warning("shutdown: requests still in flight after %.1fs; closing their connections", timeout_s)
        self.socket_server.close_all()
        await self.fetcher_manager.shutdown()
        if self.cleaner_threads is not None:
            self.cleaner_threads.shutdown()
        await self._flush_idle.wait()  # a background flush still running finishes (and is recorded) first
        self._executor.shutdown(wait=True)
        self.log_manager.shutdown()
        for channel in self._channels:
            channel.close()
        self._release_locks()
        log.info("broker %d shut down cleanly", self.broker_id)

    async def _controlled_shutdown(self) -> None:
        """Kafka's controlled shutdown: heartbeats with want_shut_down until the controller has
        moved every leadership of this broker away (so producers see only the retriable
        NOT_LEADER_OR_FOLLOWER) and says should_shut_down; bounded by broker.session.timeout.ms
        (after which the controller would fence this broker anyway). Listeners stay open
        meanwhile: the controller's LeaderAndIsr must reach this broker."""
        assert self.lifecycle is not None
        if not self.config["controlled.shutdown.enable"] or not self.lifecycle.registered:
            return
        timeout_ms = self.config["broker.session.timeout.ms"]
        done = self.lifecycle.begin_controlled_shutdown()
        timer = self.time.schedule(timeout_ms, lambda: done.done() or done.cancel())
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            if not done.cancelled():
                raise
            log.warning("broker %d: the controller did not allow the shutdown within %d ms; shutting down anyway",
                        self.broker_id, timeout_ms)
        finally:
            timer.cancel()

    def _release_locks(self) -> None:
        for fd in self._locks:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                fileio.close(fd)
        self._locks.clear()

    def bound_port(self, listener_name: str = "PLAINTEXT") -> int:
        return self.bound_ports[listener_name]
