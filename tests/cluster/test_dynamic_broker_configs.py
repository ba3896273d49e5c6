"""Dynamic broker configs (issue 27 item 8, KIP-226) on a real controller and two brokers:
set with ``kbroker configs set --broker-defaults`` / ``--broker N`` and with kafka-python's
``alter_configs`` on a BROKER resource (IncrementalAlterConfigs through the broker, forwarded
to the controller, kept as ConfigRecords, back to every broker in its metadata), applied
without a restart, shown with their sources by DescribeConfigs, kept across a controller restart
and a broker restart.

The config a producer sees: message.max.bytes (the default of every topic's max.message.bytes)
on the partition's leader. A 50 KB record is accepted, then MESSAGE_TOO_LARGE once the
cluster-wide default is 20 KB, accepted again once the leader's own value is 100 KB (per-broker
wins), refused again when that is deleted, accepted when the default is deleted too."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import NewTopic
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from controller.launcher import LocalCluster
from protocol.api_keys import ApiKey
from protocol.client import KafkaClient
from protocol.errors import ErrorCode
from tests.cli.test_cli import kbroker
from tests.cluster.helpers import admin, topic_metadata, wait_futures
from tests.support import wait_until

pytestmark = pytest.mark.timeout(240)

TOPIC = "dyn"
VALUE = b"v" * 50_000


def produce_one(bootstrap: str) -> int:
    """One 50 KB record to partition 0 (acks=all, no retries): the error code of its delivery (0: acknowledged)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "retries": 0,
                  "message.max.bytes": 1_000_000, "message.timeout.ms": 20000})
    outcome: list[int] = []
    p.produce(TOPIC, VALUE, partition=0, on_delivery=lambda err, _m: outcome.append(err.code() if err else 0))
    p.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def sources(bootstrap: str, broker: int, keys: list[str]) -> dict[str, tuple[str, str]]:
    """{key: (value, source)} of broker ``broker``, asked of it with kafka-python's describe_configs."""
    client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-describe")
    try:
        described = client.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(broker), None)],
                                            config_filter="all")
    finally:
        client.close()
    configs = described["broker"][str(broker)]
    return {k: (configs[k]["value"], configs[k]["config_source"]) for k in keys if k in configs}


def describe_cli(bootstrap: str, *resource: str) -> dict[str, tuple[str, str]]:
    from tests.cli.test_cluster_ops_cli import config_rows
    return config_rows(kbroker(bootstrap, "configs", "describe", *resource, "--all").stdout.decode())


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, 2, broker_props={"broker.heartbeat.interval.ms": 500, "log.cleaner.backoff.ms": 15000})
    try:
        c.start()
        yield c
    finally:
        c.kill()


def test_dynamic_broker_configs_apply_without_restart_and_survive_restarts(cluster):
    bootstrap = cluster.bootstrap
    topics_admin = admin(cluster)
    wait_futures(topics_admin.create_topics([NewTopic(TOPIC, 1, 2)]))
    port = next(iter(cluster.brokers.values())).port
    _md, t = asyncio.run(topic_metadata(port, TOPIC))
    leader = t.partitions[0].leader_id
    other = next(b for b in cluster.brokers if b != leader)
    assert produce_one(bootstrap) == 0

    # the cluster-wide default: every broker, no restart
    kbroker(bootstrap, "configs", "set", "--broker-defaults", "message.max.bytes=20000")
    for b in cluster.brokers:
        wait_until(lambda b=b: sources(bootstrap, b, ["message.max.bytes"])["message.max.bytes"] == (
            "20000", "DYNAMIC_DEFAULT_BROKER_CONFIG"), timeout_s=30, what=f"broker {b} has the default")
    assert produce_one(bootstrap) == KafkaError.MSG_SIZE_TOO_LARGE
    assert describe_cli(bootstrap, "--broker-defaults") == {"message.max.bytes": ("20000", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
    # the topic's max.message.bytes shows where its default comes from
    topic_rows = describe_cli(bootstrap, "--topic", TOPIC)
    assert topic_rows["max.message.bytes"] == ("20000", "DYNAMIC_DEFAULT_BROKER_CONFIG"), topic_rows

    # per-broker wins over the default (the leader's own value)
    kbroker(bootstrap, "configs", "set", "--broker", str(leader), "message.max.bytes=100000")
    wait_until(lambda: sources(bootstrap, leader, ["message.max.bytes"])["message.max.bytes"] == (
        "100000", "DYNAMIC_BROKER_CONFIG"), timeout_s=30, what="the leader has its own value")
    assert produce_one(bootstrap) == 0
    assert sources(bootstrap, other, ["message.max.bytes"])["message.max.bytes"] == (
        "20000", "DYNAMIC_DEFAULT_BROKER_CONFIG")

    # kafka-python's alter_configs on a BROKER resource (sent to that broker): a dynamic key is applied ...
    client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-alter")
    try:
        result = client.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(other),
                                                      {"log.cleaner.threads": "2"})])
        assert result == {"broker": {str(other): "OK"}}, result
        # ... a static-only key is refused with Kafka's INVALID_REQUEST and changes nothing
        refused = client.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(other),
                                                       {"log.dirs": "/nowhere"})], raise_on_unknown=False)
        assert "InvalidRequest" in refused["broker"][str(other)] and "log.dirs" in refused["broker"][str(other)]
    finally:
        client.close()
    wait_until(lambda: sources(bootstrap, other, ["log.cleaner.threads"])["log.cleaner.threads"] == (
        "2", "DYNAMIC_BROKER_CONFIG"), timeout_s=30, what="log.cleaner.threads applied")
    statics = sources(bootstrap, other, ["log.dirs", "broker.heartbeat.interval.ms", "num.partitions"])
    assert statics["log.dirs"][1] == "STATIC_BROKER_CONFIG" and "nowhere" not in statics["log.dirs"][0]
    assert statics["broker.heartbeat.interval.ms"] == ("500", "STATIC_BROKER_CONFIG")
    assert statics["num.partitions"] == ("1", "DEFAULT_CONFIG")

    # kept in the metadata log: a controller restart and a broker restart keep them
    for c in cluster.controllers:
        c.kill()
    cluster.brokers[other].kill()
    cluster.start()
    wait_until(lambda: sources(bootstrap, other, ["message.max.bytes", "log.cleaner.threads"]) == {
        "message.max.bytes": ("20000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        "log.cleaner.threads": ("2", "DYNAMIC_BROKER_CONFIG")}, timeout_s=60, what="the restarted broker's configs")
    assert sources(bootstrap, leader, ["message.max.bytes"])["message.max.bytes"] == ("100000", "DYNAMIC_BROKER_CONFIG")

    # delete: the default again, then the static/default value
    kbroker(bootstrap, "configs", "delete", "--broker", str(leader), "message.max.bytes")
    wait_until(lambda: sources(bootstrap, leader, ["message.max.bytes"])["message.max.bytes"] == (
        "20000", "DYNAMIC_DEFAULT_BROKER_CONFIG"), timeout_s=30, what="per-broker value deleted")
    wait_until(lambda: produce_one(bootstrap) == KafkaError.MSG_SIZE_TOO_LARGE, timeout_s=30,
               what="the default applies again")
    kbroker(bootstrap, "configs", "delete", "--broker-defaults", "message.max.bytes")
    wait_until(lambda: sources(bootstrap, leader, ["message.max.bytes"])["message.max.bytes"] == (
        "1048588", "DEFAULT_CONFIG"), timeout_s=30, what="the default deleted")
    assert produce_one(bootstrap) == 0
    bad = kbroker(bootstrap, "configs", "set", "--broker-defaults", "listeners=PLAINTEXT://:1", expect=1)
    assert b"Cannot update these configs dynamically" in bad.stderr, bad.stderr
    # a broker's own configs go through that broker (Kafka's ConfigAdminManager.preprocess)
    code, message = asyncio.run(alter_through(bootstrap, other, str(leader), "log.cleaner.threads", "3"))
    assert code == ErrorCode.INVALID_REQUEST and message == (
        f"Unexpected broker id, expected {other}, but received {leader}"), message
    assert sources(bootstrap, leader, ["log.cleaner.threads"])["log.cleaner.threads"] == ("1", "DEFAULT_CONFIG")


async def alter_through(bootstrap: str, node: int, resource: str, key: str, value: str) -> tuple[int, str | None]:
    async with KafkaClient(bootstrap, client_id="test-alter") as client:
        conn = await client.connection(node)
        response = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 4, "resource_name": resource, "configs": [
                {"name": key, "config_operation": 0, "value": value}]}], "validate_only": False})
    [r] = response.responses
    return r.error_code, r.error_message
