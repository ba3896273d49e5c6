"""ReplicationControlManager on its own: AlterPartition validation (each of Kafka's error codes),
topic creation and its errors, CreatePartitions (growth only), DeleteTopics, ElectLeaders and
the imbalance rule."""

from __future__ import annotations

import random
import uuid

import pytest

from controller.cluster_control import BrokerRegistration, ClusterControlManager
from controller.configuration_control import ConfigurationControlManager
from controller.partition_change import NO_LEADER, RECOVERING
from controller.replication_control import PREFERRED_ELECTION, UNCLEAN_ELECTION, ReplicationControlManager
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode as E
from protocol.messages.metadata_records import MetadataRecordType as T

from .helpers import CLUSTER_ID, create_topics, request

DEFAULTS = {"retention.ms": "604800000", "segment.bytes": "1073741824", "min.insync.replicas": "1"}


class World:
    def __init__(self, brokers=(1, 2, 3), fenced=(), shutting_down=()):
        self.cluster = ClusterControlManager(CLUSTER_ID)
        self.configs = ConfigurationControlManager(DEFAULTS)
        self.repl = ReplicationControlManager(self.cluster, self.configs, default_num_partitions=1,
                                              default_replication_factor=1, rng=random.Random(3))
        for b in brokers:
            self.cluster.replay(BrokerRegistration(b, uuid.UUID(int=b), 100 + b, (), None, b in fenced,
                                                   b in shutting_down).to_record())

    def apply(self, records):
        for r in records:
            if r.type == T.CONFIG:
                self.configs.replay(r)
            elif r.type in (T.REGISTER_BROKER, T.FENCE_BROKER, T.UNFENCE_BROKER, T.BROKER_REGISTRATION_CHANGE):
                self.cluster.replay(r)
            else:
                self.repl.replay(r)

    def create(self, *topics):
        result = self.repl.create_topics(create_topics(*topics).topics)
        self.apply(result.records)
        return result.response

    def part(self, topic="t", pid=0):
        return self.repl.topic(topic).parts[pid]


@pytest.fixture
def w():
    world = World(brokers=(1, 2, 3, 4))
    world.create(("t", -1, -1, {}, {0: [1, 2, 3]}))
    return world


def alter(w, *, broker=1, broker_epoch=None, topic_id=None, pid=0, leader_epoch=None, partition_epoch=None,
          isr=(1, 2, 3), isr_epochs=None, recovery=0, version=3):
    part = w.repl.topic("t").parts.get(pid) or w.part()
    states = [{"broker_id": b, "broker_epoch": (isr_epochs or {}).get(b, -1)} for b in isr]
    pd = {"partition_index": pid, "leader_epoch": part.leader_epoch if leader_epoch is None else leader_epoch,
          "partition_epoch": part.partition_epoch if partition_epoch is None else partition_epoch,
          "leader_recovery_state": recovery}
    if version >= 3:
        pd["new_isr_with_epochs"] = states
    else:
        pd["new_isr"] = list(isr)
    topic = {"topic_id": topic_id or w.repl.topic("t").topic_id, "topic_name": "t", "partitions": [pd]}
    req = request(ApiKey.ALTER_PARTITION, version, broker_id=broker,
                  broker_epoch=100 + broker if broker_epoch is None else broker_epoch, topics=[topic])
    result = w.repl.alter_partition(req, version)
    return result


def code(result):
    if result.response["error_code"]:
        return result.response["error_code"]
    return result.response["topics"][0]["partitions"][0]["error_code"]


def test_alter_partition_success_bumps_the_partition_epoch_only(w):
    before = w.part()
    result = alter(w, isr=(1, 2))
    assert code(result) == E.NONE
    [record] = result.records
    assert (record.isr, record.leader) == ([1, 2], -2)
    w.apply(result.records)
    after = w.part()
    assert (after.isr, after.leader_epoch, after.partition_epoch) == ((1, 2), before.leader_epoch,
                                                                     before.partition_epoch + 1)
    p = result.response["topics"][0]["partitions"][0]
    assert (p["leader_id"], p["isr"], p["leader_epoch"], p["partition_epoch"]) == (1, [1, 2], after.leader_epoch,
                                                                                   after.partition_epoch)


def test_alter_partition_with_the_current_isr_changes_nothing_and_answers_the_state(w):
    result = alter(w, isr=(1, 2, 3))
    assert code(result) == E.NONE and result.records == []


@pytest.mark.parametrize("case,kwargs,expected", [
    ("requester's broker epoch is stale", {"broker_epoch": 5}, E.STALE_BROKER_EPOCH),
    ("requester not registered", {"broker": 9, "broker_epoch": 109}, E.STALE_BROKER_EPOCH),
    ("unknown topic id (v2+)", {"topic_id": uuid.UUID(int=99)}, E.UNKNOWN_TOPIC_ID),
    ("unknown partition", {"pid": 5}, E.UNKNOWN_TOPIC_OR_PARTITION),
    ("leader epoch ahead of the controller", {"leader_epoch": 1}, E.NOT_CONTROLLER),
    ("partition epoch ahead of the controller", {"partition_epoch": 1}, E.NOT_CONTROLLER),
    ("old leader epoch", {"leader_epoch": -1}, E.FENCED_LEADER_EPOCH),
    ("not the leader", {"broker": 2}, E.INVALID_REQUEST),
    ("old partition epoch", {"partition_epoch": -1}, E.INVALID_UPDATE_VERSION),
    ("ISR member that is no replica", {"isr": (1, 4)}, E.INVALID_REQUEST),
    ("ISR with a duplicate", {"isr": (1, 2, 2)}, E.INVALID_REQUEST),
    ("ISR without the leader", {"isr": (2, 3)}, E.INVALID_REQUEST),
    ("recovering with more than the leader", {"recovery": RECOVERING, "isr": (1, 2)}, E.INVALID_REQUEST),
    ("recovered partition going back to recovering", {"recovery": RECOVERING, "isr": (1,)}, E.INVALID_REQUEST),
    ("ISR member with another broker epoch", {"isr_epochs": {2: 1}}, E.INELIGIBLE_REPLICA),
])
def test_alter_partition_errors(w, case, kwargs, expected):
    result = alter(w, **kwargs)
    assert code(result) == expected, case
    assert result.records == []


@pytest.mark.parametrize("state", ["fenced", "shutting_down", "unregistered"])
@pytest.mark.parametrize("version,expected", [(3, E.INELIGIBLE_REPLICA), (2, E.INELIGIBLE_REPLICA),
                                              (1, E.OPERATION_NOT_ATTEMPTED)])
def test_ineligible_isr_members(state, version, expected):
    w = World(brokers=(1, 2, 3) if state == "unregistered" else (1, 2, 3, 4),
              fenced=(4,) if state == "fenced" else (), shutting_down=(4,) if state == "shutting_down" else ())
    w.create(("t", -1, -1, {}, {0: [1, 2, 3]}))
    # Make 4 a replica (as if reassigned) so only its eligibility is in question.
    part = w.part()
    w.repl.topics[w.repl.topic("t").topic_id].parts[0] = type(part)((1, 2, 3, 4), part.isr, part.leader,
                                                                    part.leader_epoch, part.partition_epoch)
    result = alter(w, isr=(1, 2, 3, 4), version=version)
    assert code(result) == expected


def test_alter_partition_v1_names_topics():
    w = World()
    w.create(("t", -1, -1, {}, {0: [1, 2]}))
    assert code(alter(w, isr=(1,), version=1)) == E.NONE
    req = request(ApiKey.ALTER_PARTITION, 1, broker_id=1, broker_epoch=101, topics=[
        {"topic_name": "nope", "partitions": [{"partition_index": 0, "leader_epoch": 0, "partition_epoch": 0,
                                               "new_isr": [1]}]}])
    assert code(w.repl.alter_partition(req, 1)) == E.UNKNOWN_TOPIC_OR_PARTITION


def test_create_topics_placement_and_errors():
    w = World(brokers=(1, 2, 3), fenced=(3,))
    results = w.repl.create_topics(create_topics(
        ("ok", 4, 2), ("dup", 1, 1), ("dup", 1, 1), ("bad name!", 1, 1), ("rf", 1, 3), ("zero", 0, 1),
        ("both", 2, 1, {}, {0: [1]}), ("gap", -1, -1, {}, {1: [1]}), ("ghost", -1, -1, {}, {0: [9]}),
        ("fenced", -1, -1, {}, {0: [3]}), ("cfg", 1, 1, {"no.such": "1"}), ("cfg2", 1, 1, {"retention.ms": "x"}),
    ).topics)
    codes = {r["name"]: r["error_code"] for r in results.response}
    assert codes == {"ok": E.NONE, "dup": E.INVALID_REQUEST, "bad name!": E.INVALID_TOPIC_EXCEPTION,
                     "rf": E.INVALID_REPLICATION_FACTOR, "zero": E.INVALID_PARTITIONS, "both": E.INVALID_REQUEST,
                     "gap": E.INVALID_REPLICA_ASSIGNMENT, "ghost": E.INVALID_REPLICA_ASSIGNMENT,
                     "fenced": E.INVALID_REPLICA_ASSIGNMENT, "cfg": E.INVALID_CONFIG, "cfg2": E.INVALID_CONFIG}
    w.apply(results.records)
    info = w.repl.topic("ok")
    assert sorted(info.parts) == [0, 1, 2, 3]
    for part in info.parts.values():   # placed on the unfenced brokers only
        assert set(part.replicas) == {1, 2} and part.isr == part.replicas and part.leader == part.replicas[0]
    assert sorted(p.leader for p in info.parts.values()) == [1, 1, 2, 2]
    assert w.repl.topics_by_name.keys() == {"ok"}
    again = w.repl.create_topics(create_topics(("ok", 1, 1), ("ok_x", 1, 1), ("ok.x", 1, 1)).topics).response
    assert [r["error_code"] for r in again] == [E.TOPIC_ALREADY_EXISTS, E.NONE, E.INVALID_TOPIC_EXCEPTION]


def test_validate_only_creates_nothing():
    w = World()
    result = w.repl.create_topics(create_topics(("t", 3, 1)).topics, validate_only=True)
    assert result.records == [] and result.response[0]["error_code"] == E.NONE


def test_create_partitions_grows_only():
    w = World()
    w.create(("t", 2, 2))

    def grow(count, assignments=None):
        req = request(ApiKey.CREATE_PARTITIONS, 3, topics=[{"name": "t", "count": count, "assignments": assignments}])
        result = w.repl.create_partitions(req.topics)
        w.apply(result.records)
        return result.response[0]["error_code"]

    assert grow(1) == E.INVALID_PARTITIONS
    assert grow(2) == E.INVALID_PARTITIONS
    assert grow(4) == E.NONE
    assert sorted(w.repl.topic("t").parts) == [0, 1, 2, 3]
    assert all(len(p.replicas) == 2 for p in w.repl.topic("t").parts.values())
    assert grow(5, [{"broker_ids": [1]}]) == E.INVALID_REPLICA_ASSIGNMENT      # wrong replication factor
    assert grow(6, [{"broker_ids": [1, 2]}]) == E.INVALID_REPLICA_ASSIGNMENT   # one assignment for two partitions
    assert grow(5, [{"broker_ids": [3, 1]}]) == E.NONE
    assert w.part("t", 4).replicas == (3, 1)
    req = request(ApiKey.CREATE_PARTITIONS, 3, topics=[{"name": "nope", "count": 3, "assignments": None}])
    assert w.repl.create_partitions(req.topics).response[0]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_topics():
    w = World()
    w.create(("t", 1, 1, {"retention.ms": "1"}))
    topic_id = w.repl.topic("t").topic_id
    result = w.repl.delete_topics(["t", "nope"], [uuid.UUID(int=5)])
    assert [r["error_code"] for r in result.response] == [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_ID]
    assert [(r.type, r.topic_id) for r in result.records] == [(T.REMOVE_TOPIC, topic_id)]
    w.apply(result.records)
    assert w.repl.topic("t") is None and w.configs.topic_configs("t") == {}
    w.repl.delete_topic_enable = False
    w.create(("u", 1, 1))
    assert w.repl.delete_topics(["u"], []).response[0]["error_code"] == E.TOPIC_DELETION_DISABLED


def test_elect_leaders_preferred_and_unclean():
    w = World(brokers=(1, 2, 3))
    w.create(("t", -1, -1, {}, {0: [1, 2], 1: [2, 3], 2: [1, 3]}))
    w.apply(w.repl.handle_broker_controlled_shutdown(1))   # as if broker 1 had left: 0 and 2 lose it
    w.cluster.replay(BrokerRegistration(1, uuid.UUID(int=1), 101, (), None, False, False).to_record())
    w.apply(alter(w, broker=2, isr=(2, 1)).records)        # broker 1 back in partition 0's ISR
    tp = request(ApiKey.ELECT_LEADERS, 2, election_type=0,
                 topic_partitions=[{"topic": "t", "partitions": [0, 1, 2, 7]}]).topic_partitions
    result = w.repl.elect_leaders(PREFERRED_ELECTION, tp)
    codes = {r["partition_id"]: r["error_code"] for r in result.response["replica_election_results"][0]["partition_result"]}
    assert codes == {0: E.NONE, 1: E.ELECTION_NOT_NEEDED, 2: E.PREFERRED_LEADER_NOT_AVAILABLE,
                     7: E.UNKNOWN_TOPIC_OR_PARTITION}
    w.apply(result.records)
    assert w.part("t", 0).leader == 1
    # All partitions: only those an election was tried for are reported.
    everything = w.repl.elect_leaders(PREFERRED_ELECTION, None).response["replica_election_results"]
    assert everything == [{"topic": "t", "partition_result": [
        {"partition_id": 2, "error_code": E.PREFERRED_LEADER_NOT_AVAILABLE,
         "error_message": "Failed to elect leader for partition t-2 under strategy PREFERRED"}]}]
    unclean = w.repl.elect_leaders(UNCLEAN_ELECTION, tp).response["replica_election_results"][0]["partition_result"]
    assert [r["error_code"] for r in unclean[:3]] == [E.ELECTION_NOT_NEEDED] * 3


def test_unclean_election_through_elect_leaders():
    w = World(brokers=(1, 2))
    w.create(("t", -1, -1, {}, {0: [1, 2]}))
    w.apply(alter(w, isr=(1,)).records)
    w.apply(w.repl.handle_broker_fenced(1))
    w.cluster.replay(w.cluster.fence_record(1))
    assert (w.part().leader, w.part().isr) == (NO_LEADER, (1,))
    tp = request(ApiKey.ELECT_LEADERS, 2, election_type=1,
                 topic_partitions=[{"topic": "t", "partitions": [0]}]).topic_partitions
    result = w.repl.elect_leaders(UNCLEAN_ELECTION, tp)
    assert result.response["replica_election_results"][0]["partition_result"][0]["error_code"] == E.NONE
    w.apply(result.records)
    assert (w.part().leader, w.part().isr, w.part().leader_recovery_state) == (2, (2,), RECOVERING)


@pytest.mark.parametrize("percentage,moved", [(10, True), (50, True), (66, True), (67, False)])
def test_imbalance_ratio_per_preferred_broker(percentage, moved):
    # Broker 1 is preferred for 3 partitions and leads 1 of them: 2/3 of its share is imbalanced.
    w = World(brokers=(1, 2))
    w.create(("t", -1, -1, {}, {0: [1, 2], 1: [1, 2], 2: [1, 2], 3: [2, 1]}))
    for pid in (1, 2):
        w.apply(alter(w, pid=pid, isr=(1, 2)).records)
        part = w.part("t", pid)
        w.repl.topics[w.repl.topic("t").topic_id].parts[pid] = type(part)(
            part.replicas, part.isr, 2, part.leader_epoch + 1, part.partition_epoch + 1)
    records = w.repl.maybe_balance_partition_leaders(percentage)
    assert sorted(r.partition_id for r in records) == ([1, 2] if moved else [])
    assert all(r.leader == 1 for r in records)
