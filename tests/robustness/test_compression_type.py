"""compression.type (topic-level, and the broker-level default): Kafka's six values are
accepted, and a batch arriving in another codec is re-compressed by the LogValidator into
the topic's codec — same records, offsets assigned to the rebuilt batch (issue 12 §6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from protocol.compression import Compression
from protocol.records import iter_batch_headers
from tests.support import ThreadedBroker

from .frames import Raw, good_batch, read_log

CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def stored_codecs(log_dir: Path, topic: str) -> list[Compression]:
    out = []
    for path in sorted((Path(log_dir) / f"{topic}-0").glob("*.log")):
        data = path.read_bytes()
        out += [h.compression for _pos, h in iter_batch_headers(data)]
    return out


def wait(futures):
    return {k: f.result(timeout=30) for k, f in futures.items()}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = ThreadedBroker(tmp_path_factory.mktemp("compression") / "data",
                       overrides={"listeners": "PLAINTEXT://127.0.0.1:0"}).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def log_dir(broker) -> Path:
    return Path(broker.server.config.log_dirs[0])


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd", "producer"])
def test_each_compression_type_is_accepted_and_applied(broker, admin, target):
    topic = f"ct-{target}"
    wait(admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": target})]))
    [configs] = wait(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])).values()
    assert configs["compression.type"].value == target
    raw = Raw(broker.port)
    try:
        sent = [good_batch(4, value=b"plain-", ts=1000), good_batch(3, value=b"lz4-", ts=2000, compression=Compression.LZ4),
                good_batch(2, value=b"zstd-", ts=3000, compression=Compression.ZSTD)]
        for batch in sent:
            assert raw.produce({(topic, 0): batch}) == {(topic, 0): 0}
    finally:
        raw.close()
    expected = [Compression.NONE, Compression.LZ4, Compression.ZSTD] if target == "producer" else [CODECS[target]] * 3
    assert stored_codecs(log_dir(broker), topic) == expected
    got = read_log(log_dir(broker), topic, 0)  # offsets contiguous, every record decodes
    assert [base for base, _ in got] == [0, 4, 7]
    assert [(r.value, r.timestamp) for _, recs in got for r in recs] == (
        [(b"plain-%d" % i, 1000 + i) for i in range(4)] + [(b"lz4-%d" % i, 2000 + i) for i in range(3)]
        + [(b"zstd-%d" % i, 3000 + i) for i in range(2)])


def test_unknown_compression_type_is_invalid_config(admin):
    with pytest.raises(KafkaException) as exc:
        wait(admin.create_topics([NewTopic("ct-brotli", 1, 1, config={"compression.type": "brotli"})]))
    assert exc.value.args[0].name() == "INVALID_CONFIG"


def test_real_clients_through_a_gzip_topic_and_a_live_change(broker, admin):
    topic = "ct-live"
    wait(admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": "gzip"})]))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4", "linger.ms": 50})
    for i in range(100):
        producer.produce(topic, value=b"value-%03d" % i, key=b"k%d" % (i % 7), partition=0, headers=[("h", b"%d" % i)])
    assert producer.flush(30) == 0
    assert set(stored_codecs(log_dir(broker), topic)) == {Compression.GZIP}
    wait(admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("compression.type", "uncompressed", incremental_operation=AlterConfigOpType.SET)])]))
    for i in range(100, 150):
        producer.produce(topic, value=b"value-%03d" % i, key=b"k%d" % (i % 7), partition=0, headers=[("h", b"%d" % i)])
    assert producer.flush(30) == 0
    assert stored_codecs(log_dir(broker), topic)[-1] == Compression.NONE
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        import time
        deadline = time.monotonic() + 60
        while len(got) < 150 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.offset(), msg.key(), msg.value(), msg.headers()))
    finally:
        consumer.close()
    assert got == [(i, b"k%d" % (i % 7), b"value-%03d" % i, [("h", b"%d" % i)]) for i in range(150)]


def test_broker_level_default(tmp_path):
    b = ThreadedBroker(tmp_path / "data", overrides={"listeners": "PLAINTEXT://127.0.0.1:0",
                                                     "compression.type": "zstd"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        wait(admin.create_topics([NewTopic("ct-default", 1, 1)]))
        raw = Raw(b.port)
        try:
            assert raw.produce({("ct-default", 0): good_batch(3)}) == {("ct-default", 0): 0}
        finally:
            raw.close()
        assert stored_codecs(log_dir(b), "ct-default") == [Compression.ZSTD]
    finally:
        b.stop()
