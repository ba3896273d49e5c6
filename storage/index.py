"""AbstractIndex: a sparse, fixed-width index file (Kafka's ``AbstractIndex``).

Each segment has two: the offset index (``.index``, 8-byte entries) and the time index
(``.timeindex``, 12-byte entries). Entries are big-endian and sorted on every column the
index is searched by. The file holds exactly ``entries * entry_size`` bytes once persisted;
the number of entries of an existing file is its length over the entry size.
``segment.index.bytes`` bounds the entries of the active segment's index (``is_full``
makes the segment roll), as the preallocated length of Kafka's does.

An index opened for writing (the active segment's, or one being rebuilt by recovery or
truncation) keeps its entries in memory, in a ``bytearray``, and holds no descriptor and no
mapping: an idle partition then costs no descriptor for its indexes, whatever the number
of partitions (issue 12). Appends go to memory only (a ``pack`` and an extend: cheaper than
a store into a mapping, and nothing can SIGBUS). The file is written behind, by ``persist``
(one ``pwrite`` of what changed, and an ``ftruncate`` when entries were dropped), when the
entries must be on disk: on roll and close (``trim_to_valid_size``), before a flush fsyncs
the file (``dup_fd``), and when it turns read-only. Between those the file may lag behind
memory; that is safe because the loader never trusts the active segment's index after an
unclean shutdown (the active segment always holds or follows the recovery point, so it is
re-validated and its index rebuilt), and a clean shutdown persists it. A full disk surfaces
as an OSError from ``persist`` (the segment stays as it was). The file is not preallocated.
Memory: about 20 bytes per ``index.interval.bytes`` (4 KiB) of the active segment, a 0.5 %
overhead that Kafka pays in the page cache of its preallocated mappings.

There is no checksum: the log rebuilds an index from its segment after a crash, and
``sanity_check`` (cheap: length, and ordering over a sample of entries including the
first and last) catches truncated or garbage files on open.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from . import fileio

SANITY_SAMPLES = 16
# A read-only index up to this size is copied into memory with one pread, a larger one mapped:
# for small files the pread is cheaper than mapping and faulting in a binary search's pages,
# and the copy needs no descriptor and cannot be evicted; for large files the mapping wins.
COPY_MAX_BYTES = 64 * 1024


def _read_file(path: Path) -> bytes | None:
    """The whole file (None when missing), our descriptor closed again."""
    try:
        fd = fileio.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        length = os.fstat(fd).st_size
        chunks, done = [], 0
        while done < length:
            chunk = os.pread(fd, length - done, done)
            if not chunk:
                break
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)
    finally:
        fileio.close(fd)


def _read_only_entries(path: Path) -> mmap.mmap | bytes:
    """The file's bytes (one pread) up to COPY_MAX_BYTES, else a read-only mapping; either
    way our descriptor is closed before returning. A missing file reads as empty."""
    try:
        fd = fileio.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        length = os.fstat(fd).st_size
        if length > COPY_MAX_BYTES:
            return mmap.mmap(fd, length, access=mmap.ACCESS_READ)
        return os.pread(fd, length, 0)
    finally:
        fileio.close(fd)


class CorruptIndexError(Exception):
    """The index file fails its sanity check; the owner rebuilds it from the log."""


class AbstractIndex:
    """Base of OffsetIndex and TimeIndex. Not thread-safe.

    Subclasses set ``ENTRY`` (the entry ``struct.Struct``), ``SEARCH_KEYS`` (column ->
    (struct of that column, byte offset in the entry)) and ``EMPTY_LAST``, and implement
    ``_check_entry``. ``last``, the last entry as stored (relative offsets), is kept in memory
    as Kafka's ``_lastEntry``: every append compares against it.
    """

    ENTRY: struct.Struct
    SEARCH_KEYS: dict[int, tuple[struct.Struct, int]]
    EMPTY_LAST: tuple[int, int]  # ``last`` of an empty index

    # Kafka's warm section: the last 8 KiB of entries, i.e. the last two 4 KiB pages at
    # most. Lookups from followers and tailing consumers land there; searching it first
    # keeps the binary search on pages that are already resident instead of touching
    # log2(n) cold pages across the file.
    WARM_SECTION_BYTES = 8192

    def __init__(self, path: Path, base_offset: int, max_index_size: int = -1, writable: bool = True, *,
                 read_only: bool = False) -> None:
        """``writable``: room for entries up to ``max_index_size`` (the active segment);
        otherwise no more than the file holds. Either way the entries are read into memory and
        no descriptor is kept (see the module docstring). ``read_only``: for lookups only (a
        copy, or a read-only mapping when large; a missing file reads as empty);
        ``max_index_size`` and ``writable`` are ignored."""
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self._warm_entries = self.WARM_SECTION_BYTES // self.entry_size
        self.read_only = read_only
        # the entries: a mutable copy (writable), else a copy or a read-only mapping
        self._buf: bytearray | mmap.mmap | bytes
        missing = False
        if read_only:
            self._buf = _read_only_entries(path)
            self.length = len(self._buf)
            self.max_index_size = self.length
        else:
            data = _read_file(path)
            missing = data is None
            data = data or b""
            self.length = len(data)
            self.max_index_size = max(max_index_size, self.length) if writable else self.length
            self._buf = bytearray(data[:self.length - self.length % self.entry_size])
        self.opened_length = self.length  # what the file held when opened (sanity_check)
        self.entries = self.length // self.entry_size
        # Writable: the file's length (-1: no file yet), and how many bytes of the entries it holds.
        self._file_length = -1 if missing else self.length
        self._persisted = len(self._buf) if not read_only else 0
        self._refresh_last()

    @property
    def held_fds(self) -> int:
        """Descriptors held: a large read-only index's mapping's; none otherwise."""
        return int(isinstance(self._buf, mmap.mmap))

    @property
    def in_memory(self) -> bool:
        """A read-only copy in memory (no descriptor, no mapping)."""
        return isinstance(self._buf, bytes)

    @property
    def held_bytes(self) -> int:
        """Bytes of memory held by a read-only copy (a writable index's are not counted: they
        cannot be dropped before they are persisted)."""
        return len(self._buf) if isinstance(self._buf, bytes) else 0

    @property
    def dirty(self) -> bool:
        """Entries (or a truncation) not yet written to the file."""
        return not self.read_only and (self._persisted < len(self._buf) or self._file_length != len(self._buf))

    def make_read_only(self) -> bool:
        """Persist a writable index, then, when its entries fit in COPY_MAX_BYTES, keep them as a
        read-only copy (a roll keeps the final entries this way instead of rereading the file).
        False when they do not fit: the caller drops it (a read maps the file)."""
        if self.read_only:
            return True
        self.persist()
        if self.size_in_bytes > COPY_MAX_BYTES:
            return False
        self._buf, self.read_only = bytes(self._buf), True
        self.length = self.opened_length = self.max_index_size = self.size_in_bytes
        return True

    def _check_writable(self) -> None:
        if self.read_only:
            raise ValueError(f"{self.path}: opened read-only")

    # -- size ----------------------------------------------------------------------------

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @max_index_size.setter
    def max_index_size(self, size: int) -> None:
        self._max_index_size = size
        self.max_entries = size // self.entry_size  # an attribute: appends check it per batch

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def resize(self, new_size: int) -> None:
        """Room for entries up to ``new_size`` bytes (never below the entries held)."""
        self._check_writable()
        self.max_index_size = max(new_size - new_size % self.entry_size, self.size_in_bytes)

    def trim_to_valid_size(self, create_empty: bool = True) -> None:
        """Persist, and take no more entries than it holds (on roll and close)."""
        self.persist(create_empty=create_empty)
        self.length = self.opened_length = self.size_in_bytes
        self.max_index_size = self.length

    # -- persisting ----------------------------------------------------------------------

    def persist(self, fd: int = -1, create_empty: bool = True) -> None:
        """Write what changed since the last ``persist`` to the file (through ``fd`` when given,
        else a descriptor opened and closed here): the new entries, and a cut when entries
        were dropped. An OSError leaves the entries in memory (a later ``persist`` retries).
        Without ``create_empty`` a missing file stays missing while there are no entries
        (an active segment's index that never got one: creating files costs)."""
        if not self.dirty:
            return
        own = fd < 0
        if own and not create_empty and self._file_length < 0 and not self._buf:
            return
        if own:
            fd = fileio.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            data = memoryview(self._buf)
            try:
                start = self._persisted
                while start < len(data):
                    start += fileio.pwrite(fd, data[start:], start)
            finally:
                data.release()
            if self._file_length > len(self._buf):
                fileio.ftruncate(fd, len(self._buf))
            self._persisted = self._file_length = len(self._buf)
        finally:
            if own:
                fileio.close(fd)

    # -- entries -------------------------------------------------------------------------

    def entry(self, slot: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self._buf, slot * self.entry_size)

    def _append_entry(self, key: int, value: int) -> None:
        if self.entries >= self.max_entries:
            raise ValueError(f"{self.path}: index is full ({self.entries} entries)")
        buf = self._buf
        assert isinstance(buf, bytearray)  # only a writable index takes entries (read-only ones are full)
        buf += self.ENTRY.pack(key, value)
        self.entries += 1
        self.last = (key, value)

    def _refresh_last(self) -> None:
        self.last = self.entry(self.entries - 1) if self.entries else self.EMPTY_LAST

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries (the file follows on the next ``persist``)."""
        self._check_writable()
        if n < self.entries:
            buf = self._buf
            assert isinstance(buf, bytearray)
            del buf[n * self.entry_size:]
            self.entries = n
            self._persisted = min(self._persisted, len(buf))
            self._refresh_last()

    def reset(self) -> None:
        """Drop every entry (before a rebuild); the file is cut on the next ``persist``."""
        self.truncate_to_entries(0)
        self.length = self.opened_length = 0

    def largest_lower_bound_slot_for(self, target: int, column: int = 0) -> int:
        """Slot of the largest entry whose ``column`` is <= ``target``; -1 if none is.

        Binary search, warm section first (see WARM_SECTION_BYTES).
        """
        n = self.entries
        if n == 0:
            return -1
        key_struct, key_offset = self.SEARCH_KEYS[column]
        unpack, buf, size = key_struct.unpack_from, self._buf, self.entry_size
        first_hot = max(0, n - 1 - self._warm_entries)
        if unpack(buf, first_hot * size + key_offset)[0] < target:
            lo, hi = first_hot, n - 1
        else:
            if unpack(buf, key_offset)[0] > target:
                return -1
            lo, hi = 0, first_hot
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            key = unpack(buf, mid * size + key_offset)[0]
            if key > target:
                hi = mid - 1
            elif key < target:
                lo = mid
            else:
                return mid
        return lo

    # -- checks --------------------------------------------------------------------------

    def sanity_check(self, log_size: int, next_offset_bound: int | None) -> None:
        """Raise CorruptIndexError unless the length is whole entries and a sample of the
        entries (first and last included) is ordered and points inside the segment.

        ``next_offset_bound`` is an offset no entry may reach (the next segment's base
        offset), or None when unknown.
        """
        if self.opened_length % self.entry_size:
            raise CorruptIndexError(f"{self.path}: length {self.opened_length} is not a multiple of {self.entry_size}")
        n = self.entries
        if n == 0:
            return
        slots = sorted({0, n - 1, *range(0, n, max(1, n // SANITY_SAMPLES))})
        previous = None
        for slot in slots:
            current = self.entry(slot)
            problem = self._check_entry(current, previous, log_size, next_offset_bound)
            if problem:
                raise CorruptIndexError(f"{self.path}: entry {slot} {current}: {problem}")
            previous = current

    def _check_entry(self, entry: tuple[int, int], previous: tuple[int, int] | None, log_size: int,
                     next_offset_bound: int | None) -> str | None:
        raise NotImplementedError

    def _offset_out_of_segment(self, relative_offset: int, next_offset_bound: int | None) -> str | None:
        if relative_offset < 0:
            return "offset below the segment's base offset"
        if next_offset_bound is not None and self.base_offset + relative_offset >= next_offset_bound:
            return f"offset at or beyond {next_offset_bound}"
        return None

    # -- files ---------------------------------------------------------------------------

    def dup_fd(self) -> int:
        """A descriptor of the file the caller owns (to fsync elsewhere), the entries persisted
        through it first."""
        if self.read_only:
            return fileio.open(self.path, os.O_RDONLY)
        fd = fileio.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.persist(fd)
        except BaseException:
            fileio.close(fd)
            raise
        return fd

    def close(self) -> None:
        """Persist a writable index (no empty file is created); unmap a mapped one. The object
        is not used afterwards."""
        if not self.read_only:
            self.persist(create_empty=False)
        elif isinstance(self._buf, mmap.mmap):
            self._buf.close()  # never exported, so this cannot raise BufferError
        self._buf = b""
