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

from .config import (CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_DYNAMIC_BROKER, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER,
                     CONFIG_SOURCE_STATIC_BROKER,
                     DYNAMIC_BROKER_KEYS, topic_config_entries)

if TYPE_CHECKING:
    from .config import KafkaConfig
    from .dynamic_config import DynamicBrokerConfig
    from .metadata_cache import MetadataCache

# DescribeConfigs resource types (Kafka's ConfigResource.Type).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

ConfigEntry = tuple[str, str, bool, int]  # (name, value, read_only, source)


class ConfigRepository:
    def __init__(self, config: "KafkaConfig", broker_id: int, metadata_cache: "MetadataCache") -> None:
        self.config = config
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.dynamic: "DynamicBrokerConfig | None" = None  # the dynamic broker configs (set by the server)
        # LogConfig (immutable) per set of overrides, for the broker's topic defaults of the
        # time: thousands of partitions of one topic share one, built once.
        self._log_configs: dict[tuple[tuple[tuple[str, str], ...], frozenset[tuple[str, str]]], LogConfig] = {}

    # -- topic configs ---------------------------------------------------------------------
    def default_log_config(self) -> LogConfig:
        return self._log_config({})

    def topic_overrides(self, topic: str) -> dict[str, str]:
        info = self.metadata_cache.topics.get(topic)
        return info.configs if info is not None else {}

    def log_config_for(self, topic: str) -> LogConfig:
        return self._log_config(self.topic_overrides(topic))

    def _log_config(self, overrides: dict[str, str]) -> LogConfig:
        defaults = self.config.log_config_defaults()
        key = (tuple(defaults.items()), frozenset(overrides.items()))
        found = self._log_configs.get(key)
        if found is None:
            if len(self._log_configs) >= 1024:  # topics come and go: a bound, not an index of every topic
                self._log_configs.clear()
            found = self._log_configs[key] = LogConfig.from_topic_properties({**defaults, **overrides})
        return found

    # -- DescribeConfigs -------------------------------------------------------------------
    def describe_configs(self, resource_type: int, name: str) -> tuple[int, str | None, list[ConfigEntry]]:
        """(error, message, [(name, value, read_only, source)]) for one DescribeConfigs resource."""
        if resource_type == RESOURCE_TOPIC:
            if not self.metadata_cache.contains_topic(name):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist", []
            entries = topic_config_entries(self.topic_overrides(name), self.config.topic_defaults(),
                                           self.config.topic_default_sources())
            return ErrorCode.NONE, None, [(k, v, False, source) for k, v, source in entries]
        if resource_type == RESOURCE_BROKER:
            dynamic = self.dynamic
            if name == "":
                # the cluster-wide default resource: its dynamic configs only (Kafka's ConfigHelper)
                defaults = dynamic.defaults if dynamic is not None else {}
                return ErrorCode.NONE, None, [(k, v, False, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER)
                                              for k, v in sorted(defaults.items())]
            if name != str(self.broker_id):
                return ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {self.broker_id}, but received {name}", []
            entries = []
            shown = set()
            for key, value in sorted(self.config.values.items()):
                if value is None:
                    continue
                if isinstance(value, list):
                    text = ",".join(value)
                else:
                    text = str(value).lower() if isinstance(value, bool) else str(value)
                if dynamic is not None:
                    source = dynamic.source(key)
                else:
                    source = CONFIG_SOURCE_STATIC_BROKER if key in self.config.originals else CONFIG_SOURCE_DEFAULT
                # read_only as Kafka marks it: a key that cannot be changed without a restart
                entries.append((key, text, key not in DYNAMIC_BROKER_KEYS, source))
                shown.add(key)
            if dynamic is not None:  # kept, not acted on (passive and custom keys): shown as set
                for source, values in ((CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER, dynamic.defaults),
                                       (CONFIG_SOURCE_DYNAMIC_BROKER, dynamic.per_broker)):
                    for key, text in values.items():
                        if key not in shown:
                            entries = [e for e in entries if e[0] != key]
                            entries.append((key, text, False, source))
                entries.sort()
            return ErrorCode.NONE, None, entries
        return ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported", []
