"""A group's state in memory: GroupMetadata and MemberMetadata, as Kafka's classic group
coordinator keeps them.

Theory of operation. Everything that changes a group's state goes through ``transition_to``,
which checks ``VALID_PREVIOUS_STATES``, the one transition table:

    Empty               <- PreparingRebalance                      (the last member left / timed out)
    PreparingRebalance  <- Empty, Stable, CompletingRebalance      (a member joins, leaves, fails, changes)
    CompletingRebalance <- PreparingRebalance                      (every expected member has joined)
    Stable              <- CompletingRebalance                     (the leader's assignment is stored)
    Dead                <- every state, Dead included              (unloaded, deleted, or expired)

What each state answers (GroupCoordinator implements it): PreparingRebalance parks JoinGroups
until all members rejoined, answers Heartbeat and SyncGroup with REBALANCE_IN_PROGRESS and still
takes offset commits; CompletingRebalance parks followers' SyncGroups until the leader's
assignment is stored and refuses commits with REBALANCE_IN_PROGRESS; Stable answers normally;
Empty accepts new members and "simple" commits (generation -1); Dead answers
COORDINATOR_NOT_AVAILABLE (the group has just moved or gone).

Single-threaded (the event loop), so no locks; callbacks run synchronously.
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from protocol.errors import ErrorCode
from protocol.messages.consumer_protocol import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE, subscribed_topics
from protocol.schema import SchemaError

log = logging.getLogger("kbroker.coordinator")


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# The one transition table: target state -> the states it may be entered from.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
}


class IllegalStateTransition(RuntimeError):
    """A transition the table does not allow: a coordinator bug, never a client's fault."""


# A new member's JoinGroup is parked at most this long (GroupCoordinator.NewMemberJoinTimeoutMs):
# it has no member id yet, so it cannot heartbeat, and a client that gave up would leave a
# defunct member behind for the whole rebalance.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None   # only from OffsetCommit v2-4 retention_time_ms (value v1)


@dataclass(slots=True)
class JoinGroupResult:
    member_id: str
    error: int
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = UNKNOWN_MEMBER_ID
    skip_assignment: bool = False
    members: list = field(default_factory=list)   # [(member_id, group_instance_id, metadata)] for the leader


@dataclass(slots=True)
class SyncGroupResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class MemberMetadata:
    """One member: its protocols (in preference order), timeouts, assignment and the callbacks of
    its parked JoinGroup / SyncGroup."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "supported_protocols", "assignment",
                 "awaiting_join_callback", "awaiting_sync_callback", "is_new", "heartbeat_satisfied")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 supported_protocols: list[tuple[str, bytes]], assignment: bytes = b"") -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = supported_protocols
        self.assignment = assignment
        self.awaiting_join_callback: Callable[[JoinGroupResult], None] | None = None
        self.awaiting_sync_callback: Callable[[SyncGroupResult], None] | None = None
        self.is_new = False
        # Set when a heartbeat (or anything proving liveness) arrives; cleared when the next
        # DelayedHeartbeat is scheduled, which completes as soon as it turns True again.
        self.heartbeat_satisfied = False

    @property
    def is_static_member(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync_callback is not None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    @property
    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            # a new member can expire while it waits in JoinGroup, so this comes first
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True   # members in a rebalance satisfy the expected heartbeat
        return self.heartbeat_satisfied

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order."""
        return len(protocols) == len(self.supported_protocols) and all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1]) for a, b in zip(protocols, self.supported_protocols))

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols (its preference order) that every member supports."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def summary(self, protocol: str) -> MemberSummary:
        return MemberSummary(self.member_id, self.group_instance_id, self.client_id, self.client_host,
                             self.metadata(protocol), self.assignment)

    def summary_no_metadata(self) -> MemberSummary:
        return MemberSummary(self.member_id, self.group_instance_id, self.client_id, self.client_host, b"", b"")

    def __repr__(self) -> str:
        return (f"MemberMetadata(member_id={self.member_id}, group_instance_id={self.group_instance_id}, "
                f"client_id={self.client_id}, client_host={self.client_host}, session_timeout_ms={self.session_timeout_ms}, "
                f"rebalance_timeout_ms={self.rebalance_timeout_ms}, protocols={[p for p, _ in self.supported_protocols]})")


class GroupMetadata:
    """A group: state, generation, protocol, leader, members (dynamic and static), pending
    members (KIP-394: given an id, not yet rejoined), and its committed offsets."""

    def __init__(self, group_id: str, initial_state: GroupState, now_ms: int) -> None:
        self.group_id = group_id
        self.state = initial_state
        self.current_state_timestamp: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}   # group.instance.id -> member id
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}   # protocol -> how many members support it
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.pending_offset_commits: dict[tuple[str, int], OffsetAndMetadata] = {}
        # Transactional commits (TxnOffsetCommit) per producer id, not yet ended by a marker:
        # tp -> (offset, its position in the log, None while the append is in flight).
        self.pending_txn_offset_commits: dict[int, dict[tuple[str, int], tuple[OffsetAndMetadata, int | None]]] = {}
        # The log position of each committed offset's record (which of two commits is newer).
        self.offset_positions: dict[tuple[str, int], int] = {}
        # For protocol type "consumer": the topics the members subscribe to (None: unknown).
        self.subscribed_topics: set[str] | None = None
        # InitialDelayedJoin: did a new member join during the current delay?
        self.new_member_added = False

    # -- state ---------------------------------------------------------------------------
    def in_state(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            allowed = ",".join(sorted(str(s) for s in VALID_PREVIOUS_STATES[target]))
            raise IllegalStateTransition(f"Group {self.group_id} should be in the {allowed} states before moving to "
                                         f"{target} state. Instead it is in {self.state} state")
        self.state = target
        self.current_state_timestamp = now_ms

    @property
    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[PREPARING_REBALANCE]

    def is_in_states(self, lowercase_states: set[str]) -> bool:
        return str(self.state).lower() in lowercase_states

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # -- members -------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, callback: Callable[[JoinGroupResult], None] | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already in group {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        member.awaiting_join_callback = callback
        if member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def _count_protocols(self, member: MemberMetadata, delta: int) -> None:
        for name, _ in member.supported_protocols:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + delta

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else promote any member that did. False when there is
        no leader (empty group) or nobody rejoined."""
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                log.info("Group leader %s of group %s failed to join before the rebalance timeout; %s is the new leader",
                         leader.member_id, self.group_id, member_id)
                self.leader_id = member_id
                return True
        log.info("Group leader %s of group %s failed to join before the rebalance timeout, and no member rejoined",
                 leader.member_id, self.group_id)
        return False

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """KIP-345: a static member rejoined with a new member id; the old id is fenced (any
        parked JoinGroup or SyncGroup of it answers FENCED_INSTANCE_ID) and everything else kept."""
        member = self.members.pop(old_member_id, None)
        if member is None:
            raise ValueError(f"cannot replace non-existing member id {old_member_id}")
        self.maybe_invoke_join_callback(member, JoinGroupResult(old_member_id, ErrorCode.FENCED_INSTANCE_ID))
        self.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def add_pending_member(self, member_id: str) -> None:
        if self.has(member_id):
            raise RuntimeError(f"pending member {member_id} is already a member of group {self.group_id}")
        self.pending_members.add(member_id)

    def add_pending_sync_member(self, member_id: str) -> None:
        if not self.has(member_id):
            raise RuntimeError(f"pending sync for {member_id}, which is not a member of group {self.group_id}")
        self.pending_sync_members.add(member_id)

    def remove_pending_sync_member(self, member_id: str) -> None:
        if not self.has(member_id):
            raise RuntimeError(f"pending sync removal for {member_id}, which is not a member of group {self.group_id}")
        self.pending_sync_members.discard(member_id)

    @property
    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    @property
    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = client_id if group_instance_id is None else group_instance_id
        return f"{prefix}-{uuid.uuid4()}"

    def is_static_member_fenced(self, group_instance_id: str, member_id: str) -> bool:
        current = self.current_static_member_id(group_instance_id)
        return current is not None and current != member_id

    # -- protocols -----------------------------------------------------------------------
    def _candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support; most votes win
        (ties: the first protocol to reach the top count, in member order)."""
        if not self.members:
            raise RuntimeError("cannot select a protocol for an empty group")
        candidates = self._candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=votes.__getitem__)

    def supports_protocols(self, member_protocol_type: str, member_protocols: set[str]) -> bool:
        if self.in_state(EMPTY):
            return bool(member_protocol_type) and bool(member_protocols)
        n = len(self.members)
        return (self.protocol_type == member_protocol_type
                and any(self.supported_protocols.get(p, 0) == n for p in member_protocols))

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """True when unknown (protocol metadata missing or unreadable): the safe answer."""
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        try:
            topics: set[str] = set()
            for member in self.members.values():
                topics.update(subscribed_topics(member.metadata(self.protocol_name)))
            return topics
        except (SchemaError, ValueError) as exc:
            log.warning("Failed to parse the consumer protocol %s of group %s; its subscribed topics are unknown: %s",
                        self.protocol_name, self.group_id, exc)
            return None

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, callback: Callable[[JoinGroupResult], None] | None) -> None:
        self._count_protocols(member, -1)
        member.supported_protocols = protocols
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join_callback = callback

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> None:
        if member.is_awaiting_join:
            callback = member.awaiting_join_callback
            member.awaiting_join_callback = None
            self.num_members_awaiting_join -= 1
            try:
                callback(result)
            except Exception:
                log.exception("join callback of %s failed", member.member_id)

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        if not member.is_awaiting_sync:
            return False
        callback = member.awaiting_sync_callback
        member.awaiting_sync_callback = None
        try:
            callback(result)
        except Exception:
            log.exception("sync callback of %s failed", member.member_id)
        return True

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """Every member's metadata for the selected protocol: what the leader gets in JoinGroup."""
        if self.in_state(DEAD) or self.in_state(PREPARING_REBALANCE):
            raise RuntimeError(f"cannot obtain member metadata for group {self.group_id} in state {self.state}")
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def summary(self) -> tuple[str, str, str, list[MemberSummary]]:
        """(state, protocol type, protocol, members) for DescribeGroups: metadata and assignments only when Stable."""
        if self.in_state(STABLE):
            return (str(self.state), self.protocol_type or "", self.protocol_name,
                    [m.summary(self.protocol_name) for m in self.members.values()])
        return (str(self.state), self.protocol_type or "", "", [m.summary_no_metadata() for m in self.members.values()])

    # -- offsets -------------------------------------------------------------------------
    def initialize_offsets(self, offsets: dict[tuple[str, int], OffsetAndMetadata],
                           positions: dict[tuple[str, int], int] | None = None,
                           pending_txn: dict[int, dict[tuple[str, int], tuple[OffsetAndMetadata, int]]] | None = None
                           ) -> None:
        """Loaded offsets (with their records' log positions), and the transactional commits
        still pending (their producer's marker not yet in the log)."""
        self.offsets.update(offsets)
        if positions:
            self.offset_positions.update(positions)
        for producer_id, pending in (pending_txn or {}).items():
            self.pending_txn_offset_commits.setdefault(producer_id, {}).update(
                {tp: (om, position) for tp, (om, position) in pending.items()})

    def prepare_offset_commit(self, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        self.pending_offset_commits.update(offsets)

    def prepare_txn_offset_commit(self, producer_id: int, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        pending = self.pending_txn_offset_commits.setdefault(producer_id, {})
        for tp, om in offsets.items():
            pending[tp] = (om, None)

    def on_offset_commit_append(self, tp: tuple[str, int], offset: OffsetAndMetadata, position: int = -1) -> None:
        """The commit is in the log: make it the committed offset unless the partition's pending
        entry was removed meanwhile (OffsetDelete, expiry)."""
        if tp in self.pending_offset_commits:
            self.offsets[tp] = offset
            self.offset_positions[tp] = position
            if self.pending_offset_commits[tp] == offset:
                del self.pending_offset_commits[tp]

    def on_txn_offset_commit_append(self, producer_id: int, tp: tuple[str, int], offset: OffsetAndMetadata,
                                    position: int) -> None:
        """The transactional commit is in the log (at ``position``): it waits for the marker,
        unless the transaction already ended or the offset was removed meanwhile."""
        pending = self.pending_txn_offset_commits.get(producer_id)
        if pending is not None and tp in pending and pending[tp][0] == offset:
            pending[tp] = (offset, position)

    def fail_pending_offset_write(self, tp: tuple[str, int], offset: OffsetAndMetadata) -> None:
        if self.pending_offset_commits.get(tp) == offset:
            del self.pending_offset_commits[tp]

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: tuple[str, int], offset: OffsetAndMetadata) -> None:
        pending = self.pending_txn_offset_commits.get(producer_id)
        if pending is not None and tp in pending and pending[tp][0] == offset:
            del pending[tp]
            if not pending:
                del self.pending_txn_offset_commits[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, is_commit: bool) -> int:
        """The producer's transaction ended (its marker is in the log): on COMMIT its offsets
        become the committed ones, unless a newer commit (later in the log) is there already;
        on ABORT they are dropped. The number of offsets made committed."""
        pending = self.pending_txn_offset_commits.pop(producer_id, None)
        if not pending or not is_commit:
            return 0
        applied = 0
        for tp, (om, position) in pending.items():
            if position is None:
                log.error("transactional offset commit of group %s for %s by producer %d has no log position at its "
                          "commit marker; dropped", self.group_id, tp, producer_id)
                continue
            if tp not in self.offsets or self.offset_positions.get(tp, -1) < position:
                self.offsets[tp] = om
                self.offset_positions[tp] = position
                applied += 1
        return applied

    def has_pending_offset_commits_for(self, tp: tuple[str, int]) -> bool:
        return tp in self.pending_offset_commits or any(
            tp in pending for pending in self.pending_txn_offset_commits.values())

    def has_pending_txn_offsets_for(self, producer_id: int) -> bool:
        return producer_id in self.pending_txn_offset_commits

    def remove_offsets(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], OffsetAndMetadata]:
        removed = {}
        for tp in tps:
            self.pending_offset_commits.pop(tp, None)
            for pending in self.pending_txn_offset_commits.values():
                pending.pop(tp, None)
            self.offset_positions.pop(tp, None)
            offset = self.offsets.pop(tp, None)
            if offset is not None:
                removed[tp] = offset
        return removed

    def remove_all_offsets(self) -> dict[tuple[str, int], OffsetAndMetadata]:
        return self.remove_offsets(list(self.offsets))

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> dict[tuple[str, int], OffsetAndMetadata]:
        """KIP-211: a group without members loses its offsets ``retention_ms`` after it became
        Empty; a Stable consumer group loses the offsets of topics it no longer subscribes to,
        counted from their commit; a group that never used group management ("simple") loses each
        offset ``retention_ms`` after its commit. Offsets with an explicit expire timestamp (the
        old OffsetCommit retention field) expire at it. Pending commits are never expired."""
        def expired(base_of, keep_topics: set[str] = frozenset()):
            out = {}
            for tp, om in self.offsets.items():
                if tp[0] in keep_topics or self.has_pending_offset_commits_for(tp):
                    continue
                if om.expire_timestamp is None:
                    if now_ms - base_of(om) >= retention_ms:
                        out[tp] = om
                elif now_ms >= om.expire_timestamp:
                    out[tp] = om
            return out

        if self.protocol_type is not None and self.in_state(EMPTY):
            state_time = self.current_state_timestamp
            result = expired(lambda om: state_time if state_time is not None else om.commit_timestamp)
        elif self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None and self.in_state(STABLE):
            result = expired(lambda om: om.commit_timestamp, self.subscribed_topics)
        elif self.protocol_type is None:
            result = expired(lambda om: om.commit_timestamp)
        else:
            result = {}
        for tp in result:
            del self.offsets[tp]
            self.offset_positions.pop(tp, None)
        return result

    def offset(self, tp: tuple[str, int]) -> OffsetAndMetadata | None:
        return self.offsets.get(tp)

    @property
    def num_offsets(self) -> int:
        return len(self.offsets)

    @property
    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_offset_commits) or bool(self.pending_txn_offset_commits)

    def __repr__(self) -> str:
        return (f"GroupMetadata(group_id={self.group_id}, generation={self.generation_id}, protocol_type={self.protocol_type}, "
                f"state={self.state}, members={list(self.members)})")
