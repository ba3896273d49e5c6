"""confluent-kafka 2.16 (librdkafka 2.16): Producer, Consumer.assign, each codec, offsets_for_times."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from protocol.compression import Compression

from .helpers import BASE_TS, assert_same_records, create_topic, sample_records, stored_batches


def produce(bootstrap, topic, rows, **config):
    errors, offsets = [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for k, v, h, ts in rows:
        while True:
            try:
                producer.produce(topic, value=v, key=k, headers=h or None, timestamp=ts, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return offsets


def consume(bootstrap, topic, n):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-assign", "enable.auto.commit": False,
                         "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    try:
        empty_polls = 0
        while len(got) < n and empty_polls < 30:
            msgs = consumer.consume(num_messages=1000, timeout=1.0)
            empty_polls = 0 if msgs else empty_polls + 1
            for m in msgs:
                assert m.error() is None, m.error()
                got.append((m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])], m.timestamp()[1]))
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_round_trip_10000_records(threaded_broker, acks):
    rows = sample_records()
    offsets = produce(threaded_broker.bootstrap, "ck", rows, acks=acks)
    if acks != "0":
        assert sorted(offsets) == list(range(len(rows)))
    assert_same_records(rows, consume(threaded_broker.bootstrap, "ck", len(rows)))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_round_trip(threaded_broker, tmp_path, codec):
    topic = f"ck-{codec}"
    rows = sample_records(3000, tag=codec)
    # librdkafka sends a batch uncompressed when compressing does not shrink it, as with a batch
    # of one record cut off by timing: while an auto-created topic has no leader yet
    # (LEADER_NOT_AVAILABLE, as Kafka answers) librdkafka may send the first record alone as it
    # moves its queued records over. So: an existing topic, and a linger that spans the produce loop.
    create_topic(threaded_broker, topic)
    produce(threaded_broker.bootstrap, topic, rows, **{"compression.type": codec, "linger.ms": 1000})
    batches = stored_batches(tmp_path / "data", topic, 0)
    assert batches and {b.compression for b in batches} == {Compression[codec.upper()]}
    assert_same_records(rows, consume(threaded_broker.bootstrap, topic, len(rows)))


def test_offsets_for_times_agree_with_the_broker(threaded_broker):
    create_topic(threaded_broker, "ck-times")
    produce(threaded_broker.bootstrap, "ck-times", sample_records(500))
    consumer = Consumer({"bootstrap.servers": threaded_broker.bootstrap, "group.id": "compat-times"})
    try:
        for i in (0, 1, 250, 499):
            [found] = consumer.offsets_for_times([TopicPartition("ck-times", 0, BASE_TS + i * 10)], timeout=10)
            assert found.offset == i
            [between] = consumer.offsets_for_times([TopicPartition("ck-times", 0, BASE_TS + i * 10 - 7)], timeout=10)
            assert between.offset == i
        [none] = consumer.offsets_for_times([TopicPartition("ck-times", 0, BASE_TS + 5000)], timeout=10)
        assert none.offset == -1  # librdkafka's OFFSET_END: no such record
        low, high = consumer.get_watermark_offsets(TopicPartition("ck-times", 0), timeout=10)
        assert (low, high) == (0, 500)
    finally:
        consumer.close()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_admin_client_against_a_single_node(threaded_broker):
    """confluent-kafka's AdminClient: every request goes to the node Metadata names as controller
    (the combined node itself), which hands it to its controller, over its listener."""
    from confluent_kafka import ElectionType, KafkaException
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                       NewTopic, ResourceType)

    admin = AdminClient({"bootstrap.servers": threaded_broker.bootstrap})

    def wait(futures):
        return {k: f.result(timeout=30) for k, f in futures.items()}

    wait(admin.create_topics([NewTopic("adm", 1, 1, config={"retention.ms": "3600000"})]))
    wait(admin.create_partitions([NewPartitions("adm", 3)]))
    assert sorted(admin.list_topics("adm", timeout=10).topics["adm"].partitions) == [0, 1, 2]
    with pytest.raises(KafkaException) as shrink:
        wait(admin.create_partitions([NewPartitions("adm", 2)]))
    assert shrink.value.args[0].name() == "INVALID_PARTITIONS"
    topic = ConfigResource(ResourceType.TOPIC, "adm")
    wait(admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, "adm", incremental_configs=[
        ConfigEntry("max.message.bytes", "5000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])]))
    [configs] = wait(admin.describe_configs([topic])).values()
    assert configs["max.message.bytes"].value == "5000" and configs["retention.ms"].is_default
    log = threaded_broker.call(lambda: threaded_broker.server.replica_manager.get_partition("adm", 2).log)
    assert log.config.max_message_bytes == 5000
    wait(admin.alter_configs([ConfigResource(ResourceType.TOPIC, "adm", set_config={"segment.ms": "600000"})]))
    [configs] = wait(admin.describe_configs([topic])).values()
    assert configs["segment.ms"].value == "600000" and configs["max.message.bytes"].is_default
    assert log.config.segment_ms == 600000 and log.config.max_message_bytes != 5000
    # Preferred leaders lead already: ElectLeaders answers ELECTION_NOT_NEEDED, through the controller.
    from confluent_kafka import TopicPartition as TP
    result = admin.elect_leaders(ElectionType.PREFERRED, [TP("adm", 0)]).result(timeout=30)
    assert [(tp.topic, tp.partition, err.name() if err else None) for tp, err in result.items()] == [
        ("adm", 0, "ELECTION_NOT_NEEDED")]
    wait(admin.delete_topics(["adm"]))
    assert "adm" not in admin.list_topics(timeout=10).topics
