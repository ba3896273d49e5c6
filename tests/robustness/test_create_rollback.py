"""Issue 12 §5: CreateTopics (and CreatePartitions) is all-or-nothing. A topic whose logs cannot all be created (any
OSError on a broker: out of descriptors, out of disk space or inodes, a path that cannot be a
directory) leaves nothing behind — neither in the metadata nor as directories on any broker —
the client gets KAFKA_STORAGE_ERROR with a message, and the next request works (the retry,
another topic's auto-creation). Real processes: a combined broker,controller, and a controller
with three brokers; raw CreateTopics/Metadata frames.

The failure is made real, not injected: a regular file where a partition's directory must go
(mkdir fails with EEXIST on that broker only), or a log dir on a tmpfs with few inodes (ENOSPC
part-way through a topic's partitions)."""

from __future__ import annotations

import re
import subprocess

import pytest

from controller.launcher import LocalCluster
from protocol.errors import ErrorCode
from protocol.messages import APIS
from tests.support import BrokerProcess, wait_until

from .frames import Raw, good_batch

pytestmark = pytest.mark.timeout(180)

CREATE_TOPICS, METADATA, CREATE_PARTITIONS = 19, 3, 37


def create_topic(port: int, name: str, partitions: int, replication_factor: int = 1,
                 timeout_ms: int = 30000) -> tuple[int, str | None]:
    raw = Raw(port, timeout=60)
    try:
        body = APIS[CREATE_TOPICS].request.build(4, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
            "assignments": [], "configs": []}], "timeout_ms": timeout_ms, "validate_only": False})
        raw.request(CREATE_TOPICS, 4, body)
        resp = APIS[CREATE_TOPICS].response.parse(4, raw.response(), 4)
        (topic,) = resp.topics
        return topic.error_code, topic.error_message
    finally:
        raw.close()


def create_partitions(port: int, name: str, count: int) -> tuple[int, str | None]:
    raw = Raw(port, timeout=60)
    try:
        body = APIS[CREATE_PARTITIONS].request.build(1, {"topics": [{"name": name, "count": count, "assignments": None}],
                                                         "timeout_ms": 30000, "validate_only": False})
        raw.request(CREATE_PARTITIONS, 1, body)
        (result,) = APIS[CREATE_PARTITIONS].response.parse(1, raw.response(), 4).results
        return result.error_code, result.error_message
    finally:
        raw.close()


def topic_state(port: int, name: str, auto_create: bool = False) -> tuple[int, dict[int, int]]:
    """The broker's Metadata for ``name``: (topic error code, {partition: leader})."""
    raw = Raw(port)
    try:
        body = APIS[METADATA].request.build(8, {"topics": [{"name": name}], "allow_auto_topic_creation": auto_create,
                                                "include_cluster_authorized_operations": False,
                                                "include_topic_authorized_operations": False})
        raw.request(METADATA, 8, body)
        resp = APIS[METADATA].response.parse(8, raw.response(), 4)
        (topic,) = resp.topics
        return topic.error_code, {p.partition_index: p.leader_id for p in topic.partitions}
    finally:
        raw.close()


# Deleted partition directories (<name>.<uuid>-delete) go this long after, as in Kafka.
DELETE_DELAY = {"log.segment.delete.delay.ms": 300}


def leftovers(log_dir, name: str, deleting: bool = False) -> list[str]:
    """The partition directories of topic ``name`` in a data dir; ``deleting``: those renamed
    to be deleted."""
    pattern = re.compile(rf"{re.escape(name)}-\d+" + (r"\.[0-9a-f]+-delete" if deleting else ""))
    return sorted(p.name for p in log_dir.iterdir() if pattern.fullmatch(p.name) and p.is_dir())


def produce_ok(port: int, topic: str, partition: int) -> None:
    raw = Raw(port)
    try:
        assert raw.produce({(topic, partition): good_batch(2)}) == {(topic, partition): ErrorCode.NONE}
    finally:
        raw.close()


def assert_taken_back(code: int, message: str | None, partition: str, port: int, log_dirs, name: str) -> None:
    assert code == ErrorCode.KAFKA_STORAGE_ERROR, (code, message)
    assert message and partition in message and "not created" in message, message
    assert topic_state(port, name)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for log_dir in log_dirs:
        assert leftovers(log_dir, name) == [], log_dir
        wait_until(lambda: leftovers(log_dir, name, deleting=True) == [], 15, what=f"{log_dir}'s deleted dirs to go")


def auto_create_works(port: int, name: str, ports: dict[int, int]) -> None:
    """Auto-creating ``name`` through the broker on ``port`` works; ``ports``: each broker's."""
    topic_state(port, name, auto_create=True)
    wait_until(lambda: topic_state(port, name)[1].get(0, -1) >= 0, 30, what=f"{name} auto-created with a leader")
    produce_ok(ports[topic_state(port, name)[1][0]], name, 0)


def test_a_topic_a_broker_cannot_create_is_taken_back_in_a_single_node(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data, overrides=DELETE_DELAY).start()
    try:
        (data / "boom-5").write_bytes(b"not a directory")  # mkdir of partition 5 fails (EEXIST)
        code, message = create_topic(broker.port, "boom", 8)
        assert_taken_back(code, message, "boom-5", broker.port, [data], "boom")
        assert "cannot create the log of boom-5" in broker.log_text()
        auto_create_works(broker.port, "other", {0: broker.port})
        # The same request again, the obstacle gone: created, every partition usable.
        (data / "boom-5").unlink()
        assert create_topic(broker.port, "boom", 8) == (ErrorCode.NONE, None)
        assert sorted(topic_state(broker.port, "boom")[1]) == list(range(8))
        assert leftovers(data, "boom") == [f"boom-{p}" for p in sorted(range(8), key=str)]
        for p in range(8):
            produce_ok(broker.port, "boom", p)
        assert broker.proc.poll() is None
    finally:
        broker.kill()


def test_new_partitions_a_broker_cannot_create_are_taken_back_and_the_topic_keeps_its_data(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data, overrides=DELETE_DELAY).start()
    try:
        assert create_topic(broker.port, "grows", 2) == (ErrorCode.NONE, None)
        produce_ok(broker.port, "grows", 0)
        (data / "grows-3").write_bytes(b"not a directory")
        code, message = create_partitions(broker.port, "grows", 5)
        assert code == ErrorCode.KAFKA_STORAGE_ERROR, (code, message)
        assert "grows-3" in message and "partitions from 2 on were not added" in message
        assert sorted(topic_state(broker.port, "grows")[1]) == [0, 1]
        assert leftovers(data, "grows") == ["grows-0", "grows-1"]
        raw = Raw(broker.port)
        try:  # the partition that was there keeps its records: the next batch follows them
            answer = raw.produce_answers({("grows", 0): good_batch(2)}, version=7)[("grows", 0)]
            assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 2)
        finally:
            raw.close()
        (data / "grows-3").unlink()
        assert create_partitions(broker.port, "grows", 5) == (ErrorCode.NONE, None)
        assert sorted(topic_state(broker.port, "grows")[1]) == [0, 1, 2, 3, 4]
        produce_ok(broker.port, "grows", 4)
    finally:
        broker.kill()


@pytest.fixture
def small_inode_disk(tmp_path):
    """A tmpfs with room for 40 inodes (a partition takes 6: its dir and 5 files)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,nr_inodes=40", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_enospc_part_way_through_a_topic_leaves_nothing_and_the_retry_works(tmp_path, small_inode_disk):
    data = small_inode_disk / "data"
    broker = BrokerProcess(data, overrides={"metadata.log.dir": tmp_path / "metadata", **DELETE_DELAY})
    broker.output = tmp_path / "broker.out"
    broker.start()
    try:
        code, message = create_topic(broker.port, "full", 20)
        assert_taken_back(code, message, "full-", broker.port, [data], "full")
        assert "No space left on device" in broker.log_text()
        # Room again: the same request succeeds.
        subprocess.run(["mount", "-o", "remount,nr_inodes=1000", str(small_inode_disk)], check=True)
        assert create_topic(broker.port, "full", 20) == (ErrorCode.NONE, None)
        assert len(leftovers(data, "full")) == 20
        produce_ok(broker.port, "full", 19)
    finally:
        broker.kill()


def test_a_topic_one_broker_of_three_cannot_create_is_taken_back_everywhere(tmp_path):
    cluster = LocalCluster(tmp_path, 3, broker_props=DELETE_DELAY, controller_props={"default.replication.factor": 3})
    try:
        cluster.start()
        blocked = cluster.brokers[2].log_dir
        for p in range(4):
            (blocked / f"wide-{p}").write_bytes(b"not a directory")
        asked = cluster.brokers[1]
        code, message = create_topic(asked.port, "wide", 4, replication_factor=3)
        assert_taken_back(code, message, "broker 2", asked.port, [b.log_dir for b in cluster.brokers.values()],
                          "wide")
        for b in cluster.brokers.values():
            assert topic_state(b.port, "wide")[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ports = {i: b.port for i, b in cluster.brokers.items()}
        auto_create_works(asked.port, "other", ports)
        for p in range(4):
            (blocked / f"wide-{p}").unlink()
        assert create_topic(asked.port, "wide", 4, replication_factor=3) == (ErrorCode.NONE, None)
        for b in cluster.brokers.values():
            assert leftovers(b.log_dir, "wide") == [f"wide-{p}" for p in range(4)]
        leaders = topic_state(asked.port, "wide")[1]
        for p, leader in leaders.items():
            produce_ok(ports[leader], "wide", p)
    finally:
        cluster.kill()
