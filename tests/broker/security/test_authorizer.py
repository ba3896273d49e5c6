"""StandardAuthorizer against a table of bindings x checks with the answers Kafka's
StandardAuthorizerData gives (its StandardAuthorizerTest cases and the rules of findResult:
DENY wins, implied operations for ALLOW only, PREFIXED and wildcard names, User:*, hosts,
super users, allow.everyone.if.no.acl.found), plus the filters of DescribeAcls/DeleteAcls,
authorizeByResourceType (KIP-679), the result cache and the denial log."""

from __future__ import annotations

import logging
import uuid

import pytest

from broker.security import authorizer as A
from broker.security.authorizer import (AclBindingFilter, AclOperation as Op, AclPermissionType as P, AuthorizerMetrics,
                                        PatternType as PT, ResourceType as R, StandardAcl, StandardAuthorizer,
                                        parse_super_users)
from broker.security.principal import KafkaPrincipal

ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
ADMIN = KafkaPrincipal.user("admin")
HOST = "192.168.0.1"
OTHER_HOST = "10.0.0.7"


def acl(principal="User:alice", op=Op.READ, perm=P.ALLOW, rtype=R.TOPIC, name="foo", pattern=PT.LITERAL, host="*"):
    return StandardAcl(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls, allow_if_none=False, super_users=()) -> StandardAuthorizer:
    a = StandardAuthorizer(super_users, allow_if_none)
    for binding in acls:
        a.add_acl(uuid.uuid4(), binding)
    return a


# (bindings, principal, host, operation, resource type, name, allowed)
TABLE = [
    # no binding at all: allow.everyone.if.no.acl.found (false here)
    ((), ALICE, HOST, Op.READ, R.TOPIC, "foo", False),
    # a literal ALLOW for the principal and operation
    ((acl(),), ALICE, HOST, Op.READ, R.TOPIC, "foo", True),
    ((acl(),), ALICE, HOST, Op.WRITE, R.TOPIC, "foo", False),
    ((acl(),), BOB, HOST, Op.READ, R.TOPIC, "foo", False),
    ((acl(),), ALICE, HOST, Op.READ, R.TOPIC, "foobar", False),          # literal: the exact name only
    ((acl(),), ALICE, HOST, Op.READ, R.GROUP, "foo", False),             # another resource type
    # PREFIXED
    ((acl(pattern=PT.PREFIXED),), ALICE, HOST, Op.READ, R.TOPIC, "foobar", True),
    ((acl(pattern=PT.PREFIXED),), ALICE, HOST, Op.READ, R.TOPIC, "foo", True),
    ((acl(pattern=PT.PREFIXED),), ALICE, HOST, Op.READ, R.TOPIC, "fo", False),
    ((acl(pattern=PT.PREFIXED),), ALICE, HOST, Op.READ, R.TOPIC, "xfoo", False),
    ((acl(name="f", pattern=PT.PREFIXED), acl(name="foo", pattern=PT.PREFIXED, perm=P.DENY)),
     ALICE, HOST, Op.READ, R.TOPIC, "foobar", False),                   # the longer DENY prefix wins
    ((acl(name="f", pattern=PT.PREFIXED, perm=P.DENY), acl(name="foobar")), ALICE, HOST, Op.READ, R.TOPIC, "foobar",
     False),                                                             # a DENY prefix over a literal ALLOW
    # the literal wildcard
    ((acl(name="*"),), ALICE, HOST, Op.READ, R.TOPIC, "anything", True),
    ((acl(name="*"),), ALICE, HOST, Op.READ, R.GROUP, "anything", False),
    ((acl(name="*", pattern=PT.PREFIXED),), ALICE, HOST, Op.READ, R.TOPIC, "anything", False),  # "*" prefix: literal star
    ((acl(name="*", pattern=PT.PREFIXED),), ALICE, HOST, Op.READ, R.TOPIC, "*x", True),
    ((acl(name="*"), acl(perm=P.DENY)), ALICE, HOST, Op.READ, R.TOPIC, "foo", False),
    ((acl(name="*", perm=P.DENY), acl()), ALICE, HOST, Op.READ, R.TOPIC, "foo", False),
    # DENY wins over ALLOW, whatever the order
    ((acl(), acl(perm=P.DENY)), ALICE, HOST, Op.READ, R.TOPIC, "foo", False),
    ((acl(perm=P.DENY), acl()), ALICE, HOST, Op.READ, R.TOPIC, "foo", False),
    ((acl(op=Op.ALL), acl(op=Op.WRITE, perm=P.DENY)), ALICE, HOST, Op.WRITE, R.TOPIC, "foo", False),
    ((acl(op=Op.ALL), acl(op=Op.WRITE, perm=P.DENY)), ALICE, HOST, Op.READ, R.TOPIC, "foo", True),
    ((acl(op=Op.READ), acl(op=Op.ALL, perm=P.DENY)), ALICE, HOST, Op.READ, R.TOPIC, "foo", False),
    # ALL allows every operation
    ((acl(op=Op.ALL),), ALICE, HOST, Op.DELETE, R.TOPIC, "foo", True),
    ((acl(op=Op.ALL),), ALICE, HOST, Op.DESCRIBE_CONFIGS, R.TOPIC, "foo", True),
    # implied operations, ALLOW only
    ((acl(op=Op.READ),), ALICE, HOST, Op.DESCRIBE, R.TOPIC, "foo", True),
    ((acl(op=Op.WRITE),), ALICE, HOST, Op.DESCRIBE, R.TOPIC, "foo", True),
    ((acl(op=Op.DELETE),), ALICE, HOST, Op.DESCRIBE, R.TOPIC, "foo", True),
    ((acl(op=Op.ALTER),), ALICE, HOST, Op.DESCRIBE, R.TOPIC, "foo", True),
    ((acl(op=Op.CREATE),), ALICE, HOST, Op.DESCRIBE, R.TOPIC, "foo", False),
    ((acl(op=Op.ALTER_CONFIGS),), ALICE, HOST, Op.DESCRIBE_CONFIGS, R.TOPIC, "foo", True),
    ((acl(op=Op.ALTER_CONFIGS),), ALICE, HOST, Op.DESCRIBE, R.TOPIC, "foo", False),
    ((acl(op=Op.DESCRIBE),), ALICE, HOST, Op.READ, R.TOPIC, "foo", False),   # no implication backwards
    ((acl(op=Op.READ), acl(op=Op.READ, perm=P.DENY)), ALICE, HOST, Op.DESCRIBE, R.TOPIC, "foo", True),
    ((acl(op=Op.WRITE), acl(op=Op.READ, perm=P.DENY)), ALICE, HOST, Op.DESCRIBE, R.TOPIC, "foo", True),
    ((acl(op=Op.WRITE), acl(op=Op.DESCRIBE, perm=P.DENY)), ALICE, HOST, Op.DESCRIBE, R.TOPIC, "foo", False),
    ((acl(op=Op.ALTER_CONFIGS), acl(op=Op.ALTER_CONFIGS, perm=P.DENY)), ALICE, HOST, Op.DESCRIBE_CONFIGS, R.TOPIC,
     "foo", True),
    # User:* matches everyone; a DENY for User:* denies everyone
    ((acl(principal="User:*"),), BOB, HOST, Op.READ, R.TOPIC, "foo", True),
    ((acl(principal="User:*"), acl(principal="User:bob", perm=P.DENY)), BOB, HOST, Op.READ, R.TOPIC, "foo", False),
    ((acl(principal="User:bob"), acl(principal="User:*", perm=P.DENY)), BOB, HOST, Op.READ, R.TOPIC, "foo", False),
    ((acl(principal="User:*"),), KafkaPrincipal("Group", "x"), HOST, Op.READ, R.TOPIC, "foo", True),
    ((acl(principal="Group:alice"),), ALICE, HOST, Op.READ, R.TOPIC, "foo", False),  # the type counts
    # hosts
    ((acl(host=HOST),), ALICE, HOST, Op.READ, R.TOPIC, "foo", True),
    ((acl(host=HOST),), ALICE, OTHER_HOST, Op.READ, R.TOPIC, "foo", False),
    ((acl(), acl(host=OTHER_HOST, perm=P.DENY)), ALICE, OTHER_HOST, Op.READ, R.TOPIC, "foo", False),
    ((acl(), acl(host=OTHER_HOST, perm=P.DENY)), ALICE, HOST, Op.READ, R.TOPIC, "foo", True),
    # the cluster, groups, transactional ids
    ((acl(rtype=R.CLUSTER, name="kafka-cluster", op=Op.CLUSTER_ACTION),), ALICE, HOST, Op.CLUSTER_ACTION, R.CLUSTER,
     "kafka-cluster", True),
    ((acl(rtype=R.CLUSTER, name="kafka-cluster", op=Op.ALTER),), ALICE, HOST, Op.CLUSTER_ACTION, R.CLUSTER,
     "kafka-cluster", False),
    ((acl(rtype=R.GROUP, name="g", op=Op.READ),), ALICE, HOST, Op.DESCRIBE, R.GROUP, "g", True),
    ((acl(rtype=R.TRANSACTIONAL_ID, name="t", op=Op.WRITE),), ALICE, HOST, Op.WRITE, R.TRANSACTIONAL_ID, "t", True),
    ((acl(rtype=R.DELEGATION_TOKEN, name="d", op=Op.DESCRIBE),), ALICE, HOST, Op.DESCRIBE, R.DELEGATION_TOKEN, "d",
     True),
]


@pytest.mark.parametrize("bindings,principal,host,op,rtype,name,allowed", TABLE)
def test_kafka_answers(bindings, principal, host, op, rtype, name, allowed):
    a = authorizer(*bindings)
    assert a.check(principal, host, op, rtype, name) is allowed
    assert a.check(principal, host, op, rtype, name) is allowed  # the cached answer is the same


def test_allow_everyone_if_no_acl_found_only_where_no_binding_names_the_resource():
    a = authorizer(acl(principal="User:bob"), allow_if_none=True)
    assert a.check(ALICE, HOST, Op.READ, R.TOPIC, "other")                     # nothing on "other": allowed
    assert not a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")                   # bob's binding names "foo"
    assert not a.check(ALICE, HOST, Op.WRITE, R.TOPIC, "foo")
    b = authorizer(acl(name="*", principal="User:bob"), allow_if_none=True)
    assert not b.check(ALICE, HOST, Op.READ, R.TOPIC, "anything")              # the wildcard names every topic
    assert b.check(ALICE, HOST, Op.READ, R.GROUP, "anything")
    c = authorizer(acl(name="fo", pattern=PT.PREFIXED, principal="User:bob"), allow_if_none=True)
    assert not c.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")
    assert c.check(ALICE, HOST, Op.READ, R.TOPIC, "bar")


def test_super_users_bypass_deny():
    a = authorizer(acl(principal="User:admin", op=Op.ALL, perm=P.DENY, name="*"),
                   super_users=parse_super_users("User:admin; User:broker;"))
    assert a.check(ADMIN, HOST, Op.DELETE, R.TOPIC, "foo")
    assert a.check(KafkaPrincipal.user("broker"), HOST, Op.CLUSTER_ACTION, R.CLUSTER, "kafka-cluster")
    assert not a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")


def test_super_users_syntax():
    assert parse_super_users(None) == frozenset()
    assert parse_super_users(" User:a ;User:b:c") == {KafkaPrincipal.user("a"), KafkaPrincipal.user("b:c")}
    for bad in ("alice", "User:", ":x"):
        with pytest.raises(ValueError):
            parse_super_users(bad)


def test_cache_is_cleared_by_every_change():
    a = authorizer()
    assert not a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")
    a.add_acl("one", acl())
    assert a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")
    a.add_acl("two", acl(perm=P.DENY))
    assert not a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")
    a.remove_acl("two")
    assert a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")
    a.load({})
    assert not a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")
    a.load({"x": acl(pattern=PT.PREFIXED, name="f")})
    assert a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")


def test_cache_stays_bounded(monkeypatch):
    monkeypatch.setattr(A, "CACHE_MAX_ENTRIES", 10)
    a = authorizer(acl(name="*"))
    for i in range(25):
        assert a.check(ALICE, HOST, Op.READ, R.TOPIC, f"t{i}")
        assert len(a._cache) <= 10


def test_the_same_binding_twice_survives_one_removal():
    a = authorizer()
    a.add_acl("one", acl())
    a.add_acl("two", acl())
    a.remove_acl("one")
    assert a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")
    a.remove_acl("two")
    assert not a.check(ALICE, HOST, Op.READ, R.TOPIC, "foo")


# -- filters (DescribeAcls, DeleteAcls: Kafka's ResourcePatternFilter / AccessControlEntryFilter) --

BINDINGS = [acl(name="foo"), acl(name="foo", pattern=PT.PREFIXED), acl(name="*"), acl(name="fo", pattern=PT.PREFIXED),
            acl(name="bar", principal="User:bob", op=Op.WRITE, perm=P.DENY, host=HOST), acl(rtype=R.GROUP, name="foo")]


@pytest.mark.parametrize("f,expected", [
    (AclBindingFilter(), [0, 1, 2, 3, 4, 5]),
    (AclBindingFilter(R.TOPIC), [0, 1, 2, 3, 4]),
    (AclBindingFilter(R.ANY, "foo"), [0, 1, 5]),                                     # ANY pattern: this exact name
    (AclBindingFilter(R.TOPIC, "foo", PT.LITERAL), [0]),
    (AclBindingFilter(R.TOPIC, "foo", PT.PREFIXED), [1]),
    (AclBindingFilter(R.TOPIC, "foo", PT.MATCH), [0, 1, 2, 3]),                      # what applies to "foo"
    (AclBindingFilter(R.TOPIC, "foobar", PT.MATCH), [1, 2, 3]),
    (AclBindingFilter(R.TOPIC, None, PT.PREFIXED), [1, 3]),
    (AclBindingFilter(principal="User:bob"), [4]),
    (AclBindingFilter(host=HOST), [4]),
    (AclBindingFilter(operation=Op.WRITE), [4]),
    (AclBindingFilter(permission_type=P.DENY), [4]),
    (AclBindingFilter(permission_type=P.ALLOW, resource_type=R.GROUP), [5]),
])
def test_binding_filters(f, expected):
    assert [i for i, b in enumerate(BINDINGS) if f.matches(b)] == expected


def test_unknown_filters():
    assert AclBindingFilter.of(0, None, 1, None, None, 1, 1).is_unknown()
    assert AclBindingFilter.of(1, None, 1, None, None, 99, 1).is_unknown()   # an unknown code is UNKNOWN
    assert not AclBindingFilter.of(1, None, 1, None, None, 1, 1).is_unknown()


# -- authorizeByResourceType (KIP-679: InitProducerId without IDEMPOTENT_WRITE) -------------

class Ctx:
    def __init__(self, principal=ALICE, host=HOST):
        self.principal, self.client_host = principal, host
        self.header = type("H", (), {"api_key": 22})()


@pytest.mark.parametrize("bindings,allowed", [
    ((), False),
    ((acl(op=Op.WRITE),), True),
    ((acl(op=Op.ALL),), True),
    ((acl(op=Op.READ),), False),
    ((acl(op=Op.WRITE, principal="User:bob"),), False),
    ((acl(op=Op.WRITE, host=OTHER_HOST),), False),
    ((acl(op=Op.WRITE), acl(op=Op.WRITE, perm=P.DENY)), False),                       # same literal denied
    ((acl(op=Op.WRITE, name="foobar"), acl(op=Op.WRITE, perm=P.DENY, pattern=PT.PREFIXED)), False),  # prefix dominates
    ((acl(op=Op.WRITE, name="foobar"), acl(op=Op.WRITE, name="foo", perm=P.DENY)), True),  # a literal does not
    ((acl(op=Op.WRITE, name="*"),), True),
    ((acl(op=Op.WRITE, name="bar"), acl(op=Op.WRITE, name="*", perm=P.DENY)), False),
    ((acl(op=Op.WRITE, name="a", pattern=PT.PREFIXED), acl(op=Op.WRITE, name="b", perm=P.DENY)), True),
])
def test_authorize_by_resource_type(bindings, allowed):
    assert authorizer(*bindings).authorize_by_resource_type(Ctx(), Op.WRITE, R.TOPIC) is allowed


def test_authorize_by_resource_type_allows_super_users_and_the_default():
    assert authorizer(super_users={ALICE}).authorize_by_resource_type(Ctx(), Op.WRITE, R.TOPIC)
    assert authorizer(allow_if_none=True).authorize_by_resource_type(Ctx(), Op.WRITE, R.TOPIC)


def test_authorized_operations_bits():
    a = authorizer(acl(op=Op.READ), acl(op=Op.ALTER_CONFIGS))
    bits = a.authorized_operations(Ctx(), R.TOPIC, "foo")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)
    assert A.supported_operations_bits(R.GROUP) == (1 << 3) | (1 << 6) | (1 << 8)


# -- the denial log and metric ---------------------------------------------------------------

def test_denials_are_logged_once_each_and_counted(caplog):
    metrics = AuthorizerMetrics()
    a = StandardAuthorizer((), False, metrics)
    a.add_acl("x", acl(principal="User:bob"))
    ctx = Ctx()
    with caplog.at_level(logging.INFO, logger="kbroker.authorizer"):
        assert not a.authorize(ctx, Op.WRITE, R.TOPIC, "foo")
        assert not a.authorize(ctx, Op.WRITE, R.TOPIC, "foo")           # cached, logged again
        assert not a.authorize(ctx, Op.READ, R.TOPIC, "foo", log_if_denied=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "kbroker.authorizer"]
    assert lines == ["Principal = User:alice is Denied operation = Write from host = 192.168.0.1 on resource = "
                     "Topic:LITERAL:foo for request = InitProducerId based on rule DefaultDeny"] * 2
    assert metrics.denied == {"Write": 2}
    families = {f.name: f for f in metrics.collect()}
    sample = families["kafka_server_authorizer_metrics_authorization_denied"].samples[0]
    assert sample.labels == {"operation": "Write"} and sample.value == 2
    assert families["kafka_server_authorizer_metrics_acls_total_count"].samples[0].value == 1


def test_a_matching_deny_names_its_rule(caplog):
    a = authorizer(acl(perm=P.DENY, host=HOST))
    with caplog.at_level(logging.INFO, logger="kbroker.authorizer"):
        a.authorize(Ctx(), Op.READ, R.TOPIC, "foo")
    assert "based on rule MatchingAcl(acl=(principal=User:alice, host=192.168.0.1, op=READ, permission=DENY, " \
           "resource=Topic:LITERAL:foo))" in caplog.records[-1].getMessage()


def test_operation_names_are_kafkas():
    assert A.operation_name(Op.DESCRIBE_CONFIGS) == "DescribeConfigs"
    assert A.operation_name(Op.CLUSTER_ACTION) == "ClusterAction"
    assert A.operation_name(99) == "Unknown(99)"
