"""The idempotent producer end to end: real clients with idempotence on, duplicate detection
over raw protocol, state that survives kill -9, librdkafka through a broker restart."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from kafka import KafkaProducer

from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch

from .helpers import assert_same_records, create_topic, sample_records, stored_batches
from .test_aiokafka import consume as aiokafka_consume
from .test_kafka_python import consume as kafka_python_consume
from .test_restart import consume_all


def test_kafka_python_default_producer_is_idempotent(threaded_broker, tmp_path):
    rows = sample_records()
    producer = KafkaProducer(bootstrap_servers=threaded_broker.bootstrap, linger_ms=5)  # defaults: idempotent, acks=all
    futures = [producer.send("kp-idem", value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in rows]
    producer.flush(60)
    producer.close(10)
    assert [f.get(10).offset for f in futures] == list(range(len(rows)))
    batches = stored_batches(tmp_path / "data", "kp-idem", 0)
    assert {b.producer_id for b in batches} != {-1} and all(b.base_sequence >= 0 for b in batches)
    assert_same_records(rows, kafka_python_consume(threaded_broker.bootstrap, "kp-idem", len(rows)))


def test_confluent_idempotent_producer(threaded_broker, tmp_path):
    rows = sample_records()
    errors = []
    producer = Producer({"bootstrap.servers": threaded_broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for k, v, h, ts in rows:
        producer.produce("ck-idem", value=v, key=k, headers=h or None, timestamp=ts,
                         on_delivery=lambda err, msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0 and errors == []
    batches = stored_batches(tmp_path / "data", "ck-idem", 0)
    assert all(b.producer_id >= 0 for b in batches)
    sequences = [(b.base_sequence, b.records_count) for b in batches]
    assert all(a[0] + a[1] == b[0] for a, b in zip(sequences, sequences[1:]))  # gapless sequences
    assert sum(b.records_count for b in batches) == len(rows)


async def test_aiokafka_idempotent_producer(threaded_broker, tmp_path):
    rows = sample_records()
    producer = AIOKafkaProducer(bootstrap_servers=threaded_broker.bootstrap, enable_idempotence=True, linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send("aio-idem", value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in rows]
        metadata = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    assert [m.offset for m in metadata] == list(range(len(rows)))
    assert all(b.producer_id >= 0 for b in stored_batches(tmp_path / "data", "aio-idem", 0))
    assert_same_records(rows, await aiokafka_consume(threaded_broker.bootstrap, "aio-idem", len(rows)))


async def init_producer(conn: BrokerConnection) -> tuple[int, int]:
    resp = await conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


async def produce_batch(conn, topic, pid, epoch, seq, n, acks=-1):
    batch = build_batch([Record(value=f"{seq + i}".encode(), timestamp=1_700_000_000_000) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    [(_t, [(_p, error, base, _lat, _lso)])] = await conn.produce(acks, 5000, [(topic, [(0, batch)])])
    return error, base


async def test_duplicate_sequence_is_written_once_and_answered_with_the_first_offset(threaded_broker, tmp_path):
    create_topic(threaded_broker, "dup")
    conn = BrokerConnection("127.0.0.1", threaded_broker.port)
    await conn.connect()
    try:
        pid, epoch = await init_producer(conn)
        assert await produce_batch(conn, "dup", pid, epoch, 0, 10) == (ErrorCode.NONE, 0)
        assert await produce_batch(conn, "dup", pid, epoch, 10, 5) == (ErrorCode.NONE, 10)
        # The same request again (a retry after a lost response): same answer, nothing written.
        assert await produce_batch(conn, "dup", pid, epoch, 10, 5) == (ErrorCode.NONE, 10)
        assert await produce_batch(conn, "dup", pid, epoch, 0, 10) == (ErrorCode.NONE, 0)
        batches = stored_batches(tmp_path / "data", "dup", 0)
        assert [(b.base_offset, b.records_count) for b in batches] == [(0, 10), (10, 5)]
        # A gap in the sequence, a stale epoch, an unknown producer starting past 0:
        assert (await produce_batch(conn, "dup", pid, epoch, 17, 1))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await produce_batch(conn, "dup", pid, epoch + 1, 0, 2)) == (ErrorCode.NONE, 15)
        assert (await produce_batch(conn, "dup", pid, epoch, 15, 1))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        other, _ = await init_producer(conn)
        assert other != pid
        # (an unknown producer past sequence 0 is accepted, as by Kafka 2.5+: KIP-360)
        assert (await produce_batch(conn, "dup", other, 0, 3, 1)) == (ErrorCode.NONE, 17)
        assert sum(b.records_count for b in stored_batches(tmp_path / "data", "dup", 0)) == 18
    finally:
        conn.close()


async def test_state_survives_kill_9_and_the_resent_last_batch_is_a_duplicate(broker_process):
    broker = broker_process().start()
    conn = BrokerConnection("127.0.0.1", broker.port)
    await conn.connect()
    created = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": "crash-idem", "num_partitions": 1, "replication_factor": 1}]})
    assert created.topics[0].error_code == 0
    pid, epoch = await init_producer(conn)
    offsets = []
    for i in range(20):
        error, base = await produce_batch(conn, "crash-idem", pid, epoch, i * 10, 10)
        assert error == ErrorCode.NONE
        offsets.append(base)
    conn.close()
    broker.signal(signal.SIGKILL)
    broker.proc.wait(10)
    broker.start()
    conn = BrokerConnection("127.0.0.1", broker.port)
    await conn.connect()
    try:
        assert await produce_batch(conn, "crash-idem", pid, epoch, 190, 10) == (ErrorCode.NONE, offsets[-1])
        assert await produce_batch(conn, "crash-idem", pid, epoch, 200, 10) == (ErrorCode.NONE, 200)
        assert [int(v) for v in consume_all(broker.bootstrap, "crash-idem")] == list(range(210))
    finally:
        conn.close()
    # A producer id handed out after the restart is new: the block was persisted before use.
    conn = BrokerConnection("127.0.0.1", broker.port)
    await conn.connect()
    try:
        assert (await init_producer(conn))[0] > pid
    finally:
        conn.close()


@pytest.mark.timeout(180)
def test_librdkafka_idempotent_producer_survives_a_broker_restart(broker_process):
    broker = broker_process().start()
    n = 30_000
    delivered, errors = [], []
    restart_at = threading.Event()

    def produce():
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                      "message.timeout.ms": 120000, "reconnect.backoff.max.ms": 500})
        for i in range(n):
            while True:
                try:
                    p.produce("restart-idem", value=str(i).encode(),
                              on_delivery=lambda err, msg: (errors if err else delivered).append(err or msg.offset()))
                    break
                except BufferError:
                    p.poll(0.05)
            if i == n // 3:
                restart_at.set()
            if i % 200 == 0:
                p.poll(0)
                time.sleep(0.002)  # keep the stream going while the broker restarts
        assert p.flush(120) == 0

    thread = threading.Thread(target=produce)
    thread.start()
    assert restart_at.wait(60)
    broker.signal(signal.SIGKILL)
    broker.proc.wait(10)
    broker.start()
    thread.join(150)
    assert not thread.is_alive()
    assert errors == []
    assert len(delivered) == n
    values = [int(v) for v in consume_all(broker.bootstrap, "restart-idem")]
    assert values == list(range(n)), "duplicates or gaps after the restart"
