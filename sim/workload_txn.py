"""The transactions workload (issue 28 over issue 26): transactional producers and a
read_committed observer on topics of their own, and what they saw.

A seed runs it or not by its own PRNG stream (``sim.rng_for("txn")``), so the other seeds'
draws and schedules stay as they were.

* ``TransactionalActor``: a transactional producer (KIP-98) built on the production client's
  connections: InitProducerId for its transactional.id, then transactions one after another:
  AddPartitionsToTxn for 1-3 partitions, a transactional batch of unique values to each (the
  same sequence on a retry: the broker drops a duplicate), sometimes a consume-transform-produce
  step (AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator), then EndTxn, commit
  or abort at random. Each transaction is recorded with its values and its outcome as the
  client saw it: ``committed`` / ``aborted`` when EndTxn answered, ``unknown`` when the answer
  never came or was an error; ``commit_requested`` says whether a commit was ever asked for
  (without one the transaction can only end aborted: by the producer, by the coordinator's
  timeout, or by the next InitProducerId of its transactional.id). On a failure it aborts
  and takes a new epoch (InitProducerId), as Java's producer does after an abortable error.
  Sometimes a second actor takes over the same transactional.id part way through: its
  InitProducerId fences the first (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH), which stops.
* ``ReadCommittedObserver``: a consumer with isolation_level 1 (read_committed) assigned every
  partition of those topics, reading from the start; each read is recorded with the largest
  log end offset any live replica had at that moment (sim/verify_txn.py checks that the
  transaction's commit marker was below it).

sim/verify_txn.py holds the checks over ``TxnHistory``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from protocol.api_keys import ApiKey
from protocol.client import KafkaClient
from protocol.client.connection import BrokerConnection, wire_error
from protocol.client.consumer import Consumer
from protocol.client.group import find_coordinator
from protocol.client.metadata import TopicPartition
from protocol.client.transactions import TransactionAdmin
from protocol.errors import ErrorCode, KafkaError
from protocol.fast_codecs import FetchResponse
from protocol.records import Record, build_batch, increment_sequence

from broker.coordinator.group_metadata_manager import partition_for

from .cluster import BROKER_DEFAULTS
from .workload import Actor

Key = tuple[str, int]

TXN_PROBABILITY = 0.5  # of a seed running the workload
TXN_TIMEOUT_MS = 10000  # transaction.timeout.ms the producers ask for
_FENCED = {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
_RETRY_COORDINATOR = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                      ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


@dataclass
class Txn:
    actor: str
    transactional_id: str
    number: int
    started_at: float
    values: dict[Key, list[bytes]] = field(default_factory=dict)
    group: str | None = None
    offsets: dict[Key, int] = field(default_factory=dict)  # committed with the transaction (TxnOffsetCommit)
    commit_requested: bool = False
    outcome: str = "open"  # committed, aborted, unknown (open: still running when the run ended)
    producer_id: int = -1
    producer_epoch: int = -1
    ended_at: float = -1.0
    # the coordinators' partitions: __transaction_state's of the id, __consumer_offsets' of the group
    state_key: Key = ("__transaction_state", 0)
    offsets_key: Key = ("__consumer_offsets", 0)

    def describe(self) -> str:
        return f"{self.transactional_id}#{self.number} ({self.actor}, pid {self.producer_id} epoch {self.producer_epoch})"


@dataclass
class TxnRead:
    topic: str
    partition: int
    offset: int
    value: bytes | None
    at: float  # when its fetch answer arrived (its poll may hand it out later)
    max_leo: int  # the largest log end offset of a live replica of the partition then


@dataclass
class TxnPosition:
    """The observer's position on a partition (the next offset it fetches) from ``at`` on: past
    the records it read, and past the control records and aborted batches read_committed skips
    without handing them out."""
    topic: str
    partition: int
    position: int
    at: float


@dataclass
class TxnHistory:
    topics: dict[str, int] = field(default_factory=dict)
    txns: list[Txn] = field(default_factory=list)
    by_value: dict[bytes, Txn] = field(default_factory=dict)
    reads: list[TxnRead] = field(default_factory=list)
    positions: list[TxnPosition] = field(default_factory=list)  # the observer's, each time one moved
    next_group_offset: int = 1  # TxnOffsetCommit offsets: unique across the run
    fenced: list[str] = field(default_factory=list)  # the actors fenced by a newer epoch of their id


class Fenced(Exception):
    """Another producer took over the transactional.id (a newer epoch)."""


class TransactionalActor(Actor):
    def __init__(self, sim: Any, name: str, history: TxnHistory, transactional_id: str, start_after_s: float = 0.0,
                 rng_name: str | None = None) -> None:
        super().__init__(sim, name)
        self.history = history
        self.transactional_id = transactional_id
        self.group = f"txn-group-{transactional_id}"
        self.start_after_s = start_after_s
        self.rng = sim.rng_for(rng_name or f"txn-{name}")
        self.partitions = [(t, p) for t, n in sorted(history.topics.items()) for p in range(n)]
        self.producer_id = -1
        self.epoch = -1
        self.sequences: dict[Key, int] = {}
        self.coordinator: BrokerConnection | None = None
        self.fenced = False
        self.state_key = ("__transaction_state",
                          partition_for(transactional_id, int(BROKER_DEFAULTS["transaction.state.log.num.partitions"])))
        self.offsets_key = ("__consumer_offsets",
                            partition_for(self.group, int(BROKER_DEFAULTS["offsets.topic.num.partitions"])))

    # -- requests --------------------------------------------------------------------------
    async def _retrying(self, what: str, attempt: Any, timeout_s: float = 15.0) -> Any:
        """``attempt()`` until it succeeds; retriable errors (and a lost coordinator) retried
        with a backoff until ``timeout_s``; fencing raises ``Fenced``."""
        deadline = self.sim.loop.time() + timeout_s
        while True:
            try:
                return await attempt()
            except KafkaError as exc:
                if exc.error_code in _FENCED:
                    raise Fenced(f"{what}: {type(exc).__name__}") from exc
                if exc.error_code in _RETRY_COORDINATOR or exc.error_code == ErrorCode.NETWORK_EXCEPTION:
                    self.coordinator = None
                if not (exc.retriable or exc.error_code in _RETRY_COORDINATOR) or self.sim.loop.time() >= deadline:
                    raise
            await asyncio.sleep(0.1)

    async def _coordinator(self) -> BrokerConnection:
        if self.coordinator is None or not self.coordinator.connected:
            assert self.client is not None
            _node, self.coordinator = await TransactionAdmin(self.client).coordinator(self.transactional_id, 10000)
        return self.coordinator

    async def _coordinator_request(self, api: int, body: dict[str, Any], what: str, max_v: int | None = None) -> Any:
        conn = await self._coordinator()
        version = conn.version_for(api, max_v=max_v)
        r = await conn.request(api, body, version)
        return r

    async def init(self) -> None:
        async def attempt() -> None:
            r = await self._coordinator_request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": self.transactional_id, "transaction_timeout_ms": TXN_TIMEOUT_MS,
                "producer_id": -1, "producer_epoch": -1}, "InitProducerId", max_v=3)
            if r.error_code:
                raise wire_error(r.error_code, "InitProducerId")
            self.producer_id, self.epoch = r.producer_id, r.producer_epoch
        await self._retrying("InitProducerId", attempt, 20.0)
        self.sequences.clear()
        self.sim.trace.event(self.process.key, "txn-init", f"{self.transactional_id}: pid {self.producer_id} "
                             f"epoch {self.epoch}")

    async def add_partitions(self, parts: list[Key]) -> None:
        topics: dict[str, list[int]] = {}
        for t, p in parts:
            topics.setdefault(t, []).append(p)

        async def attempt() -> None:
            r = await self._coordinator_request(ApiKey.ADD_PARTITIONS_TO_TXN, {
                "v3_and_below_transactional_id": self.transactional_id, "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in sorted(topics.items())]},
                "AddPartitionsToTxn", max_v=3)
            for t in r.results_by_topic_v3_and_below:
                for p in t.results_by_partition:
                    if p.partition_error_code:
                        raise wire_error(p.partition_error_code, f"AddPartitionsToTxn {t.name}-{p.partition_index}")
        await self._retrying("AddPartitionsToTxn", attempt)

    async def produce(self, key: Key, values: list[bytes]) -> int:
        """One transactional batch to the partition's leader; its base offset."""
        assert self.client is not None
        client = self.client
        now = self.sim.time.milliseconds()
        sequence = self.sequences.get(key, 0)
        payload = build_batch([Record(timestamp=now, key=v, value=v) for v in values], producer_id=self.producer_id,
                              producer_epoch=self.epoch, base_sequence=sequence, transactional=True)

        async def attempt() -> int:
            conn = await client.leader_connection(*key)
            try:
                response = await conn.produce(-1, 5000, [(key[0], [(key[1], payload)])],
                                              transactional_id=self.transactional_id)
            except KafkaError:
                await client.refresh_metadata([key[0]])
                raise
            assert response is not None
            [(_topic, [(_p, error, base_offset, *_rest)])] = response
            if error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                return -1
            if error:
                exc = wire_error(error, f"produce to {key[0]}-{key[1]}")
                if exc.invalid_metadata:
                    await client.refresh_metadata([key[0]])
                raise exc
            return int(base_offset)
        offset = await self._retrying(f"produce to {key[0]}-{key[1]}", attempt)
        self.sequences[key] = increment_sequence(sequence, len(values))
        return offset

    async def send_offsets(self, txn: Txn, offsets: dict[Key, int]) -> None:
        """Java's sendOffsetsToTransaction: AddOffsetsToTxn, then TxnOffsetCommit."""
        assert self.client is not None
        client = self.client

        async def add() -> None:
            r = await self._coordinator_request(ApiKey.ADD_OFFSETS_TO_TXN, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "group_id": self.group}, "AddOffsetsToTxn", max_v=3)
            if r.error_code:
                raise wire_error(r.error_code, "AddOffsetsToTxn")
        await self._retrying("AddOffsetsToTxn", add)
        txn.group = self.group
        txn.offsets = dict(offsets)
        topics: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in sorted(offsets.items()):
            topics.setdefault(t, []).append((p, o))

        async def commit() -> None:
            conn = await find_coordinator(client, self.group, 10000)
            r = await conn.request(ApiKey.TXN_OFFSET_COMMIT, {
                "transactional_id": self.transactional_id, "group_id": self.group, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "topics": [
                    {"name": t, "partitions": [{"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                                               for p, o in ps]} for t, ps in topics.items()]},
                conn.version_for(ApiKey.TXN_OFFSET_COMMIT, max_v=3))
            for t in r.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise wire_error(p.error_code, f"TxnOffsetCommit {t.name}-{p.partition_index}")
        await self._retrying("TxnOffsetCommit", commit)

    async def end(self, commit: bool) -> None:
        async def attempt() -> None:
            r = await self._coordinator_request(ApiKey.END_TXN, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "committed": commit}, "EndTxn", max_v=3)
            if r.error_code:
                raise wire_error(r.error_code, "EndTxn")
        await self._retrying("EndTxn", attempt)

    # -- the loop --------------------------------------------------------------------------
    async def main(self) -> None:
        sim, rng, history = self.sim, self.rng, self.history
        if self.start_after_s:
            await asyncio.sleep(self.start_after_s)
        need_init = True
        number = 0
        while not self.stopping and not self.fenced:
            if need_init:
                try:
                    await self.init()
                except Fenced:
                    self.fenced = True
                    break
                except KafkaError as exc:
                    sim.trace.event(self.process.key, "txn-init-failed", f"{type(exc).__name__}: {exc}")
                    await asyncio.sleep(1.0)
                    continue
                need_init = False
            parts = sorted(rng.sample(self.partitions, rng.randint(1, min(3, len(self.partitions)))))
            txn = Txn(self.name, self.transactional_id, number, sim.loop.time(), producer_id=self.producer_id,
                      producer_epoch=self.epoch, state_key=self.state_key, offsets_key=self.offsets_key)
            number += 1
            for key in parts:
                txn.values[key] = [f"{self.name}-{txn.number}-{key[0]}-{key[1]}-{i}".encode()
                                   for i in range(rng.randint(1, 3))]
                for v in txn.values[key]:
                    history.by_value[v] = txn
            history.txns.append(txn)
            sim.trace.event(self.process.key, "txn-begin", f"{txn.describe()}: "
                            + " ".join(f"{t}-{p}x{len(vs)}" for (t, p), vs in sorted(txn.values.items())))
            commit = rng.random() < 0.7
            offsets_step = rng.random() < 0.3
            pause = rng.uniform(0.0, 0.5)
            try:
                await self.add_partitions(parts)
                for key in parts:
                    await self.produce(key, txn.values[key])
                await asyncio.sleep(pause)  # (the transaction stays open a while: read_committed waits)
                if offsets_step:
                    offset = history.next_group_offset
                    history.next_group_offset += 1
                    await self.send_offsets(txn, {parts[0]: offset})
                if commit:
                    txn.commit_requested = True
                await self.end(commit)
            except Fenced as exc:
                self.fenced = True
                txn.outcome = "unknown" if txn.commit_requested else "aborted"
                sim.trace.event(self.process.key, "txn-fenced", f"{txn.describe()}: {exc}; {txn.outcome}")
            except KafkaError as exc:
                txn.outcome = "unknown"
                sim.trace.event(self.process.key, "txn-failed", f"{txn.describe()}: {type(exc).__name__}: {exc}"
                                + ("" if txn.commit_requested else " (no commit asked: it can only abort)"))
                if not txn.commit_requested:
                    try:
                        await self.end(False)
                        txn.outcome = "aborted"
                    except (KafkaError, Fenced):
                        pass
                need_init = True  # (a new epoch: whatever the old one left open is aborted)
            else:
                txn.outcome = "committed" if commit else "aborted"
                sim.trace.event(self.process.key, "txn-commit" if commit else "txn-abort", txn.describe()
                                + (f" offsets {txn.group} {sorted(txn.offsets.items())}" if txn.offsets else ""))
            txn.ended_at = sim.loop.time()
            if not self.stopping and not self.fenced:
                await asyncio.sleep(rng.uniform(0.05, 0.5))
        if self.fenced:
            history.fenced.append(self.name)
            sim.trace.event(self.process.key, "txn-producer-fenced", f"{self.transactional_id}: stops")


class ReadCommittedObserver(Actor):
    """read_committed (isolation_level 1) over every partition of the transactional topics."""

    def __init__(self, sim: Any, name: str, history: TxnHistory) -> None:
        super().__init__(sim, name)
        self.history = history
        self.consumer: AnswerSamplingConsumer | None = None
        self._last_positions: dict[Key, int] = {}

    async def main(self) -> None:
        assert self.client is not None
        consumer = self.consumer = AnswerSamplingConsumer(self.sim, self.client, isolation_level=1, max_wait_ms=500)
        consumer.assign([(t, p) for t, n in sorted(self.history.topics.items()) for p in range(n)])
        sim = self.sim
        keys = [(t, p) for t, n in sorted(self.history.topics.items()) for p in range(n)]
        while not self.stopping:
            try:
                batch = await consumer.getmany(1000)
            except KafkaError as exc:
                sim.trace.event(self.process.key, "poll-failed", type(exc).__name__)
                await asyncio.sleep(0.2)
                continue
            finally:
                self._record_positions(keys)
            self.record_reads(batch)

    def record_reads(self, batch: dict[TopicPartition, list[Any]]) -> None:
        """The records a poll handed out, each read when its fetch answer arrived, with the
        replicas' log ends then (AnswerSamplingConsumer)."""
        assert self.consumer is not None
        sim = self.sim
        for tp, records in sorted(batch.items()):
            answered = self.consumer.answered.pop(tp, None)
            at, max_leo = answered if answered is not None else (sim.loop.time(), _max_leo(sim, (tp.topic, tp.partition)))
            for r in records:
                self.history.reads.append(TxnRead(tp.topic, tp.partition, r.offset, r.value, at, max_leo))
                self.observe(tp.topic, tp.partition, r.offset, r.value, self.process.key)
                sim.history.polls += 1

    def _record_positions(self, keys: list[Key]) -> None:
        """The positions that moved since last time: a position can pass offsets without a read
        (markers, aborted batches), and sim/verify_txn.py needs how far it was before a loss."""
        positions = self.history.positions
        for key in keys:
            position = self.position(key)
            if position is not None and self._last_positions.get(key) != position:
                self._last_positions[key] = position
                positions.append(TxnPosition(key[0], key[1], position, self.sim.loop.time()))

    def position(self, key: Key) -> int | None:
        if self.consumer is None:
            return None
        return self.consumer._positions.get(TopicPartition(*key))  # (the sim looks inside: no request)


class AnswerSamplingConsumer(Consumer):
    """The observer's Consumer, noting for each partition whose records a poll hands out when
    the fetch answer that brought them arrived and the largest log end offset of a live replica
    of the partition then: the moment of the read that txn-read-before-marker judges. Fetches
    stay in flight across polls and an answer is decoded only by the next poll, which may come
    seconds later (seed 4390, with the consumer of then: answers of brokers 1 and 2 at 4.86 s,
    handed out at 14.38 s, when every broker was down and the log ends sampled were none: -1).

    ``_fetch_from`` samples, as the answer arrives, each partition it brings records of, and
    keeps the samples with that answer (per node: one Fetch in flight to each); ``_handle_response``
    moves a partition's sample to ``answered`` only when the records handed out for it came from
    that answer. An answer the consumer drops (the position or leader epoch changed while it was
    in flight, or a second leader's) leaves no sample: its samples go with it."""

    def __init__(self, sim: Any, client: KafkaClient, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self._sim = sim
        # Per node, its last answer and, per partition it brought records of, (arrival, max LEO).
        self._arrived: dict[int, tuple[FetchResponse, dict[TopicPartition, tuple[float, int]]]] = {}
        self.answered: dict[TopicPartition, tuple[float, int]] = {}

    async def _fetch_from(self, node: int, offsets: dict[TopicPartition, tuple[int, int]]) -> FetchResponse:
        response = await super()._fetch_from(node, offsets)
        sim = self._sim
        now = sim.loop.time()  # (no wait since the answer was decoded)
        samples = {TopicPartition(topic, data.partition): (now, _max_leo(sim, (topic, data.partition)))
                   for topic, partitions in response.responses for data in partitions
                   if data.records}  # (a partition with nothing: an empty buffer or None)
        self._arrived[node] = (response, samples)
        return response

    def _handle_response(self, node: int, offsets: dict[TopicPartition, tuple[int, int]], response: FetchResponse,
                         out: dict[TopicPartition, list[Any]]) -> None:
        arrived = self._arrived.pop(node, None)
        samples = arrived[1] if arrived is not None and arrived[0] is response else {}
        before = {tp: len(out.get(tp, ())) for tp in samples}
        try:
            super()._handle_response(node, offsets, response, out)
        finally:  # (records taken before an error are handed out)
            for tp, n in before.items():
                if len(out.get(tp, ())) > n:
                    self.answered[tp] = samples[tp]


def _max_leo(sim: Any, key: Key) -> int:
    best = -1
    for node in sim.cluster.brokers.values():
        if not node.ready:
            continue
        p = node.server.replica_manager.partitions.get(key)
        if p is not None and p.log is not None:
            best = max(best, p.log.log_end_offset)
    return best


class TxnWorkload:
    """What a seed that runs the workload adds: its topics, 1-2 transactional ids, a second
    actor on one of them now and then, and the read_committed observer."""

    def __init__(self, sim: Any, rng: Any) -> None:
        self.sim = sim
        self.history = TxnHistory()
        for i in range(rng.randint(1, 2)):
            self.history.topics[f"tx{i}"] = rng.randint(1, 3)
        self.actors: list[Actor] = []
        for i in range(rng.randint(1, 2)):
            tid = f"tid-{i}"
            self.actors.append(TransactionalActor(sim, f"txn-{i}", self.history, tid))
            if rng.random() < 0.4:  # a second producer takes the id over part way through: fencing
                self.actors.append(TransactionalActor(sim, f"txn-{i}b", self.history, tid,
                                                      start_after_s=rng.uniform(2.0, sim.options.duration_s / 2)))
        self.observer = ReadCommittedObserver(sim, "rc-observer", self.history)
        self.producers = list(self.actors)
        self.actors.append(self.observer)

    @staticmethod
    def maybe(sim: Any) -> "TxnWorkload | None":
        rng = sim.rng_for("txn")
        if rng.random() >= TXN_PROBABILITY:
            return None
        return TxnWorkload(sim, rng)

    def read_everything(self) -> bool:
        """Whether the observer's position reached the LSO of every partition."""
        for topic, count in self.history.topics.items():
            for pid in range(count):
                p = self.sim.leader_partition((topic, pid))
                position = self.observer.position((topic, pid))
                if p is None or (position or 0) < p.log.last_stable_offset:
                    return False
        return True

    async def create_topics(self) -> bool:
        """The workload's topics (replication factor 3, min.insync.replicas 2)."""
        sim = self.sim

        async def create(client: KafkaClient) -> None:
            for name, partitions in sorted(self.history.topics.items()):
                await client.create_topics([(name, partitions, 3, {"min.insync.replicas": "2"})], timeout_ms=10000)

        try:
            await sim.with_client("txn-creator", create)
        except KafkaError as exc:
            sim.violation("liveness", f"transactional topic creation failed: {type(exc).__name__}: {exc}")
            return False
        sim.trace.event("sim", "txn-topics", " ".join(f"{t}x{n}" for t, n in sorted(self.history.topics.items()))
                        + " " + " ".join(a.name for a in self.producers))
        return True
