"""The partition autobalancer: the controller moves replicas by itself (Redpanda's
``partition_autobalancing_mode``; Cruise Control's bounded concurrent moves).

``partition.autobalancing.mode``:

* ``off``: nothing moves unless an operator moves it;
* ``node_add`` (the default): when a broker registers for the first time, and when a broker is
  unregistered, replicas of the partitions that exist then move until the live brokers'
  replica counts are within one of each other (and the preferred leaders even out, by
  reordering); partitions created later are placed over every broker by the controller
  already, and brokers joining a cluster without partitions move nothing. Replicas on a
  broker that is no longer registered move to the live ones (their replication factor is
  restored);
* ``continuous``: as ``node_add``, evening out whenever the counts differ, and also
  - off a broker fenced for longer than ``partition.autobalancing.node.availability.timeout.sec``
    (900): its replicas go to the live brokers, so the replication factor is restored without
    anyone acting (when the broker comes back it is empty, and gets its share again);
  - off a broker whose log dir is fuller than ``partition.autobalancing.max.disk.usage.percent``
    (80): a share of its replicas (the fraction its usage is above the limit) moves to brokers
    below it, and a broker within ``DISK_HEADROOM_PERCENT`` of the limit takes no new replicas,
    so evening out does not bring them back.

Every move is a reassignment started through the path AlterPartitionReassignments takes
(ReplicationControlManager._alter_reassignment: the same validation, a PartitionChangeRecord in
the metadata log), so it survives a controller failover and shows in
ListPartitionReassignments. Its moves run under the replication throttles (KIP-73), set as
Cruise Control's executor sets them (ReplicationThrottleHelper), at
``partition.autobalancing.replication.throttled.rate`` bytes/s (Redpanda's
``raft_learner_recovery_rate`` default, 100 MiB/s; 0 or less: unthrottled): when a move starts,
its partition's current replicas join the topic's ``leader.replication.throttled.replicas`` and
its new ones ``follower.replication.throttled.replicas`` (a ``*`` list is left as it is), and
every broker the move involves gets ``leader/follower.replication.throttled.rate`` unless a
dynamic rate (its own or the cluster-wide one) is set already; once the move is over those
entries go, and a rate it set goes when no move of its involves the broker any more (unless
someone changed it meanwhile). What it set is this controller's memory; a controller taking
over adopts the entries of the partitions moving then and the rates equal to its own (as
Cruise Control recognises its throttles by value). At most
``partition.autobalancing.concurrent.moves`` partitions move at once (every reassignment in
progress counts, an operator's too). A partition whose ISR is below its min.insync.replicas,
or that is being moved already, is never moved; nor is one with a replica on a broker that is
down but may come back (fenced within the timeout): while such a broker is down, nothing is
evened out (only replicas of brokers gone for good move), as Redpanda waits for an unavailable
node before rebalancing.

The decisions read the replicated state (brokers, partitions, configs) and what this controller
observed itself, which is not replicated: since when each broker has been fenced (counted from
the controller's activation for one fenced then), the log dir usage brokers report in their
heartbeats, and whether a broker registered for the first time since (node_add). A controller
taking over starts a node_add balance if an unfenced broker holds no replica while others do,
a partition names a broker that is not registered, or a reassignment is in progress (perhaps a
balance the previous controller began). Time is the controller's injected clock;
a tick (``partition.autobalancing.tick.interval.ms``) is an event on its queue.

Log dir usage: kbroker's BrokerHeartbeat carries it in a tagged field (``log_dir_usage``, tag
10000: total and used bytes of the file system of each log dir, in log.dirs order, as Redpanda's health
report carries disk space); Kafka's controllers ignore unknown tagged fields.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from protocol.balance import plan_balance, replica_counts
from protocol.clock import Time
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType as T

from .cluster_control import ClusterControlManager
from .configuration_control import ConfigurationControlManager, broker_config_record, config_record
from .replication_control import PREFERRED_ELECTION, ReplicationControlManager

log = logging.getLogger("kbroker.controller.autobalancer")

MODES = ("off", "node_add", "continuous")
# A broker this close below the disk limit takes no new replicas (hysteresis: what moved off a
# full disk is not moved back by evening out).
DISK_HEADROOM_PERCENT = 10
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


@dataclass(frozen=True)
class AutobalancerConfig:
    mode: str = "node_add"
    node_availability_timeout_ms: int = 900_000
    max_disk_usage_percent: int = 80
    concurrent_moves: int = 50
    tick_interval_ms: int = 30_000
    replication_throttled_rate: int = 104_857_600  # bytes/s; <= 0: its moves are not throttled

    @classmethod
    def from_kafka_config(cls, config) -> "AutobalancerConfig":
        return cls(mode=config["partition.autobalancing.mode"],
                   node_availability_timeout_ms=config["partition.autobalancing.node.availability.timeout.sec"] * 1000,
                   max_disk_usage_percent=config["partition.autobalancing.max.disk.usage.percent"],
                   concurrent_moves=config["partition.autobalancing.concurrent.moves"],
                   tick_interval_ms=config["partition.autobalancing.tick.interval.ms"],
                   replication_throttled_rate=config["partition.autobalancing.replication.throttled.rate"])


@dataclass(frozen=True)
class LogDirUsage:
    total_bytes: int
    used_bytes: int

    @property
    def percent(self) -> float:
        return 100.0 * self.used_bytes / self.total_bytes if self.total_bytes > 0 else 0.0


Key = tuple[str, int]


class PartitionAutobalancer:
    def __init__(self, config: AutobalancerConfig, time: Time, cluster: ClusterControlManager,
                 replication: ReplicationControlManager, configs: ConfigurationControlManager) -> None:
        if config.mode not in MODES:
            raise ValueError(f"partition.autobalancing.mode: {config.mode!r} is not one of {', '.join(MODES)}")
        self.config = config
        self.time = time
        self.cluster = cluster
        self.replication = replication
        self.configs = configs
        self.active = False
        self.pending = False  # node_add: a balance was asked for (a broker added or removed)
        self.scope: set[Key] = set()  # node_add: the partitions that balance may move
        self.fenced_since: dict[int, float] = {}
        self.usage: dict[int, list[LogDirUsage]] = {}
        self.touched: set[Key] = set()  # moved or reordered by us: a preferred election once done
        # the throttles our moves run under: per partition moving, the (leader, follower)
        # entries "p:b" we added to its topic's throttled-replicas lists and the brokers it
        # involves; per broker, the rate keys we set
        self.throttled: dict[Key, tuple[frozenset[str], frozenset[str], frozenset[int]]] = {}
        self.rates_set: dict[int, set[str]] = {}
        self.moves_started = 0  # metrics
        self.last_reason = ""

    # -- observations (this controller's own, not replicated) -------------------------------

    def replayed(self, record: ApiMessageAndVersion, new_broker: bool = False) -> None:
        """A broker record was replayed (``new_broker``: a registration of an id not registered before)."""
        t = record.type
        now = self.time.monotonic_ms()
        if t == T.REGISTER_BROKER:
            if record.fenced:
                self.fenced_since.setdefault(record.broker_id, now)
            else:
                self.fenced_since.pop(record.broker_id, None)
            if new_broker and self.active:
                self._ask("broker %d joined" % record.broker_id)
        elif t == T.UNREGISTER_BROKER:
            self.fenced_since.pop(record.broker_id, None)
            self.usage.pop(record.broker_id, None)
            if self.active:
                self._ask("broker %d was unregistered" % record.broker_id)
        elif t in (T.FENCE_BROKER, T.UNFENCE_BROKER, T.BROKER_REGISTRATION_CHANGE):
            broker_id = record.id if t in (T.FENCE_BROKER, T.UNFENCE_BROKER) else record.broker_id
            reg = self.cluster.registration(broker_id)
            if reg is None or not reg.fenced:
                self.fenced_since.pop(broker_id, None)
            else:
                self.fenced_since.setdefault(broker_id, now)

    def _ask(self, why: str) -> None:
        """A balance of the partitions there now (not of those created later: the placement of
        new partitions already counts every broker, and a cluster starting up is left alone)."""
        existing = set(self._assignment())
        if not existing - self.scope:
            return
        log.info("%s: the autobalancer will even out the replicas of %d partition(s) (%s)", why, len(existing),
                 self.config.mode)
        self.scope |= existing
        self.pending = True

    def activate(self) -> None:
        """This controller took over: the clock of every fenced broker starts now, and a
        node_add balance is due if a live broker is empty or a replica names an unknown broker."""
        now = self.time.monotonic_ms()
        self.fenced_since = {b: now for b, reg in self.cluster.brokers.items() if reg.fenced}
        self.active = True
        counts = replica_counts(self._assignment(), self.cluster.active_broker_ids())
        empty_live = any(counts[b] == 0 for b in self.cluster.active_broker_ids()) and any(counts.values())
        unknown = any(not self.cluster.is_registered(b) for b in counts)
        in_progress = bool(self.replication.reassigning_partitions())  # perhaps a balance the last one began
        self.pending = self.config.mode != "off" and (empty_live or unknown or in_progress)
        self.scope = set(self._assignment()) if self.pending else set()
        self._adopt_throttles()

    def deactivate(self) -> None:
        self.active = False

    def report_usage(self, broker_id: int, dirs: Sequence[LogDirUsage]) -> None:
        if dirs:
            self.usage[broker_id] = list(dirs)

    def disk_percent(self, broker_id: int) -> float:
        dirs = self.usage.get(broker_id)
        return max((d.percent for d in dirs), default=0.0) if dirs else 0.0

    # -- decisions ---------------------------------------------------------------------------

    def _partition(self, topic: str, pid: int):
        info = self.replication.topic(topic)
        return None if info is None else info.parts.get(pid)

    def _assignment(self) -> dict[Key, list[int]]:
        return {(info.name, pid): list(part.replicas) for info, pid, part in self.replication.all_partitions()}

    def _min_isr(self, topic: str) -> int:
        value = self.configs.topic_configs(topic).get("min.insync.replicas",
                                                      self.configs.topic_defaults.get("min.insync.replicas", "1"))
        try:
            return int(value)
        except (TypeError, ValueError):
            return 1

    def decide(self) -> dict[Key, list[int]]:
        """The reassignments to start now: {(topic, partition): target replicas}."""
        if self.config.mode == "off" or not self.active:
            return {}
        continuous = self.config.mode == "continuous"
        now = self.time.monotonic_ms()
        moving = {(info.name, pid) for info, pid, part in self.replication.reassigning_partitions()}
        budget = self.config.concurrent_moves - len(moving)
        if budget <= 0:
            return {}
        live = self.cluster.active_broker_ids()
        if not live:
            return {}
        down = {b for b in self.cluster.brokers if b not in live}
        gone = {b for b in down if continuous
                and now - self.fenced_since.get(b, now) >= self.config.node_availability_timeout_ms}
        waiting = down - gone  # may come back: their partitions stay, nothing is evened out meanwhile
        limit = self.config.max_disk_usage_percent
        full = {b for b in live if continuous and self.disk_percent(b) > limit}
        closed = {b for b in live if continuous and self.disk_percent(b) > limit - DISK_HEADROOM_PERCENT}
        racks = {b: self.cluster.brokers[b].rack for b in live}
        assignment = self._assignment()
        parts = {(info.name, pid): part for info, pid, part in self.replication.all_partitions()}

        def movable(k: Key) -> bool:
            part = parts[k]
            return (k not in moving and len(part.isr) >= self._min_isr(k[0])
                    and not any(r in waiting for r in part.replicas))

        evacuate = {k for k, r in assignment.items() if any(b not in racks and b not in waiting for b in r)}
        plan: dict[Key, list[int]] = {}
        reason = ""
        if evacuate:
            # replicas on unregistered brokers (and, continuous, brokers gone past the timeout)
            plan = plan_balance(racks, assignment, movable=lambda k: k in evacuate and movable(k), even=False,
                                leaders=False, closed=closed)
            plan = {k: v for k, v in plan.items() if not any(b not in racks for b in v)}
            reason = "replicas of brokers gone"
        if not plan and full:
            plan = self._off_full_disks(racks, assignment, full, closed, movable)
            reason = "log dirs above partition.autobalancing.max.disk.usage.percent"
        even = continuous or self.pending
        if not plan and even and not waiting and not moving:
            scope = None if continuous else self.scope
            plan = plan_balance(racks, assignment, closed=closed,
                                movable=lambda k: movable(k) and (scope is None or k in scope))
            plan = {k: v for k, v in plan.items() if all(b in racks for b in v)}
            data = {k: v for k, v in plan.items() if set(v) != set(assignment[k])}
            plan = data or plan  # reorders (preferred leaders) only once no data is left to move
            reason = "replica counts" if data else "preferred leaders"
            if not plan and self.pending:
                log.info("the autobalancer finished: replica counts within one")
                self.pending = False
                self.scope = set()
        chosen = dict(sorted(plan.items())[:budget])
        if chosen:
            self.last_reason = reason
        return chosen

    def _off_full_disks(self, racks: dict[int, str | None], assignment: dict[Key, list[int]], full: set[int],
                        closed: set[int], movable) -> dict[Key, list[int]]:
        """A share of each full broker's replicas to brokers below the limit: the fraction of its
        usage above the limit (counts, not bytes: replicas are taken as of one size)."""
        chosen: set[Key] = set()
        for b in sorted(full):
            hosted = sorted(k for k, r in assignment.items() if b in r and movable(k))
            if not hosted:
                continue
            percent = self.disk_percent(b)
            share = (percent - self.config.max_disk_usage_percent + DISK_HEADROOM_PERCENT / 2) / percent
            chosen.update(hosted[:max(1, round(len(hosted) * share))])
        if not chosen:
            return {}
        plan = plan_balance(racks, assignment, exclude=full, movable=lambda k: k in chosen, even=False,
                            leaders=False, closed=closed)
        # the partitions chosen, each off its full broker(s) only if a broker below the limit took it
        return {k: v for k, v in plan.items() if k in chosen and not any(b in full for b in v)}

    # -- throttles (KIP-73), as Cruise Control's executor sets them ----------------------------

    @property
    def throttling(self) -> bool:
        return self.config.replication_throttled_rate > 0

    def _adopt_throttles(self) -> None:
        """A controller taking over: the throttled-replicas entries of the partitions moving now,
        and the per-broker rates equal to ours, are taken as ours (cleared when done)."""
        self.throttled, self.rates_set = {}, {}
        if not self.throttling or self.config.mode == "off":
            return
        rate = str(self.config.replication_throttled_rate)
        for info, pid, part in self.replication.reassigning_partitions():
            configs = self.configs.topic_configs(info.name)
            lead = frozenset(e for e in _entries(configs.get(LEADER_REPLICAS)) if e.split(":")[0] == str(pid))
            follow = frozenset(e for e in _entries(configs.get(FOLLOWER_REPLICAS)) if e.split(":")[0] == str(pid))
            if lead or follow:
                self.throttled[(info.name, pid)] = (lead, follow, frozenset(part.replicas))
        for name, configs in self.configs.broker_configs.items():
            keys = {k for k in RATE_KEYS if configs.get(k) == rate}
            if name and keys:
                self.rates_set[int(name)] = keys

    def _throttle_records(self, started: dict[Key, tuple[list[int], list[int]]]) -> list[ApiMessageAndVersion]:
        """ConfigRecords: the entries of the moves over go, those of the moves ``started``
        ({key: (replicas before, target)}) come; then each broker's rates follow the moves."""
        lists: dict[tuple[str, str], list[str]] = {}  # (topic, key) -> its entries, as this tick leaves them

        def entries(topic: str, key: str) -> list[str]:
            if (topic, key) not in lists:
                lists[(topic, key)] = _entries(self.configs.topic_configs(topic).get(key))
            return lists[(topic, key)]
        def wildcard(topic: str, key: str) -> bool:  # every partition throttled already: left as it is
            return (self.configs.topic_configs(topic).get(key) or "").strip() == "*"
        for k, (lead, follow, _brokers) in list(self.throttled.items()):
            part = self._partition(*k)
            if part is not None and part.is_reassigning:
                continue
            del self.throttled[k]
            if part is None:
                continue  # the topic is gone, and its configs with it
            for key, ours in ((LEADER_REPLICAS, lead), (FOLLOWER_REPLICAS, follow)):
                if not wildcard(k[0], key):
                    lists[(k[0], key)] = [e for e in entries(k[0], key) if e not in ours]
        for k, (before, target) in started.items():
            lead = frozenset(f"{k[1]}:{b}" for b in before)
            follow = frozenset(f"{k[1]}:{b}" for b in target if b not in before)
            for key, ours in ((LEADER_REPLICAS, lead), (FOLLOWER_REPLICAS, follow)):
                if not wildcard(k[0], key):
                    have = entries(k[0], key)
                    have.extend(e for e in sorted(ours) if e not in have)
            self.throttled[k] = (lead, follow, frozenset(before) | frozenset(target))
        records = []
        for (topic, key), now in sorted(lists.items()):
            value = ",".join(now) or None
            if value != (self.configs.topic_configs(topic).get(key) or None):
                records.append(config_record(topic, key, value))
        rate = str(self.config.replication_throttled_rate)
        involved = set().union(*(brokers for _l, _f, brokers in self.throttled.values()))
        defaults = self.configs.broker_configs.get("", {})
        for b in sorted(involved - set(self.rates_set)):
            own = self.configs.broker_configs.get(str(b), {})
            keys = {k for k in RATE_KEYS if k not in own and k not in defaults}
            if keys:
                self.rates_set[b] = keys
                records.extend(broker_config_record(str(b), k, rate) for k in sorted(keys))
        for b in sorted(set(self.rates_set) - involved):
            own = self.configs.broker_configs.get(str(b), {})
            records.extend(broker_config_record(str(b), k, None) for k in sorted(self.rates_set.pop(b))
                           if own.get(k) == rate)
        return records

    def tick(self) -> list[ApiMessageAndVersion]:
        """Decide and start the moves: records (PartitionChangeRecords) through the path
        AlterPartitionReassignments takes; and a preferred election for the partitions it moved
        or reordered whose move is over, so the leaderships follow."""
        records: list[ApiMessageAndVersion] = []
        if self.config.mode == "off" or not self.active:
            return records
        for topic, pid in sorted(self.touched):
            part = self._partition(topic, pid)
            if part is None:
                self.touched.discard((topic, pid))
            elif not part.is_reassigning:
                self.touched.discard((topic, pid))
                if part.leader != part.preferred_leader and part.preferred_leader in part.isr \
                        and self.cluster.is_active(part.preferred_leader):
                    self.replication._elect_one(topic, pid, PREFERRED_ELECTION, records)
        decided = self.decide()
        started = []
        moves: dict[Key, tuple[list[int], list[int]]] = {}
        for (topic, pid), target in decided.items():
            before = list(self._partition(topic, pid).replicas)
            code, message = self.replication._alter_reassignment(topic, pid, target, False, records)
            if code:
                log.info("autobalancer: cannot move %s-%d to %s: %s", topic, pid, target, message)
            else:
                started.append((topic, pid))
                self.touched.add((topic, pid))
                if set(target) != set(before):  # (a reorder copies nothing)
                    moves[(topic, pid)] = (before, list(target))
        if self.throttling:
            records.extend(self._throttle_records(moves))
        if started:
            self.moves_started += len(started)
            log.info("autobalancer (%s): moving %d partition(s) for %s: %s", self.config.mode, len(started),
                     self.last_reason, ", ".join(f"{t}-{p}" for t, p in started[:20])
                     + (" ..." if len(started) > 20 else ""))
        return records


def _entries(value: str | None) -> list[str]:
    """A throttled-replicas list's "p:b" entries ("*" and blanks: none)."""
    return [e.strip() for e in (value or "").split(",") if e.strip() and e.strip() != "*"]
