"""LogSegment: one ``<base offset>.log`` with its ``.index`` and ``.timeindex`` (Kafka's ``LogSegment``).

The rules, where Kafka keeps them:

* ``append`` writes batches that already carry their offsets, and adds an offset-index
  entry (batch last offset -> batch position) and maybe a time-index entry (largest
  timestamp so far -> its batch's last offset) once more than ``index_interval_bytes``
  have been appended since the last entry. That is what makes the indexes sparse.
* ``translate_offset`` finds the floor index entry and scans batch headers forward;
  ``read`` returns whole batches from there as a zero-copy view.
* ``recover`` validates batch after batch, rebuilds both indexes and cuts an invalid tail.
* ``should_roll`` gathers every reason to start a new segment.

Files are opened lazily and no segment holds a descriptor for good, the active one
included, so descriptors are bounded by a budget, not by the number of partitions (issue
12). The active segment's indexes live in memory and are written behind (index.py): they
hold no descriptor. Its ``.log`` is opened on the first append or read (our descriptor for
``pwrite``, and the mapping reads use). A non-active segment opens only what its reads use,
on first use: the ``.log`` mapped (our descriptor closed at once, the mapping keeps its
own) and each index read-only, as an in-memory copy when small (no descriptor). The time
index is not opened by offset reads. Recovery and truncation reopen the indexes writable
and persist them when done. What every segment holds is counted against the
``OpenSegmentBudget`` the segment is given (segment_budget.py: one per LogManager), which
makes the least recently used give theirs up first (an active one reopens its ``.log`` on
next use: one ``open``). A cached non-active segment usually holds one descriptor, so a log
of as many segments as the budget has descriptors is read without opening a file. What a
closed segment must still answer (size, largest timestamp, next offset) is kept in memory.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from protocol.errors import KafkaError
from protocol.records import BatchHeader, batch_body, check_batch, decode_records, find_batch, iter_batch_headers

from . import fileio
from .file_records import FileRecords, Mapping
from .index import CorruptIndexError
from .offset_index import INT32_MAX, OffsetIndex
from .segment_budget import NEVER, USED, OpenSegmentBudget
from .time_index import TimeIndex

if TYPE_CHECKING:
    from protocol.records import Buffer

LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX = ".log", ".index", ".timeindex"
# The log cleaner's files (Kafka's): a cleaned segment being written, and one ready to replace the originals.
CLEANED_SUFFIX, SWAP_SUFFIX = ".cleaned", ".swap"
# A segment removed from its log, waiting file.delete.delay.ms before its files go (Kafka's).
DELETED_SUFFIX = ".deleted"
_KERNEL_WRITEBACK = (0, -1)  # LogSegment.writeback: the kernel decides (file_records.py, "Writeback")
_NO_TAIL = 1 << 63  # LogSegment._tail_offset when there is no tail batch to start at: no offset reaches it


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass
class RecoverResult:
    """What ``LogSegment.recover`` found: bytes kept, the offset after them, and why it stopped early."""

    valid_bytes: int
    next_offset: int
    truncated_bytes: int = 0
    error: str | None = None
    zero_tail: bool = False  # what was cut is only zeros (truncation leftovers, preallocated space)


class LogSegment:
    """Not thread-safe: every method runs on the owning Log's thread."""

    # read's short cut at the tail (False: the general path always, tests/storage/test_segment_tail_read.py)
    lean = True

    def __init__(self, dir: Path, base_offset: int, *, budget: OpenSegmentBudget, index_interval_bytes: int,
                 max_index_size: int, roll_jitter_ms: int = 0, created_ms: int = 0) -> None:
        self.dir = Path(dir)
        self.preallocate_bytes = 0  # log.preallocate: the .log's blocks reserved while active (``reserve``)
        self.writeback = _KERNEL_WRITEBACK  # kbroker.log.writeback.bytes, page.cache.retain.bytes while active
        self._writeback_previous: tuple[str, int, int] | None = None  # see write_back_every
        # what the next active segment drops of this one once it holds the retained bytes
        self.writeback_tail: tuple[str, int, int] | None = None
        self.base_offset = base_offset
        self.budget = budget  # what it holds while not active counts against this (its log's)
        self.log_path = self.dir / file_name(base_offset, LOG_SUFFIX)
        self.index_path = self.dir / file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = self.dir / file_name(base_offset, TIME_INDEX_SUFFIX)
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
        self.active = False
        self.used = 0  # bits of the budget's caches that saw it used (see BudgetCache)
        self.last_miss = NEVER  # see OpenSegmentBudget.admit
        try:
            self.size = self.log_path.stat().st_size
        except FileNotFoundError:
            self.size = 0
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = -1
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp: int | None = None  # max timestamp of the first batch
        self._records: FileRecords | None = None
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._retired_maps: list[Mapping] = []
        # The first batch of the last append: (its base offset, its position). A fetch at the tail
        # reads from there (a follower's parked fetch, woken by that append): translate_offset
        # starts at it without the offset index's binary search. Forgotten on truncation.
        self._tail_offset = _NO_TAIL
        self._tail_position = 0

    @classmethod
    def create(cls, dir: Path, base_offset: int, *, budget: OpenSegmentBudget, index_interval_bytes: int,
               max_index_size: int, segment_jitter_ms: int, now_ms: int, preallocate_bytes: int = 0) -> LogSegment:
        """A new, empty, active segment (its files are created); ``preallocate_bytes``: see ``reserve``."""
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            fileio.unlink_if_exists(Path(dir) / file_name(base_offset, suffix))
        segment = cls(dir, base_offset, budget=budget, index_interval_bytes=index_interval_bytes,
                      max_index_size=max_index_size,
                      roll_jitter_ms=random.randrange(segment_jitter_ms) if segment_jitter_ms > 0 else 0,
                      created_ms=now_ms)
        segment.activate()
        fileio.touch(segment.log_path)  # the indexes' files come with their first entries (index.py)
        segment.reserve(preallocate_bytes)
        return segment

    def reserve(self, nbytes: int) -> None:
        """log.preallocate: while active, the ``.log``'s blocks up to ``nbytes`` are reserved on
        the first append (file_records.py); given back when the segment stops being active."""
        self.preallocate_bytes = nbytes
        if nbytes and self._records is not None and self.active:
            self._records.preallocate(nbytes)

    def write_back_every(self, step: int, retain: int = -1, previous: tuple[str, int, int] | None = None) -> None:
        """While active, the ``.log`` starts its writeback every ``step`` bytes appended and
        drops the cache of what lies ``retain`` bytes behind its end, and ``previous`` (the
        segment before's tail: ``writeback_tail``) once it holds that many (file_records.py,
        "Writeback"); (0, -1): the kernel decides."""
        self.writeback = (step, retain)
        self._writeback_previous = previous
        if self._records is not None and self.active:
            self._records.write_back_every(step, retain, previous)
            self._writeback_previous = None

    # -- lazily opened files -------------------------------------------------------------

    @property
    def records(self) -> FileRecords:
        records = self._records
        if records is None:
            records = FileRecords(self.log_path, self.size, self._retired_maps)
            if not self.active:
                records.release_fd()
            else:
                if self.preallocate_bytes:
                    records.preallocate(self.preallocate_bytes)
                if self.writeback[0]:
                    records.write_back_every(*self.writeback, self._writeback_previous)
                    self._writeback_previous = None
            records.on_open = self._opened  # what it reopens or maps later is counted then
            records.on_window = self._window_changed
            self._records = records
            self._opened()
        else:
            self.used = USED
        return records

    @property
    def offset_index(self) -> OffsetIndex:
        """The active segment's is writable (in memory, no descriptor: see index.py); a
        non-active segment's is a read-only copy unless recovery or truncation opened it writable."""
        if self._offset_index is None:
            self._offset_index = OffsetIndex(self.index_path, self.base_offset, self.max_index_size, self.active,
                                             read_only=not self.active)
            self._opened()
        elif not self.active:
            self.used = USED
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        """As ``offset_index``."""
        if self._time_index is None:
            self._time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size, self.active,
                                         read_only=not self.active)
            self._opened()
        elif not self.active:
            self.used = USED
        return self._time_index

    def _opened(self) -> None:
        """A handle was opened: its cost goes to the budget."""
        self.budget.update(self)

    def _window_changed(self, mapped: bool) -> None:
        """The ``.log``'s write window was mapped or unmapped: the budget's ``windows`` count it."""
        if mapped:
            self.budget.windows.set(self, 1)
        else:
            self.budget.windows.discard(self)

    def close_window(self) -> None:
        """Unmap the ``.log``'s write window (the budget's ``windows`` cache releases it so)."""
        if self._records is not None:
            self._records.close_window()

    def _set_active(self, active: bool) -> None:
        self.active = active

    def held(self) -> tuple[int, int]:
        """(descriptors, bytes of in-memory index copies) that the open handles hold: what is
        really held (the ``.log`` tells the budget of every descriptor or mapping it opens)."""
        records = self._records
        fds = 0 if records is None else records.held_fds
        nbytes = 0
        for index in (self._offset_index, self._time_index):
            if index is not None:
                fds += index.held_fds
                nbytes += index.held_bytes
        return fds, nbytes

    def _writable_indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """Both indexes, writable: a non-active segment's read-only copies are replaced by
        writable in-memory ones with room for appends (recovery, truncation and its final
        time-index entry), until ``_settle_inactive`` persists them and turns them read-only."""
        if not self.active:
            self._drop_indexes(read_only=True)
            if self._offset_index is None:
                self._offset_index = OffsetIndex(self.index_path, self.base_offset, self.max_index_size)
            if self._time_index is None:
                self._time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size)
            self._opened()
        return self.offset_index, self.time_index

    def _drop_indexes(self, *, read_only: bool) -> None:
        """Close the indexes opened read-only (or those opened writable); they reopen on next use."""
        if self._offset_index is not None and self._offset_index.read_only == read_only:
            self._offset_index.close()
            self._offset_index = None
        if self._time_index is not None and self._time_index.read_only == read_only:
            self._time_index.close()
            self._time_index = None

    def _trim(self, create_empty: bool = True, release: bool = True) -> None:
        """Indexes opened writable persisted and the ``.log`` cut to its used size (``create_empty``:
        see AbstractIndex.persist); ``release``: a log.preallocate reservation given back too."""
        for index in (self._offset_index, self._time_index):
            if index is not None and not index.read_only:
                index.trim_to_valid_size(create_empty)
        if self._records is not None:
            self._records.trim()
            if release:
                self._records.release_reserved()
            self.writeback_tail = self._records.retire_write_back()
        self.preallocate_bytes = 0
        self.writeback = _KERNEL_WRITEBACK
        self._writeback_previous = None

    def _keep_read_handles(self) -> None:
        """Of a non-active segment's handles, keep what reads use: the ``.log`` mapping (not
        our descriptor) and read-only indexes: writable ones become in-memory copies (or, too
        large to copy, close and are mapped read-only on next use)."""
        for index in (self._offset_index, self._time_index):
            if index is not None and not index.read_only:
                index.make_read_only()
        self._drop_indexes(read_only=False)
        records = self._records
        if records is not None:
            if records.held_fds:
                records.release_fd()
            else:  # a former active segment that had given its files up: opened on next read
                records.close()
                self._records = None
        self.budget.update(self)

    def _settle_inactive(self) -> None:
        """After recovery or truncation of a non-active segment: the final time-index entry,
        files trimmed, only the read handles kept."""
        self._append_final_time_index_entry()
        self._trim()
        self._keep_read_handles()

    def close_handles(self) -> None:
        """Close the files and drop the index copies (all reopen on next use). Active
        segments stay open."""
        if self.active:
            return
        self.close_files()
        self.drop_index_copies()

    def close_files(self) -> None:
        """Close what holds descriptors (the ``.log``, its mapping and any mapped index); in-memory
        indexes stay, so an active segment keeps its entries and reopens its ``.log`` on the
        next append or read. What the budget calls on the least recently used segments."""
        self.budget.files.discard(self)
        records = self._records
        if records is not None:
            if not (self.active and records.has_window):  # a write window's zero tail is its own
                try:
                    records.trim()  # a zero tail a truncation had to leave (file_records.py)
                except OSError:
                    pass  # recovery cuts a zero tail too
            if self.active:  # the object stays: the next append reopens the file, nothing else
                records.close_fds()
            else:
                records.close()
                self._records = None
            self.budget.retired(self._retired_maps)
        if self._offset_index is not None and self._offset_index.held_fds:
            self._offset_index.close()
            self._offset_index = None
        if self._time_index is not None and self._time_index.held_fds:
            self._time_index.close()
            self._time_index = None

    def drop_index_copies(self) -> None:
        """Drop a non-active segment's in-memory index copies (reread on next use)."""
        self.budget.copies.discard(self)
        if self._offset_index is not None and self._offset_index.in_memory:
            self._offset_index = None
        if self._time_index is not None and self._time_index.in_memory:
            self._time_index = None

    def activate(self) -> None:
        """Become the log's active segment: writable indexes with room for appends, the
        ``.log`` (re)opened writable on first use; what it holds stays in the budget."""
        self._set_active(True)
        self._drop_indexes(read_only=True)
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.resize(self.max_index_size)
        self.budget.update(self)

    def on_become_inactive(self) -> None:
        """A newer segment took over (roll): final time-index entry, trim the files."""
        self.close(keep_open=True)

    # -- appending -----------------------------------------------------------------------

    def append(self, buf: Buffer, batches: list[tuple[int, BatchHeader]]) -> None:
        """Append ``buf`` (batches back to back; ``batches`` = (position in buf, header)).

        All or nothing: an OSError from the write leaves the segment as it was and propagates.
        The index entries then go to memory, which cannot fail (so there is no state to save
        for an undo); they reach the files behind (index.py).
        """
        records, offset_index, time_index = self._records, self._offset_index, self._time_index
        if offset_index is None or time_index is None or not self.active:  # else the properties return them as they are
            offset_index, time_index = self.offset_index, self.time_index
        if records is None:
            records = self.records
            position = records.append(buf)
        else:
            self.used = USED
            first_miss = self.last_miss == NEVER  # read before admit() records this miss
            if records.held_fds or self.budget.admit(self):
                position = records.append(buf)  # reopens a closed file for good (counted: on_open)
            elif first_miss and not records.has_window:  # a partition written once maps no window
                position = records.append_closing(buf)  # opened for this write only
            else:  # no descriptor held after it: through the write window (file_records.py)
                position = records.append_windowed(buf)
        self.size = records.size
        for relative_position, header in batches:
            self._index_batch(position + relative_position, header, offset_index, time_index)
        if batches:
            self._tail_offset = batches[0][1].base_offset
            self._tail_position = position + batches[0][0]

    def _index_batch(self, position: int, header: BatchHeader, offset_index: OffsetIndex,
                     time_index: TimeIndex) -> None:
        """Kafka's per-batch bookkeeping in LogSegment.append (shared with recover)."""
        max_timestamp = header.max_timestamp
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp_so_far = header.last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            # A full index only happens when the roll check could not help (an empty
            # segment): skipping an entry leaves the index sparser, never wrong.
            if not offset_index.is_full():
                offset_index.append(header.last_offset, position)
            if self.max_timestamp_so_far > time_index.last[0] and not time_index.is_full():
                time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += header.size
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = max_timestamp

    # -- reading -------------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch at or after ``start_position`` whose last
        offset is >= ``offset``; None if the segment has none. At or after the last append's
        first batch, the search starts there (every batch before it ends before ``offset``)."""
        if offset >= self._tail_offset:
            position = max(self._tail_position, start_position)
        else:
            position = max(self.offset_index.lookup(offset).position, start_position)
        records = self.records
        return find_batch(records.buffer(records.size), offset, position, records.size)

    def read(self, start_offset: int, max_size: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> tuple[int, memoryview] | None:
        """Whole batches from the one containing ``start_offset``: (its base offset, view).

        Stops before the first batch whose last offset is >= ``max_offset``, and at
        ``max_size`` bytes; a first batch larger than ``max_size`` is returned whole when
        ``min_one_batch`` (KIP-74), else nothing. None when no batch here reaches
        ``start_offset``.
        """
        if start_offset == self._tail_offset and max_offset is None and self.lean:
            # From the last append's first batch (a follower's fetch woken by that append: every
            # one at the leader of acks=all produces, issue 29): what follows it is that append's
            # whole batches; when they fit, they are what the lines below find, without the scan.
            records = self.records
            end_limit = records.size
            start = self._tail_position
            if end_limit - start <= max_size:
                return start_offset, records.slice(start, end_limit)
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start, first = found
        records = self.records
        end_limit = records.size
        if max_offset is not None:
            bound = self.translate_offset(max_offset, start)
            if bound is not None:
                end_limit = bound[0]
        if end_limit <= start:
            return first.base_offset, records.slice(0, 0)
        if first.size > max_size:
            end = start + first.size if min_one_batch else start
        else:
            target = min(start + max_size, end_limit)
            end = target if target == end_limit else self._last_batch_end_before(start, target)
        return first.base_offset, records.slice(start, end)

    def _last_batch_end_before(self, start: int, target: int) -> int:
        """The largest batch boundary <= ``target``, scanning from the nearest indexed batch."""
        end = max(self.offset_index.lookup_by_position(target).position, start)
        records = self.records
        for pos, header in iter_batch_headers(records.buffer(records.size), end, target):
            end = pos + header.size
        return end

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int, int] | None:
        """(timestamp, offset, partition leader epoch) of the first record at or after
        ``start_offset`` whose timestamp is >= ``timestamp``; None if there is none here.

        The time index finds where to start, batch headers find the first batch whose
        max timestamp qualifies, and that batch's records are decoded to find the record.
        """
        floor = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(floor.offset, start_offset)).position
        records = self.records
        buf = records.buffer(records.size)
        for pos, header in iter_batch_headers(buf, position, records.size):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            for record in decode_records(header, batch_body(buf, pos, header)):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return record.timestamp, record.offset, header.partition_leader_epoch
        return None

    # -- rolling and retention -----------------------------------------------------------

    def should_roll(self, *, set_size: int, max_timestamp: int, last_offset: int, segment_bytes: int,
                    segment_ms: int, now_ms: int | None = None, now: Callable[[], int] | None = None) -> str | None:
        """Why the next append (of ``set_size`` bytes ending at ``last_offset``, largest
        timestamp ``max_timestamp``) must go to a new segment, or None. An empty segment
        never rolls. The time waited counts from the first batch's timestamp (Kafka's
        rollingBasedTimestamp), or from the segment's creation without one: ``now_ms``, or
        ``now()`` read only then (the clock is not read on every append)."""
        size = self.size
        if size == 0:
            return None
        if size > segment_bytes - set_size:
            return "segment.bytes"
        first_timestamp = self.rolling_based_timestamp
        if first_timestamp is not None and first_timestamp >= 0:
            waited = max_timestamp - first_timestamp
        else:
            waited = (now_ms if now_ms is not None else now()) - self.created_ms  # type: ignore[misc]
        if waited > segment_ms - self.roll_jitter_ms:
            return "segment.ms"
        # the indexes as the properties give them (an active segment's loaded ones as they are), lazily
        offset_index = self._offset_index
        if offset_index is None or not self.active:
            offset_index = self.offset_index
        if offset_index.is_full():
            return "index full"
        time_index = self._time_index
        if time_index is None or not self.active:
            time_index = self.time_index
        if time_index.is_full():
            return "index full"
        if last_offset - self.base_offset > INT32_MAX:
            return "relative offset overflow"
        return None

    @property
    def largest_timestamp(self) -> int:
        """For retention.ms: the largest record timestamp, else the file's mtime (as Kafka)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return fileio.modified_ms(self.log_path)

    # -- recovery ------------------------------------------------------------------------

    def load_indexes(self, next_offset_bound: int | None) -> str | None:
        """Sanity-check both indexes and take the largest timestamp from the time index.

        Returns why they need a rebuild (missing or corrupt), or None when they are fine.
        The active segment's missing index is an empty one: it had no entry when the log
        closed (no file is created for none), and the loader re-reads the active segment from
        its last index entry anyway.
        """
        if not self.active:
            for path in (self.index_path, self.time_index_path):
                if not path.exists() and self.size > 0:
                    return f"{path.name} is missing"
        try:
            self.offset_index.sanity_check(self.size, next_offset_bound)
            self.time_index.sanity_check(self.size, next_offset_bound)
        except CorruptIndexError as exc:
            return str(exc)
        self._max_timestamp_from_time_index()
        return None

    def _max_timestamp_from_time_index(self, scan_to: int = 0) -> None:
        """The largest timestamp from the time index's last entry (a segment that stopped
        being active has its final entry there); with ``scan_to``, also from the batches
        after that entry up to that position, as Kafka's ``loadLargestTimestamp`` does
        after a truncation."""
        timestamp, offset = self.time_index.last_entry()
        position = self.offset_index.lookup(offset).position
        if scan_to > position:
            for _pos, header in iter_batch_headers(self.records.buffer(scan_to), position, scan_to):
                if header.max_timestamp > timestamp:
                    timestamp, offset = header.max_timestamp, header.last_offset
        self.max_timestamp_so_far = timestamp
        self.offset_of_max_timestamp_so_far = offset if timestamp >= 0 else -1

    def recover(self, *, start_position: int = 0, verify_crc: bool = True,
                on_batch: Callable[[BatchHeader], None] | None = None, allow_gaps: bool = False) -> RecoverResult:
        """Validate the batches from ``start_position`` (a batch boundary), rebuild the
        index entries from there, and cut the file at the first invalid batch.

        ``start_position`` 0 rebuilds everything (unclean shutdown, bad index); the
        position of the last offset-index entry re-reads just the tail (clean load of the
        active segment). A batch must start at the offset the previous one ended at.
        ``on_batch`` sees each valid header (the leader-epoch cache uses it). ``allow_gaps``: a
        compacted segment, whose batches may skip offsets (never go back).
        """
        records = self.records
        offset_index, time_index = self._writable_indexes()
        end = records.size
        buf = records.buffer(end)
        try:
            next_offset = check_batch(buf, start_position, end, verify_crc=False, compacted=allow_gaps).base_offset
        except KafkaError:
            start_position = 0
        if start_position == 0:
            offset_index.reset()
            time_index.reset()
            self.max_timestamp_so_far = self.offset_of_max_timestamp_so_far = -1
            self.rolling_based_timestamp = None
            next_offset = self.base_offset
            self.bytes_since_last_index_entry = 0
        else:
            offset_index.truncate_to(next_offset)
            time_index.truncate_to(next_offset)
            self._max_timestamp_from_time_index(scan_to=start_position)
            self.bytes_since_last_index_entry = self.index_interval_bytes + 1  # re-index that batch
        position, error = start_position, None
        while position < end:
            try:
                header = check_batch(buf, position, end, verify_crc=verify_crc, compacted=allow_gaps)
            except KafkaError as exc:
                error = str(exc)
                break
            if header.base_offset != next_offset and not (allow_gaps and header.base_offset > next_offset):
                error = f"batch at byte {position}: base offset {header.base_offset}, expected {next_offset}"
                break
            self._index_batch(position, header, offset_index, time_index)
            if on_batch is not None:
                on_batch(header)
            position += header.size
            next_offset = header.next_offset
        zero_tail = error is not None and records.is_zeros(position, end)
        if zero_tail:
            error = f"zero tail from byte {position}"
        del buf
        self._tail_offset = _NO_TAIL
        truncated = records.truncate_to(position)
        self.size = records.size
        if not self.active:
            self._settle_inactive()
        return RecoverResult(position, next_offset, truncated, error, zero_tail)

    # -- truncation, flushing, closing ---------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop the batch that contains ``offset`` and all after it; returns bytes dropped."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        offset_index, time_index = self._writable_indexes()
        offset_index.truncate_to(header.base_offset)
        time_index.truncate_to(header.base_offset)
        self._tail_offset = _NO_TAIL
        dropped = self.records.truncate_to(position)
        self.size = position
        self._max_timestamp_from_time_index(scan_to=position)
        self.bytes_since_last_index_entry = 0
        if position == 0:
            self.rolling_based_timestamp = None
        if not self.active:
            self._settle_inactive()
        return dropped

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty)."""
        last = self.offset_index.last_entry()
        records = self.records
        next_offset = last.offset + 1 if self.offset_index.entries else self.base_offset
        for _pos, header in iter_batch_headers(records.buffer(records.size), last.position, records.size):
            next_offset = header.next_offset
        return next_offset

    def dup_fds(self) -> list[int]:
        """Descriptors of the three files that the caller owns, for a flush on another thread
        (the index entries persisted first). A closed ``.log`` is opened for this only."""
        fds: list[int] = []
        try:
            fds.append(self._records.dup_fd() if self._records is not None else fileio.open(self.log_path, os.O_RDONLY))
            fds.append(self.offset_index.dup_fd())
            fds.append(self.time_index.dup_fd())
        except BaseException:
            for fd in fds:
                fileio.close(fd)
            raise
        return fds

    def close(self, keep_open: bool = False) -> None:
        """Final time-index entry, indexes persisted and the ``.log`` trimmed to its used size,
        files closed (``keep_open``: all but what reads use). The segment is no longer active
        (unless persisting failed: then it raises and stays as it was)."""
        if self.active and self._time_index is not None:
            self._append_final_time_index_entry()
        # a closing log keeps a log.preallocate reservation (freeing a large one can take tens of ms
        # on ext4 with discard: a shutdown of many partitions would pay it for each): the restart
        # reserves the same blocks again, and the segment's roll gives them back
        self._trim(create_empty=keep_open, release=keep_open)
        self._set_active(False)
        if keep_open:
            self._keep_read_handles()
        else:
            self.close_handles()
            self._drop_indexes(read_only=False)

    def _append_final_time_index_entry(self) -> None:
        """Make the time index's last entry the segment's largest timestamp (Kafka's
        ``onBecomeInactiveSegment``), so a reload reads it from there."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                         skip_full_check=True)

    def delete(self) -> None:
        self._set_active(False)
        self.close_handles()
        self._offset_index = self._time_index = None  # writable ones unpersisted: their files go
        for path in (self.log_path, self.index_path, self.time_index_path):
            fileio.unlink_if_exists(path)

    def rename_to_deleted(self) -> None:
        """The first step of Kafka's delayed deletion: close the files and rename each to
        ``<name>.deleted`` (a newer one of that name is replaced); ``delete`` removes them
        after ``file.delete.delay.ms``. A reader that holds the segment meanwhile reopens the
        renamed files; views it already has stay valid (mappings outlive a rename or unlink).
        A restart removes ``.deleted`` files (log_loader.py)."""
        self._set_active(False)
        self.close_handles()
        renamed = []
        for path in (self.log_path, self.index_path, self.time_index_path):
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                fileio.replace(path, target)
            except FileNotFoundError:
                pass  # an index never written
            renamed.append(target)
        self.log_path, self.index_path, self.time_index_path = renamed
        # a former active segment's indexes are in memory (written behind): they stay, for its
        # readers, and would follow the files if ever persisted
        if self._offset_index is not None:
            self._offset_index.path = self.index_path
        if self._time_index is not None:
            self._time_index.path = self.time_index_path

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size})"

