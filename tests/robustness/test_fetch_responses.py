"""Fetch answers a partition error with empty records, never null (length -1): librdkafka
rejects a whole response holding a -1 MessageSetSize and its consumer never recovers
(issue 12 §6). Raw frames for the bytes, confluent-kafka (librdkafka) for the consumer."""

from __future__ import annotations

import struct

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.errors import ErrorCode
from protocol.messages import APIS
from tests.compat.helpers import create_topic

from .frames import Raw

TOPIC = "fetched"


def fetch_body(version: int, partitions: list[tuple[str, int, int]]) -> bytes:
    return APIS[1].request.build(version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": t, "partitions": [{"partition": p, "fetch_offset": off, "current_leader_epoch": -1,
                                                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}
                   for t, p, off in partitions]})


def records_lengths(version: int, frame: bytes) -> list[tuple[int, int]]:
    """(error_code, records length as sent) of each partition, read from the raw bytes (v11)."""
    assert version == 11
    pos = 4 + 4 + 2 + 4  # correlation id, throttle, error, session id
    out = []
    (ntopics,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    for _ in range(ntopics):
        (n,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + n
        (nparts,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        for _ in range(nparts):
            _p, error = struct.unpack_from(">ih", frame, pos)
            pos += 4 + 2 + 8 + 8 + 8
            (naborted,) = struct.unpack_from(">i", frame, pos)
            pos += 4 + max(naborted, 0) * 16
            pos += 4  # preferred read replica
            (size,) = struct.unpack_from(">i", frame, pos)
            pos += 4 + max(size, 0)
            out.append((error, size))
    return out


def test_partition_errors_carry_empty_records_not_null(threaded_broker):
    create_topic(threaded_broker, TOPIC)
    raw = Raw(threaded_broker.port)
    try:
        raw.request(1, 11, fetch_body(11, [(TOPIC, 0, 1000), (TOPIC, 7, 0), ("no-such-topic", 0, 0), (TOPIC, 0, 0)]))
        got = records_lengths(11, raw.response())
    finally:
        raw.close()
    assert got == [(ErrorCode.OFFSET_OUT_OF_RANGE, 0), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0),
                   (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0), (0, 0)]


@pytest.mark.timeout(120)
def test_librdkafka_consumer_recovers_from_an_out_of_range_offset(threaded_broker):
    create_topic(threaded_broker, TOPIC)
    producer = Producer({"bootstrap.servers": threaded_broker.bootstrap})
    for i in range(5):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": threaded_broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 1000)])  # out of range: the broker answers OFFSET_OUT_OF_RANGE
        values = []
        import time
        deadline = time.monotonic() + 60
        while len(values) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert not msg.error() or msg.error().code() < 0, msg.error()
            if not msg.error():
                values.append(msg.value())
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(5)]
