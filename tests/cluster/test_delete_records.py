"""DeleteRecords on a replicated partition (three broker processes, RF 3): confluent-kafka's
``delete_records`` is answered once every replica moved its log start offset (the low
watermark), and the segments below it leave the disk of every broker, followers included,
within log.retention.check.interval.ms + file.delete.delay.ms."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from controller.launcher import LocalCluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(180)

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
        [(_tp, future)] = admin.delete_records([TopicPartition("trimmed", 0, 500)]).items()
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
