"""ReplicationControlManager (Kafka's): topics, partitions, and every decision about them.

State, changed only by ``replay``: topics by id and by name, and each partition's
PartitionRegistration (replicas, ISR, leader, leader epoch, partition epoch). Decisions
return records (and responses); leaders and ISRs always come out of PartitionChangeBuilder:

* creation (CreateTopics, CreatePartitions): Kafka's rack-unaware placement over the
  brokers that may lead, or a manual assignment; leader = first replica that may lead,
  ISR = the replicas that may lead;
* a broker fenced or entering controlled shutdown: it leaves every ISR (never emptying
  one) and gives up its leaderships; a broker unfenced: leaderless partitions it can lead
  get it as leader;
* AlterPartition (KIP-497/841/903), validated as Kafka's controller does, error for error;
* preferred elections: ElectLeaders, and the periodic auto rebalance (a broker whose share
  of partitions it should lead but does not is above leader.imbalance.per.broker.percentage
  gets them back, the ZooKeeper-era controller's rule);
* unclean elections where a topic allows them (unclean.leader.election.enable);
* partition reassignment (KIP-455, AlterPartitionReassignments): a move starts with the
  replicas = target + removing, adding and removing set (partition_change.py), the leader
  adds the new replicas to the ISR as they catch up (AlterPartition), and the change that
  brings the last of them in completes it; a cancel (null target) reverts to the replicas
  the move started from (Kafka's PartitionReassignmentRevert). All of it is metadata log
  records, so a new controller carries on where the old one stopped.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass, field
from typing import Iterable

from broker.config import validate_topic_name
from protocol.errors import ErrorCode
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType as T, make_record

from .cluster_control import ClusterControlManager
from .configuration_control import ConfigurationControlManager
from .controller_result import ControllerResult
from .partition_change import (NO_LEADER, NO_LEADER_CHANGE, RECOVERED, RECOVERING, Election, PartitionChangeBuilder,
                               PartitionRegistration, initial_registration, reassignment_replicas)
from .placement import PlacementError, assign_replicas_to_brokers

log = logging.getLogger("kbroker.controller.replication")

# Test-only switch (sim/bugs.py; never set otherwise): an AlterPartition whose ISR holds a
# fenced or shutting-down broker is accepted (KIP-841 undone). Read only when one is refused.
BUG_INELIGIBLE_ISR_ACCEPTED = False

PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1
ZERO_UUID = uuid.UUID(int=0)


@dataclass
class TopicControlInfo:
    name: str
    topic_id: uuid.UUID
    parts: dict[int, PartitionRegistration] = field(default_factory=dict)


class ReplicationControlManager:
    def __init__(self, cluster: ClusterControlManager, configs: ConfigurationControlManager, *,
                 default_num_partitions: int = 1, default_replication_factor: int = 1, delete_topic_enable: bool = True,
                 rng: random.Random | None = None) -> None:
        self.cluster = cluster
        self.configs = configs
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self.delete_topic_enable = delete_topic_enable
        self.rng = rng or random.Random()
        self.unclean_leader_elections = 0  # metrics: ControllerStats UncleanLeaderElectionsPerSec
        self.alter_partition_results: dict[int, int] = {}  # AlterPartition answers by error code (validation)
        self.topics: dict[uuid.UUID, TopicControlInfo] = {}
        self.topics_by_name: dict[str, uuid.UUID] = {}

    # -- replay ----------------------------------------------------------------------------

    def replay(self, record: ApiMessageAndVersion) -> None:
        t = record.type
        if t == T.TOPIC:
            self.topics[record.topic_id] = TopicControlInfo(record.name, record.topic_id)
            self.topics_by_name[record.name] = record.topic_id
        elif t == T.PARTITION:
            self.topics[record.topic_id].parts[record.partition_id] = PartitionRegistration.from_record(record)
        elif t == T.PARTITION_CHANGE:
            parts = self.topics[record.topic_id].parts
            parts[record.partition_id] = parts[record.partition_id].merge(record)
        elif t == T.REMOVE_TOPIC:
            info = self.topics.pop(record.topic_id)
            del self.topics_by_name[info.name]
            self.configs.delete_topic_configs(info.name)

    # -- queries ---------------------------------------------------------------------------

    def topic(self, name: str) -> TopicControlInfo | None:
        topic_id = self.topics_by_name.get(name)
        return None if topic_id is None else self.topics[topic_id]

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        info = self.topics.get(topic_id)
        return None if info is None else info.parts.get(partition_id)

    def all_partitions(self) -> Iterable[tuple[TopicControlInfo, int, PartitionRegistration]]:
        for info in self.topics.values():
            for pid, part in info.parts.items():
                yield info, pid, part

    def partitions_led_by(self, broker_id: int) -> list[tuple[str, int]]:
        return [(info.name, pid) for info, pid, part in self.all_partitions() if part.leader == broker_id]

    def _partitions_with_isr_member(self, broker_id: int) -> list[tuple[TopicControlInfo, int, PartitionRegistration]]:
        return [(info, pid, part) for info, pid, part in self.all_partitions() if broker_id in part.isr]

    def _leaderless_partitions(self) -> list[tuple[TopicControlInfo, int, PartitionRegistration]]:
        return [(info, pid, part) for info, pid, part in self.all_partitions() if part.leader == NO_LEADER]

    def reassigning_partitions(self) -> list[tuple[TopicControlInfo, int, PartitionRegistration]]:
        return [(info, pid, part) for info, pid, part in self.all_partitions() if part.is_reassigning]

    def offline_partition_count(self) -> int:
        return sum(1 for _i, _p, part in self.all_partitions() if part.leader == NO_LEADER)

    # -- elections when brokers come and go ------------------------------------------------

    def _election_for(self, topic: str) -> Election:
        return Election.UNCLEAN if self.configs.unclean_leader_election_enabled(topic) else Election.ONLINE

    def _log_unclean(self, info: TopicControlInfo, pid: int, part: PartitionRegistration, record) -> None:
        self.unclean_leader_elections += 1
        log.warning("unclean leader election for %s-%d: broker %d leads from outside the ISR %s; records only those "
                    "replicas had are lost", info.name, pid, record.leader, list(part.isr))

    def generate_leader_and_isr_updates(self, context: str, broker_to_remove: int, broker_to_add: int,
                                        partitions) -> list[ApiMessageAndVersion]:
        """Kafka's generateLeaderAndIsrUpdates: ``broker_to_remove`` (or NO_LEADER) leaves the
        ISR and may not lead; ``broker_to_add`` (or NO_LEADER) may lead although the
        cluster state does not show it unfenced yet."""
        def may_lead(r: int) -> bool:
            return r != broker_to_remove and (r == broker_to_add or self.cluster.is_active(r))

        records = []
        for info, pid, part in partitions:
            builder = PartitionChangeBuilder(part, info.topic_id, pid, may_lead, self._election_for(info.name))
            builder.set_target_isr([r for r in part.isr if r != broker_to_remove])
            record = builder.build()
            if record is not None:
                records.append(record)
                if builder.unclean:
                    self._log_unclean(info, pid, part, record)
        if records:
            log.info("%s: changing %d partition(s)", context, len(records))
        return records

    def handle_broker_fenced(self, broker_id: int) -> list[ApiMessageAndVersion]:
        return self.generate_leader_and_isr_updates(f"fencing broker {broker_id}", broker_id, NO_LEADER,
                                                    self._partitions_with_isr_member(broker_id))

    def handle_broker_unfenced(self, broker_id: int) -> list[ApiMessageAndVersion]:
        return self.generate_leader_and_isr_updates(f"unfencing broker {broker_id}", NO_LEADER, broker_id,
                                                    self._leaderless_partitions())

    def handle_broker_controlled_shutdown(self, broker_id: int) -> list[ApiMessageAndVersion]:
        return self.generate_leader_and_isr_updates(f"controlled shutdown of broker {broker_id}", broker_id, NO_LEADER,
                                                    self._partitions_with_isr_member(broker_id))

    # -- topic creation --------------------------------------------------------------------

    def _validate_manual_assignment(self, assignments: dict[int, list[int]]) -> tuple[int, str | None]:
        if sorted(assignments) != list(range(len(assignments))):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered consecutively from 0"
        sizes = set()
        for pid, replicas in assignments.items():
            problem = self._manual_replicas_problem(pid, replicas)
            if problem is not None:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
            sizes.add(len(replicas))
        if len(sizes) > 1:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "all partitions must have the same number of replicas"
        return ErrorCode.NONE, None

    def _manual_replicas_problem(self, pid: int, replicas: list[int]) -> str | None:
        if not replicas:
            return f"The manual partition assignment includes an empty replica list for partition {pid}."
        if len(set(replicas)) != len(replicas):
            return f"The manual partition assignment of partition {pid} includes duplicate replicas {replicas}."
        for r in replicas:
            if not self.cluster.is_registered(r):
                return f"The manual partition assignment includes broker {r}, but no such broker is registered."
        if not any(self.cluster.is_active(r) for r in replicas):
            return (f"All brokers specified in the manual partition assignment for partition {pid} are fenced or "
                    f"in controlled shutdown.")
        return None

    def _new_partitions(self, topic_id: uuid.UUID, assignment: dict[int, list[int]]) -> list[ApiMessageAndVersion]:
        records = []
        for pid in sorted(assignment):
            registration = initial_registration(assignment[pid], self.cluster.is_active)
            records.append(registration.to_record(topic_id, pid))
        return records

    def create_topics(self, topics, validate_only: bool = False) -> ControllerResult:
        """CreateTopics: one result per topic name (a name listed twice is INVALID_REQUEST),
        records for every topic created (none when ``validate_only``)."""
        names = [t.name for t in topics]
        duplicates = {n for n in names if names.count(n) > 1}
        records: list[ApiMessageAndVersion] = []
        results = []
        planned: set[str] = set()
        for t in topics:
            if t.name in duplicates:
                if t.name not in planned:
                    planned.add(t.name)
                    results.append(_topic_error(t.name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
                continue
            code, message, topic_records, result = self._create_topic(t, planned)
            if code:
                results.append(_topic_error(t.name, code, message))
                continue
            planned.add(t.name)
            results.append(result)
            if not validate_only:
                records += topic_records
        return ControllerResult(records, results)

    def _create_topic(self, t, planned: set[str]):
        name = t.name
        problem = validate_topic_name(name)
        if problem is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, problem, [], None
        if name in self.topics_by_name or name in planned:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.", [], None
        folded = name.replace(".", "_")
        collides = [n for n in (*self.topics_by_name, *planned) if n.replace(".", "_") == folded]
        if collides:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, (
                f"Topic '{name}' collides with existing topic: {collides[0]}"), [], None
        assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        if assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                return ErrorCode.INVALID_REQUEST, ("Both numPartitions or replicationFactor and replicasAssignments "
                                                   "were set. Both cannot be used at the same time."), [], None
            code, message = self._validate_manual_assignment(assignments)
            if code:
                return code, message, [], None
            assignment = assignments
        else:
            n = self.default_num_partitions if t.num_partitions == -1 else t.num_partitions
            rf = self.default_replication_factor if t.replication_factor == -1 else t.replication_factor
            if n <= 0:
                return ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.", \
                    [], None
            if rf <= 0:
                return ErrorCode.INVALID_REPLICATION_FACTOR, \
                    "Replication factor must be larger than 0, or -1 to use the default value.", [], None
            try:
                assignment = assign_replicas_to_brokers(n, rf, self.cluster.active_broker_ids(), rng=self.rng)
            except PlacementError as exc:
                return ErrorCode.INVALID_REPLICATION_FACTOR, (
                    f"Unable to replicate the partition {rf} time(s): {exc}"), [], None
        code, message, config_records = self.configs.creation_records(name, {c.name: c.value for c in t.configs})
        if code:
            return code, message, [], None
        topic_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        records = [make_record(T.TOPIC, name=name, topic_id=topic_id), *config_records,
                   *self._new_partitions(topic_id, assignment)]
        overrides = {c.name: c.value for c in t.configs if c.value is not None}
        result = {"name": name, "topic_id": topic_id, "error_code": ErrorCode.NONE, "error_message": None,
                  "num_partitions": len(assignment), "replication_factor": len(assignment[0]),
                  "configs": [{"name": e["name"], "value": e["value"], "read_only": False,
                               "config_source": e["config_source"], "is_sensitive": False}
                              for e in self.configs.describe_entries(overrides)]}
        return ErrorCode.NONE, None, records, result

    # -- deletion --------------------------------------------------------------------------

    def delete_topics(self, names: list[str | None], ids: list[uuid.UUID]) -> ControllerResult:
        """DeleteTopics by name (v0-5, or v6 entries with a name) and by id; one result each."""
        records, results, seen = [], [], set()
        for name, topic_id in [(n, None) for n in names] + [(None, i) for i in ids]:
            if name is not None:
                topic_id = self.topics_by_name.get(name)
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic_id is None else ErrorCode.NONE
            else:
                code = ErrorCode.UNKNOWN_TOPIC_ID if topic_id not in self.topics else ErrorCode.NONE
                name = self.topics[topic_id].name if not code else None
            message = None
            if not code and not self.delete_topic_enable:
                code, message = ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled."
            if not code and topic_id not in seen:
                seen.add(topic_id)
                records.append(make_record(T.REMOVE_TOPIC, topic_id=topic_id))
            results.append({"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": code,
                            "error_message": message})
        return ControllerResult(records, results)

    # -- more partitions -------------------------------------------------------------------

    def create_partitions(self, topics, validate_only: bool = False) -> ControllerResult:
        names = [t.name for t in topics]
        records, results = [], []
        for t in topics:
            if names.count(t.name) > 1:
                if not any(r["name"] == t.name for r in results):
                    results.append({"name": t.name, "error_code": ErrorCode.INVALID_REQUEST,
                                    "error_message": "Duplicate topic name."})
                continue
            code, message, topic_records = self._create_partitions(t)
            results.append({"name": t.name, "error_code": code, "error_message": message})
            if not code and not validate_only:
                records += topic_records
        return ControllerResult(records, results)

    def _create_partitions(self, t) -> tuple[int, str | None, list]:
        info = self.topic(t.name)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{t.name}' does not exist.", []
        current = len(info.parts)
        if t.count < current:
            return ErrorCode.INVALID_PARTITIONS, (f"The topic {t.name} currently has {current} partition(s); "
                                                  f"{t.count} would not be an increase."), []
        if t.count == current:
            return ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).", []
        rf = len(info.parts[0].replicas)
        adding = t.count - current
        if t.assignments is not None:
            if len(t.assignments) != adding:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                    f"Attempted to add {adding} additional partition(s), but only {len(t.assignments)} assignment(s) "
                    f"were specified."), []
            assignment = {}
            for i, a in enumerate(t.assignments):
                pid = current + i
                replicas = list(a.broker_ids)
                if len(replicas) != rf:
                    return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                        f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                        f"this is not consistent with previous partitions, which have {rf} replica(s)."), []
                problem = self._manual_replicas_problem(pid, replicas)
                if problem is not None:
                    return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem, []
                assignment[pid] = replicas
        else:
            brokers = self.cluster.active_broker_ids()
            first = info.parts[0].replicas[0]
            start = brokers.index(first) if first in brokers else -1
            try:
                assignment = assign_replicas_to_brokers(adding, rf, brokers, fixed_start_index=start,
                                                        start_partition_id=current, rng=self.rng)
            except PlacementError as exc:
                return ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): {exc}", []
        return ErrorCode.NONE, None, self._new_partitions(info.topic_id, assignment)

    # -- AlterPartition --------------------------------------------------------------------

    def alter_partition(self, request, version: int) -> ControllerResult:
        error = self.cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        if error:
            return ControllerResult([], {"error_code": error, "topics": []})
        records = []
        topics_out = []
        for td in request.topics:
            topic_id = td.topic_id if version >= 2 else self.topics_by_name.get(td.topic_name)
            info = self.topics.get(topic_id) if topic_id is not None and topic_id != ZERO_UUID else None
            out = {"topic_name": td.topic_name, "topic_id": td.topic_id, "partitions": []}
            topics_out.append(out)
            if info is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if version >= 2 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                log.info("rejecting AlterPartition from broker %d for unknown topic %s", request.broker_id,
                         td.topic_id if version >= 2 else td.topic_name)
                out["partitions"] = [{"partition_index": p.partition_index, "error_code": code} for p in td.partitions]
                continue
            for pd in td.partitions:
                out["partitions"].append(self._alter_one(request.broker_id, info, pd, version, records))
        return ControllerResult(records, {"error_code": ErrorCode.NONE, "topics": topics_out})

    def _alter_one(self, broker_id: int, info: TopicControlInfo, pd, version: int, records: list) -> dict:
        pid = pd.partition_index
        part = info.parts.get(pid)
        new_isr = ([(s.broker_id, s.broker_epoch) for s in pd.new_isr_with_epochs] if version >= 3
                   else [(b, -1) for b in pd.new_isr])
        code = self._validate_alter_partition(broker_id, info, pid, part, version, pd, new_isr)
        self.alter_partition_results[code] = self.alter_partition_results.get(code, 0) + 1
        if code:
            return {"partition_index": pid, "error_code": code}
        builder = PartitionChangeBuilder(part, info.topic_id, pid, self.cluster.is_active, self._election_for(info.name))
        builder.set_target_isr([b for b, _e in new_isr])
        builder.set_target_leader_recovery_state(pd.leader_recovery_state)
        record = builder.build()
        if record is not None:
            records.append(record)
            part = part.merge(record)
            if record.leader not in (broker_id, NO_LEADER_CHANGE):
                code = ErrorCode.NEW_LEADER_ELECTED if version >= 2 else ErrorCode.FENCED_LEADER_EPOCH
                return {"partition_index": pid, "error_code": code}
            log.debug("broker %d altered the ISR of %s-%d to %s", broker_id, info.name, pid, list(part.isr))
        return {"partition_index": pid, "error_code": ErrorCode.NONE, "leader_id": part.leader,
                "leader_epoch": part.leader_epoch, "isr": list(part.isr),
                "leader_recovery_state": part.leader_recovery_state, "partition_epoch": part.partition_epoch}

    def _validate_alter_partition(self, broker_id, info, pid, part, version, pd, new_isr) -> int:
        """Kafka's validateAlterPartitionData, in its order."""
        name = f"{info.name}-{pid}"
        if part is None:
            log.info("rejecting AlterPartition for unknown partition %s", name)
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # A leader ahead of us means this controller is behind: let the leader find another.
        if pd.leader_epoch > part.leader_epoch or pd.partition_epoch > part.partition_epoch:
            return ErrorCode.NOT_CONTROLLER
        if pd.leader_epoch < part.leader_epoch:
            log.debug("rejecting AlterPartition from broker %d for %s: leader epoch %d, current %d", broker_id, name,
                      pd.leader_epoch, part.leader_epoch)
            return ErrorCode.FENCED_LEADER_EPOCH
        if broker_id != part.leader:
            log.info("rejecting AlterPartition from broker %d for %s: the leader is %d", broker_id, name, part.leader)
            return ErrorCode.INVALID_REQUEST
        if pd.partition_epoch < part.partition_epoch:
            log.info("rejecting AlterPartition from broker %d for %s: partition epoch %d, current %d", broker_id, name,
                     pd.partition_epoch, part.partition_epoch)
            return ErrorCode.INVALID_UPDATE_VERSION
        isr = [b for b, _e in new_isr]
        if len(set(isr)) != len(isr) or any(b not in part.replicas for b in isr):
            log.error("rejecting AlterPartition from broker %d for %s: invalid ISR %s", broker_id, name, isr)
            return ErrorCode.INVALID_REQUEST
        if part.leader not in isr:
            log.error("rejecting AlterPartition from broker %d for %s: ISR %s without the leader", broker_id, name, isr)
            return ErrorCode.INVALID_REQUEST
        if pd.leader_recovery_state == RECOVERING and len(isr) > 1:
            return ErrorCode.INVALID_REQUEST
        if part.leader_recovery_state == RECOVERED and pd.leader_recovery_state == RECOVERING:
            return ErrorCode.INVALID_REQUEST
        ineligible = []
        for b, epoch in new_isr:
            reg = self.cluster.registration(b)
            if reg is None:
                ineligible.append(f"{b} (not registered)")
            elif reg.in_controlled_shutdown:
                ineligible.append(f"{b} (shutting down)")
            elif reg.fenced:
                ineligible.append(f"{b} (fenced)")
            elif epoch != -1 and epoch != reg.epoch:
                ineligible.append(f"{b} (broker epoch {epoch}, registered {reg.epoch})")
        if ineligible and not BUG_INELIGIBLE_ISR_ACCEPTED:
            log.info("rejecting AlterPartition from broker %d for %s: ineligible replicas %s in the new ISR %s",
                     broker_id, name, ", ".join(ineligible), isr)
            return ErrorCode.INELIGIBLE_REPLICA if version >= 2 else ErrorCode.OPERATION_NOT_ATTEMPTED
        return ErrorCode.NONE

    # -- preferred elections ---------------------------------------------------------------

    def elect_leaders(self, election_type: int, topic_partitions) -> ControllerResult:
        """ElectLeaders: per-partition results; with ``topic_partitions`` None, every partition
        (and partitions needing no election are left out of the answer, as Kafka does)."""
        elect_all = topic_partitions is None
        if elect_all:
            wanted: dict[str, list[int]] = {}
            for info, pid, _part in self.all_partitions():
                wanted.setdefault(info.name, []).append(pid)
            for pids in wanted.values():
                pids.sort()
        else:
            wanted = {}
            for tp in topic_partitions:
                wanted.setdefault(tp.topic, []).extend(tp.partitions)
        records, results = [], []
        for topic in sorted(wanted):
            parts_out = []
            for pid in wanted[topic]:
                code, message = self._elect_one(topic, pid, election_type, records)
                if elect_all and code == ErrorCode.ELECTION_NOT_NEEDED:
                    continue
                parts_out.append({"partition_id": pid, "error_code": code, "error_message": message})
            if parts_out or not elect_all:
                results.append({"topic": topic, "partition_result": parts_out})
        return ControllerResult(records, {"error_code": ErrorCode.NONE, "replica_election_results": results})

    def _elect_one(self, topic: str, pid: int, election_type: int, records: list) -> tuple[int, str | None]:
        info = self.topic(topic)
        part = info.parts.get(pid) if info is not None else None
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic partition {topic}-{pid}."
        if election_type == PREFERRED_ELECTION:
            if part.has_preferred_leader():
                return ErrorCode.ELECTION_NOT_NEEDED, None
            election = Election.PREFERRED
        elif election_type == UNCLEAN_ELECTION:
            if part.has_leader:
                return ErrorCode.ELECTION_NOT_NEEDED, None
            election = Election.UNCLEAN
        else:
            return ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}."
        builder = PartitionChangeBuilder(part, info.topic_id, pid, self.cluster.is_active, election)
        record = builder.build()
        if record is None or (election is Election.PREFERRED and record.leader != part.preferred_leader):
            if election is Election.PREFERRED:
                return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, (
                    f"Failed to elect leader for partition {topic}-{pid} under strategy PREFERRED")
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, (
                f"Failed to elect leader for partition {topic}-{pid} under strategy UNCLEAN")
        if builder.unclean:
            self._log_unclean(info, pid, part, record)
        records.append(record)
        return ErrorCode.NONE, None

    def imbalanced_partitions(self, imbalance_percentage: int) -> list[tuple[TopicControlInfo, int, PartitionRegistration]]:
        """Partitions to move back to their preferred leader: for each broker whose share of
        the partitions it should lead but does not exceeds ``imbalance_percentage``, those of
        them it can take (it may lead and is in the ISR)."""
        by_preferred: dict[int, list] = {}
        for info, pid, part in self.all_partitions():
            if part.replicas:
                by_preferred.setdefault(part.preferred_leader, []).append((info, pid, part))
        out = []
        for broker, parts in sorted(by_preferred.items()):
            not_led = [(i, p, part) for i, p, part in parts if part.leader != broker]
            if not not_led or len(not_led) / len(parts) <= imbalance_percentage / 100:
                continue
            if not self.cluster.is_active(broker):
                continue
            out += [(i, p, part) for i, p, part in not_led if broker in part.isr]
        return out

    def maybe_balance_partition_leaders(self, imbalance_percentage: int) -> list[ApiMessageAndVersion]:
        records = []
        for info, pid, part in self.imbalanced_partitions(imbalance_percentage):
            record = PartitionChangeBuilder(part, info.topic_id, pid, self.cluster.is_active, Election.PREFERRED).build()
            if record is not None and record.leader == part.preferred_leader:
                records.append(record)
        if records:
            log.info("auto leader rebalance: moving %d leadership(s) back to preferred replicas", len(records))
        return records

    # -- reassignment (KIP-455) ------------------------------------------------------------

    def alter_partition_reassignments(self, topics, allow_replication_factor_change: bool = True) -> ControllerResult:
        """AlterPartitionReassignments: a result per partition, in the request's order; the
        records of those accepted (Kafka answers them all in one atomic batch)."""
        records: list[ApiMessageAndVersion] = []
        responses = []
        ok = total = 0
        for t in topics:
            out = []
            for p in t.partitions:
                total += 1
                code, message = self._alter_reassignment(t.name, p.partition_index, p.replicas,
                                                         allow_replication_factor_change, records)
                if code:
                    log.info("cannot alter the reassignment of %s-%d: %s %s", t.name, p.partition_index,
                             ErrorCode(code).name, message)
                else:
                    ok += 1
                out.append({"partition_index": p.partition_index, "error_code": code, "error_message": message})
            responses.append({"name": t.name, "partitions": out})
        if total:
            log.info("altered %d of %d partition reassignment(s)", ok, total)
        return ControllerResult(records, {"throttle_time_ms": 0, "allow_replication_factor_change":
                                          allow_replication_factor_change, "error_code": ErrorCode.NONE,
                                          "error_message": None, "responses": responses})

    def _alter_reassignment(self, topic: str, pid: int, replicas, allow_rf_change: bool,
                            records: list) -> tuple[int, str | None]:
        info = self.topic(topic)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
        part = info.parts.get(pid)
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{pid}."
        # The partition as earlier entries of this same request left it (a partition listed twice).
        for r in records:
            if r.topic_id == info.topic_id and r.partition_id == pid:
                part = part.merge(r)
        if replicas is None:
            return self._cancel_reassignment(info, pid, part, records)
        replicas = list(replicas)
        problem = self._reassignment_target_problem(replicas)
        if problem is not None:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
        if not allow_rf_change:
            current_rf = len(part.target_replicas)
            if len(replicas) != current_rf:
                return ErrorCode.INVALID_REPLICATION_FACTOR, (
                    f"The replication factor is changed from {current_rf} to {len(replicas)}")
        new_replicas, adding, removing = reassignment_replicas(part.replicas, replicas)
        builder = PartitionChangeBuilder(part, info.topic_id, pid, self.cluster.is_active, self._election_for(info.name))
        builder.set_target_replicas(new_replicas).set_target_adding(adding).set_target_removing(removing)
        record = builder.build()
        if record is not None:
            records.append(record)
            log.info("reassigning %s-%d from %s to %s%s", topic, pid, list(part.replicas), replicas,
                     " (complete at once)" if builder.completed_reassignment else
                     f": adding {adding}, removing {removing}")
        return ErrorCode.NONE, None

    def _reassignment_target_problem(self, replicas: list[int]) -> str | None:
        """Kafka's validateManualPartitionAssignment: not empty, registered brokers (fenced
        ones too), no duplicates."""
        if not replicas:
            return "The manual partition assignment includes an empty replica list."
        previous = None
        for b in sorted(replicas):
            if not self.cluster.is_registered(b):
                return f"The manual partition assignment includes broker {b}, but no such broker is registered."
            if b == previous:
                return f"The manual partition assignment includes the broker {b} more than once."
            previous = b
        return None

    def _cancel_reassignment(self, info: TopicControlInfo, pid: int, part: PartitionRegistration,
                             records: list) -> tuple[int, str | None]:
        """Revert to where the move started (Kafka's PartitionReassignmentRevert): the replicas
        and ISR without those being added. An ISR made only of added replicas cannot be reverted
        cleanly: refused, unless the topic allows unclean elections."""
        if not part.is_reassigning:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
        adding = set(part.adding)
        replicas = [r for r in part.replicas if r not in adding]
        isr = [r for r in part.isr if r not in adding]
        election = self._election_for(info.name)
        if not isr:
            if election is not Election.UNCLEAN:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                    f"Unable to revert partition assignment for {info.name}:{pid} because it would require an "
                    f"unclean leader election.")
            isr = [replicas[0]]
        builder = PartitionChangeBuilder(part, info.topic_id, pid, self.cluster.is_active, election)
        builder.set_target_isr(isr).set_target_replicas(replicas).set_target_adding([]).set_target_removing([])
        record = builder.build()
        if record is not None:
            records.append(record)
            log.info("cancelled the reassignment of %s-%d: back to %s (dropping %s)", info.name, pid, replicas,
                     sorted(adding))
        return ErrorCode.NONE, None

    def list_partition_reassignments(self, topics) -> dict:
        """ListPartitionReassignments: every partition moving (``topics`` None), or those of
        the given topics and partitions that are; unknown ones are left out, as Kafka does."""
        out = []
        if topics is None:
            wanted = [(info, sorted(info.parts)) for info in sorted(self.topics.values(), key=lambda i: i.name)]
        else:
            wanted = [(info, list(t.partition_indexes)) for t in topics for info in [self.topic(t.name)]
                      if info is not None]
        for info, pids in wanted:
            parts = []
            for pid in pids:
                part = info.parts.get(pid)
                if part is not None and part.is_reassigning:
                    parts.append({"partition_index": pid, "replicas": list(part.replicas),
                                  "adding_replicas": list(part.adding), "removing_replicas": list(part.removing)})
            if parts:
                out.append({"name": info.name, "partitions": parts})
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": out}

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_records(self) -> list[ApiMessageAndVersion]:
        out = []
        for info in sorted(self.topics.values(), key=lambda i: i.name):
            out.append(make_record(T.TOPIC, name=info.name, topic_id=info.topic_id))
            out += [info.parts[pid].to_record(info.topic_id, pid) for pid in sorted(info.parts)]
        return out


def _topic_error(name: str, code: int, message: str | None) -> dict:
    return {"name": name, "topic_id": ZERO_UUID, "error_code": code, "error_message": message, "num_partitions": -1,
            "replication_factor": -1, "configs": None}

