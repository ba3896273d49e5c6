"""The configs this broker answers for: its own (server.properties over Kafka's defaults)
and each topic's (the broker's topic defaults overlaid with the topic's overrides).

Topic overrides are read from the metadata cache, where UpdateMetadata puts them with the
topic (the controller's whole set of overrides, kbroker's tag 10000), so DescribeConfigs
answers what the controller stored. The storage layer gets ``log_config_for`` to open each
partition's log with its topic's settings; DescribeConfigs is answered from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.errors import ErrorCode
from storage import LogConfig

if TYPE_CHECKING:
    from .config import KafkaConfig
    from .metadata_cache import MetadataCache

# DescribeConfigs resource types and config sources (Kafka's ConfigResource.Type, ConfigSource).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
CONFIG_SOURCE_TOPIC = 1
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5

ConfigEntry = tuple[str, str, bool, int]  # (name, value, read_only, source)


class ConfigRepository:
    def __init__(self, config: "KafkaConfig", broker_id: int, metadata_cache: "MetadataCache") -> None:
        self.config = config
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        # LogConfig (immutable) by its properties: a LeaderAndIsr for 10,000 partitions asks for
        # one per partition, and parsing the properties each time cost seconds.
        self._log_configs: dict[tuple[tuple[str, str], ...], LogConfig] = {}

    # -- topic configs ---------------------------------------------------------------------
    def default_log_config(self) -> LogConfig:
        return self._log_config(self.config.topic_defaults())

    def topic_overrides(self, topic: str) -> dict[str, str]:
        info = self.metadata_cache.topics.get(topic)
        return info.configs if info is not None else {}

    def log_config_for(self, topic: str) -> LogConfig:
        overrides = self.topic_overrides(topic)
        if not overrides:
            return self.default_log_config()
        return self._log_config({**self.config.topic_defaults(), **overrides})

    def _log_config(self, props: dict[str, str]) -> LogConfig:
        key = tuple(sorted(props.items()))
        found = self._log_configs.get(key)
        if found is None:
            found = LogConfig.from_topic_properties(props)  # raises on a bad value: nothing cached
            if len(self._log_configs) >= 1024:  # (configs changed that often: start over)
                self._log_configs.clear()
            self._log_configs[key] = found
        return found

    # -- DescribeConfigs -------------------------------------------------------------------
    def describe_configs(self, resource_type: int, name: str) -> tuple[int, str | None, list[ConfigEntry]]:
        """(error, message, [(name, value, read_only, source)]) for one DescribeConfigs resource."""
        if resource_type == RESOURCE_TOPIC:
            if not self.metadata_cache.contains_topic(name):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist", []
            overrides = self.topic_overrides(name)
            defaults = self.config.topic_defaults()
            entries = [(k, overrides.get(k, v), False, CONFIG_SOURCE_TOPIC if k in overrides else CONFIG_SOURCE_DEFAULT)
                       for k, v in sorted(defaults.items())]
            entries += [(k, v, False, CONFIG_SOURCE_TOPIC) for k, v in sorted(overrides.items()) if k not in defaults]
            return ErrorCode.NONE, None, entries
        if resource_type == RESOURCE_BROKER:
            if name and name != str(self.broker_id):
                return ErrorCode.INVALID_REQUEST, f"this is broker {self.broker_id}, not {name}", []
            entries = []
            for key, value in sorted(self.config.values.items()):
                if value is None:
                    continue
                if isinstance(value, list):
                    text = ",".join(value)
                else:
                    text = str(value).lower() if isinstance(value, bool) else str(value)
                source = CONFIG_SOURCE_STATIC_BROKER if key in self.config.originals else CONFIG_SOURCE_DEFAULT
                entries.append((key, text, True, source))
            return ErrorCode.NONE, None, entries
        return ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported", []
