"""The reassignment workload (issue 27's KIP-455 moves, under issue 28's simulator).

A seed picks it with its own PRNG (``sim.rng_for("reassign")``, so that the other seeds' draws
stay as they were), with probability ``PROBABILITY``; a seed that picks it runs ``BROKERS``
brokers (with 3 and replication factor 3 there is nowhere to move a replica to).

``ReassignActor`` is an admin client that, at times the same PRNG picks, sends:

* AlterPartitionReassignments moving a partition of the workload's topics to another replica
  set (3 of the brokers, in a random order: the first is the new preferred leader);
* the same followed at once by its cancellation (replicas=None), so that the cancel finds the
  move in flight;
* a cancellation of an earlier move (often completed by then: the controller answers
  NO_REASSIGNMENT_IN_PROGRESS);
* replication throttles as ``kbroker cluster reassign --throttle`` sets them (KIP-73): the
  rates on every broker and the throttled replicas of the moving partitions, or clears them.

Each request is sent once (no retries): the controller's answer says what happened, so the
actor knows where each partition must end up (``expected``): a move answered NONE ends at its
target; a cancel answered NONE at the replicas the move started from (those listed before it,
without the adding ones); a cancel answered NO_REASSIGNMENT_IN_PROGRESS of a move listed in
flight just before, at that move's target (it completed in between). A move without an answer
(a timeout, a lost connection) may or may not have been applied, perhaps after later answers:
its target is accepted as an end from then on; a cancel without an answer leaves the end open.

Checks (``liveness_problems`` while the cluster settles, ``final_checks`` once it has): no
reassignment in progress (the controller's state, and ListPartitionReassignments empty), each
touched partition's replicas equal to where it must end up, ISR ⊆ replicas, the leader in the
ISR, and the replicas that left a partition deleted from their brokers. The lost-write and
inconsistent-offset checks of sim/verify.py read every partition from its replicas as the
controller has them at the end, so a moved partition is read from its new replicas.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from protocol.api_keys import ApiKey
from protocol.client import KafkaClient
from protocol.errors import ErrorCode, KafkaError

from .workload import Actor

PROBABILITY = 0.5
BROKERS = 4
REPLICATION_FACTOR = 3
TOPIC, BROKER = 2, 4  # (config resource types)
SET, DELETE = 0, 1
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICAS_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
THROTTLE_RATES = (20_000, 100_000, 1_000_000)  # bytes/s

Key = tuple[str, int]
Replicas = tuple[int, ...]

# Test-only switch (tests/sim/test_reassign.py): the actor records a wrong end for each move it
# submits, so that the end-of-run check must report it.
WRONG_EXPECTATION = False


@dataclass
class ReassignPlan:
    enabled: bool
    brokers: int
    rng: random.Random
    stats: dict[str, int] = field(default_factory=dict)  # what the actor did (Result.stats["reassign"])


def plan(sim: Any) -> ReassignPlan:
    """Whether the seed runs the reassignment workload, and on how many brokers."""
    rng = sim.rng_for("reassign")
    draw = rng.random() < PROBABILITY
    forced = getattr(sim.options, "reassign", None)
    enabled = draw if forced is None else forced
    brokers = max(sim.options.brokers, BROKERS) if enabled else sim.options.brokers
    return ReassignPlan(enabled, brokers, rng)


def _show(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


class ReassignActor(Actor):
    def __init__(self, sim: Any, name: str, topics: dict[str, int]) -> None:
        super().__init__(sim, name)
        self.topics = topics
        self.rng = sim.reassign.rng
        # partition -> the replica sets it may end with (the controller's answers say which)
        self.expected: dict[Key, set[Replicas]] = {}
        self.in_flight: dict[Key, tuple[Replicas, Replicas]] = {}  # listed moving: (original, target)
        self.late: dict[Key, set[Replicas]] = {}  # targets of moves never answered: possible ends from then on
        self.unconstrained: set[Key] = set()  # a cancel never answered (or a move whose start is unknown)
        self.throttled_topics: set[str] = set()
        self.stats = sim.reassign.stats
        self.stats.update({"moves": 0, "moves-accepted": 0, "cancels": 0, "reverted": 0, "completed-before-cancel": 0,
                           "seen-done": 0, "throttles": 0, "ambiguous": 0, "verified": 0})

    # -- requests, each sent once ---------------------------------------------------------

    async def _alter(self, moves: dict[Key, Replicas | None]) -> dict[Key, int] | None:
        """Per partition the controller's error code; None: no answer (applied or not)."""
        assert self.client is not None
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), replicas in sorted(moves.items()):
            by_topic.setdefault(topic, []).append({"partition_index": partition,
                                                   "replicas": None if replicas is None else list(replicas)})
        body = {"timeout_ms": 10000, "allow_replication_factor_change": True,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        try:
            conn = await self.client._controller_connection()
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            self.sim.trace.event(self.process.key, "reassign-unsent", f"{type(exc).__name__}")
            return {k: -1 for k in moves}  # (nothing sent: nothing applied)
        try:
            response = await asyncio.wait_for(conn.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, body), 15.0)
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            self.sim.trace.event(self.process.key, "reassign-unanswered", f"{type(exc).__name__}")
            return None
        if response.error_code == ErrorCode.NOT_CONTROLLER:
            return {k: int(response.error_code) for k in moves}  # (refused: nothing applied)
        if response.error_code:
            return None  # (REQUEST_TIMED_OUT: the records may have been written)
        return {(t.name, p.partition_index): int(p.error_code) for t in response.responses for p in t.partitions}

    async def _list(self) -> dict[Key, tuple[Replicas, Replicas]] | None:
        """The moves in flight: (original, target) each; None: no answer."""
        assert self.client is not None
        try:
            ongoing = await asyncio.wait_for(self.client.list_partition_reassignments(timeout_ms=10000), 15.0)
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            self.sim.trace.event(self.process.key, "reassign-list-failed", f"{type(exc).__name__}")
            return None
        out = {}
        for tp, m in ongoing.items():
            original = tuple(r for r in m.replicas if r not in m.adding)
            target = tuple(r for r in m.replicas if r not in m.removing)
            out[(tp.topic, tp.partition)] = (original, target)
        return out

    # -- the actions -----------------------------------------------------------------------

    def _pick(self) -> Key:
        topic = self.rng.choice(sorted(self.topics))
        return (topic, self.rng.randrange(self.topics[topic]))

    def _target(self) -> Replicas:
        return tuple(self.rng.sample(sorted(self.sim.cluster.brokers), REPLICATION_FACTOR))

    async def main(self) -> None:
        while not self.stopping:
            await asyncio.sleep(self.rng.uniform(0.5, 3.0))
            if self.stopping:
                break
            action = self.rng.choice(("move", "move", "move-cancel", "cancel", "throttle"))
            if action == "move":
                await self._move(self._pick())
            elif action == "move-cancel":
                key = self._pick()
                if await self._move(key):
                    await asyncio.sleep(self.rng.uniform(0.0, 0.2))
                    await self._cancel(key)
            elif action == "cancel":
                moved = sorted(self.expected)
                await self._cancel(self.rng.choice(moved) if moved else self._pick())
            else:
                await self._throttle()
            await self._note_completions()
        if self.throttled_topics and self.rng.random() < 0.5:
            await self._clear_throttles()

    async def _move(self, key: Key) -> bool:
        target = self._target()
        self.stats["moves"] += 1
        result = await self._alter({key: target})
        if result is None:
            self.stats["ambiguous"] += 1
            self._ambiguous(key, target)
            self.sim.trace.event(self.process.key, "reassign-submit", f"{_show(key)} -> {list(target)}: no answer")
            return False
        code = result.get(key, -1)
        self.sim.trace.event(self.process.key, "reassign-submit", f"{_show(key)} -> {list(target)}: {_code(code)}")
        if code != ErrorCode.NONE:
            return False
        self.stats["moves-accepted"] += 1
        if WRONG_EXPECTATION:
            target = tuple(reversed(target))
        self.expected[key] = {target}
        return True

    async def _cancel(self, key: Key) -> None:
        listed = await self._list()
        if listed is None:
            return
        move = listed.get(key)
        self.stats["cancels"] += 1
        result = await self._alter({key: None})
        if result is None:
            # (applied or not, maybe after the answers to later requests: any end is possible)
            self.stats["ambiguous"] += 1
            self.unconstrained.add(key)
            self.sim.trace.event(self.process.key, "reassign-cancel", f"{_show(key)}: no answer")
            return
        code = result.get(key, -1)
        detail = f"{_show(key)}: {_code(code)}"
        if code == ErrorCode.NONE and move is not None:
            self.expected[key] = {move[0]}
            self.stats["reverted"] += 1
            detail += f", back to {list(move[0])} (the move to {list(move[1])} was in flight)"
        elif code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS and move is not None:
            self.expected[key] = {move[1]}
            self.stats["completed-before-cancel"] += 1
            detail += f", the move to {list(move[1])} completed before the cancel"
        elif code == ErrorCode.NONE and key not in self.late and key not in self.unconstrained:
            # (not listed as moving, yet cancelled: a move this actor never sent)
            self.sim.violation("reassignment", f"{_show(key)}: a cancel answered NONE, but no move of it was listed "
                               f"in flight just before")
        self.sim.trace.event(self.process.key, "reassign-cancel", detail)

    def _ambiguous(self, key: Key, target: Replicas) -> None:
        """A move without an answer: applied or not, maybe later than any answer that follows
        (its request may still be on its way): its target stays a possible end from now on."""
        self.late.setdefault(key, set()).add(target)
        ends = self.expected.get(key)
        if ends is None:
            # (where it was is not known to the actor: the controller's state, now)
            part = self._controller_part(key)
            if part is None:
                self.unconstrained.add(key)
                return
            ends = {tuple(part.target_replicas)}
        self.expected[key] = ends | {target}

    def _controller_part(self, key: Key) -> Any:
        controller = self.sim.cluster.controller.server.controller if self.sim.cluster.controller.server else None
        if controller is None:
            return None
        info = controller.replication.topic(key[0])
        return info.parts.get(key[1]) if info is not None else None

    async def _throttle(self) -> None:
        assert self.client is not None
        listed = await self._list()
        if listed is None:
            return
        if self.throttled_topics and self.rng.random() < 0.3:
            await self._clear_throttles()
            return
        rate = self.rng.choice(THROTTLE_RATES)
        leader: dict[str, list[str]] = {}
        follower: dict[str, list[str]] = {}
        for (topic, partition), (original, target) in sorted(listed.items()):
            leader.setdefault(topic, []).extend(f"{partition}:{b}" for b in original)
            follower.setdefault(topic, []).extend(f"{partition}:{b}" for b in target if b not in original)
        if not leader:  # nothing moving: throttle every replica of a topic, as "*" does
            topic = self.rng.choice(sorted(self.topics))
            leader[topic], follower[topic] = ["*"], ["*"]
        self.stats["throttles"] += 1
        try:
            for topic in sorted(leader):
                await self.client.incremental_alter_configs(TOPIC, topic, [
                    (REPLICAS_KEYS[0], SET, ",".join(leader[topic])),
                    (REPLICAS_KEYS[1], SET, ",".join(follower.get(topic, [])))])
                self.throttled_topics.add(topic)
            for broker in sorted(self.sim.cluster.brokers):
                await self.client.incremental_alter_configs(BROKER, str(broker), [(RATE_KEYS[0], SET, str(rate)),
                                                                                   (RATE_KEYS[1], SET, str(rate))],
                                                            broker)
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            self.sim.trace.event(self.process.key, "reassign-throttle", f"{rate} B/s: {type(exc).__name__}")
            return
        self.sim.trace.event(self.process.key, "reassign-throttle", f"{rate} B/s on "
                             + " ".join(f"{t}[{','.join(leader[t])}]" for t in sorted(leader)))

    async def _clear_throttles(self) -> None:
        assert self.client is not None
        try:
            for broker in sorted(self.sim.cluster.brokers):
                await self.client.incremental_alter_configs(BROKER, str(broker),
                                                            [(k, DELETE, None) for k in RATE_KEYS], broker)
            for topic in sorted(self.throttled_topics):
                await self.client.incremental_alter_configs(TOPIC, topic, [(k, DELETE, None) for k in REPLICAS_KEYS])
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            self.sim.trace.event(self.process.key, "reassign-throttle-cleared", f"{type(exc).__name__}")
            return
        self.throttled_topics.clear()
        self.sim.trace.event(self.process.key, "reassign-throttle-cleared", "")

    async def _note_completions(self) -> None:
        """Trace the moves seen in flight before and no more now."""
        listed = await self._list()
        if listed is None:
            return
        for key in sorted(set(self.in_flight) - set(listed)):
            self.stats["seen-done"] += 1
            self.sim.trace.event(self.process.key, "reassign-done", f"{_show(key)}: no longer moving")
        for key in sorted(set(listed) - set(self.in_flight)):
            original, target = listed[key]
            self.sim.trace.event(self.process.key, "reassign-moving", f"{_show(key)}: {list(original)} -> {list(target)}")
        self.in_flight = listed

    # -- checks ----------------------------------------------------------------------------

    def liveness_problems(self) -> list[str]:
        """What keeps the moves from being finished (empty: finished)."""
        cluster = self.sim.cluster
        controller = cluster.controller.server.controller if cluster.controller.server is not None else None
        if controller is None:
            return ["no controller"]
        problems = []
        for topic, count in sorted(self.topics.items()):
            info = controller.replication.topic(topic)
            if info is None:
                continue
            for pid in range(count):
                part = info.parts.get(pid)
                if part is None:
                    continue
                key = (topic, pid)
                if part.is_reassigning:
                    problems.append(f"{_show(key)} is still being reassigned: replicas {list(part.replicas)}, adding "
                                    f"{list(part.adding)}, removing {list(part.removing)}")
                    continue
                for broker_id, node in sorted(cluster.brokers.items()):
                    if broker_id in part.replicas or node.server is None:
                        continue
                    rm = node.server.replica_manager
                    if key in rm.partitions or any(k == key for k in rm.log_manager.all_logs()):
                        problems.append(f"{_show(key)}: broker {broker_id}, not a replica, still holds it")
        return problems

    async def final_checks(self) -> None:
        """Once settled: nothing listed as moving, each partition where its moves must have left it."""
        sim = self.sim

        async def ask(client: KafkaClient) -> dict:
            return await client.list_partition_reassignments(timeout_ms=10000)

        try:
            ongoing = await sim.with_client("reassign-verifier", ask)
        except (KafkaError, asyncio.TimeoutError) as exc:
            sim.violation("liveness", f"cannot list the partition reassignments: {type(exc).__name__}: {exc}")
            return
        if ongoing:
            sim.violation("reassignment", "ListPartitionReassignments after the cluster settled: " + "; ".join(
                f"{tp.topic}-{tp.partition} {m.replicas} (adding {m.adding}, removing {m.removing})"
                for tp, m in sorted(ongoing.items())))
        controller = sim.cluster.controller.server.controller
        for topic, count in sorted(self.topics.items()):
            info = controller.replication.topic(topic)
            for pid in range(count):
                key = (topic, pid)
                part = info.parts[pid]
                replicas = tuple(part.replicas)
                if not set(part.isr) <= set(replicas):
                    sim.violation("reassignment", f"{_show(key)}: ISR {list(part.isr)} not within the replicas "
                                  f"{list(replicas)}")
                if part.leader not in part.isr:
                    sim.violation("reassignment", f"{_show(key)}: leader {part.leader} not in the ISR {list(part.isr)}")
                ends = self.expected.get(key)
                if ends is None or key in self.unconstrained:
                    continue
                ends = ends | self.late.get(key, set())
                if replicas not in ends:
                    sim.violation("reassignment", f"{_show(key)} ends on replicas {list(replicas)}, its moves "
                                  f"(the controller's answers) put it on "
                                  + " or ".join(str(list(e)) for e in sorted(ends)))
                else:
                    self.stats["verified"] += 1
                    sim.trace.event("check", "reassign-verified", f"{_show(key)} on {list(replicas)}, leader "
                                    f"{part.leader}, read from its replicas")


def _code(code: int) -> str:
    if code < 0:
        return "not sent"
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
