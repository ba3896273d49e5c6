"""``kbroker acls`` (kafka-acls.sh) and ``kbroker users scram`` (kafka-configs.sh --entity-type
users): the option expansions on their own, then the console script against a controller and a
broker with an authorizer (super.users=User:ANONYMOUS: these tests manage ACLs, the enforcement
is tests/cluster/test_acls.py's)."""

from __future__ import annotations

import pytest

from cli.acls import bindings_to_add
from cli.common import UsageError
from cli.main import build_parser
from cli.users import parse_add_config
from controller.launcher import LocalCluster
from protocol.acl import AclOperation as Op, AclPermissionType as P, PatternType as PT, ResourceType as R

from .test_cli import kbroker


def added(*argv: str) -> set[tuple]:
    args = build_parser().parse_args(["acls", "add", *argv])
    return {(b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission_type)
            for bindings in bindings_to_add(args).values() for b in bindings}


def test_kafka_acls_expansions():
    assert added("--allow-principal", "User:alice", "--operation", "Read", "--topic", "t",
                 "--resource-pattern-type", "prefixed") == {(R.TOPIC, "t", PT.PREFIXED, "User:alice", "*", Op.READ,
                                                            P.ALLOW)}
    # no --operation: All; two principals x two hosts; a deny principal with its default host
    assert added("--allow-principal", "User:a", "--allow-principal", "User:b", "--allow-host", "h1",
                 "--allow-host", "h2", "--deny-principal", "User:c", "--group", "g") == {
        (R.GROUP, "g", PT.LITERAL, p, h, Op.ALL, P.ALLOW) for p in ("User:a", "User:b") for h in ("h1", "h2")} | {
        (R.GROUP, "g", PT.LITERAL, "User:c", "*", Op.ALL, P.DENY)}
    # --producer: WRITE, DESCRIBE, CREATE on topics; WRITE, DESCRIBE on transactional ids; IDEMPOTENT_WRITE
    assert added("--producer", "--idempotent", "--allow-principal", "User:p", "--topic", "t",
                 "--transactional-id", "x") == {
        (R.TOPIC, "t", PT.LITERAL, "User:p", "*", op, P.ALLOW) for op in (Op.WRITE, Op.DESCRIBE, Op.CREATE)} | {
        (R.TRANSACTIONAL_ID, "x", PT.LITERAL, "User:p", "*", op, P.ALLOW) for op in (Op.WRITE, Op.DESCRIBE)} | {
        (R.CLUSTER, "kafka-cluster", PT.LITERAL, "User:p", "*", Op.IDEMPOTENT_WRITE, P.ALLOW)}
    # --consumer: READ, DESCRIBE on topics, READ on groups
    assert added("--consumer", "--allow-principal", "User:c", "--topic", "t", "--group", "g") == {
        (R.TOPIC, "t", PT.LITERAL, "User:c", "*", op, P.ALLOW) for op in (Op.READ, Op.DESCRIBE)} | {
        (R.GROUP, "g", PT.LITERAL, "User:c", "*", Op.READ, P.ALLOW)}
    assert added("--allow-principal", "User:a", "--operation", "IdempotentWrite", "--operation", "describe-configs",
                 "--cluster") == {(R.CLUSTER, "kafka-cluster", PT.LITERAL, "User:a", "*", op, P.ALLOW)
                                  for op in (Op.IDEMPOTENT_WRITE, Op.DESCRIBE_CONFIGS)}


@pytest.mark.parametrize("argv,message", [
    (["--allow-principal", "User:a", "--operation", "IdempotentWrite", "--topic", "t"],
     "ResourceType TOPIC only supports operations"),
    (["--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "unknown operation"),
    (["--allow-principal", "alice", "--topic", "t"], "not a principal"),
    (["--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
    (["--allow-principal", "User:a"], "You must specify one of: --topic"),
    (["--consumer", "--allow-principal", "User:a", "--topic", "t"], "you must specify a --group"),
    (["--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"], "not valid when adding"),
])
def test_kafka_acls_refusals(argv, message):
    with pytest.raises(UsageError, match=message):
        added(*argv)


def test_kafka_configs_scram_syntax():
    assert parse_add_config("SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=a,b=c]") \
        == [("SCRAM-SHA-256", 8192, "alice-secret"), ("SCRAM-SHA-512", 4096, "a,b=c")]
    assert parse_add_config("scram-sha-512=[password=x]") == [("SCRAM-SHA-512", 4096, "x")]
    for bad in ("SCRAM-SHA-1=[password=x]", "SCRAM-SHA-256=[iterations=8192]", "SCRAM-SHA-256=[iterations=x,password=y]",
                "SCRAM-SHA-256=[salt=1,password=y]", ""):
        with pytest.raises(UsageError):
            parse_add_config(bad)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    props = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "super.users": "User:ANONYMOUS"}
    cluster = LocalCluster(tmp_path_factory.mktemp("secured"), 1, broker_props=props, controller_props=props)
    try:
        cluster.start()
        yield cluster.bootstrap
    finally:
        cluster.kill()


def test_acls_add_list_remove(secured):
    out = kbroker(secured, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                  "--operation", "Write", "--topic", "orders", "--resource-pattern-type", "prefixed").stdout.decode()
    assert ("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)`: \n"
            " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
            "\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW) \n") in out
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)`" in out
    kbroker(secured, "acls", "add", "--producer", "--idempotent", "--allow-principal", "User:bob", "--topic", "p")
    kbroker(secured, "acls", "add", "--deny-principal", "User:eve", "--deny-host", "10.0.0.1", "--operation",
            "Describe", "--cluster")
    everything = kbroker(secured, "acls", "list").stdout.decode()
    for expected in ("(principal=User:bob, host=*, operation=CREATE, permissionType=ALLOW)",
                     "ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)",
                     "(principal=User:bob, host=*, operation=IDEMPOTENT_WRITE, permissionType=ALLOW)",
                     "(principal=User:eve, host=10.0.0.1, operation=DESCRIBE, permissionType=DENY)",
                     "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)"):
        assert expected in everything
    # MATCH: what applies to the topic orders-eu (alice's prefixed ACLs), not bob's
    matching = kbroker(secured, "acls", "list", "--topic", "orders-eu", "--resource-pattern-type", "match").stdout
    assert b"User:alice" in matching and b"User:bob" not in matching
    bobs = kbroker(secured, "acls", "list", "--principal", "User:bob").stdout.decode()
    assert "User:alice" not in bobs and bobs.count("User:bob") == 4
    # remove one entry, then everything on the topic
    kbroker(secured, "acls", "remove", "--force", "--allow-principal", "User:bob", "--operation", "Create",
            "--topic", "p")
    left = kbroker(secured, "acls", "list", "--topic", "p").stdout.decode()
    assert "operation=CREATE" not in left and "operation=WRITE" in left
    kbroker(secured, "acls", "remove", "--topic", "p", input=b"y\n")
    assert b"User:bob" not in kbroker(secured, "acls", "list", "--topic", "p").stdout
    # without confirmation nothing goes
    kbroker(secured, "acls", "remove", "--cluster", input=b"n\n")
    assert b"User:eve" in kbroker(secured, "acls", "list", "--cluster").stdout
    bad = kbroker(secured, "acls", "add", "--allow-principal", "User:a", "--operation", "ClusterAction", "--topic", "t",
                  expect=2)
    assert b"ResourceType TOPIC only supports operations" in bad.stderr


def test_users_scram_set_list_delete(secured):
    out = kbroker(secured, "users", "scram", "set", "-u", "alice", "--add-config",
                  "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]")
    assert out.stdout == b"Completed updating config for user alice.\n"
    listed = kbroker(secured, "users", "scram", "list", "--entity-name", "alice").stdout.decode()
    assert listed == ("SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, "
                      "SCRAM-SHA-512=iterations=4096\n")
    kbroker(secured, "users", "scram", "delete", "-u", "alice", "--delete-config", "SCRAM-SHA-512")
    assert kbroker(secured, "users", "scram", "list").stdout.decode() == (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192\n")
    weak = kbroker(secured, "users", "scram", "set", "-u", "bob", "--add-config",
                   "SCRAM-SHA-256=[iterations=100,password=x]", expect=1)
    assert b"Too few iterations" in weak.stderr
    gone = kbroker(secured, "users", "scram", "delete", "-u", "nobody", "--delete-config", "SCRAM-SHA-256", expect=1)
    assert b"does not exist" in gone.stderr


def test_users_scram_set_from_a_file(secured, tmp_path):
    """--add-config-file (kafka-configs.sh's): the entries of a properties file, the password off the command line."""
    path = tmp_path / "carol.properties"
    path.write_text("# carol\nSCRAM-SHA-512=[iterations=8192,password=carol,secret]\nSCRAM-SHA-256=[password=c]\n")
    out = kbroker(secured, "users", "scram", "set", "-u", "carol", "--add-config-file", str(path))
    assert out.stdout == b"Completed updating config for user carol.\n"
    listed = kbroker(secured, "users", "scram", "list", "-u", "carol").stdout.decode()
    assert listed == ("SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=4096, "
                      "SCRAM-SHA-512=iterations=8192\n")
    missing = kbroker(secured, "users", "scram", "set", "-u", "carol", "--add-config-file", str(tmp_path / "no"),
                      expect=2)
    assert b"--add-config-file" in missing.stderr and b"No such file" in missing.stderr
    assert b"--add-config or --add-config-file" in kbroker(secured, "users", "scram", "set", "-u", "carol",
                                                              expect=2).stderr
