"""LogCleaner: compaction of ``cleanup.policy=compact`` logs (Kafka's LogCleaner and Cleaner).

A compacted log keeps, for every key, at least its newest record: ``__consumer_offsets``
(one offset record per group and partition, one metadata record per group) does not grow
without bound, and neither does any other topic created with ``cleanup.policy=compact``.

One pass over a log (``CleanTask``):

1. The cleanable range: the non-active segments below the last stable offset (Kafka's
   "first uncleanable offset": nothing of an open transaction, nor a marker not yet
   replicated, is ever cleaned), stopping at the first segment with records younger than
   ``min.compaction.lag.ms``. The log's ``first_dirty_offset`` splits it into a clean head
   (compacted before) and the dirty rest.
2. The offset map: the newest offset of every key in the cleanable range.
3. Segments are grouped (consecutive, at most ``segment.bytes`` together) and each group is
   rewritten into one ``<base>.log.cleaned``: a record survives if it is the newest of its
   key in the map (records without a key, and control batches, are kept); a tombstone (null
   value) also goes once it sits in the clean head and its batch is older than
   ``delete.retention.ms``, so consumers that read the head had time to see it. A batch whose
   records all survive is copied as it is; one that lost some is re-encoded with the same
   base offset, last offset delta, timestamps, producer fields and compression; one that lost
   all is dropped. Offsets never change: a compacted log has gaps (a cleaned segment may end
   before the next one starts, or be empty).
   Transactions (Kafka's CleanedTransactionMetadata, ``_TxnTracker``): the batches of aborted
   transactions (from the ``.txnindex``) go, and stay out of the offset map; an ABORT marker
   stays, with its index entry, in the pass that removes its data, and may go in a later pass;
   a COMMIT marker may go once no batch of its transaction is left; either only from the clean
   head once older than ``delete.retention.ms`` (as tombstones). The cleaned segment's
   ``.txnindex`` holds only the entries of the ABORT markers kept with data seen.
4. The swap (``Log.replace_segments``), crash-safe as Kafka's: ``.cleaned`` → ``.swap`` (a
   restart completes a ``.swap`` and deletes a ``.cleaned``), old segments renamed
   ``.deleted`` (deleted after ``file.delete.delay.ms``), ``.swap`` → ``.log``, indexes rebuilt.

Steps 2 and 3 — the reading and rewriting — need no Log state: ``LogCleaner.begin_clean`` takes
views of the segments' mappings on the log's thread, ``CleanTask.run`` works from them on any
thread (the broker's cleaner threads, broker/cleaner_threads.py), and ``complete_clean`` swaps
on the log's thread, or drops the pass if the log was truncated, deleted or lost the segments
meanwhile. ``clean`` does all three at once. ``grab_filthiest_log`` picks the compacted log
with the highest dirty ratio (dirty bytes / cleanable bytes) at or over its
``min.cleanable.dirty.ratio``. Where the dirty part starts survives restarts in the log dir's
``cleaner-offset-checkpoint`` (log_manager.py).

Differences from Kafka, kept small: the delete horizon uses the batch's max timestamp (Kafka:
the segment file's modification time, or KIP-534's horizon written into the batch); the offset
map is a dict, not a bounded dedupe buffer; an idempotent producer's batch that loses all its
records goes too (Kafka keeps an empty batch for its sequence state); the cleaned segment's
indexes are rebuilt by the swap on the log's thread (Kafka's cleaner writes them as it cleans).
"""

from __future__ import annotations

import logging
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Container, Mapping

from crc32c import crc32c

from protocol.clock import Time
from protocol.compression import Compression, compress
from protocol.records import (ATTRIBUTES_OFFSET, CODEC_MASK, CONTROL_ABORT, CONTROL_COMMIT, CRC_OFFSET, HEADER, HEADER_SIZE,
                              LOG_APPEND_TIME, LOG_OVERHEAD, BatchHeader, ControlRecord, Record, batch_body, decode_records,
                              encode_record, iter_batch_headers, read_control_record)

from . import fileio
from .log import Log
from .segment import CLEANED_SUFFIX, LOG_SUFFIX, LogSegment, file_name
from .txn_index import AbortedTxn

log = logging.getLogger("kbroker.storage.cleaner")

_U32 = struct.Struct(">I")
INT32_MAX = 2**31 - 1


@dataclass
class CleanerStats:
    topic: str
    partition: int
    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_dropped: int = 0
    aborted_records_dropped: int = 0
    markers_dropped: int = 0
    end_offset: int = 0
    duration_ms: int = 0

    def summary(self) -> str:
        return (f"{self.topic}-{self.partition}: cleaned up to offset {self.end_offset}: {self.segments_before} "
                f"segments ({self.bytes_before} bytes, {self.records_read} records) -> {self.segments_after} "
                f"({self.bytes_after} bytes, {self.records_kept} records; {self.tombstones_dropped} tombstones, "
                f"{self.aborted_records_dropped} aborted records and {self.markers_dropped} markers dropped) in "
                f"{self.duration_ms} ms")


def cleanable_segments(log_: Log, now_ms: int) -> list[LogSegment]:
    """The non-active segments wholly below the last stable offset (so below the high watermark,
    and never holding an open transaction nor a marker not yet replicated: Kafka's "first
    uncleanable offset"), up to the first one holding records younger than min.compaction.lag.ms."""
    segments = log_.segments
    out = []
    lag = log_.config.min_compaction_lag_ms
    upper = log_.last_stable_offset
    for segment, following in zip(segments, segments[1:]):
        if following.base_offset > upper:
            break
        if lag > 0 and now_ms - segment.largest_timestamp < lag:
            break
        out.append(segment)
    return out


def dirty_ratio(log_: Log, now_ms: int) -> tuple[float, int]:
    """(dirty bytes / cleanable bytes, dirty bytes) of a log."""
    segments = cleanable_segments(log_, now_ms)
    if not segments:
        return 0.0, 0
    total = sum(s.size for s in segments)
    bases = [s.base_offset for s in log_.segments]
    dirty = 0
    for segment in segments:
        next_base = bases[bases.index(segment.base_offset) + 1]
        if next_base > log_.first_dirty_offset:
            dirty += segment.size
    return (dirty / total if total else 0.0), dirty


class CleanAborted(Exception):
    """``CleanTask.abort`` was called (the broker shuts down, the log went away)."""


@dataclass
class _Group:
    """Consecutive segments rewritten into one cleaned segment, with what the cleaner thread reads."""

    segments: list[LogSegment]
    next_bases: list[int]  # the base offset after each segment (where the next one starts)
    buffers: list[memoryview]  # each segment's bytes, views of its mapping taken on the log's thread
    cleaned: Path
    aborted: list[AbortedTxn] = field(default_factory=list)  # the aborted transactions the group overlaps
    kept_aborted: list[AbortedTxn] = field(default_factory=list)  # the cleaned segment's .txnindex (run fills it)


class _TxnTracker:
    """What one walk over batches in offset order knows of their transactions (Kafka's
    CleanedTransactionMetadata): the aborted transactions (from the ``.txnindex``) whose first
    offset has been reached, and the producers with committed data seen since their last marker.

    - A transactional data batch of an aborted transaction goes (and is noted as seen).
    - An ABORT marker may go once no data of its transaction was seen in this walk: the pass that
      removes the data keeps the marker and its index entry, the next one may drop both (Kafka's
      two passes). Kept with data seen, its entry goes into the cleaned segment's index.
    - A COMMIT marker may go once no batch of its transaction was seen (compaction removed them).
    The caller also keeps any marker not yet past the delete horizon."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._aborted: dict[int, AbortedTxn] = {}  # producer id -> its aborted transaction reached
        self._seen: set[int] = set()  # producers of those whose data was seen
        self._committed: set[int] = set()
        self.kept: list[AbortedTxn] = []

    def _reach(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            txn = pending[self._next]
            self._aborted.setdefault(txn.producer_id, txn)
            self._next += 1

    def on_data_batch(self, header: BatchHeader) -> bool:
        """True if the batch belongs to an aborted transaction (it goes)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        if header.producer_id in self._aborted:
            self._seen.add(header.producer_id)
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, control: ControlRecord | None) -> bool:
        """True if the marker may go (as far as its transaction's data is concerned)."""
        self._reach(header.last_offset)
        if control is None:
            return True  # an empty control batch: nothing left to mark
        if control.type == CONTROL_ABORT:
            txn = self._aborted.pop(header.producer_id, None)
            if txn is not None and header.producer_id in self._seen:
                self._seen.discard(header.producer_id)
                self.kept.append(txn)
                return False
            self._seen.discard(header.producer_id)
            return True
        if control.type == CONTROL_COMMIT:
            if header.producer_id in self._committed:
                self._committed.discard(header.producer_id)
                return False
            return True
        return False


class CleanTask:
    """One compaction pass over one log, in three steps (Kafka's cleaner thread does the middle
    one; the log's thread the others):

    1. ``LogCleaner.begin_clean`` on the log's thread picks the segments and takes views of their
       mappings (a mapping stays valid while viewed, even once its file is renamed or deleted).
    2. ``run`` — thread-safe, like ``FlushPlan.run``: builds the offset map and writes each
       group's ``.cleaned`` file from those views, touching no Log state. Appends (to the
       active segment, never cleaned) and reads go on meanwhile.
    3. ``LogCleaner.complete_clean`` on the log's thread swaps the cleaned segments in, unless
       the log changed under the pass (truncated, segments gone, deleted): then the ``.cleaned``
       files are dropped and the next pass starts over.
    """

    def __init__(self, log_: Log, groups: list[_Group], end_offset: int, first_dirty: int, horizon: int,
                 stats: CleanerStats, started_ms: float, truncations: int, aborted: list[AbortedTxn] | None = None) -> None:
        self.log = log_
        self.groups = groups
        self.aborted_txns = aborted or []  # the aborted transactions below end_offset (the .txnindex)
        self.end_offset = end_offset
        self.first_dirty = first_dirty
        self.horizon = horizon
        self.stats = stats
        self.started_ms = started_ms
        self.truncations = truncations
        self.done = False  # run finished: every .cleaned file written and fsynced
        self._aborted = threading.Event()
        # Called by ``run`` after each group it wrote, on the thread running it (tests pause here).
        self.on_group_cleaned: Callable[[CleanTask, int], None] | None = None

    def abort(self) -> None:
        """Make a running ``run`` stop at its next batch (and drop what it wrote). Thread-safe."""
        self._aborted.set()

    @property
    def aborted(self) -> bool:
        return self._aborted.is_set()

    def run(self) -> None:
        """Write the cleaned segments (thread-safe: reads only the views taken by begin_clean).
        On any error, or an abort, the ``.cleaned`` files written so far are removed."""
        try:
            latest = self._build_offset_map()
            for i, group in enumerate(self.groups):
                self._clean_group(group, latest)
                if self.on_group_cleaned is not None:
                    self.on_group_cleaned(self, i)
            self._check_aborted()
        except BaseException:
            self.discard()
            raise
        self.done = True

    def discard(self) -> None:
        """Remove the ``.cleaned`` files (a pass not swapped in) and release the views."""
        for group in self.groups:
            fileio.unlink_if_exists(group.cleaned)
        self.release()

    def release(self) -> None:
        for group in self.groups:
            for view in group.buffers:
                view.release()
            group.buffers = []

    def _check_aborted(self) -> None:
        if self._aborted.is_set():
            raise CleanAborted(f"{self.log.topic}-{self.log.partition}: cleaning aborted")

    def _build_offset_map(self) -> dict[bytes, int]:
        """The newest offset of each key, leaving out the records of aborted transactions (they
        must not hide an older committed value)."""
        latest: dict[bytes, int] = {}
        txns = _TxnTracker(self.aborted_txns)
        for group in self.groups:
            for buf in group.buffers:
                self._check_aborted()
                for pos, header in iter_batch_headers(buf):
                    if header.is_control:
                        txns.on_control_batch(header, _control_record(buf, pos, header))
                        continue
                    if self._aborted.is_set():
                        self._check_aborted()
                    if txns.on_data_batch(header):
                        continue
                    for record in decode_records(header, batch_body(buf, pos, header)):
                        if record.key is not None:
                            latest[record.key] = record.offset
        return latest

    def _clean_group(self, group: _Group, latest: dict[bytes, int]) -> None:
        stats, first_dirty, horizon = self.stats, self.first_dirty, self.horizon
        txns = _TxnTracker(group.aborted)
        with fileio.FileWriter(group.cleaned) as out:
            for buf, next_base in zip(group.buffers, group.next_bases):
                self._check_aborted()
                in_clean_head = next_base <= first_dirty
                for pos, header in iter_batch_headers(buf):
                    # tombstones and markers go only from the clean head, once their batch is past
                    # the horizon (Kafka piggy-backs markers on the tombstones' retention)
                    past_horizon = in_clean_head and header.max_timestamp < horizon
                    if header.is_control:
                        if txns.on_control_batch(header, _control_record(buf, pos, header)) and past_horizon:
                            stats.markers_dropped += 1
                        else:
                            out.write(buf[pos:pos + header.size])
                        continue
                    if self._aborted.is_set():
                        self._check_aborted()
                    records = decode_records(header, batch_body(buf, pos, header))
                    stats.records_read += len(records)
                    if txns.on_data_batch(header):
                        stats.aborted_records_dropped += len(records)
                        continue
                    drop_tombstones = past_horizon
                    kept = []
                    for r in records:
                        if r.key is not None and latest.get(r.key, r.offset) > r.offset:
                            continue
                        if r.value is None and r.key is not None and drop_tombstones:
                            stats.tombstones_dropped += 1
                            continue
                        kept.append(r)
                    stats.records_kept += len(kept)
                    if len(kept) == len(records):
                        out.write(buf[pos:pos + header.size])
                    elif kept:
                        out.write(rebuild_batch(header, kept))
                    # a batch that kept nothing goes: consumers cannot step over an empty batch
                    # (librdkafka reports MSG_SIZE_TOO_LARGE on a fetch of only that)
            out.sync()
        group.kept_aborted = sorted(txns.kept, key=lambda t: t.last_offset)


class LogCleaner:
    def __init__(self, time: Time, logs: Callable[[], Mapping[tuple[str, int], Log]]) -> None:
        """``logs``: the logs to look at (LogManager.all_logs)."""
        self.time = time
        self.logs = logs
        self.passes = 0
        self.aborted_passes = 0

    def grab_filthiest_log(self, busy: Container[Log] = ()) -> Log | None:
        """The compacted log (not in ``busy``: being cleaned) with the highest dirty ratio at or
        over its min.cleanable.dirty.ratio; None when none needs cleaning."""
        now = self.time.milliseconds()
        best: tuple[float, Log] | None = None
        for log_ in self.logs().values():
            if not log_.config.compact or log_ in busy:
                continue
            ratio, dirty = dirty_ratio(log_, now)
            if dirty and ratio >= log_.config.min_cleanable_dirty_ratio and (best is None or ratio > best[0]):
                best = (ratio, log_)
        return None if best is None else best[1]

    def clean_once(self) -> CleanerStats | None:
        """Clean the dirtiest compacted log that needs it, synchronously; None when none does."""
        log_ = self.grab_filthiest_log()
        return None if log_ is None else self.clean(log_)

    def clean(self, log_: Log) -> CleanerStats | None:
        """One compaction pass over ``log_``, all three steps on this thread (see CleanTask);
        None if nothing is cleanable."""
        task = self.begin_clean(log_)
        if task is None:
            return None
        task.run()
        return self.complete_clean(task)

    def begin_clean(self, log_: Log) -> CleanTask | None:
        """Step 1, on the log's thread: the cleanable segments of ``log_`` grouped, with views of
        their bytes; None if nothing is cleanable."""
        started = self.time.monotonic_ms()
        now = self.time.milliseconds()
        segments = cleanable_segments(log_, now)
        if not segments:
            return None
        bases = [s.base_offset for s in log_.segments]
        end_offset = bases[bases.index(segments[-1].base_offset) + 1]
        stats = CleanerStats(log_.topic, log_.partition, segments_before=len(segments),
                             bytes_before=sum(s.size for s in segments), end_offset=end_offset)
        groups = []
        aborted = [t for t in log_.txn_index.entries if t.first_offset < end_offset]
        for group in self._group(segments, log_.config.segment_bytes, bases):
            next_bases = [bases[bases.index(s.base_offset) + 1] for s in group]
            buffers = [memoryview(s.records.buffer(s.size))[:s.size] for s in group]
            cleaned = log_.dir / (file_name(group[0].base_offset, LOG_SUFFIX) + CLEANED_SUFFIX)
            start, end = group[0].base_offset, next_bases[-1]
            overlapping = [t for t in aborted if t.first_offset < end and t.last_offset >= start]
            groups.append(_Group(group, next_bases, buffers, cleaned, overlapping))
        return CleanTask(log_, groups, end_offset, log_.first_dirty_offset,
                         now - log_.config.delete_retention_ms, stats, started, log_.truncations, aborted)

    def complete_clean(self, task: CleanTask) -> CleanerStats | None:
        """Step 3, on the log's thread, after ``task.run()`` succeeded: swap the cleaned segments
        in and move the log's first dirty offset. None (and the ``.cleaned`` files dropped) when
        the log changed meanwhile: truncated, deleted, or some of the segments gone."""
        log_ = task.log
        stats = task.stats
        try:
            if not task.done or not self._still_current(task):
                self.aborted_passes += 1
                log.info("%s-%d: the log changed while it was being cleaned; the pass is dropped", log_.topic,
                         log_.partition)
                task.discard()
                return None
            task.release()
            for i, group in enumerate(task.groups):
                new_segment = log_.replace_segments(group.segments, group.cleaned, group.kept_aborted)
                stats.segments_after += 1
                stats.bytes_after += new_segment.size
        except BaseException:
            task.discard()
            raise
        log_.first_dirty_offset = max(log_.first_dirty_offset, task.end_offset)
        stats.duration_ms = int(self.time.monotonic_ms() - task.started_ms)
        self.passes += 1
        log.info("%s", stats.summary())
        return stats

    def _still_current(self, task: CleanTask) -> bool:
        log_ = task.log
        if self.logs().get((log_.topic, log_.partition)) is not log_ or log_.truncations != task.truncations:
            return False
        present = log_.segments
        for group in task.groups:
            first = group.segments[0]
            if first not in present:
                return False
            i = present.index(first)
            if present[i:i + len(group.segments)] != group.segments or i + len(group.segments) >= len(present):
                return False
        return True

    # -- grouping ----------------------------------------------------------------------------

    @staticmethod
    def _group(segments: list[LogSegment], max_bytes: int, bases: list[int]) -> list[list[LogSegment]]:
        """Consecutive segments, each group at most ``max_bytes`` (before cleaning) and spanning
        less than 2^31 offsets (the offset index stores offsets relative to the base)."""
        groups: list[list[LogSegment]] = []
        for segment in segments:
            if groups:
                group = groups[-1]
                size = sum(s.size for s in group) + segment.size
                next_base = bases[bases.index(segment.base_offset) + 1]
                if size <= max_bytes and next_base - 1 - group[0].base_offset <= INT32_MAX:
                    group.append(segment)
                    continue
            groups.append([segment])
        return groups


def _control_record(buf: memoryview, pos: int, header: BatchHeader) -> ControlRecord | None:
    """The control batch's record; None for a batch left without one. One that does not read is
    of no known type (kept)."""
    if header.records_count == 0:
        return None
    try:
        return read_control_record(buf, pos, header)
    except ValueError:
        return ControlRecord(-1, -1)


def rebuild_batch(header: BatchHeader, records: list[Record]) -> bytes:
    """A batch holding only ``records`` of the batch ``header`` describes: same base offset,
    last offset delta (so the batch still ends where it ended), timestamps, producer fields,
    attributes and compression; a new CRC."""
    log_append = header.timestamp_type == LOG_APPEND_TIME
    attributes = header.attributes if records else header.attributes & ~CODEC_MASK  # an empty batch: no codec
    body = b"".join(encode_record(r.offset - header.base_offset, 0 if log_append else r.timestamp - header.base_timestamp,
                                  r.key, r.value, r.headers) for r in records)
    codec = header.compression
    if codec != Compression.NONE and records:
        body = compress(codec, body)
    size = HEADER_SIZE + len(body)
    buf = bytearray(size)
    HEADER.pack_into(buf, 0, header.base_offset, size - LOG_OVERHEAD, header.partition_leader_epoch, 2, 0,
                     attributes, header.last_offset_delta, header.base_timestamp, header.max_timestamp,
                     header.producer_id, header.producer_epoch, header.base_sequence, len(records))
    buf[HEADER_SIZE:] = body
    _U32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)
