"""DeleteRecords (21) on a 3-broker cluster with confluent-kafka's AdminClient: the leader moves
the log start offset and answers once every replica's log start offset reached it (the low
watermark), so a follower that takes over after the leader is killed -9 starts at the same
offset; -1 means the high watermark; an offset above it is OFFSET_OUT_OF_RANGE, a partition that
does not exist UNKNOWN_TOPIC_OR_PARTITION, and nothing changes then. The segments below the new
log start offset leave the disk of every broker, followers included, within
log.retention.check.interval.ms + file.delete.delay.ms."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic

from controller.launcher import LocalCluster
from tests.cluster.txn_helpers import create_topic, leaders, live_bootstrap, offsets, start_cluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(180)


def earliest(bootstrap: str, topic: str) -> int:
    import asyncio

    from protocol.client import KafkaClient

    async def ask() -> int:
        async with KafkaClient(bootstrap) as client:
            return (await client.list_offsets(topic, 0, -2))[0]
    return asyncio.run(ask())


def raw_delete(port: int, topic: str, partition: int, offset: int) -> tuple[int, int]:
    import asyncio

    from protocol.api_keys import ApiKey
    from protocol.client import BrokerConnection

    async def ask() -> tuple[int, int]:
        conn = BrokerConnection("127.0.0.1", port, client_id="test")
        await conn.connect()
        try:
            r = await conn.request(ApiKey.DELETE_RECORDS, {"topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "offset": offset}]}], "timeout_ms": 5000}, 1)
        finally:
            conn.close()
        [t] = r.topics
        [p] = t.partitions
        return p.low_watermark, p.error_code
    return asyncio.run(ask())


def test_delete_records_moves_every_replica_s_log_start_offset(tmp_path):
    cluster = start_cluster(tmp_path)
    try:
        create_topic(cluster, "dr", 1)
        b = cluster.bootstrap
        p = Producer({"bootstrap.servers": b, "acks": "all", "linger.ms": 5})
        for i in range(100):
            p.produce("dr", value=str(i).encode(), partition=0)
        assert p.flush(30) == 0
        admin = AdminClient({"bootstrap.servers": b})

        def delete(offset: int, partition: int = 0):
            [f] = admin.delete_records([TP("dr", partition, offset)], operation_timeout=30).values()
            return f

        assert delete(40).result(30).low_watermark == 40
        assert earliest(b, "dr") == 40
        for bad_offset, code in ((1000, KafkaError.OFFSET_OUT_OF_RANGE),):
            with pytest.raises(Exception) as exc:
                delete(bad_offset).result(30)
            assert exc.value.args[0].code() == code, exc.value
        assert earliest(b, "dr") == 40  # nothing changed
        # asked of a broker directly (the client refuses a partition it has no leader for): a
        # partition that does not exist, and a follower
        leader = leaders(cluster, "dr")[0]
        follower = next(i for i in cluster.brokers if i != leader)
        assert raw_delete(cluster.brokers[leader].port, "dr", 7, 5) == (-1, 3)  # UNKNOWN_TOPIC_OR_PARTITION
        assert raw_delete(cluster.brokers[follower].port, "dr", 0, 50) == (-1, 6)  # NOT_LEADER_OR_FOLLOWER
        assert earliest(b, "dr") == 40
        assert delete(-1).result(30).low_watermark == 100  # the high watermark
        # every replica moved before the answer: the follower that takes over starts there too
        leader = leaders(cluster, "dr")[0]
        cluster.brokers[leader].kill()
        leaders(cluster, "dr", exclude={leader})
        others = live_bootstrap(cluster, {leader})
        assert earliest(others, "dr") == 100
        assert offsets(others, "dr", 1, 0)[0] == 100
    finally:
        cluster.kill()


CHECK_MS, DELETE_DELAY_MS = 300, 300


def bases(cluster, broker_id: int, topic: str) -> list[int]:
    d = cluster.brokers[broker_id].log_dir / f"{topic}-0"
    return sorted({int(f.name.split(".")[0]) for f in d.iterdir() if f.name.endswith((".log", ".log.deleted"))})


def test_delete_records_moves_every_replica_and_empties_every_disk(tmp_path):
    cluster = LocalCluster(tmp_path, 3, broker_props={"broker.heartbeat.interval.ms": 500,
                                                      "log.retention.check.interval.ms": CHECK_MS}).start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        [f] = admin.create_topics([NewTopic("trimmed", 1, 3, config={
            "segment.bytes": "2048", "file.delete.delay.ms": str(DELETE_DELAY_MS),
            "min.insync.replicas": "2"})]).values()
        f.result(30)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                      "batch.num.messages": 20})
        for i in range(1000):
            p.produce("trimmed", f"record-{i:05d}".encode() * 4, partition=0)
        assert p.flush(60) == 0
        before = {b: bases(cluster, b, "trimmed") for b in (1, 2, 3)}
        [(_tp, future)] = admin.delete_records([TP("trimmed", 0, 500)]).items()
        assert future.result(30).low_watermark == 500  # every replica's log start offset is 500 now
        # each broker rolls its own segments (a follower appends what each fetch brings): the one
        # holding offset 500 stays on each, those before it go
        keep = {b: max(x for x in bases(cluster, b, "trimmed") if x <= 500) for b in (1, 2, 3)}
        assert all(before[b][0] < keep[b] for b in (1, 2, 3)), (before, keep)
        started = time.monotonic()
        wait_until(lambda: all(bases(cluster, b, "trimmed")[0] == keep[b] for b in (1, 2, 3)), timeout_s=15,
                   what="the segments below offset 500 gone from every broker")
        assert time.monotonic() - started < (CHECK_MS + DELETE_DELAY_MS) / 1000 + 3
    finally:
        cluster.kill()
