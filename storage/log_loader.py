"""LogLoader: from a partition directory's files to the state a Log is built from (Kafka's ``LogLoader``).

``load`` runs once, when the log is opened:

1. stray files of interrupted operations (``.deleted``, ``.cleaned``, ``.swap``, ``.tmp``)
   and indexes without a ``.log`` are removed;
2. one LogSegment per ``.log``, or a new empty one at the log start offset when there is
   none; the last is the active segment;
3. after an unclean shutdown the segments from the one holding the recovery point on are
   re-validated batch by batch (CRC included), their indexes rebuilt and the leader epoch
   cache's entries from their start rebuilt from the batch headers (epoch_cache.py says
   why). Earlier segments, and all of them after a clean shutdown, only have their indexes
   sanity-checked (rebuilt when missing or corrupt), and the active one has the batches
   after its last index entry re-read;
4. the first invalid batch, or a segment that does not start where the previous one
   ended, cuts the log there: the later segments are deleted and one line says what
   went (a WARNING; INFO when only a zero tail of the last segment was cut: no data lost);
5. the log end offset (LEO), log start offset and recovery point follow; the leader epoch
   cache is cut to [log start, LEO];
6. the producer state is reloaded from the newest snapshot at or below the recovery point
   (the LEO after a clean shutdown; the snapshots above it are deleted: taken from a tail
   the crash may have cut, they would skip markers whose ``.txnindex`` entries it took) and
   the batch headers after it replayed, to the LEO, rebuilding the aborted transactions of
   the markers replayed (then a snapshot is taken at the LEO, not fsynced: it only saves
   replay time, and a torn one fails its CRC and is ignored);
7. every file loading opened is closed again: a loaded log holds no descriptor until it is
   used, and loading holds at most what the shared budget allows (segment_budget.py), so
   start-up never needs a descriptor per partition, whatever the broker holds.

The leader epoch cache and producer state are the Log's own, updated in place; the rest
comes back as a ``LoadedLog``. Recovery time follows the unflushed tail, not the log size.
Not thread-safe.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from protocol.clock import Time
from protocol.records import BatchHeader, ControlRecord, iter_batch_headers, read_control_record

from . import fileio
from .config import LogConfig
from .epoch_cache import LeaderEpochFileCache
from .producer_state import CompletedTxn, ProducerStateManager
from .txn_index import AbortedTxn, TransactionIndex

if TYPE_CHECKING:
    from protocol.records import Buffer
from .checkpoint import fsync_dir
from .segment import (CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, RecoverResult,
                      file_name)
from .segment_budget import OpenSegmentBudget

log = logging.getLogger("kbroker.storage.loader")

_STRAY_SUFFIXES = (".deleted", CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")
_LOG_SWAP = LOG_SUFFIX + SWAP_SUFFIX
_LOG = LOG_SUFFIX[1:]  # what follows the first dot of a segment's file name
_INDEXES = (INDEX_SUFFIX[1:], TIME_INDEX_SUFFIX[1:])


def _unlink(path: Path) -> None:
    try:
        fileio.unlink(path)
    except FileNotFoundError:
        pass


@dataclass
class RecoveryReport:
    """What ``Log.open`` had to do to make the partition consistent."""

    topic: str
    partition: int
    had_clean_shutdown: bool
    log_end_offset: int = 0
    segments: int = 0
    segments_recovered: int = 0
    indexes_rebuilt: list[str] = field(default_factory=list)
    bytes_truncated: int = 0
    segments_deleted: int = 0
    truncation: str | None = None
    duration_ms: float = 0.0
    producer_batches_replayed: int = 0  # batch headers read to rebuild the producer state

    @property
    def needed_recovery(self) -> bool:
        return bool(self.segments_recovered or self.indexes_rebuilt or self.bytes_truncated)

    def summary(self) -> str:
        parts = [f"{self.topic}-{self.partition}: {self.segments} segments, LEO {self.log_end_offset}"]
        if self.segments_recovered:
            parts.append(f"{self.segments_recovered} re-validated")
        if self.indexes_rebuilt:
            parts.append(f"{len(self.indexes_rebuilt)} indexes rebuilt")
        if self.bytes_truncated or self.segments_deleted:
            parts.append(f"{self.bytes_truncated} bytes and {self.segments_deleted} segments dropped")
        parts.append(f"{self.duration_ms:.1f} ms")
        return ", ".join(parts)


@dataclass
class LoadedLog:
    """What ``LogLoader.load`` found (Kafka's ``LoadedLogOffsets``, with the segments)."""

    segments: list[LogSegment]  # in offset order, the last one active
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    report: RecoveryReport
    dir_changed: bool  # segment files were created or deleted: the directory needs an fsync


class LogLoader:
    """Loads one partition directory; ``load`` once. The leader epoch cache and producer
    state given are updated in place (Kafka's constructor takes them the same way)."""

    def __init__(self, dir: Path, topic: str, partition: int, config: LogConfig, time: Time,
                 budget: OpenSegmentBudget, *, had_clean_shutdown: bool, log_start_offset_checkpoint: int,
                 recovery_point_checkpoint: int, leader_epoch_cache: LeaderEpochFileCache,
                 producer_state: ProducerStateManager, txn_index: TransactionIndex | None = None) -> None:
        self.dir = dir
        self.topic = topic
        self.partition = partition
        self.config = config
        self.time = time
        self.budget = budget
        self.had_clean_shutdown = had_clean_shutdown
        self.log_start_offset_checkpoint = log_start_offset_checkpoint
        self.recovery_point_checkpoint = recovery_point_checkpoint
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state
        self.txn_index = txn_index
        self.report = RecoveryReport(topic, partition, had_clean_shutdown)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._dir_changed = False

    def load(self, names: list[str] | None = None) -> LoadedLog:
        """Steps 1-7 of the module docstring. ``names``: the directory's listing, when the
        caller has it (else it is listed here)."""
        started = self.time.monotonic_ms()
        report = self.report
        cfg = self.config
        now = self.time.milliseconds()
        self._segments = [LogSegment(self.dir, base, budget=self.budget, index_interval_bytes=cfg.index_interval_bytes,
                                     max_index_size=cfg.segment_index_bytes, created_ms=now)
                          for base in self._remove_stray_files_and_find_segments(names)]
        if not self._segments:
            self._segments = [self._new_segment(self.log_start_offset_checkpoint)]
        self._bases = [s.base_offset for s in self._segments]
        self._segments[-1].activate()
        self._recover_segments()
        segments, bases = self._segments, self._bases
        if self.txn_index is not None:
            self.txn_index.load(bases, names if names is not None else fileio.listdir(self.dir))
        report.segments = len(segments)
        log_end_offset = segments[-1].read_next_offset()
        log_start_offset = min(max(self.log_start_offset_checkpoint, bases[0]), log_end_offset)
        if self.had_clean_shutdown:
            recovery_point = log_end_offset
        else:
            recovery_point = min(self.recovery_point_checkpoint, log_end_offset)
        if self.txn_index is not None and self.txn_index.unreadable:
            # a .txnindex that did not read: recover from its segment, which rebuilds it
            recovery_point = min(recovery_point, min(self.txn_index.unreadable))
        self.leader_epoch_cache.truncate_from_end(log_end_offset)
        self.leader_epoch_cache.truncate_from_start(log_start_offset)
        # After an unclean shutdown only what is below the recovery point is known durable: the
        # replay starts from a snapshot at or below it (those above go), so it rebuilds the
        # aborted transactions of every marker the crash may have taken from the .txnindex files
        # (Kafka's recoverSegment): those at or above it; the durable ones below it stay as they
        # are. After a clean one the recovery point is the LEO: no replay.
        report.producer_batches_replayed = rebuild_producer_state(self.producer_state, segments, bases,
                                                                  log_start_offset, log_end_offset, self.txn_index,
                                                                  recovery_point=recovery_point)
        if report.producer_batches_replayed:
            # Not fsynced: two fsyncs per partition made most of the time of an unclean start
            # with many partitions; the snapshot only saves the next replay (take_snapshot).
            self.producer_state.try_take_snapshot(log_end_offset, sync=False)
        report.log_end_offset = log_end_offset
        for segment in segments:  # what loading opened: a loaded log holds no descriptor until used
            segment.close_files()
        report.duration_ms = self.time.monotonic_ms() - started
        return LoadedLog(segments, log_start_offset, log_end_offset, recovery_point, report, self._dir_changed)

    def _new_segment(self, base_offset: int) -> LogSegment:
        cfg = self.config
        segment = LogSegment.create(self.dir, base_offset, budget=self.budget,
                                    index_interval_bytes=cfg.index_interval_bytes,
                                    max_index_size=cfg.segment_index_bytes, segment_jitter_ms=cfg.segment_jitter_ms,
                                    now_ms=self.time.milliseconds(),
                                    preallocate_bytes=cfg.segment_bytes if cfg.preallocate else 0)
        self._dir_changed = True
        return segment

    def _remove_stray_files_and_find_segments(self, names: list[str] | None) -> list[int]:
        """Base offsets of the segments on disk; stray files of interrupted operations and
        indexes without a ``.log`` are removed. One listing of the directory (``names``, or
        listed here), a second only after completing an interrupted swap."""
        if names is None:
            names = fileio.listdir(self.dir)
        swaps = sorted(name for name in names if name.endswith(_LOG_SWAP))
        if swaps:
            for swap in swaps:
                self._complete_swap(self.dir / swap)
            names = fileio.listdir(self.dir)
        bases, index_files = set(), []
        for name in names:
            if name.endswith(_STRAY_SUFFIXES):
                _unlink(self.dir / name)
                continue
            stem, _dot, suffix = name.partition(".")
            if len(stem) != 20 or not stem.isdigit():
                continue
            if suffix == _LOG:
                bases.add(int(stem))
            elif suffix in _INDEXES:
                index_files.append((int(stem), name))
        for base, name in index_files:
            if base not in bases:
                _unlink(self.dir / name)
        return sorted(bases)

    def _complete_swap(self, swap: Path) -> None:
        """A cleaned segment (``<base>.log.swap``) whose swap a crash interrupted: complete it
        (Kafka's LogLoader does the same): the segments it replaces — those whose base offset
        lies within its offset range — are deleted and it becomes ``<base>.log``."""
        stem = swap.name[:20]
        if not stem.isdigit():
            fileio.unlink_if_exists(swap)
            return
        base = last = int(stem)
        data = swap.read_bytes()
        for _pos, header in iter_batch_headers(data):
            last = header.last_offset
        replaced = []
        for path in self.dir.iterdir():
            other, _dot, suffix = path.name.partition(".")
            if len(other) == 20 and other.isdigit() and "." + suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX) \
                    and base <= int(other) <= last:
                fileio.unlink(path)
                replaced.append(path.name)
        fileio.replace(swap, self.dir / file_name(base, LOG_SUFFIX))
        fsync_dir(self.dir)
        self._dir_changed = True
        log.info("%s-%d: completed the interrupted swap of cleaned segment %s (replaced %s)", self.topic,
                 self.partition, swap.name, ", ".join(sorted(replaced)) or "nothing")

    def _recover_segments(self) -> None:
        """Step 3 and 4: re-validate or sanity-check each segment, cutting at the first damage."""
        report, segments, bases = self.report, self._segments, self._bases
        if self.had_clean_shutdown:
            first_to_recover = len(segments)
        else:
            first_to_recover = max(0, bisect.bisect_right(bases, self.recovery_point_checkpoint) - 1)
            # From the first re-validated batch on, the leader epoch cache's file may lack entries
            # or hold ones the cache had dropped (its changes are written later, epoch_cache.py,
            # point 2): they go, and the batch headers assign their epochs again (_assign_epoch).
            self.leader_epoch_cache.truncate_from_end(bases[first_to_recover])
        for i, segment in enumerate(segments):
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            compacted = self.config.compact  # batches may skip offsets
            if i >= first_to_recover:
                result = segment.recover(on_batch=self._assign_epoch, allow_gaps=compacted)
                report.segments_recovered += 1
            else:
                problem = segment.load_indexes(next_base)
                if problem is not None:
                    log.warning("%s-%d: rebuilding the indexes of %s: %s", self.topic, self.partition,
                                segment.log_path.name, problem)
                    report.indexes_rebuilt.append(segment.log_path.name)
                    result = segment.recover(verify_crc=False, allow_gaps=compacted)
                elif segment.active:
                    result = segment.recover(start_position=segment.offset_index.last_entry().position,
                                             verify_crc=False, allow_gaps=compacted)
                else:
                    continue
            report.bytes_truncated += result.truncated_bytes
            if compacted:  # cleaning may have removed a segment's last batches: only overlap or damage
                gap = next_base is not None and (result.next_offset > next_base or result.error is not None)
            else:
                gap = next_base is not None and result.next_offset != next_base
            if gap or (result.error is not None and next_base is None):
                self._drop_segments_after(i, result)
                break

    def _assign_epoch(self, header: BatchHeader) -> None:
        """A re-validated batch's leader epoch goes to the cache when newer than its latest."""
        cache, epoch = self.leader_epoch_cache, header.partition_leader_epoch
        latest = cache.latest_epoch()
        if epoch >= 0 and (latest is None or epoch > latest):
            cache.assign(epoch, header.base_offset)

    def _drop_segments_after(self, i: int, result: RecoverResult) -> None:
        """Recovery cut segment ``i`` (or found the next one does not follow it): delete
        every later segment and log the one line for this truncation (a warning, or INFO
        when only a zero tail was cut from the last segment: no data was lost)."""
        segment, later = self._segments[i], self._segments[i + 1:]
        dropped = result.truncated_bytes + sum(s.size for s in later)
        reason = result.error or f"the next segment starts at {later[0].base_offset}, not {result.next_offset}"
        level = logging.INFO if result.zero_tail and not later else logging.WARNING
        log.log(level, "%s-%d: recovery truncated %s at byte %d (offset %d): %s; dropped %d bytes%s",
                self.topic, self.partition, segment.log_path.name, result.valid_bytes, result.next_offset,
                reason, dropped, f" including {len(later)} later segments" if later else "")
        for s in later:
            s.delete()
        del self._segments[i + 1:]
        del self._bases[i + 1:]
        if later:
            self._dir_changed = True
        self.report.segments_deleted += len(later)
        self.report.bytes_truncated += sum(s.size for s in later)
        self.report.truncation = reason
        segment.activate()


def rebuild_producer_state(producer_state: ProducerStateManager, segments: list[LogSegment], bases: list[int],
                           log_start_offset: int, log_end_offset: int, txn_index: TransactionIndex | None = None, *,
                           recovery_point: int | None = None) -> int:
    """Reset the producer state to the newest snapshot at or below ``recovery_point`` (default:
    the LEO; snapshots above it are deleted) and replay the batch headers after it, to the LEO;
    returns how many batch headers were read (none after a clean shutdown: the snapshot is at
    the LEO). Kafka's ``UnifiedLog.rebuildProducerState``: loading and truncation both use it.
    The aborted transactions of the markers replayed at or above the recovery point are written
    to ``txn_index`` anew (its entries from there on are dropped first), so recovery rebuilds
    the ``.txnindex`` entries above the recovery point, which a power loss may have taken. A
    snapshot above the recovery point (one fsynced at a roll, say) would skip some of them, as
    Kafka's ``recoverSegment`` never replays from one above the segment it recovers. The
    entries below the recovery point are durable (``Log.begin_flush`` fsyncs them) and left
    alone, as Kafka's recovery leaves the segments below it: cutting and appending them again
    would make them unsynced, and no flush syncs them while the recovery point does not move
    (a power loss then kept a snapshot above them and lost them for good). A truncation
    (``recovery_point`` None) cuts the index itself and leaves it so."""
    bound = log_end_offset if recovery_point is None else min(recovery_point, log_end_offset)
    start = producer_state.truncate_and_reload(log_start_offset, bound)
    index_from = max(start, bound)
    if txn_index is not None:
        txn_index.truncate_from(index_from)
    if start >= log_end_offset:
        return 0
    count = 0
    i = max(0, bisect.bisect_right(bases, start) - 1)
    for segment in segments[i:]:
        position = 0
        if segment.base_offset < start:
            found = segment.translate_offset(start)
            if found is None:
                continue
            position = found[0]
        records = segment.records
        buf = records.buffer(records.size)
        batches = list(iter_batch_headers(buf, position, records.size))
        count += len(batches)
        replay_batches(producer_state, buf, batches, txn_index, segment.base_offset, index_from=index_from)
    return count


def replay_batches(producer_state: ProducerStateManager, buf: Buffer, batches: list[tuple[int, BatchHeader]],
                   txn_index: TransactionIndex | None, segment_base: int, *,
                   index_from: int = 0) -> list[CompletedTxn]:
    """Replay the producer batches of ``batches`` (positions in ``buf``) into the producer state,
    in runs between markers, so each marker at or after ``index_from`` has its aborted
    transaction indexed (in the segment ``segment_base``) with the last stable offset of its
    moment. Returns the completed ones."""
    completed: list[CompletedTxn] = []
    run: list[BatchHeader | tuple[BatchHeader, ControlRecord | None]] = []
    for pos, header in batches:
        if header.producer_id < 0:
            continue
        if not header.is_control:
            run.append(header)
            continue
        if run:
            producer_state.replay(run)
            run = []
        try:
            control: ControlRecord | None = read_control_record(buf, pos, header)
        except (ValueError, IndexError):
            control = None
        for txn in producer_state.replay([(header, control)]):
            completed.append(txn)
            if txn.is_aborted and txn_index is not None and txn.last_offset >= index_from:
                txn_index.append(segment_base, AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                          producer_state.last_stable_offset_of(txn)))
    if run:
        producer_state.replay(run)
    return completed
