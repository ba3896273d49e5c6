"""The workload: clients driving the cluster, each a process of its own, and what they saw.

Every client is the production client (protocol/client) on the simulated network and clock:

* ``ProducerActor``: an idempotent acks=all producer, or a plain acks=1 one, sending unique
  values to the workload's topics at a rate the seed picks; each send is recorded with how
  it ended (acknowledged at an offset, failed, or never answered);
* ``ObserverActor``: a consumer assigned every partition of the workload's topics, reading
  from the start;
* ``GroupActor``: a member of a consumer group over the workload's topics, committing what
  it read;
* ``AdminActor``: topic creation and deletion, preferred leader elections.

``History`` keeps what the checks at the end need (sim/verify.py): the writes, each offset's
value as anyone saw it (a second value at an offset is reported at once), and the polls.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from protocol.client import KafkaClient
from protocol.client.consumer import Consumer
from protocol.client.group import GroupConsumer
from protocol.client.producer import Producer
from protocol.errors import KafkaError

log = logging.getLogger("kbroker.sim")

Key = tuple[str, int]


@dataclass
class Write:
    producer: str
    value: bytes
    acks: int
    idempotent: bool
    sent_at: float
    topic: str
    status: str = "pending"  # ok, failed, pending (never answered)
    partition: int = -1
    offset: int = -1
    acked_at: float = -1.0
    error: str = ""


@dataclass
class History:
    writes: list[Write] = field(default_factory=list)
    by_value: dict[bytes, Write] = field(default_factory=dict)
    seen: dict[tuple[str, int, int], tuple[bytes | None, str, float]] = field(default_factory=dict)  # (value, by, when)
    committed: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (group, topic, partition) -> offset
    commits: list[tuple[str, str, int, int, float]] = field(default_factory=list)  # (group, topic, partition, offset, when)
    polls: int = 0


class Actor:
    """A client process: ``start`` runs ``main`` as a process of its own until ``stop``."""

    def __init__(self, sim: Any, name: str) -> None:
        self.sim = sim
        self.name = name
        self.process = sim.client_process(name)
        self.stopping = False
        self.task: asyncio.Task | None = None
        self.client: KafkaClient | None = None

    def start(self) -> None:
        self.task = self.sim.spawn(self.process, self._run())

    async def _run(self) -> None:
        self.client = KafkaClient(self.sim.cluster.bootstrap, client_id=self.name, time=self.sim.time,
                                  request_timeout_ms=10000)
        try:
            await self.main()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a client giving up is the workload's business, not a finding
            self.sim.trace.event(self.process.key, "actor-failed", f"{type(exc).__name__}: {exc}")
        finally:
            try:
                await self.client.close()
            except Exception:  # noqa: BLE001
                pass

    async def main(self) -> None:
        raise NotImplementedError

    async def stop(self, timeout_s: float = 30.0) -> None:
        self.stopping = True
        if self.task is None or self.task.cancelled():  # (cancelled by an earlier stop: shield() would raise)
            return
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout_s)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001
            self.task.cancel()
            try:
                await self.task
            except BaseException:  # noqa: BLE001
                pass

    def observe(self, topic: str, partition: int, offset: int, value: bytes | None, who: str) -> None:
        self.sim.observe(topic, partition, offset, value, who)


class ProducerActor(Actor):
    def __init__(self, sim: Any, name: str, topics: list[str], idempotent: bool, interval_ms: tuple[float, float]) -> None:
        super().__init__(sim, name)
        self.topics = topics
        self.idempotent = idempotent
        self.acks = -1 if idempotent else 1
        self.interval_ms = interval_ms
        self.sent = 0
        self.rng = sim.rng_for(name)

    async def main(self) -> None:
        assert self.client is not None
        producer = Producer(self.client, acks=self.acks, enable_idempotence=self.idempotent, linger_ms=2,
                            request_timeout_ms=5000, delivery_timeout_ms=20000, retry_backoff_ms=100)
        sim = self.sim
        while not self.stopping:
            topic = self.topics[self.rng.randrange(len(self.topics))]
            value = f"{self.name}-{self.sent}".encode()
            self.sent += 1
            write = Write(self.name, value, self.acks, self.idempotent, sim.loop.time(), topic)
            sim.history.writes.append(write)
            sim.history.by_value[value] = write
            try:
                future = await producer.send(topic, value, key=value)
            except KafkaError as exc:
                write.status, write.error = "failed", type(exc).__name__
            else:
                future.add_done_callback(lambda f, w=write: self._settled(w, f))
            await asyncio.sleep(self.rng.uniform(*self.interval_ms) / 1000.0)
        try:
            await asyncio.wait_for(producer.flush(), 25.0)
        except (asyncio.TimeoutError, KafkaError):
            pass

    def _settled(self, write: Write, future: asyncio.Future) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            write.status, write.error = "failed", type(exc).__name__
            return
        meta = future.result()
        write.status, write.partition, write.offset, write.acked_at = "ok", meta.partition, meta.offset, self.sim.loop.time()
        if meta.offset >= 0 and self.acks == -1:  # (an acks=1 write may be lost, its offset reused: Kafka allows it)
            self.observe(meta.topic, meta.partition, meta.offset, write.value, self.process.key)


class ObserverActor(Actor):
    """Reads every partition of ``topics`` from the start; polls must move forward."""

    def __init__(self, sim: Any, name: str, topics: dict[str, int]) -> None:
        super().__init__(sim, name)
        self.topics = topics
        self.positions: dict[Key, int] = {}
        self.polled_at: dict[Key, float] = {}
        self.last_value: dict[Key, bytes | None] = {}
        self.resets_seen: dict[Key, int] = {}  # the consumer's OFFSET_OUT_OF_RANGE resets as of the last poll
        self.consumer: Consumer | None = None

    async def main(self) -> None:
        assert self.client is not None
        consumer = self.consumer = Consumer(self.client, max_wait_ms=500)
        consumer.assign([(t, p) for t, n in sorted(self.topics.items()) for p in range(n)])
        while not self.stopping:
            try:
                batch = await consumer.getmany(1000)
            except KafkaError as exc:
                self.sim.trace.event(self.process.key, "poll-failed", type(exc).__name__)
                await asyncio.sleep(0.2)
                continue
            self.record(batch, self.name)

    def record(self, batch: Any, session: str) -> None:
        sim = self.sim
        now = sim.loop.time()
        for tp, records in sorted(batch.items()):
            key = (tp.topic, tp.partition)
            resets = self.consumer.out_of_range_resets[tp] if self.consumer is not None else 0
            if resets != self.resets_seen.get(key, 0):
                # The position was reset per auto.offset.reset since the last poll (Kafka's
                # "the current offset does not exist any more on the server"): it starts over
                # at the log start or end the leader now reports, which may be below what was
                # polled (a new leader whose log start lags the old leader's, as Kafka allows).
                self.resets_seen[key] = resets
                last = self.positions.pop(key, None)
                if last is not None and records and records[0].offset <= last:
                    sim.trace.event("check", "poll-monotonic-reset",
                                    f"{self.process.key} polled {tp.topic}-{tp.partition} offset {records[0].offset} "
                                    f"after {last} ({session}): position reset after OFFSET_OUT_OF_RANGE")
            for r in records:
                last = self.positions.get(key)
                if last is not None and r.offset <= last:
                    detail = f"{self.process.key} polled {tp.topic}-{tp.partition} offset {r.offset} after {last} ({session})"
                    # (excused if exposed since the record polled before was written: it may have
                    # been prefetched before a loss and handed out after it)
                    exposed = sim.exposed_since(key, sim.written_since(self.polled_at.get(key, 0.0),
                                                                       self.last_value.get(key)))
                    if exposed is not None:  # the records it read were lost (and their offsets reused)
                        sim.exempt += 1
                        sim.trace.event("check", "poll-monotonic-exempt", f"{detail}; exposed at {exposed:.6f}")
                    else:
                        sim.violation("poll-monotonic", detail)
                self.positions[key] = r.offset
                self.polled_at[key] = now
                self.last_value[key] = r.value
                self.observe(tp.topic, tp.partition, r.offset, r.value, self.process.key)
                sim.history.polls += 1


class GroupActor(ObserverActor):
    """A consumer group member: polls move forward within a generation; commits what it read."""

    def __init__(self, sim: Any, name: str, group: str, topics: dict[str, int]) -> None:
        super().__init__(sim, name, topics)
        self.group = group

    async def main(self) -> None:
        assert self.client is not None
        member = GroupConsumer(self.client, self.group, sorted(self.topics), session_timeout_ms=10000,
                               heartbeat_interval_ms=1000)
        self.consumer = member.consumer
        generation = None
        try:
            while not self.stopping:
                try:
                    batch = await member.getmany(1000)
                except KafkaError as exc:
                    self.sim.trace.event(self.process.key, "poll-failed", type(exc).__name__)
                    await asyncio.sleep(0.2)
                    continue
                if member.generation_id != generation:
                    generation = member.generation_id
                    self.positions.clear()  # a new assignment starts from the committed offsets
                self.record(batch, f"generation {generation}")
                if batch:
                    offsets = {tp: records[-1].offset + 1 for tp, records in batch.items() if records}
                    try:
                        await member.commit(offsets)
                    except KafkaError as exc:
                        self.sim.trace.event(self.process.key, "commit-failed", type(exc).__name__)
                        continue
                    for tp, offset in offsets.items():
                        key = (self.group, tp.topic, tp.partition)
                        self.sim.history.committed[key] = max(offset, self.sim.history.committed.get(key, -1))
                        self.sim.history.commits.append((*key, offset, self.sim.loop.time()))
        finally:
            try:
                await asyncio.wait_for(member.close(commit=False), 5.0)
            except (asyncio.TimeoutError, KafkaError):
                pass


class AdminActor(Actor):
    """Topic churn (create, a few writes, delete) and preferred leader elections."""

    def __init__(self, sim: Any, name: str, topics: dict[str, int]) -> None:
        super().__init__(sim, name)
        self.topics = topics
        self.rng = sim.rng_for(name)
        self.created = 0
        self.deleted: list[str] = []

    async def main(self) -> None:
        assert self.client is not None
        client = self.client
        while not self.stopping:
            await asyncio.sleep(self.rng.uniform(1.0, 5.0))
            if self.stopping:
                break
            action = self.rng.choice(("elect", "elect", "churn"))
            try:
                if action == "elect":
                    topic = self.rng.choice(sorted(self.topics))
                    partitions = [(topic, p) for p in range(self.topics[topic])]
                    results = await client.elect_leaders(partitions, 0, timeout_ms=10000)
                    self.sim.trace.event(self.process.key, "elect-leaders",
                                         " ".join(f"{tp.topic}-{tp.partition}:{code}" for tp, code in sorted(results.items())))
                else:
                    name = f"churn-{self.created}"
                    self.created += 1
                    await client.create_topics([(name, 1, 3, {"min.insync.replicas": "2"})], timeout_ms=10000)
                    self.sim.trace.event(self.process.key, "topic-created", name)
                    await asyncio.sleep(self.rng.uniform(0.5, 3.0))
                    await client.delete_topics([name], timeout_ms=10000)
                    self.deleted.append(name)
                    self.sim.trace.event(self.process.key, "topic-deleted", name)
            except KafkaError as exc:
                self.sim.trace.event(self.process.key, "admin-failed", f"{action}: {type(exc).__name__}: {exc}")
