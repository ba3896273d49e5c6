"""A topic's DescribeConfigs, sent back whole (issue 24 §2): describe -> edit -> AlterConfigs is
how kafka-configs, older admin clients and librdkafka's own test 0092_mixed_msgver work. The
keys DescribeConfigs lists for a topic are exactly the topic-level configs the broker accepts
(Kafka's LogConfig names; ``producer.id.expiration.ms``, a broker config, was listed and then
refused), each with Kafka's config_source, read_only false and is_sensitive false; every one
comes back through legacy AlterConfigs (confluent-kafka's ``alter_configs``, kafka-python's
``alter_configs(..., incremental=False)``) and IncrementalAlterConfigs SET with NO_ERROR and no
value changed, after which every source reads DYNAMIC_TOPIC_CONFIG, as in Kafka."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic,
                                   ResourceType)

from broker.config import TOPIC_CONFIG_SYNONYMS
from storage import LogConfig
from tests.support import ThreadedBroker

# The legacy AlterConfigs is the point here; confluent-kafka warns that it is deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")

# server.properties-style settings (static broker configs): the topic configs they stand behind
# read STATIC_BROKER_CONFIG; log.retention.hours alone is not retention.ms' own broker key
# (log.retention.ms is), so retention.ms reads DEFAULT_CONFIG although its value comes from it,
# as Kafka's ConfigHelper answers.
STATIC = {"log.segment.bytes": "536870912", "log.retention.hours": "72", "log.roll.ms": "3600000",
          "log.cleaner.min.compaction.lag.ms": "5", "log.preallocate": "false"}
STATIC_TOPIC_KEYS = {"segment.bytes", "segment.ms", "min.compaction.lag.ms", "preallocate"}
OVERRIDES = {"retention.ms": "3600000", "cleanup.policy": "compact", "max.message.bytes": "5000",
             "message.timestamp.after.max.ms": "86400000", "unclean.leader.election.enable": "true"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = ThreadedBroker(tmp_path_factory.mktemp("topic-configs") / "data",
                       overrides={"listeners": "PLAINTEXT://127.0.0.1:0", **STATIC}).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def wait(futures):
    return {k: f.result(timeout=30) for k, f in futures.items()}


def describe(admin, topic: str) -> dict[str, ConfigEntry]:
    [entries] = wait(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])).values()
    return entries


def create(admin, name: str, overrides: bool) -> str:
    wait(admin.create_topics([NewTopic(name, 1, 1, config=OVERRIDES if overrides else {})]))
    return name


def check_described(entries: dict[str, ConfigEntry], overridden: set[str]) -> None:
    """Exactly the accepted topic-level keys, each with Kafka's source and flags."""
    assert set(entries) == set(TOPIC_CONFIG_SYNONYMS)
    assert set(LogConfig().to_topic_properties()) <= set(entries) and "producer.id.expiration.ms" not in entries
    for name, e in entries.items():
        expected = (ConfigSource.DYNAMIC_TOPIC_CONFIG if name in overridden else
                    ConfigSource.STATIC_BROKER_CONFIG if name in STATIC_TOPIC_KEYS else ConfigSource.DEFAULT_CONFIG)
        assert (name, ConfigSource(e.source), e.is_read_only, e.is_sensitive) == (name, expected, False, False)
        assert e.value is not None, name


def values(entries: dict[str, ConfigEntry]) -> dict[str, str]:
    return {name: e.value for name, e in entries.items()}


@pytest.mark.parametrize("overrides", [False, True], ids=["fresh", "overrides"])
def test_describe_lists_the_accepted_keys_with_kafkas_sources(broker, admin, overrides):
    topic = create(admin, f"described-{overrides}", overrides)
    entries = describe(admin, topic)
    check_described(entries, set(OVERRIDES) if overrides else set())
    got = values(entries)
    assert got["retention.ms"] == ("3600000" if overrides else str(72 * 3600 * 1000))
    assert (got["segment.bytes"], got["segment.ms"], got["message.format.version"]) == ("536870912", "3600000", "3.0-IV1")


@pytest.mark.parametrize("overrides", [False, True], ids=["fresh", "overrides"])
def test_confluent_legacy_alter_configs_takes_back_everything_described(broker, admin, overrides):
    topic = create(admin, f"confluent-legacy-{overrides}", overrides)
    before = values(describe(admin, topic))
    wait(admin.alter_configs([ConfigResource(ResourceType.TOPIC, topic, set_config=before)]))  # NO_ERROR or raises
    after = describe(admin, topic)
    assert values(after) == before
    check_described(after, set(before))  # every key now the topic's own: DYNAMIC_TOPIC_CONFIG


@pytest.mark.parametrize("overrides", [False, True], ids=["fresh", "overrides"])
def test_kafka_python_legacy_alter_configs_takes_back_everything_described(broker, admin, overrides):
    from kafka.admin import ConfigResource as KPConfigResource, KafkaAdminClient

    topic = create(admin, f"kafka-python-legacy-{overrides}", overrides)
    before = values(describe(admin, topic))
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = client.alter_configs([KPConfigResource("TOPIC", topic, configs=dict(before))], incremental=False)
    finally:
        client.close()
    assert result == {"topic": {topic: "OK"}}
    after = describe(admin, topic)
    assert values(after) == before
    check_described(after, set(before))


@pytest.mark.parametrize("overrides", [False, True], ids=["fresh", "overrides"])
def test_incremental_alter_configs_set_takes_back_everything_described(broker, admin, overrides):
    topic = create(admin, f"incremental-{overrides}", overrides)
    before = values(describe(admin, topic))
    ops = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in before.items()]
    wait(admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=ops)]))
    after = describe(admin, topic)
    assert values(after) == before
    check_described(after, set(before))


def test_the_live_log_keeps_its_settings_through_the_round_trip(broker, admin):
    topic = create(admin, "live-log", True)
    log = broker.call(lambda: broker.server.replica_manager.get_partition(topic, 0).log)
    config = log.config
    before = values(describe(admin, topic))
    wait(admin.alter_configs([ConfigResource(ResourceType.TOPIC, topic, set_config=before)]))
    assert broker.call(lambda: log.config) == config and config.max_message_bytes == 5000 and config.compact
