"""ConfigurationControlManager, ProducerIdControlManager, BrokerHeartbeatManager and
ClusterControlManager on their own (MockTime for the heartbeats)."""

from __future__ import annotations

import uuid

import pytest

from controller.broker_heartbeat import BrokerHeartbeatManager
from controller.cluster_control import BrokerEndpoint, BrokerRegistration, ClusterControlManager
from controller.configuration_control import APPEND, DELETE, SET, SUBTRACT, ConfigurationControlManager
from controller.controller_purgatory import ControllerPurgatory
from controller.producer_id_control import BLOCK_SIZE, ProducerIdControlManager
from protocol.clock import MockTime
from protocol.errors import ErrorCode as E
from protocol.messages.metadata_records import MetadataRecordType as T, make_record

from .helpers import CLUSTER_ID, registration

DEFAULTS = {"retention.ms": "604800000", "segment.bytes": "1073741824", "cleanup.policy": "delete"}


def apply(configs, records):
    for r in records:
        configs.replay(r)


def test_incremental_alter_configs_operations():
    c = ConfigurationControlManager(DEFAULTS)
    code, _msg, records = c.incremental_alter("t", [("retention.ms", SET, "1000"), ("segment.bytes", SET, "100000")])
    assert code == E.NONE and [(r.name, r.value) for r in records] == [("retention.ms", "1000"), ("segment.bytes", "100000")]
    apply(c, records)
    assert c.topic_configs("t") == {"retention.ms": "1000", "segment.bytes": "100000"}
    code, _msg, records = c.incremental_alter("t", [("retention.ms", DELETE, None), ("cleanup.policy", APPEND, "compact")])
    assert code == E.NONE
    apply(c, records)
    assert c.topic_configs("t") == {"segment.bytes": "100000", "cleanup.policy": "delete,compact"}
    code, _msg, records = c.incremental_alter("t", [("cleanup.policy", SUBTRACT, "delete")])
    apply(c, records)
    assert c.topic_configs("t")["cleanup.policy"] == "compact"
    assert c.incremental_alter("t", [("retention.ms", APPEND, "1")])[0] == E.INVALID_CONFIG
    assert c.incremental_alter("t", [("segment.bytes", SET, "1")])[0] == E.INVALID_CONFIG   # below LogConfig's minimum
    assert c.incremental_alter("t", [("no.such.key", SET, "1")])[0] == E.INVALID_CONFIG
    assert c.incremental_alter("t", [("retention.ms", SET, None)])[0] == E.INVALID_CONFIG
    assert c.incremental_alter("t", [("retention.ms", 9, "1")])[0] == E.INVALID_REQUEST


def test_dynamic_broker_configs_follow_kafkas_rules():
    """Kafka's DynamicBrokerConfig.validateConfigs: dynamic keys per broker or cluster-wide,
    static-only keys, SSL keys without a listener prefix, bad values and bad broker names are
    INVALID_REQUEST (KAFKA-13609) and change nothing; a custom key is kept (Kafka allows them)."""
    c = ConfigurationControlManager(DEFAULTS)
    code, _m, records = c.broker_incremental_alter("", [("message.max.bytes", SET, "2000"),
                                                        ("log.cleaner.threads", SET, "2")])
    assert code == E.NONE and [(r.resource_type, r.resource_name, r.name, r.value) for r in records] == [
        (4, "", "log.cleaner.threads", "2"), (4, "", "message.max.bytes", "2000")]
    apply(c, records)
    code, _m, records = c.broker_incremental_alter("1", [("follower.replication.throttled.rate", SET, "100"),
                                                         ("custom.key", SET, "x")])
    assert code == E.NONE
    apply(c, records)
    assert c.broker_configs == {"": {"message.max.bytes": "2000", "log.cleaner.threads": "2"},
                                "1": {"follower.replication.throttled.rate": "100", "custom.key": "x"}}
    for name, ops, fragment in [
            ("1", [("log.dirs", SET, "/x")], "Cannot update these configs dynamically: Set(log.dirs)"),
            ("", [("broker.id", SET, "3"), ("message.max.bytes", SET, "1")], "Set(broker.id)"),
            ("1", [("ssl.keystore.location", SET, "/k")], "only per-listener"),
            ("1", [("message.max.bytes", SET, "big")], "message.max.bytes"),
            ("1", [("leader.replication.throttled.rate", SET, "-1")], "below the minimum"),
            ("x", [("message.max.bytes", SET, "1")], "Node id must be an integer"),
            ("1", [("message.max.bytes", SET, None)], "Null value")]:
        code, message, records = c.broker_incremental_alter(name, ops)
        assert (code, records) == (E.INVALID_REQUEST, []) and fragment in message, (name, ops, message)
    code, _m, records = c.broker_incremental_alter("", [("message.max.bytes", DELETE, None)])
    assert code == E.NONE and [(r.name, r.value) for r in records] == [("message.max.bytes", None)]
    apply(c, records)
    assert c.broker_configs[""] == {"log.cleaner.threads": "2"}
    # AlterConfigs: the resource's dynamic configs become exactly the given ones
    code, _m, records = c.broker_legacy_alter("1", {"leader.replication.throttled.rate": "7"})
    apply(c, records)
    assert c.broker_configs["1"] == {"leader.replication.throttled.rate": "7"}
    # the cluster-wide unclean.leader.election.enable is the default of every topic (the controller decides)
    assert not c.unclean_leader_election_enabled("t")
    apply(c, c.broker_incremental_alter("", [("unclean.leader.election.enable", SET, "true")])[2])
    assert c.unclean_leader_election_enabled("t")
    # the snapshot carries them
    again = ConfigurationControlManager(DEFAULTS)
    apply(again, c.snapshot_records())
    assert again.broker_configs == c.broker_configs


def test_throttled_replicas_lists_are_validated_as_kafka_does():
    """Kafka's ThrottledReplicaListValidator: "*" or partition:broker pairs, else INVALID_CONFIG."""
    c = ConfigurationControlManager(DEFAULTS)
    for good in ("*", "0:1,1:2", ""):
        assert c.incremental_alter("t", [("leader.replication.throttled.replicas", SET, good)])[0] == E.NONE, good
    for bad in ("abc", "0:1,x", "0:"):
        code, message, records = c.incremental_alter("t", [("follower.replication.throttled.replicas", SET, bad)])
        assert (code, records) == (E.INVALID_CONFIG, []) and "[partitionId]:[brokerId]" in message, bad


def test_legacy_alter_configs_replaces_the_whole_set():
    c = ConfigurationControlManager(DEFAULTS)
    apply(c, c.legacy_alter("t", {"retention.ms": "1", "segment.bytes": "100000"})[2])
    code, _msg, records = c.legacy_alter("t", {"retention.ms": "2"})
    assert code == E.NONE
    assert [(r.name, r.value) for r in records] == [("retention.ms", "2"), ("segment.bytes", None)]
    apply(c, records)
    assert c.topic_configs("t") == {"retention.ms": "2"}


def test_unclean_leader_election_per_topic_over_the_default():
    c = ConfigurationControlManager(DEFAULTS, unclean_leader_election_default=False)
    assert not c.unclean_leader_election_enabled("t")
    apply(c, c.incremental_alter("t", [("unclean.leader.election.enable", SET, "true")])[2])
    assert c.unclean_leader_election_enabled("t")
    assert ConfigurationControlManager(DEFAULTS, True).unclean_leader_election_enabled("t")


def test_describe_shows_defaults_and_overrides():
    c = ConfigurationControlManager(DEFAULTS)
    apply(c, c.incremental_alter("t", [("retention.ms", SET, "5")])[2])
    entries = {e["name"]: (e["value"], e["config_source"]) for e in c.describe("t")}
    assert entries == {"retention.ms": ("5", 1), "segment.bytes": ("1073741824", 5), "cleanup.policy": ("delete", 5)}
    assert [e["name"] for e in c.describe("t", ["segment.bytes"])] == ["segment.bytes"]


def test_producer_id_blocks():
    cluster = ClusterControlManager(CLUSTER_ID)
    cluster.replay(BrokerRegistration(1, uuid.UUID(int=1), 10, (), None, False).to_record())
    ids = ProducerIdControlManager(cluster)
    first = ids.generate_next_producer_ids(1, 10)
    assert first.response == {"error_code": 0, "producer_id_start": 0, "producer_id_len": BLOCK_SIZE}
    for r in first.records:
        ids.replay(r)
    second = ids.generate_next_producer_ids(1, 10)
    assert second.response["producer_id_start"] == BLOCK_SIZE
    assert ids.generate_next_producer_ids(1, 9).response["error_code"] == E.STALE_BROKER_EPOCH
    assert ids.generate_next_producer_ids(2, 10).response["error_code"] == E.STALE_BROKER_EPOCH
    with pytest.raises(ValueError):
        ids.replay(first.records[0])   # ids never go back


def test_heartbeat_sessions_on_mock_time():
    time = MockTime()
    hb = BrokerHeartbeatManager(time, 9000)
    hb.touch(1)
    time.sleep(3000)
    hb.touch(2)
    assert hb.next_expiry_ms() == 6000
    time.sleep(5999)
    assert hb.expired() == [] and hb.has_valid_session(1)
    time.sleep(1)
    assert hb.expired() == [1] and not hb.has_valid_session(1) and hb.has_valid_session(2)
    hb.touch(1)   # back: now the youngest
    assert hb.expired() == [] and hb.next_expiry_ms() == 3000
    time.sleep(3000)
    assert hb.expired() == [2]
    hb.remove(2)
    assert hb.next_expiry_ms() == 6000
    hb.remove(1)
    assert hb.next_expiry_ms() is None


def test_cluster_control_replay():
    c = ClusterControlManager(CLUSTER_ID)
    req = registration(1)
    c.replay(c.registration_records(req, 5))
    reg = c.registration(1)
    assert (reg.epoch, reg.fenced, reg.listeners) == (5, True, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9001, 0),))
    assert not c.is_active(1)
    c.replay(c.unfence_record(1))
    assert c.is_active(1) and c.check_broker_epoch(1, 5) == E.NONE and c.check_broker_epoch(1, 4) == E.STALE_BROKER_EPOCH
    c.replay(c.controlled_shutdown_record(1))
    assert c.is_unfenced(1) and not c.is_active(1)
    c.replay(make_record(T.FENCE_BROKER, id=1, epoch=4))    # for an older registration: ignored
    assert c.is_unfenced(1)
    c.replay(c.fence_record(1))
    assert c.registration(1).fenced
    c.replay(make_record(T.BROKER_REGISTRATION_CHANGE, broker_id=1, broker_epoch=5, fenced=-1))
    assert c.is_unfenced(1)
    assert c.same_registration(req) == c.registration(1)
    assert c.same_registration(registration(1, incarnation=uuid.uuid4())) is None
    c.replay(make_record(T.UNREGISTER_BROKER, broker_id=1, broker_epoch=5))
    assert c.registration(1) is None


def test_purgatory_runs_actions_in_order_up_to_an_offset():
    p = ControllerPurgatory()
    ran, failed = [], []
    for offset in (3, 3, 5, 9):
        p.add(offset, lambda o=offset: ran.append(o), failed.append)
    assert p.complete_up_to(2) == 0
    assert p.complete_up_to(5) == 3 and ran == [3, 3, 5]
    with pytest.raises(ValueError):
        p.add(4, lambda: None)
    assert p.fail_all(RuntimeError("x")) == 1 and len(failed) == 1 and len(p) == 0
