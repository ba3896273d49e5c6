"""AclControlManager and ScramControlManager on their own (validation codes as Kafka's
controller answers them), and inside the QuorumController on MockTime: records replayed,
kept across a reload and a snapshot, and sent to every broker (the whole set in a full
state, each change in the incremental UpdateMetadata)."""

from __future__ import annotations

import uuid

import pytest

from broker.security.authorizer import (AclBindingFilter, AclOperation as Op, AclPermissionType as P, PatternType as PT,
                                        ResourceType as R, StandardAcl)
from broker.security.authorizer import StandardAuthorizer
from broker.security.credentials import SCRAM_SHA_256, SCRAM_SHA_512, CredentialCache, make_credential, salted_password
from broker.security.metadata import SecurityMetadata
from broker.security.principal import KafkaPrincipal
from controller.acl_control import AclControlManager
from controller.channel_manager import UpdateMetadataItem
from controller.scram_control import ScramControlManager
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode as E
from protocol.messages.metadata_records import MetadataRecordType as T, decode_record

from .helpers import Harness, request


def binding(name="t", rtype=R.TOPIC, pattern=PT.LITERAL, principal="User:alice", host="*", op=Op.READ, perm=P.ALLOW):
    return StandardAcl(rtype, name, pattern, principal, host, op, perm)


def replay_all(manager, result):
    for r in result.records:
        manager.replay(r)


@pytest.mark.parametrize("acl,code,message", [
    (binding(), E.NONE, None),
    (binding(rtype=R.CLUSTER, name="kafka-cluster", op=Op.ALTER), E.NONE, None),
    (binding(rtype=R.CLUSTER, name="other"), E.INVALID_REQUEST,
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (binding(name=""), E.INVALID_REQUEST, "Invalid empty resource name"),
    (binding(rtype=R.ANY), E.INVALID_REQUEST, "Invalid resourceType ANY"),
    (binding(pattern=PT.MATCH), E.INVALID_REQUEST, "Invalid patternType MATCH"),
    (binding(pattern=PT.ANY), E.INVALID_REQUEST, "Invalid patternType ANY"),
    (binding(op=Op.ANY), E.INVALID_REQUEST, "Invalid operation ANY"),
    (binding(perm=P.ANY), E.INVALID_REQUEST, "Invalid permissionType ANY"),
    (binding(principal="alice"), E.INVALID_REQUEST,
     "Invalid principal 'alice': expected <type>:<name>, e.g. User:alice"),
])
def test_create_acls_validation(acl, code, message):
    m = AclControlManager()
    result = m.create_acls([acl])
    assert result.response == [(code, message)]
    assert len(result.records) == (1 if code == E.NONE else 0)


def test_create_is_idempotent_and_delete_lists_what_matched():
    authorizer = StandardAuthorizer()
    m = AclControlManager(authorizer)
    a, b, c = binding("t1"), binding("t2", pattern=PT.PREFIXED), binding("t1", op=Op.WRITE, perm=P.DENY)
    result = m.create_acls([a, b, a, c])
    assert result.response == [(E.NONE, None)] * 4 and len(result.records) == 3  # the repeated one: no record
    replay_all(m, result)
    assert sorted(m.acls.values()) == sorted([a, b, c]) and authorizer.acl_count() == 3
    assert m.create_acls([a]).records == []                                        # exists already
    alice = KafkaPrincipal.user("alice")
    assert authorizer.check(alice, "h", Op.READ, R.TOPIC, "t1")
    result = m.delete_acls([AclBindingFilter(R.TOPIC, "t1", PT.MATCH), AclBindingFilter(permission_type=P.DENY),
                            AclBindingFilter(R.GROUP)])
    assert [(code, msg, sorted(matched)) for code, msg, matched in result.response] == [
        (E.NONE, None, sorted([a, c])), (E.NONE, None, [c]), (E.NONE, None, [])]
    assert len(result.records) == 2                                                 # c once, though matched twice
    replay_all(m, result)
    assert list(m.acls.values()) == [b] and authorizer.acl_count() == 1
    assert not authorizer.check(alice, "h", Op.READ, R.TOPIC, "t1")
    assert authorizer.check(alice, "h", Op.READ, R.TOPIC, "t2-x")


def test_replay_of_an_unknown_removal_is_an_error():
    from protocol.messages.metadata_records import make_record
    with pytest.raises(ValueError):
        AclControlManager().replay(make_record(T.REMOVE_ACCESS_CONTROL_ENTRY, id=uuid.uuid4()))


def upsert(name, mechanism=1, iterations=4096, password="secret", salt=b"s" * 16):
    mech = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}.get(mechanism, SCRAM_SHA_256)
    return (name, mechanism, iterations, salt, salted_password(mech, password.encode(), salt, iterations))


@pytest.mark.parametrize("deletions,upsertions,expected", [
    ([], [upsert("alice")], [("alice", E.NONE, None)]),
    ([], [upsert("")], [("", E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")]),
    ([], [upsert("alice", mechanism=3)], [("alice", E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")]),
    ([], [upsert("alice", mechanism=0)], [("alice", E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")]),
    ([], [upsert("alice", iterations=4095)], [("alice", E.UNACCEPTABLE_CREDENTIAL, "Too few iterations")]),
    ([], [upsert("alice", iterations=16385)], [("alice", E.UNACCEPTABLE_CREDENTIAL, "Too many iterations")]),
    ([], [upsert("alice", iterations=16384)], [("alice", E.NONE, None)]),
    ([], [upsert("alice"), upsert("alice", 2)],
     [("alice", E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")]),
    ([("bob", 1)], [], [("bob", E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")]),
    ([("carol", 1)], [upsert("dave")], [("carol", E.NONE, None), ("dave", E.NONE, None)]),
    ([("carol", 1), ("carol", 2)], [],
     [("carol", E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")]),
    ([("carol", 1)], [upsert("carol", 2)],
     [("carol", E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")]),
])
def test_alter_credentials_codes(deletions, upsertions, expected):
    m = ScramControlManager()
    replay_all(m, m.alter_credentials([], [upsert("carol")]))
    result = m.alter_credentials(deletions, upsertions)
    assert [(r["user"], r["error_code"], r["error_message"]) for r in result.response] == expected
    assert len(result.records) == sum(1 for _u, code, _m in expected if code == E.NONE)


def test_the_stored_keys_come_from_the_salted_password():
    m = ScramControlManager()
    result = m.alter_credentials([], [upsert("alice", 2, 8192, "pencil", b"salt")])
    replay_all(m, result)
    assert m.credentials[("alice", 2)] == make_credential(SCRAM_SHA_512, "pencil", 8192, b"salt")
    replay_all(m, m.alter_credentials([("alice", 2)], []))
    assert m.credentials == {}


# -- in the QuorumController ---------------------------------------------------------------

@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path, authorizer_enabled=True).start()
    yield harness
    await harness.stop()


def creations(*acls):
    return request(ApiKey.CREATE_ACLS, 3, creations=[
        {"resource_type": a.resource_type, "resource_name": a.resource_name, "resource_pattern_type": a.pattern_type,
         "principal": a.principal, "host": a.host, "operation": a.operation, "permission_type": a.permission_type}
        for a in acls])


def scram_upsertions(*ups, deletions=()):
    return request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[{"name": n, "mechanism": m} for n, m in deletions],
                   upsertions=[{"name": n, "mechanism": m, "iterations": i, "salt": s, "salted_password": p}
                               for n, m, i, s, p in ups])


def security_state(items) -> tuple[dict, CredentialCache]:
    """What a broker holds after the UpdateMetadata items it was sent (replayed in order)."""
    authorizer, cache = StandardAuthorizer(), CredentialCache()
    sm = SecurityMetadata(authorizer, cache)
    for item in items:
        if isinstance(item, UpdateMetadataItem):
            sm.apply(item.records, item.full)
    return dict(authorizer.acls_index.by_id), cache


async def test_acls_and_credentials_reach_every_broker_and_survive_restarts(tmp_path):
    h = await Harness(tmp_path, authorizer_enabled=True).start()
    await h.start_brokers(1, 2)
    a, b = binding("orders"), binding("payments-", pattern=PT.PREFIXED, op=Op.WRITE)
    resp = await h.controller.create_acls(creations(a, b, binding(name="")), 3)
    assert [r["error_code"] for r in resp["results"]] == [E.NONE, E.NONE, E.INVALID_REQUEST]
    resp = await h.controller.alter_user_scram_credentials(scram_upsertions(upsert("alice")))
    assert resp["results"] == [{"user": "alice", "error_code": E.NONE, "error_message": None}]
    for broker in (1, 2):
        acls, cache = security_state(h.channel.queues[broker])
        assert sorted(acls.values()) == sorted([a, b])
        assert cache.get("SCRAM-SHA-256", "alice") == make_credential(SCRAM_SHA_256, "secret", 4096, b"s" * 16)
    # the controller's own authorizer follows its records
    alice = KafkaPrincipal.user("alice")
    assert h.controller.authorizer.check(alice, "h", Op.WRITE, R.TOPIC, "payments-eu")
    # deletion reaches them too
    resp = await h.controller.delete_acls(request(ApiKey.DELETE_ACLS, 3, filters=[{
        "resource_type_filter": R.TOPIC, "resource_name_filter": "orders", "pattern_type_filter": PT.LITERAL,
        "principal_filter": None, "host_filter": None, "operation": Op.ANY, "permission_type": P.ANY}]), 3)
    assert [m["resource_name"] for m in resp["filter_results"][0]["matching_acls"]] == ["orders"]
    await h.controller.alter_user_scram_credentials(scram_upsertions(deletions=[("alice", 1)]))
    acls, cache = security_state(h.channel.queues[1])
    assert list(acls.values()) == [b] and cache.get("SCRAM-SHA-256", "alice") is None
    live = h.controller.state_summary()
    assert list(live["acls"].values()) == [b]
    await h.stop()

    h = await Harness(tmp_path, authorizer_enabled=True).start()  # replayed from the log
    assert h.controller.state_summary()["acls"] == live["acls"]
    await h.controller.alter_user_scram_credentials(scram_upsertions(upsert("bob", 2)))
    offset = await h.controller.snapshot_now()
    after = h.controller.state_summary()
    await h.stop()

    h = await Harness(tmp_path, authorizer_enabled=True).start()  # from the snapshot
    try:
        assert h.controller.loaded_snapshot_offset == offset
        assert h.controller.state_summary() == after and ("bob", 2) in after["scram"]
        assert h.controller.authorizer.check(alice, "h", Op.WRITE, R.TOPIC, "payments-x")
        # a broker registering now gets the whole set in its full state, nothing else
        h.epochs = {b: r.epoch for b, r in h.controller.cluster.brokers.items()}
        h.channel.clear()
        await h.register(3)
        full = [i for i in h.channel.queues[3] if isinstance(i, UpdateMetadataItem)]
        assert [i.full for i in full] == [True]
        assert sorted(decode_record(r).type for r in full[0].records) == [T.USER_SCRAM_CREDENTIAL,
                                                                          T.ACCESS_CONTROL_ENTRY]
        acls, cache = security_state(full)
        assert list(acls.values()) == [b] and cache.get("SCRAM-SHA-512", "bob") is not None
    finally:
        await h.stop()


async def test_a_full_state_replaces_what_a_broker_had():
    cache = CredentialCache()
    authorizer = StandardAuthorizer()
    sm = SecurityMetadata(authorizer, cache)
    authorizer.add_acl("old", binding("stale"))
    cache.put("SCRAM-SHA-256", "ghost", make_credential(SCRAM_SHA_256, "x"))
    sm.apply([], full=True)
    assert authorizer.acl_count() == 0 and cache.get("SCRAM-SHA-256", "ghost") is None


async def test_describe_acls_on_the_controller(h):
    await h.controller.create_acls(creations(binding("a"), binding("b", rtype=R.GROUP)), 3)
    body = await h.controller.describe_acls(AclBindingFilter(R.GROUP))
    assert body["resources"] == [{"resource_type": R.GROUP, "resource_name": "b", "pattern_type": PT.LITERAL,
                                  "acls": [{"principal": "User:alice", "host": "*", "operation": Op.READ,
                                            "permission_type": P.ALLOW}]}]


# -- bootstrap metadata (kbroker storage format --add-scram, KIP-900) ----------------------

async def test_bootstrap_credentials_open_an_empty_log_only(tmp_path):
    from broker.security.bootstrap import bootstrap_records, parse_scram_argument
    first = bootstrap_records([parse_scram_argument("SCRAM-SHA-512=[name=broker,password=broker-secret]")], 7)
    h = await Harness(tmp_path, bootstrap=first).start()
    try:
        assert set(h.controller.scram.credentials) == {("broker", SCRAM_SHA_512.type_id)}
        assert h.controller.features["metadata.version"] == 7
        await h.start_brokers(1)  # the credential reaches a broker in its full state
        _acls, cache = security_state(h.channel.queues[1])
        assert cache.get("SCRAM-SHA-512", "broker") == h.controller.scram.credentials[("broker", SCRAM_SHA_512.type_id)]
        # later changes are the log's like any other
        await h.controller.alter_user_scram_credentials(scram_upsertions(deletions=[("broker", 2)]))
        live = h.controller.state_summary()
    finally:
        await h.stop()
    # a log with records: another bootstrap (formatted again, or a changed file) changes nothing
    other = bootstrap_records([parse_scram_argument("SCRAM-SHA-256=[name=mallory,password=x]")], 7)
    h = await Harness(tmp_path, bootstrap=other).start()
    try:
        assert h.controller.scram.credentials == {}
        assert h.controller.state_summary() == live
    finally:
        await h.stop()
