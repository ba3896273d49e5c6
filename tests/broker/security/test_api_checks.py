"""What KafkaApis checks for each API, with the answers Kafka's KafkaApis (and ControllerApis,
for what a broker forwards) gives: KafkaApis on a mock transport as in tests/broker/test_apis.py,
with a StandardAuthorizer and a client principal set on the connection (what authentication
would have set), a group coordinator that records what reaches it."""

from __future__ import annotations

import struct
import uuid

import pytest

from broker.apis import KafkaApis
from broker.network import KafkaConnection, SocketServer
from broker.security.authorizer import (AclOperation as Op, AclPermissionType as P, PatternType as PT,
                                        ResourceType as R, StandardAcl, StandardAuthorizer)
from broker.security.credentials import SCRAM_SHA_256, SCRAM_SHA_512, make_credential
from broker.security.principal import KafkaPrincipal
from controller.acl_control import acl_record
from controller.scram_control import credential_record
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode as E
from protocol.fast_codecs import (FetchPartition, FetchRequest, decode_fetch_response, decode_produce_response,
                                  encode_fetch_request, encode_produce_request)
from protocol.messages import APIS
from protocol.messages.metadata_records import encode_record
from protocol.records import Record, build_batch

from ..test_apis import BROKER_ID, Broker, metadata
from ..test_network import MockTransport

ALICE = KafkaPrincipal.user("alice")
HOST = "10.1.2.3"


def acl(name="t", op=Op.READ, rtype=R.TOPIC, pattern=PT.LITERAL, perm=P.ALLOW, principal="User:alice", host="*"):
    return StandardAcl(rtype, name, pattern, principal, host, op, perm)


CLUSTER_ACTION = acl("kafka-cluster", Op.CLUSTER_ACTION, R.CLUSTER, principal="User:controller")


class FakeGroups:
    """The group coordinator as KafkaApis calls it: records the (filtered) requests, answers at once."""

    def __init__(self):
        self.calls: list = []

    def _called(self, name, req):
        self.calls.append((name, req))

    def join_group(self, req, version, client_id, host, respond):
        self._called("join", req)
        respond({"error_code": 0, "generation_id": 1, "protocol_name": "range", "leader": "m", "member_id": "m",
                 "members": []})

    def sync_group(self, req, version, respond):
        self._called("sync", req)
        respond({"error_code": 0, "assignment": b""})

    def heartbeat(self, req, version, respond):
        self._called("heartbeat", req)
        respond({"error_code": 0})

    def leave_group(self, req, version, respond):
        self._called("leave", req)
        respond({"error_code": 0})

    def offset_commit(self, req, version, respond):
        self._called("commit", req)
        respond({"topics": [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": 0}
                                                            for p in t.partitions]} for t in req.topics]})

    def txn_offset_commit(self, req, version, respond, errors):
        self._called("txn_commit", req)
        respond({"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": errors.get((t.name, p.partition_index), 0)}
            for p in t.partitions]} for t in req.topics]})

    def offset_fetch(self, req, version, respond):
        self._called("fetch", req)
        topics = [(t.name, list(t.partition_indexes)) for t in req.topics] if req.topics is not None else [
            ("t", [0]), ("secret", [0])]
        respond({"error_code": 0, "topics": [{"name": n, "partitions": [
            {"partition_index": p, "committed_offset": 7, "committed_leader_epoch": -1, "metadata": "",
             "error_code": 0} for p in ps]} for n, ps in topics]})

    def offset_delete(self, req, version, respond):
        self._called("offset_delete", req)
        respond({"error_code": 0, "topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": 0} for p in t.partitions]} for t in req.topics]})

    def list_groups(self, req, version, respond):
        self._called("list", req)
        respond({"error_code": 0, "groups": [{"group_id": g, "protocol_type": "consumer"} for g in ("g", "h")]})

    def describe_groups(self, req, version, respond):
        self._called("describe", req)
        respond({"groups": [{"error_code": 0, "group_id": g, "group_state": "Stable", "protocol_type": "consumer",
                             "protocol_data": "range", "members": [], "authorized_operations": 424}
                            for g in req.groups]})

    def delete_groups(self, req, version, respond):
        self._called("delete", req)
        respond({"results": [{"group_id": g, "error_code": 0} for g in req.groups_names]})

    def find_coordinator(self, req, version, locate, respond):
        self._called("find", req)
        if version < 4:
            return respond({"error_code": 0, "error_message": None, "node_id": 1, "host": "h", "port": 1})
        respond({"coordinators": [{"key": k, "node_id": 1, "host": "h", "port": 1, "error_code": 0,
                                   "error_message": None} for k in req.coordinator_keys]})


class SecuredBroker(Broker):
    """Broker (tests/broker/test_apis.py) whose KafkaApis has an authorizer, a group coordinator
    and whose connection's principal and address are the client's."""

    def __init__(self, tmp_path, *bindings, allow_if_none=False, super_users=()):
        super().__init__(tmp_path)
        self.authorizer = StandardAuthorizer(set(super_users), allow_if_none)
        self.groups = FakeGroups()
        self.apis = KafkaApis(replica_manager=self.rm, metadata_cache=self.cache, topic_admin=self.topic_admin,
                              config_repository=self.configs, producer_ids=self.producer_ids,
                              inter_broker_listener="PLAINTEXT", forwarding=self.forwarding,
                              broker_epoch=lambda: self.broker_epoch, group_coordinator=self.groups,
                              offsets_topic=object(), authorizer=self.authorizer)
        server = SocketServer(self.apis, max_request_size=1 << 20, max_inflight=10)
        self.conn = KafkaConnection(server, "PLAINTEXT")
        self.transport = MockTransport()
        self.conn.connection_made(self.transport)
        self.grant(CLUSTER_ACTION, *bindings)
        self.as_principal(KafkaPrincipal.user("controller"))

    def grant(self, *bindings):
        for b in bindings:
            self.authorizer.add_acl(uuid.uuid4(), b)

    def as_principal(self, principal, host=HOST):
        self.conn.principal = principal
        self.conn.client_host = host

    def ask(self, api_key, version, body):
        self.send(api_key, version, body)
        [response] = self.responses(api_key, version)
        return response


@pytest.fixture
def make(tmp_path):
    made = []

    def factory(*bindings, **kw):
        b = SecuredBroker(tmp_path / str(len(made)), *bindings, **kw)
        made.append(b)
        return b
    yield factory
    for b in made:
        b.close()


def produce(b, topics, transactional_id=None, acks=1, transactional=False):
    batch = build_batch([Record(value=b"v", timestamp=1)], transactional=transactional,
                        **({"producer_id": 7, "producer_epoch": 0, "base_sequence": 0} if transactional else {}))
    b.correlation_id += 1
    frame = b"".join(bytes(c) for c in encode_produce_request(
        8, b.correlation_id, "t", acks, 1000, [(t, [(0, batch)]) for t in topics], transactional_id))
    b.conn.data_received(frame)
    [out] = b.transport.written
    b.transport.written.clear()
    return {t: [(p, code) for p, code, *_ in parts] for t, parts in decode_produce_response(8, out, 8)}


def test_produce_needs_write_on_each_topic_and_a_transactional_id_write_on_it(make):
    b = make(acl("t", Op.WRITE), acl("other", Op.READ))
    b.create_online("t")
    b.create_online("other")
    b.as_principal(ALICE)
    assert produce(b, ["t", "other"]) == {"t": [(0, E.NONE)], "other": [(0, E.TOPIC_AUTHORIZATION_FAILED)]}
    assert produce(b, ["missing"]) == {"missing": [(0, E.TOPIC_AUTHORIZATION_FAILED)]}   # refused before existence
    # Kafka checks WRITE on the transactional id only when the request holds transactional
    # records (RequestUtils.hasTransactionalRecords): a plain batch with an id set goes through
    assert produce(b, ["t"], transactional_id="tx") == {"t": [(0, E.NONE)]}
    assert produce(b, ["t"], transactional_id="tx", transactional=True) == {
        "t": [(0, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]}
    assert b.rm.get_partition("other", 0).log.log_end_offset == 0
    b.grant(acl("t", Op.WRITE, principal="User:*"))
    b.as_principal(KafkaPrincipal.user("bob"))
    assert produce(b, ["t"]) == {"t": [(0, E.NONE)]}


def test_a_connection_s_allowed_topics_follow_the_bindings_and_its_principal(make):
    """The produce path remembers, per connection, the topics it was allowed to write: a
    binding removed or added, or a new principal on the connection, takes effect at once."""
    b = make()
    b.create_online("t")
    write_id = uuid.uuid4()
    b.authorizer.add_acl(write_id, acl("t", Op.WRITE))
    b.as_principal(ALICE)
    assert produce(b, ["t"]) == {"t": [(0, E.NONE)]}
    assert produce(b, ["t"]) == {"t": [(0, E.NONE)]}
    b.authorizer.remove_acl(write_id)
    assert produce(b, ["t"]) == {"t": [(0, E.TOPIC_AUTHORIZATION_FAILED)]}
    b.grant(acl("t", Op.WRITE))
    assert produce(b, ["t"]) == {"t": [(0, E.NONE)]}
    b.conn.principal = KafkaPrincipal.user("mallory")  # same connection, same host, another principal
    assert produce(b, ["t"]) == {"t": [(0, E.TOPIC_AUTHORIZATION_FAILED)]}
    b.conn.principal = ALICE
    assert produce(b, ["t"]) == {"t": [(0, E.NONE)]}
    b.grant(acl("t", Op.WRITE, principal="User:*", perm=P.DENY))  # a DENY for everyone wins
    assert produce(b, ["t"]) == {"t": [(0, E.TOPIC_AUTHORIZATION_FAILED)]}
    assert b.rm.get_partition("t", 0).log.log_end_offset == 4


def fetch(b, topics, replica_id=-1):
    b.correlation_id += 1
    request = FetchRequest(11, replica_id, 0, 1, 1 << 20, 0, 0, -1,
                           [(t, [FetchPartition(0, -1, 0, -1, 1 << 20)]) for t in topics], [], "")
    b.conn.data_received(encode_fetch_request(11, b.correlation_id, "t", request))
    [out] = b.transport.written
    b.transport.written.clear()
    response = decode_fetch_response(11, out, 8)
    # records: True (some), False (empty) or None (null: what librdkafka rejects a response for;
    # Kafka answers an error with empty records)
    return response.error_code, {t: [(p.partition, p.error_code, None if p.records is None else len(p.records) > 0)
                                     for p in parts] for t, parts in response.responses}


def test_fetch_needs_read_from_consumers_and_cluster_action_from_followers(make):
    b = make(acl("t", Op.READ))
    b.create_online("t")
    b.create_online("secret")
    b.grant(acl("t", Op.WRITE, principal="User:controller"), acl("secret", Op.WRITE, principal="User:controller"))
    produce(b, ["t", "secret"])
    b.as_principal(ALICE)
    assert fetch(b, ["t", "secret"]) == (0, {"t": [(0, E.NONE, True)],
                                             "secret": [(0, E.TOPIC_AUTHORIZATION_FAILED, False)]})
    # a follower without CLUSTER_ACTION: every partition TOPIC_AUTHORIZATION_FAILED (Kafka 3.x)
    assert fetch(b, ["t"], replica_id=2) == (0, {"t": [(0, E.TOPIC_AUTHORIZATION_FAILED, False)]})
    b.as_principal(KafkaPrincipal.user("controller"))
    # authorized: what the replica manager says (broker 2 is no replica of it)
    assert fetch(b, ["t", "secret"], replica_id=2)[1]["secret"][0][1] == E.NOT_LEADER_OR_FOLLOWER


def test_metadata_filters_all_topics_refuses_named_ones_and_auto_creation_needs_create(make):
    b = make(acl("seen", Op.DESCRIBE), acl("new", Op.DESCRIBE), acl("made", Op.DESCRIBE), acl("made", Op.CREATE))
    for t in ("seen", "hidden"):
        b.create_online(t)
    b.as_principal(ALICE)
    assert [t.name for t in metadata(b).topics] == ["seen"]
    response = metadata(b, "seen", "hidden", "new", "made", auto_create=True)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("seen", E.NONE), ("hidden", E.TOPIC_AUTHORIZATION_FAILED), ("new", E.TOPIC_AUTHORIZATION_FAILED),
        ("made", E.LEADER_NOT_AVAILABLE)]
    assert b.topic_admin.auto_created == ["made"]
    # without auto-creation asked, an unknown describable topic is just unknown
    assert [t.error_code for t in metadata(b, "new").topics] == [E.UNKNOWN_TOPIC_OR_PARTITION]
    # CREATE on the cluster allows every auto-creation
    b.grant(acl("kafka-cluster", Op.CREATE, R.CLUSTER))
    assert [t.error_code for t in metadata(b, "new", auto_create=True).topics] == [E.LEADER_NOT_AVAILABLE]


def test_metadata_authorized_operations(make):
    b = make(acl("seen", Op.READ), acl("kafka-cluster", Op.DESCRIBE, R.CLUSTER))
    b.create_online("seen")
    b.as_principal(ALICE)
    b.send(ApiKey.METADATA, 8, {"topics": None, "include_cluster_authorized_operations": True,
                                "include_topic_authorized_operations": True})
    [response] = b.responses(ApiKey.METADATA, 8)
    assert response.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert response.cluster_authorized_operations == 1 << Op.DESCRIBE


def test_list_offsets_and_offset_for_leader_epoch_need_describe(make):
    b = make(acl("t", Op.DESCRIBE))
    b.create_online("t")
    b.create_online("secret")
    b.as_principal(ALICE)
    response = b.ask(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": n, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}
        for n in ("t", "secret")]})
    assert [(t.name, t.partitions[0].error_code) for t in response.topics] == [
        ("t", E.NONE), ("secret", E.TOPIC_AUTHORIZATION_FAILED)]
    body = {"replica_id": -1, "topics": [{"topic": n, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]} for n in ("t", "secret")]}
    response = b.ask(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, body)
    assert [(t.topic, t.partitions[0].error_code) for t in response.topics] == [
        ("t", E.NONE), ("secret", E.TOPIC_AUTHORIZATION_FAILED)]
    b.as_principal(KafkaPrincipal.user("controller"))   # CLUSTER_ACTION: every topic
    response = b.ask(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, body)
    assert [t.partitions[0].error_code for t in response.topics] == [E.NONE, E.NONE]


def test_create_and_delete_topics(make):
    b = make(acl("mine", Op.CREATE), acl("gone", Op.DELETE), acl("seen", Op.DESCRIBE))
    b.create_online("gone")
    b.create_online("seen")
    b.as_principal(ALICE)
    b.send(ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
        for n in ("mine", "theirs")], "timeout_ms": 1000, "validate_only": False})
    [(topics, _v, callback)] = b.topic_admin.created
    assert [t.name for t in topics] == ["mine"]
    callback([(E.NONE, None)])
    [response] = b.responses(ApiKey.CREATE_TOPICS, 4)
    assert [(t.name, t.error_code, t.error_message) for t in response.topics] == [
        ("mine", E.NONE, None), ("theirs", E.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")]
    b.send(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["gone", "seen", "unseen", "nowhere"], "timeout_ms": 1000})
    [(names, callback)] = b.topic_admin.deleted
    assert names == ["gone"]
    callback([(E.NONE, None)])
    [response] = b.responses(ApiKey.DELETE_TOPICS, 3)
    # DESCRIBE but no DELETE, and no DESCRIBE at all (existing or not): TOPIC_AUTHORIZATION_FAILED
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("gone", E.NONE), ("seen", E.TOPIC_AUTHORIZATION_FAILED), ("unseen", E.TOPIC_AUTHORIZATION_FAILED),
        ("nowhere", E.TOPIC_AUTHORIZATION_FAILED)]
    # CREATE / DELETE on the cluster: every topic
    b.grant(acl("kafka-cluster", Op.CREATE, R.CLUSTER), acl("kafka-cluster", Op.DELETE, R.CLUSTER))
    b.topic_admin.created.clear()
    b.topic_admin.deleted.clear()
    b.send(ApiKey.CREATE_TOPICS, 4, {"topics": [{"name": "theirs", "num_partitions": 1, "replication_factor": 1,
                                                 "assignments": [], "configs": []}], "timeout_ms": 0,
                                     "validate_only": False})
    b.send(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["seen"], "timeout_ms": 1000})
    assert [t.name for t in b.topic_admin.created[0][0]] == ["theirs"] and b.topic_admin.deleted[0][0] == ["seen"]


def test_describe_configs_needs_describe_configs_on_the_topic_or_the_cluster(make):
    b = make(acl("t", Op.ALTER_CONFIGS))
    b.create_online("t")
    b.create_online("secret")
    b.as_principal(ALICE)
    response = b.ask(ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [
        {"resource_type": 2, "resource_name": n, "configuration_keys": ["retention.ms"]} for n in ("t", "secret")]
        + [{"resource_type": 4, "resource_name": str(BROKER_ID), "configuration_keys": None}]})
    assert [(r.resource_name, r.error_code, r.error_message, len(r.configs)) for r in response.results] == [
        ("t", E.NONE, None, 1), ("secret", E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.", 0),
        (str(BROKER_ID), E.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", 0)]


def test_forwarded_requests_are_screened_before_they_reach_the_controller(make):
    b = make(acl("grow", Op.ALTER), acl("cfg", Op.ALTER_CONFIGS))
    b.as_principal(ALICE)
    body = {"topics": [{"name": n, "count": 4, "assignments": None} for n in ("grow", "nope")], "timeout_ms": 500,
            "validate_only": False}
    b.send(ApiKey.CREATE_PARTITIONS, 1, body)
    [(key, version, raw, _request, respond)] = b.forwarding.forwarded
    api = APIS[ApiKey.CREATE_PARTITIONS]
    assert [t.name for t in api.request.parse(1, raw).topics] == ["grow"]         # only what is allowed goes
    respond(api.response.build(1, {"throttle_time_ms": 0, "results": [{"name": "grow", "error_code": 0}]}))
    [response] = b.responses(ApiKey.CREATE_PARTITIONS, 1)
    assert [(r.name, r.error_code) for r in response.results] == [("grow", E.NONE),
                                                                  ("nope", E.TOPIC_AUTHORIZATION_FAILED)]
    # everything refused: answered here, nothing forwarded
    b.forwarding.forwarded.clear()
    response = b.ask(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 2, "resource_name": "secret", "configs": []},
        {"resource_type": 4, "resource_name": "1", "configs": []}], "validate_only": False})
    assert [(r.resource_name, r.error_code) for r in response.responses] == [
        ("secret", E.TOPIC_AUTHORIZATION_FAILED), ("1", E.CLUSTER_AUTHORIZATION_FAILED)]
    assert b.forwarding.forwarded == []
    # ElectLeaders, CreateAcls, DeleteAcls, AlterUserScramCredentials need ALTER on the cluster
    response = b.ask(ApiKey.ELECT_LEADERS, 1, {"election_type": 0, "topic_partitions": [
        {"topic": "t", "partitions": [0]}], "timeout_ms": 100})
    assert response.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    response = b.ask(ApiKey.CREATE_ACLS, 2, {"creations": [
        {"resource_type": 2, "resource_name": "x", "resource_pattern_type": 3, "principal": "User:alice",
         "host": "*", "operation": 3, "permission_type": 3}]})
    assert [r.error_code for r in response.results] == [E.CLUSTER_AUTHORIZATION_FAILED]
    response = b.ask(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [{"name": "z", "mechanism": 1}],
                                                              "upsertions": []})
    assert [(r.user, r.error_code) for r in response.results] == [("z", E.CLUSTER_AUTHORIZATION_FAILED)]
    assert b.forwarding.forwarded == []
    b.grant(acl("kafka-cluster", Op.ALTER, R.CLUSTER))
    b.send(ApiKey.CREATE_ACLS, 2, {"creations": []})
    assert [f[0] for f in b.forwarding.forwarded] == [ApiKey.CREATE_ACLS]


def test_acl_apis_without_an_authorizer_answer_security_disabled(tmp_path):
    b = Broker(tmp_path)
    try:
        b.send(ApiKey.CREATE_ACLS, 1, {"creations": [
            {"resource_type": 2, "resource_name": "x", "resource_pattern_type": 3, "principal": "User:a", "host": "*",
             "operation": 3, "permission_type": 3}]})
        [response] = b.responses(ApiKey.CREATE_ACLS, 1)
        assert [(r.error_code, r.error_message) for r in response.results] == [
            (E.SECURITY_DISABLED, "No Authorizer is configured.")]
        b.send(ApiKey.DESCRIBE_ACLS, 1, {"resource_type_filter": 1, "resource_name_filter": None,
                                         "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                         "operation": 1, "permission_type": 1})
        [response] = b.responses(ApiKey.DESCRIBE_ACLS, 1)
        assert response.error_code == E.SECURITY_DISABLED
        assert b.forwarding.forwarded == []
    finally:
        b.close()


def test_an_acl_request_with_unknown_elements_closes_the_connection(make):
    b = make(acl("kafka-cluster", Op.ALTER, R.CLUSTER))
    b.as_principal(ALICE)
    b.send(ApiKey.DELETE_ACLS, 1, {"filters": [{"resource_type_filter": 0, "resource_name_filter": None,
                                                "pattern_type_filter": 1, "principal_filter": None,
                                                "host_filter": None, "operation": 1, "permission_type": 1}]})
    assert b.transport.closed and b.forwarding.forwarded == []


def describe_acls(b, rtype=1, name=None, pattern=1, principal=None, version=2):
    return b.ask(ApiKey.DESCRIBE_ACLS, version, {
        "resource_type_filter": rtype, "resource_name_filter": name, "pattern_type_filter": pattern,
        "principal_filter": principal, "host_filter": None, "operation": 1, "permission_type": 1})


def test_describe_acls_from_the_broker_s_own_bindings(make):
    b = make(acl("kafka-cluster", Op.DESCRIBE, R.CLUSTER), acl("t", Op.WRITE), acl("t", Op.READ, host="1.2.3.4"),
             acl("pre", Op.READ, pattern=PT.PREFIXED), acl("g", Op.READ, R.GROUP, principal="User:bob"))
    b.as_principal(ALICE)
    response = describe_acls(b, R.TOPIC, "t", PT.LITERAL)
    assert response.error_code == 0
    assert [(r.resource_name, r.pattern_type, sorted((a.host, a.operation) for a in r.acls))
            for r in response.resources] == [("t", PT.LITERAL, [("*", Op.WRITE), ("1.2.3.4", Op.READ)])]
    response = describe_acls(b, R.TOPIC, "prefix", PT.MATCH)
    assert [(r.resource_name, r.pattern_type) for r in response.resources] == [("pre", PT.PREFIXED)]
    response = describe_acls(b, principal="User:bob")
    assert [(r.resource_type, r.resource_name) for r in response.resources] == [(R.GROUP, "g")]
    b.as_principal(KafkaPrincipal.user("bob"))
    response = describe_acls(b)
    assert (response.error_code, response.error_message, response.resources) == (
        E.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", [])


def update_metadata_records(b, records, full=False):
    b.send(ApiKey.UPDATE_METADATA, 8, {"controller_id": 3000, "controller_epoch": 1, "broker_epoch": 5,
                                       "type": 2 if full else 1, "topic_states": [],
                                       "live_brokers": [{"id": BROKER_ID, "rack": None, "endpoints": [
                                           {"port": 9092, "host": "h", "listener": "PLAINTEXT",
                                            "security_protocol": 0}]}],
                                       "metadata_records": [{"record": encode_record(r)} for r in records]})
    [response] = b.responses(ApiKey.UPDATE_METADATA, 8)
    return response.error_code


def test_update_metadata_carries_acls_and_credentials_and_only_the_controller_may_send_it(make):
    b = make()
    grant = acl("t", Op.WRITE)
    cred = make_credential(SCRAM_SHA_512, "pw", 4096, b"salt")
    full = [acl_record(uuid.UUID(int=1), CLUSTER_ACTION), acl_record(uuid.UUID(int=2), grant),
            credential_record("alice", 2, cred)]
    assert update_metadata_records(b, full, full=True) == E.NONE
    assert sorted(b.authorizer.acls()) == sorted([CLUSTER_ACTION, grant])
    assert b.apis.credential_cache.get("SCRAM-SHA-512", "alice") == cred
    # a client's UpdateMetadata: refused, and nothing it carried is applied
    b.as_principal(ALICE)
    evil = [acl_record(uuid.UUID(int=3), acl("kafka-cluster", Op.ALL, R.CLUSTER))]
    assert update_metadata_records(b, evil) == E.CLUSTER_AUTHORIZATION_FAILED
    assert uuid.UUID(int=3) not in b.authorizer.acls_index.by_id
    # the controller's next full state replaces everything
    b.as_principal(KafkaPrincipal.user("controller"))
    assert update_metadata_records(b, full[:1], full=True) == E.NONE
    assert b.authorizer.acls() == [CLUSTER_ACTION] and b.apis.credential_cache.get("SCRAM-SHA-512", "alice") is None


def test_describe_user_scram_credentials(make):
    b = make(acl("kafka-cluster", Op.DESCRIBE, R.CLUSTER))
    cache = b.apis.credential_cache
    cache.put("SCRAM-SHA-256", "alice", make_credential(SCRAM_SHA_256, "a", 8192))
    cache.put("SCRAM-SHA-512", "alice", make_credential(SCRAM_SHA_512, "a", 4096))
    cache.put("SCRAM-SHA-256", "bob", make_credential(SCRAM_SHA_256, "b", 4096))
    b.as_principal(ALICE)
    response = b.ask(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    assert [(r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in response.results] == [("alice", 0, [(1, 8192), (2, 4096)]), ("bob", 0, [(1, 4096)])]
    response = b.ask(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "bob"}, {"name": "x"},
                                                                           {"name": "bob"}]})
    assert [(r.user, r.error_code, r.error_message) for r in response.results] == [
        ("bob", E.DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for the same user twice in a single "
                                      "request: bob"),
        ("x", E.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist: x")]
    b.as_principal(KafkaPrincipal.user("bob"))
    response = b.ask(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "alice"}]})
    assert response.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert [r.error_code for r in response.results] == [E.CLUSTER_AUTHORIZATION_FAILED]


def test_control_requests_need_cluster_action_and_change_nothing(make):
    b = make()
    topic_id = b.create_online("kept")
    b.as_principal(ALICE)
    response = b.leader_and_isr("kept", topic_id, [(0, 2, 9, [BROKER_ID, 2])], controller_epoch=99)
    assert response.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert [p.error_code for t in response.topics for p in t.partition_errors] == [E.CLUSTER_AUTHORIZATION_FAILED]
    b.send(ApiKey.STOP_REPLICA, 4, {"controller_id": 3000, "controller_epoch": 99, "broker_epoch": -1, "topic_states": [
        {"topic_name": "kept", "partition_states": [{"partition_index": 0, "leader_epoch": 9,
                                                     "delete_partition": True}]}]})
    [stop] = b.responses(ApiKey.STOP_REPLICA, 4)
    assert stop.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert [p.error_code for p in stop.partition_errors] == [E.CLUSTER_AUTHORIZATION_FAILED]
    assert b.update_metadata(brokers=(7,), controller_epoch=99) == E.CLUSTER_AUTHORIZATION_FAILED
    partition = b.rm.get_partition("kept", 0)
    assert partition.is_leader and partition.leader_epoch == 0 and partition.log is not None
    assert b.rm.controller_epoch == 1 and sorted(b.cache.brokers) == [BROKER_ID]


# -- groups ----------------------------------------------------------------------------------

def test_group_membership_needs_read_on_the_group(make):
    b = make(acl("g", Op.READ, R.GROUP))
    b.as_principal(ALICE)
    join = {"group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    assert b.ask(ApiKey.JOIN_GROUP, 5, join).error_code == E.NONE
    assert b.ask(ApiKey.JOIN_GROUP, 5, {**join, "group_id": "other"}).error_code == E.GROUP_AUTHORIZATION_FAILED
    assert b.ask(ApiKey.HEARTBEAT, 3, {"group_id": "other", "generation_id": 1, "member_id": "m",
                                       "group_instance_id": None}).error_code == E.GROUP_AUTHORIZATION_FAILED
    assert b.ask(ApiKey.SYNC_GROUP, 3, {"group_id": "other", "generation_id": 1, "member_id": "m",
                                        "group_instance_id": None, "assignments": []}).error_code == \
        E.GROUP_AUTHORIZATION_FAILED
    assert b.ask(ApiKey.LEAVE_GROUP, 3, {"group_id": "other", "members": [
        {"member_id": "m", "group_instance_id": None}]}).error_code == E.GROUP_AUTHORIZATION_FAILED
    assert [name for name, _ in b.groups.calls] == ["join"]


def commit_body(group, *topics):
    return {"group_id": group, "generation_id_or_member_epoch": 1, "member_id": "m", "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": t, "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]} for t in topics]}


def test_offset_commit_needs_read_on_the_group_and_on_each_topic(make):
    b = make(acl("g", Op.READ, R.GROUP), acl("t", Op.READ))
    b.as_principal(ALICE)
    response = b.ask(ApiKey.OFFSET_COMMIT, 7, commit_body("g", "secret", "t"))
    assert [(t.name, [p.error_code for p in t.partitions]) for t in response.topics] == [
        ("secret", [E.TOPIC_AUTHORIZATION_FAILED]), ("t", [E.NONE])]
    assert [t.name for t in b.groups.calls[-1][1].topics] == ["t"]
    response = b.ask(ApiKey.OFFSET_COMMIT, 7, commit_body("other", "t"))
    assert [p.error_code for t in response.topics for p in t.partitions] == [E.GROUP_AUTHORIZATION_FAILED]


def test_offset_fetch_needs_describe_and_filters_topics(make):
    b = make(acl("g", Op.DESCRIBE, R.GROUP), acl("t", Op.DESCRIBE))
    b.as_principal(ALICE)
    response = b.ask(ApiKey.OFFSET_FETCH, 5, {"group_id": "g", "topics": None, "require_stable": False})
    assert [t.name for t in response.topics] == ["t"]                      # all topics: the others left out
    response = b.ask(ApiKey.OFFSET_FETCH, 5, {"group_id": "g", "require_stable": False, "topics": [
        {"name": n, "partition_indexes": [0]} for n in ("secret", "t")]})
    assert [(t.name, t.partitions[0].error_code, t.partitions[0].committed_offset) for t in response.topics] == [
        ("secret", E.TOPIC_AUTHORIZATION_FAILED, -1), ("t", E.NONE, 7)]
    response = b.ask(ApiKey.OFFSET_FETCH, 5, {"group_id": "nope", "topics": None, "require_stable": False})
    assert response.error_code == E.GROUP_AUTHORIZATION_FAILED


def test_offset_delete_needs_delete_on_the_group_and_read_on_topics(make):
    b = make(acl("g", Op.DELETE, R.GROUP), acl("t", Op.READ))
    b.as_principal(ALICE)
    body = {"group_id": "g", "topics": [{"name": n, "partitions": [{"partition_index": 0}]} for n in ("t", "x")]}
    response = b.ask(ApiKey.OFFSET_DELETE, 0, body)
    assert [(t.name, t.partitions[0].error_code) for t in response.topics] == [
        ("t", E.NONE), ("x", E.TOPIC_AUTHORIZATION_FAILED)]
    assert b.ask(ApiKey.OFFSET_DELETE, 0, {**body, "group_id": "h"}).error_code == E.GROUP_AUTHORIZATION_FAILED


def test_list_describe_and_delete_groups(make):
    b = make(acl("g", Op.DESCRIBE, R.GROUP), acl("g", Op.DELETE, R.GROUP))
    b.as_principal(ALICE)
    assert [g.group_id for g in b.ask(ApiKey.LIST_GROUPS, 4, {"states_filter": []}).groups] == ["g"]
    b.grant(acl("kafka-cluster", Op.DESCRIBE, R.CLUSTER))
    assert [g.group_id for g in b.ask(ApiKey.LIST_GROUPS, 4, {"states_filter": []}).groups] == ["g", "h"]
    response = b.ask(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["h", "g"], "include_authorized_operations": True})
    assert [(g.group_id, g.error_code, g.authorized_operations) for g in response.groups] == [
        ("h", E.GROUP_AUTHORIZATION_FAILED, -2147483648),
        ("g", E.NONE, (1 << Op.DESCRIBE) | (1 << Op.DELETE))]
    assert b.groups.calls[-1][1].groups == ["g"]
    response = b.ask(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["h", "g"]})
    assert [(r.group_id, r.error_code) for r in response.results] == [("h", E.GROUP_AUTHORIZATION_FAILED),
                                                                      ("g", E.NONE)]


def test_find_coordinator_needs_describe_on_the_group_or_transactional_id(make):
    b = make(acl("g", Op.DESCRIBE, R.GROUP))
    b.as_principal(ALICE)
    assert b.ask(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0}).error_code == E.NONE
    response = b.ask(ApiKey.FIND_COORDINATOR, 3, {"key": "h", "key_type": 0})
    assert (response.error_code, response.error_message) == (E.GROUP_AUTHORIZATION_FAILED,
                                                             "Group authorization failed.")
    response = b.ask(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["h", "g"]})
    assert [(c.key, c.error_code) for c in response.coordinators] == [("h", E.GROUP_AUTHORIZATION_FAILED),
                                                                      ("g", E.NONE)]
    response = b.ask(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx"]})
    assert [c.error_code for c in response.coordinators] == [E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]


def test_init_producer_id_needs_idempotent_write_or_write_on_any_topic(make):
    b = make()
    b.as_principal(ALICE)
    body = {"transactional_id": None, "transaction_timeout_ms": 1000}
    assert b.ask(ApiKey.INIT_PRODUCER_ID, 1, body).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    b.grant(acl("orders-", Op.WRITE, pattern=PT.PREFIXED))                  # KIP-679: WRITE on some topic
    b.send(ApiKey.INIT_PRODUCER_ID, 1, body)
    [answer] = b.producer_ids.waiting
    answer(E.NONE, 9)
    assert [r.producer_id for r in b.responses(ApiKey.INIT_PRODUCER_ID, 1)] == [9]
    response = b.ask(ApiKey.INIT_PRODUCER_ID, 1, {**body, "transactional_id": "tx"})
    assert response.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_no_authorizer_allows_everything(tmp_path):
    b = Broker(tmp_path)
    try:
        b.conn.principal = ALICE
        b.create_online("t")
        response = metadata(b, "t")
        assert [t.error_code for t in response.topics] == [E.NONE]
        assert struct.unpack(">i", struct.pack(">i", response.topics[0].topic_authorized_operations))[0] != 0
    finally:
        b.close()


def test_txn_offset_commit_needs_write_on_the_transactional_id_and_read_on_group_and_topics(make):
    from broker.transaction.handlers import TransactionApis
    b = make()
    b.apis.attach_transactions(TransactionApis(b.apis, coordinator=None, state_topic=None))  # type: ignore[arg-type]
    b.as_principal(ALICE)
    body = {"transactional_id": "tx", "group_id": "g", "producer_id": 5, "producer_epoch": 0, "generation_id": -1,
            "member_id": "", "group_instance_id": None,
            "topics": [{"name": n, "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}
                       for n in ("t", "secret")]}

    def codes():
        response = b.ask(ApiKey.TXN_OFFSET_COMMIT, 3, body)
        return {t.name: [p.error_code for p in t.partitions] for t in response.topics}

    assert codes() == {"t": [E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED], "secret": [E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]}
    b.grant(acl("tx", Op.WRITE, R.TRANSACTIONAL_ID))
    assert codes() == {"t": [E.GROUP_AUTHORIZATION_FAILED], "secret": [E.GROUP_AUTHORIZATION_FAILED]}
    assert not b.groups.calls
    b.grant(acl("g", Op.READ, R.GROUP), acl("t", Op.READ))
    assert codes() == {"t": [E.NONE], "secret": [E.TOPIC_AUTHORIZATION_FAILED]}
    assert b.groups.calls[-1][0] == "txn_commit"
