"""One simulated run: a seed in, a trace hash and the violations found out.

``Simulation(seed, options).run()`` builds the loop, network, disk and cluster, closes
Python's nondeterminism (sim/determinism.py), and drives the scenario the seed picks:
start the cluster, create topics, run the workload while faults come and go, heal, wait
for the cluster to settle (liveness), and check. Everything random comes from PRNGs seeded
from ``seed`` alone, so a run is replayed bit for bit by its seed.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

from protocol.client import KafkaClient
from storage.log import parse_topic_partition

from .bugs import reintroduced
from .checks import Checker
from .cluster import SimCluster, SimNode
from .determinism import freeze_heap, sandbox
from .disk import SimDisk
from .loop import PROCESS, Process, SimLoop, SimTime, SimulationStuck
from .network import SimNetwork
from .trace import Trace
from .workload import History
from .workload_reassign import plan as reassign_plan

log = logging.getLogger("kbroker.sim")


def run_root() -> Path:
    """Where runs keep their machines' files: a tmpfs when there is one."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="kbroker-sim-", dir=base))


@dataclass
class Options:
    brokers: int = 3
    duration_s: float = 20.0  # simulated seconds of workload (faults during the first part)
    faults: bool = True
    verbose: bool = False  # print every trace event as it happens
    bugs: tuple[str, ...] = ()
    fault_kinds: tuple[str, ...] | None = None  # None: the seed picks (sim/faults.py KINDS)
    step_seconds: float | None = None  # simulated CPU time of a callback (None: sim/loop.py's STEP_SECONDS)
    reassign: bool | None = None  # the reassignment workload (None: the seed picks; sim/workload_reassign.py)


@dataclass
class Violation:
    check: str
    detail: str
    time: float


@dataclass
class Result:
    seed: int
    trace_hash: str
    violations: list[Violation] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    sim_seconds: float = 0.0
    steps: int = 0
    events: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    bugs: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations


class Simulation:
    def __init__(self, seed: int, options: Options | None = None, root: Path | None = None) -> None:
        freeze_heap()  # (first: nothing of this simulation is frozen)
        self.seed = seed
        self.options = options or Options()
        self.rng = random.Random(f"sim-{seed}")
        self.loop = SimLoop(random.Random(f"scheduler-{seed}"))
        if self.options.step_seconds is not None:
            self.loop.step_seconds = self.options.step_seconds
        self.trace = Trace(self.loop, verbose=self.options.verbose)
        self.loop.trace = self.trace
        self.time = SimTime(self.loop)
        self.network = SimNetwork(self.loop, self.trace)
        self._own_root = root is None
        self.root = root or run_root()
        self.disk = SimDisk(self.root, random.Random(f"disk-{seed}"), self.loop, self.trace)
        self.reassign = reassign_plan(self)  # (before the cluster: a seed that moves replicas runs more brokers)
        self.cluster = SimCluster(self, self.root, self.reassign.brokers)
        self.violations: list[Violation] = []
        self._clients = 0
        self.actors: list[Any] = []
        self.history = History()
        self.txn_history: Any = None  # sim/workload_txn.py's TxnHistory when the seed runs transactions
        self.checker = Checker(self)
        self.exempt = 0  # findings excused by the durability bound (trace events "...-exempt")
        # Per partition: brokers that lost unsynced records of it in a power loss and have not
        # rejoined its ISR since; when every ISR member is such a broker, the partition is
        # exposed (records acknowledged before may be lost: Kafka does not fsync).
        self.tainted: dict[tuple[str, int], set[int]] = {}
        self.exposures: dict[tuple[str, int], list[float]] = {}
        self._isr: dict[tuple[str, int], frozenset[int]] = {}
        # (partition, broker) -> when the broker last entered the controller's ISR of it
        self.isr_entered: dict[tuple[tuple[str, int], int], float] = {}
        self.topic_ids: dict[tuple[str, int], Any] = {}  # partition -> the controller's topic id of it
        self._broker_epochs: dict[int, int] = {}
        self.answered_broker_epochs: dict[int, int] = {}  # the highest epoch each broker's registration got

    def rng_for(self, name: str) -> random.Random:
        """A PRNG of its own for one consumer of randomness (adding one leaves the others alone)."""
        return random.Random(f"{name}-{self.seed}")

    # -- hooks the nodes call ----------------------------------------------------------------
    def on_server_created(self, node: SimNode, server: Any) -> None:
        pass

    def on_ready(self, node: SimNode) -> None:
        if node.kind == "controller":
            controller = node.server.controller
            if controller is not None:
                self.checker.controller_started(controller.epoch)
        else:
            epoch = node.server.broker_epoch
            last = self._broker_epochs.get(node.node_id)
            if last is not None and epoch <= last:
                self.violation("broker-epoch-monotonic", f"{node.process.key} has broker epoch {epoch}, its previous "
                               f"incarnation had {last}")
            self._broker_epochs[node.node_id] = epoch
            self.answered_broker_epochs[node.node_id] = max(epoch, self.answered_broker_epochs.get(node.node_id, -1))

    def on_start_failed(self, node: SimNode, exc: BaseException) -> None:
        """A start that fails is a violation, unless the machine's disk is failing on purpose
        (ENOSPC, EIO: Kafka's broker stops too when its only log dir fails); it is started
        again when the fault heals."""
        faults = self.disk.faults.get(node.name)
        if faults is not None and faults.any and isinstance(exc, OSError):
            self.trace.event("check", "node-starts-exempt", f"{node.name}: {type(exc).__name__}: {exc} (disk faults on)")
            return
        self.violation("node-starts", f"{node.name} failed to start: {type(exc).__name__}: {exc}")

    def on_crashed(self, node: SimNode, power_loss: bool, lost: list[str]) -> None:
        if node.kind != "broker" or not lost:
            return
        for path in lost:
            parts = path.split("/")
            if len(parts) < 3 or not parts[-1].endswith(".log"):
                continue
            try:
                key = parse_topic_partition(parts[-2])
            except ValueError:
                continue
            self.tainted.setdefault(key, set()).add(node.node_id)
            self._check_exposed(key)

    def on_stopped(self, node: SimNode) -> None:
        pass

    def isr_changed(self, key: tuple[str, int], isr: frozenset[int], topic_id: Any = None,
                    reloaded: bool = False) -> None:
        """The controller's ISR of ``key``: members that joined are whole again. A topic deleted
        and created again under its name (another topic id) starts over: new logs, a new ISR.
        ``reloaded``: the ISR a new controller incarnation loaded from its durable records. A
        member back in it only because the records that had dropped it were lost with the old
        controller's unsynced bytes has not caught up with anything: it stays tainted, and keeps
        the time it last really entered."""
        if topic_id is not None and self.topic_ids.get(key, topic_id) != topic_id:
            self._isr.pop(key, None)
            self.tainted.pop(key, None)
            for r in [r for k, r in self.isr_entered if k == key]:
                del self.isr_entered[(key, r)]
        if topic_id is not None:
            self.topic_ids[key] = topic_id
        previous = self._isr.get(key, frozenset())
        self._isr[key] = isr
        now = self.loop.time()
        if reloaded:
            for r in isr - previous:
                self.isr_entered.setdefault((key, r), now)
        else:
            for r in isr - previous:
                self.isr_entered[(key, r)] = now
            tainted = self.tainted.get(key)
            if tainted:
                tainted -= isr - previous
        self._check_exposed(key)

    def _check_exposed(self, key: tuple[str, int]) -> None:
        isr = self._isr.get(key)
        tainted = self.tainted.get(key)
        if isr and tainted and isr <= tainted:
            times = self.exposures.setdefault(key, [])
            if not times or times[-1] < self.loop.time():
                times.append(self.loop.time())
                self.trace.event("check", "exposed", f"{key[0]}-{key[1]}: every ISR member {sorted(isr)} lost "
                                 f"unsynced records")

    def exposed_since(self, key: tuple[str, int], since: float) -> float | None:
        for t in self.exposures.get(key, ()):
            if t >= since:
                return t
        return None

    def observe(self, topic: str, partition: int, offset: int, value: bytes | None, who: str) -> None:
        """What ``who`` saw at an offset: a second, different value is a violation (unless the
        partition was exposed since the older of the two was written)."""
        key = (topic, partition, offset)
        seen = self.history.seen.get(key)
        if seen is None:
            self.history.seen[key] = (value, who, self.loop.time())
            return
        if seen[0] == value:
            return
        detail = (f"{topic}-{partition}@{offset}: {seen[1]} saw {_show(seen[0])} (t={seen[2]:.6f}), {who} sees "
                  f"{_show(value)}")
        # Excused if the partition was exposed after the older of the two records was written: a
        # consumer may hand out records it fetched before a loss, after it (prefetched).
        exposed = self.exposed_since((topic, partition), self.written_since(seen[2], seen[0], value))
        if exposed is not None:
            self.exempt += 1
            self.trace.event("check", "inconsistent-offset-exempt", f"{detail}; exposed at {exposed:.6f}")
        else:
            self.violation("inconsistent-offset", detail)
        self.history.seen[key] = (value, who, self.loop.time())

    def written_since(self, since: float, *values: bytes | None) -> float:
        """``since``, or the time the earliest of ``values`` was sent if earlier: a producer's
        write when it was sent, a transactional record when its transaction began (it is
        produced after; sim/verify_txn.py's excuses count from there too)."""
        by_value = self.history.by_value
        txns = self.txn_history.by_value if self.txn_history is not None else {}
        for value in values:
            if value is None:
                continue
            write = by_value.get(value)
            txn = txns.get(value) if write is None else None
            sent = write.sent_at if write is not None else txn.started_at if txn is not None else None
            if sent is not None and sent < since:
                since = sent
        return since

    def violation(self, check: str, detail: str) -> None:
        self.violations.append(Violation(check, detail, self.loop.time()))
        self.trace.event("check", "VIOLATION", f"{check}: {detail}")

    # -- clients -----------------------------------------------------------------------------
    def client_process(self, name: str) -> Process:
        self._clients += 1
        return Process(name, f"client-{self._clients}", 1)

    def spawn(self, process: Process, coro: Any) -> asyncio.Task:
        return self.loop.create_task(coro, context=process.context())

    async def with_client(self, name: str, fn: Callable[[KafkaClient], Awaitable[T]]) -> T:
        """``fn(client)`` in a client process of its own named ``name``, on a KafkaClient of the
        cluster (client id ``name``, 10 s requests) closed after; its errors are raised here."""
        process = self.client_process(name)

        async def run() -> T:
            client = KafkaClient(self.cluster.bootstrap, client_id=name, time=self.time, request_timeout_ms=10000)
            try:
                return await fn(client)
            finally:
                await client.close()
        return await self.spawn(process, run())

    def leader_partition(self, key: tuple[str, int]) -> Any:
        """The Partition of ``key`` on its leader as the controller has it, with its log; None
        when there is no controller, no such partition, no leader, or the leader is not ready or
        holds no log of it."""
        server = self.cluster.controller.server
        controller = server.controller if server is not None else None
        info = controller.replication.topic(key[0]) if controller is not None else None
        part = info.parts.get(key[1]) if info is not None else None
        node = self.cluster.brokers.get(part.leader) if part is not None else None
        p = node.server.replica_manager.partitions.get(key) if node is not None and node.ready else None
        return p if p is not None and p.log is not None else None

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, predicate: Any, timeout_s: float, poll_s: float = 0.05) -> bool:
        deadline = self.loop.time() + timeout_s
        while not predicate():
            if self.loop.time() >= deadline:
                return False
            await asyncio.sleep(poll_s)
        return True

    # -- running -------------------------------------------------------------------------------
    def run(self) -> Result:
        root_logger = logging.getLogger()
        saved_logging = (root_logger.handlers[:], root_logger.level)
        handler = _TraceLogHandler(self.trace, str(self.root))
        root_logger.handlers = [handler]
        root_logger.setLevel(logging.INFO)
        try:
            with sandbox(self.seed, self.loop), reintroduced(*self.options.bugs):
                self.disk.install()
                self.checker.install()
                self.loop.after_step = self.checker.after_step
                try:
                    self.loop.run_until_complete(self._main())
                except SimulationStuck as exc:
                    self.violation("liveness", str(exc))
                finally:
                    self.loop.after_step = None
                    self.checker.uninstall()
                    result = self._result()  # (what the run saw: nothing of its finalization below)
                    try:
                        self._finalize()
                    finally:
                        self.disk.uninstall()
                        self.disk.close_all()
        finally:
            root_logger.handlers, level = saved_logging
            root_logger.setLevel(level)
            self._teardown()
        return result

    def _result(self) -> Result:
        stats = {"writes": len(self.history.writes), "acked": sum(1 for w in self.history.writes if w.status == "ok"),
                 "polls": self.history.polls, "exempt": self.exempt, "checks": self.checker.checks,
                 "disk_writes": self.disk.writes, "messages": self.network.delivered}
        if self.reassign.enabled:
            stats["reassign"] = dict(self.reassign.stats)
        return Result(self.seed, self.trace.hexdigest(), list(self.violations), self.trace.last(200),
                      self.loop.time(), self.loop.steps, self.trace.events, stats, tuple(self.options.bugs))

    def _finalize(self) -> None:
        """Drop everything the run made, its coroutines finalized here: with the loop still open,
        every process dead (what they schedule on the way out never runs), every descriptor
        closed and the simulated disk still installed, so that their clean-up code (``finally``
        blocks: a controller killed during its start closes its metadata log there) is refused
        every descriptor (EBADF) instead of reaching a number that is another file's by now."""
        loop = self.loop
        for node in self.cluster.nodes:
            if node.process is not None:
                loop.kill(node.process)
            node.server = node._task = None
        self.checker.shadow = self.checker.shadow_owner = None
        self.network.connections.clear()
        self.network.listeners.clear()
        for actor in self.actors:
            loop.kill(actor.process)
        self.actors = []
        # Every machine's descriptors closed and the disk sealed FIRST: the killed processes'
        # tasks, held only by the loop's queues and graveyard, are finalized when discard_all
        # drops them, and their clean-up must find nothing open (a reused descriptor number
        # would be a live incarnation's file).
        self.disk.close_all()
        loop.discard_all()  # (the killed processes' tasks with it)
        import broker.heap as heap
        heap._holds = 0  # (its gc.freeze calls did nothing: sim/determinism.py)
        unraisable = sys.unraisablehook
        sys.unraisablehook = lambda _info: None
        try:
            gc.collect()
        finally:
            sys.unraisablehook = unraisable

    def _teardown(self) -> None:
        loop = self.loop
        try:
            loop.close()
        except Exception:  # noqa: BLE001
            pass
        asyncio.set_event_loop(None)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    async def _main(self) -> None:
        from .scenario import Scenario
        await Scenario(self).run()


T = TypeVar("T")


def _show(value: bytes | None) -> str:
    return "null" if value is None else repr(value.decode(errors="replace"))


class _TraceLogHandler(logging.Handler):
    """Log records of the run go to the trace's tail (not its hash), tagged with the process; the
    run's directory is written $ROOT in them."""

    def __init__(self, trace: Trace, root: str) -> None:
        super().__init__(logging.INFO)
        self.trace = trace
        self.root = root  # (shown as $ROOT: the run's temporary directory differs from run to run)

    def emit(self, record: logging.LogRecord) -> None:
        process = PROCESS.get()
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001
            message = str(record.msg)
        if self.root in message:
            message = message.replace(self.root, "$ROOT")
        self.trace.note(process.key if process is not None else "sim", f"{record.levelname} {record.name}: {message}")


def run_seed(seed: int, options: Options | None = None) -> Result:
    return Simulation(seed, options).run()


__all__ = ["Options", "Result", "Simulation", "Violation", "run_seed", "PROCESS"]
