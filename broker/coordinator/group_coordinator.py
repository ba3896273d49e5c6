"""GroupCoordinator: Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
and committed offsets (OffsetCommit, OffsetFetch, OffsetDelete), plus ListGroups,
DescribeGroups and DeleteGroups, for the groups whose ``__consumer_offsets`` partition this
broker leads.

A rebalance, as Kafka runs it:

1. A member joins (or an existing one rejoins with new metadata, or the leader rejoins, or a
   member leaves or fails): the group goes to PreparingRebalance, and a DelayedJoin waits up to
   the longest rebalance timeout for every known member to send JoinGroup; their requests are
   parked. An Empty group's first rebalance waits ``group.initial.rebalance.delay.ms`` instead
   (InitialDelayedJoin), extended while new members keep coming.
2. When all have joined (or time is up, and the laggards are removed), the next generation
   forms: a protocol is chosen by vote, the group moves to CompletingRebalance, and every parked
   JoinGroup is answered; the leader's answer carries every member's metadata.
3. The leader computes the assignment and sends it in SyncGroup; the followers' SyncGroups wait
   for it. Once the group metadata with the assignment is durably stored, the group is Stable
   and every parked SyncGroup gets its member's assignment.

Session timeouts run throughout through DelayedHeartbeat; members that do not send SyncGroup
within the rebalance timeout are removed (DelayedSync). A member joining while the group is
CompletingRebalance triggers a new rebalance, and the parked SyncGroups answer
REBALANCE_IN_PROGRESS. KIP-394: a JoinGroup v4+ without a member id is answered
MEMBER_ID_REQUIRED with a fresh id, which it must join with. KIP-345: a static member
(group.instance.id) that rejoins with an unknown member id replaces its old id, which is then
fenced (FENCED_INSTANCE_ID).

Results go to callbacks; nothing here encodes responses (see adapter.py).
"""

from __future__ import annotations

import itertools
import logging
from typing import Callable, Iterable

from protocol.clock import Time
from protocol.errors import ErrorCode

from ..purgatory import DelayedOperationPurgatory
from .config import GroupCoordinatorConfig
from .delayed import DelayedHeartbeat, DelayedJoin, DelayedSync, InitialDelayedJoin, join_key, member_key, sync_key
from .group_metadata import (COMPLETING_REBALANCE, DEAD, EMPTY, NEW_MEMBER_JOIN_TIMEOUT_MS, PREPARING_REBALANCE, STABLE,
                             UNKNOWN_MEMBER_ID, GroupMetadata, JoinGroupResult, MemberMetadata, MemberSummary,
                             OffsetAndMetadata, SyncGroupResult)
from .group_metadata_manager import GROUP_METADATA_TOPIC_NAME, AppendFn, GroupMetadataManager, PartitionData, Record

log = logging.getLogger("kbroker.coordinator")

JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]
TopicPartition = tuple[str, int]

# DescribeGroups of a group that does not exist / cannot be described
DEAD_GROUP = (str(DEAD), "", "", [])
EMPTY_GROUP = ("", "", "", [])

# The APIs whose group id may be empty (older clients commit offsets with ""), as Kafka's isValidGroupId.
# Records of __consumer_offsets decoded per slice of a load before yielding to the event loop.
LOAD_SLICE_RECORDS = 1000

_EMPTY_GROUP_ID_ALLOWED = frozenset({"offset_commit", "offset_fetch", "describe_groups", "delete_groups"})


class GroupCoordinator:
    def __init__(self, config: GroupCoordinatorConfig, time: Time, append: AppendFn) -> None:
        self.config = config
        self.time = time
        self.group_manager = GroupMetadataManager(config, time, append)
        self.heartbeat_purgatory = DelayedOperationPurgatory("Heartbeat", time)
        self.rebalance_purgatory = DelayedOperationPurgatory("Rebalance", time)
        self.is_active = False
        # KIP-890 verification of TxnOffsetCommit: (partition of __consumer_offsets, transactional
        # id, producer id, epoch, done(error)); set by the broker when it verifies transactions
        self.txn_verify: Callable[[int, str, int, int, Callable[[int], None]], None] | None = None

    def _now(self) -> int:
        return self.time.milliseconds()

    # -- lifecycle ---------------------------------------------------------------------
    def startup(self, enable_metadata_expiration: bool = True) -> None:
        if enable_metadata_expiration:
            self.group_manager.start_expiration()
        self.is_active = True

    def shutdown(self) -> None:
        """Stop answering (COORDINATOR_NOT_AVAILABLE), unload every group (parked requests answer
        NOT_COORDINATOR) and cancel every timer."""
        self.is_active = False
        self.group_manager.stop_expiration()
        for partition in sorted(self.group_manager.owned_partitions | self.group_manager.loading_partitions):
            self.group_manager.remove_groups_for_partition(partition, None, self._on_group_unloaded)
        self.heartbeat_purgatory.complete_all()
        self.rebalance_purgatory.complete_all()

    # -- validation --------------------------------------------------------------------
    def _validate_group_status(self, group_id: str | None, api: str) -> int | None:
        if group_id is None or (not group_id and api not in _EMPTY_GROUP_ID_ALLOWED):
            return ErrorCode.INVALID_GROUP_ID
        if not self.is_active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.group_manager.is_group_loading(group_id):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.group_manager.is_group_local(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    def _validate_current_member(self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
                                 operation: str) -> int | None:
        """A given group.instance.id must map to ``member_id``; the member must exist."""
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("Request memberId=%s for static member with groupInstanceId=%s is fenced by current memberId=%s "
                         "during operation %s", member_id, group_instance_id, current, operation)
                return ErrorCode.FENCED_INSTANCE_ID
            return None
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        """group.max.size: while rebalancing, count the members that have rejoined (so the last
        rejoiners of a shrunk limit are the ones refused); otherwise the group's size."""
        if group.in_state(EMPTY) or group.in_state(DEAD):
            return True
        if group.in_state(PREPARING_REBALANCE):
            return ((group.has(member_id) and group.get(member_id).is_awaiting_join)
                    or group.num_members_awaiting_join < self.config.group_max_size)
        return group.has(member_id) or group.size < self.config.group_max_size

    # -- JoinGroup ---------------------------------------------------------------------
    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None, require_known_member_id: bool,
                          support_skipping_assignment: bool, client_id: str, client_host: str, rebalance_timeout_ms: int,
                          session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                          callback: JoinCallback, reason: str | None = None) -> None:
        error = self._validate_group_status(group_id, "join_group")
        if error is not None:
            callback(JoinGroupResult(member_id, error))
            return
        if not (self.config.group_min_session_timeout_ms <= session_timeout_ms <= self.config.group_max_session_timeout_ms):
            callback(JoinGroupResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        # A group is created by a join without a member id; a known member id of no group is refused.
        group = self.group_manager.get_or_maybe_create_group(group_id, is_unknown_member)
        if group is None:
            callback(JoinGroupResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return
        join_reason = reason or "not provided"
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif is_unknown_member:
            self._do_new_member_join_group(group, group_instance_id, require_known_member_id, support_skipping_assignment,
                                           client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                                           protocol_type, protocols, callback, join_reason)
        else:
            self._do_current_member_join_group(group, member_id, group_instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                               callback, join_reason)
        if group.in_state(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _do_new_member_join_group(self, group, group_instance_id, require_known_member_id, support_skipping_assignment,
                                  client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                  protocols, callback, reason) -> None:
        if group.in_state(DEAD):
            # The group was just unloaded or deleted: let the member find the coordinator again.
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        elif not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        else:
            new_member_id = group.generate_member_id(client_id, group_instance_id)
            if group_instance_id is not None:
                old_member_id = group.current_static_member_id(group_instance_id)
                if old_member_id is not None:
                    log.info("Static member with groupInstanceId=%s and unknown member id joins group %s in %s state; "
                             "replacing previously mapped member %s", group_instance_id, group.group_id, group.state,
                             old_member_id)
                    self._update_static_member_and_rebalance(group, old_member_id, new_member_id, group_instance_id,
                                                             protocols, rebalance_timeout_ms, session_timeout_ms,
                                                             callback, reason, support_skipping_assignment)
                else:
                    self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms, new_member_id,
                                                   group_instance_id, client_id, client_host, protocol_type, protocols,
                                                   group, callback, reason)
            elif require_known_member_id:
                # KIP-394: remember the id, and have the member join again with it.
                log.info("Dynamic member with unknown member id joins group %s in %s state; created member id %s and "
                         "requested the member to rejoin with it", group.group_id, group.state, new_member_id)
                group.add_pending_member(new_member_id)
                self._add_pending_member_expiration(group, new_member_id, session_timeout_ms)
                callback(JoinGroupResult(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
            else:
                self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms, new_member_id, None, client_id,
                                               client_host, protocol_type, protocols, group, callback, reason)

    def _do_current_member_join_group(self, group, member_id, group_instance_id, client_id, client_host,
                                      rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, callback,
                                      reason) -> None:
        if group.in_state(DEAD):
            callback(JoinGroupResult(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            callback(JoinGroupResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            # A KIP-394 pending member comes back with its id: now it joins.
            if group_instance_id is not None:
                raise RuntimeError(f"JoinGroup with groupInstanceId={group_instance_id} for pending member {member_id}")
            log.info("Pending dynamic member %s joins group %s in %s state; adding it to the group", member_id,
                     group.group_id, group.state)
            self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms, member_id, None, client_id,
                                           client_host, protocol_type, protocols, group, callback, reason)
            return
        error = self._validate_current_member(group, member_id, group_instance_id, "join-group")
        if error is not None:
            callback(JoinGroupResult(member_id, error))
            return
        state = group.state
        if state is PREPARING_REBALANCE:
            member = group.get(member_id)
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              f"Member {member_id} joining group during {state}; client reason: {reason}",
                                              callback)
        elif state is COMPLETING_REBALANCE:
            member = group.get(member_id)
            if member.matches(protocols):
                # The same metadata (it may have missed the JoinGroup answer): the current generation again.
                callback(self._join_result(group, member_id, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  f"Updating metadata for member {member_id} during {state}; "
                                                  f"client reason: {reason}", callback)
        elif state is STABLE:
            member = group.get(member_id)
            if group.is_leader(member_id):
                # The leader rejoining forces a rebalance: it lets the leader react to changes the
                # member metadata does not show (new partitions of a subscribed topic).
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  f"Leader {member_id} re-joining group during {state}; "
                                                  f"client reason: {reason}", callback)
            elif not member.matches(protocols):
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  f"Updating metadata for member {member_id} during {state}; "
                                                  f"client reason: {reason}", callback)
            else:
                # A follower with unchanged metadata: the current generation, so it can SyncGroup.
                callback(self._join_result(group, member_id, with_members=False))
        else:  # Empty (Dead was answered above)
            log.warning("Attempt to add rejoining member %s of group %s in unexpected group state %s", member_id,
                        group.group_id, state)
            callback(JoinGroupResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _join_result(self, group: GroupMetadata, member_id: str, with_members: bool, skip_assignment: bool = False,
                     leader_id: str | None = None) -> JoinGroupResult:
        return JoinGroupResult(
            member_id=member_id, error=ErrorCode.NONE, generation_id=group.generation_id,
            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
            leader_id=(group.leader_id or UNKNOWN_MEMBER_ID) if leader_id is None else leader_id,
            skip_assignment=skip_assignment, members=group.current_member_metadata() if with_members else [])

    def _add_member_and_rebalance(self, rebalance_timeout_ms, session_timeout_ms, member_id, group_instance_id,
                                  client_id, client_host, protocol_type, protocols, group, callback, reason) -> None:
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        # the initial delayed join may be extended further
        if group.in_state(PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        # A new member's JoinGroup is parked with no way to heartbeat; expire it after a while so a
        # client that disconnected does not hold the rebalance for ever (it will retry if alive).
        self._complete_and_schedule_next_expiration(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"Adding new member {member_id} with group instance id "
                                             f"{group_instance_id}; client reason: {reason}")

    def _update_static_member_and_rebalance(self, group, old_member_id, new_member_id, group_instance_id, protocols,
                                            rebalance_timeout_ms, session_timeout_ms, callback, reason,
                                            support_skipping_assignment) -> None:
        current_leader = group.leader_id
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        # The old id's heartbeat expires without effect; the new id gets its own.
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
        old_protocols = member.supported_protocols
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        state = group.state
        if state is STABLE:
            # Without a change of the selected protocol the group stays Stable: only the member id
            # changed, which is persisted; otherwise rebalance so assignment and protocol agree.
            if group.protocol_name == group.select_protocol():
                log.info("Static member %s of group %s joined during Stable without changing the protocol: no rebalance",
                         group_instance_id, group.group_id)
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def on_stored(error: int) -> None:
                    if error != ErrorCode.NONE:
                        log.warning("Failed to persist metadata for group %s: %s", group.group_id, ErrorCode(error).name)
                        # undo: the old member id stays
                        group.update_member(member, old_protocols, old_rebalance_timeout_ms, old_session_timeout_ms, None)
                        old_member = group.replace_static_member(group_instance_id, new_member_id, old_member_id)
                        self._complete_and_schedule_next_heartbeat_expiration(group, old_member)
                        callback(JoinGroupResult(UNKNOWN_MEMBER_ID, error, group.generation_id, group.protocol_type,
                                                 group.protocol_name, current_leader or UNKNOWN_MEMBER_ID))
                    elif support_skipping_assignment:
                        # JoinGroup v9+: a static leader is told it leads but must not run the assignor.
                        is_leader = group.is_leader(new_member_id)
                        group.maybe_invoke_join_callback(member, self._join_result(
                            group, new_member_id, with_members=is_leader, skip_assignment=is_leader))
                    else:
                        # Before v9: answer with the old leader id, so a rejoined static leader does not
                        # take itself for the leader and compute an assignment a Stable group would ignore.
                        group.maybe_invoke_join_callback(member, self._join_result(
                            group, new_member_id, with_members=False, leader_id=current_leader or UNKNOWN_MEMBER_ID))

                self.group_manager.store_group(group, assignment, on_stored)
            else:
                self._maybe_prepare_rebalance(group, f"Group's selectedProtocol will change because static member "
                                                     f"{member.member_id} with instance id {group_instance_id} joined "
                                                     f"with change of protocol; client reason: {reason}")
        elif state is COMPLETING_REBALANCE:
            # The old id may already be in the leader's assignment: rebalance, or the new id gets none.
            self._prepare_rebalance(group, f"Updating metadata for static member {member.member_id} with instance id "
                                           f"{group_instance_id}; client reason: {reason}")
        elif state in (EMPTY, DEAD):
            raise RuntimeError(f"group {group.group_id} in state {state} when unknown static member {group_instance_id} "
                               "rejoins")

    def _update_member_and_rebalance(self, group, member, protocols, rebalance_timeout_ms, session_timeout_ms, reason,
                                     callback) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self._maybe_prepare_rebalance(group, reason)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        # members waiting in SyncGroup must rejoin
        if group.in_state(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        if group.in_state(EMPTY):
            delay = self.config.group_initial_rebalance_delay_ms
            op = InitialDelayedJoin(self, self.rebalance_purgatory, group, delay, delay,
                                    max(group.rebalance_timeout_ms - delay, 0))
        else:
            op = DelayedJoin(self, group, group.rebalance_timeout_ms)
        group.transition_to(PREPARING_REBALANCE, self._now())
        log.info("Preparing to rebalance group %s in state %s with old generation %d (%s-%d) (reason: %s)",
                 group.group_id, group.state, group.generation_id, GROUP_METADATA_TOPIC_NAME,
                 self.partition_for(group.group_id), reason)
        self.rebalance_purgatory.try_complete_else_watch(op, [join_key(group.group_id)])

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        # A new member may time out while its JoinGroup is parked: answer it (UNKNOWN_MEMBER_ID, so a
        # live consumer joins again) before removing it.
        group.maybe_invoke_join_callback(member, JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.in_state(STABLE) or group.in_state(COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.in_state(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        if group.in_state(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    # -- completing a join (DelayedJoin) ------------------------------------------------
    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool:
        return force_complete() if group.has_all_members_joined else False

    def on_complete_join(self, group: GroupMetadata) -> None:
        laggards = [m for m in group.not_yet_rejoined_members() if not m.is_static_member]
        if laggards:
            log.info("Group %s removed dynamic members who haven't joined: %s", group.group_id,
                     [m.member_id for m in laggards])
            for member in laggards:
                group.remove(member.member_id)
                self._remove_heartbeat_for_leaving_member(group, member.member_id)
        if group.in_state(DEAD):
            log.info("Group %s is dead, skipping rebalance stage", group.group_id)
        elif not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only static members are left): wait again, until session timeouts
            # remove the members that are gone.
            log.error("Group %s could not complete rebalance because no members rejoined", group.group_id)
            self.rebalance_purgatory.try_complete_else_watch(DelayedJoin(self, group, group.rebalance_timeout_ms),
                                                             [join_key(group.group_id)])
        else:
            group.init_next_generation(self._now())
            if group.in_state(EMPTY):
                log.info("Group %s with generation %d is now empty (%s-%d)", group.group_id, group.generation_id,
                         GROUP_METADATA_TOPIC_NAME, self.partition_for(group.group_id))

                def on_stored(error: int) -> None:
                    # If this is lost, the previous generation comes back on failover, and expires.
                    if error != ErrorCode.NONE:
                        log.warning("Failed to write empty metadata for group %s: %s", group.group_id, error)

                self.group_manager.store_group(group, {}, on_stored)
            else:
                log.info("Stabilized group %s generation %d (%s-%d) with %d members", group.group_id,
                         group.generation_id, GROUP_METADATA_TOPIC_NAME, self.partition_for(group.group_id), group.size)
                for member in list(group.members.values()):
                    result = self._join_result(group, member.member_id, with_members=group.is_leader(member.member_id))
                    group.maybe_invoke_join_callback(member, result)
                    self._complete_and_schedule_next_heartbeat_expiration(group, member)
                    member.is_new = False
                    group.add_pending_sync_member(member.member_id)
                self._schedule_pending_sync(group)

    # -- SyncGroup -----------------------------------------------------------------------
    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                          protocol_name: str | None, group_instance_id: str | None, assignment: dict[str, bytes],
                          callback: SyncCallback) -> None:
        error = self._validate_group_status(group_id, "sync_group")
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance in progress was lost with the old coordinator: have the member rejoin
            # (older clients do not expect COORDINATOR_LOAD_IN_PROGRESS here).
            callback(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
            return
        if error is not None:
            callback(SyncGroupResult(error))
            return
        group = self.group_manager.get_group(group_id)
        if group is None:
            callback(SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        error = self._validate_sync_group(group, generation_id, member_id, protocol_type, protocol_name,
                                          group_instance_id)
        if error is not None:
            callback(SyncGroupResult(error))
            return
        state = group.state
        if state is EMPTY:
            callback(SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif state is PREPARING_REBALANCE:
            callback(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif state is COMPLETING_REBALANCE:
            group.get(member_id).awaiting_sync_callback = callback
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                log.info("Assignment received from leader %s for group %s for generation %d. The group has %d members, "
                         "%d of which are static.", member_id, group_id, group.generation_id, group.size,
                         len(group.static_members))
                # members the leader left out get an empty assignment
                missing = [m for m in group.members if m not in assignment]
                if missing:
                    log.warning("Setting empty assignments for members %s of %s for generation %d", missing, group_id,
                                group.generation_id)
                full = {m: assignment.get(m, b"") for m in group.members}

                def on_stored(error: int) -> None:
                    # Someone may have joined meanwhile: act only if this generation is still completing.
                    if group.in_state(COMPLETING_REBALANCE) and generation_id == group.generation_id:
                        if error != ErrorCode.NONE:
                            self._reset_and_propagate_assignment_error(group, error)
                            self._maybe_prepare_rebalance(group, f"Error {error} when storing group assignment during "
                                                                 f"SyncGroup (member: {member_id})")
                        else:
                            self._set_and_propagate_assignment(group, full)
                            group.transition_to(STABLE, self._now())

                self.group_manager.store_group(group, full, on_stored)
        elif state is STABLE:
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            callback(SyncGroupResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
        else:
            raise RuntimeError(f"SyncGroup reached unexpected state {state} of group {group_id}")

    def _validate_sync_group(self, group, generation_id, member_id, protocol_type, protocol_name,
                             group_instance_id) -> int | None:
        if group.in_state(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, member_id, group_instance_id, "sync-group")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if protocol_type is not None and group.protocol_type != protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if protocol_name is not None and group.protocol_name != protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _set_and_propagate_assignment(self, group: GroupMetadata, assignment: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        self._propagate_assignment(group, ErrorCode.NONE)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: int) -> None:
        ok = error == ErrorCode.NONE
        protocol_type, protocol_name = (group.protocol_type, group.protocol_name) if ok else (None, None)
        for member in list(group.members.values()):
            if ok and not member.assignment:
                log.warning("Sending empty assignment to member %s of %s for generation %d with no errors",
                            member.member_id, group.group_id, group.generation_id)
            if group.maybe_invoke_sync_callback(member, SyncGroupResult(error, protocol_type, protocol_name,
                                                                        member.assignment)):
                # Restart the session timeout: an expiry that fired while the member waited for the
                # assignment was ignored, and nothing else would schedule the next one.
                self._complete_and_schedule_next_heartbeat_expiration(group, member)

    # -- pending sync (DelayedSync) -------------------------------------------------------
    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self.rebalance_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms), [sync_key(group.group_id)])

    def try_complete_pending_sync(self, group: GroupMetadata, generation_id: int,
                                  force_complete: Callable[[], bool]) -> bool:
        if generation_id != group.generation_id:
            return force_complete()
        if group.state in (DEAD, EMPTY, PREPARING_REBALANCE):
            return force_complete()
        return force_complete() if group.has_received_sync_from_all_members else False

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        if generation_id != group.generation_id:
            log.error("Unexpected sync expiration for %s with an old generation %d while the group has %d",
                      group.group_id, generation_id, group.generation_id)
        elif group.state in (DEAD, EMPTY, PREPARING_REBALANCE):
            log.error("Unexpected sync expiration after group %s already transitioned to %s", group.group_id, group.state)
        elif not group.has_received_sync_from_all_members:
            pending = sorted(group.pending_sync_members)
            for member_id in pending:
                group.remove(member_id)
                self._remove_heartbeat_for_leaving_member(group, member_id)
            log.debug("Group %s removed members who haven't sent their sync request: %s", group.group_id, pending)
            self._prepare_rebalance(group, f"Removing {pending} on pending sync request expiration")

    # -- Heartbeat ----------------------------------------------------------------------
    def handle_heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                         callback: Callable[[int], None]) -> None:
        error = self._validate_group_status(group_id, "heartbeat")
        if error is not None:
            # while loading, answer blindly: the member learns the truth from its next request
            callback(ErrorCode.NONE if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else error)
            return
        group = self.group_manager.get_group(group_id)
        if group is None:
            callback(ErrorCode.UNKNOWN_MEMBER_ID)
            return
        if group.in_state(DEAD):
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            error = self._validate_current_member(group, member_id, group_instance_id, "heartbeat")
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
        if error is None:
            state = group.state
            if state is EMPTY:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                # In CompletingRebalance a member may heartbeat right after its JoinGroup answer.
                self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
                error = ErrorCode.REBALANCE_IN_PROGRESS if state is PREPARING_REBALANCE else ErrorCode.NONE
        callback(error)

    def _complete_and_schedule_next_heartbeat_expiration(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def _complete_and_schedule_next_expiration(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int) -> None:
        key = member_key(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member.member_id, False, timeout_ms), [key])

    def _add_pending_member_expiration(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        self.heartbeat_purgatory.try_complete_else_watch(DelayedHeartbeat(self, group, member_id, True, timeout_ms),
                                                         [member_key(group.group_id, member_id)])

    def _remove_heartbeat_for_leaving_member(self, group: GroupMetadata, member_id: str) -> None:
        self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))

    def try_complete_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool,
                               force_complete: Callable[[], bool]) -> bool:
        if group.in_state(DEAD):
            return force_complete()
        if is_pending:
            # a pending member's expectation ends when it joins
            return force_complete() if group.has(member_id) else False
        if not group.has(member_id) or group.get(member_id).has_satisfied_heartbeat:
            return force_complete()
        return False

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        if group.in_state(DEAD):
            log.info("Heartbeat expiration for member %s after group %s was unloaded or deleted", member_id,
                     group.group_id)
        elif is_pending:
            log.info("Pending member %s in group %s has been removed after session timeout expiration", member_id,
                     group.group_id)
            self._remove_pending_member_and_update_group(group, member_id)
        elif not group.has(member_id):
            log.debug("Member %s has already been removed from the group", member_id)
        else:
            member = group.get(member_id)
            if not member.has_satisfied_heartbeat:
                log.info("Member %s in group %s has failed, removing it from the group", member_id, group.group_id)
                self._remove_member_and_update_group(group, member, f"removing member {member_id} on heartbeat expiration")

    # -- LeaveGroup ---------------------------------------------------------------------
    def handle_leave_group(self, group_id: str, leaving_members: list[tuple[str, str | None, str | None]],
                           callback: Callable[[int, list[tuple[str, str | None, int]]], None]) -> None:
        """``leaving_members``: (member_id, group_instance_id, reason). ``callback(top_level_error,
        [(member_id, group_instance_id, error)])``. A member may be named by its group.instance.id
        alone (member id ""): administrative removal of a static member."""
        error = self._validate_group_status(group_id, "leave_group")
        if error is not None:
            callback(error, [])
            return
        group = self.group_manager.get_group(group_id)
        if group is None:
            callback(ErrorCode.NONE, [(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i, _ in leaving_members])
            return
        if group.in_state(DEAD):
            callback(ErrorCode.COORDINATOR_NOT_AVAILABLE, [])
            return

        def remove_current_member(member_id: str, reason: str | None) -> None:
            member = group.get(member_id)
            self._remove_member_and_update_group(group, member, f"Removing member {member_id} on LeaveGroup; client "
                                                                f"reason: {reason or 'not provided'}")
            self._remove_heartbeat_for_leaving_member(group, member_id)
            log.info("Member %s has left group %s through explicit LeaveGroup; client reason: %s", member, group_id,
                     reason or "not provided")

        results = []
        for member_id, group_instance_id, reason in leaving_members:
            if member_id == UNKNOWN_MEMBER_ID:
                current = group.current_static_member_id(group_instance_id) if group_instance_id is not None else None
                if current is not None:
                    remove_current_member(current, reason)
                    results.append((member_id, group_instance_id, ErrorCode.NONE))
                else:
                    results.append((member_id, group_instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
            elif group.is_pending_member(member_id):
                self._remove_pending_member_and_update_group(group, member_id)
                self.heartbeat_purgatory.check_and_complete(member_key(group_id, member_id))
                log.info("Pending member %s has left group %s through explicit LeaveGroup", member_id, group_id)
                results.append((member_id, group_instance_id, ErrorCode.NONE))
            else:
                error = self._validate_current_member(group, member_id, group_instance_id, "leave-group")
                if error is None:
                    remove_current_member(member_id, reason)
                    error = ErrorCode.NONE
                results.append((member_id, group_instance_id, error))
        callback(ErrorCode.NONE, results)

    # -- offsets ------------------------------------------------------------------------
    def handle_commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                              offsets: dict[TopicPartition, OffsetAndMetadata],
                              callback: Callable[[dict[TopicPartition, int]], None]) -> None:
        error = self._validate_group_status(group_id, "offset_commit")
        if error is not None:
            callback({tp: error for tp in offsets})
            return
        group = self.group_manager.get_group(group_id)
        if group is None:
            if generation_id < 0:
                # not using group management: the commit creates a "simple" group
                log.info("Creating simple consumer group %s via manual offset commit", group_id)
                group = self.group_manager.add_group(GroupMetadata(group_id, EMPTY, self._now()))
            else:
                # or a commit from an older generation of a group that is gone
                callback({tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets})
                return
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            callback({tp: error for tp in offsets})
            return
        state = group.state
        if state is EMPTY:
            self.group_manager.store_offsets(group, member_id, offsets, callback)
        elif state in (STABLE, PREPARING_REBALANCE):
            # During PreparingRebalance commits are still taken: the member learns of the rebalance
            # from its next heartbeat.
            self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
            self.group_manager.store_offsets(group, member_id, offsets, callback)
        elif state is COMPLETING_REBALANCE:
            # The member has the new generation from JoinGroup but no assignment yet.
            callback({tp: ErrorCode.REBALANCE_IN_PROGRESS for tp in offsets})
        else:
            raise RuntimeError(f"offset commit reached unexpected state {state} of group {group_id}")

    def handle_txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                  group_instance_id: str | None, generation_id: int,
                                  offsets: dict[TopicPartition, OffsetAndMetadata],
                                  callback: Callable[[dict[TopicPartition, int]], None],
                                  transactional_id: str = "") -> None:
        """TxnOffsetCommit (KIP-98, KIP-447): the offsets are written in the producer's
        transaction and stay pending (OffsetFetch with require_stable answers
        UNSTABLE_OFFSET_COMMIT) until its marker completes them. An unknown group is created as
        a simple group when the generation is -1, else ILLEGAL_GENERATION; v3's generation,
        member id and group instance id are checked as an OffsetCommit's are (a zombie
        consumer of an older generation is fenced), but any group state takes the commit.

        With ``txn_verify`` set (KIP-890, ``transaction.partition.verification.enable``), the
        transaction coordinator first confirms the group's partition is in the producer's
        transaction at this producer id and epoch, as Kafka 3.6+ does; a refusal (a stale epoch,
        another producer id, a group never added with AddOffsetsToTxn) writes nothing."""
        error = self._validate_group_status(group_id, "txn_offset_commit")
        if error is not None:
            callback({tp: error for tp in offsets})
            return
        if self.txn_verify is None:
            self._txn_commit_offsets(group_id, producer_id, producer_epoch, member_id, group_instance_id,
                                     generation_id, offsets, callback)
            return

        def verified(error: int) -> None:
            if error != ErrorCode.NONE:
                log.warning("transactional offset commit of group %s by %r (producer id %d, epoch %d) refused by "
                            "the transaction coordinator: %s", group_id, transactional_id, producer_id, producer_epoch,
                            ErrorCode(error).name if error in ErrorCode._value2member_map_ else error)
                callback({tp: error for tp in offsets})
                return
            again = self._validate_group_status(group_id, "txn_offset_commit")  # it may have moved meanwhile
            if again is not None:
                callback({tp: again for tp in offsets})
                return
            self._txn_commit_offsets(group_id, producer_id, producer_epoch, member_id, group_instance_id,
                                     generation_id, offsets, callback)

        self.txn_verify(self.group_manager.partition_for(group_id), transactional_id, producer_id, producer_epoch,
                        verified)

    def _txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                            group_instance_id: str | None, generation_id: int,
                            offsets: dict[TopicPartition, OffsetAndMetadata],
                            callback: Callable[[dict[TopicPartition, int]], None]) -> None:
        group = self.group_manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                callback({tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets})
                return
            log.info("Creating simple consumer group %s via transactional offset commit", group_id)
            group = self.group_manager.add_group(GroupMetadata(group_id, EMPTY, self._now()))
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id, transactional=True)
        if error is not None:
            callback({tp: error for tp in offsets})
            return
        self.group_manager.store_offsets(group, member_id, offsets, callback, producer_id, producer_epoch)

    def handle_txn_completion(self, producer_id: int, partitions: Iterable[int], is_commit: bool) -> None:
        """A transaction marker landed on these ``__consumer_offsets`` partitions (WriteTxnMarkers)."""
        applied = self.group_manager.handle_txn_completion(producer_id, partitions, is_commit)
        log.debug("transaction of producer %d %s: %d offsets committed", producer_id,
                  "committed" if is_commit else "aborted", applied)

    def _validate_offset_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
                                group_instance_id: str | None, transactional: bool = False) -> int | None:
        if group.in_state(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.in_state(EMPTY):
            # the admin client or a consumer without group management: fine while the group has no members
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id,
                                                  "txn-offset-commit" if transactional else "offset-commit")
            if error is not None:
                return error
            return ErrorCode.ILLEGAL_GENERATION if generation_id != group.generation_id else None
        if transactional:
            # older TxnOffsetCommit versions carry no member id or generation
            return None
        if not group.in_state(EMPTY):
            # only members may commit to a group that has members
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def handle_fetch_offsets(self, group_id: str, require_stable: bool,
                             partitions: list[TopicPartition] | None = None) -> tuple[int, dict[TopicPartition, PartitionData]]:
        error = self._validate_group_status(group_id, "offset_fetch")
        if error is not None:
            return error, {}
        # whatever the group's state: a group may use Kafka only to store offsets
        return ErrorCode.NONE, self.group_manager.get_offsets(group_id, require_stable, partitions)

    def handle_delete_offsets(self, group_id: str,
                              partitions: list[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """(group error, partition errors); with a group error there are no partition errors."""
        error = self._validate_group_status(group_id, "offset_delete")
        if error is not None:
            return error, {}
        group = self.group_manager.get_group(group_id)
        if group is None or group.in_state(DEAD):
            return (ErrorCode.GROUP_ID_NOT_FOUND if self.group_manager.group_not_exists(group_id)
                    else ErrorCode.NOT_COORDINATOR), {}
        partition_errors: dict[TopicPartition, int] = {}
        if group.in_state(EMPTY):
            eligible = list(partitions)
        elif group.is_consumer_group:
            eligible = []
            for tp in partitions:
                if group.is_subscribed_to_topic(tp[0]):
                    partition_errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            removed = self.group_manager.cleanup_group_metadata([group], lambda g: g.remove_offsets(eligible))
            for tp in eligible:
                partition_errors[tp] = ErrorCode.NONE
            log.info("Deleted offsets %s of group %s (%d removed)", eligible, group_id, removed)
        return ErrorCode.NONE, partition_errors

    def handle_deleted_partitions(self, partitions: list[TopicPartition]) -> int:
        """Topics were deleted: drop their committed offsets from every group."""
        removed = self.group_manager.cleanup_group_metadata(self.group_manager.current_groups,
                                                            lambda g: g.remove_offsets(partitions))
        log.info("Removed %d offsets associated with deleted partitions", removed)
        return removed

    # -- ListGroups / DescribeGroups / DeleteGroups ------------------------------------
    def handle_list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[int, list[tuple[str, str, str]]]:
        """(error, [(group id, protocol type, state)]). Every group here is a classic group."""
        if not self.is_active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.group_manager.is_loading else ErrorCode.NONE
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and "classic" not in wanted_types:
            return error, []
        return error, [(g.group_id, g.protocol_type or "", str(g.state)) for g in self.group_manager.current_groups
                       if not wanted_states or g.is_in_states(wanted_states)]

    def handle_describe_group(self, group_id: str) -> tuple[int, tuple[str, str, str, list[MemberSummary]]]:
        """(error, (state, protocol type, protocol, members)); a group that does not exist reads as Dead."""
        error = self._validate_group_status(group_id, "describe_groups")
        if error is not None:
            return error, EMPTY_GROUP
        group = self.group_manager.get_group(group_id)
        if group is None:
            return ErrorCode.NONE, DEAD_GROUP
        return ErrorCode.NONE, group.summary()

    def handle_delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """Only groups without members (Empty) can be deleted: NON_EMPTY_GROUP otherwise."""
        errors: dict[str, int] = {}
        eligible: list[GroupMetadata] = []
        for group_id in group_ids:
            error = self._validate_group_status(group_id, "delete_groups")
            if error is not None:
                errors[group_id] = error
                continue
            group = self.group_manager.get_group(group_id)
            if group is None or group.in_state(DEAD):
                errors[group_id] = (ErrorCode.GROUP_ID_NOT_FOUND if self.group_manager.group_not_exists(group_id)
                                    else ErrorCode.NOT_COORDINATOR)
            elif group.in_state(EMPTY):
                group.transition_to(DEAD, self._now())
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.NON_EMPTY_GROUP
        if eligible:
            removed = self.group_manager.cleanup_group_metadata(eligible, lambda g: g.remove_all_offsets())
            for group in eligible:
                errors[group.group_id] = ErrorCode.NONE
            log.info("The following groups were deleted: %s. A total of %d offsets were removed.",
                     ", ".join(g.group_id for g in eligible), removed)
        return errors

    # -- leadership of __consumer_offsets partitions -----------------------------------
    def partition_for(self, group_id: str) -> int:
        return self.group_manager.partition_for(group_id)

    def on_election(self, partition: int, epoch: int | None,
                    read_records: Callable[[Callable[[Iterable[Record] | None], None]], None]) -> None:
        """Elected leader of ``partition``: load its groups and offsets. ``read_records(done)`` hands
        the partition's (key, value) records in log order to ``done`` (None: there is no log), now
        or later, as an iterable that may read the log lazily. They are decoded
        ``LOAD_SLICE_RECORDS`` at a time, yielding to the event loop between slices (Kafka loads on
        its own scheduler thread), so a large partition does not stall the broker; until the last
        slice the partition's groups answer COORDINATOR_LOAD_IN_PROGRESS. A load overtaken by a
        resignation or a newer election stops at its next slice and is discarded."""
        log.info("Elected as the group coordinator for partition %d in epoch %s", partition, epoch)
        manager = self.group_manager
        token = manager.begin_loading(partition, epoch)
        if token is None:
            return

        def done(records: Iterable[Record] | None) -> None:
            if records is None:
                log.warning("Loading %s-%d found no log", GROUP_METADATA_TOPIC_NAME, partition)
                manager.complete_loading(partition, token, None, self._on_group_loaded)
                return
            load = manager.start_load(partition)
            it = iter(records)

            def step() -> None:
                if not manager.load_is_current(partition, token):
                    log.info("Load of %s-%d in epoch %s stopped after %d records: resigned or re-elected meanwhile",
                             GROUP_METADATA_TOPIC_NAME, partition, epoch, load.records)
                    _close(it)
                    return
                try:
                    more = load.add(itertools.islice(it, LOAD_SLICE_RECORDS)) == LOAD_SLICE_RECORDS
                except Exception:
                    # as Kafka: the partition is owned even though its state could not be read
                    log.exception("Reading %s-%d failed", GROUP_METADATA_TOPIC_NAME, partition)
                    _close(it)
                    manager.complete_loading(partition, token, None, self._on_group_loaded)
                    return
                if more:
                    self.time.schedule(0, step)
                else:
                    manager.complete_loading(partition, token, load, self._on_group_loaded)

            step()

        try:
            read_records(done)
        except Exception:
            # as Kafka: the partition is owned even though its state could not be read
            log.exception("Reading %s-%d failed", GROUP_METADATA_TOPIC_NAME, partition)
            done(None)

    def on_resignation(self, partition: int, epoch: int | None = None) -> None:
        log.info("Resigned as the group coordinator for partition %d in epoch %s", partition, epoch)
        self.group_manager.remove_groups_for_partition(partition, epoch, self._on_group_unloaded)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        log.info("Loading group metadata for %s with generation %d", group.group_id, group.generation_id)
        if group.size > self.config.group_max_size:
            self._prepare_rebalance(group, f"Freshly-loaded group is over capacity ({self.config.group_max_size}). "
                                           "Rebalancing in order to give a chance for consumers to commit offsets")
        for member in list(group.members.values()):
            self._complete_and_schedule_next_heartbeat_expiration(group, member)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        log.info("Unloading group metadata for %s with generation %d", group.group_id, group.generation_id)
        previous = group.state
        group.transition_to(DEAD, self._now())
        if previous is PREPARING_REBALANCE:
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(member, JoinGroupResult(member.member_id, ErrorCode.NOT_COORDINATOR))
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
        elif previous in (STABLE, COMPLETING_REBALANCE):
            for member in list(group.members.values()):
                group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.NOT_COORDINATOR))
                self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member.member_id))
        self._remove_sync_expiration(group)


def _close(it) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        close()
