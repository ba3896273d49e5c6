"""The small admin APIs of issue 27, through real clients against a broker on a free port:
DeleteRecords (21) with confluent-kafka's ``delete_records`` (the low watermark moves, earlier
offsets answer OFFSET_OUT_OF_RANGE, the segments wholly below it leave the disk within
log.retention.check.interval.ms + file.delete.delay.ms, beyond the high watermark is
OFFSET_OUT_OF_RANGE and changes nothing), DescribeLogDirs (35) with kafka-python's
``describe_log_dirs`` (sizes agree with the files on disk), DescribeCluster (60) with
kafka-python's and confluent-kafka's ``describe_cluster``."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from protocol.errors import ErrorCode
from tests.support import ThreadedBroker, wait_until

RETENTION_CHECK_MS = 300
DELETE_DELAY_MS = 300


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = ThreadedBroker(tmp_path_factory.mktemp("cluster-admin") / "data",
                       overrides={"listeners": "PLAINTEXT://127.0.0.1:0", "broker.rack": "rack-a",
                                  "log.retention.check.interval.ms": str(RETENTION_CHECK_MS)}).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(admin, partitions: int = 1, **configs) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    for f in admin.create_topics([NewTopic(name, partitions, 1, config={k: str(v) for k, v in configs.items()})]
                                 ).values():
        f.result(30)
    return name


def produce(broker, topic: str, n: int, partitions: int = 1) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 20})
    for i in range(n):
        p.produce(topic, f"record-{i:05d}".encode() * 4, partition=i % partitions)
    assert p.flush(30) == 0


def low_and_high(broker, topic: str, partition: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


def segment_bases(broker, topic: str) -> list[int]:
    """Base offsets of the segments on disk, ``.deleted`` ones included."""
    d = Path(broker.node.config.log_dirs[0]) / f"{topic}-0"
    return sorted({int(f.name.split(".")[0]) for f in d.iterdir() if f.name.endswith((".log", ".log.deleted"))})


def test_delete_records_moves_the_low_watermark_and_its_segments_leave_the_disk(broker, admin):
    topic = create(admin, **{"segment.bytes": 2048, "file.delete.delay.ms": DELETE_DELAY_MS})
    produce(broker, topic, 1000)
    assert low_and_high(broker, topic) == (0, 1000)
    bases = segment_bases(broker, topic)
    assert len(bases) > 5, bases

    [(tp, future)] = admin.delete_records([TopicPartition(topic, 0, 500)]).items()
    assert future.result(30).low_watermark == 500
    assert low_and_high(broker, topic) == (500, 1000)

    # an earlier offset is out of range now; the one asked for is the first record read
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, 100)])
        m = c.poll(10)
        assert m is not None and m.error() is not None and m.error().code() == KafkaError._AUTO_OFFSET_RESET, m
        assert "out of range" in m.error().str().lower(), m.error()
        c.assign([TopicPartition(topic, 0, 500)])
        m = c.poll(10)
        assert m is not None and m.error() is None and m.offset() == 500, m
    finally:
        c.close()

    # the segments wholly below 500 go: the retention pass renames them .deleted, the files go
    # file.delete.delay.ms later; the segment holding offset 500 stays
    keep = max(b for b in bases if b <= 500)
    started = time.monotonic()
    wait_until(lambda: segment_bases(broker, topic)[0] == keep, timeout_s=10, what="the segments below 500 deleted")
    assert time.monotonic() - started < (RETENTION_CHECK_MS + DELETE_DELAY_MS) / 1000 + 2
    assert segment_bases(broker, topic) == [b for b in bases if b >= keep]


def test_delete_records_beyond_the_high_watermark_is_offset_out_of_range(broker, admin):
    topic = create(admin)
    produce(broker, topic, 50)
    [future] = admin.delete_records([TopicPartition(topic, 0, 51)]).values()
    with pytest.raises(KafkaException) as exc:
        future.result(30)
    assert exc.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert low_and_high(broker, topic) == (0, 50)
    # the high watermark itself is allowed: everything goes
    [future] = admin.delete_records([TopicPartition(topic, 0, 50)]).values()
    assert future.result(30).low_watermark == 50
    assert low_and_high(broker, topic) == (50, 50)


async def test_delete_records_of_unknown_partitions_and_the_high_watermark_sentinel(broker, admin):
    topic = create(admin)
    produce(broker, topic, 30)
    conn = BrokerConnection("127.0.0.1", broker.port, client_id="test")
    await conn.connect()
    try:
        resp = await conn.request(ApiKey.DELETE_RECORDS, {"topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": -1}, {"partition_index": 7, "offset": 1}]},
            {"name": "no-such-topic", "partitions": [{"partition_index": 0, "offset": 1}]}],
            "timeout_ms": 10000}, version=2)
    finally:
        conn.close()
    rows = {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in resp.topics for p in t.partitions}
    assert rows == {(topic, 0): (0, 30), (topic, 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
                    ("no-such-topic", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}


def test_describe_log_dirs_sizes_agree_with_the_files(broker, admin):
    topic = create(admin, partitions=3, **{"segment.bytes": 4096})
    produce(broker, topic, 600, partitions=3)
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [answer] = kadmin.describe_log_dirs()
    finally:
        kadmin.close()
    log_dir = Path(broker.node.config.log_dirs[0]).absolute()
    [result] = answer["log_dirs"]
    assert result["error_code"] == 0 and result["log_dir"] == str(log_dir)
    assert 0 < result["usable_bytes"] <= result["total_bytes"]
    [mine] = [t for t in result["topics"] if t["name"] == topic]
    assert sorted(p["partition_index"] for p in mine["partitions"]) == [0, 1, 2]
    for p in mine["partitions"]:
        d = log_dir / f"{topic}-{p['partition_index']}"
        logs = sum(f.stat().st_size for f in d.glob("*.log"))
        indexes = sum(f.stat().st_size for f in d.iterdir() if f.suffix in (".index", ".timeindex"))
        assert p["partition_size"] == logs > 4096
        assert abs(sum(f.stat().st_size for f in d.iterdir() if f.is_file()) - p["partition_size"]) \
            <= indexes + 64  # + the leader-epoch checkpoint
        assert p["offset_lag"] == 0 and p["is_future_key"] is False


async def test_describe_log_dirs_of_named_partitions_only(broker, admin):
    topic = create(admin, partitions=2)
    conn = BrokerConnection("127.0.0.1", broker.port, client_id="test")
    await conn.connect()
    try:
        resp = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": [{"topic": topic, "partitions": [1]}]},
                                  version=4)
    finally:
        conn.close()
    assert resp.error_code == 0
    [result] = resp.results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [(topic, [1])]


def test_describe_cluster_kafka_python(broker):
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = kadmin.describe_cluster()
    finally:
        kadmin.close()
    cache = broker.server.metadata_cache
    assert described["cluster_id"] == cache.cluster_id and described["cluster_id"]
    assert described["controller_id"] == broker.server.config.broker_id
    assert [(b["broker_id"], b["port"], b["rack"]) for b in described["brokers"]] == \
        [(broker.server.config.broker_id, broker.port, "rack-a")]
    # no authorizer: every cluster operation (kafka-python's names), which only DescribeCluster carries
    assert sorted(described["authorized_operations"]) == sorted([
        "ALTER", "DESCRIBE", "CLUSTER_ACTION", "IDEMPOTENT_WRITE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS", "CREATE"])


def test_describe_cluster_confluent(broker, admin):
    described = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert described.cluster_id == broker.server.metadata_cache.cluster_id
    assert described.controller.id == broker.server.config.broker_id
    assert [(n.id, n.port, n.rack) for n in described.nodes] == [(broker.server.config.broker_id, broker.port, "rack-a")]
    assert sorted(op.name for op in described.authorized_operations) == sorted([
        "ALTER", "DESCRIBE", "CLUSTER_ACTION", "IDEMPOTENT_WRITE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS", "CREATE"])


async def test_describe_cluster_asking_for_controller_endpoints(broker):
    conn = BrokerConnection("127.0.0.1", broker.port, client_id="test")
    await conn.connect()
    try:
        wrong = await conn.request(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                             "endpoint_type": 2}, version=1)
        unknown = await conn.request(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                               "endpoint_type": 7}, version=1)
        plain = await conn.request(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False},
                                   version=0)
    finally:
        conn.close()
    assert (wrong.error_code, wrong.brokers) == (ErrorCode.MISMATCHED_ENDPOINT_TYPE, [])
    assert (unknown.error_code, unknown.brokers) == (ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, [])
    assert plain.error_code == 0 and len(plain.brokers) == 1
    assert plain.cluster_authorized_operations == -2147483648  # not asked for



async def test_api_versions_advertises_exactly_what_is_served(broker):
    """What a broker lists in ApiVersions is what it answers: its own handlers, and forwarded
    APIs only where the controller handles them (AlterClientQuotas and UnregisterBroker were
    listed and then refused by the controller); the issue's APIs at the versions answered."""
    from broker.forwarding import FORWARDED_APIS
    from controller.controller_apis import ControllerApis

    conn = BrokerConnection("127.0.0.1", broker.port, client_id="test")
    await conn.connect()
    try:
        resp = await conn.request(ApiKey.API_VERSIONS, {"client_software_name": "t", "client_software_version": "1"},
                                  version=3)
    finally:
        conn.close()
    table = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert [k for k in FORWARDED_APIS if k not in ControllerApis(None).operations] == []
    assert set(table) == set(broker.server.apis.handlers)
    assert table[ApiKey.DELETE_RECORDS] == (0, 2)
    assert table[ApiKey.DESCRIBE_LOG_DIRS] == (1, 4)
    assert table[ApiKey.DESCRIBE_CLUSTER] == (0, 2)


def test_delete_records_kafka_python(broker, admin):
    from kafka import TopicPartition as KTP
    from kafka.errors import OffsetOutOfRangeError

    topic = create(admin, partitions=2)
    produce(broker, topic, 40, partitions=2)  # 20 per partition
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = kadmin.delete_records({KTP(topic, 0): 15, KTP(topic, 1): -1})
        assert {tp.partition: r["low_watermark"] for tp, r in result.items()} == {0: 15, 1: 20}
        with pytest.raises(OffsetOutOfRangeError):
            kadmin.delete_records({KTP(topic, 0): 21})
    finally:
        kadmin.close()
    assert low_and_high(broker, topic, 0) == (15, 20) and low_and_high(broker, topic, 1) == (20, 20)
