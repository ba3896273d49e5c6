"""AbstractIndex: a sparse, fixed-width, memory-mapped index file (Kafka's ``AbstractIndex``).

Each segment has two: the offset index (``.index``, 8-byte entries) and the time index
(``.timeindex``, 12-byte entries). Entries are big-endian and sorted on every column the
index is searched by. The file of the active segment is preallocated (sparse, by
ftruncate) to ``segment.index.bytes`` and trimmed to ``entries * entry_size`` on roll and
close; the number of entries of an existing file is its length over the entry size.

Entries are written through a writable ``MAP_SHARED`` mapping: a ``pack_into`` is much
cheaper than a small ``pwrite``, and every produce batch may add an entry. A store into a
page of a sparse file whose block cannot be allocated is a SIGBUS, so the space is reserved
ahead of the writes by writing zeros with ``pwrite`` in RESERVE_BYTES chunks (``reserve``): a
full disk surfaces there, as an OSError the log reports as KAFKA_STORAGE_ERROR. Not
``posix_fallocate``: it leaves unwritten extents, and the first store into one of those
costs as much as a page fault into a hole (milliseconds on ext4), which every new segment
would pay in both indexes on roll; zeros written ahead make later stores plain memory writes.
No memoryview of the mapping ever leaves this class, so the mapping
can be closed and replaced at any time (``resize``).

A non-active segment's index is immutable, so reads do not need any of that: opened
``read_only``, a small index (up to COPY_MAX_BYTES) is read into memory with one
``pread`` and its descriptor closed at once; a larger one is mapped read-only and only the
mapping's own descriptor stays. A non-active segment that serves reads thus holds no
descriptor for a small index, and the copy is out of reach of page-cache eviction.
Recovery and truncation of a non-active segment open it writable again.

There is no checksum: the log rebuilds an index from its segment after a crash, and
``sanity_check`` (cheap: length, and ordering over a sample of entries including the
first and last) catches truncated or garbage files on open.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

SANITY_SAMPLES = 16
RESERVE_BYTES = 64 * 1024  # space reserved ahead of index writes (8,192 offset-index entries)
# A read-only index up to this size is copied into memory with one pread, a larger one mapped:
# for small files the pread is cheaper than mapping and faulting in a binary search's pages,
# and the copy needs no descriptor and cannot be evicted; for large files the mapping wins.
COPY_MAX_BYTES = 64 * 1024


def _read_only_entries(path: Path) -> mmap.mmap | bytes:
    """The file's bytes (one pread) up to COPY_MAX_BYTES, else a read-only mapping; either
    way our descriptor is closed before returning. A missing file reads as empty."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        length = os.fstat(fd).st_size
        if length > COPY_MAX_BYTES:
            return mmap.mmap(fd, length, access=mmap.ACCESS_READ)
        return os.pread(fd, length, 0)
    finally:
        os.close(fd)


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
        """``writable``: preallocated to ``max_index_size`` for appends (the active segment);
        otherwise mapped at its length. ``read_only``: for lookups only, no descriptor kept
        (see the module docstring; a missing file reads as empty); ``max_index_size`` and
        ``writable`` are ignored."""
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self._warm_entries = self.WARM_SECTION_BYTES // self.entry_size
        self.read_only = read_only
        self._fd = -1
        self._buf: mmap.mmap | bytes | None = None  # the entries: a mapping, or a copy when read-only and small
        self._reserved = 0  # bytes from the start known to have space (entries included)
        if read_only:
            self._buf = _read_only_entries(path)
            self.length = self.max_index_size = len(self._buf)
        else:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self.length = os.fstat(self._fd).st_size
            self.max_index_size = max_index_size if max_index_size > 0 else self.length
        self.opened_length = self.length
        self.entries = self.length // self.entry_size
        if writable and not read_only:
            self.resize(self.max_index_size)
        elif not read_only:
            self._map()
        self._refresh_last()

    @property
    def held_fds(self) -> int:
        """Descriptors held: ours (none when read-only) and the mapping's."""
        return (self._fd >= 0) + isinstance(self._buf, mmap.mmap)

    @property
    def in_memory(self) -> bool:
        """A read-only copy in memory (no descriptor, no mapping)."""
        return isinstance(self._buf, bytes)

    @property
    def held_bytes(self) -> int:
        """Bytes of memory held by a read-only copy."""
        return len(self._buf) if isinstance(self._buf, bytes) else 0

    def make_read_only(self) -> bool:
        """Turn a writable index whose entries fit in COPY_MAX_BYTES into a read-only copy of
        them (its mapping and descriptor closed; a roll keeps the final entries this way
        instead of rereading the file). False, and nothing changed, when they do not fit."""
        if self.read_only:
            return True
        size = self.size_in_bytes
        if size > COPY_MAX_BYTES:
            return False
        data = self._buf[:size] if self._buf is not None else b""
        self.close()
        self._buf, self.read_only = data, True
        self.length = self.opened_length = self.max_index_size = size
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
        """Set the file (and mapping) length to ``new_size`` rounded down to whole entries."""
        self._check_writable()
        new_size -= new_size % self.entry_size
        new_size = max(new_size, self.size_in_bytes)
        if new_size != self.length:
            self._unmap()
            os.ftruncate(self._fd, new_size)
            self.length = new_size
            self._reserved = min(self._reserved, new_size)
        self._map()

    def trim_to_valid_size(self) -> None:
        """Shrink the file to the entries in use (on roll and close)."""
        self.resize(self.size_in_bytes)
        self.opened_length = self.length
        self.max_index_size = self.length

    def _map(self) -> None:
        if self._buf is None and self.length > 0:
            self._buf = mmap.mmap(self._fd, self.length, access=mmap.ACCESS_WRITE)

    def _unmap(self) -> None:
        if isinstance(self._buf, mmap.mmap):
            self._buf.close()  # never exported, so this cannot raise BufferError
        self._buf = None

    # -- entries -------------------------------------------------------------------------

    def entry(self, slot: int) -> tuple[int, int]:
        buf = self._buf
        assert buf is not None  # there are entries only while mapped or copied
        return self.ENTRY.unpack_from(buf, slot * self.entry_size)

    def reserve(self, n: int) -> None:
        """Make sure the space of the next ``n`` entries is allocated, by writing zeros past
        the entries (ENOSPC surfaces here, as OSError, never as a SIGBUS from a store into
        the mapping)."""
        end = (self.entries + n) * self.entry_size
        if end > self._reserved:
            self._check_writable()
            start = max(self._reserved, self.entries * self.entry_size)  # never over an entry
            end = min(self.length, max(end, start + RESERVE_BYTES))
            zeros = memoryview(bytes(end - start))
            done = 0
            while start + done < end:
                done += os.pwrite(self._fd, zeros[done:], start + done)
            self._reserved = end

    def _append_entry(self, key: int, value: int) -> None:
        if self.entries >= self.max_entries:
            raise ValueError(f"{self.path}: index is full ({self.entries} entries)")
        position = self.entries * self.entry_size
        if position + self.entry_size > self._reserved:  # the segment reserves ahead of its appends
            self.reserve(1)
        buf = self._buf
        assert isinstance(buf, mmap.mmap)  # appends go to a writable index: mapped once reserved
        self.ENTRY.pack_into(buf, position, key, value)
        self.entries += 1
        self.last = (key, value)

    def _refresh_last(self) -> None:
        self.last = self.entry(self.entries - 1) if self.entries else self.EMPTY_LAST

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries; the dropped ones are zeroed so a later crash cannot
        bring them back."""
        self._check_writable()
        if n < self.entries:
            start, end = n * self.entry_size, self.entries * self.entry_size
            buf = self._buf
            assert isinstance(buf, mmap.mmap)  # writable and holding entries: mapped
            buf[start:end] = bytes(end - start)
            self.entries = n
            self._refresh_last()

    def reset(self) -> None:
        """Drop every entry (before a rebuild): the file is cut to zero and preallocated again."""
        self._check_writable()
        self._unmap()
        os.ftruncate(self._fd, 0)
        self.length = self.entries = self.opened_length = self._reserved = 0
        self.last = self.EMPTY_LAST
        self.resize(self.max_index_size)

    def largest_lower_bound_slot_for(self, target: int, column: int = 0) -> int:
        """Slot of the largest entry whose ``column`` is <= ``target``; -1 if none is.

        Binary search over the mapping, warm section first (see WARM_SECTION_BYTES).
        """
        n = self.entries
        if n == 0:
            return -1
        key_struct, key_offset = self.SEARCH_KEYS[column]
        unpack, buf, size = key_struct.unpack_from, self._buf, self.entry_size
        assert buf is not None  # there are entries: mapped or copied
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
        """A descriptor of the file the caller owns (to fsync elsewhere)."""
        return os.dup(self._fd) if self._fd >= 0 else os.open(self.path, os.O_RDONLY)

    def close(self) -> None:
        self._unmap()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
