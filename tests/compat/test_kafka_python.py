"""kafka-python 3.0.12: KafkaProducer with acks 0/1/all and each codec, KafkaConsumer with
assign + seek_to_beginning, offsets_for_times."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from protocol.compression import Compression

from .helpers import BASE_TS, assert_same_records, create_topic, sample_records, stored_batches


def produce(bootstrap, topic, rows, **config):
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **config)
    futures = [producer.send(topic, value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in rows]
    producer.flush(60)
    producer.close(10)
    return [f.get(10) for f in futures]


def consume(bootstrap, topic, n, partition=0):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=20_000)
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for msg in consumer:
        got.append((msg.key, msg.value, [(k, v) for k, v in msg.headers], msg.timestamp))
        if len(got) == n:
            break
    consumer.close()
    return got


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_round_trip_10000_records(threaded_broker, acks):
    rows = sample_records()
    metadata = produce(threaded_broker.bootstrap, "kp", rows, acks=acks, enable_idempotence=False)
    if acks != 0:
        assert [m.offset for m in metadata] == list(range(len(rows)))
    assert_same_records(rows, consume(threaded_broker.bootstrap, "kp", len(rows)))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_round_trip(threaded_broker, tmp_path, codec):
    topic = f"kp-{codec}"
    rows = sample_records(3000, tag=codec)
    produce(threaded_broker.bootstrap, topic, rows, acks=1, enable_idempotence=False, compression_type=codec)
    batches = stored_batches(tmp_path / "data", topic, 0)
    # kafka-python sends a batch uncompressed when compressing it would not shrink it
    # (DefaultRecordBatchBuilder._maybe_compress); the broker stores whatever was sent.
    assert {b.compression for b in batches} <= {Compression[codec.upper()], Compression.NONE}
    compressed = sum(b.records_count for b in batches if b.compression != Compression.NONE)
    assert compressed >= 0.9 * len(rows)
    assert_same_records(rows, consume(threaded_broker.bootstrap, topic, len(rows)))


def test_offsets_for_times_agree_with_the_broker(threaded_broker):
    create_topic(threaded_broker, "kp-times")
    rows = sample_records(500)
    produce(threaded_broker.bootstrap, "kp-times", rows, acks=1, enable_idempotence=False)
    consumer = KafkaConsumer(bootstrap_servers=threaded_broker.bootstrap, group_id=None)
    tp = TopicPartition("kp-times", 0)
    try:
        for i in (0, 1, 137, 499):
            found = consumer.offsets_for_times({tp: BASE_TS + i * 10})[tp]
            assert (found.offset, found.timestamp) == (i, BASE_TS + i * 10)
            between = consumer.offsets_for_times({tp: BASE_TS + i * 10 - 5})[tp]
            assert between.offset == i
        assert consumer.offsets_for_times({tp: BASE_TS + 10 * 500})[tp] is None
        assert consumer.beginning_offsets([tp])[tp] == 0
        assert consumer.end_offsets([tp])[tp] == 500
    finally:
        consumer.close()
