"""Consumer groups with real clients against a single combined node (a broker process): each
client subscribes with a group id, consumes a 6-partition topic to the end and commits; a
restarted consumer goes on exactly after its committed offsets, across a broker restart too."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 6
# Kafka's development setting (config/server.properties): a new group's first rebalance does not wait.
GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def node(broker_process):
    return broker_process(overrides=GROUP_OVERRIDES).start()


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30).values():
        future.result(30)


def produce_per_partition(kcat_path: str, bootstrap: str, topic: str, start: int, count: int) -> None:
    """``count`` records into every partition, values "p:i" for i in [start, start + count)."""
    for p in range(PARTITIONS):
        lines = b"".join(f"{p}:{i}\n".encode() for i in range(start, start + count))
        subprocess.run([kcat_path, "-b", bootstrap, "-P", "-t", topic, "-p", str(p)], input=lines, check=True,
                       capture_output=True, timeout=60)


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                                              timeout=30)}
    finally:
        c.close()


def kcat_group_consume(kcat_path: str, bootstrap: str, group: str, topic: str) -> list[tuple[int, int, str]]:
    """kcat -G: subscribe, consume until every assigned partition is at its end, commit on close."""
    proc = subprocess.run([kcat_path, "-b", bootstrap, "-G", group, topic, "-e", "-q", "-f", "%p %o %s\n",
                           "-X", "auto.offset.reset=earliest"], capture_output=True, timeout=90)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    rows = []
    for line in proc.stdout.decode().splitlines():
        p, o, v = line.split(" ", 2)
        rows.append((int(p), int(o), v))
    return rows


def test_kcat_group_consumes_commits_and_resumes_after_a_broker_restart(node, kcat_path):
    create_topic(node.bootstrap, "kg")
    produce_per_partition(kcat_path, node.bootstrap, "kg", 0, 100)
    rows = kcat_group_consume(kcat_path, node.bootstrap, "kgroup", "kg")
    assert sorted(rows) == [(p, i, f"{p}:{i}") for p in range(PARTITIONS) for i in range(100)]
    assert committed(node.bootstrap, "kgroup", "kg") == {p: 100 for p in range(PARTITIONS)}

    produce_per_partition(kcat_path, node.bootstrap, "kg", 100, 10)
    assert node.stop() == 0
    node.start()
    assert committed(node.bootstrap, "kgroup", "kg") == {p: 100 for p in range(PARTITIONS)}
    rows = kcat_group_consume(kcat_path, node.bootstrap, "kgroup", "kg")
    assert sorted(rows) == [(p, i, f"{p}:{i}") for p in range(PARTITIONS) for i in range(100, 110)]
    assert committed(node.bootstrap, "kgroup", "kg") == {p: 110 for p in range(PARTITIONS)}
