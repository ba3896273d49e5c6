"""The coordinator wired to a real ReplicaManager (real log files, MockTime): group records go
through the replicated append with acks=all, leadership of ``__consumer_offsets`` partitions
loads and unloads groups (LeaderAndIsr and StopReplica), and FindCoordinator creates the topic
through the topic admin with the replication factor capped by the live brokers."""

from __future__ import annotations

import pytest

from broker.coordinator import GROUP_METADATA_TOPIC_NAME, GroupCoordinatorAdapter, GroupCoordinatorConfig
from broker.coordinator.offsets_topic import OffsetsTopic
from broker.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionInfo
from broker.partition import LeaderAndIsrState
from broker.replica_manager import FetchParams, ReplicaManager
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.fast_codecs import FetchPartition
from protocol.messages import APIS
from storage import LogConfig, LogManager

from .harness import Cluster

TOPIC = GROUP_METADATA_TOPIC_NAME
E = ErrorCode


class RecordingAdmin:
    def __init__(self) -> None:
        self.created: list = []

    def create_topics(self, topics, validate_only, callback, timeout_ms=30000) -> None:
        self.created.append((topics, callback))


class Replicated(Cluster):
    """A coordinator over a real ReplicaManager of broker 1 with 4 __consumer_offsets partitions."""

    def __init__(self, tmp_path, brokers=(1,)) -> None:
        super().__init__(GroupCoordinatorConfig(offsets_topic_num_partitions=4, group_initial_rebalance_delay_ms=0),
                         start=False)
        config = LogConfig()
        self.logs = LogManager([tmp_path], config, time=self.time)
        self.logs.startup()
        self.cache = MetadataCache(1)
        for b in brokers:
            self.cache.brokers[b] = BrokerInfo(b, {"PLAINTEXT": BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + b)})
        for i in range(2):  # the topic the tests commit offsets of
            self.cache.update_partition("t", None, PartitionInfo(i, 1, 0, [1], [1]))
        self.rm = ReplicaManager(broker_id=1, time=self.time, log_manager=self.logs, metadata_cache=self.cache,
                                 log_config_for=lambda topic: config)
        self.admin = RecordingAdmin()
        self.offsets_topic = OffsetsTopic(time=self.time, replica_manager=self.rm, metadata_cache=self.cache,
                                          topic_admin=self.admin, num_partitions=4, replication_factor=3,
                                          commit_timeout_ms=5000, topic_configs=lambda: self.coordinator.offsets_topic_configs())
        self.coordinator = GroupCoordinatorAdapter(self.config, self.time, self.offsets_topic.append,
                                                   self.offsets_topic.read_partition, self.offsets_topic.partition_exists)
        self.offsets_topic.attach(self.coordinator)
        self.coordinator.startup(enable_metadata_expiration=False)

    def leader_and_isr(self, partition, leader, epoch, isr=(1,), replicas=(1,)):
        error, results = self.rm.become_leader_or_follower(0, 1, [LeaderAndIsrState(
            TOPIC, partition, 1, leader, epoch, list(isr), epoch, list(replicas))])
        assert error == 0 and results[(TOPIC, partition)] == 0

    def follower_fetch(self, partition, replica_id, offset):
        out = []
        self.rm.fetch_messages(FetchParams(replica_id, 0, 1, 1 << 20, 0),
                               [(TOPIC, [FetchPartition(partition, -1, offset, 0, 1 << 20)])], out.append)
        return out

    def stored(self, partition):
        got = []
        self.offsets_topic.read_partition(partition, got.append)
        return got[0]


@pytest.fixture
def cluster(tmp_path):
    c = Replicated(tmp_path)
    yield c
    c.logs.shutdown()


def test_commits_are_appended_and_a_new_leader_loads_them(cluster):
    p = cluster.coordinator.partition_for("g")
    cluster.leader_and_isr(p, leader=1, epoch=0)
    assert cluster.commit("g", {("t", 0): 42, ("t", 1): 7}).body["topics"][0]["partitions"] == [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 0}]
    assert len(cluster.stored(p)) == 2  # one offset record per partition, in the partition's log
    assert cluster.rm.get_partition(TOPIC, p).log.high_watermark == 2

    cluster.leader_and_isr(p, leader=2, epoch=1, replicas=(1, 2), isr=(1, 2))  # another broker leads now
    assert cluster.fetch("g", [("t", 0)]).error == E.NOT_COORDINATOR
    assert cluster.core.group_manager.get_group("g") is None

    cluster.leader_and_isr(p, leader=1, epoch=2, replicas=(1, 2), isr=(1,))  # and back: loaded from the log
    assert cluster.committed("g", [("t", 0), ("t", 1)]) == {("t", 0): 42, ("t", 1): 7}


def test_a_commit_waits_for_the_in_sync_replicas(cluster):
    p = cluster.coordinator.partition_for("g")
    cluster.leader_and_isr(p, leader=1, epoch=0, replicas=(1, 2), isr=(1, 2))
    reply = cluster.commit("g", {("t", 0): 5})
    assert not reply.done  # acks=all: broker 2 has not fetched it yet
    cluster.follower_fetch(p, 2, 0)
    assert not reply.done
    cluster.follower_fetch(p, 2, 1)  # broker 2 has offset 0: the HW passes the write
    assert reply.done and reply.body["topics"][0]["partitions"][0]["error_code"] == 0


def test_a_commit_the_replicas_do_not_take_in_time_fails(cluster):
    p = cluster.coordinator.partition_for("g")
    cluster.leader_and_isr(p, leader=1, epoch=0, replicas=(1, 2), isr=(1, 2))
    reply = cluster.commit("g", {("t", 0): 5})
    cluster.sleep(5001)  # offsets.commit.timeout.ms
    # the append's REQUEST_TIMED_OUT reaches the client as it is (Kafka maps only NOT_ENOUGH_REPLICAS & co.)
    assert reply.body["topics"][0]["partitions"][0]["error_code"] == E.REQUEST_TIMED_OUT
    assert cluster.committed("g", [("t", 0)]) == {("t", 0): -1}


def test_stop_replica_unloads_the_partitions_groups(cluster):
    p = cluster.coordinator.partition_for("g")
    cluster.leader_and_isr(p, leader=1, epoch=0)
    cluster.commit("g", {("t", 0): 1})
    cluster.rm.stop_replicas([(TOPIC, p)], delete=False, leader_epoch=1)
    assert cluster.fetch("g", [("t", 0)]).error == E.NOT_COORDINATOR


def find(cluster, *keys, version=4, listener="PLAINTEXT"):
    api = APIS[ApiKey.FIND_COORDINATOR]
    body = {"key": keys[0], "key_type": 0, "coordinator_keys": list(keys)}
    req = api.request.parse(version, api.request.build(version, body))
    out = []
    cluster.coordinator.find_coordinator(req, version, lambda p: cluster.offsets_topic.locate(p, listener), out.append)
    return api.response.parse(version, api.response.build(version, out[0]))


def test_find_coordinator_creates_the_topic_once_capped_by_the_live_brokers(tmp_path):
    cluster = Replicated(tmp_path, brokers=(1, 2))
    try:
        r = find(cluster, "g", version=2)
        assert (r.error_code, r.node_id) == (E.COORDINATOR_NOT_AVAILABLE, -1)
        find(cluster, "h", version=2)
        assert len(cluster.admin.created) == 1  # one creation in flight at a time
        [topic], callback = cluster.admin.created[0]
        assert (topic.name, topic.num_partitions, topic.replication_factor) == (TOPIC, 4, 2)
        assert topic.configs["cleanup.policy"] == "compact"
        callback([(E.NONE, None)])
        # the controller's metadata arrives: partition leaders are brokers 1 and 2
        for i in range(4):
            cluster.cache.update_partition(TOPIC, None, PartitionInfo(i, 1 + i % 2, 0, [1, 2], [1, 2]))
        r = find(cluster, "g", "h", version=4)
        by_key = {c.key: c for c in r.coordinators}
        for key in ("g", "h"):
            leader = 1 + cluster.coordinator.partition_for(key) % 2
            assert (by_key[key].error_code, by_key[key].node_id, by_key[key].port) == (0, leader, 9000 + leader)
        # a leader that is not live: not available
        cluster.cache.brokers.pop(2)
        odd = next(k for k in ("g", "h", "x", "y", "z") if cluster.coordinator.partition_for(k) % 2 == 1)
        assert find(cluster, odd, version=3).error_code == E.COORDINATOR_NOT_AVAILABLE
    finally:
        cluster.logs.shutdown()
