"""Authorization on real processes: a controller and brokers with Kafka's StandardAuthorizer,
ACLs managed with kafka-python's and confluent-kafka's admin clients, taking effect on every
broker; SCRAM credentials stored the same way; and issue 25's probe — a client's
StopReplica, LeaderAndIsr and UpdateMetadata (and BrokerRegistration, BrokerHeartbeat,
AlterPartition at the controller) refused with CLUSTER_AUTHORIZATION_FAILED, the partition
serving on with its data and offsets.

Until connections authenticate, every principal here is User:ANONYMOUS (PLAINTEXT). Hosts
tell them apart: the brokers, the controller and the test's admin connect from 127.0.0.1;
the "client" connects from 127.0.0.2 (loopback holds all of 127/8), and the ACLs name hosts.
allow.everyone.if.no.acl.found=true lets the cluster start with no ACL at all."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                   ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)
from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient
from kafka.admin import ResourcePattern, ResourcePatternFilter
from kafka.admin import ResourceType as KPResourceType

from controller.launcher import LocalCluster
from protocol.api_keys import ApiKey
from protocol.client.metrics import read_endpoint
from protocol.errors import ErrorCode as E
from tests.robustness.frames import Raw, good_batch
from tests.support import wait_until

from .helpers import admin, read_all, wait_futures

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": "true"}
CLIENT_HOST = "127.0.0.2"


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, 2, broker_props={**AUTHORIZER, "broker.heartbeat.interval.ms": 500},
                     controller_props={**AUTHORIZER, "default.replication.factor": 2}, metrics=True)
    try:
        c.start()
        yield c
    finally:
        c.kill()


def describe_acls_on(port: int, source: str = "127.0.0.1") -> list[tuple]:
    raw = Raw(port, source=source)
    try:
        response = raw.ask(ApiKey.DESCRIBE_ACLS, 2, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    finally:
        raw.close()
    assert response.error_code == 0, response
    return sorted((r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                   a.permission_type) for r in response.resources for a in r.acls)


def wait_acls_everywhere(cluster, expected: list[tuple]) -> None:
    for b in cluster.brokers.values():
        wait_until(lambda: describe_acls_on(b.port) == sorted(expected), timeout_s=10,
                   what=f"broker {b.broker_id} to hold {expected}")


def cluster_action_from_localhost(client) -> AclBinding:
    return AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS",
                      "127.0.0.1", AclOperation.ALL, AclPermissionType.ALLOW)


def produce_numbers(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, str(i).encode(), partition=0)
    assert producer.flush(30) == 0


def test_the_cluster_action_probe_changes_nothing(cluster):
    """Issue 25's probe on a PLAINTEXT client listener with an authorizer configured."""
    a = admin(cluster)
    wait_futures(a.create_acls([cluster_action_from_localhost(a)]))
    wait_acls_everywhere(cluster, [(4, "kafka-cluster", 3, "User:ANONYMOUS", "127.0.0.1", 2, 3)])
    from confluent_kafka.admin import NewTopic
    wait_futures(a.create_topics([NewTopic("probe", 1, 2)]))
    produce_numbers(cluster.bootstrap, "probe", 1000)
    leader_before = topic_leader(cluster, "probe")
    broker = cluster.brokers[leader_before]

    raw = Raw(broker.port, source=CLIENT_HOST)
    try:
        stop = raw.ask(ApiKey.STOP_REPLICA, 4, {
            "controller_id": 3000, "controller_epoch": 1000, "broker_epoch": -1, "topic_states": [
                {"topic_name": "probe", "partition_states": [
                    {"partition_index": 0, "leader_epoch": 1000, "delete_partition": True}]}]})
        assert stop.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        assert [p.error_code for p in stop.partition_errors] == [E.CLUSTER_AUTHORIZATION_FAILED]
        lisr = raw.ask(ApiKey.LEADER_AND_ISR, 7, {
            "controller_id": 3000, "controller_epoch": 1000, "broker_epoch": -1, "type": 2, "topic_states": [
                {"topic_name": "probe", "topic_id": uuid.uuid4(), "partition_states": [
                    {"partition_index": 0, "controller_epoch": 1000, "leader": 99, "leader_epoch": 1000,
                     "isr": [99], "partition_epoch": 1000, "replicas": [99], "is_new": False}]}],
            "live_leaders": [{"broker_id": 99, "host_name": "127.0.0.1", "port": 1}]})
        assert lisr.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        um = raw.ask(ApiKey.UPDATE_METADATA, 8, {
            "controller_id": 3000, "controller_epoch": 1000, "broker_epoch": -1, "type": 2, "topic_states": [],
            "live_brokers": []})
        assert um.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    finally:
        raw.close()

    controller = Raw(cluster.controller.port, source=CLIENT_HOST)
    try:
        # a new incarnation of the leader, in the right cluster: registered, it would fence the real one
        cluster_id = controller.ask(ApiKey.METADATA, 8, {"topics": [], "allow_auto_topic_creation": False}).cluster_id
        reg = controller.ask(ApiKey.BROKER_REGISTRATION, 3, {
            "broker_id": leader_before, "cluster_id": cluster_id, "incarnation_id": uuid.uuid4(),
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1, "security_protocol": 0}],
            "features": [], "rack": None})
        assert (reg.error_code, reg.broker_epoch) == (E.CLUSTER_AUTHORIZATION_FAILED, -1)
        hb = controller.ask(ApiKey.BROKER_HEARTBEAT, 1, {
            "broker_id": leader_before, "broker_epoch": 0, "current_metadata_offset": 0, "want_fence": True,
            "want_shut_down": True})
        assert hb.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        ap = controller.ask(ApiKey.ALTER_PARTITION, 2, {"broker_id": leader_before, "broker_epoch": 0, "topics": [
            {"topic_id": uuid.uuid4(), "partitions": [
                {"partition_index": 0, "leader_epoch": 0, "new_isr": [leader_before], "partition_epoch": 0}]}]})
        assert ap.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    finally:
        controller.close()

    # Nothing changed: same leader, both brokers live, every record still there at its offset.
    time.sleep(0.5)
    assert topic_leader(cluster, "probe") == leader_before
    assert set(cluster.active_controller().live_brokers()) == {1, 2}
    assert read_all(cluster.bootstrap, "probe", 1) == {0: list(range(1000))}
    log = broker.log_text()
    assert "is Denied operation = ClusterAction from host = 127.0.0.2" in log and "StopReplica" in log
    # counted: 3 on the broker, 3 on the controller; and the bindings loaded on each
    for process, denials in ((broker, 3), (cluster.controller, 3)):
        status = asyncio.run(read_endpoint(f"127.0.0.1:{process.metrics_port}"))
        assert status.value("kafka_server_authorizer_metrics_authorization_denied_total",
                            operation="ClusterAction") == denials
        assert status.value("kafka_server_authorizer_metrics_acls_total_count") == 1


def topic_leader(cluster, topic: str) -> int:
    raw = Raw(cluster.brokers[1].port)
    try:
        md = raw.ask(ApiKey.METADATA, 8, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    finally:
        raw.close()
    [t] = md.topics
    return t.partitions[0].leader_id


def produce_from(port: int, source: str, topic: str) -> int:
    raw = Raw(port, source=source)
    try:
        return raw.produce({(topic, 0): good_batch(1)})[(topic, 0)]
    finally:
        raw.close()


def test_acls_from_kafka_python_take_effect_on_every_broker(cluster):
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    try:
        from kafka.admin import NewTopic
        kp.create_topics([NewTopic("orders", 2, 2)])
        wait_until(lambda: all(produce_from(b.port, CLIENT_HOST, "orders") in (0, E.NOT_LEADER_OR_FOLLOWER)
                               for b in cluster.brokers.values()), what="orders to be writable")
        deny = ACL("User:ANONYMOUS", CLIENT_HOST, ACLOperation.WRITE, ACLPermissionType.DENY,
                   ResourcePattern(KPResourceType.TOPIC, "ord", ACLResourcePatternType.PREFIXED))
        # (an ACL naming a topic takes allow.everyone.if.no.acl.found away from it: allow writes
        # from anywhere, deny them from the client's host; DENY wins)
        allow = ACL("User:ANONYMOUS", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                    ResourcePattern(KPResourceType.TOPIC, "orders", ACLResourcePatternType.LITERAL))
        result = kp.create_acls([deny, allow])
        assert result["failed"] == [] and len(result["succeeded"]) == 2
        wait_acls_everywhere(cluster, [(2, "ord", 4, "User:ANONYMOUS", CLIENT_HOST, 4, 2),
                                       (2, "orders", 3, "User:ANONYMOUS", "*", 4, 3)])
        acls, error = kp.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                 ResourcePatternFilter(KPResourceType.TOPIC, "orders",
                                                                       ACLResourcePatternType.MATCH)))
        assert error.errno == 0 and sorted((a.host, a.permission_type) for a in acls) == [
            ("*", ACLPermissionType.ALLOW), (CLIENT_HOST, ACLPermissionType.DENY)]
        # on every broker: refused from the client's host, allowed from the other
        for b in cluster.brokers.values():
            assert produce_from(b.port, CLIENT_HOST, "orders") == E.TOPIC_AUTHORIZATION_FAILED
            assert produce_from(b.port, "127.0.0.1", "orders") in (0, E.NOT_LEADER_OR_FOLLOWER)
        deleted = kp.delete_acls([ACLFilter("User:ANONYMOUS", None, ACLOperation.ANY, ACLPermissionType.DENY,
                                            ResourcePatternFilter(KPResourceType.TOPIC, None,
                                                                  ACLResourcePatternType.ANY))])
        [(_filter, matched, error)] = deleted
        assert error.errno == 0 and [(a.host, a.resource_pattern.resource_name) for a in matched] == [
            (CLIENT_HOST, "ord")]
        wait_acls_everywhere(cluster, [(2, "orders", 3, "User:ANONYMOUS", "*", 4, 3)])
        for b in cluster.brokers.values():
            assert produce_from(b.port, CLIENT_HOST, "orders") in (0, E.NOT_LEADER_OR_FOLLOWER)
        # a binding the controller refuses, as Kafka's does
        bad = ACL("User:ANONYMOUS", "*", ACLOperation.ALTER, ACLPermissionType.ALLOW,
                  ResourcePattern(KPResourceType.CLUSTER, "other-cluster", ACLResourcePatternType.LITERAL))
        result = kp.create_acls([bad])
        assert result["succeeded"] == [] and len(result["failed"]) == 1
    finally:
        kp.close()


def test_acls_and_scram_credentials_from_confluent_kafka(cluster):
    a = admin(cluster)
    group_read = AclBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:alice", "*",
                            AclOperation.READ, AclPermissionType.ALLOW)
    topic_all = AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:*", "*",
                           AclOperation.ALL, AclPermissionType.ALLOW)
    wait_futures(a.create_acls([group_read, topic_all]))
    found = a.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                             AclOperation.ANY, AclPermissionType.ANY)).result(timeout=30)
    assert sorted(str(b) for b in found) == sorted(str(b) for b in (group_read, topic_all))
    wait_acls_everywhere(cluster, [(2, "*", 3, "User:*", "*", 2, 3), (3, "g", 3, "User:alice", "*", 3, 3)])
    deleted = a.delete_acls([AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, None, None,
                                              AclOperation.ANY, AclPermissionType.ANY)])
    assert [str(b) for f in deleted.values() for b in f.result(timeout=30)] == [str(group_read)]

    # SCRAM: the salted password computed by the client, the keys stored by the controller, on every broker
    upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"alice-secret")
    wait_futures(a.alter_user_scram_credentials([upsert]))
    started = time.monotonic()
    for b in cluster.brokers.values():
        one = admin_of(b)
        wait_until(lambda: scram_of(one, "alice") == [(ScramMechanism.SCRAM_SHA_256, 8192)], timeout_s=5,
                   what=f"alice's credential on broker {b.broker_id}")
    assert time.monotonic() - started < 5
    wait_futures(a.alter_user_scram_credentials([UserScramCredentialDeletion("alice",
                                                                             ScramMechanism.SCRAM_SHA_256)]))
    for b in cluster.brokers.values():
        one = admin_of(b)
        wait_until(lambda: scram_of(one, "alice") is None, timeout_s=5, what="alice's credential gone")
    # iterations below SCRAM's minimum: UNACCEPTABLE_CREDENTIAL, as Kafka's controller answers
    weak = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000), b"pw")
    with pytest.raises(Exception, match="UNACCEPTABLE_CREDENTIAL|iterations"):
        wait_futures(a.alter_user_scram_credentials([weak]))


def admin_of(broker):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def scram_of(client, user: str):
    try:
        description = client.describe_user_scram_credentials([user])[user].result(timeout=10)
    except Exception:  # noqa: BLE001 - RESOURCE_NOT_FOUND when the user has no credential
        return None
    return [(info.mechanism, info.iterations) for info in description.scram_credential_infos]


def test_a_new_controller_sends_the_acls_in_every_broker_s_full_state(cluster):
    """A controller that starts again loads the ACLs from its metadata log and sends every
    broker its full state, which replaces what the broker had: were the ACLs missing from it,
    the brokers would drop theirs."""
    a = admin(cluster)
    binding = AclBinding(ResourceType.TOPIC, "kept", ResourcePatternType.PREFIXED, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    wait_futures(a.create_acls([binding]))
    expected = [(2, "kept", 4, "User:alice", "*", 3, 3)]
    wait_acls_everywhere(cluster, expected)
    logs = {b.broker_id: b.log_text().count("ACLs loaded from the controller") for b in cluster.brokers.values()}
    cluster.controller.stop()
    cluster.controller.start(60)
    for b in cluster.brokers.values():  # each got a new full state ...
        wait_until(lambda: b.log_text().count("ACLs loaded from the controller") > logs[b.broker_id], timeout_s=30,
                   what=f"broker {b.broker_id}'s full state from the new controller")
    wait_acls_everywhere(cluster, expected)  # ... with the ACLs in it
    assert describe_acls_on(cluster.controller.port) == expected
