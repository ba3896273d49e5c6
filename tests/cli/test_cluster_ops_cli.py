"""``kbroker topics trim`` (DeleteRecords) and ``kbroker cluster log-dirs`` (DescribeLogDirs),
run as subprocesses against the test broker."""

from __future__ import annotations

import asyncio
import re
import time

from protocol.client import KafkaClient
from tests.cli.test_cli import kbroker


def earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    out = kbroker(bootstrap, "consume", "-t", topic, "-p", str(partition), "--from-beginning", "-n", "1",
                  "-f", r"%o\n").stdout
    return int(out.decode().strip() or -1)


def test_topics_trim_before_an_offset_and_a_time(bootstrap, topic_name):
    kbroker(bootstrap, "topics", "create", "-t", topic_name, "--partitions", "2")
    kbroker(bootstrap, "produce", "-t", topic_name, "-p", "0", input=b"".join(b"a%d\n" % i for i in range(20)))
    kbroker(bootstrap, "produce", "-t", topic_name, "-p", "1", input=b"".join(b"b%d\n" % i for i in range(20)))
    out = kbroker(bootstrap, "topics", "trim", "-t", topic_name, "-p", "0", "--before", "12").stdout.decode()
    assert f"partition: {topic_name}-0\tlow_watermark: 12" in out
    assert earliest(bootstrap, topic_name, 0) == 12 and earliest(bootstrap, topic_name, 1) == 0
    # beyond the high watermark: OFFSET_OUT_OF_RANGE, nothing changes
    bad = kbroker(bootstrap, "topics", "trim", "-t", topic_name, "-p", "0", "--before", "21", expect=1)
    assert b"OFFSET_OUT_OF_RANGE" in bad.stderr or b"out of range" in bad.stderr.lower(), bad.stderr
    assert earliest(bootstrap, topic_name, 0) == 12
    # --before-time: records older than now go, on every partition
    time.sleep(0.01)
    now_ms = int(time.time() * 1000)
    kbroker(bootstrap, "produce", "-t", topic_name, "-p", "1", input=b"late\n")
    out = kbroker(bootstrap, "topics", "trim", "-t", topic_name, "--before-time", str(now_ms)).stdout.decode()
    assert f"{topic_name}-0\tlow_watermark: 20" in out and f"{topic_name}-1\tlow_watermark: 20" in out, out
    assert earliest(bootstrap, topic_name, 1) == 20


def test_cluster_log_dirs_lists_each_partition_with_its_size(bootstrap, topic_name):
    kbroker(bootstrap, "topics", "create", "-t", topic_name, "--partitions", "2")
    kbroker(bootstrap, "produce", "-t", topic_name, "-p", "1", input=b"x" * 100 + b"\n")
    out = kbroker(bootstrap, "cluster", "log-dirs", "-t", topic_name).stdout.decode()
    sizes = dict(re.findall(rf"({re.escape(topic_name)}-\d)\s*│\s*(\d+)", out))
    assert sizes[f"{topic_name}-0"] == "0" and int(sizes[f"{topic_name}-1"]) > 100, out


def test_topics_alter_adds_partitions(bootstrap, topic_name):
    kbroker(bootstrap, "topics", "create", "-t", topic_name, "--partitions", "2")
    kbroker(bootstrap, "topics", "alter", "-t", topic_name, "--partitions", "5")
    described = kbroker(bootstrap, "topics", "describe", "-t", topic_name).stdout.decode()
    assert "partitions: 5" in described, described
    bad = kbroker(bootstrap, "topics", "alter", "-t", topic_name, "--partitions", "3", expect=1)
    assert b"currently has 5 partition(s); 3 would not be an increase" in bad.stderr, bad.stderr


def config_rows(out: str) -> dict[str, tuple[str, str]]:
    return {k: (v, s) for k, v, s in re.findall(r"│\s*(\S+)\s*│\s*(\S+)\s*│\s*([A-Z_]+)\s*│", out)}


def test_configs_describe_set_delete_a_topic_with_sources(bootstrap, topic_name):
    kbroker(bootstrap, "topics", "create", "-t", topic_name)
    kbroker(bootstrap, "configs", "set", "--topic", topic_name, "retention.ms=60000", "cleanup.policy=compact")
    rows = config_rows(kbroker(bootstrap, "configs", "describe", "--topic", topic_name).stdout.decode())
    assert rows["retention.ms"] == ("60000", "DYNAMIC_TOPIC_CONFIG")
    assert rows["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")
    assert "segment.bytes" not in rows  # a default: shown with --all only
    kbroker(bootstrap, "configs", "delete", "--topic", topic_name, "retention.ms")
    rows = config_rows(kbroker(bootstrap, "configs", "describe", "--topic", topic_name, "--all").stdout.decode())
    assert rows["retention.ms"] == ("604800000", "DEFAULT_CONFIG")
    assert rows["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")
    bad = kbroker(bootstrap, "configs", "set", "--topic", topic_name, "retention.ms=soon", expect=1)
    assert b"INVALID_CONFIG" in bad.stderr or b"retention.ms" in bad.stderr, bad.stderr


def session_broker_id(bootstrap: str) -> int:
    async def ask() -> int:
        async with KafkaClient(bootstrap, client_id="test-admin") as client:
            return (await client.describe_cluster()).brokers[0].broker_id
    return asyncio.run(ask())


def test_configs_describe_a_broker_shows_static_and_default_sources(bootstrap):
    broker = str(session_broker_id(bootstrap))
    out = kbroker(bootstrap, "configs", "describe", "--broker", broker, "--all").stdout.decode()
    rows = config_rows(out)
    assert rows["listeners"][1] == "STATIC_BROKER_CONFIG"
    assert rows["num.partitions"] == ("1", "DEFAULT_CONFIG")
    assert "num.partitions" not in config_rows(kbroker(bootstrap, "configs", "describe",
                                                       "--broker", broker).stdout.decode())
    # the cluster-wide default resource holds only the dynamic defaults (none here), as in Kafka
    assert config_rows(kbroker(bootstrap, "configs", "describe", "--broker-defaults", "--all").stdout.decode()) == {}
    kbroker(bootstrap, "configs", "describe", "--topic", "x", "--broker", "1", expect=2)
