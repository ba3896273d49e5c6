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

from .security.authorizer import AUTHORIZER_CLASS_NAMES, STANDARD_AUTHORIZER, parse_super_users
from .security.listeners import is_security_key, resolve_security

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


# The group coordinator's keys (broker/coordinator/config.py reads them from here).
GROUP_COORDINATOR_KEYS: tuple[ConfigKey, ...] = (
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
    # the transaction coordinator's (broker/transaction/coordinator.py TransactionConfig)
    ConfigKey("transaction.state.log.num.partitions", "int", 50,
              "partitions of __transaction_state (fixed once created)", low=1),
    ConfigKey("transaction.state.log.replication.factor", "int", 3,
              "replication factor of __transaction_state (capped by the live brokers when created)", low=1),
    ConfigKey("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state", low=1),
    ConfigKey("transaction.state.log.segment.bytes", "int", 104857600, "segment size of __transaction_state", low=1),
    ConfigKey("transaction.max.timeout.ms", "int", 900000,
              "the largest transaction timeout a producer may ask for", low=1),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
              "how often transactions past their timeout are looked for", low=1),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
              "how often expired transactional ids are looked for", low=1),
)

# Transport and authentication (broker/security/listeners.py resolves them per listener: a key
# under ``listener.name.<listener>.`` wins over the plain one). Kafka's names and defaults.
SECURITY_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("listener.security.protocol.map", "list", None, "listener name -> PLAINTEXT, SSL, SASL_PLAINTEXT or "
              "SASL_SSL (default: each of those four names maps to itself; other names, when the map is unset, to "
              "PLAINTEXT)"),
    ConfigKey("security.inter.broker.protocol", "string", None, "the protocol of the listener other brokers and the "
              "controller connect to (Kafka's default PLAINTEXT; unset: the first broker listener)",
              choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    ConfigKey("inter.broker.listener.name", "string", None, "the listener other brokers and the controller connect to"),
    ConfigKey("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", "the SASL mechanism of inter-broker links"),
    ConfigKey("sasl.mechanism.controller.protocol", "string", "GSSAPI", "the SASL mechanism brokers use towards the "
              "controller"),
    ConfigKey("sasl.enabled.mechanisms", "list", ["GSSAPI"], "SASL mechanisms a SASL listener accepts: PLAIN, "
              "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (GSSAPI is not implemented)"),
    ConfigKey("sasl.jaas.config", "string", None, "JAAS login module configuration (per listener and mechanism: "
              "listener.name.<l>.<mechanism>.sasl.jaas.config)"),
    ConfigKey("connections.max.reauth.ms", "long", 0, "longest session of a SASL connection before it must "
              "re-authenticate (KIP-368); 0: no limit", low=0),
    ConfigKey("connection.failed.authentication.delay.ms", "int", 100, "how long a connection that failed to "
              "authenticate waits before its error is sent and it is closed", low=0),
    ConfigKey("sasl.server.max.receive.size", "int", 524288, "largest frame accepted before authentication", low=1),
    ConfigKey("principal.builder.class", "string", None, "Kafka's DefaultKafkaPrincipalBuilder (the only builder)"),
    ConfigKey("ssl.principal.mapping.rules", "string", "DEFAULT", "RULE:pattern/replacement/[LU] rules mapping a "
              "client certificate's distinguished name to a principal name"),
    ConfigKey("ssl.client.auth", "string", "none", "client certificates: none, requested or required",
              choices=("none", "requested", "required")),
    ConfigKey("ssl.keystore.type", "string", None, "PEM or PKCS12 (Kafka's default JKS cannot be read)"),
    ConfigKey("ssl.keystore.location", "string", None, "the keystore file"),
    ConfigKey("ssl.keystore.password", "string", None, "the PKCS12 keystore's password"),
    ConfigKey("ssl.key.password", "string", None, "the private key's password (an encrypted PEM key)"),
    ConfigKey("ssl.keystore.certificate.chain", "string", None, "inline PEM certificate chain (ssl.keystore.type=PEM)"),
    ConfigKey("ssl.keystore.key", "string", None, "inline PEM private key (ssl.keystore.type=PEM)"),
    ConfigKey("ssl.truststore.type", "string", None, "PEM or PKCS12"),
    ConfigKey("ssl.truststore.location", "string", None, "the truststore file"),
    ConfigKey("ssl.truststore.password", "string", None, "the PKCS12 truststore's password"),
    ConfigKey("ssl.truststore.certificates", "string", None, "inline PEM CA certificates (ssl.truststore.type=PEM)"),
    ConfigKey("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], "TLS versions (TLSv1.2 and TLSv1.3 only)"),
    ConfigKey("ssl.protocol", "string", "TLSv1.3", "TLS, TLSv1.2 or TLSv1.3"),
    ConfigKey("ssl.cipher.suites", "list", None, "cipher suites (IANA or OpenSSL names); unset: OpenSSL's defaults"),
    ConfigKey("ssl.endpoint.identification.algorithm", "string", "https", "https: the certificate of a broker this "
              "one connects to must name its host; empty: not checked"),
    # OAUTHBEARER tokens of an OIDC issuer (KIP-768), broker side: the keys from a JWKS file
    ConfigKey("sasl.oauthbearer.jwks.endpoint.url", "string", None, "file:// URL of the issuer's JSON Web Key Set; "
              "set: OAUTHBEARER tokens must be signed by one of its keys (unset: Kafka's unsecured validator)"),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3600000, "how often the key set is read again",
              low=1),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "long", 100, "(an HTTPS endpoint's; unused)"),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "long", 10000, "(an HTTPS endpoint's; unused)"),
    ConfigKey("sasl.oauthbearer.expected.audience", "list", None, "a token's aud must hold one of these"),
    ConfigKey("sasl.oauthbearer.expected.issuer", "string", None, "a token's iss must be this"),
    ConfigKey("sasl.oauthbearer.sub.claim.name", "string", "sub", "the claim naming the principal"),
    ConfigKey("sasl.oauthbearer.scope.claim.name", "string", "scope", "the claim holding the scope"),
    ConfigKey("sasl.oauthbearer.clock.skew.seconds", "int", 30, "clock skew allowed when checking exp and iat", low=0),
)

KEYS: dict[str, ConfigKey] = {k.name: k for k in (
    *GROUP_COORDINATOR_KEYS,
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
    _k("connections.max.idle.ms", "long", 600000, "close connections idle (or stuck mid-frame) this long; -1: never"),
    _k("quota.window.num", "int", 11, "samples of each client quota's rate (Kafka's)", low=1),
    _k("quota.window.size.seconds", "int", 1, "length of each client quota sample (Kafka's)", low=1),
    _k("replication.quota.window.num", "int", 11, "samples of each replication throttle's rate (Kafka's)", low=1),
    _k("replication.quota.window.size.seconds", "int", 1, "length of each replication throttle sample (Kafka's)",
       low=1),
    _k("queued.max.request.bytes", "long", -1, "bytes of requests read but not processed, all connections; -1: no limit"),
    _k("log.segment.bytes", "int", 1073741824, low=14),
    _k("log.preallocate", "bool", False, "reserve an active segment's segment.bytes on disk at its first append "
       "(fallocate, the file keeping its real size); given back when the segment rolls"),
    _k("kbroker.log.writeback.bytes", "long", 1 << 20, "the active segment starts the writeback of every this "
       "many bytes appended (sync_file_range on a thread, no flush: durability unchanged), so appends on the "
       "event loop seldom wait while the kernel's flusher allocates a burst's blocks; 0: the kernel decides, as "
       "for Kafka", low=0),
    _k("kbroker.log.page.cache.retain.bytes", "long", -1, "with kbroker.log.writeback.bytes, the page cache of "
       "what lies more than this far behind a partition's end is dropped once written back (the page cache "
       "stays small; reads further behind go to the disk); -1: kept, as for Kafka", low=-1),
    _k("log.roll.ms", "long", None),
    _k("log.roll.hours", "int", 168, low=1),
    _k("log.roll.jitter.ms", "long", None),
    _k("log.roll.jitter.hours", "int", 0, low=0),
    _k("log.index.interval.bytes", "int", 4096, low=0),
    _k("log.index.size.max.bytes", "int", 10485760, low=4),
    _k("log.open.files.max", "int", 1500, "descriptors all partitions' segment files may hold (kbroker's own; "
       "the least recently used give theirs up): at most this, and at most the open files limit less an eighth",
       low=64),
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
    _k("compression.type", "string", "producer", "the codec batches are stored in by default (a topic's "
       "compression.type overrides it); 'producer' keeps each batch's own",
       choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
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
    # KIP-73 replication throttles (dynamic broker configs, bytes/s; Kafka's default: unbounded). The
    # replicas they apply to are the topics' leader/follower.replication.throttled.replicas.
    _k("leader.replication.throttled.rate", "long", LONG_MAX, "bytes/s this broker sends as leader to the "
       "followers of throttled replicas that are not in the ISR (a dynamic broker config)", low=0),
    _k("follower.replication.throttled.rate", "long", LONG_MAX, "bytes/s this broker fetches as follower for "
       "throttled replicas (a dynamic broker config)", low=0),
    _k("max.incremental.fetch.session.cache.slots", "int", 1000, "KIP-227: the incremental fetch sessions a broker "
       "keeps (followers' and consumers')", low=0),
    _k("producer.id.expiration.ms", "int", 86400000, low=1),
    _k("producer.id.expiration.check.interval.ms", "int", 600000, low=1),
    _k("transactional.id.expiration.ms", "int", 604800000, low=1),
    _k("transaction.partition.verification.enable", "bool", True, "KIP-890: a partition leader asks the "
       "transaction coordinator whether a transactional produce's partition is in the producer's transaction "
       "before writing it (INVALID_TXN_STATE if not)"),
    _k("request.timeout.ms", "int", 30000),
    _k("controlled.shutdown.enable", "bool", True),
    _k("kbroker.controller.mode", "string", "embedded", "deprecated alias of process.roles (embedded = "
       "broker,controller; external = broker)", choices=("embedded", "external")),
    # KRaft-style roles and the controller (Kafka's keys and defaults).
    _k("process.roles", "list", None, "broker, controller, or broker,controller (combined; the default)"),
    _k("controller.listener.names", "list", None, "the listeners (names in `listeners`) a controller serves on "
       "(combined: CONTROLLER, added on an ephemeral port if `listeners` has none)"),
    _k("controller.quorum.bootstrap.servers", "list", None, "host:port of the controllers, tried in order "
       "(combined: the process's own controller listener when unset)"),
    _k("broker.rack", "string", None, "this broker's rack, sent to the controller on registration"),
    _k("controller.socket.timeout.ms", "int", 30000, "the controller's request timeout towards brokers", low=1),
    _k("broker.heartbeat.interval.ms", "int", 2000, "how often a broker heartbeats to the controller", low=1),
    _k("broker.session.timeout.ms", "int", 9000, "a broker without a heartbeat for this long is fenced", low=1),
    _k("auto.leader.rebalance.enable", "bool", True, "move leadership back to preferred replicas periodically"),
    _k("leader.imbalance.check.interval.seconds", "long", 300, "how often the controller checks leader balance", low=1),
    _k("leader.imbalance.per.broker.percentage", "int", 10, "the imbalance a broker may have before a rebalance",
       low=0),
    # The controller's partition autobalancer (controller/partition_autobalancer.py; Redpanda's names).
    _k("partition.autobalancing.mode", "string", "node_add", "off; node_add: replicas move onto a broker that "
       "joins and off one unregistered, until counts are within one; continuous: also even out at any time, off a "
       "broker fenced past the availability timeout and off a log dir above the disk usage limit",
       choices=("off", "node_add", "continuous")),
    _k("partition.autobalancing.node.availability.timeout.sec", "long", 900, "continuous: a broker fenced this long "
       "has its replicas moved to the others", low=1),
    _k("partition.autobalancing.max.disk.usage.percent", "int", 80, "continuous: replicas move off a broker whose "
       "log dir file system is fuller than this", low=1),
    _k("partition.autobalancing.concurrent.moves", "int", 50, "at most this many partitions moving at once "
       "(every reassignment in progress counts)", low=1),
    _k("partition.autobalancing.tick.interval.ms", "long", 30000, "how often the autobalancer decides", low=1),
    _k("partition.autobalancing.replication.throttled.rate", "long", 104857600, "bytes/s: the replication "
       "throttle (KIP-73) its moves run under, set on the brokers they involve unless a dynamic rate is set there "
       "(0 or less: unthrottled)"),
    _k("metadata.log.dir", "string", None, "the controller's metadata log directory (default: the first log dir)"),
    _k("metadata.log.segment.bytes", "int", 1073741824, "segment size of the metadata log", low=14),
    _k("metadata.log.segment.ms", "long", 604800000, "age at which the metadata log rolls", low=1),
    _k("metadata.log.max.record.bytes.between.snapshots", "long", 20971520,
       "metadata log bytes after which the controller writes a snapshot", low=1),
    _k("metadata.log.max.snapshot.interval.ms", "long", 3600000,
       "time after which the controller writes a snapshot of a changed state (0: never by time)", low=0),
    _k("controller.metadata.store", "string", "local", "where a controller keeps the metadata: local (its "
       "metadata log, one controller) or zookeeper (standby controllers elected through zookeeper.connect)",
       choices=("local", "zookeeper")),
    _k("zookeeper.connect", "string", None, "host:port[,host:port...][/chroot] of the ZooKeeper ensemble "
       "(controller.metadata.store=zookeeper)"),
    _k("zookeeper.session.timeout.ms", "int", 18000, "ZooKeeper session timeout: an active controller whose session "
       "ends is replaced by a standby", low=1),
    _k("zookeeper.connection.timeout.ms", "int", None, "how long a controller waits to connect to ZooKeeper "
       "(default: zookeeper.session.timeout.ms)", low=1),
    _k("zookeeper.set.acl", "bool", False, "the znodes the controllers create are readable and writable by their "
       "SASL identity only (zookeeper.sasl.jaas.config)"),
    _k("zookeeper.sasl.jaas.config", "string", None, "kbroker's: the JAAS Client section Kafka reads from its JVM's "
       "login file, inline: org.apache.zookeeper.server.auth.DigestLoginModule required username=... password=...; "
       "(SASL DIGEST-MD5 to ZooKeeper)"),
    # The log cleaner (storage/log_cleaner.py): compaction of cleanup.policy=compact topics.
    _k("log.cleanup.policy", "list", ["delete"], "default cleanup.policy of topics: delete, compact or both"),
    _k("log.cleaner.enable", "bool", True, "run the log cleaner (compaction of cleanup.policy=compact topics)"),
    _k("log.cleaner.backoff.ms", "long", 15000, "how long the cleaner waits when no log needs cleaning", low=0),
    _k("log.cleaner.threads", "int", 1, "threads compacting logs off the event loop (at most one pass per log)",
       low=1),
    _k("log.cleaner.delete.retention.ms", "long", 86400000, "default delete.retention.ms: how long tombstones "
       "stay after their segment was cleaned", low=0),
    _k("log.cleaner.min.cleanable.ratio", "double", 0.5, "default min.cleanable.dirty.ratio"),
    _k("log.cleaner.min.compaction.lag.ms", "long", 0, "default min.compaction.lag.ms", low=0),
    _k("kbroker.shutdown.timeout.ms", "long", 10000, "how long graceful shutdown waits for in-flight requests"),
    # Authorization (Kafka's keys and defaults; broker/security/authorizer.py).
    _k("authorizer.class.name", "string", "", "the authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer "
       "(ACLs kept by the controller); empty: none, every request is allowed"),
    _k("super.users", "string", None, "principals allowed everything, separated by semicolons (User:admin;User:broker)"),
    _k("allow.everyone.if.no.acl.found", "bool", False, "allow a request on a resource no ACL names"),
    # Metrics (kbroker's keys: Kafka exposes JMX instead).
    _k("metrics.enabled", "bool", True, "collect metrics (false: no request/topic counters and no endpoint)"),
    _k("metrics.listener", "string", None, "where /metrics and /health are served, http://host:port (port 0: a free "
       "one, logged); unset: not served"),
    _k("metrics.partition.series.enabled", "bool", True, "per-partition series (HW, LEO, lag, size); false drops "
       "them to bound cardinality"),
    *SECURITY_KEYS,
)}

# Kafka keys that mean nothing here; accepted without a warning.
IGNORED_KAFKA_KEYS = frozenset({
    "num.network.threads", "num.io.threads", "num.recovery.threads.per.data.dir", "num.replica.fetchers",
    "background.threads",
    "controller.quorum.voters",
    "socket.listen.backlog.size", "max.connections",
    "confluent.support.metrics.enable",
    # Java's TLS implementation choices: nothing to choose here (OpenSSL through Python's ssl).
    "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
})

_SECURITY_KEY_NAMES = {k.name: k for k in SECURITY_KEYS}

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
        # The dynamic broker configs in force (broker/dynamic_config.py keeps them): the
        # cluster-wide default's and this broker's own, raw.
        self.dynamic_default: dict[str, str] = {}
        self.dynamic_broker: dict[str, str] = {}
        self._implicit_controller_listener: Endpoint | None = None
        self.values: dict[str, Any] = {}
        for name, key in KEYS.items():
            self.values[name] = key.parse(props[name]) if name in props else key.default
        for name in props:
            if name not in KEYS and name not in IGNORED_KAFKA_KEYS and not is_security_key(name, _SECURITY_KEY_NAMES):
                log.warning("unknown configuration key %r ignored", name)
        if self.values["node.id"] is not None and "broker.id" not in props:
            self.values["broker.id"] = self.values["node.id"]
        self._resolve_roles(props)
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

    def _resolve_roles(self, props: Mapping[str, Any]) -> None:
        """process.roles, with kbroker.controller.mode as its deprecated alias: embedded is
        broker,controller, external is broker. The two keys are kept consistent, so code
        reading either sees the same answer."""
        roles = self.values["process.roles"]
        if "kbroker.controller.mode" in props:
            mode = self.values["kbroker.controller.mode"]
            implied = ["broker", "controller"] if mode == "embedded" else ["broker"]
            log.warning("kbroker.controller.mode is deprecated; use process.roles=%s", ",".join(implied))
            if roles is None:
                roles = implied
            elif sorted(roles) != implied:
                raise ConfigError(f"process.roles={','.join(roles)} contradicts kbroker.controller.mode={mode}")
        if roles is None:
            roles = ["broker", "controller"] if self.values["kbroker.controller.mode"] == "embedded" else ["broker"]
        bad = [r for r in roles if r not in ("broker", "controller")]
        if bad or not roles or len(set(roles)) != len(roles):
            raise ConfigError(f"process.roles: {','.join(roles) or '(empty)'} is not broker, controller or "
                              f"broker,controller")
        self.values["process.roles"] = sorted(roles)
        if "broker" in roles:
            self.values["kbroker.controller.mode"] = "embedded" if "controller" in roles else "external"
        if "controller" in roles and "broker" in roles:
            self._default_controller_listener()

    def _default_controller_listener(self) -> None:
        """A combined process needs a controller listener for its broker (and any other) to
        register on: without controller.listener.names it is CONTROLLER, and when `listeners`
        names none it listens on an ephemeral port of the first listener's host, so a
        server.properties written for the old embedded mode keeps working."""
        names = self.values["controller.listener.names"]
        if not names:
            names = self.values["controller.listener.names"] = ["CONTROLLER"]
        listeners = list(self.values["listeners"] or [])
        declared = {spec.split("://", 1)[0].strip().upper() for spec in listeners}
        if not any(n.upper() in declared for n in names):
            first = Endpoint.parse(listeners[0], "listeners") if listeners else Endpoint("PLAINTEXT", "", 9092)
            self._implicit_controller_listener = Endpoint(names[0].upper(), first.host, 0)

    def _check(self) -> None:
        if self.values["message.max.bytes"] > self.values["socket.request.max.bytes"]:
            log.warning("message.max.bytes (%d) is larger than socket.request.max.bytes (%d)",
                        self.values["message.max.bytes"], self.values["socket.request.max.bytes"])
        authorizer = self.values["authorizer.class.name"]
        if authorizer and authorizer not in AUTHORIZER_CLASS_NAMES:
            raise ConfigError(f"authorizer.class.name: {authorizer} is not an authorizer kbroker has "
                              f"(use {STANDARD_AUTHORIZER}, or leave it empty for none)")
        try:
            parse_super_users(self.values["super.users"])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        # Parse the endpoints now, so a bad listener fails at startup naming its key.
        _ = (self.listeners, self.advertised_listeners, self.controller_quorum_bootstrap_servers)
        # Security: every listener's protocol and settings resolved, and anything kbroker
        # recognises but does not implement refused, naming the key (broker/security/listeners.py).
        self.security = resolve_security(self, KEYS, _SECURITY_KEY_NAMES, ConfigError)

    # -- derived values, resolved as Kafka resolves them ---------------------------------
    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]

    @property
    def node_id(self) -> int:
        """KRaft's node.id, which broker.id aliases."""
        return self.values["broker.id"]

    @property
    def process_roles(self) -> list[str]:
        """The roles of this process, sorted: ["broker"], ["controller"] or ["broker", "controller"]."""
        return list(self.values["process.roles"])

    @property
    def metadata_log_dir(self) -> Path:
        """Where a controller keeps its metadata log: metadata.log.dir, else the first log dir."""
        d = self.values["metadata.log.dir"]
        return Path(d) if d else self.log_dirs[0]

    @property
    def controller_listeners(self) -> list["Endpoint"]:
        """The entries of ``listeners`` named by controller.listener.names, in that order (a
        combined process without one: CONTROLLER on an ephemeral port)."""
        by_name = {ep.listener_name: ep for ep in self.listeners}
        named = [by_name[n.upper()] for n in (self.values["controller.listener.names"] or []) if n.upper() in by_name]
        if not named and self._implicit_controller_listener is not None:
            return [self._implicit_controller_listener]
        return named

    @property
    def broker_listeners(self) -> list["Endpoint"]:
        """The listeners a broker serves on: ``listeners`` without the controller's."""
        names = {n.upper() for n in (self.values["controller.listener.names"] or [])}
        return [ep for ep in self.listeners if ep.listener_name not in names]

    @property
    def controller_quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        """controller.quorum.bootstrap.servers as (host, port) pairs, in order."""
        out = []
        for spec in self.values["controller.quorum.bootstrap.servers"] or []:
            host, sep, port = spec.strip().rpartition(":")
            if not sep or not port.isdigit() or int(port) > 65535:
                raise ConfigError(f"controller.quorum.bootstrap.servers: {spec!r} is not host:port")
            out.append((host.strip("[]") or "127.0.0.1", int(port)))
        return out

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
        """Every topic-level config a topic may set (TOPIC_CONFIG_SYNONYMS), under its topic-level
        name, with the value a topic that does not set it gets: from this broker's config, or
        Kafka's default for a config kbroker accepts without acting on it."""
        v = self.values
        acted_on = {
            "segment.bytes": str(v["log.segment.bytes"]),
            "preallocate": "true" if v["log.preallocate"] else "false",
            "segment.ms": str(self.roll_ms),
            "segment.jitter.ms": str(self.roll_jitter_ms),
            "segment.index.bytes": str(v["log.index.size.max.bytes"]),
            "index.interval.bytes": str(v["log.index.interval.bytes"]),
            "retention.bytes": str(v["log.retention.bytes"]),
            "retention.ms": str(self.retention_ms),
            "max.message.bytes": str(v["message.max.bytes"]),
            "message.timestamp.type": v["log.message.timestamp.type"],
            "compression.type": v["compression.type"],
            "flush.messages": str(v["log.flush.interval.messages"]),
            "flush.ms": str(self.flush_interval_ms),
            "min.insync.replicas": str(v["min.insync.replicas"]),
            "file.delete.delay.ms": str(v["log.segment.delete.delay.ms"]),
            "cleanup.policy": ",".join(v["log.cleanup.policy"]),
            "delete.retention.ms": str(v["log.cleaner.delete.retention.ms"]),
            "min.cleanable.dirty.ratio": str(v["log.cleaner.min.cleanable.ratio"]),
            "min.compaction.lag.ms": str(v["log.cleaner.min.compaction.lag.ms"]),
            "unclean.leader.election.enable": str(v["unclean.leader.election.enable"]).lower(),
        }
        out = {}
        for key, synonyms in TOPIC_CONFIG_SYNONYMS.items():
            if key in acted_on:
                out[key] = acted_on[key]
            else:  # accepted, not acted on: the broker key's value as given, else Kafka's default
                given = [str(source[name]).strip() for source in (self.dynamic_broker, self.dynamic_default,
                                                                  self.originals)
                         for name in synonyms if name in source]
                out[key] = given[0] if given else PASSIVE_TOPIC_DEFAULTS[key]
        return out

    def log_config_defaults(self) -> dict[str, str]:
        """What storage.LogConfig is built from: the topic defaults and the broker-level
        settings the log obeys that are no topic configs (producer.id.expiration.ms,
        kbroker.log.writeback.bytes, kbroker.log.page.cache.retain.bytes)."""
        v = self.values
        return {**self.topic_defaults(), "producer.id.expiration.ms": str(v["producer.id.expiration.ms"]),
                "writeback.bytes": str(v["kbroker.log.writeback.bytes"]),
                "cache.retain.bytes": str(v["kbroker.log.page.cache.retain.bytes"])}

    def topic_default_sources(self) -> dict[str, int]:
        """DescribeConfigs' config_source of each topic config a topic does not set, as Kafka's
        ConfigHelper.createTopicConfigEntry finds it: its broker synonyms (TOPIC_CONFIG_SYNONYMS)
        looked up in the dynamic broker configs (this broker's, then the cluster-wide default's),
        the static ones (what server.properties, the environment or --override set) and the
        defaults, in that order;
        the list is kept from the first entry named after the config's own broker key (so a
        topic whose retention comes from a static log.retention.hours reads DEFAULT_CONFIG, as
        in Kafka); the first entry's source, or DEFAULT_CONFIG when none is left."""
        out = {}
        for key, synonyms in TOPIC_CONFIG_SYNONYMS.items():
            found = [(name, CONFIG_SOURCE_DYNAMIC_BROKER) for name in synonyms if name in self.dynamic_broker]
            found += [(name, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER) for name in synonyms if name in self.dynamic_default]
            found += [(name, CONFIG_SOURCE_STATIC_BROKER) for name in synonyms if name in self.originals]
            found += [(name, CONFIG_SOURCE_DEFAULT) for name in synonyms if _broker_default(name) is not None]
            while found and found[0][0] != synonyms[0]:
                found.pop(0)
            out[key] = found[0][1] if found else CONFIG_SOURCE_DEFAULT
        return out


def _broker_default(name: str) -> Any:
    key = KEYS.get(name)
    return key.default if key is not None else PASSIVE_BROKER_DEFAULTS.get(name)


# DescribeConfigs config_source values (Kafka's DescribeConfigsResponse.ConfigSource).
CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_DYNAMIC_BROKER = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER = 3
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5

# Every topic-level config kbroker accepts (CreateTopics, AlterConfigs, IncrementalAlterConfigs)
# and DescribeConfigs lists for a topic: Kafka's LogConfig names, each with its broker-level
# synonyms, its own broker key first (Kafka's ServerTopicConfigSynonyms; DynamicBrokerConfig's
# synonym lists for the time-unit families). No broker-only key (producer.id.expiration.ms) is here.
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {
    "cleanup.policy": ("log.cleanup.policy",),
    "compression.type": ("compression.type",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "follower.replication.throttled.replicas": (),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "leader.replication.throttled.replicas": (),
    "local.retention.bytes": ("log.local.retention.bytes",),
    "local.retention.ms": ("log.local.retention.ms",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "max.message.bytes": ("message.max.bytes",),
    "message.downconversion.enable": ("log.message.downconversion.enable",),
    "message.format.version": ("log.message.format.version",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "min.insync.replicas": ("min.insync.replicas",),
    "preallocate": ("log.preallocate",),
    "remote.storage.enable": (),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.bytes": ("log.segment.bytes",),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
}
# Kafka's (3.x) defaults of the broker keys behind the topic configs kbroker accepts without
# acting on them (none of these keys is in KEYS), and of the topic configs that have no broker key.
PASSIVE_BROKER_DEFAULTS: dict[str, str] = {
    "log.cleaner.max.compaction.lag.ms": str(LONG_MAX),
    "log.local.retention.bytes": "-2",
    "log.local.retention.ms": "-2",
    "log.message.downconversion.enable": "true",
    "log.message.format.version": "3.0-IV1",
    "log.message.timestamp.after.max.ms": str(LONG_MAX),
    "log.message.timestamp.before.max.ms": str(LONG_MAX),
    "log.message.timestamp.difference.max.ms": str(LONG_MAX),
}
PASSIVE_TOPIC_DEFAULTS: dict[str, str] = {
    **{topic: PASSIVE_BROKER_DEFAULTS[synonyms[0]] for topic, synonyms in TOPIC_CONFIG_SYNONYMS.items()
       if synonyms and synonyms[0] in PASSIVE_BROKER_DEFAULTS},
    "follower.replication.throttled.replicas": "",
    "leader.replication.throttled.replicas": "",
    "remote.storage.enable": "false",
}


# -- dynamic broker configs (Kafka's DynamicBrokerConfig, KIP-226) -----------------------------
#
# Set with IncrementalAlterConfigs / AlterConfigs on a BROKER resource: "N" (broker N) or ""
# (the cluster-wide default), kept by the controller as ConfigRecords (resource type 4) and sent
# to every broker with the security records. Precedence: per-broker dynamic, cluster-wide
# dynamic, static (server.properties, environment, --override), Kafka's default.

# Kafka's DynamicLogConfig.ReconfigurableConfigs: the broker keys behind the topic configs.
DYNAMIC_LOG_KEYS = frozenset(name for synonyms in TOPIC_CONFIG_SYNONYMS.values() for name in synonyms) - {
    "log.message.format.version"}
# Kafka's dynamic broker configs that kbroker applies at once, without a restart.
DYNAMIC_APPLIED_KEYS = frozenset({k for k in DYNAMIC_LOG_KEYS if k in KEYS} | {
    "log.cleaner.threads", "log.cleaner.backoff.ms",  # LogCleaner.ReconfigurableConfigs
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",  # KIP-73
    "producer.id.expiration.ms",  # DynamicProducerStateManagerConfig
})
# Kafka's dynamic broker configs kbroker accepts and keeps without acting on them (thread pools,
# connection limits, cleaner buffers: nothing here uses them; the passive log keys).
DYNAMIC_PASSIVE_KEYS = frozenset((DYNAMIC_LOG_KEYS - DYNAMIC_APPLIED_KEYS) | {
    "num.io.threads", "num.network.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "background.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second", "max.connections",
    "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connection.creation.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second", "metric.reporters"})
DYNAMIC_BROKER_KEYS = DYNAMIC_APPLIED_KEYS | DYNAMIC_PASSIVE_KEYS
# Kafka's DynamicSecurityConfigs (SslConfigs.RECONFIGURABLE_CONFIGS): per listener only.
DYNAMIC_SECURITY_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.protocol", "ssl.provider",
    "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.endpoint.identification.algorithm", "ssl.client.auth",
    "ssl.engine.factory.class"})
_LISTENER_PREFIXED = re.compile(r"^listener\.name\.[^.]*\.(.*)$")


def _scala_set(names: Iterable[str]) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


def validate_dynamic_broker_configs(configs: Mapping[str, str], per_broker: bool) -> str | None:
    """Kafka's DynamicBrokerConfig.validateConfigs of the configs a broker resource would have:
    the reason they are refused (Kafka answers INVALID_REQUEST, KAFKA-13609), or None.

    * a key Kafka (or kbroker) has but only reads at start: "Cannot update these configs
      dynamically" (listener.name.* keys too: kbroker reloads a listener's key stores live
      only when they come alone, broker/security/reconfigure.py, and does not keep them);
    * an SSL key without a listener prefix: per listener only;
    * a per-broker key at the cluster-wide level;
    * a value the key's type or range refuses.

    A key Kafka does not know is a custom config, accepted and kept (Kafka's Broker.validate
    allows custom props); nothing here reads it."""
    static = [k for k in configs if k not in DYNAMIC_BROKER_KEYS and k not in DYNAMIC_SECURITY_KEYS and (
        k in KEYS or k in IGNORED_KAFKA_KEYS or _LISTENER_PREFIXED.match(k))]
    if static:
        return f"Cannot update these configs dynamically: {_scala_set(static)}"
    security = [k for k in configs if k in DYNAMIC_SECURITY_KEYS]
    if security:
        return ("These security configs can be dynamically updated only per-listener using the listener prefix: "
                f"{_scala_set(security)}")
    for name, value in configs.items():
        key = KEYS.get(name)
        if key is None:
            continue
        try:
            key.parse(value)
        except ConfigError as exc:
            return f"Invalid value {value} for configuration {name}: {exc}"
    return None


def topic_config_entries(overrides: Mapping[str, str], defaults: Mapping[str, str],
                         default_sources: Mapping[str, int] | None = None) -> list[tuple[str, str, int]]:
    """DescribeConfigs of a topic, as (name, value, config_source): every topic config
    (``defaults``: KafkaConfig.topic_defaults()), the topic's own value where it sets one
    (DYNAMIC_TOPIC_CONFIG), else the default with its source (``default_sources``:
    KafkaConfig.topic_default_sources(); DEFAULT_CONFIG where it names none). Every key can be
    sent back unchanged by AlterConfigs; Kafka's read_only is false and is_sensitive false for all."""
    sources = default_sources or {}
    entries = [(k, overrides[k], CONFIG_SOURCE_DYNAMIC_TOPIC) if k in overrides
               else (k, v, sources.get(k, CONFIG_SOURCE_DEFAULT)) for k, v in sorted(defaults.items())]
    entries += [(k, v, CONFIG_SOURCE_DYNAMIC_TOPIC) for k, v in sorted(overrides.items()) if k not in defaults]
    return entries


# -- topics: the rules both the broker and the controller apply --------------------------------

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249

# List-typed topic configs (IncrementalAlterConfigs APPEND/SUBTRACT apply only to these).
LIST_TOPIC_CONFIGS = frozenset({"cleanup.policy", "follower.replication.throttled.replicas",
                                "leader.replication.throttled.replicas"})


def validate_topic_name(name: str) -> str | None:
    """Kafka's Topic.validate: the reason a name is illegal, or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name is longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL_TOPIC.match(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    if name == "__cluster_metadata":
        return "__cluster_metadata is the controller's metadata log, not a topic"
    return None


_THROTTLED_REPLICA = re.compile(r"^([0-9]+:[0-9]+)?$")


def validate_topic_configs(configs: dict[str, str], defaults: dict[str, str]) -> str | None:
    """The reason a topic's config overrides are invalid (Kafka's INVALID_CONFIG), or None:
    names that are no topic configs (TOPIC_CONFIG_SYNONYMS), or values storage.LogConfig rejects."""
    from storage import LogConfig

    for key in configs:
        if key not in TOPIC_CONFIG_SYNONYMS:
            return f"Unknown topic config name: {key}"
    if configs.get("unclean.leader.election.enable", "false").strip().lower() not in ("true", "false"):
        return "unclean.leader.election.enable: expected true or false"
    for key in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
        # Kafka's ThrottledReplicaListValidator
        value = configs.get(key)
        if value is not None and value.strip() != "*" and not all(
                _THROTTLED_REPLICA.match(item.strip()) for item in value.split(",")):
            return (f"Invalid value {value} for configuration {key}: {key} must be the literal '*' or a list of "
                    "replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
    try:
        LogConfig.from_topic_properties({**defaults, **configs})
    except ValueError as exc:
        return str(exc)
    return None


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
