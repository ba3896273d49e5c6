"""The simulated cluster: one controller and N brokers, the real server classes, one loop.

Each node is a machine (its name is its host name on the simulated network and the name of
its directory under the run's root) running one process at a time: ``start`` makes a new
``Process`` incarnation and runs the production ``ControllerServer`` / ``KafkaServer``
startup as that process; ``crash`` kills it (nothing of it runs again; the disk keeps what
a kill -9 or, with ``power_loss``, a power cut keeps); ``stop`` shuts it down cleanly.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from broker.config import KafkaConfig
from broker.server import KafkaServer
from controller.server import ControllerServer

from .loop import Process

log = logging.getLogger("kbroker.sim")

CONTROLLER_ID = 3000
CONTROLLER_PORT = 9093
BROKER_PORT = 9092

# What every simulated broker runs with (beyond its ids, listeners and directories): small
# segments and indexes (rolls and retention happen within a run), metrics off (no scrape
# machinery), a fixed descriptor budget (the machine's limits must not matter).
BROKER_DEFAULTS: dict[str, Any] = {
    "metrics.enabled": "false",
    "log.segment.bytes": 64 * 1024,
    "log.index.size.max.bytes": 64 * 1024,
    "log.open.files.max": 256,
    "kbroker.log.writeback.bytes": 0,  # (a thread of its own: the simulator runs none; its disk is simulated)
    "log.retention.check.interval.ms": 2000,
    "log.segment.delete.delay.ms": 1000,
    "replica.lag.time.max.ms": 10000,
    "replica.fetch.wait.max.ms": 500,
    "replica.socket.timeout.ms": 5000,
    "controller.socket.timeout.ms": 5000,
    "broker.heartbeat.interval.ms": 1000,
    "broker.session.timeout.ms": 6000,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
    "group.initial.rebalance.delay.ms": 0,
    "auto.create.topics.enable": "false",
    "kbroker.shutdown.timeout.ms": 5000,
}
CONTROLLER_DEFAULTS: dict[str, Any] = {
    "metrics.enabled": "false",
    "broker.session.timeout.ms": 6000,
    "controller.socket.timeout.ms": 5000,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "auto.leader.rebalance.enable": "false",
    "partition.autobalancing.mode": "off",  # no moves the scenario did not ask for (as no leader rebalance)
    "kbroker.shutdown.timeout.ms": 5000,
}


class SimNode:
    def __init__(self, sim: Any, name: str, kind: str, node_id: int, props: dict[str, Any]) -> None:
        self.sim = sim
        self.name = name
        self.kind = kind
        self.node_id = node_id
        self.props = props
        self.incarnations = 0
        self.process: Process | None = None
        self.server: Any = None  # KafkaServer or ControllerServer of the current incarnation
        self.ready = False
        self.started_at = 0.0  # loop time of the current incarnation's start
        self.start_failure: BaseException | None = None
        self._task: asyncio.Task | None = None
        self._stopping: Process | None = None  # the incarnation a clean shutdown was asked of

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    def start(self) -> None:
        """A new incarnation, starting now (startup runs as its process)."""
        assert not self.alive, f"{self.name} is running"
        self.incarnations += 1
        process = Process(self.name, self.name, self.incarnations)
        self.process = process
        self.server = None
        self.ready = False
        self.start_failure = None
        self.started_at = self.sim.loop.time()
        self.sim.trace.event(process.key, "start", self.kind)
        self._task = self.sim.loop.create_task(self._startup(process), context=process.context())

    async def _startup(self, process: Process) -> None:
        config = KafkaConfig(self.props)
        if self.kind == "controller":
            server: Any = ControllerServer(config, time=self.sim.time)
        else:
            server = KafkaServer(config, time=self.sim.time)
        self.server = server
        self.sim.on_server_created(self, server)
        try:
            await server.startup()
        except Exception as exc:  # noqa: BLE001 - reported by the checks: a node that cannot start
            if self._stopping is process:
                # Shut down while starting (a restart fault): the startup fails on what the
                # shutdown closed (the controller's metadata store, a broker's logs); the
                # process was ending anyway, as a Kafka server's startup throws when shut down.
                self.sim.trace.event(process.key, "start-stopped", f"{type(exc).__name__}: {exc}")
                return
            self.start_failure = exc
            self.sim.trace.event(process.key, "start-failed", f"{type(exc).__name__}: {exc}")
            log.warning("%s failed to start: %r", process.key, exc)
            self.sim.on_start_failed(self, exc)
            if process.alive and self.process is process:
                self.exit()  # (the process exits; a restart, or the heal, starts another)
            return
        if process.alive:
            self.ready = True
            self.sim.trace.event(process.key, "ready", self._describe())
            self.sim.on_ready(self)

    def _describe(self) -> str:
        if self.kind == "controller" and self.server.controller is not None:
            return f"controller epoch {self.server.controller.epoch}"
        if self.kind == "broker":
            return f"broker epoch {self.server.broker_epoch}"
        return ""

    def crash(self, power_loss: bool) -> list[str]:
        """Kill the process (and cut the machine's power): returns the files that lost bytes."""
        process = self.process
        assert process is not None
        self.sim.trace.event(process.key, "crash", "power loss" if power_loss else "kill -9")
        self.sim.loop.kill(process)
        self.sim.network.process_died(process, power_loss)
        if power_loss:
            self.sim.network.down.add(self.name)
        lost = self.sim.disk.crash(self.name, power_loss)
        self.sim.on_crashed(self, power_loss, lost)
        self.process = None
        self.server = None
        self.ready = False
        self._task = None
        return lost

    def exit(self) -> None:
        """The process exits on its own (a failed start): nothing of it runs again; the page
        cache keeps what it wrote."""
        process = self.process
        assert process is not None
        self.sim.trace.event(process.key, "exit", "")
        self.sim.loop.kill(process)
        self.sim.network.process_died(process, False)
        self.sim.disk.crash(self.name, False)  # (closes what it left open)
        self.process = None
        self.server = None
        self.ready = False
        self._task = None

    def power_on(self) -> None:
        self.sim.network.down.discard(self.name)

    async def stop(self) -> None:
        """A clean shutdown (a broker's controlled shutdown included), then the process ends."""
        process = self.process
        if process is None or not process.alive:
            return
        self.sim.trace.event(process.key, "stop", "")
        self._stopping = process
        server = self.server
        if server is not None:
            task = self.sim.loop.create_task(server.shutdown(), context=process.context())
            try:
                await task
            except Exception as exc:  # noqa: BLE001
                self.sim.trace.event(process.key, "stop-failed", f"{type(exc).__name__}: {exc}")
        self.sim.loop.kill(process)
        self.sim.network.process_died(process, False)
        self.sim.disk.crash(self.name, False)  # (closes what the shutdown left open)
        self.sim.on_stopped(self)
        self.process = None
        self.server = None
        self.ready = False


class SimCluster:
    def __init__(self, sim: Any, root: Path, brokers: int = 3) -> None:
        self.sim = sim
        self.root = root
        controller_dir = root / "controller"
        self.controller = SimNode(sim, "controller", "controller", CONTROLLER_ID, {
            **CONTROLLER_DEFAULTS, "process.roles": "controller", "node.id": CONTROLLER_ID,
            "listeners": f"CONTROLLER://controller:{CONTROLLER_PORT}", "controller.listener.names": "CONTROLLER",
            "metadata.log.dir": str(controller_dir / "metadata"), "log.dirs": str(controller_dir / "metadata")})
        self.brokers: dict[int, SimNode] = {}
        for i in range(1, brokers + 1):
            name = f"broker-{i}"
            self.brokers[i] = SimNode(sim, name, "broker", i, {
                **BROKER_DEFAULTS, "process.roles": "broker", "node.id": i,
                "listeners": f"PLAINTEXT://{name}:{BROKER_PORT}",
                "controller.quorum.bootstrap.servers": f"controller:{CONTROLLER_PORT}",
                "controller.listener.names": "CONTROLLER", "log.dirs": str(root / name / "data")})

    @property
    def nodes(self) -> list[SimNode]:
        return [self.controller, *self.brokers.values()]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{n.name}:{BROKER_PORT}" for n in self.brokers.values())

    def node(self, name: str) -> SimNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)
