"""ConfigurationControlManager (Kafka's): topic config overrides and dynamic broker configs.

State: {topic name: {key: value}} and {broker resource name: {key: value}} (name "N" for
broker N, "" for the cluster-wide default), changed only by replaying ConfigRecords (a null
value deletes the key; removing a topic drops its configs).

Topic changes are validated by the rules the broker applies (broker.config.validate_topic_configs:
known or passively accepted keys, values storage.LogConfig accepts) against the full set of
overrides they would leave, over the broker-level defaults. Broker changes are validated as
Kafka's DynamicBrokerConfig.validateConfigs does (broker.config.validate_dynamic_broker_configs):
a static-only key, an SSL key without a listener prefix or a bad value is INVALID_REQUEST, as
Kafka answers it (KAFKA-13609), and nothing changes. Brokers receive the broker records with the
security records (UpdateMetadata) and apply them without a restart (broker/dynamic_config.py).
"""

from __future__ import annotations

from typing import Mapping

from broker.config import (CONFIG_SOURCE_DEFAULT, KEYS, LIST_TOPIC_CONFIGS, topic_config_entries,
                           validate_dynamic_broker_configs, validate_topic_configs)
from protocol.errors import ErrorCode
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType as T, make_record

TOPIC = 2
BROKER = 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def config_record(topic: str, name: str, value: str | None, resource_type: int = TOPIC) -> ApiMessageAndVersion:
    return make_record(T.CONFIG, resource_type=resource_type, resource_name=topic, name=name, value=value)


def broker_config_record(resource: str, name: str, value: str | None) -> ApiMessageAndVersion:
    return config_record(resource, name, value, BROKER)


def broker_resource_problem(name: str) -> str | None:
    """Kafka's check of a BROKER resource name: "" (the cluster-wide default) or a node id."""
    if name == "":
        return None
    try:
        if int(name) >= 0 and str(int(name)) == name.strip():
            return None
    except ValueError:
        pass
    return f"Node id must be an integer, but it is: {name}"


class ConfigurationControlManager:
    def __init__(self, topic_defaults: Mapping[str, str], unclean_leader_election_default: bool = False,
                 topic_default_sources: Mapping[str, int] | None = None) -> None:
        self.topic_defaults = dict(topic_defaults)
        self.topic_default_sources = dict(topic_default_sources or {})
        self.unclean_leader_election_default = unclean_leader_election_default
        self.configs: dict[str, dict[str, str]] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}  # "N" or "" (cluster-wide) -> {key: value}

    # -- replay ----------------------------------------------------------------------------

    def replay(self, record: ApiMessageAndVersion) -> None:
        if record.resource_type == TOPIC:
            state = self.configs
        elif record.resource_type == BROKER:
            state = self.broker_configs
        else:
            return
        configs = state.setdefault(record.resource_name, {})
        if record.value is None:
            configs.pop(record.name, None)
            if not configs:
                del state[record.resource_name]
        else:
            configs[record.name] = record.value

    def delete_topic_configs(self, topic: str) -> None:
        self.configs.pop(topic, None)

    # -- queries ---------------------------------------------------------------------------

    def topic_configs(self, topic: str) -> dict[str, str]:
        return dict(self.configs.get(topic, {}))

    def unclean_leader_election_enabled(self, topic: str) -> bool:
        value = self.configs.get(topic, {}).get("unclean.leader.election.enable")
        if value is None:  # the cluster-wide dynamic default, else the controller's static one
            value = self.broker_configs.get("", {}).get("unclean.leader.election.enable")
        if value is None:
            return self.unclean_leader_election_default
        return value.strip().lower() == "true"

    def validate(self, overrides: Mapping[str, str]) -> str | None:
        return validate_topic_configs(dict(overrides), self.topic_defaults)

    def describe(self, topic: str, keys=None) -> list[dict]:
        """DescribeConfigs entries of a topic: every default, overridden where the topic says so."""
        return self.describe_entries(self.configs.get(topic, {}), keys)

    def describe_entries(self, overrides: Mapping[str, str], keys=None) -> list[dict]:
        entries = topic_config_entries(overrides, self.topic_defaults, self.topic_default_sources)
        if keys is not None:
            entries = [e for e in entries if e[0] in set(keys)]
        return [{"name": k, "value": v, "read_only": False, "config_source": source,
                 "is_default": source == CONFIG_SOURCE_DEFAULT, "is_sensitive": False, "synonyms": []}
                for k, v, source in entries]

    # -- decisions -------------------------------------------------------------------------

    def topic_config_records(self, topic: str) -> list:
        """ConfigRecords that set the topic's overrides as they are now."""
        return [config_record(topic, k, v) for k, v in sorted(self.configs.get(topic, {}).items())]

    def creation_records(self, topic: str, configs: Mapping[str, str | None]) -> tuple[int, str | None, list]:
        """(error, message, records) for a new topic's configs (null values are ignored, as Kafka does)."""
        clean = {k: v for k, v in configs.items() if v is not None}
        problem = self.validate(clean)
        if problem is not None:
            return ErrorCode.INVALID_CONFIG, problem, []
        return ErrorCode.NONE, None, [config_record(topic, k, v) for k, v in sorted(clean.items())]

    def incremental_alter(self, topic: str, ops) -> tuple[int, str | None, list]:
        """IncrementalAlterConfigs on one topic: ``ops`` are (name, operation, value)."""
        current = dict(self.configs.get(topic, {}))
        new = dict(current)
        for name, operation, value in ops:
            if operation == SET:
                if value is None:
                    return ErrorCode.INVALID_CONFIG, f"Null value not supported for: {name}", []
                new[name] = value
            elif operation == DELETE:
                new.pop(name, None)
            elif operation in (APPEND, SUBTRACT):
                if name not in LIST_TOPIC_CONFIGS:
                    return ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for config key: {name}", []
                base = new.get(name, self.topic_defaults.get(name, ""))
                items = [x for x in base.split(",") if x.strip()]
                given = [x for x in (value or "").split(",") if x.strip()]
                if operation == APPEND:
                    items += [x for x in given if x not in items]
                else:
                    items = [x for x in items if x not in given]
                new[name] = ",".join(items)
            else:
                return ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation} for {name}", []
        return self._records_for(topic, current, new)

    def legacy_alter(self, topic: str, configs: Mapping[str, str | None]) -> tuple[int, str | None, list]:
        """AlterConfigs: the topic's overrides become exactly ``configs``."""
        current = dict(self.configs.get(topic, {}))
        new = {k: v for k, v in configs.items() if v is not None}
        return self._records_for(topic, current, new)

    def _records_for(self, topic: str, current: dict, new: dict) -> tuple[int, str | None, list]:
        problem = self.validate(new)
        if problem is not None:
            return ErrorCode.INVALID_CONFIG, problem, []
        records = [config_record(topic, k, v) for k, v in sorted(new.items()) if current.get(k) != v]
        records += [config_record(topic, k, None) for k in sorted(current) if k not in new]
        return ErrorCode.NONE, None, records

    def snapshot_records(self) -> list[ApiMessageAndVersion]:
        return ([config_record(topic, k, v) for topic in sorted(self.configs) for k, v in sorted(self.configs[topic].items())]
                + self.broker_snapshot_records())

    # -- dynamic broker configs ------------------------------------------------------------

    def broker_snapshot_records(self) -> list[ApiMessageAndVersion]:
        """The dynamic broker configs as records (also what a broker's full state carries)."""
        return [broker_config_record(name, k, v) for name in sorted(self.broker_configs)
                for k, v in sorted(self.broker_configs[name].items())]

    def broker_incremental_alter(self, name: str, ops) -> tuple[int, str | None, list]:
        """IncrementalAlterConfigs on a broker resource (``name``: "N" or "" for the
        cluster-wide default). APPEND/SUBTRACT apply to list keys only (INVALID_CONFIG, as
        Kafka's prepareIncrementalConfigs answers)."""
        problem = broker_resource_problem(name)
        if problem is not None:
            return ErrorCode.INVALID_REQUEST, problem, []
        current = dict(self.broker_configs.get(name, {}))
        new = dict(current)
        for key, operation, value in ops:
            if operation == SET:
                if value is None:
                    return ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}", []
                new[key] = value
            elif operation == DELETE:
                new.pop(key, None)
            elif operation in (APPEND, SUBTRACT):
                spec = KEYS.get(key)
                if spec is None or spec.type != "list":
                    return ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for config key: {key}", []
                items = [x for x in new.get(key, "").split(",") if x.strip()]
                given = [x for x in (value or "").split(",") if x.strip()]
                items = items + [x for x in given if x not in items] if operation == APPEND else [
                    x for x in items if x not in given]
                new[key] = ",".join(items)
            else:
                return ErrorCode.INVALID_REQUEST, f"Unknown operations type {operation}", []
        return self._broker_records_for(name, current, new)

    def broker_legacy_alter(self, name: str, configs: Mapping[str, str | None]) -> tuple[int, str | None, list]:
        """AlterConfigs on a broker resource: its dynamic configs become exactly ``configs``."""
        problem = broker_resource_problem(name)
        if problem is not None:
            return ErrorCode.INVALID_REQUEST, problem, []
        nulls = [k for k, v in configs.items() if v is None]
        if nulls:
            return ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls), []
        return self._broker_records_for(name, dict(self.broker_configs.get(name, {})), dict(configs))

    def _broker_records_for(self, name: str, current: dict, new: dict) -> tuple[int, str | None, list]:
        problem = validate_dynamic_broker_configs(new, per_broker=name != "")
        if problem is not None:
            return ErrorCode.INVALID_REQUEST, problem, []
        records = [broker_config_record(name, k, v) for k, v in sorted(new.items()) if current.get(k) != v]
        records += [broker_config_record(name, k, None) for k in sorted(current) if k not in new]
        return ErrorCode.NONE, None, records

    def describe_broker(self, name: str, keys=None) -> list[dict]:
        """The dynamic configs of a broker resource, as the controller keeps them (the brokers
        answer DescribeConfigs with every config and its source: broker/config_repository.py)."""
        source = 3 if name == "" else 2  # DYNAMIC_DEFAULT_BROKER_CONFIG / DYNAMIC_BROKER_CONFIG
        return [{"name": k, "value": v, "read_only": False, "config_source": source, "is_default": False,
                 "is_sensitive": False, "synonyms": []}
                for k, v in sorted(self.broker_configs.get(name, {}).items()) if keys is None or k in set(keys)]
