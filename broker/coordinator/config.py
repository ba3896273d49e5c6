"""The group coordinator's configuration: Kafka's keys (group.*, offset.*, offsets.*) and defaults.

``CONFIG_KEYS`` are the broker's ConfigKey entries for them (defined with the broker's KEYS table
in broker/config.py); ``GroupCoordinatorConfig.from_values`` resolves a mapping of key
to raw string or parsed value (anything missing takes Kafka's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..config import GROUP_COORDINATOR_KEYS, INT_MAX, ConfigKey

CONFIG_KEYS: tuple[ConfigKey, ...] = GROUP_COORDINATOR_KEYS
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
