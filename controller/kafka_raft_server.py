"""KafkaRaftServer (Kafka's name): one process with the roles ``process.roles`` gives it.

* ``controller``: a ControllerServer (its own listener, from controller.listener.names, and
  its metadata log in metadata.log.dir);
* ``broker``: a KafkaServer, which registers with the controllers of
  controller.quorum.bootstrap.servers;
* ``broker,controller`` (combined, the default, what ``make run`` starts): both, on one event
  loop. The controller starts first; the broker then registers with it over the controller's
  listener exactly as a broker in another process would (one code path). Without
  controller.quorum.bootstrap.servers the broker is pointed at its own controller's bound
  listener (so ``CONTROLLER://127.0.0.1:0`` works).

It lives in controller/ because it is the one place that sees both roles (controller/ builds
on broker/'s configuration and socket server; broker/ knows nothing of controller/).
Shutdown stops the broker first (its controlled shutdown needs the controller), then the
controller. ``stopped`` is set when the controller fails fatally (a failed fsync): the
process must then exit.
"""

from __future__ import annotations

import asyncio
import logging

from broker.config import ConfigError, KafkaConfig, read_properties
from broker.metrics_endpoint import ProcessMetrics
from broker.server import KafkaServer
from protocol.client import DEFAULT_NETWORK, SYSTEM_TIME, Network
from protocol.clock import Time

from .server import ControllerServer

log = logging.getLogger("kbroker.server")

FIRST_GENERATED_ID = 1001  # Kafka's reserved.broker.max.id + 1


def resolve_combined_node_id(config: KafkaConfig) -> None:
    """A combined node without node.id/broker.id keeps the id its data says (meta.properties in
    the metadata or first log directory), else takes Kafka's first generated broker id, 1001,
    as a broker alone would: the controller needs its id before either role starts."""
    if config.node_id is not None and config.node_id >= 0:
        return
    node_id = FIRST_GENERATED_ID
    for directory in (config.metadata_log_dir, *config.log_dirs):
        path = directory / "meta.properties"
        if path.exists():
            props = read_properties(path)
            stored = props.get("node.id", props.get("broker.id"))
            if stored is not None:
                node_id = int(stored)
                break
    log.info("node.id is not set: this combined node is %d", node_id)
    config.values["broker.id"] = config.values["node.id"] = node_id


class KafkaRaftServer:
    def __init__(self, config: KafkaConfig, time: Time = SYSTEM_TIME, network: Network = DEFAULT_NETWORK) -> None:
        roles = config.process_roles
        if not roles:
            raise ConfigError("process.roles: empty")
        if "broker" in roles and "controller" in roles:
            resolve_combined_node_id(config)
        self.config = config
        self.time = time
        self.network = network
        self.controller: ControllerServer | None = (ControllerServer(config, time, network)
                                                    if "controller" in roles else None)
        self.broker: KafkaServer | None = None
        self.metrics = ProcessMetrics(config, time)
        if self.controller is not None:
            self.controller.metrics = self.metrics
        self.stopped = self.controller.stopped if self.controller is not None else asyncio.Event()

    @property
    def failure(self) -> BaseException | None:
        return self.controller.failure if self.controller is not None else None

    def controller_servers(self) -> list[tuple[str, int]]:
        """Where this process's broker finds the controllers."""
        configured = self.config.controller_quorum_bootstrap_servers
        if configured or self.controller is None:
            return configured
        out = []
        for ep in self.config.controller_listeners:
            host = ep.host if ep.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
            out.append((host, self.controller.bound_port(ep.listener_name)))
        return out

    async def startup(self) -> None:
        """The metrics endpoint first (/health answers 503 until both roles are up)."""
        await self.metrics.start()
        if self.controller is not None:
            await self.controller.startup()
        if "broker" in self.config.process_roles:
            self.broker = KafkaServer(self.config, self.time, self.network, controller_servers=self.controller_servers(),
                                      metrics=self.metrics)
            await self.broker.startup()
        self.metrics.serving()

    async def shutdown(self) -> None:
        self.metrics.stopping()
        try:
            if self.broker is not None:
                await self.broker.shutdown()
            if self.controller is not None:
                await self.controller.shutdown()
        finally:
            await self.metrics.close()

    def reload_key_stores(self) -> None:
        """SIGHUP (kbroker serve): every TLS listener's key stores read again from their files."""
        if self.broker is not None and self.broker.reconfiguration is not None:
            self.broker.reconfiguration.reload_all()

    def bound_port(self, listener_name: str = "PLAINTEXT") -> int:
        if self.broker is not None and listener_name in self.broker.bound_ports:
            return self.broker.bound_port(listener_name)
        if self.controller is not None:
            return self.controller.bound_port(listener_name)
        raise KeyError(listener_name)
