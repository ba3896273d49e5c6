"""Partition state and every change to it: PartitionRegistration and PartitionChangeBuilder.

``PartitionRegistration`` is a partition as the controller knows it (Kafka's
org.apache.kafka.metadata.PartitionRegistration); ``merge`` applies a PartitionChangeRecord
the way replay does: a record that names a leader (even the same one) bumps the leader
epoch, and every record bumps the partition epoch.

``PartitionChangeBuilder`` (Kafka's) is the one place leaders and ISRs are decided. It is
pure: the current partition, a target ISR, an election type and a predicate saying which
brokers may lead (registered, unfenced, not shutting down) go in; one PartitionChangeRecord,
or None when nothing changes, comes out. The rules:

* The current leader stays while it is in the target ISR and may lead.
* Otherwise the new leader is the first replica (in replica order) that is in the target
  ISR and may lead (ONLINE). PREFERRED first tries replicas[0], then the current leader,
  then the other replicas, all from the target ISR.
* With no such replica the partition goes offline (leader -1) and nothing is elected,
  unless the election is UNCLEAN: then the first replica that may lead, ISR or not,
  becomes leader with ISR [it] and leader recovery state RECOVERING (records written
  before it may be lost; the caller logs that).
* The ISR never becomes empty: a target ISR that is empty (the last member fenced or
  shutting down) leaves the ISR as it is, and the partition leaderless.

Reassignment (KIP-455, Kafka's PartitionReassignmentReplicas): while a partition moves, its
replicas are the target followed by the replicas being removed, with ``adding`` (target −
original) and ``removing`` (original − target) set. Every build first checks whether the
move can complete: once the target ISR, less the removing replicas, is not empty and holds
every replica of the target, the one change sets replicas = target, drops the removing
replicas from the ISR and clears adding/removing. Candidates for leadership are taken from
the target replica list. A change whose replica list loses a broker bumps the leader epoch
(the record names the leader even when it stays), so the removed replicas are fenced.

``initial_registration`` is creation: ISR = the replicas that may lead, leader = the first
of them.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Callable, Sequence

from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType, make_record

NO_LEADER = -1
NO_LEADER_CHANGE = -2
RECOVERED = 0
RECOVERING = 1
NO_RECOVERY_STATE_CHANGE = -1


class Election(enum.Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: int = RECOVERED
    adding: tuple[int, ...] = ()     # a reassignment in progress (KIP-455): replicas being added
    removing: tuple[int, ...] = ()   # ... and being removed

    @classmethod
    def from_record(cls, record: ApiMessageAndVersion) -> "PartitionRegistration":
        return cls(tuple(record.replicas), tuple(record.isr), record.leader, record.leader_epoch, record.partition_epoch,
                   record.leader_recovery_state, tuple(record.adding_replicas or ()),
                   tuple(record.removing_replicas or ()))

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> ApiMessageAndVersion:
        return make_record(MetadataRecordType.PARTITION, partition_id=partition_id, topic_id=topic_id,
                           replicas=list(self.replicas), isr=list(self.isr), leader=self.leader,
                           leader_recovery_state=self.leader_recovery_state, leader_epoch=self.leader_epoch,
                           partition_epoch=self.partition_epoch, adding_replicas=list(self.adding),
                           removing_replicas=list(self.removing))

    def merge(self, record: ApiMessageAndVersion) -> "PartitionRegistration":
        """This partition after a PartitionChangeRecord (replay)."""
        # (built directly, not with dataclasses.replace: replayed for every partition of a
        # broker's fencing or unfencing, tens of thousands at a time)
        data = record.data
        isr, replicas, leader = data.isr, data.replicas, data.leader
        recovery = data.leader_recovery_state
        adding, removing = data.adding_replicas, data.removing_replicas
        changed_leader = leader != NO_LEADER_CHANGE
        return PartitionRegistration(
            self.replicas if replicas is None else tuple(replicas), self.isr if isr is None else tuple(isr),
            leader if changed_leader else self.leader, self.leader_epoch + 1 if changed_leader else self.leader_epoch,
            self.partition_epoch + 1,
            self.leader_recovery_state if recovery == NO_RECOVERY_STATE_CHANGE else recovery,
            self.adding if adding is None else tuple(adding), self.removing if removing is None else tuple(removing))

    @property
    def has_leader(self) -> bool:
        return self.leader >= 0

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    def has_preferred_leader(self) -> bool:
        return self.leader == self.preferred_leader

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """Where the partition is going: the replicas without those being removed."""
        if not self.removing:
            return self.replicas
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """Where a reassignment started from (Kafka's originalReplicas): the replicas without
        those being added."""
        if not self.adding:
            return self.replicas
        return tuple(r for r in self.replicas if r not in self.adding)


def reassignment_replicas(current: Sequence[int], target: Sequence[int]
                          ) -> tuple[list[int], list[int], list[int]]:
    """(replicas, adding, removing) of a move from ``current`` to ``target`` (Kafka's
    PartitionReassignmentReplicas): the target followed by the replicas it drops; adding and
    removing sorted."""
    removing = sorted(set(current) - set(target))
    adding = sorted(set(target) - set(current))
    return list(target) + removing, adding, removing


def completed_reassignment(replicas: Sequence[int], adding: Sequence[int], removing: Sequence[int],
                           target_isr: Sequence[int]) -> tuple[list[int], list[int]] | None:
    """(replicas, ISR) once a reassignment in progress can complete with ``target_isr``, else
    None: the ISR without the removing replicas must not be empty and must hold every replica
    that stays (Kafka's maybeCompleteReassignment)."""
    if not adding and not removing:
        return None
    isr, new_replicas = list(target_isr), list(replicas)
    if removing:
        isr = [r for r in target_isr if r not in removing]
        new_replicas = [r for r in replicas if r not in removing]
        if not isr or not new_replicas:
            return None
    if not set(new_replicas) <= set(isr):
        return None
    return new_replicas, isr


def initial_registration(replicas: Sequence[int], may_lead: Callable[[int], bool]) -> PartitionRegistration | None:
    """A new partition on ``replicas``: ISR = the replicas that may lead (in replica order),
    leader = the first of them. None when no replica may lead."""
    isr = tuple(r for r in replicas if may_lead(r))
    if not isr:
        return None
    return PartitionRegistration(tuple(replicas), isr, isr[0], 0, 0, RECOVERED)


@dataclass(frozen=True, slots=True)
class ElectionResult:
    leader: int
    unclean: bool


class PartitionChangeBuilder:
    def __init__(self, partition: PartitionRegistration, topic_id: uuid.UUID, partition_id: int,
                 may_lead: Callable[[int], bool], election: Election = Election.ONLINE) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.may_lead = may_lead
        self.election = election
        self.target_isr: list[int] = list(partition.isr)
        self.target_replicas: list[int] = list(partition.replicas)
        self.target_adding: list[int] = list(partition.adding)
        self.target_removing: list[int] = list(partition.removing)
        self.target_leader_recovery_state = partition.leader_recovery_state
        self.unclean = False  # whether build() elected a leader from outside the ISR
        self.completed_reassignment = False  # whether build() completed a reassignment

    def set_target_isr(self, isr: Sequence[int]) -> "PartitionChangeBuilder":
        self.target_isr = list(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> "PartitionChangeBuilder":
        self.target_replicas = list(replicas)
        return self

    def set_target_adding(self, adding: Sequence[int]) -> "PartitionChangeBuilder":
        self.target_adding = list(adding)
        return self

    def set_target_removing(self, removing: Sequence[int]) -> "PartitionChangeBuilder":
        self.target_removing = list(removing)
        return self

    def set_election(self, election: Election) -> "PartitionChangeBuilder":
        self.election = election
        return self

    def set_target_leader_recovery_state(self, state: int) -> "PartitionChangeBuilder":
        self.target_leader_recovery_state = state
        return self

    def _valid_new_leader(self, replica: int) -> bool:
        return replica in self.target_isr and self.may_lead(replica)

    def _complete_reassignment_if_needed(self) -> None:
        done = completed_reassignment(self.target_replicas, self.target_adding, self.target_removing, self.target_isr)
        if done is None:
            return
        self.target_replicas, self.target_isr = done
        self.target_adding, self.target_removing = [], []
        self.completed_reassignment = True

    def elect_leader(self) -> ElectionResult:
        replicas = self.target_replicas
        current = self.partition.leader
        if self.election is Election.PREFERRED:
            candidates = [replicas[0], current, *replicas[1:]] if replicas else [current]
        else:
            candidates = [current, *replicas]
        for candidate in candidates:
            if candidate >= 0 and self._valid_new_leader(candidate):
                return ElectionResult(candidate, False)
        if self.election is Election.UNCLEAN:
            for candidate in replicas:
                if self.may_lead(candidate):
                    return ElectionResult(candidate, True)
        return ElectionResult(NO_LEADER, False)

    def build(self) -> ApiMessageAndVersion | None:
        partition = self.partition
        fields: dict = {}
        self._complete_reassignment_if_needed()
        result = self.elect_leader()
        if result.leader != partition.leader:
            fields["leader"] = result.leader
            if result.unclean:
                # Unclean: the ISR is forced to the new leader alone; records only the old ISR had
                # may be lost, and the leader recovers before the ISR may grow again.
                fields["isr"] = [result.leader]
                if partition.leader_recovery_state != RECOVERING:
                    fields["leader_recovery_state"] = RECOVERING
        elif not set(partition.replicas) <= set(self.target_replicas):
            # Replicas leave: a new leader epoch fences them (Kafka's
            # triggerLeaderEpochBumpForReplicaReassignmentIfNeeded), the leader staying.
            fields["leader"] = partition.leader
        self.unclean = result.unclean
        if "isr" not in fields and self.target_isr and self.target_isr != list(partition.isr):
            fields["isr"] = list(self.target_isr)
        if self.target_replicas and self.target_replicas != list(partition.replicas):
            fields["replicas"] = list(self.target_replicas)
        if self.target_removing != list(partition.removing):
            fields["removing_replicas"] = list(self.target_removing)
        if self.target_adding != list(partition.adding):
            fields["adding_replicas"] = list(self.target_adding)
        if ("leader_recovery_state" not in fields and not result.unclean
                and self.target_leader_recovery_state != partition.leader_recovery_state):
            fields["leader_recovery_state"] = self.target_leader_recovery_state
        if not fields:
            return None
        return make_record(MetadataRecordType.PARTITION_CHANGE, partition_id=self.partition_id, topic_id=self.topic_id,
                           **fields)
