"""The group coordinator's configuration: Kafka's keys (group.*, offset.*, offsets.*) and defaults.

``CONFIG_KEYS`` are ConfigKey entries in broker/config.py's form, so the broker's KEYS table
can take them as they are; ``GroupCoordinatorConfig.from_values`` resolves a mapping of key
to raw string or parsed value (anything missing takes Kafka's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..config import INT_MAX, ConfigKey

CONFIG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("group.min.session.timeout.ms", "int", 6000, "shortest session timeout a member may ask for"),
    ConfigKey("group.max.session.timeout.ms", "int", 1800000, "longest session timeout a member may ask for"),
    ConfigKey("group.max.size", "int", INT_MAX, "most members one group may have", low=1),
    ConfigKey("group.initial.rebalance.delay.ms", "int", 3000,
              "how long the first rebalance of an empty group waits for more members to join", low=0),
    ConfigKey("offset.metadata.max.bytes", "int", 4096, "longest metadata string an offset commit may carry"),
    ConfigKey("offsets.retention.minutes", "int", 10080,
              "how long committed offsets of a group without members are kept", low=1),
    ConfigKey("offsets.retention.check.interval.ms", "long", 600000, "how often expired offsets are looked for", low=1),
    ConfigKey("offsets.topic.num.partitions", "int", 50, "partitions of __consumer_offsets (fixed once created)", low=1),
    ConfigKey("offsets.topic.replication.factor", "int", 3,
              "replication factor of __consumer_offsets (capped by the live brokers when created)", low=1),
    ConfigKey("offsets.topic.segment.bytes", "int", 104857600, "segment size of __consumer_offsets", low=1),
    ConfigKey("offsets.commit.timeout.ms", "int", 5000,
              "how long an offset commit or group metadata write waits for all in-sync replicas", low=1),
)
_KEYS = {k.name: k for k in CONFIG_KEYS}


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_max_size: int = INT_MAX
    group_initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 10080 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104857600
    offsets_commit_timeout_ms: int = 5000

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "GroupCoordinatorConfig":
        def get(name: str):
            key = _KEYS[name]
            value = values.get(name)
            return key.default if value is None else key.parse(value)

        return cls(
            group_min_session_timeout_ms=get("group.min.session.timeout.ms"),
            group_max_session_timeout_ms=get("group.max.session.timeout.ms"),
            group_max_size=get("group.max.size"),
            group_initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms"),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes"),
            offsets_retention_ms=get("offsets.retention.minutes") * 60 * 1000,
            offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms"),
            offsets_topic_num_partitions=get("offsets.topic.num.partitions"),
            offsets_topic_replication_factor=get("offsets.topic.replication.factor"),
            offsets_topic_segment_bytes=get("offsets.topic.segment.bytes"),
            offsets_commit_timeout_ms=get("offsets.commit.timeout.ms"),
        )
