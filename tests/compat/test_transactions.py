"""Transactions end to end with real clients: each transactional producer (confluent-kafka,
kafka-python, aiokafka) commits one batch of transactions and aborts another; read_committed
consumers of each client (and kcat) see exactly the committed records, in order, and
read_uncommitted ones see both. Zombie fencing: a second producer with the same
transactional id fences the first, whose later writes never become visible."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTP
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTP

from .helpers import create_topic

pytestmark = pytest.mark.timeout(180)

COMMITTED = [f"c{t}-{i}".encode() for t in range(3) for i in range(20)]
ABORTED = [f"a{t}-{i}".encode() for t in range(2) for i in range(20)]


def _interleaved() -> list[tuple[bool, list[bytes]]]:
    """(commit?, values) per transaction: c0 a0 c1 a1 c2."""
    out = []
    for t in range(3):
        out.append((True, COMMITTED[t * 20:(t + 1) * 20]))
        if t < 2:
            out.append((False, ABORTED[t * 20:(t + 1) * 20]))
    return out


def expected_uncommitted() -> list[bytes]:
    return [v for _commit, values in _interleaved() for v in values]


# -- producers ----------------------------------------------------------------------------------

def produce_confluent(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"ck-{topic}", "linger.ms": 5})
    p.init_transactions(30)
    for commit, values in _interleaved():
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v)
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(30)  # (librdkafka purges what it has not sent on abort: send it first)
            p.abort_transaction(30)


def produce_kafka_python(bootstrap: str, topic: str) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-{topic}", linger_ms=5)
    p.init_transactions()
    for commit, values in _interleaved():
        p.begin_transaction()
        for v in values:
            p.send(topic, value=v)
        p.flush(30)
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()
    p.close(10)


async def produce_aiokafka(bootstrap: str, topic: str) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"aio-{topic}", linger_ms=5)
    await p.start()
    try:
        for commit, values in _interleaved():
            await p.begin_transaction()
            futures = [await p.send(topic, value=v) for v in values]
            await asyncio.gather(*futures)
            if commit:
                await p.commit_transaction()
            else:
                await p.abort_transaction()
    finally:
        await p.stop()


# -- consumers ----------------------------------------------------------------------------------

def consume_confluent(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}-{isolation}", "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while True:
            m = c.poll(10)
            assert m is not None, "no end-of-partition event within 10 s"
            if m.error():
                assert m.error().code() == -191, m.error()
                return out
            out.append(m.value())
    finally:
        c.close()


def consume_kafka_python(bootstrap: str, topic: str, isolation: str, n: int) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      isolation_level=isolation, consumer_timeout_ms=5000)
    tp = KpTP(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out = [m.value for m in c]
    c.close()
    return out


async def consume_aiokafka(bootstrap: str, topic: str, isolation: str, n: int) -> list[bytes]:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         isolation_level=isolation)
    await c.start()
    tp = AioTP(topic, 0)
    c.assign([tp])
    await c.seek_to_beginning(tp)
    out: list[bytes] = []
    try:
        async with asyncio.timeout(20):
            while len(out) < n:
                batch = await c.getmany(tp, timeout_ms=500)
                out.extend(m.value for m in batch.get(tp, []))
        # nothing more arrives
        extra = await c.getmany(tp, timeout_ms=1000)
        out.extend(m.value for m in extra.get(tp, []))
    finally:
        await c.stop()
    return out


def consume_kcat(kcat_path: str, bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    result = subprocess.run([kcat_path, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                             "-X", f"isolation.level={isolation}", "-f", "%s\n"],
                            capture_output=True, timeout=60, check=True)
    return [line for line in result.stdout.split(b"\n") if line]


def check_every_consumer(bootstrap: str, topic: str, kcat_path: str) -> None:
    everything = expected_uncommitted()
    assert consume_confluent(bootstrap, topic, "read_committed") == COMMITTED
    assert consume_confluent(bootstrap, topic, "read_uncommitted") == everything
    assert consume_kafka_python(bootstrap, topic, "read_committed", len(COMMITTED)) == COMMITTED
    assert consume_kafka_python(bootstrap, topic, "read_uncommitted", len(everything)) == everything
    assert asyncio.run(consume_aiokafka(bootstrap, topic, "read_committed", len(COMMITTED))) == COMMITTED
    assert asyncio.run(consume_aiokafka(bootstrap, topic, "read_uncommitted", len(everything))) == everything
    assert consume_kcat(kcat_path, bootstrap, topic, "read_committed") == COMMITTED
    assert consume_kcat(kcat_path, bootstrap, topic, "read_uncommitted") == everything


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_commit_and_abort_seen_by_every_consumer(threaded_broker, kcat_path, client):
    topic = f"txn-{client}"
    create_topic(threaded_broker, topic)
    if client == "confluent":
        produce_confluent(threaded_broker.bootstrap, topic)
    elif client == "kafka-python":
        produce_kafka_python(threaded_broker.bootstrap, topic)
    else:
        asyncio.run(produce_aiokafka(threaded_broker.bootstrap, topic))
    check_every_consumer(threaded_broker.bootstrap, topic, kcat_path)


def test_zombie_producer_is_fenced_and_its_writes_never_show(threaded_broker):
    topic = "txn-zombie"
    create_topic(threaded_broker, topic)
    bootstrap = threaded_broker.bootstrap
    old = Producer({"bootstrap.servers": bootstrap, "transactional.id": "zombie", "linger.ms": 0})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"old-1")
    old.flush(30)
    new = Producer({"bootstrap.servers": bootstrap, "transactional.id": "zombie", "linger.ms": 0})
    new.init_transactions(30)  # fences the old one and aborts its open transaction
    new.begin_transaction()
    new.produce(topic, value=b"new-1")
    new.commit_transaction(30)
    # the old producer's next send and its commit fail with the fencing error
    with pytest.raises(KafkaException) as raised:
        old.produce(topic, value=b"old-2")
        old.flush(10)
        old.commit_transaction(10)
    assert raised.value.args[0].fatal() or "fenced" in str(raised.value).lower(), raised.value
    assert consume_confluent(bootstrap, topic, "read_committed") == [b"new-1"]


def _metrics(broker) -> dict[tuple[str, tuple], float]:
    def collect():
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in broker.server.collector.collect() for s in family.samples}
    return broker.call(collect)


def test_metrics_count_commits_aborts_and_the_lso_lag(threaded_broker):
    topic = "txn-metrics"
    create_topic(threaded_broker, topic)
    bootstrap = threaded_broker.bootstrap
    produce_confluent(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "metrics-open", "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"open")
    p.flush(30)
    m = _metrics(threaded_broker)
    labels = (("partition", "0"), ("topic", topic))
    assert m[("kafka_server_transaction_coordinator_commits_total", ())] == 3
    assert m[("kafka_server_transaction_coordinator_aborts_total", ())] == 2
    assert m[("kafka_server_transaction_coordinator_ongoing", ())] == 1
    assert m[("kafka_cluster_partition_last_stable_offset_lag", labels)] == 1  # the open record
    assert m[("kafka_server_transaction_marker_latency_p99_seconds", ())] > 0
    # the commit latency histogram: each of the five EndTxns, from its arrival to its markers acknowledged
    assert m[("kafka_server_transaction_end_txn_to_markers_seconds_count", ())] == 5
    assert 0 < m[("kafka_server_transaction_end_txn_to_markers_seconds_sum", ())] < 5 * 30
    p.commit_transaction(30)
    m = _metrics(threaded_broker)
    assert m[("kafka_cluster_partition_last_stable_offset_lag", labels)] == 0
    assert m[("kafka_server_transaction_coordinator_ongoing", ())] == 0


def test_the_transaction_keys_reach_the_coordinator(tmp_path):
    """transaction.max.timeout.ms and transaction.state.log.num.partitions set on the broker are
    the coordinator's (they were once warned about as unknown keys and ignored): a producer
    asking for more than the maximum gets INVALID_TRANSACTION_TIMEOUT, and __transaction_state
    has the partitions asked for."""
    from confluent_kafka.admin import AdminClient

    from tests.support import ThreadedBroker
    broker = ThreadedBroker(tmp_path / "data", overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0", "transaction.max.timeout.ms": "5000",
        "transaction.state.log.num.partitions": "3"}).start()
    try:
        too_long = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "long",
                             "transaction.timeout.ms": 6000})
        with pytest.raises(KafkaException) as exc:
            too_long.init_transactions(30)
        assert exc.value.args[0].code() == 50  # INVALID_TRANSACTION_TIMEOUT
        ok = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ok", "transaction.timeout.ms": 5000})
        ok.init_transactions(30)
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("__transaction_state", timeout=30)
        assert len(md.topics["__transaction_state"].partitions) == 3
    finally:
        broker.stop()
