"""Replication throttles (KIP-73): Kafka's ReplicationQuotaManager, one for the leader side and
one for the follower side of a broker.

* The rate: ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``
  (dynamic broker configs, bytes/s; unset: unbounded), measured as Kafka's Rate over
  ``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds`` (the
  SampledRate of broker/client_quota_manager.py, the client quotas' own windowed rate).
* The throttled replicas: the topic configs ``leader.replication.throttled.replicas`` /
  ``follower.replication.throttled.replicas``, "*" (every partition of the topic) or
  "partition:broker,..." of which a broker keeps the partitions listed with its own id (Kafka's
  TopicConfigHandler.parseThrottledPartitions).

The rules (Kafka's ReplicaManager.shouldLeaderThrottle and ReplicaFetcherThread):

* leader: a follower's fetch of a throttled partition gets no records while the leader quota
  is exceeded, unless that follower is in the ISR; the bytes of throttled partitions sent to
  followers (in sync or not) are recorded; a delayed fetch does not count a throttled
  partition's new data towards completing early;
* follower: a throttled partition is left out of the fetch while the follower quota is
  exceeded, unless this replica is caught up (its lag at the last fetch was 0); the bytes
  fetched for throttled partitions are recorded.

Pure bookkeeping on the injected clock (time in ms from the caller).
"""

from __future__ import annotations

from typing import Mapping

from .client_quota_manager import SampledRate

UNBOUNDED = 2**63 - 1  # Kafka's ReplicationQuotaManagerConfig.QuotaBytesPerSecondDefault (Long.MaxValue)
ALL_REPLICAS = None  # "*": every partition of the topic


def parse_throttled_replicas(value: str | None, broker_id: int) -> frozenset[int] | None | bool:
    """The partitions of a topic this broker throttles, from a throttled-replicas topic config:
    ALL_REPLICAS (None) for "*", a frozenset of partition ids (possibly empty: False when the
    value is unset or empty)."""
    text = (value or "").strip()
    if not text:
        return False
    if text == "*":
        return ALL_REPLICAS
    partitions = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        p, _, b = item.partition(":")
        try:
            if int(b) == broker_id:
                partitions.add(int(p))
        except ValueError:
            continue  # the controller validates the topic config; a bad entry throttles nothing
    return frozenset(partitions)


class ReplicationQuotaManager:
    """One side's quota (``kind``: "leader" or "follower")."""

    def __init__(self, kind: str, time, *, samples: int = 11, window_seconds: int = 1,
                 bound: float = UNBOUNDED) -> None:
        self.kind = kind
        self.time = time
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.rate = SampledRate(samples, self.window_ms)
        self.bound = float(bound)
        self.throttled: dict[str, frozenset[int] | None] = {}  # topic -> partitions (None: all)
        self.throttled_fetches = 0  # partitions held back (left out, or answered without records)

    def now_ms(self) -> int:
        return int(self.time.monotonic_ms())

    # -- configuration -----------------------------------------------------------------------
    def update_quota(self, bound: float) -> None:
        self.bound = float(bound) if bound > 0 else 0.0

    def update_topic(self, topic: str, value: str | None, broker_id: int) -> None:
        """The topic's throttled-replicas config of this side changed (or the topic went: None)."""
        parsed = parse_throttled_replicas(value, broker_id)
        if parsed is False:
            self.throttled.pop(topic, None)
        else:
            self.throttled[topic] = parsed  # type: ignore[assignment]

    def update_topics(self, configs: Mapping[str, Mapping[str, str]], key: str, broker_id: int) -> None:
        """Every topic's throttled replicas at once, from {topic: its config overrides}."""
        self.throttled.clear()
        for topic, overrides in configs.items():
            self.update_topic(topic, overrides.get(key), broker_id)

    # -- the hot path ------------------------------------------------------------------------
    def is_throttled(self, topic: str, partition: int) -> bool:
        throttled = self.throttled
        if not throttled or topic not in throttled:
            return False
        partitions = throttled[topic]
        return partitions is None or partition in partitions

    def is_quota_exceeded(self, now_ms: int | None = None) -> bool:
        """Kafka's Sensor.checkQuotas against the bound: the measured rate above it."""
        if self.bound >= UNBOUNDED:
            return False
        now = self.now_ms() if now_ms is None else now_ms
        return self.rate.measure(now) > self.bound

    def record(self, size: int, now_ms: int | None = None) -> None:
        if size > 0:
            self.rate.record(size, self.now_ms() if now_ms is None else now_ms)

    def throttle_time_ms(self, now_ms: int | None = None) -> int:
        """How long until the rate is back within the bound (0 when it is): the total of the
        window over the bound, less the window (Kafka's ClientQuotaManager.throttleTime)."""
        if self.bound >= UNBOUNDED:
            return 0
        now = self.now_ms() if now_ms is None else now_ms
        rate = self.rate
        size = rate.window_size_ms(now)
        if self.bound <= 0:
            return self.window_ms
        total = rate._total
        return max(0, round(total * 1000.0 / self.bound - size))

    def byte_rate(self, now_ms: int | None = None) -> float:
        return self.rate.measure(self.now_ms() if now_ms is None else now_ms)


class ReplicationQuotas:
    """A broker's two replication quotas, kept in step with its dynamic broker configs and its
    topics' throttled-replicas configs."""

    LEADER_KEY, FOLLOWER_KEY = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"

    def __init__(self, broker_id: int, time, *, samples: int = 11, window_seconds: int = 1,
                 leader_rate: float = UNBOUNDED, follower_rate: float = UNBOUNDED) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuotaManager("leader", time, samples=samples, window_seconds=window_seconds,
                                              bound=leader_rate)
        self.follower = ReplicationQuotaManager("follower", time, samples=samples, window_seconds=window_seconds,
                                                bound=follower_rate)

    def configs_changed(self, config) -> None:
        """The dynamic broker configs changed: take the rates (``config``: the KafkaConfig)."""
        self.leader.update_quota(config["leader.replication.throttled.rate"])
        self.follower.update_quota(config["follower.replication.throttled.rate"])

    def topic_configs_changed(self, configs: Mapping[str, Mapping[str, str]], topics=None) -> None:
        """Topics' config overrides changed (``topics``: which; None: all of ``configs``)."""
        if topics is None:
            self.leader.update_topics(configs, self.LEADER_KEY, self.broker_id)
            self.follower.update_topics(configs, self.FOLLOWER_KEY, self.broker_id)
            return
        for topic in topics:
            overrides = configs.get(topic, {})
            self.leader.update_topic(topic, overrides.get(self.LEADER_KEY), self.broker_id)
            self.follower.update_topic(topic, overrides.get(self.FOLLOWER_KEY), self.broker_id)

    def collect(self):
        """Kafka's kafka.server:type=LeaderReplication|FollowerReplication,name=byte-rate, and
        kbroker's throttle figures."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for manager in (self.leader, self.follower):
            name = f"kafka_server_{manager.kind}replication"
            rate = GaugeMetricFamily(f"{name}_byte_rate", f"Bytes per second of throttled replicas "
                                     f"({manager.kind} side), over the replication quota window")
            rate.add_metric([], manager.byte_rate())
            yield rate
            bound = GaugeMetricFamily(f"{name}_throttled_rate", f"{manager.kind}.replication.throttled.rate "
                                      "(bytes/s; absent when unbounded)")
            if manager.bound < UNBOUNDED:
                bound.add_metric([], manager.bound)
            yield bound
            throttle = GaugeMetricFamily(f"{name}_throttle_time", "How long until the throttled replicas' rate "
                                         "is back within the quota (ms)")
            throttle.add_metric([], manager.throttle_time_ms())
            yield throttle
            held = CounterMetricFamily(f"{name}_throttled_fetches", "Partitions held back by the replication quota "
                                       f"({manager.kind} side)")
            held.add_metric([], manager.throttled_fetches)
            yield held
