"""ControllerServer: the controller process (``python -m controller -c controller.properties``).

Configuration is the broker's machinery and Kafka's keys: ``process.roles`` must include
``controller``; ``node.id`` names it; it listens on the ``listeners`` named by
``controller.listener.names`` (e.g. ``CONTROLLER://127.0.0.1:9093``); its metadata log lives
in ``metadata.log.dir`` (default: the first of ``log.dirs``), a directory it locks
(``.metadata.lock``, a name of its own so that a combined broker,controller process can
hold the broker's ``.lock`` in the same directory too) and identifies by
``meta.properties`` (node.id, and the cluster.id generated on first start).

Startup: lock, load the metadata (snapshot + log), claim an epoch, send every registered
broker its full state, then listen. Shutdown (SIGTERM/SIGINT): stop listening, let
in-flight requests finish (bounded by kbroker.shutdown.timeout.ms), stop the controller,
close the channels and the log. A failed fsync stops the process with exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import signal
import sys
import uuid
from pathlib import Path

from broker.config import ConfigError, KafkaConfig, read_properties
from broker.metrics import RequestMetrics
from broker.metrics_endpoint import ProcessMetrics
from broker.network import SocketServer
from broker.security.bootstrap import BOOTSTRAP_FILE, BootstrapError, read_bootstrap, scram_credentials
from broker.security.credentials import MECHANISMS as SCRAM_MECHANISMS, ScramCredential
from broker.security.links import network_for, start_listener
from protocol.client import DEFAULT_NETWORK, Network
from protocol.client import SYSTEM_TIME
from protocol.clock import Time
from storage.checkpoint import write_atomically

from .channel_manager import ControllerChannelManager
from .controller_apis import ControllerApis
from .metadata_store import LocalMetadataStore, MetadataStoreError
from .metrics import ControllerCollector
from .quorum_controller import QuorumController, QuorumControllerConfig

log = logging.getLogger("kbroker.controller.server")

META_PROPERTIES = "meta.properties"


def new_cluster_id() -> str:
    """Kafka's format: a random UUID in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def check_controller_config(config: KafkaConfig) -> None:
    if "controller" not in config.process_roles:
        raise ConfigError(f"process.roles={','.join(config.process_roles)} does not include controller")
    if config.node_id is None or config.node_id < 0:
        raise ConfigError("node.id: a controller needs a node id (0 or more)")
    if config["controller.metadata.store"] == "zookeeper":
        from .zk_connect import parse_zookeeper_connect
        parse_zookeeper_connect(config["zookeeper.connect"])
    names = config["controller.listener.names"]
    if not names:
        raise ConfigError("controller.listener.names: a controller needs at least one listener name")
    known = {ep.listener_name for ep in config.listeners} | {ep.listener_name for ep in config.controller_listeners}
    missing = [n for n in names if n.upper() not in known]
    if missing:
        raise ConfigError(f"controller.listener.names: {', '.join(missing)} not in listeners "
                          f"({', '.join(str(e) for e in config.listeners)})")


class ControllerCredentials:
    """The SCRAM credentials a controller's own SASL listener checks logins against: those its
    metadata holds (UserScramCredentialRecords), read as the broker's CredentialCache is. A
    standby controller (ZooKeeper), or one still loading, has no metadata: it checks the
    credentials of its bootstrap.checkpoint (``kbroker storage format --add-scram``), if any."""

    def __init__(self, server: "ControllerServer") -> None:
        self.server = server
        self.bootstrap: dict[tuple[str, str], ScramCredential] = {}

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        controller = self.server.controller
        scram = SCRAM_MECHANISMS.get(mechanism)
        if scram is None:
            return None
        if controller is None or not controller.active:
            return self.bootstrap.get((mechanism, user))
        return controller.scram.credentials.get((user, scram.type_id))


class ControllerServer:
    def __init__(self, config: KafkaConfig, time: Time = SYSTEM_TIME, network: Network = DEFAULT_NETWORK) -> None:
        check_controller_config(config)
        self.config = config
        self.time = time
        self.network = network
        # How the controller reaches brokers (LeaderAndIsr, UpdateMetadata, StopReplica): their
        # inter-broker listener, with its security and this process's credentials for it.
        self.broker_network = network_for(config, config.security.inter_broker_listener,
                                          config.security.inter_broker_mechanism, network)
        # SCRAM credentials of the controller's own SASL listener: the active controller's.
        self.credential_cache = ControllerCredentials(self)
        # kbroker storage format's records (KIP-900): the metadata log's first records when it is empty.
        self.bootstrap = self._load_bootstrap(config.metadata_log_dir)
        self.credential_cache.bootstrap = scram_credentials(self.bootstrap)
        self.node_id = config.node_id
        self.cluster_id: str | None = None
        self.store = None  # LocalMetadataStore, or the ZooKeeperMetadataStore of the current term
        self.channel: ControllerChannelManager | None = None
        self.controller: QuorumController | None = None
        self.apis: ControllerApis | None = None
        self.socket_server: SocketServer | None = None
        self.bound_ports: dict[str, int] = {}
        self.failure: BaseException | None = None
        self.stopped = asyncio.Event()
        self.started = False
        self.metrics: ProcessMetrics | None = None  # the process's (serve() or KafkaRaftServer sets it)
        # controller.metadata.store=zookeeper
        self.coordinator = None
        self.standby = None
        self._terms_task: asyncio.Task | None = None
        self._term_over: asyncio.Event | None = None

    async def startup(self) -> None:
        if self.config["controller.metadata.store"] == "zookeeper":
            await self._startup_zookeeper()
            return
        cfg = self.config
        directory = cfg.metadata_log_dir
        directory.mkdir(parents=True, exist_ok=True)
        self.store = LocalMetadataStore(directory, self.time, segment_bytes=cfg["metadata.log.segment.bytes"],
                                        segment_ms=cfg["metadata.log.segment.ms"], lock_name=".metadata.lock")
        try:
            self.store.acquire_lock()
            self.cluster_id = self._load_meta_properties(directory)
            self.channel = ControllerChannelManager(self.node_id, time=self.time, network=self.broker_network,
                                                    request_timeout_ms=cfg["controller.socket.timeout.ms"])
            self.controller = QuorumController(QuorumControllerConfig.from_kafka_config(cfg, self.cluster_id),
                                               self.store, time=self.time, channel=self.channel,
                                               on_fatal=self._on_fatal, authorizer_metrics=self._authorizer_metrics(),
                                               **self._bootstrap_args())
            await self.controller.start()
            if self.metrics is not None and self.metrics.enabled:
                self.metrics.registry.register(ControllerCollector(lambda: self.controller))
            self.apis = ControllerApis(self.controller)
            await self._listen()
        except BaseException:
            await self._close()
            raise
        self.started = True
        log.info("controller %d started (cluster %s, epoch %d, metadata in %s)", self.node_id, self.cluster_id,
                 self.controller.epoch, directory)

    async def _listen(self) -> None:
        cfg = self.config
        # A controller alone keeps request metrics of its own (heartbeats, registrations,
        # AlterPartition); in a combined node the broker's are the process's.
        request_metrics = (RequestMetrics() if self.metrics is not None and self.metrics.enabled
                           and "broker" not in cfg.process_roles else None)
        self.socket_server = SocketServer(
            self.apis, max_request_size=cfg["socket.request.max.bytes"], max_inflight=cfg["queued.max.requests"],
            send_buffer=cfg["socket.send.buffer.bytes"], receive_buffer=cfg["socket.receive.buffer.bytes"],
            metrics=request_metrics, now=self.time.nanoseconds, time=self.time)
        if request_metrics is not None:
            self.metrics.registry.register(request_metrics)
            self.metrics.registry.register(self.socket_server)
        # A combined node's broker listeners bind after this one: with port 0 here the
        # kernel must not hand out one of their configured ports.
        controller_names = {ep.listener_name for ep in cfg.controller_listeners}
        broker_ports = frozenset(ep.port for ep in cfg.listeners if ep.listener_name not in controller_names and ep.port)
        for ep in cfg.controller_listeners:
            port = await start_listener(self.socket_server, cfg, ep, self.credential_cache, avoid_ports=broker_ports)
            self.bound_ports[ep.listener_name] = port

    # -- controller.metadata.store=zookeeper: standby until elected ----------------------

    async def _startup_zookeeper(self) -> None:
        """Connect to ZooKeeper, listen as a standby (NOT_CONTROLLER), and campaign in the
        background: each won election is a term of a fresh QuorumController on a
        ZooKeeperMetadataStore; a term ends when the session is lost (or the connection down
        for the session timeout) or a conditional write fails, and the process goes back to
        standby and campaigns again."""
        from .standby import StandbyController
        from .zookeeper_store import ZooKeeperCoordinator
        cfg = self.config
        self.coordinator = ZooKeeperCoordinator(
            cfg["zookeeper.connect"], self.node_id, self.time, session_timeout_ms=cfg["zookeeper.session.timeout.ms"],
            connection_timeout_ms=cfg["zookeeper.connection.timeout.ms"], sasl=cfg.security.zookeeper_sasl,
            set_acl=cfg["zookeeper.set.acl"])
        try:
            # A directory formatted by ``kbroker storage format -t ID`` proposes its cluster id.
            formatted = self._formatted_cluster_id(cfg.metadata_log_dir)
            self.cluster_id = await self.coordinator.start(formatted or new_cluster_id())
            if formatted is not None and formatted != self.cluster_id:
                raise ConfigError(f"{cfg.metadata_log_dir / META_PROPERTIES}: cluster.id {formatted}, but the cluster "
                                  f"on ZooKeeper is {self.cluster_id}")
            self.standby = StandbyController(self.node_id, self.cluster_id, self._active_controller_id)
            if self.metrics is not None and self.metrics.enabled:
                # The controller of the current term; nothing while a standby.
                self.metrics.registry.register(ControllerCollector(lambda: self.controller))
            self.apis = ControllerApis(self.standby)
            await self._listen()
        except BaseException:
            await self._close()
            raise
        self.coordinator.on_not_active = self._end_term
        self._terms_task = asyncio.get_running_loop().create_task(self._terms(), name="controller-terms")
        self.started = True
        log.info("controller %d started as a standby (cluster %s, ZooKeeper %s%s)", self.node_id, self.cluster_id,
                 self.coordinator.hosts, self.coordinator.chroot)

    @staticmethod
    def _load_bootstrap(directory: Path) -> list:
        try:
            return read_bootstrap(directory) or []
        except BootstrapError as exc:
            raise ConfigError(f"metadata.log.dir: {exc}") from None

    def _bootstrap_args(self) -> dict:
        return {"bootstrap": self.bootstrap,
                "bootstrap_source": str(self.config.metadata_log_dir / BOOTSTRAP_FILE)}

    def _authorizer_metrics(self):
        return self.metrics.authorizer_metrics() if self.metrics is not None else None

    def _active_controller_id(self) -> int:
        """What the standby names as the controller: the election's winner, but never itself
        (it has won and is still loading, or its term just ended): -1 then."""
        active = self.coordinator.active_controller_id if self.coordinator is not None else -1
        return -1 if active == self.node_id else active

    async def _terms(self) -> None:
        cfg = self.config
        while True:
            try:
                term = await self.coordinator.campaign()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a surprise from ZooKeeper must not end the campaigning
                log.exception("controller %d: the election failed; trying again", self.node_id)
                await self.coordinator.wait_change(1000)
                continue
            self._term_over = asyncio.Event()
            self.store = self.coordinator.new_store(term)
            self.channel = ControllerChannelManager(self.node_id, time=self.time, network=self.broker_network,
                                                    request_timeout_ms=cfg["controller.socket.timeout.ms"])
            self.controller = QuorumController(QuorumControllerConfig.from_kafka_config(cfg, self.cluster_id),
                                               self.store, time=self.time, channel=self.channel,
                                               on_fatal=lambda exc: self._end_term(f"controller failed: {exc}"),
                                               authorizer_metrics=self._authorizer_metrics(),
                                               **self._bootstrap_args())
            try:
                await self.controller.start()
            except Exception as exc:  # noqa: BLE001 - lost the term while loading: back to standby
                log.warning("controller %d could not take over in epoch %d: %s", self.node_id, term.epoch, exc)
                self._term_over.set()
            else:
                if not self._term_over.is_set():
                    self.apis.controller = self.controller
                    log.info("controller %d is the active controller (epoch %d, loaded in %.0f ms)", self.node_id,
                             term.epoch, self.store.load_stats.get("ms", 0))
            await self._term_over.wait()
            await self._step_down()

    def _end_term(self, why: str) -> None:
        """On the loop: this process's term (if any) is over."""
        if self.store is not None:
            self.store.fail(why)
        if self._term_over is not None and not self._term_over.is_set():
            log.warning("controller %d steps down: %s", self.node_id, why)
            self._term_over.set()

    async def _step_down(self) -> None:
        self.apis.controller = self.standby
        controller, channel, store = self.controller, self.channel, self.store
        self.controller = self.channel = self.store = None
        self._term_over = None
        if controller is not None:
            await controller.stop()
        if channel is not None:
            await channel.close()
        if store is not None:
            store.close()

    def _formatted_cluster_id(self, directory: Path) -> str | None:
        path = directory / META_PROPERTIES
        props = read_properties(path) if path.exists() else {}
        stored = props.get("node.id", props.get("broker.id"))
        if stored is not None and int(stored) != self.node_id:
            raise ConfigError(f"node.id: configured {self.node_id} but {path} belongs to node {stored}")
        return props.get("cluster.id")

    def _load_meta_properties(self, directory: Path) -> str:
        """The cluster id from meta.properties (written on first start). A node.id (or the
        broker.id a combined broker writes there) other than ours means the directory is
        another node's: refuse it."""
        path = directory / META_PROPERTIES
        props = read_properties(path) if path.exists() else {}
        stored = props.get("node.id", props.get("broker.id"))
        if stored is not None and int(stored) != self.node_id:
            raise ConfigError(f"node.id: configured {self.node_id} but {path} belongs to node {stored}")
        cluster_id = props.get("cluster.id") or new_cluster_id()
        if props.get("cluster.id") != cluster_id or stored is None:
            text = f"#kbroker meta.properties\nversion=1\nnode.id={self.node_id}\ncluster.id={cluster_id}\n"
            write_atomically(path, text.encode())
        return cluster_id

    def _on_fatal(self, exc: BaseException) -> None:
        self.failure = exc
        self.stopped.set()

    def bound_port(self, listener_name: str | None = None) -> int:
        if listener_name is None:
            return next(iter(self.bound_ports.values()))
        return self.bound_ports[listener_name]

    async def shutdown(self) -> None:
        if self.started:
            log.info("controller %d shutting down", self.node_id)
        self.started = False
        if self.socket_server is not None:
            self.socket_server.stop_accepting()
            timeout_s = self.config["kbroker.shutdown.timeout.ms"] / 1000
            if not await self.socket_server.wait_for_inflight(timeout_s):
                log.warning("shutdown: requests still in flight after %.1fs; closing their connections", timeout_s)
        await self._close()
        log.info("controller %d shut down%s", self.node_id, "" if self.failure is None else " after a failure")

    async def _close(self) -> None:
        if self.socket_server is not None:
            self.socket_server.close_all()
            self.socket_server = None
        if self._terms_task is not None:
            self._terms_task.cancel()
            try:
                await self._terms_task
            except (asyncio.CancelledError, Exception):
                pass
            self._terms_task = None
        resign = self.coordinator is not None and self.controller is not None
        if self.controller is not None:
            await self.controller.stop()
        if self.channel is not None:
            await self.channel.close()
        if self.store is not None:
            try:
                self.store.close()
            except (OSError, MetadataStoreError) as exc:
                log.error("closing the metadata log failed: %s", exc)
            self.store = None
        if self.coordinator is not None:
            if resign:  # a clean stop hands over at once, without waiting for the session to expire
                await self.coordinator.resign()
            await asyncio.get_running_loop().run_in_executor(None, self.coordinator.close)
            self.coordinator = None


async def serve(config: KafkaConfig) -> int:
    """Run a controller until SIGTERM or SIGINT (exit 0) or a fatal error (exit 1)."""
    server = ControllerServer(config)
    server.metrics = metrics = ProcessMetrics(config, server.time)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stopped.set)
    try:
        await metrics.start()
        await server.startup()
        metrics.serving()
        await server.stopped.wait()
        if server.failure is None:
            log.info("signal received, shutting down")
    finally:
        metrics.stopping()
        await server.shutdown()
        await metrics.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0 if server.failure is None else 1


def run(config_path: str | None, overrides=(), log_level: str = "INFO", loggers=()) -> int:
    """What ``kbroker controller`` calls: load the configuration, log like the broker, run on uvloop.
    ``loggers``: (name, level) pairs, a logger's own level."""
    import uvloop

    logging.basicConfig(level=log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name, level in loggers:
        logging.getLogger(name).setLevel(str(level).upper())
    try:
        config = KafkaConfig.load(config_path, overrides)
        check_controller_config(config)
        return uvloop.run(serve(config))
    except (ConfigError, MetadataStoreError) as exc:
        print(f"kbroker controller: {exc}", file=sys.stderr)
        return 2


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller", description="Run a kbroker controller.")
    parser.add_argument("-c", "--config", help="a controller.properties file (Kafka's keys)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="set a configuration key (repeatable; wins over the file and the environment)")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.add_argument("--logger", action="append", default=[], metavar="LOGGER=LEVEL",
                        help="one logger's level (repeatable), e.g. kbroker.network=DEBUG")
    args = parser.parse_args(argv)
    loggers = [tuple(item.split("=", 1)) for item in args.logger if "=" in item]
    return run(args.config, args.override, args.log_level, loggers)
