"""Dynamic broker configs on a broker (Kafka's DynamicBrokerConfig, KIP-226).

The controller keeps them as ConfigRecords of resource type 4 ("N": broker N, "": the
cluster-wide default) and sends them with the security records in UpdateMetadata: the whole set
in a full state (replacing what the broker had), the changed records after that. ``apply``
keeps this broker's two sets (its own and the default) and recomputes the effective config:

    per-broker dynamic > cluster-wide dynamic > static (server.properties, ...) > default

for the keys kbroker applies live (broker.config.DYNAMIC_APPLIED_KEYS). The effective values
are written into the broker's one ``KafkaConfig.values`` (everything that reads a key per use
sees the new value at once: the topic defaults, and so every log's LogConfig), and the
listeners are told which keys changed (the replica manager gives every log its new LogConfig,
the cleaner threads resize, the replication quotas take their new rates). A value that does not
parse (the controller validated it; a newer controller may know more) is logged and skipped.
Keys kbroker keeps without acting on (DYNAMIC_PASSIVE_KEYS, custom keys) are only shown.

``source(key)`` gives DescribeConfigs' config_source of a key: DYNAMIC_BROKER_CONFIG (2),
DYNAMIC_DEFAULT_BROKER_CONFIG (3), STATIC_BROKER_CONFIG (4) or DEFAULT_CONFIG (5).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

from .config import (CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_DYNAMIC_BROKER, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER,
                     CONFIG_SOURCE_STATIC_BROKER, DYNAMIC_APPLIED_KEYS, KEYS, ConfigError, KafkaConfig)

log = logging.getLogger("kbroker.config")

BROKER = 4


class DynamicBrokerConfig:
    def __init__(self, config: KafkaConfig, broker_id: int) -> None:
        self.config = config
        self.broker_id = broker_id
        self.static_values: dict[str, Any] = dict(config.values)
        self.per_broker: dict[str, str] = {}
        self.defaults: dict[str, str] = {}
        # Called with the set of keys whose effective value changed (after config.values has them).
        self.listeners: list[Callable[[set[str]], None]] = []

    def apply(self, records: Iterable[Any], full: bool) -> set[str]:
        """Replay ConfigRecords of broker resources (others are ignored); ``full``: they are the
        whole set. Returns the keys whose effective value changed."""
        per_broker = {} if full else dict(self.per_broker)
        defaults = {} if full else dict(self.defaults)
        mine = str(self.broker_id)
        for r in records:
            if r.resource_type != BROKER:
                continue
            if r.resource_name == "":
                target = defaults
            elif r.resource_name == mine:
                target = per_broker
            else:
                continue
            if r.value is None:
                target.pop(r.name, None)
            else:
                target[r.name] = r.value
        if per_broker == self.per_broker and defaults == self.defaults:
            return set()
        self.per_broker, self.defaults = per_broker, defaults
        return self._recompute()

    def _recompute(self) -> set[str]:
        values = dict(self.static_values)
        for source in (self.defaults, self.per_broker):
            for name, raw in source.items():
                if name not in DYNAMIC_APPLIED_KEYS:
                    continue
                try:
                    values[name] = KEYS[name].parse(raw)
                except ConfigError as exc:
                    log.warning("dynamic broker config %s=%r not applied: %s", name, raw, exc)
        current = self.config.values
        changed = {k for k, v in values.items() if current.get(k) != v}
        current.update(values)
        # what topic_defaults / topic_default_sources read (the passive keys, the sources)
        self.config.dynamic_default = dict(self.defaults)
        self.config.dynamic_broker = dict(self.per_broker)
        if changed:
            log.info("dynamic broker configs applied: %s", ", ".join(f"{k}={current[k]}" for k in sorted(changed)))
            for listener in list(self.listeners):
                try:
                    listener(changed)
                except Exception:
                    log.exception("applying the dynamic broker configs %s failed", sorted(changed))
        return changed

    def source(self, name: str) -> int:
        if name in self.per_broker:
            return CONFIG_SOURCE_DYNAMIC_BROKER
        if name in self.defaults:
            return CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER
        if name in self.config.originals:
            return CONFIG_SOURCE_STATIC_BROKER
        return CONFIG_SOURCE_DEFAULT
