"""Exactly-once consume-transform-produce on a 3-broker cluster while brokers are killed -9.

A pipeline (confluent-kafka: a read_committed consumer of topic A in a group, a transactional
producer to topic B, ``send_offsets_to_transaction`` in every transaction) runs while an
idempotent producer keeps writing A; after each failover its consumer is replaced by a new group
member, which resumes from the offsets committed in the transactions. Meanwhile, in turn, the transactional id's coordinator, the
leader of a B partition and the group's coordinator are killed -9 and restarted (each back in
every ISR before the next kill). Afterwards every record of A has its output exactly once in B's
read_committed view, and the group's committed offsets are A's end offsets.

5 kills in CI (``make test``); 50 in ``make soak`` (marker slow). The pipeline gives up a
producer whose transactional call outlives its timeout (a librdkafka hang, Pipeline._bounded);
the last test makes that hang happen."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ConsumerTP

from protocol.api_keys import ApiKey
from tests.cluster.helpers import NumberedProducer, read_all
from tests.cluster.txn_helpers import (_ask_live, create_topic, find_coordinator, leaders, offsets, read_committed,
                                       start_cluster)
from tests.support import wait_until

PARTITIONS = 3
GROUP, TID = "eos-group", "eos-pipeline"


class Wedged(Exception):
    """A transactional call still running well after its own timeout (Pipeline._bounded)."""


class Pipeline:
    """The consume-transform-produce loop on a thread, recovering as an application must: a
    retriable commit is retried, an abortable error aborts and rewinds the consumer to the
    committed offsets (a new consumer in the group), a fatal one (fenced) or a wedged call (one
    that outlives its timeout) starts a new producer, which fences the old one."""

    def __init__(self, bootstrap: str, max_seconds: float, call_s: float = 15, wedged_s: float = 25) -> None:
        self.bootstrap = bootstrap
        self.call_s = call_s  # each transactional call's own timeout
        self.wedged_s = wedged_s  # how long one may run before its producer is given up
        self.deadline = time.monotonic() + max_seconds
        self.stop_flag = threading.Event()
        self.rejoin = threading.Event()  # set: the consumer leaves and a new one resumes from the commits
        self.commits = self.aborts = self.new_producers = 0
        self.wedged: list[threading.Thread] = []  # the calls given up (each holds its producer)
        self.errors: list[str] = []
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _consumer(self) -> Consumer:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "isolation.level": "read_committed",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
        c.subscribe(["A"])
        return c

    def _producer(self) -> Producer:
        # metadata.recovery.strategy=none: no re-bootstrap (KIP-1102) when the killed broker
        # carried the producer's last UP connection; a re-bootstrap decommissions every broker
        # handle and so makes the librdkafka hang _bounded() recovers from far more likely.
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": TID, "linger.ms": 5,
                      "transaction.timeout.ms": 15000, "metadata.recovery.strategy": "none"})
        self._retry(lambda: p.init_transactions(30))
        self.new_producers += 1
        return p

    def _retry(self, call) -> None:
        while True:
            try:
                return call()
            except KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or time.monotonic() > self.deadline:
                    raise
                self.errors.append(f"retried: {err}")
                time.sleep(0.1)

    def _bounded(self, call):
        """``call()`` (a transactional call given ``call_s``) on a thread of its own, given up
        after ``wedged_s``. librdkafka (2.10+, still 2.16) can wait forever in
        send_offsets_to_transaction: a Metadata answer that leaves out a fenced broker (killed,
        or restarted and not yet unfenced; Kafka's controller and metadata cache do the same)
        decommissions that broker's handle, but the coordinator cache keeps it as the group's
        coordinator, and rd_kafka_coord_req_fsm() then waits for it to come up, re-run only by
        another broker's state change (librdkafka #5511); the API's timeout is never checked
        meanwhile (#5456).
        A wedged call's producer cannot be destroyed while it is called: it is left to its
        thread, and the next producer's InitProducerId fences it (a late TxnOffsetCommit of it
        is refused) and aborts its transaction."""
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["value"] = call()
            except BaseException as exc:  # noqa: BLE001 (re-raised on the pipeline's thread)
                outcome["error"] = exc

        t = threading.Thread(target=run, daemon=True)
        t.outcome = outcome  # type: ignore[attr-defined]
        t.start()
        t.join(self.wedged_s)
        if t.is_alive():
            self.wedged.append(t)
            raise Wedged(f"a transactional call still running after {self.wedged_s}s (its timeout {self.call_s}s)")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    def _run(self) -> None:
        try:
            consumer, producer = self._consumer(), self._producer()
            while not self.stop_flag.is_set() and time.monotonic() < self.deadline:
                if self.rejoin.is_set():
                    self.rejoin.clear()
                    consumer.close()
                    consumer = self._consumer()
                msgs = [m for m in consumer.consume(50, 0.3) if not m.error()]
                if not msgs:
                    continue
                try:
                    producer.begin_transaction()
                    positions: dict[int, int] = {}
                    for m in msgs:
                        producer.produce("B", key=m.key(), value=b"out-" + m.value(), partition=m.partition())
                        positions[m.partition()] = m.offset() + 1
                    offsets = [ConsumerTP("A", p, o) for p, o in positions.items()]
                    metadata = consumer.consumer_group_metadata()
                    self._retry(lambda: self._bounded(lambda: producer.send_offsets_to_transaction(offsets, metadata,
                                                                                                   self.call_s)))
                    self._retry(lambda: self._bounded(lambda: producer.commit_transaction(self.call_s)))
                    self.commits += 1
                except (KafkaException, Wedged) as exc:
                    err = exc.args[0]
                    self.errors.append(str(err))
                    if isinstance(err, KafkaError) and err.txn_requires_abort():
                        self._retry(lambda: producer.abort_transaction(30))
                        self.aborts += 1
                    else:  # fatal (fenced), given up or wedged: a new producer takes the id over
                        producer = self._producer()
                    consumer.close()  # rewind: a new member starts from the committed offsets
                    consumer = self._consumer()
            consumer.close()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.failure = exc


def full_isr(cluster, topics: list[str]) -> bool:
    async def ask() -> bool:
        md = await _ask_live(cluster, ApiKey.METADATA, {"topics": [{"name": t} for t in topics],
                                                        "allow_auto_topic_creation": False}, 8, set())
        return md is not None and all(t.error_code == 0 and p.leader_id >= 0 and len(p.isr_nodes) == 3
                                      for t in md.topics for p in t.partitions)
    return asyncio.run(ask())


def committed_offsets(bootstrap: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([ConsumerTP("A", p) for p in range(PARTITIONS)], 30)}
    finally:
        c.close()


def run_pipeline_with_kills(tmp_path, kills: int) -> None:
    cluster = start_cluster(tmp_path, **{"replica.lag.time.max.ms": 10000})
    try:
        create_topic(cluster, "A", PARTITIONS)
        create_topic(cluster, "B", PARTITIONS)
        pipeline = Pipeline(cluster.bootstrap, max_seconds=60 + 20 * kills)
        with NumberedProducer(cluster.bootstrap, "A", PARTITIONS, max_seconds=30 + 20 * kills, poll_s=0.01) as source:
            pipeline.thread.start()
            wait_until(lambda: pipeline.commits >= 3 or pipeline.failure, 60, 0.1, "the pipeline's first commits")
            internal = ["A", "B", "__transaction_state", "__consumer_offsets"]
            roles = ["transaction coordinator", "B partition leader", "group coordinator"]
            for k in range(kills):
                role = roles[k % 3]
                if role == "transaction coordinator":
                    victim = find_coordinator(cluster, TID, 1)
                elif role == "group coordinator":
                    victim = find_coordinator(cluster, GROUP, 0)
                else:
                    victim = leaders(cluster, "B")[k % PARTITIONS]
                before = pipeline.commits
                cluster.brokers[victim].kill()
                print(f"kill {k + 1}/{kills}: broker {victim} ({role}) after {before} commits", flush=True)
                time.sleep(1)
                cluster.brokers[victim].start()
                wait_until(lambda: full_isr(cluster, internal), 60, 0.2, "every partition back in full ISR")
                # the pipeline got through the failover before the next kill, and its consumer
                # restarted from the offsets committed in its transactions (as after a redeploy)
                wait_until(lambda: pipeline.commits > before or pipeline.failure, 60, 0.1, "a commit after the kill")
                pipeline.rejoin.set()
                assert pipeline.failure is None, pipeline.failure
            source.stop_flag.set()
        assert pipeline.failure is None, pipeline.failure
        source_records = read_all(cluster.bootstrap, "A", PARTITIONS)
        total = sum(len(v) for v in source_records.values())
        assert total > 0 and not source.errors
        ends = offsets(cluster.bootstrap, "A", PARTITIONS, 0)
        assert ends == {p: len(v) for p, v in source_records.items()}
        wait_until(lambda: committed_offsets(cluster.bootstrap) == ends or pipeline.failure, 90, 0.5,
                   "the group's commits at A's end offsets")
        pipeline.stop_flag.set()
        pipeline.thread.join(60)
        assert pipeline.failure is None, pipeline.failure
        output = read_committed(cluster.bootstrap, "B", PARTITIONS)
        for p in range(PARTITIONS):
            expected = [b"out-" + str(v).encode() for v in source_records[p]]
            # exactly once and in order: B's partition p is A's partition p transformed
            assert output[p] == expected, (p, len(output[p]), len(expected))
        assert committed_offsets(cluster.bootstrap) == ends
        print(f"{kills} kills: {total} records, {pipeline.commits} commits, {pipeline.aborts} aborts, "
              f"{pipeline.new_producers} producers ({len(pipeline.wedged)} given up wedged); "
              f"errors seen: {pipeline.errors[:20]}")
    finally:
        cluster.kill()


@pytest.mark.timeout(300)
def test_exactly_once_pipeline_survives_5_kills(tmp_path):
    run_pipeline_with_kills(tmp_path, 5)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_exactly_once_pipeline_survives_50_kills(tmp_path):
    run_pipeline_with_kills(tmp_path, 50)


@pytest.mark.timeout(180)
def test_a_wedged_send_offsets_is_given_up_and_its_producer_fenced(tmp_path):
    """The librdkafka hang Pipeline._bounded recovers from, made to happen: the group's
    coordinator is killed and stays down until the controller fences it, a Metadata answer
    without it makes the producer decommission its handle (still cached as the group's
    coordinator), and once it is back, send_offsets_to_transaction never returns. The pipeline
    gives that producer up and a new one commits; the abandoned transaction stays aborted, and
    the abandoned call, let go later, fails and changes no committed offset."""
    cluster = start_cluster(tmp_path)
    try:
        internal = ["A", "B", "__transaction_state", "__consumer_offsets"]
        create_topic(cluster, "A", PARTITIONS)
        create_topic(cluster, "B", PARTITIONS)
        pipeline = Pipeline(cluster.bootstrap, 150, call_s=3, wedged_s=8)
        group = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
        metadata = group.consumer_group_metadata()

        victim = find_coordinator(cluster, GROUP, 0)
        # B's partition written is led elsewhere: no new connection (a broker state change, which
        # re-runs the coordinator request) while send_offsets_to_transaction waits
        part = next(p for p, leader in leaders(cluster, "B").items() if leader != victim)

        def transaction(producer: Producer, offset: int, partitions: tuple[int, ...] = (part,)) -> None:
            producer.begin_transaction()
            for p in partitions:
                producer.produce("B", value=b"%d" % offset, partition=p)
            pipeline._bounded(lambda: producer.send_offsets_to_transaction([ConsumerTP("A", 0, offset)], metadata,
                                                                           pipeline.call_s))
            pipeline._bounded(lambda: producer.commit_transaction(pipeline.call_s))

        producer = pipeline._producer()
        transaction(producer, 1, tuple(range(PARTITIONS)))  # connected to every leader
        cluster.brokers[victim].kill()
        # a Metadata answer without it (fenced): librdkafka decommissions its handle
        wait_until(lambda: victim not in producer.list_topics(timeout=10).brokers, 30, 0.1,
                   "a Metadata answer without the killed broker")
        cluster.brokers[victim].start()
        wait_until(lambda: full_isr(cluster, internal), 60, 0.2, "every partition back in full ISR")
        try:
            transaction(producer, 2)
            expected = [b"1", b"2"]
            print("librdkafka answered: no producer given up")
        except Wedged:
            print(f"librdkafka did not answer: producer given up after {pipeline.wedged_s}s")
            transaction(pipeline._producer(), 3)
            expected = [b"1", b"3"]
            # the restart of a broker the abandoned producer is connected to (the leader it wrote
            # to; it is connected to another too) re-runs its coordinator request: it asks
            # FindCoordinator and sends its TxnOffsetCommit now, past its timeout, fenced
            other = leaders(cluster, "B")[part]
            cluster.brokers[other].kill()
            time.sleep(1)
            cluster.brokers[other].start()
            [abandoned] = pipeline.wedged
            abandoned.join(30)
            assert not abandoned.is_alive(), "the abandoned call still waits after a broker state change"
            assert isinstance(abandoned.outcome.get("error"), KafkaException), abandoned.outcome
            print(f"the abandoned call returned {abandoned.outcome['error']}")
            wait_until(lambda: full_isr(cluster, internal), 60, 0.2, "every partition back in full ISR")
        group.close()
        assert committed_offsets(cluster.bootstrap)[0] == int(expected[-1])
        assert read_committed(cluster.bootstrap, "B", PARTITIONS)[part] == expected
    finally:
        cluster.kill()
