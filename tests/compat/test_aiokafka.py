"""aiokafka 0.14: AIOKafkaProducer and an assigned AIOKafkaConsumer, each codec, offsets_for_times."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from protocol.compression import Compression

from .helpers import BASE_TS, assert_same_records, create_topic, sample_records, stored_batches


async def produce(bootstrap, topic, rows, **config):
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **config)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in rows]
        return await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def consume(bootstrap, topic, n):
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    got = []
    try:
        async with asyncio.timeout(30):
            while len(got) < n:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for msg in batch.get(tp, []):
                    got.append((msg.key, msg.value, list(msg.headers), msg.timestamp))
    finally:
        await consumer.stop()
    return got


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_round_trip_10000_records(threaded_broker, acks):
    rows = sample_records()
    metadata = await produce(threaded_broker.bootstrap, "aio", rows, acks=acks)
    if acks != 0:
        assert [m.offset for m in metadata] == list(range(len(rows)))
    assert_same_records(rows, await consume(threaded_broker.bootstrap, "aio", len(rows)))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_compressed_round_trip(threaded_broker, tmp_path, codec):
    topic = f"aio-{codec}"
    rows = sample_records(3000, tag=codec)
    await produce(threaded_broker.bootstrap, topic, rows, acks=1, compression_type=codec)
    batches = stored_batches(tmp_path / "data", topic, 0)
    assert batches and {b.compression for b in batches} == {Compression[codec.upper()]}
    assert_same_records(rows, await consume(threaded_broker.bootstrap, topic, len(rows)))


async def test_offsets_for_times_agree_with_the_broker(threaded_broker):
    create_topic(threaded_broker, "aio-times")
    await produce(threaded_broker.bootstrap, "aio-times", sample_records(500), acks=1)
    consumer = AIOKafkaConsumer(bootstrap_servers=threaded_broker.bootstrap, group_id=None)
    await consumer.start()
    tp = TopicPartition("aio-times", 0)
    try:
        for i in (0, 1, 250, 499):
            found = (await consumer.offsets_for_times({tp: BASE_TS + i * 10}))[tp]
            assert (found.offset, found.timestamp) == (i, BASE_TS + i * 10)
            assert (await consumer.offsets_for_times({tp: BASE_TS + i * 10 - 3}))[tp].offset == i
        assert (await consumer.offsets_for_times({tp: BASE_TS + 5000}))[tp] is None
        assert (await consumer.end_offsets([tp]))[tp] == 500
    finally:
        await consumer.stop()
