"""The scenario every seed runs, with the choices the seed makes.

1. Start the controller and the brokers; wait until every broker is live.
2. Create the workload's topics (1-3 topics of 1-3 partitions, replication factor 3,
   min.insync.replicas 2; one of them, maybe, with small retention.bytes so that segments
   are deleted and log start offsets move during the run).
3. Start the clients (producers, an observer, a consumer group, an admin) and the faults;
   run for ``duration_s`` simulated seconds, faults during the first two thirds.
4. Heal every fault, stop the producers and the admin, and wait (bounded) for the cluster
   to settle: the liveness checks.
5. Stop the consumers once they have read everything; the final checks (sim/verify.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from protocol.client import KafkaClient
from protocol.errors import KafkaError

from .faults import KINDS, LOST_EPOCHS_PROBABILITY, POWER_KINDS, FaultInjector
from .verify import LIVENESS_S, final_checks, liveness_problems
from .verify_txn import final_txn_checks, lso_problems
from .workload import AdminActor, GroupActor, ObserverActor, ProducerActor
from .workload_reassign import ReassignActor
from .workload_txn import TxnWorkload

START_TIMEOUT_S = 60.0


class Scenario:
    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.rng = sim.rng_for("scenario")
        self.topics: dict[str, int] = {}

    async def run(self) -> None:
        sim, rng = self.sim, self.rng
        cluster = sim.cluster
        cluster.controller.start()
        for node in cluster.brokers.values():
            node.start()
        if not await sim.wait_for(lambda: all(n.ready for n in cluster.nodes), START_TIMEOUT_S):
            sim.violation("liveness", "the cluster did not start: " + ", ".join(
                n.name for n in cluster.nodes if not n.ready))
            return
        sim.trace.event("sim", "cluster-ready", "")
        for i in range(rng.randint(1, 3)):
            self.topics[f"t{i}"] = rng.randint(1, 3)
        retention_topic = rng.choice(sorted(self.topics)) if rng.random() < 0.5 else None
        if not await self._create_topics(retention_topic):
            return
        topics = sorted(self.topics)
        txn = TxnWorkload.maybe(sim)  # (sim/workload_txn.py: transactions, on half the seeds)
        if txn is not None and not await txn.create_topics():
            return
        txn_topics = txn.history.topics if txn is not None else {}
        sim.txn_history = txn.history if txn is not None else None
        actors = []
        for i in range(rng.randint(1, 2)):
            actors.append(ProducerActor(sim, f"idempotent-{i}", topics, True, (20.0, 150.0)))
        if rng.random() < 0.7:
            actors.append(ProducerActor(sim, "acks1", topics, False, (30.0, 200.0)))
        observer = ObserverActor(sim, "observer", dict(self.topics))
        actors.append(observer)
        members = [GroupActor(sim, f"member-{i}", "group", dict(self.topics)) for i in range(rng.randint(0, 2))]
        actors += members
        admin = AdminActor(sim, "admin", dict(self.topics)) if rng.random() < 0.7 else None
        if admin is not None:
            actors.append(admin)
        reassign = ReassignActor(sim, "reassign", dict(self.topics)) if sim.reassign.enabled else None
        if reassign is not None:
            actors.append(reassign)
        if txn is not None:
            actors += txn.actors
        sim.actors = actors
        for actor in actors:
            actor.start()
        duration = sim.options.duration_s
        faults = None
        if sim.options.faults:
            kinds = tuple(k for k in KINDS if rng.random() < 0.6) or (rng.choice(KINDS),)
            if sim.rng_for("extra-kinds").random() < LOST_EPOCHS_PROBABILITY:
                # (a PRNG of its own: the other seeds' draws stay as they were.) Without power
                # losses: a broker without leader epochs cannot tell where its log diverges below
                # its high watermark, which records lost by every ISR member in a power loss
                # (Kafka's durability bound) make possible; Kafka's follower fails such a
                # partition too (an append below its log end). Seed 119 had both and stalled.
                kinds = tuple(k for k in kinds if k not in POWER_KINDS) + ("lost-epochs",)
            if sim.options.fault_kinds is not None:
                kinds = sim.options.fault_kinds
            sim.trace.event("sim", "faults", " ".join(kinds))
            faults = FaultInjector(sim, kinds, rng.uniform(1.0, 5.0))
            await faults.run(sim.loop.time() + duration * 2 / 3)
            await faults.heal()
            await asyncio.sleep(duration / 3)
        else:
            await asyncio.sleep(duration)
        # Quiesce: the producers and the admin stop; then the cluster must settle.
        producers = [a for a in actors if isinstance(a, (ProducerActor, AdminActor, ReassignActor))] + (
            txn.producers if txn else [])
        await asyncio.gather(*(a.stop() for a in producers))
        sim.trace.event("sim", "producers-stopped", "")
        deleted = admin.deleted if admin is not None else []
        problems: list[str] = []

        def settled() -> bool:
            problems[:] = liveness_problems(sim, {**self.topics, **txn_topics}, deleted)
            if not problems and txn_topics:
                problems[:] = lso_problems(sim, txn.history)
            if not problems and reassign is not None:
                problems[:] = reassign.liveness_problems()
            return not problems
        if not await sim.wait_for(settled, LIVENESS_S, poll_s=0.25):
            sim.violation("liveness", f"not settled {LIVENESS_S:.0f}s after the faults healed: " + "; ".join(problems[:5]))
            await asyncio.gather(*(a.stop(5.0) for a in actors))
            return
        sim.trace.event("sim", "settled", "")
        # The consumers read up to the end, then stop.
        await sim.wait_for(lambda: self._consumed_everything(observer) and (txn is None or txn.read_everything()),
                           30.0, poll_s=0.25)
        await asyncio.gather(*(a.stop(10.0) for a in actors if a not in producers))
        await final_checks(sim, {**self.topics, **txn_topics})
        if txn is not None:
            await final_txn_checks(sim, txn.history)
        if reassign is not None:
            await reassign.final_checks()

    async def _create_topics(self, retention_topic: str | None) -> bool:
        sim = self.sim

        async def create(client: KafkaClient) -> None:
            for name, partitions in sorted(self.topics.items()):
                configs = {"min.insync.replicas": "2"}
                if name == retention_topic:
                    configs.update({"retention.bytes": "1000", "segment.bytes": "1024"})
                await client.create_topics([(name, partitions, 3, configs)], timeout_ms=10000)

        try:
            await sim.with_client("creator", create)
        except KafkaError as exc:
            sim.violation("liveness", f"topic creation failed: {type(exc).__name__}: {exc}")
            return False
        sim.trace.event("sim", "topics", " ".join(f"{t}x{n}" for t, n in sorted(self.topics.items()))
                        + (f" (retention: {retention_topic})" if retention_topic else ""))
        return True

    def _consumed_everything(self, observer: ObserverActor) -> bool:
        for topic, count in self.topics.items():
            for pid in range(count):
                p = self.sim.leader_partition((topic, pid))
                if p is None:
                    return False
                hw = p.log.high_watermark
                if hw > p.log.log_start_offset and observer.positions.get((topic, pid), -1) < hw - 1:
                    return False
        return True
