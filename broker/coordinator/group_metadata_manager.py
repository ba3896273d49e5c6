"""GroupMetadataManager: the groups this broker coordinates, and their durable form in
``__consumer_offsets``.

A group lives in partition ``abs(hashCode(group_id)) % offsets.topic.num.partitions`` of
``__consumer_offsets`` (Java's String.hashCode, Kafka's Utils.abs), and the leader of that
partition is its coordinator. The manager

* tracks which of those partitions this broker leads (owned) and which it is still loading;
* loads a partition's groups and offsets from its records, in log order, when elected, and drops
  them when it resigns;
* stores group metadata (after each rebalance) and offset commits through an injected ``append``
  (an acks=all replicated append in production), changing the in-memory state and answering
  only once the append succeeded, with append errors mapped as Kafka maps them;
* expires offsets (``offsets.retention.minutes``) and removes dead groups, writing tombstones.

The injected append is ``append(partition, records, callback)``: ``records`` a list of
(key bytes, value bytes or None for a tombstone), ``callback(error_code)`` called once with
0 when every replica in the ISR has them, or the produce error.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Callable, Iterable

from protocol.clock import Time, TimerHandle
from protocol.errors import ErrorCode
from protocol.messages import consumer_offsets as co
from protocol.schema import SchemaError

from .config import GroupCoordinatorConfig
from .group_metadata import DEAD, EMPTY, STABLE, GroupMetadata, MemberMetadata, OffsetAndMetadata

log = logging.getLogger("kbroker.coordinator")

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"

Record = tuple[bytes, "bytes | None"]
AppendCallback = Callable[[int], None]
AppendFn = Callable[[int, list, AppendCallback], None]
TopicPartition = tuple[str, int]

INT_MIN = -(1 << 31)


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A record of a transactional batch of ``__consumer_offsets`` (a TxnOffsetCommit), as a load
    reads it: pending until its producer's marker."""

    producer_id: int
    key: bytes
    value: "bytes | None"


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A COMMIT or ABORT marker of ``__consumer_offsets``, as a load reads it."""

    producer_id: int
    commit: bool


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, in int32."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: the absolute value, except Integer.MIN_VALUE gives 0 (not itself)."""
    return 0 if n == INT_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions


def java_string_length(s: str) -> int:
    """String.length(): UTF-16 code units (what offset.metadata.max.bytes is compared with)."""
    return len(s.encode("utf-16-le")) // 2


def store_group_error(error: int) -> int:
    """A failed group metadata append, as the JoinGroup/SyncGroup error the member gets."""
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error == ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return error


def offset_commit_error(error: int) -> int:
    """A failed offset commit append, as the OffsetCommit partition error (maybeConvertOffsetCommitError)."""
    if error == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return error


@dataclass(frozen=True, slots=True)
class PartitionData:
    """One partition of an OffsetFetch answer."""

    offset: int
    leader_epoch: int | None
    metadata: str
    error: int


INVALID_OFFSET = -1
NO_METADATA = ""
_NO_OFFSET = PartitionData(INVALID_OFFSET, None, NO_METADATA, ErrorCode.NONE)
_UNSTABLE = PartitionData(INVALID_OFFSET, None, NO_METADATA, ErrorCode.UNSTABLE_OFFSET_COMMIT)


def group_metadata_record_value(group: GroupMetadata, assignment: dict[str, bytes]) -> dict:
    """The GroupMetadataValue of a group (every member needs an assignment; the selected protocol
    must be set when there are members)."""
    members = []
    for m in group.members.values():
        if group.protocol_name is None:
            raise RuntimeError(f"non-empty group {group.group_id} without a protocol")
        if m.member_id not in assignment:
            raise RuntimeError(f"member {m.member_id} of group {group.group_id} has no assignment")
        members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                        "client_host": m.client_host, "rebalance_timeout": m.rebalance_timeout_ms,
                        "session_timeout": m.session_timeout_ms, "subscription": m.metadata(group.protocol_name),
                        "assignment": assignment[m.member_id]})
    return {"protocol_type": group.protocol_type or "", "generation": group.generation_id,
            "protocol": group.protocol_name, "leader": group.leader_id,
            "current_state_timestamp": -1 if group.current_state_timestamp is None else group.current_state_timestamp,
            "members": members}


def read_group(group_id: str, value, now_ms: int) -> GroupMetadata:
    """A GroupMetadata from a decoded GroupMetadataValue: Stable with its members, Empty without."""
    members = []
    for m in value.members:
        members.append(MemberMetadata(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.session_timeout if value.version == 0 else m.rebalance_timeout, m.session_timeout,
            value.protocol_type, [(value.protocol, bytes(m.subscription))], bytes(m.assignment)))
    group = GroupMetadata(group_id, STABLE if members else EMPTY, now_ms)
    group.generation_id = value.generation
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    group.leader_id = value.leader
    group.current_state_timestamp = None if value.current_state_timestamp == -1 else value.current_state_timestamp
    for member in members:
        group.add(member)
    group.subscribed_topics = group.compute_subscribed_topics()
    return group


def read_offset(value) -> OffsetAndMetadata:
    return OffsetAndMetadata(value.offset, None if value.leader_epoch == -1 else value.leader_epoch, value.metadata,
                             value.commit_timestamp, None if value.expire_timestamp == -1 else value.expire_timestamp)


class PartitionLoad:
    """The groups and offsets of one ``__consumer_offsets`` partition as its records are decoded,
    in log order, slice by slice (``add``), then installed in the cache at once (``install``)."""

    def __init__(self, partition: int, start_ms: int, positions: "itertools.count[int] | None" = None) -> None:
        self.partition = partition
        self.start_ms = start_ms
        self.offsets: dict[tuple[str, str, int], OffsetAndMetadata] = {}
        # each record's position in the log (which of two commits is newer), from the manager's counter
        self._positions = positions if positions is not None else itertools.count()
        self.positions: dict[tuple[str, str, int], int] = {}
        # transactional commits per producer id, until its marker: gtp -> (offset, position)
        self.pending_txn: dict[int, dict[tuple[str, str, int], tuple[OffsetAndMetadata, int]]] = {}
        self.groups: dict[str, GroupMetadata] = {}
        self.removed_groups: set[str] = set()
        self.records = 0

    def add(self, records: Iterable[Record]) -> int:
        """Decode ``records``; the number of them. An undecodable record is logged and skipped."""
        partition, now = self.partition, self.start_ms
        loaded_offsets, loaded_groups, removed_groups = self.offsets, self.groups, self.removed_groups
        n = 0
        positions, pending_txn = self.positions, self.pending_txn
        for item in records:
            n += 1
            producer_id = -1
            if type(item) is TxnMarker:
                self._end_txn(item.producer_id, item.commit)
                continue
            if type(item) is TxnRecord:
                producer_id, key_bytes, value_bytes = item.producer_id, item.key, item.value
            else:
                key_bytes, value_bytes = item  # type: ignore[misc]
            if key_bytes is None:
                log.warning("%s-%d: a record without a key; skipped", GROUP_METADATA_TOPIC_NAME, partition)
                continue
            try:
                key = co.read_message_key(key_bytes)
                if isinstance(key, co.OffsetKey):
                    gtp = (key.group, key.topic, key.partition)
                    if producer_id >= 0:
                        pending = pending_txn.setdefault(producer_id, {})
                        if value_bytes is None:
                            pending.pop(gtp, None)
                        else:
                            pending[gtp] = (read_offset(co.read_offset_commit_value(value_bytes)), next(self._positions))
                    elif value_bytes is None:
                        loaded_offsets.pop(gtp, None)
                        positions.pop(gtp, None)
                    else:
                        loaded_offsets[gtp] = read_offset(co.read_offset_commit_value(value_bytes))
                        positions[gtp] = next(self._positions)
                elif isinstance(key, co.GroupMetadataKey):
                    if value_bytes is None:
                        loaded_groups.pop(key.group, None)
                        removed_groups.add(key.group)
                    else:
                        removed_groups.discard(key.group)
                        loaded_groups[key.group] = read_group(key.group, co.read_group_metadata_value(value_bytes), now)
                else:
                    log.warning("Unknown message key with version %d while loading %s-%d; ignored (a left over from an "
                                "aborted upgrade?)", key.version, GROUP_METADATA_TOPIC_NAME, partition)
            except SchemaError as exc:
                # Kafka abandons the whole partition on an undecodable record; one bad record should
                # not cost every group of the partition its state, so it is skipped.
                log.error("Undecodable record in %s-%d skipped: %s", GROUP_METADATA_TOPIC_NAME, partition, exc)
        self.records += n
        return n

    def _end_txn(self, producer_id: int, commit: bool) -> None:
        """Kafka's loader on a marker: a COMMIT makes the producer's pending offsets committed
        unless a newer commit of the partition came before the marker; an ABORT drops them."""
        pending = self.pending_txn.pop(producer_id, None)
        if not pending or not commit:
            return
        for gtp, (om, position) in pending.items():
            if gtp not in self.offsets or self.positions.get(gtp, -1) < position:
                self.offsets[gtp] = om
                self.positions[gtp] = position

    def install(self, manager: "GroupMetadataManager", on_group_loaded: Callable[[GroupMetadata], None]) -> None:
        partition, now = self.partition, self.start_ms
        offsets_by_group: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        positions_by_group: dict[str, dict[TopicPartition, int]] = {}
        for (group_id, topic, p), om in self.offsets.items():
            offsets_by_group.setdefault(group_id, {})[(topic, p)] = om
            positions_by_group.setdefault(group_id, {})[(topic, p)] = self.positions.get((group_id, topic, p), -1)
        pending_by_group: dict[str, dict[int, dict[TopicPartition, tuple[OffsetAndMetadata, int]]]] = {}
        for producer_id, pending in self.pending_txn.items():
            for (group_id, topic, p), entry in pending.items():
                pending_by_group.setdefault(group_id, {}).setdefault(producer_id, {})[(topic, p)] = entry
        for group in self.groups.values():
            manager._load_group(group, offsets_by_group.get(group.group_id, {}), on_group_loaded,
                                positions_by_group.get(group.group_id), pending_by_group.get(group.group_id))
        # Groups that only store offsets (no members, so no metadata in the log): Empty groups.
        for group_id in {*offsets_by_group, *pending_by_group}:
            if group_id not in self.groups:
                manager._load_group(GroupMetadata(group_id, EMPTY, now), offsets_by_group.get(group_id, {}),
                                    on_group_loaded, positions_by_group.get(group_id), pending_by_group.get(group_id))
        for group_id in self.removed_groups:
            if group_id in manager.groups and group_id not in offsets_by_group:
                log.error("Unexpected unload of active group %s while loading %s-%d", group_id,
                          GROUP_METADATA_TOPIC_NAME, partition)


class GroupMetadataManager:
    def __init__(self, config: GroupCoordinatorConfig, time: Time, append: AppendFn) -> None:
        self.config = config
        self.time = time
        self.append = append
        self.groups: dict[str, GroupMetadata] = {}
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        self.epoch_for_partition: dict[int, int] = {}
        self._load_tokens: dict[int, object] = {}
        self._expiration_timer: TimerHandle | None = None
        self.num_partitions = config.offsets_topic_num_partitions
        # log positions of offset commits, in append order (loads and live appends alike)
        self._positions: itertools.count[int] = itertools.count()

    # -- placement -----------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def is_partition_owned(self, partition: int) -> bool:
        return partition in self.owned_partitions

    def is_partition_loading(self, partition: int) -> bool:
        return partition in self.loading_partitions

    def is_group_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned_partitions

    def is_group_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading_partitions

    @property
    def is_loading(self) -> bool:
        return bool(self.loading_partitions)

    def group_not_exists(self, group_id: str) -> bool:
        """Ours, and not there (or Dead)."""
        if not self.is_group_local(group_id):
            return False
        group = self.groups.get(group_id)
        return group is None or group.in_state(DEAD)

    # -- the cache -----------------------------------------------------------------------
    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def get_or_maybe_create_group(self, group_id: str, create_if_not_exist: bool) -> GroupMetadata | None:
        group = self.groups.get(group_id)
        if group is None and create_if_not_exist:
            group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.time.milliseconds())
        return group

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        """The cached group of that id if there is one, else ``group`` (now cached)."""
        return self.groups.setdefault(group.group_id, group)

    @property
    def current_groups(self) -> list[GroupMetadata]:
        return list(self.groups.values())

    def _append(self, partition: int, records: list, callback: AppendCallback,
                producer: tuple[int, int] | None = None) -> None:
        try:
            if producer is None:
                self.append(partition, records, callback)
            else:
                self.append(partition, records, callback, producer)  # type: ignore[call-arg]
        except Exception:
            log.exception("append to %s-%d failed", GROUP_METADATA_TOPIC_NAME, partition)
            callback(ErrorCode.UNKNOWN_SERVER_ERROR)

    # -- storing -------------------------------------------------------------------------
    def store_group(self, group: GroupMetadata, assignment: dict[str, bytes], callback: Callable[[int], None]) -> None:
        """Write the group's metadata with ``assignment``; ``callback(error)`` once it is durable
        (the error already mapped for the member)."""
        partition = self.partition_for(group.group_id)
        if partition not in self.owned_partitions:
            callback(ErrorCode.NOT_COORDINATOR)
            return
        value = co.group_metadata_value(group_metadata_record_value(group, assignment))
        generation = group.generation_id

        def on_append(error: int) -> None:
            if error != ErrorCode.NONE:
                log.debug("metadata of group %s generation %d failed to append: %s", group.group_id, generation,
                          _name(error))
                error = store_group_error(error)
            callback(error)

        self._append(partition, [(co.group_metadata_key(group.group_id), value)], on_append)

    def store_offsets(self, group: GroupMetadata, member_id: str, offsets: dict[TopicPartition, OffsetAndMetadata],
                      callback: Callable[[dict[TopicPartition, int]], None], producer_id: int = -1,
                      producer_epoch: int = -1) -> None:
        """Append the commits and apply them once the append succeeded; ``callback`` gets the
        error of every partition (OFFSET_METADATA_TOO_LARGE for those whose metadata is over
        ``offset.metadata.max.bytes``, which are not written).

        With ``producer_id`` (TxnOffsetCommit) the records go in a transactional batch of that
        producer and epoch (an older epoch than the partition's last is refused,
        INVALID_PRODUCER_EPOCH) and stay pending until the producer's marker:
        ``handle_txn_completion``."""
        max_len = self.config.offset_metadata_max_bytes
        too_large = {tp for tp, om in offsets.items() if om.metadata is not None and java_string_length(om.metadata) > max_len}
        filtered = {tp: om for tp, om in offsets.items() if tp not in too_large}
        if not filtered:
            callback({tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})
            return
        partition = self.partition_for(group.group_id)
        if partition not in self.owned_partitions:
            callback({tp: ErrorCode.NOT_COORDINATOR for tp in offsets})
            return
        records = [(co.offset_commit_key(group.group_id, tp[0], tp[1]),
                    co.offset_commit_value(om.offset, -1 if om.leader_epoch is None else om.leader_epoch, om.metadata,
                                           om.commit_timestamp, om.expire_timestamp))
                   for tp, om in filtered.items()]

        position = next(self._positions)
        transactional = producer_id >= 0

        def on_append(error: int) -> None:
            if error == ErrorCode.NONE:
                if not group.in_state(DEAD):
                    for tp, om in filtered.items():
                        if transactional:
                            group.on_txn_offset_commit_append(producer_id, tp, om, position)
                        else:
                            group.on_offset_commit_append(tp, om, position)
            else:
                if not group.in_state(DEAD):
                    for tp, om in filtered.items():
                        if transactional:
                            group.fail_pending_txn_offset_commit(producer_id, tp, om)
                        else:
                            group.fail_pending_offset_write(tp, om)
                log.debug("offset commit of group %s member %s failed to append: %s", group.group_id, member_id,
                          _name(error))
                error = offset_commit_error(error)
            callback({tp: ErrorCode.OFFSET_METADATA_TOO_LARGE if tp in too_large else error for tp in offsets})

        if transactional:
            group.prepare_txn_offset_commit(producer_id, filtered)
            self._append(partition, records, on_append, (producer_id, producer_epoch))
        else:
            group.prepare_offset_commit(filtered)
            self._append(partition, records, on_append)

    def handle_txn_completion(self, producer_id: int, partitions: Iterable[int], is_commit: bool) -> int:
        """The producer's COMMIT or ABORT marker is in these ``__consumer_offsets`` partitions:
        complete the pending transactional offsets of their groups (Kafka's
        scheduleHandleTxnCompletion). The number of offsets made committed."""
        wanted = set(partitions)
        applied = 0
        for group in list(self.groups.values()):
            if self.partition_for(group.group_id) in wanted and group.has_pending_txn_offsets_for(producer_id) \
                    and not group.in_state(DEAD):
                applied += group.complete_pending_txn_offset_commit(producer_id, is_commit)
        return applied

    def get_offsets(self, group_id: str, require_stable: bool,
                    partitions: list[TopicPartition] | None) -> dict[TopicPartition, PartitionData]:
        """Never a stale offset: the committed one, or -1 when there is none (all of the group's
        partitions when ``partitions`` is None). With ``require_stable``, a partition with a
        commit in flight answers UNSTABLE_OFFSET_COMMIT."""
        group = self.groups.get(group_id)
        if group is None or group.in_state(DEAD):
            return {tp: _NO_OFFSET for tp in (partitions or ())}
        out = {}
        for tp in (list(group.offsets) if partitions is None else partitions):
            if require_stable and group.has_pending_offset_commits_for(tp):
                out[tp] = _UNSTABLE
                continue
            om = group.offset(tp)
            out[tp] = _NO_OFFSET if om is None else PartitionData(om.offset, om.leader_epoch, om.metadata, ErrorCode.NONE)
        return out

    # -- loading and unloading -----------------------------------------------------------
    def _maybe_update_epoch(self, partition: int, epoch: int | None) -> bool:
        """Keep the highest epoch seen; True if ``epoch`` is None or is that highest epoch
        (a load or unload from an older LeaderAndIsr is ignored)."""
        current = self.epoch_for_partition.get(partition)
        if epoch is not None and (current is None or epoch > current):
            self.epoch_for_partition[partition] = epoch
            current = epoch
        return epoch is None or epoch == current

    def begin_loading(self, partition: int, epoch: int | None) -> object | None:
        """Mark ``partition`` loading (requests for its groups answer COORDINATOR_LOAD_IN_PROGRESS)
        and return the token of this load (see ``load_is_current``). None when the epoch is stale
        or the partition is already owned or loading in this epoch; an election in a newer epoch
        while an older load runs starts a new load (the old one is then discarded)."""
        loading_epoch = self.epoch_for_partition.get(partition)
        if not self._maybe_update_epoch(partition, epoch):
            log.info("Not loading %s-%d in epoch %s: the current epoch is %s", GROUP_METADATA_TOPIC_NAME, partition,
                     epoch, self.epoch_for_partition.get(partition))
            return None
        restart = (partition in self.loading_partitions and epoch is not None and loading_epoch is not None
                   and epoch > loading_epoch)
        if partition in self.owned_partitions or (partition in self.loading_partitions and not restart):
            log.info("Already loading or loaded %s-%d", GROUP_METADATA_TOPIC_NAME, partition)
            return None
        self.loading_partitions.add(partition)
        token = self._load_tokens[partition] = object()
        return token

    def load_is_current(self, partition: int, token: object) -> bool:
        """Whether the load ``token`` (from ``begin_loading``) is still the one wanted: the partition
        was neither unloaded nor elected again (in a newer epoch) since it began."""
        return partition in self.loading_partitions and self._load_tokens.get(partition) is token

    def start_load(self, partition: int) -> "PartitionLoad":
        """The decoding state of the current load of ``partition``, fed slice by slice."""
        return PartitionLoad(partition, self.time.milliseconds(), self._positions)

    def complete_loading(self, partition: int, token: object, load: "PartitionLoad | None",
                         on_group_loaded: Callable[[GroupMetadata], None]) -> bool:
        """Install the groups and offsets ``load`` decoded (None: there was no log, or it could not
        be read) and own the partition. False (and nothing installed) if the load is no longer
        current (``load_is_current``)."""
        if not self.load_is_current(partition, token):
            log.info("Discarding the load of %s-%d: resigned or re-elected meanwhile", GROUP_METADATA_TOPIC_NAME,
                     partition)
            return False
        start = self.time.milliseconds()
        try:
            if load is not None:
                load.install(self, on_group_loaded)
        except Exception:
            log.exception("Error loading offsets from %s-%d", GROUP_METADATA_TOPIC_NAME, partition)
        finally:
            self.owned_partitions.add(partition)
            self.loading_partitions.discard(partition)
            self._load_tokens.pop(partition, None)
        log.info("Finished loading offsets and group metadata from %s-%d in %d ms", GROUP_METADATA_TOPIC_NAME, partition,
                 self.time.milliseconds() - (load.start_ms if load is not None else start))
        return True

    def _load_group(self, group: GroupMetadata, offsets: dict, on_group_loaded: Callable[[GroupMetadata], None],
                    positions: dict | None = None, pending_txn: dict | None = None) -> None:
        group.initialize_offsets(offsets, positions, pending_txn)
        current = self.add_group(group)
        if current is not group:
            log.debug("Loading group %s generation %d found generation %d already cached", group.group_id,
                      group.generation_id, current.generation_id)
            return
        on_group_loaded(group)

    def remove_groups_for_partition(self, partition: int, epoch: int | None,
                                    on_group_unloaded: Callable[[GroupMetadata], None]) -> None:
        """Resigned: drop every group of ``partition`` (each is handed to ``on_group_unloaded`` first)."""
        if not self._maybe_update_epoch(partition, epoch):
            log.info("Not unloading %s-%d in epoch %s: the current epoch is %s", GROUP_METADATA_TOPIC_NAME, partition,
                     epoch, self.epoch_for_partition.get(partition))
            return
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        self._load_tokens.pop(partition, None)
        removed_groups = removed_offsets = 0
        for group in list(self.groups.values()):
            if self.partition_for(group.group_id) == partition:
                on_group_unloaded(group)
                if self.groups.get(group.group_id) is group:
                    del self.groups[group.group_id]
                removed_groups += 1
                removed_offsets += group.num_offsets
        log.info("Finished unloading %s-%d: removed %d cached offsets and %d cached groups", GROUP_METADATA_TOPIC_NAME,
                 partition, removed_offsets, removed_groups)

    # -- expiry and deletion -------------------------------------------------------------
    def start_expiration(self) -> None:
        """Run ``cleanup_group_metadata`` now and every ``offsets.retention.check.interval.ms``."""
        def tick() -> None:
            self._expiration_timer = self.time.schedule(self.config.offsets_retention_check_interval_ms, tick)
            self.cleanup_expired()

        self._expiration_timer = self.time.schedule(0, tick)

    def stop_expiration(self) -> None:
        if self._expiration_timer is not None:
            self._expiration_timer.cancel()
            self._expiration_timer = None

    def cleanup_expired(self) -> int:
        now = self.time.milliseconds()
        retention = self.config.offsets_retention_ms
        removed = self.cleanup_group_metadata(self.current_groups, lambda g: g.remove_expired_offsets(now, retention))
        if removed:
            log.info("Removed %d expired offsets in %d milliseconds", removed, self.time.milliseconds() - now)
        return removed

    def cleanup_group_metadata(self, groups: Iterable[GroupMetadata],
                               selector: Callable[[GroupMetadata], dict[TopicPartition, OffsetAndMetadata]]) -> int:
        """Remove offsets (``selector`` picks and removes them) and write their tombstones; a group
        left Empty without offsets becomes Dead and leaves the cache, with a tombstone for its
        metadata unless it never had a generation (offset storage only). The tombstones need no
        acknowledgement: if they are lost, the next pass writes them again."""
        offsets_removed = 0
        for group in groups:
            group_id = group.group_id
            removed = selector(group)
            if group.in_state(EMPTY) and not group.has_offsets:
                log.info("Group %s transitioned to Dead in generation %d", group_id, group.generation_id)
                group.transition_to(DEAD, self.time.milliseconds())
            partition = self.partition_for(group_id)
            if partition not in self.owned_partitions:
                log.info("No longer the coordinator of group %s; cleanup goes on with the other groups", group_id)
                continue
            tombstones: list = [(co.offset_commit_key(group_id, t, p), None) for (t, p) in removed]
            if group.in_state(DEAD) and self.groups.get(group_id) is group:
                del self.groups[group_id]
                if group.generation_id > 0:
                    tombstones.append((co.group_metadata_key(group_id), None))
            if tombstones:
                self._append(partition, tombstones, lambda error, g=group_id, n=len(tombstones): _log_tombstones(g, n, error))
            offsets_removed += len(removed)
        return offsets_removed


def _log_tombstones(group_id: str, count: int, error: int) -> None:
    if error != ErrorCode.NONE:
        log.warning("Failed to append %d tombstones for group %s: %s", count, group_id, _name(error))


def _name(error: int) -> str:
    try:
        return ErrorCode(error).name
    except ValueError:
        return str(error)
