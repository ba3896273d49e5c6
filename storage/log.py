"""Log: one partition replica's log, a list of LogSegments (Kafka's ``UnifiedLog``/``LocalLog``).

Layout: ``<log.dir>/<topic>-<partition>/`` holds ``<20-digit base offset>.log``,
``.index`` and ``.timeindex`` per segment and the ``leader-epoch-checkpoint``. The unit
stored is a RecordBatch v2. A client's batches are checked record by record before
anything is written (log_validator.py, Kafka's LogValidator); followers' and the loader's
at the batch level (framing, magic, CRC-32C, lastOffsetDelta vs count, size). Records are
never decoded on the read path. The leader stamps offsets and its epoch into the header (outside the
CRC) and, for LogAppendTime topics, the max timestamp (CRC recomputed).

Reads are zero-copy views of one segment's mapping. Offsets below ``log_start_offset`` or
above the log end offset (LEO) are OFFSET_OUT_OF_RANGE. The high watermark lives here, as
in Kafka's UnifiedLog, and bounds what retention may delete.

Producer state (idempotent producer): ``producer_state`` (see producer_state.py) is checked
on client appends, replayed from headers on follower appends and at load (from the newest
``<offset>.snapshot``, taken at each roll and at ``close``, at or below the recovery point:
after a crash that is what rebuilds the aborted transactions above it), and follows truncation
and the log start offset.

Deletion is delayed as in Kafka: a segment leaving the log (retention, the log start offset,
truncation, a compaction swap) is renamed to ``<name>.deleted`` and deleted by
``delete_due_segments`` after ``file.delete.delay.ms`` on the injected clock, so whoever still
holds it (a fetch in flight, the log cleaner) reads on.

Durability: appends land in the page cache; ``flush`` (or ``begin_flush`` / ``FlushPlan.run``
/ ``complete_flush`` to fsync off the event loop) advances ``recovery_point``, writing and
fsyncing the leader-epoch-checkpoint first when the epochs below the new recovery point are
not in it durably (epoch_cache.py: a change of the cache only changes memory). ``open``
builds the log from what ``LogLoader`` (log_loader.py) loads: after an unclean shutdown it
re-validates only the segments from the one holding the recovery point, so recovery time
follows the unflushed tail, not the log size.

Every method is for the owning thread only (not thread-safe), except ``FlushPlan.run``.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from protocol.clock import Time
from protocol.errors import (InvalidRecordError, KafkaError, KafkaStorageError, MessageTooLargeError,
                             OffsetOutOfRangeError, RecordListTooLargeError)
from protocol.records import (HEADER_SIZE, LOG_OVERHEAD, BatchHeader, build_end_txn_marker, check_batch,
                              read_control_record, read_header, set_base_offset_and_epoch, set_log_append_time)

from . import fileio
from .config import LogConfig
from .epoch_cache import FILE_NAME as EPOCH_FILE_NAME
from .epoch_cache import EpochEntry, LeaderEpochFileCache
from .log_loader import LoadedLog, LogLoader, rebuild_producer_state, replay_batches
from .log_validator import stamp_batch, validate_client_batches
from .producer_state import BatchMetadata, CompletedTxn, ProducerAppendInfo, ProducerStateEntry, ProducerStateManager
from .txn_index import AbortedTxn, TransactionIndex
from .checkpoint import fsync_dir
from .offset_index import INT32_MAX
from .segment import LOG_SUFFIX, SWAP_SUFFIX, LogSegment, file_name
from .segment_budget import USED, OpenSegmentBudget

_tuple_new = tuple.__new__  # a BatchHeader from its 13 fields, without NamedTuple's Python __new__

if TYPE_CHECKING:
    from protocol.records import Buffer

log = logging.getLogger("kbroker.storage.log")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
_I32 = struct.Struct(">i")  # a batch's length (byte 8)
_NOTHING = b""  # an empty fetch: a new view of it each time (a caller may release what it gets)


class OffsetsOutOfOrderError(InvalidRecordError):
    """A follower append whose offsets do not continue the log exactly (INVALID_RECORD)."""


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """``<topic>-<partition>`` -> (topic, partition); ValueError if it is not one."""
    topic, sep, partition = dir_name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{dir_name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


class LogAppendInfo(NamedTuple):
    """What an append did. ``batches`` are the headers as written (offsets assigned).

    ``duplicate``: the request repeated an idempotent producer's batch already in the log;
    nothing was written, and the offsets and timestamp are those it was first given.

    A NamedTuple (never changed once made), so the produce path's ``_append_stamped`` makes one
    with a single ``tuple.__new__`` call: as a dataclass its Python ``__init__`` of ten
    fields was one of the costliest steps of an append.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    record_count: int
    valid_bytes: int
    batch_count: int
    batches: list[BatchHeader]
    duplicate: bool = False


@dataclass
class FetchDataInfo:
    """A read: whole batches as a view of the segment mapping (no copy; may be empty)."""

    records: memoryview
    first_batch_offset: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int | None


class FlushPlan:
    """fsync work prepared by ``Log.begin_flush`` on the log's thread.

    ``run`` is thread-safe (the only thread-safe method in storage/): it fsyncs its own
    duplicated file descriptors and closes them, touching no Log state. Then
    ``log.complete_flush(plan)`` on the log's thread advances the recovery point.
    """

    def __init__(self, log: Log, offset: int, fds: list[int], dir_version: int, truncations: int,
                 epoch_entries: list[EpochEntry] | None = None, txn_index_token: dict[int, int] | None = None) -> None:
        self.log = log
        self.offset = offset
        self.dir_version = dir_version
        self.truncations = truncations
        self.epoch_entries = epoch_entries  # what the leader-epoch-checkpoint it fsyncs holds, if it does
        self.txn_index_token = txn_index_token or {}  # the .txnindex files it fsyncs (TransactionIndex.mark_synced)
        self._fds = fds

    @property
    def descriptors(self) -> int:
        """Descriptors it holds until ``run`` closes them."""
        return len(self._fds)

    def run(self) -> None:
        fds, self._fds = self._fds, []
        try:
            for fd in fds:
                fileio.fsync(fd)
        finally:
            for fd in fds:  # every one, whatever failed before
                try:
                    fileio.close(fd)
                except OSError:
                    pass

    def __repr__(self) -> str:
        return f"FlushPlan({self.log.dir.name} up to {self.offset}, {len(self._fds)} files)"


def run_flush_plans(plans: list[FlushPlan], now: Callable[[], int] | None = None,
                    durations: list[int] | None = None) -> tuple[list[FlushPlan], list[tuple[FlushPlan, OSError]]]:
    """Run every plan (thread-safe, off the logs' thread): one that fails (an fsync's EIO, a
    full disk) neither stops the others nor keeps its descriptors (``run`` closes them).
    Returns (the plans that succeeded, to ``complete_flush`` on the logs' thread; the failures).
    With ``now`` and ``durations``, appends each plan's run time in ``now``'s unit."""
    done: list[FlushPlan] = []
    failed: list[tuple[FlushPlan, OSError]] = []
    for plan in plans:
        started = now() if now is not None else 0
        try:
            plan.run()
        except OSError as exc:
            failed.append((plan, exc))
            continue
        if now is not None and durations is not None:
            durations.append(now() - started)
        done.append(plan)
    return done, failed


class Log:
    """One partition replica's log. Not thread-safe (see the module docstring)."""

    def __init__(self, dir: Path, config: LogConfig, time: Time, budget: OpenSegmentBudget, loaded: LoadedLog,
                 leader_epoch_cache: LeaderEpochFileCache, producer_state: ProducerStateManager,
                 txn_index: TransactionIndex | None = None) -> None:
        """A log built from what ``LogLoader`` loaded; ``open`` is the way to get one."""
        self.dir = Path(dir)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self.config = config
        # append_as_leader's reading of ``config`` (the config it was taken from first)
        self._client_rules: tuple[Any, ...] = (None,)
        self._follower_rules: tuple[Any, ...] = (None,)  # append_as_follower's: (config, config.compact)
        self.time = time
        self.segment_budget = budget
        self._segments = loaded.segments
        self._bases = [s.base_offset for s in loaded.segments]
        self.log_start_offset = loaded.log_start_offset
        self.log_end_offset = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        self.high_watermark = loaded.log_start_offset
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state
        self.txn_index = txn_index if txn_index is not None else TransactionIndex(self.dir)
        self.recovery_report = loaded.report
        self._last_flush_ms = time.milliseconds()
        self._dir_version = 1 if loaded.dir_changed else 0  # bumped when segment files are created or deleted
        if self._segments and self._segments[-1].active:
            self._reactivated(self._segments[-1])  # what loading left active
        self._dir_synced_version = 0
        self._truncations = 0
        self._hw_metadata: tuple[int, int, tuple[int, int]] | None = None  # (hw, truncations, metadata)
        # The log cleaner's progress: below this offset the log is clean (compacted). Kept across
        # restarts in the log dir's cleaner-offset-checkpoint (LogManager).
        self.first_dirty_offset = self.log_start_offset
        # Segments out of the log, renamed to .deleted, waiting file.delete.delay.ms: (when due, segment)
        self._pending_deletes: list[tuple[int, LogSegment]] = []

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(cls, dir: Path, config: LogConfig, *, time: Time, budget: OpenSegmentBudget | None = None,
             recovery_point: int = 0, log_start_offset: int = 0, had_clean_shutdown: bool = True,
             names: list[str] | None = None) -> Log:
        """Open (creating if needed) the log in ``dir``, recovering it if need be.

        After an unclean shutdown the segments from the one containing
        ``recovery_point`` on are re-validated batch by batch (CRC included) and cut at
        the first bad batch; earlier segments only have their indexes sanity-checked
        (log_loader.py). ``log.recovery_report`` says what was done.

        ``budget`` bounds what the non-active segments keep open; the ``LogManager`` shares
        its own among its logs. Without one, the log gets a budget of its own, sized from
        the open files limit.

        ``names``: what ``fileio.listdir(dir)`` returns, when the caller knows ``dir`` exists and has
        listed it already (``LogManager.startup``); else it is created if need be and listed.
        One listing serves the loader, the producer state and the leader epoch cache.
        """
        dir = Path(dir)
        if names is None:
            dir.mkdir(parents=True, exist_ok=True)
            names = fileio.listdir(dir)
        topic, partition = parse_topic_partition(dir.name)
        if budget is None:
            budget = OpenSegmentBudget.from_open_files_limit()
        opened: Log  # bound below; the cache asks the log for its LEO only once it exists
        leader_epoch_cache = LeaderEpochFileCache(dir / EPOCH_FILE_NAME, lambda: opened.log_end_offset,
                                                  exists=EPOCH_FILE_NAME in names)
        producer_state = ProducerStateManager(dir, time, config.producer_id_expiration_ms, names=names)
        txn_index = TransactionIndex(dir)
        loaded = LogLoader(dir, topic, partition, config, time, budget, had_clean_shutdown=had_clean_shutdown,
                           log_start_offset_checkpoint=log_start_offset, recovery_point_checkpoint=recovery_point,
                           leader_epoch_cache=leader_epoch_cache, producer_state=producer_state,
                           txn_index=txn_index).load(names)
        opened = cls(dir, config, time, budget, loaded, leader_epoch_cache, producer_state, txn_index)
        return opened

    def _reactivated(self, segment: LogSegment) -> None:
        """log.preallocate: a segment that became active again (loaded, a truncation dropped the
        segments after it, a roll failed) reserves its blocks as a new one does; and so too
        kbroker.log.writeback.bytes (file_records.py, "Writeback")."""
        if self.config.preallocate:
            segment.reserve(self.config.segment_bytes)
        if self.config.writeback_bytes:
            segment.write_back_every(self.config.writeback_bytes, self.config.cache_retain_bytes)

    def _new_segment(self, base_offset: int, previous: tuple[str, int, int] | None = None) -> LogSegment:
        segment = LogSegment.create(self.dir, base_offset, budget=self.segment_budget,
                                    index_interval_bytes=self.config.index_interval_bytes,
                                    max_index_size=self.config.segment_index_bytes,
                                    segment_jitter_ms=self.config.segment_jitter_ms, now_ms=self.time.milliseconds(),
                                    preallocate_bytes=self.config.segment_bytes if self.config.preallocate else 0)
        if self.config.writeback_bytes:
            segment.write_back_every(self.config.writeback_bytes, self.config.cache_retain_bytes, previous)
        self._dir_version += 1
        return segment

    # -- properties ----------------------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def truncations(self) -> int:
        """How many times the log was truncated (a pass of the log cleaner checks it did not change)."""
        return self._truncations

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def update_config(self, config: LogConfig) -> None:
        """Takes effect for the next append (and the next segment's index size)."""
        self.config = config
        self.producer_state.producer_id_expiration_ms = config.producer_id_expiration_ms
        for segment in self._segments:
            segment.index_interval_bytes = config.index_interval_bytes
            segment.max_index_size = config.segment_index_bytes

    def update_high_watermark(self, hw: int) -> int:
        """Set the high watermark, clamped to [log_start_offset, log_end_offset]; returns it."""
        self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        return self.high_watermark

    # -- transactions (Kafka's firstUnstableOffset / lastStableOffset) ---------------------

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction ongoing or whose marker is not yet
        below the high watermark; None when there is none."""
        return self.producer_state.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """The LSO: what read_committed consumers may read up to (exclusive)."""
        hw = self.high_watermark
        first = self.producer_state.first_unstable_offset()
        return first if first is not None and first < hw else hw

    def last_stable_offset_metadata(self) -> tuple[int, int]:
        lso = self.last_stable_offset
        if lso == self.high_watermark:
            return self.high_watermark_metadata()
        return self.offset_metadata(lso)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [fetch_offset, upper bound) overlaps."""
        return self.txn_index.collect(fetch_offset, upper_bound_offset)

    # -- offset metadata (Kafka's LogOffsetMetadata) --------------------------------------

    def offset_metadata(self, offset: int) -> tuple[int, int]:
        """(segment base offset, byte position) of the batch holding ``offset`` — of the end of
        the log at the LEO. What a parked fetch compares against (DelayedFetch) instead of
        reading: bytes between two offsets on one segment are a difference of positions."""
        active = self._segments[-1]
        if offset >= self.log_end_offset:
            return active.base_offset, active.size
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for segment in self._segments[i:i + 2]:
            found = segment.translate_offset(offset)
            if found is not None:
                return segment.base_offset, found[0]
        return active.base_offset, active.size

    def log_end_offset_metadata(self) -> tuple[int, int]:
        active = self._segments[-1]
        return active.base_offset, active.size

    def high_watermark_metadata(self) -> tuple[int, int]:
        """``offset_metadata(high_watermark)``, looked up once per high watermark (Kafka keeps
        the HW as a LogOffsetMetadata): at the LEO (a single replica, an ISR in step) it is the
        end of the active segment."""
        hw = self.high_watermark
        if hw >= self.log_end_offset:
            active = self._segments[-1]
            return active.base_offset, active.size
        cached = self._hw_metadata
        if cached is not None and cached[0] == hw and cached[1] == self._truncations:
            return cached[2]
        meta = self.offset_metadata(hw)
        self._hw_metadata = (hw, self._truncations, meta)
        return meta

    # -- appending -----------------------------------------------------------------------

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int,
                         from_coordinator: bool = False) -> LogAppendInfo:
        """Validate (log_validator.py: every batch and every record in it), assign offsets
        (and the LogAppendTime when configured) and append.

        ``records`` is patched in place when writable, else copied once. One bad batch
        rejects the request and nothing is written: CorruptRecordError (CORRUPT_MESSAGE),
        InvalidRecordError (INVALID_RECORD), MessageTooLargeError (a batch over
        max.message.bytes), RecordListTooLargeError (the set over segment.bytes). OSError
        while writing leaves the log as it was and raises KafkaStorageError.

        A batch with a producer id must come alone (else INVALID_RECORD) and pass the
        idempotent producer's checks (producer_state.py: OutOfOrderSequenceNumberError,
        InvalidProducerEpochError). A retry of one of the
        producer's last batches writes nothing and returns its first append's offsets,
        with ``duplicate`` set.

        ``from_coordinator`` (Kafka's AppendOrigin.COORDINATOR: the group coordinator's
        transactional offset commits): a batch with a producer id carries no sequence
        (NO_SEQUENCE), so only its epoch is checked.
        """
        buf: bytearray | memoryview
        if isinstance(records, bytearray) or (isinstance(records, memoryview) and not records.readonly):
            buf = records
        else:
            buf = bytearray(records)
        config = self.config
        if len(buf) > config.segment_bytes:
            raise RecordListTooLargeError(f"{self.topic}-{self.partition}: {len(buf)} bytes of batches exceed "
                                          f"segment.bytes {config.segment_bytes}")
        rules = self._client_rules
        if rules[0] is not config:  # what validation reads of the config, derived once per config
            rules = self._client_rules = (config, config.max_message_bytes, config.log_append_time,
                                          config.target_codec, config.compact, f"{self.topic}-{self.partition}")
        _config, max_message_bytes, append_time, target_codec, compact, where = rules
        # The common case in one compiled call (log_validator.stamp_batch: one batch, stored as
        # it came, CreateTime); anything else, or any defect, goes through the path below, the
        # reference, which decides (tests/storage/test_log_stamp.py holds the two alike).
        stamped = None
        if stamp_batch is not None and not append_time and not target_codec:
            stamped = stamp_batch(buf, max_message_bytes, compact, from_coordinator, self.log_end_offset, leader_epoch)
        if stamped is not None:
            if stamped.producer_id < 0 and self.fast_append:  # no producer state to check or update
                return self._append_stamped(buf, stamped, leader_epoch)
            written = [(0, stamped)]
            idempotent = stamped.producer_id >= 0
            log_append_time = -1
        else:
            buf, batches = validate_client_batches(buf, max_message_bytes=max_message_bytes,
                                                   log_append_time=append_time, target_codec=target_codec,
                                                   require_keys=compact, where=where, from_coordinator=from_coordinator)
            log_append_time = self.time.milliseconds() if append_time else -1
            offset = self.log_end_offset
            written = []
            idempotent = False
            for pos, header in batches:
                if header.producer_id >= 0:
                    idempotent = True
                set_base_offset_and_epoch(buf, pos, offset, leader_epoch)
                if log_append_time >= 0:
                    set_log_append_time(buf, pos, header.size, log_append_time)
                    written.append((pos, read_header(buf, pos)))  # its attributes, max timestamp and CRC changed
                else:
                    # The header as written: validation's (which matches ``buf``) with the two fields
                    # just stamped, both outside the CRC; no second unpack of the 61 bytes.
                    written.append((pos, _tuple_new(BatchHeader, (offset, header[1], leader_epoch, *header[3:]))))
                offset += header.last_offset_delta + 1
        pending = None
        if idempotent and from_coordinator:
            pending = self.producer_state.prepare_append([h for _p, h in written], validate=True)[
                written[0][1].producer_id]
        elif idempotent:
            duplicate, pending = self._analyze_producer_state(written)
            if duplicate is not None:
                return self._duplicate_append_info(buf, written[0][1], duplicate, log_append_time)
        if stamped is not None and self.fast_append:
            info = self._append_stamped(buf, stamped, leader_epoch)
        else:
            info = self._append_info(buf, written, log_append_time)
            self._append(buf, written, info)
            if written:
                self._maybe_assign_epoch(leader_epoch, info.first_offset)
        if pending is not None:
            self.producer_state.update((pending,))
        return info

    # The common case of ``_append_stamped`` (tests/storage/test_log_fast_append.py holds it to
    # the general path; False sends every append there).
    fast_append = True

    def _append_stamped(self, buf: Buffer, header: BatchHeader, leader_epoch: int) -> LogAppendInfo:
        """``_append_info``, ``_append`` and ``_maybe_assign_epoch`` of one batch stamped at the
        LEO (CreateTime), or a follower's one batch with the leader's offsets and epoch, in one
        function for the common case: an active segment already
        written to, with its indexes loaded and its ``.log`` descriptor held, which this batch
        does not roll. The write, LogSegment._index_batch's bookkeeping and index entries, the
        LEO, the flush check and the epoch are as the general way does them; anything else goes
        that way, which stays the reference."""
        last = header.base_offset + header.last_offset_delta
        max_timestamp = header.max_timestamp
        info = _tuple_new(LogAppendInfo, (header.base_offset, last, max_timestamp if max_timestamp > -1 else -1,
                                          last if max_timestamp > -1 else -1, -1, header.records_count, len(buf), 1,
                                          [header], False))
        segment = self._segments[-1]
        records, offset_index, time_index = segment._records, segment._offset_index, segment._time_index
        size = segment.size
        config = self.config
        first_timestamp = segment.rolling_based_timestamp
        if (records is None or records._fd < 0 or offset_index is None or time_index is None or not segment.active
                # LogSegment.should_roll's reasons, in its order (the clock's only without a first timestamp)
                or size == 0 or size > config.segment_bytes - len(buf)
                or first_timestamp is None or first_timestamp < 0
                or info.max_timestamp - first_timestamp > config.segment_ms - segment.roll_jitter_ms
                or offset_index.entries >= offset_index.max_entries or time_index.entries >= time_index.max_entries - 1
                or last - segment.base_offset > INT32_MAX):
            self._append(buf, [(0, header)], info)
            self._maybe_assign_epoch(leader_epoch, info.first_offset)
            return info
        segment.used = USED
        try:
            position = records.append(buf)
        except OSError as exc:
            log.error("%s-%d: append of %d bytes at offset %d failed: %s", self.topic, self.partition, len(buf),
                      info.first_offset, exc)
            raise KafkaStorageError(f"{self.topic}-{self.partition}: {exc}") from exc
        segment.size = records.size
        segment._tail_offset, segment._tail_position = header.base_offset, position  # LogSegment.append's
        if max_timestamp > segment.max_timestamp_so_far:
            segment.max_timestamp_so_far = max_timestamp
            segment.offset_of_max_timestamp_so_far = last
        if segment.bytes_since_last_index_entry > segment.index_interval_bytes:  # LogSegment._index_batch's entries
            # Neither index is full (checked above, as should_roll does) and the relative offset
            # fits: OffsetIndex.append's checks but that the offset grows (else it raises, as it would).
            relative = last - segment.base_offset
            if relative > offset_index.last[0]:
                offset_index._append_entry(relative, position)
            else:
                offset_index.append(last, position)
            if segment.max_timestamp_so_far > time_index.last[0]:  # (not full: is_full's test is above)
                time_index.maybe_append(segment.max_timestamp_so_far, segment.offset_of_max_timestamp_so_far, True)
            segment.bytes_since_last_index_entry = header.size
        else:
            segment.bytes_since_last_index_entry += header.size
        self.log_end_offset = last + 1
        if self.log_end_offset - self.recovery_point >= config.flush_messages:  # unflushed_messages()
            self.flush()
        if leader_epoch >= 0:
            epochs = self.leader_epoch_cache._entries
            if not epochs or leader_epoch > epochs[-1].epoch:
                self.leader_epoch_cache.assign(leader_epoch, info.first_offset)
        return info

    def append_end_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                              leader_epoch: int) -> LogAppendInfo:
        """A COMMIT or ABORT marker for the producer's transaction, as the transaction
        coordinator asks through WriteTxnMarkers (Kafka's appendAsLeader, origin COORDINATOR).
        An epoch older than the producer's raises InvalidProducerEpochError, a coordinator epoch
        older than its last marker's TransactionCoordinatorFencedError; nothing is written then.
        An aborted transaction gets its entry in the ``.txnindex`` of the marker's segment."""
        now = self.time.milliseconds()
        buf = bytearray(build_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit, now_ms=now,
                                             partition_leader_epoch=leader_epoch))
        set_base_offset_and_epoch(buf, 0, self.log_end_offset, leader_epoch)
        header = read_header(buf, 0)
        control = read_control_record(buf, 0, header)
        pending = self.producer_state.prepare_append([(header, control)], validate=True)
        written = [(0, header)]
        info = self._append_info(buf, written, -1)
        self._append(buf, written, info)
        self._maybe_assign_epoch(leader_epoch, info.first_offset)
        self._index_completed(self.producer_state.update(pending.values()))
        return info

    def _index_completed(self, completed: list[CompletedTxn]) -> None:
        segment_base = self._bases[-1]
        for txn in completed:
            if txn.is_aborted:
                self.txn_index.append(segment_base, AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                               self.producer_state.last_stable_offset_of(txn)))

    def _analyze_producer_state(self, written: list[tuple[int, BatchHeader]],
                                ) -> tuple[BatchMetadata | None, ProducerAppendInfo | None]:
        """Kafka's analyzeAndValidateProducerState for a client's request holding a batch
        with a producer id: (the cached batch it duplicates, None) or (None, the pending
        update). Raises (nothing is written yet) when the batch breaks a rule."""
        header = written[0][1]
        if len(written) != 1:
            raise InvalidRecordError(f"{self.topic}-{self.partition}: Produce requests with idempotent batches must "
                                     f"carry exactly one batch")
        if header.is_control:
            raise InvalidRecordError(f"{self.topic}-{self.partition}: Clients are not allowed to write control records")
        if header.base_sequence < 0:
            raise InvalidRecordError(f"{self.topic}-{self.partition}: Invalid sequence number {header.base_sequence} "
                                     f"in record batch with producerId {header.producer_id}")
        return self.producer_state.analyze_client_batch(header)

    def _duplicate_append_info(self, buf: Buffer, header: BatchHeader, duplicate: BatchMetadata,
                               log_append_time: int) -> LogAppendInfo:
        log.debug("%s-%d: producer %d epoch %d sequence %d is a duplicate of offsets %d-%d", self.topic,
                  self.partition, header.producer_id, header.producer_epoch, header.base_sequence,
                  duplicate.first_offset, duplicate.last_offset)
        return LogAppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp, duplicate.last_offset,
                             duplicate.timestamp if log_append_time >= 0 else -1, header.records_count, len(buf), 1,
                             [], duplicate=True)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches that carry the leader's offsets and epochs, unchanged.

        The first batch must start at the LEO and each next one where the previous ended,
        else OffsetsOutOfOrderError (INVALID_RECORD); in a compacted log a batch may start
        past that (the cleaner drops batches that kept no record: a gap, as Kafka's follower
        takes, and as loading a compacted log's segments allows). Batch checks as for the
        leader, except max.message.bytes (the leader already accepted them, as Kafka). Empty
        input returns an info with record_count 0.
        """
        size = len(records)
        config = self.config
        if self.fast_append and size >= HEADER_SIZE and _I32.unpack_from(records, 8)[0] + LOG_OVERHEAD == size \
                and size <= config.segment_bytes:
            # one whole batch (a follower's fetch at low or half load): _validate's checks of it and the
            # loop's below, the append in _append_stamped (the general path when it must roll)
            rules = self._follower_rules
            if rules[0] is not config:
                rules = self._follower_rules = (config, config.compact)
            compact = rules[1]
            try:
                header = check_batch(records, 0, size, compacted=compact)
            except KafkaError as exc:
                raise type(exc)(f"{self.topic}-{self.partition}: {exc}") from None
            base = header.base_offset
            if base != self.log_end_offset and not (base > self.log_end_offset and compact):
                raise OffsetsOutOfOrderError(f"{self.topic}-{self.partition}: batch at byte 0 starts at offset "
                                             f"{base}, expected {self.log_end_offset}")
            info = self._append_stamped(records, header, header.partition_leader_epoch)
            if header.producer_id >= 0:
                replay_batches(self.producer_state, records, [(0, header)], self.txn_index, self._bases[-1])
            return info
        batches = self._validate(records, check_message_size=False)
        expected = self.log_end_offset
        gaps = self.config.compact
        for pos, header in batches:
            if header.base_offset != expected and not (gaps and header.base_offset > expected):
                raise OffsetsOutOfOrderError(f"{self.topic}-{self.partition}: batch at byte {pos} starts at offset "
                                             f"{header.base_offset}, expected {expected}")
            expected = header.next_offset
        info = self._append_info(records, batches, -1)
        self._append(records, batches, info)
        idempotent = False
        for _pos, header in batches:
            self._maybe_assign_epoch(header.partition_leader_epoch, header.base_offset)
            if header.producer_id >= 0:
                idempotent = True
        if idempotent:
            replay_batches(self.producer_state, records, batches, self.txn_index, self._bases[-1])
        return info

    def _validate(self, buf: Buffer, *, check_message_size: bool) -> list[tuple[int, BatchHeader]]:
        size = len(buf)
        config = self.config
        if size > config.segment_bytes:
            raise RecordListTooLargeError(f"{self.topic}-{self.partition}: {size} bytes of batches exceed "
                                          f"segment.bytes {config.segment_bytes}")
        max_batch_size = config.max_message_bytes if check_message_size else size
        batches, pos = [], 0
        while pos < size:
            try:
                # a follower of a compacted log gets the leader's compacted batches
                header = check_batch(buf, pos, size, compacted=config.compact and not check_message_size)
            except KafkaError as exc:
                raise type(exc)(f"{self.topic}-{self.partition}: {exc}") from None
            batch_size = header.size
            if batch_size > max_batch_size:
                raise MessageTooLargeError(f"{self.topic}-{self.partition}: a {batch_size}-byte batch exceeds "
                                           f"max.message.bytes {max_batch_size}")
            batches.append((pos, header))
            pos += batch_size
        return batches

    def _append_info(self, buf: Buffer, batches: list[tuple[int, BatchHeader]], log_append_time: int) -> LogAppendInfo:
        if len(batches) == 1:  # a producer's request: one batch per partition (the loop below, unrolled)
            header = batches[0][1]
            last = header.base_offset + header.last_offset_delta
            max_timestamp = header.max_timestamp
            return LogAppendInfo(header.base_offset, last, max_timestamp if max_timestamp > -1 else -1,
                                 last if max_timestamp > -1 else -1, log_append_time, header.records_count, len(buf),
                                 1, [header])
        return self._append_info_any(buf, batches, log_append_time)

    def _append_info_any(self, buf: Buffer, batches: list[tuple[int, BatchHeader]],
                         log_append_time: int) -> LogAppendInfo:
        """``_append_info`` of any number of batches (the reference of its one-batch path)."""
        max_timestamp, offset_of_max = -1, -1
        records = 0
        headers = []
        for _pos, header in batches:
            headers.append(header)
            records += header.records_count
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
        first = headers[0].base_offset if headers else self.log_end_offset
        last = headers[-1].last_offset if headers else self.log_end_offset - 1
        return LogAppendInfo(first, last, max_timestamp, offset_of_max, log_append_time, records, len(buf),
                             len(headers), headers)

    def _append(self, buf: Buffer, batches: list[tuple[int, BatchHeader]], info: LogAppendInfo) -> None:
        if not batches:
            return
        try:
            segment = self._maybe_roll(len(buf), info.max_timestamp, info.last_offset)
            segment.append(buf, batches)
        except OSError as exc:
            log.error("%s-%d: append of %d bytes at offset %d failed: %s", self.topic, self.partition, len(buf),
                      info.first_offset, exc)
            raise KafkaStorageError(f"{self.topic}-{self.partition}: {exc}") from exc
        self.log_end_offset = info.last_offset + 1
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:  # unflushed_messages()
            self.flush()

    def _maybe_assign_epoch(self, epoch: int, start_offset: int) -> None:
        latest = self.leader_epoch_cache.latest_epoch()
        if epoch >= 0 and (latest is None or epoch > latest):
            self.leader_epoch_cache.assign(epoch, start_offset)  # in memory (written by a flush, epoch_cache.py)

    # -- rolling -------------------------------------------------------------------------

    def _maybe_roll(self, set_size: int, max_timestamp: int, last_offset: int) -> LogSegment:
        segment = self._segments[-1]
        reason = segment.should_roll(set_size=set_size, max_timestamp=max_timestamp, last_offset=last_offset,
                                     now=self.time.milliseconds, segment_bytes=self.config.segment_bytes,
                                     segment_ms=self.config.segment_ms)
        if reason is None:
            return segment
        log.debug("%s-%d: rolling at offset %d (%s)", self.topic, self.partition, self.log_end_offset, reason)
        return self.roll()

    def roll(self) -> LogSegment:
        """Start a new active segment at the LEO (no-op when the active one is empty) and
        take a producer state snapshot there, keeping the last two (and the newest one at or
        below the recovery point, which a restart after a crash may need)."""
        active = self._segments[-1]
        if active.size == 0:
            return active
        active.on_become_inactive()
        try:
            # the old segment's tail, still read at the end, dropped once the new one holds as much
            segment = self._new_segment(self.log_end_offset, active.writeback_tail)
        except OSError:
            active.activate()
            self._reactivated(active)
            raise
        active.writeback_tail = None
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._take_producer_snapshot()
        self.producer_state.retain_snapshots(keep_from=self._bases[-2], recovery_point=self.recovery_point)
        return segment

    # -- compaction ----------------------------------------------------------------------

    def replace_segments(self, old: list[LogSegment], cleaned: Path,
                         aborted: list[AbortedTxn] | None = None) -> LogSegment:
        """Swap the cleaner's output for ``old`` (consecutive non-active segments): ``cleaned``
        is ``<base>.log.cleaned`` holding the retained batches, fsynced. Crash-safe as Kafka's
        swap: renamed to ``.swap`` first (from then on a restart completes the swap, see
        log_loader.py), the old segments renamed to ``.deleted`` (deleted after
        file.delete.delay.ms), then renamed to the segment's ``.log``; its indexes are rebuilt
        from it. ``aborted``: the cleaned segment's aborted transactions (the cleaner's; None keeps
        every entry of the old segments)."""
        base = old[0].base_offset
        i = self._bases.index(base)
        assert self._segments[i:i + len(old)] == old and not old[-1].active
        swap = self.dir / (file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
        fileio.replace(cleaned, swap)
        fsync_dir(self.dir)
        self.txn_index.replace_segments([s.base_offset for s in old], base, aborted)
        self._delete_segments(old, keep_txn_index=True)
        fileio.replace(swap, self.dir / file_name(base, LOG_SUFFIX))
        fsync_dir(self.dir)
        segment = LogSegment(self.dir, base, budget=self.segment_budget, index_interval_bytes=self.config.index_interval_bytes,
                             max_index_size=self.config.segment_index_bytes, created_ms=self.time.milliseconds())
        segment.recover(verify_crc=False, allow_gaps=True)
        self._segments[i:i + len(old)] = [segment]
        self._bases[i:i + len(old)] = [base]
        self._dir_version += 1
        return segment

    # -- reading -------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchDataInfo:
        """Whole batches of one segment, from the batch containing ``start_offset``.

        Batches whose last offset is at or beyond ``max_offset`` (the high watermark for
        consumers) are left out. Empty at the LEO or at ``max_offset``;
        OffsetOutOfRangeError outside [log_start_offset, LEO]. See LogSegment.read for
        ``max_bytes`` and ``min_one_batch``.
        """
        leo, lso = self.log_end_offset, self.log_start_offset
        if start_offset < lso or start_offset > leo:
            raise OffsetOutOfRangeError(f"{self.topic}-{self.partition}: offset {start_offset} is outside "
                                        f"[{lso}, {leo}]")
        if start_offset < leo and (max_offset is None or start_offset < max_offset):
            if max_offset is not None and max_offset >= leo:
                # No batch ends at or beyond the LEO: a bound there bounds nothing, and looking
                # for its batch would walk every batch from start_offset to the segment's end
                # (a consumer caught up with a high watermark at the LEO, most fetches).
                max_offset = None
            segments = self._segments
            active = segments[-1]
            # the next segment when this one has nothing at or after start_offset (the end of a
            # segment, or a compacted log's gap); further ones only when compaction emptied some.
            # In the active segment (a caught-up fetch, most of them) no search and no slice.
            for segment in ((active,) if start_offset >= active.base_offset else
                            segments[max(0, bisect.bisect_right(self._bases, start_offset) - 1):]):
                found = segment.read(start_offset, max_bytes, max_offset, min_one_batch)
                if found is not None:
                    return FetchDataInfo(found[1], found[0], lso, leo)
        return FetchDataInfo(memoryview(_NOTHING), start_offset, lso, leo)

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record (at or after log_start_offset) whose timestamp is >= ``timestamp``.

        The first segment whose largest timestamp qualifies, its time index, then the
        records of the one batch that holds it (Kafka's answer, exact to the record).
        """
        for segment in self._segments:
            if segment.max_timestamp_so_far >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    ts, offset, epoch = found
                    return TimestampAndOffset(ts, offset, epoch if epoch >= 0 else None)
        return None

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -2 earliest, -1 latest (the LEO; the broker bounds it by the HW or
        LSO as the isolation level says), -3 the record with the largest timestamp, else
        ``offset_for_timestamp``."""
        cache = self.leader_epoch_cache
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_start_offset, cache.epoch_for_offset(self.log_start_offset))
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_end_offset, cache.latest_epoch())
        if timestamp == MAX_TIMESTAMP:
            best = max(self._segments, key=lambda s: s.max_timestamp_so_far)
            if best.max_timestamp_so_far < 0:
                return None
            offset = best.offset_of_max_timestamp_so_far
            return TimestampAndOffset(best.max_timestamp_so_far, offset, cache.epoch_for_offset(offset))
        return self.offset_for_timestamp(timestamp)

    # -- truncation and retention --------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Drop every batch that holds an offset >= ``offset`` (a batch straddling it goes
        whole). The epoch cache, high watermark and recovery point follow. Returns False
        when there was nothing to drop."""
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        self._truncations += 1
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return True
        dropped = []
        while self._bases[-1] > offset:
            self._bases.pop()
            dropped.append(self._segments.pop())
        if dropped:
            self._delete_segments(dropped)
            self._dir_version += 1
        active = self._segments[-1]
        active.activate()
        self._reactivated(active)
        active.truncate_to(offset)
        self.log_end_offset = active.read_next_offset()
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.first_dirty_offset = min(self.first_dirty_offset, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.txn_index.truncate_from(self.log_end_offset)
        rebuild_producer_state(self.producer_state, self._segments, self._bases, self.log_start_offset,
                               self.log_end_offset, self.txn_index)
        log.info("%s-%d: truncated to offset %d", self.topic, self.partition, self.log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (epoch cache cleared)."""
        self._truncations += 1
        self._delete_segments(self._segments)
        self._dir_version += 1
        self._segments = [self._new_segment(offset)]
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = self.recovery_point = self.high_watermark = offset
        self.first_dirty_offset = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully()
        self.txn_index.clear()
        log.info("%s-%d: truncated fully, starting at offset %d", self.topic, self.partition, offset)

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """DeleteRecords / retention: move log_start_offset up to ``new_start`` (at most the
        high watermark, else OffsetOutOfRangeError). Returns whether it moved."""
        if new_start > self.high_watermark:
            raise OffsetOutOfRangeError(f"{self.topic}-{self.partition}: cannot move the log start offset to "
                                        f"{new_start}, above the high watermark {self.high_watermark}")
        if new_start <= self.log_start_offset:
            return False
        self.log_start_offset = new_start
        self.leader_epoch_cache.truncate_from_start(new_start)
        self.producer_state.truncate_head(new_start)
        return True

    def delete_old_segments(self) -> int:
        """Retention: delete the oldest segments past retention.ms (by their largest
        timestamp), beyond retention.bytes, or wholly below log_start_offset. Never the
        active segment, never one whose data reaches the high watermark. Returns how
        many were deleted."""
        cfg, now = self.config, self.time.milliseconds()
        deleted = 0
        if cfg.delete and cfg.retention_ms >= 0:
            deleted += self._delete_oldest_while(lambda s, nxt: now - s.largest_timestamp > cfg.retention_ms,
                                                 "retention.ms")
        if cfg.delete and cfg.retention_bytes >= 0:
            excess = self.size_in_bytes() - cfg.retention_bytes

            def over_size(segment: LogSegment, _next: LogSegment) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True
            deleted += self._delete_oldest_while(over_size, "retention.bytes")
        deleted += self._delete_oldest_while(lambda s, nxt: nxt.base_offset <= self.log_start_offset,
                                             "log start offset")
        return deleted

    def _delete_oldest_while(self, predicate: Callable[[LogSegment, LogSegment], bool], reason: str) -> int:
        count = 0
        while len(self._segments) > count + 1:
            segment, following = self._segments[count], self._segments[count + 1]
            if following.base_offset > self.high_watermark or not predicate(segment, following):
                break
            count += 1
        if count:
            doomed = self._segments[:count]
            del self._segments[:count], self._bases[:count]
            self._delete_segments(doomed)
            self._dir_version += 1
            if self._bases[0] > self.log_start_offset:
                self.log_start_offset = self._bases[0]
                self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
                self.producer_state.truncate_head(self.log_start_offset)
            log.info("%s-%d: deleted %d segments (%s); log start offset %d", self.topic, self.partition, count,
                     reason, self.log_start_offset)
        return count

    # -- delayed deletion (Kafka's asyncDelete) -------------------------------------------

    def _delete_segments(self, segments: list[LogSegment], keep_txn_index: bool = False) -> None:
        """Segments just taken out of the log (retention, log start offset, truncation, a
        compaction swap): renamed to ``.deleted`` now and deleted by ``delete_due_segments``
        once ``file.delete.delay.ms`` has passed, so a reader still holding one (a fetch in
        flight, the log cleaner) never finds its files gone. A delay of 0 deletes at once.
        Their aborted transactions go at once (unless ``keep_txn_index``: a compaction swap
        moved them to the cleaned segment)."""
        if not keep_txn_index:
            self.txn_index.drop_segments([s.base_offset for s in segments])
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            for segment in segments:
                segment.delete()
            return
        due = self.time.milliseconds() + delay
        for segment in list(segments):
            segment.rename_to_deleted()
            # a segment of the same name still waiting: the rename replaced its files already
            for pending in [p for p in self._pending_deletes if p[1].log_path == segment.log_path]:
                self._pending_deletes.remove(pending)
                pending[1].close_handles()
            self._pending_deletes.append((due, segment))

    @property
    def pending_deletes(self) -> list[LogSegment]:
        """Segments renamed to ``.deleted``, not yet deleted."""
        return [segment for _due, segment in self._pending_deletes]

    def delete_due_segments(self, now_ms: int | None = None) -> int:
        """Delete the ``.deleted`` segments whose file.delete.delay.ms has passed; returns how many."""
        if not self._pending_deletes:
            return 0
        now = self.time.milliseconds() if now_ms is None else now_ms
        due = [segment for when, segment in self._pending_deletes if when <= now]
        if due:
            self._pending_deletes = [p for p in self._pending_deletes if p[0] > now]
            for segment in due:
                segment.delete()
        return len(due)

    def _delete_all_pending(self) -> None:
        for _due, segment in self._pending_deletes:
            segment.delete()
        self._pending_deletes = []

    # -- producer state ------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The idempotent producer's state entry (epoch and last batches), if any."""
        return self.producer_state.last_entry(producer_id)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget the producers with no append for producer.id.expiration.ms; returns how many.

        Idleness is measured by the broker's clock at each append (a snapshot's producers
        count from when it was loaded), not by the batches' timestamps as Kafka does: a
        producer that sends old CreateTime timestamps would otherwise expire while active.
        """
        return self.producer_state.remove_expired_producers(now_ms)

    def _take_producer_snapshot(self) -> None:
        """A producer state snapshot at the LEO (a failure is logged, not raised)."""
        self.producer_state.try_take_snapshot(self.log_end_offset)

    # -- flushing ------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync the segments holding [recovery_point, ``offset``) (default: up to the LEO)
        and advance the recovery point, synchronously."""
        plan = self.begin_flush(offset)
        if plan is not None:
            plan.run()
            self.complete_flush(plan)

    def begin_flush(self, offset: int | None = None) -> FlushPlan | None:
        """Prepare a flush up to ``offset`` (default LEO): duplicates the descriptors to fsync
        (and the directory's when segments were created or deleted). The leader epoch cache's
        file is written first when its entries below the target are not in it, and fsynced
        with the rest when they are not known durable (epoch_cache.py). None if nothing to do."""
        target = self.log_end_offset if offset is None else min(offset, self.log_end_offset)
        dir_dirty = self._dir_version != self._dir_synced_version
        cache = self.leader_epoch_cache
        try:
            if cache.write_needed(target):
                cache.write()
        except OSError as exc:
            log.error("%s-%d: cannot write %s: %s", self.topic, self.partition, cache.path, exc)
            raise KafkaStorageError(f"{self.topic}-{self.partition}: cannot prepare a flush: {exc}") from exc
        epoch_sync = cache.sync_needed(target)
        if target <= self.recovery_point and not dir_dirty and not epoch_sync:
            return None
        first = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        last = max(0, bisect.bisect_right(self._bases, max(target - 1, 0)) - 1)
        fds: list[int] = []
        epoch_entries = None
        txn_token: dict[int, int] = {}
        txn_renamed = False
        try:
            if target > self.recovery_point:
                for segment in self._segments[first:last + 1]:
                    fds.extend(segment.dup_fds())
                # the aborted transactions of the markers below the new recovery point: recovery
                # replays only from the producer state snapshot (Kafka's LogSegment.flush
                # flushes its txnIndex too). Seed 1696.
                txn_fds, txn_token, txn_renamed = self.txn_index.dup_fds_for_flush(self._bases[last])
                fds.extend(txn_fds)
            if epoch_sync:
                fd, epoch_entries = cache.open_for_sync()
                fds.append(fd)
            if dir_dirty or epoch_sync or txn_renamed:  # (the checkpoint is renamed into place)
                fds.append(fileio.open(self.dir, os.O_RDONLY | os.O_DIRECTORY))
        except OSError as exc:
            for fd in fds:
                fileio.close(fd)
            raise KafkaStorageError(f"{self.topic}-{self.partition}: cannot prepare a flush: {exc}") from exc
        return FlushPlan(self, target, fds, self._dir_version, self._truncations, epoch_entries, txn_token)

    def complete_flush(self, plan: FlushPlan) -> None:
        """After ``plan.run()`` succeeded: advance the recovery point (unless the log was
        truncated meanwhile) and note the flush time."""
        if plan.truncations == self._truncations:
            self.recovery_point = max(self.recovery_point, min(plan.offset, self.log_end_offset))
        self._dir_synced_version = max(self._dir_synced_version, plan.dir_version)
        if plan.epoch_entries is not None:
            self.leader_epoch_cache.mark_synced(plan.epoch_entries)
        self.txn_index.mark_synced(plan.txn_index_token)
        self._last_flush_ms = self.time.milliseconds()

    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    def time_since_last_flush_ms(self) -> int:
        return self.time.milliseconds() - self._last_flush_ms

    def needs_flush_by_policy(self) -> bool:
        """flush.messages / flush.ms (Kafka's defaults leave flushing to the OS)."""
        unflushed = self.unflushed_messages()
        return unflushed > 0 and (unflushed >= self.config.flush_messages
                                  or self.time_since_last_flush_ms() >= self.config.flush_ms)

    def _write_epoch_cache(self) -> None:
        """The leader epoch cache's file, when its entries below the LEO are not in it (a failure is logged)."""
        cache = self.leader_epoch_cache
        if cache.write_needed():
            try:
                cache.write()
            except OSError as exc:
                log.error("%s-%d: cannot write %s: %s", self.topic, self.partition, cache.path, exc)

    # -- closing -------------------------------------------------------------------------

    def close(self, *, snapshot: bool = True) -> None:
        """Take a producer state snapshot at the LEO and write the leader epoch cache's file
        when its entries below the LEO are not in it (not fsynced: ``flush`` does that; unless
        ``snapshot`` is False: the log is about to be deleted), trim the indexes and the active ``.log`` to their used
        sizes and close every file."""
        if snapshot and self._segments:
            self._take_producer_snapshot()
            self._write_epoch_cache()
        for segment in self._segments:
            segment.close()
        self._delete_all_pending()  # nothing reads a closed log (a restart would remove them anyway)

    def delete(self) -> None:
        """Close and remove the partition directory with everything in it."""
        for segment in self._segments:
            segment.delete()
        self._delete_all_pending()
        self._segments, self._bases = [], []
        fileio.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, segments={len(self._segments)}, "
                f"start={self.log_start_offset}, end={self.log_end_offset})")
