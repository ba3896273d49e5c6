"""Configuration in Kafka's terms: file < environment < --override, warnings and errors."""

from __future__ import annotations

import logging

import pytest

from broker.config import ConfigError, KafkaConfig, env_name


def test_kafka_defaults():
    c = KafkaConfig()
    assert c["num.partitions"] == 1
    assert c["auto.create.topics.enable"] is True
    assert c["message.max.bytes"] == 1048588
    assert c["socket.request.max.bytes"] == 104857600
    assert c["log.segment.bytes"] == 1073741824
    assert c.retention_ms == 168 * 3600 * 1000
    assert c["replica.lag.time.max.ms"] == 30000
    assert [str(d) for d in c.log_dirs] == ["/tmp/kafka-logs"]
    assert [str(e) for e in c.listeners] == ["PLAINTEXT://:9092"]


def test_file_env_override_precedence(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("# comment\nnum.partitions=3\nlog.dirs=/a,/b\nlog.retention.ms = 1000\n"
                     "listeners=PLAINTEXT://127.0.0.1:19092\n")
    c = KafkaConfig.load(props, env={})
    assert c["num.partitions"] == 3
    assert [str(d) for d in c.log_dirs] == ["/a", "/b"]
    assert c.retention_ms == 1000
    env = {"KBROKER_NUM_PARTITIONS": "5", "KBROKER_LOG_DIRS": "/env"}
    c = KafkaConfig.load(props, env=env)
    assert c["num.partitions"] == 5 and [str(d) for d in c.log_dirs] == ["/env"]
    c = KafkaConfig.load(props, overrides=["num.partitions=7"], env=env)
    assert c["num.partitions"] == 7
    assert env_name("log.dirs") == "KBROKER_LOG_DIRS"


def test_unknown_key_warns_once_and_kafka_only_keys_are_silent(caplog):
    with caplog.at_level(logging.WARNING, logger="kbroker.config"):
        KafkaConfig({"no.such.key": "1", "num.network.threads": "3", "zookeeper.connect": "x:2181"})
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["unknown configuration key 'no.such.key' ignored"]


@pytest.mark.parametrize("key,value,fragment", [
    ("num.partitions", "many", "num.partitions"),
    ("num.partitions", "0", "num.partitions: 0 is below the minimum 1"),
    ("auto.create.topics.enable", "perhaps", "auto.create.topics.enable"),
    ("log.message.timestamp.type", "Sometimes", "log.message.timestamp.type"),
    ("listeners", "127.0.0.1:9092", "listeners"),
])
def test_bad_values_name_their_key(key, value, fragment):
    with pytest.raises(ConfigError) as info:
        KafkaConfig({key: value})
    assert fragment in str(info.value)


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="key=value"):
        KafkaConfig.load(None, overrides=["num.partitions"], env={})


def test_topic_defaults_use_topic_level_names():
    c = KafkaConfig({"log.segment.bytes": "1024", "log.retention.hours": "1", "message.max.bytes": "2048",
                     "log.message.timestamp.type": "LogAppendTime", "min.insync.replicas": "2"})
    d = c.topic_defaults()
    assert d["segment.bytes"] == "1024"
    assert d["retention.ms"] == str(3600 * 1000)
    assert d["max.message.bytes"] == "2048"
    assert d["message.timestamp.type"] == "LogAppendTime"
    assert d["min.insync.replicas"] == "2"


def test_retention_precedence_ms_over_minutes_over_hours():
    assert KafkaConfig({"log.retention.hours": "2", "log.retention.minutes": "3"}).retention_ms == 180_000
    assert KafkaConfig({"log.retention.minutes": "3", "log.retention.ms": "5"}).retention_ms == 5


def test_cli_and_test_variables_are_not_config(caplog):
    with caplog.at_level(logging.WARNING, logger="kbroker.config"):
        KafkaConfig.load(None, env={"KBROKER_BOOTSTRAP_SERVER": "h:1", "KBROKER_TEST_BOOTSTRAP": "h:2",
                                    "KBROKER_NO_SUCH": "x"})
    assert [r.getMessage() for r in caplog.records] == [
        "environment variable KBROKER_NO_SUCH names no configuration key; ignored"]


def test_controller_keys_have_kafkas_defaults():
    c = KafkaConfig()
    assert c["broker.heartbeat.interval.ms"] == 2000
    assert c["broker.session.timeout.ms"] == 9000
    assert c["unclean.leader.election.enable"] is False
    assert c["auto.leader.rebalance.enable"] is True
    assert c["leader.imbalance.check.interval.seconds"] == 300
    assert c["leader.imbalance.per.broker.percentage"] == 10
    assert c["metadata.log.max.record.bytes.between.snapshots"] == 20971520
    assert c["metadata.log.max.snapshot.interval.ms"] == 3600000
    assert c["offsets.topic.replication.factor"] == 3
    assert str(c.metadata_log_dir) == "/tmp/kafka-logs"
    assert str(KafkaConfig({"log.dirs": "/a,/b"}).metadata_log_dir) == "/a"
    assert str(KafkaConfig({"metadata.log.dir": "/m"}).metadata_log_dir) == "/m"


def test_process_roles_and_the_deprecated_controller_mode(caplog):
    assert KafkaConfig().process_roles == ["broker", "controller"]
    c = KafkaConfig({"process.roles": "controller", "node.id": "3000"})
    assert c.process_roles == ["controller"] and c.node_id == 3000
    c = KafkaConfig({"process.roles": "controller,broker"})
    assert c.process_roles == ["broker", "controller"] and c["kbroker.controller.mode"] == "embedded"
    assert KafkaConfig({"process.roles": "broker"})["kbroker.controller.mode"] == "external"
    with caplog.at_level(logging.WARNING, logger="kbroker.config"):
        c = KafkaConfig({"kbroker.controller.mode": "external"})
    assert c.process_roles == ["broker"]
    assert [r.getMessage() for r in caplog.records] == [
        "kbroker.controller.mode is deprecated; use process.roles=broker"]
    for bad in ("", "zookeeper", "broker,broker"):
        with pytest.raises(ConfigError, match="process.roles"):
            KafkaConfig({"process.roles": bad})
    with pytest.raises(ConfigError, match="contradicts"):
        KafkaConfig({"process.roles": "broker", "kbroker.controller.mode": "embedded"})


def test_controller_listeners_are_picked_from_listeners():
    c = KafkaConfig({"listeners": "PLAINTEXT://:9092,CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER"})
    assert [str(e) for e in c.controller_listeners] == ["CONTROLLER://127.0.0.1:9093"]
    assert [str(e) for e in c.broker_listeners] == ["PLAINTEXT://:9092"]
    assert KafkaConfig({"process.roles": "broker"}).controller_listeners == []
    # A combined node whose listeners name no controller listener gets one on an ephemeral port
    # of its first listener's host (server.properties of the old embedded mode keep working).
    c = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:9092"})
    assert (c.process_roles, c["controller.listener.names"]) == (["broker", "controller"], ["CONTROLLER"])
    assert [str(e) for e in c.controller_listeners] == ["CONTROLLER://127.0.0.1:0"]
    assert [str(e) for e in c.listeners] == [str(e) for e in c.broker_listeners] == ["PLAINTEXT://127.0.0.1:9092"]


def test_controller_quorum_bootstrap_servers_are_host_port_pairs():
    c = KafkaConfig({"process.roles": "broker", "controller.quorum.bootstrap.servers": "a:1, 127.0.0.1:9093,[::1]:3"})
    assert c.controller_quorum_bootstrap_servers == [("a", 1), ("127.0.0.1", 9093), ("::1", 3)]
    assert KafkaConfig({"process.roles": "broker"}).controller_quorum_bootstrap_servers == []
    for bad in ("nohost", "h:port", "h:70000"):
        with pytest.raises(ConfigError, match="controller.quorum.bootstrap.servers"):
            KafkaConfig({"controller.quorum.bootstrap.servers": bad})


def test_topic_validation_shared_by_broker_and_controller():
    from broker.config import validate_topic_configs, validate_topic_name

    assert validate_topic_name("ok.name-1_x") is None
    for bad in ("", ".", "..", "a" * 250, "sp ace", "é"):
        assert validate_topic_name(bad) is not None
    defaults = KafkaConfig().topic_defaults()
    assert validate_topic_configs({"retention.ms": "1000", "cleanup.policy": "delete"}, defaults) is None
    assert validate_topic_configs({"no.such": "1"}, defaults) == "Unknown topic config name: no.such"
    assert "segment.bytes" in validate_topic_configs({"segment.bytes": "1"}, defaults)
    for codec in ("uncompressed", "gzip", "snappy", "lz4", "zstd", "producer"):  # Kafka's six
        assert validate_topic_configs({"compression.type": codec}, defaults) is None
    assert "compression.type" in validate_topic_configs({"compression.type": "GZIP"}, defaults)
    assert "compression.type" in validate_topic_configs({"compression.type": "none"}, defaults)
    assert "unclean" in validate_topic_configs({"unclean.leader.election.enable": "maybe"}, defaults)


def test_topic_defaults_are_exactly_the_accepted_topic_configs_and_each_is_accepted_back():
    """Issue 24 §2: topic_defaults() (what DescribeConfigs lists for a topic) carried
    producer.id.expiration.ms, a broker config validate_topic_configs refuses."""
    from broker.config import TOPIC_CONFIG_SYNONYMS, validate_topic_configs
    from storage import LogConfig

    config = KafkaConfig({"producer.id.expiration.ms": "1000"})
    defaults = config.topic_defaults()
    assert set(defaults) == set(TOPIC_CONFIG_SYNONYMS) >= set(LogConfig().to_topic_properties())
    assert "producer.id.expiration.ms" not in defaults
    assert validate_topic_configs(defaults, defaults) is None
    for key, value in defaults.items():
        assert validate_topic_configs({key: value}, defaults) is None, key
    # the log still gets the broker-level setting it obeys
    assert LogConfig.from_topic_properties(config.log_config_defaults()).producer_id_expiration_ms == 1000


def test_topic_default_sources_follow_kafkas_synonym_walk():
    """ConfigHelper: a static broker key behind a topic config reads STATIC_BROKER_CONFIG, a
    default DEFAULT_CONFIG; the walk keeps the list from the config's own broker key, so a static
    log.retention.hours (not retention.ms' own key, log.retention.ms) leaves DEFAULT_CONFIG."""
    from broker.config import CONFIG_SOURCE_DEFAULT as DEFAULT, CONFIG_SOURCE_STATIC_BROKER as STATIC

    sources = KafkaConfig({"log.segment.bytes": "2048", "log.retention.hours": "3", "log.roll.ms": "5000",
                           "log.preallocate": "true"}).topic_default_sources()
    assert {k: sources[k] for k in ("segment.bytes", "retention.ms", "segment.ms", "preallocate", "flush.ms",
                                    "leader.replication.throttled.replicas")} == {
        "segment.bytes": STATIC, "retention.ms": DEFAULT, "segment.ms": STATIC, "preallocate": STATIC,
        "flush.ms": DEFAULT, "leader.replication.throttled.replicas": DEFAULT}
    assert KafkaConfig({"log.retention.ms": "9"}).topic_default_sources()["retention.ms"] == STATIC
    assert set(KafkaConfig().topic_default_sources().values()) == {DEFAULT}
    assert KafkaConfig({"log.preallocate": "true"}).topic_defaults()["preallocate"] == "true"
