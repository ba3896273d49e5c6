"""Broker configuration in Kafka's own terms: server.properties keys, Kafka's defaults.

Sources, lowest precedence first: the properties file, ``KBROKER_<KEY>`` environment
variables (key upper-cased, dots as underscores: ``KBROKER_LOG_DIRS`` is ``log.dirs``), then
``--override key=value``. An unknown key gets a one-line warning; a bad value raises
``ConfigError`` naming the key. Keys Kafka has but kbroker does not use (thread counts,
ZooKeeper settings, ...) are accepted silently so a stock server.properties loads.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

log = logging.getLogger("kbroker.config")

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    pass


def _parse_bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError("expected true or false")


def _parse_list(v: str) -> list[str]:
    return [p.strip() for p in v.split(",") if p.strip()]


_PARSERS: dict[str, Callable[[str], Any]] = {
    "int": lambda v: int(v.strip()), "long": lambda v: int(v.strip()), "bool": _parse_bool,
    "string": lambda v: v.strip(), "list": _parse_list, "double": lambda v: float(v.strip()),
}


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str
    default: Any
    doc: str = ""
    low: int | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, raw: Any) -> Any:
        if raw is None:
            return None
        if not isinstance(raw, str):
            value = raw
        else:
            try:
                value = _PARSERS[self.type](raw)
            except ValueError as exc:
                raise ConfigError(f"{self.name}: {raw!r} is not a valid {self.type} ({exc})") from None
        if self.low is not None and value is not None and value < self.low:
            raise ConfigError(f"{self.name}: {value} is below the minimum {self.low}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{self.name}: {value!r} is not one of {', '.join(self.choices)}")
        return value


def _k(name, type_, default, doc="", low=None, choices=None) -> ConfigKey:
    return ConfigKey(name, type_, default, doc, low, choices)


KEYS: dict[str, ConfigKey] = {k.name: k for k in (
    _k("broker.id", "int", -1, "this broker's id; -1 generates one and keeps it in meta.properties", low=-1),
    _k("node.id", "int", None, "KRaft's name for broker.id"),
    _k("listeners", "list", ["PLAINTEXT://:9092"], "where to accept connections"),
    _k("advertised.listeners", "list", None, "what Metadata tells clients (default: listeners)"),
    _k("log.dirs", "list", None, "data directories (overrides log.dir)"),
    _k("log.dir", "string", "/tmp/kafka-logs", "data directory when log.dirs is unset"),
    _k("num.partitions", "int", 1, "partitions of an auto-created topic", low=1),
    _k("default.replication.factor", "int", 1, low=1),
    _k("auto.create.topics.enable", "bool", True),
    _k("delete.topic.enable", "bool", True),
    _k("message.max.bytes", "int", 1048588, "largest record batch accepted", low=0),
    _k("socket.request.max.bytes", "int", 104857600, "largest request frame accepted", low=1),
    _k("socket.send.buffer.bytes", "int", 102400, "SO_SNDBUF (-1: OS default)"),
    _k("socket.receive.buffer.bytes", "int", 102400, "SO_RCVBUF (-1: OS default)"),
    _k("queued.max.requests", "int", 500, "requests a connection may have in flight before reads pause", low=1),
    _k("connections.max.idle.ms", "long", 600000),
    _k("log.segment.bytes", "int", 1073741824, low=14),
    _k("log.roll.ms", "long", None),
    _k("log.roll.hours", "int", 168, low=1),
    _k("log.roll.jitter.ms", "long", None),
    _k("log.roll.jitter.hours", "int", 0, low=0),
    _k("log.index.interval.bytes", "int", 4096, low=0),
    _k("log.index.size.max.bytes", "int", 10485760, low=4),
    _k("log.retention.hours", "int", 168),
    _k("log.retention.minutes", "int", None),
    _k("log.retention.ms", "long", None),
    _k("log.retention.bytes", "long", -1),
    _k("log.retention.check.interval.ms", "long", 300000, low=1),
    _k("log.segment.delete.delay.ms", "long", 60000, low=0),
    _k("log.flush.interval.messages", "long", LONG_MAX, low=1),
    _k("log.flush.interval.ms", "long", None),
    _k("log.flush.scheduler.interval.ms", "long", LONG_MAX),
    _k("log.flush.offset.checkpoint.interval.ms", "int", 60000, low=0),
    _k("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, low=0),
    _k("log.message.timestamp.type", "string", "CreateTime", choices=("CreateTime", "LogAppendTime")),
    _k("min.insync.replicas", "int", 1, low=1),
    _k("unclean.leader.election.enable", "bool", False),
    _k("replica.lag.time.max.ms", "long", 30000, low=1),
    _k("replica.high.watermark.checkpoint.interval.ms", "long", 5000, low=1),
    _k("replica.fetch.wait.max.ms", "int", 500, low=0),
    _k("replica.fetch.min.bytes", "int", 1, low=1),
    _k("replica.fetch.max.bytes", "int", 1048576, low=0),
    _k("replica.fetch.response.max.bytes", "int", 10485760, low=0),
    _k("replica.fetch.backoff.ms", "int", 1000, low=0),
    _k("replica.socket.timeout.ms", "int", 30000),
    _k("producer.id.expiration.ms", "int", 86400000, low=1),
    _k("producer.id.expiration.check.interval.ms", "int", 600000, low=1),
    _k("transactional.id.expiration.ms", "int", 604800000, low=1),
    _k("request.timeout.ms", "int", 30000),
    _k("controlled.shutdown.enable", "bool", True),
    _k("kbroker.controller.mode", "string", "embedded", "embedded: this broker is a single-node cluster and "
       "keeps topic metadata itself; external: partitions come from LeaderAndIsr/UpdateMetadata",
       choices=("embedded", "external")),
    _k("kbroker.shutdown.timeout.ms", "long", 10000, "how long graceful shutdown waits for in-flight requests"),
)}

# Kafka keys that mean nothing here; accepted without a warning.
IGNORED_KAFKA_KEYS = frozenset({
    "num.network.threads", "num.io.threads", "num.recovery.threads.per.data.dir", "num.replica.fetchers",
    "background.threads", "zookeeper.connect", "zookeeper.connection.timeout.ms", "zookeeper.session.timeout.ms",
    "group.initial.rebalance.delay.ms", "offsets.topic.replication.factor", "offsets.topic.num.partitions",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr", "listener.security.protocol.map",
    "inter.broker.listener.name", "process.roles", "controller.quorum.voters", "controller.listener.names",
    "log.cleaner.enable", "log.cleanup.policy", "compression.type", "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds", "socket.listen.backlog.size", "max.connections",
    "log.preallocate", "log.cleaner.threads", "confluent.support.metrics.enable",
})

ENV_PREFIX = "KBROKER_"
# KBROKER_ variables that belong to the CLI or the tests, not to the broker's configuration.
_NOT_CONFIG_ENV = frozenset({"KBROKER_BOOTSTRAP_SERVER"})
_NOT_CONFIG_ENV_PREFIXES = ("KBROKER_TEST_",)


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_")


_ENV_TO_KEY = {env_name(k): k for k in KEYS}


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java .properties file (the subset server.properties files use): key=value or key: value,
    # and ! comments, trailing backslash continuations."""
    props: dict[str, str] = {}
    pending = ""
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = (pending + raw.strip()) if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not m:
            props[line] = ""
            continue
        props[m.group(1)] = m.group(2)
    return props


class KafkaConfig:
    """Resolved broker configuration. Values are reached by Kafka key: ``config["log.dirs"]``,
    with derived values (log_dirs, retention_ms, ...) as properties."""

    def __init__(self, props: Mapping[str, Any] | None = None) -> None:
        props = dict(props or {})
        self.originals = props
        self.values: dict[str, Any] = {}
        for name, key in KEYS.items():
            self.values[name] = key.parse(props[name]) if name in props else key.default
        for name in props:
            if name not in KEYS and name not in IGNORED_KAFKA_KEYS:
                log.warning("unknown configuration key %r ignored", name)
        if self.values["node.id"] is not None and "broker.id" not in props:
            self.values["broker.id"] = self.values["node.id"]
        self._check()

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Iterable[str] = (),
             env: Mapping[str, str] | None = None) -> "KafkaConfig":
        props: dict[str, str] = {}
        if path is not None:
            try:
                props.update(read_properties(path))
            except OSError as exc:
                raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        env = os.environ if env is None else env
        for name, value in env.items():
            if not name.startswith(ENV_PREFIX) or name in _NOT_CONFIG_ENV or name.startswith(_NOT_CONFIG_ENV_PREFIXES):
                continue
            key = _ENV_TO_KEY.get(name)
            if key is None:
                log.warning("environment variable %s names no configuration key; ignored", name)
                continue
            props[key] = value
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"--override {item!r}: expected key=value")
            k, v = item.split("=", 1)
            props[k.strip()] = v
        return cls(props)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def _check(self) -> None:
        if self.values["message.max.bytes"] > self.values["socket.request.max.bytes"]:
            log.warning("message.max.bytes (%d) is larger than socket.request.max.bytes (%d)",
                        self.values["message.max.bytes"], self.values["socket.request.max.bytes"])
        # Parse the endpoints now, so a bad listener fails at startup naming its key.
        _ = (self.listeners, self.advertised_listeners)

    # -- derived values, resolved as Kafka resolves them ---------------------------------
    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values["log.dirs"] or [self.values["log.dir"]]
        return [Path(d) for d in dirs]

    @property
    def listeners(self) -> list["Endpoint"]:
        return [Endpoint.parse(s, "listeners") for s in self.values["listeners"]]

    @property
    def advertised_listeners(self) -> list["Endpoint"]:
        raw = self.values["advertised.listeners"]
        if not raw:
            return []
        return [Endpoint.parse(s, "advertised.listeners") for s in raw]

    @property
    def retention_ms(self) -> int:
        v = self.values
        if v["log.retention.ms"] is not None:
            return v["log.retention.ms"]
        if v["log.retention.minutes"] is not None:
            return v["log.retention.minutes"] * 60_000
        return v["log.retention.hours"] * 3_600_000

    @property
    def roll_ms(self) -> int:
        v = self.values
        return v["log.roll.ms"] if v["log.roll.ms"] is not None else v["log.roll.hours"] * 3_600_000

    @property
    def roll_jitter_ms(self) -> int:
        v = self.values
        return v["log.roll.jitter.ms"] if v["log.roll.jitter.ms"] is not None else v["log.roll.jitter.hours"] * 3_600_000

    @property
    def flush_interval_ms(self) -> int:
        v = self.values
        return v["log.flush.interval.ms"] if v["log.flush.interval.ms"] is not None else v["log.flush.scheduler.interval.ms"]

    def topic_defaults(self) -> dict[str, str]:
        """The broker-level defaults of topic-level configs, under their topic-level names."""
        v = self.values
        return {
            "segment.bytes": str(v["log.segment.bytes"]),
            "segment.ms": str(self.roll_ms),
            "segment.jitter.ms": str(self.roll_jitter_ms),
            "segment.index.bytes": str(v["log.index.size.max.bytes"]),
            "index.interval.bytes": str(v["log.index.interval.bytes"]),
            "retention.bytes": str(v["log.retention.bytes"]),
            "retention.ms": str(self.retention_ms),
            "max.message.bytes": str(v["message.max.bytes"]),
            "message.timestamp.type": v["log.message.timestamp.type"],
            "flush.messages": str(v["log.flush.interval.messages"]),
            "flush.ms": str(self.flush_interval_ms),
            "min.insync.replicas": str(v["min.insync.replicas"]),
            "file.delete.delay.ms": str(v["log.segment.delete.delay.ms"]),
            "producer.id.expiration.ms": str(v["producer.id.expiration.ms"]),
        }


@dataclass(frozen=True)
class Endpoint:
    listener_name: str
    host: str
    port: int

    @classmethod
    def parse(cls, spec: str, key: str) -> "Endpoint":
        m = re.match(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:/]*):(\d+)$", spec.strip())
        if not m:
            raise ConfigError(f"{key}: {spec!r} is not NAME://host:port")
        host = m.group(2).strip("[]")
        port = int(m.group(3))
        if port > 65535:
            raise ConfigError(f"{key}: port {port} out of range")
        return cls(m.group(1).upper(), host, port)

    def __str__(self) -> str:
        return f"{self.listener_name}://{self.host}:{self.port}"
