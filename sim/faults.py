"""Faults: what the seed does to the cluster while the workload runs, and how it heals.

``FaultInjector.run(until)`` draws faults at random times (the seed picks which kinds are
on and how often), each undone after a random while:

* ``kill`` / ``power``: a broker or the controller crashes (kill -9: the page cache stays;
  power loss: unsynced bytes go, a torn last write may stay), and restarts later;
* ``rack``: a rack loses power: the controller and a broker crash together, unsynced
  bytes lost, and come back one after the other, in either order;
* ``restart``: a clean shutdown (a broker's controlled shutdown) and start;
* ``partition``: two machines stop hearing each other (or one stops hearing the other);
* ``slow-link``: a link adds tens to hundreds of milliseconds;
* ``pause``: a process stalls (a long GC pause), then catches up;
* ``slow-disk``: a node's background disk work (fsync, flush plans, the cleaner) is slow;
* ``disk-full`` / ``disk-errors``: writes fail with ENOSPC, or writes and fsyncs with EIO now and then;
* ``reset``: a connection is reset;
* ``lost-epochs`` (``EXTRA_KINDS``: drawn apart, from a PRNG of its own, so the seeds without
  it run as before it existed): a broker leading partitions is cut off from the controller
  and the other brokers (clients still reach it: its logs take records the new leaders do not
  get), shut down cleanly while cut off, and its leader-epoch-checkpoint files are lost
  while it is down (a damaged disk): it starts again with records above its high watermark
  and no leader epochs (no recovery runs after a clean shutdown to rebuild them), which it
  must truncate to the high watermark before it follows (Kafka's truncateToHighWatermark).
  A seed drawing it draws no power losses (sim/scenario.py says why).

``heal()`` ends every fault at once: machines back on, crashed nodes restarted, links
healed, disks healthy.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from .disk import DiskFaults

log = logging.getLogger("kbroker.sim")

KINDS = ("kill", "power", "restart", "partition", "slow-link", "pause", "slow-disk", "disk-full", "disk-errors", "reset",
         "rack")
POWER_KINDS = ("power", "rack")  # the faults that lose unsynced bytes
EXTRA_KINDS = ("lost-epochs",)
ALL_KINDS = KINDS + EXTRA_KINDS
LOST_EPOCHS_PROBABILITY = 0.3  # a seed with lost-epochs faults (when the seed picks the kinds)


class FaultInjector:
    def __init__(self, sim: Any, kinds: tuple[str, ...], mean_interval_s: float) -> None:
        self.sim = sim
        self.kinds = tuple(k for k in kinds if k not in EXTRA_KINDS) or ()
        self.extra = tuple(k for k in kinds if k in EXTRA_KINDS)
        self.extra_rng = sim.rng_for("lost-epochs")
        self.mean_interval_s = mean_interval_s
        self.rng = sim.rng_for("faults")
        self.active: list[asyncio.Task] = []
        self.applied: list[str] = []
        self.down: set[str] = set()  # nodes crashed and not yet restarted (by a fault's own undo)
        self._healing = asyncio.Event()

    async def _sleep(self, seconds: float) -> None:
        """A fault's while: ends early when everything heals."""
        try:
            await asyncio.wait_for(self._healing.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def run(self, until: float) -> None:
        loop = self.sim.loop
        if "lost-epochs" in self.extra:
            self.active.append(loop.create_task(self._lost_epochs_loop(until)))
        while self.kinds:
            wait = self.rng.expovariate(1.0 / self.mean_interval_s)
            if loop.time() + wait >= until:
                break
            await asyncio.sleep(wait)
            if self._healing.is_set():
                break
            kind = self.rng.choice(self.kinds)
            duration = self.rng.uniform(0.5, 8.0)
            task = loop.create_task(self._fault(kind, duration))
            self.active.append(task)
        await asyncio.sleep(max(0.0, until - loop.time()))

    def _event(self, kind: str, detail: str) -> None:
        self.applied.append(kind)
        self.sim.trace.event("fault", kind, detail)

    def _machines(self) -> list[str]:
        names = [n.name for n in self.sim.cluster.nodes]
        return names + [a.process.machine for a in self.sim.actors]

    async def _fault(self, kind: str, duration: float) -> None:
        sim, rng = self.sim, self.rng
        cluster = sim.cluster
        if kind in ("kill", "power", "restart", "pause", "slow-disk", "disk-full", "disk-errors"):
            candidates = [n for n in cluster.nodes if n.alive and n.name not in self.down]
            if kind in ("disk-full", "disk-errors", "slow-disk"):
                candidates = [n for n in candidates if n.kind == "broker" or kind == "slow-disk"]
            if not candidates:
                return
            node = rng.choice(candidates)
            if kind in ("kill", "power"):
                self._event(kind, f"{node.name} for {duration:.3f}s")
                self.down.add(node.name)
                node.crash(power_loss=kind == "power")
                await self._sleep(duration)
                node.power_on()
                if not node.alive:
                    node.start()
                self.down.discard(node.name)
            elif kind == "restart":
                self._event(kind, node.name)
                self.down.add(node.name)
                await asyncio.shield(node.stop())
                await self._sleep(rng.uniform(0.1, 1.0))
                if not node.alive:
                    node.start()
                self.down.discard(node.name)
            elif kind == "pause":
                self._event(kind, f"{node.name} for {duration:.3f}s")
                if node.process is not None:
                    sim.loop.pause(node.process, sim.loop.time() + duration)
            elif kind == "slow-disk":
                self._event(kind, f"{node.name} for {duration:.3f}s")
                process = node.process
                if process is not None:
                    process.executor_delay_ms = rng.uniform(200.0, 3000.0)
                    await self._sleep(duration)
                    process.executor_delay_ms = 0.0
            else:
                faults = DiskFaults(enospc=kind == "disk-full", eio=0.0 if kind == "disk-full" else rng.uniform(0.01, 0.2))
                self._event(kind, f"{node.name} for {duration:.3f}s")
                sim.disk.faults[node.name] = faults
                await self._sleep(duration)
                if sim.disk.faults.get(node.name) is faults:
                    del sim.disk.faults[node.name]
        elif kind == "rack":
            nodes = [n for n in cluster.nodes if n.alive and n.name not in self.down]
            controller = cluster.controller
            brokers = [n for n in nodes if n.kind == "broker"]
            if controller not in nodes or not brokers:
                return
            broker = rng.choice(brokers)
            back = {controller.name: rng.uniform(0.2, duration), broker.name: rng.uniform(0.2, duration)}
            self._event(kind, f"{controller.name} for {back[controller.name]:.3f}s and {broker.name} for "
                        f"{back[broker.name]:.3f}s")
            pair = sorted((controller, broker), key=lambda n: (back[n.name], n.name))
            for node in pair:
                self.down.add(node.name)
                node.crash(power_loss=True)
            elapsed = 0.0
            for node in pair:
                await self._sleep(back[node.name] - elapsed)
                elapsed = back[node.name]
                node.power_on()
                if not node.alive:
                    node.start()
                self.down.discard(node.name)
        elif kind in ("partition", "slow-link"):
            machines = self._machines()
            a, b = rng.sample(machines, 2)
            if kind == "partition":
                one_way = rng.random() < 0.3
                self._event(kind, f"{a} {'->' if one_way else '<->'} {b} for {duration:.3f}s")
                sim.network.partition(a, b, one_way=one_way)
                await self._sleep(duration)
                sim.network.heal(a, b)
            else:
                extra = rng.uniform(20.0, 400.0)
                self._event(kind, f"{a} -> {b} +{extra:.1f}ms for {duration:.3f}s")
                sim.network.set_slow(a, b, extra)
                await self._sleep(duration)
                sim.network.set_slow(a, b, 0)
        elif kind == "reset":
            conns = sorted(sim.network.connections)
            if conns:
                conn = rng.choice(conns)
                self._event(kind, f"conn {conn}")
                sim.network.reset(conn)

    async def _lost_epochs_loop(self, until: float) -> None:
        loop, rng = self.sim.loop, self.extra_rng
        wait = rng.uniform(0.5, 2.0)  # (early: the whole fault takes ~8-12 s)
        while True:
            if loop.time() + wait >= until or self._healing.is_set():
                return
            await self._sleep(wait)
            if self._healing.is_set():
                return
            await self._lost_epochs(rng)
            wait = rng.uniform(1.0, 8.0)

    async def _lost_epochs(self, rng: Any) -> None:
        sim = self.sim
        cluster = sim.cluster
        leaders = []
        for node in cluster.brokers.values():
            if not node.alive or node.name in self.down or node.server is None:
                continue
            rm = node.server.replica_manager
            if rm is not None and any(p.is_leader for p in rm.partitions.values()):
                leaders.append(node)
        if not leaders:
            return
        node = rng.choice(leaders)
        controller = cluster.controller.name
        brokers = [n.name for n in cluster.brokers.values() if n is not node]
        cut_off = rng.uniform(6.5, 8.0)  # past broker.session.timeout.ms: fenced, its partitions get new leaders
        down = rng.uniform(1.0, 4.0)  # the new leaders take records meanwhile
        self._event("lost-epochs", f"{node.name}: cut off from {controller} {' '.join(brokers)} for {cut_off:.3f}s, "
                    f"then shut down cleanly and down for {down:.3f}s, its leader-epoch-checkpoint files lost")
        self.down.add(node.name)
        for other in (controller, *brokers):
            sim.network.partition(node.name, other)
        await self._sleep(cut_off)
        # Back in touch with the controller (a quick controlled shutdown), still not with the
        # other brokers (so it cannot ask them where its log diverges before it stops).
        sim.network.heal(node.name, controller)
        await asyncio.shield(node.stop())
        removed = 0
        for path in sorted(Path(str(node.props["log.dirs"])).glob("*/leader-epoch-checkpoint")):
            sim.disk.unlink(str(path))
            removed += 1
        self._event("lost-epochs", f"{node.name}: {removed} leader-epoch-checkpoint files removed")
        await self._sleep(down)
        for other in brokers:
            sim.network.heal(node.name, other)
        if not node.alive:
            node.start()
        self.down.discard(node.name)

    async def heal(self) -> None:
        """End every fault now: each fault's while ends, and its undo runs; then whatever is
        still down is powered on and started, links healed, disks healthy."""
        sim = self.sim
        self._healing.set()
        for task in self.active:
            try:
                await task
            except Exception as exc:  # noqa: BLE001
                sim.trace.event("fault", "undo-failed", f"{type(exc).__name__}: {exc}")
        self.active.clear()
        sim.network.heal()
        sim.network.slow.clear()
        sim.disk.faults.clear()
        for node in sim.cluster.nodes:
            node.power_on()
            if node.process is not None:
                node.process.paused_until = 0.0
                node.process.executor_delay_ms = 0.0
        for node in sim.cluster.nodes:
            if not node.alive:
                node.start()
        self.down.clear()
        sim.trace.event("fault", "healed", "")
