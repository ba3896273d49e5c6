"""AbstractIndex: a sparse, fixed-width, memory-mapped index file (Kafka's ``AbstractIndex``).

Each segment has two: the offset index (``.index``, 8-byte entries) and the time index
(``.timeindex``, 12-byte entries). Entries are big-endian and sorted on every column the
index is searched by. The file of the active segment is preallocated (sparse, by
ftruncate) to ``segment.index.bytes`` and trimmed to ``entries * entry_size`` on roll and
close; the number of entries of an existing file is its length over the entry size.

Entries are written through a writable ``MAP_SHARED`` mapping (a ``pack_into``, ~0.2 µs,
where a ``pwrite`` of 8 bytes costs ~1 µs, and every 16 KiB produce batch adds an entry).
A store into a page of a sparse file whose block cannot be allocated is a SIGBUS, so blocks
are reserved ahead of the writes with ``posix_fallocate`` in RESERVE_BYTES chunks: a full
disk surfaces there, as an OSError the log reports as KAFKA_STORAGE_ERROR. No memoryview
of the mapping ever leaves this class, so the mapping can be closed and replaced at any
time (``resize``).

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
RESERVE_BYTES = 64 * 1024  # blocks reserved ahead of index writes (8,192 offset-index entries)


class CorruptIndexError(Exception):
    """The index file fails its sanity check; the owner rebuilds it from the log."""


class AbstractIndex:
    """Base of OffsetIndex and TimeIndex. Not thread-safe.

    Subclasses set ``ENTRY`` (the entry ``struct.Struct``) and ``SEARCH_KEYS`` (column ->
    (struct of that column, byte offset in the entry)), and implement ``_check_entry``.
    """

    ENTRY: struct.Struct
    SEARCH_KEYS: dict[int, tuple[struct.Struct, int]]

    # Kafka's warm section: the last 8 KiB of entries, i.e. the last two 4 KiB pages at
    # most. Lookups from followers and tailing consumers land there; searching it first
    # keeps the binary search on pages that are already resident instead of touching
    # log2(n) cold pages across the file.
    WARM_SECTION_BYTES = 8192

    def __init__(self, path: Path, base_offset: int, max_index_size: int = -1, writable: bool = True) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self._warm_entries = self.WARM_SECTION_BYTES // self.entry_size
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._mmap: mmap.mmap | None = None
        self.length = self.opened_length = os.fstat(self._fd).st_size
        self.entries = self.length // self.entry_size
        self._reserved = 0  # bytes from the start known to have blocks (re-reserving is a cheap no-op)
        self.max_index_size = max_index_size if max_index_size > 0 else self.length
        if writable:
            self.resize(self.max_index_size)
        else:
            self._map()

    # -- size ----------------------------------------------------------------------------

    @property
    def max_entries(self) -> int:
        return self.max_index_size // self.entry_size

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def resize(self, new_size: int) -> None:
        """Set the file (and mapping) length to ``new_size`` rounded down to whole entries."""
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
        if self._mmap is None and self.length > 0:
            self._mmap = mmap.mmap(self._fd, self.length, access=mmap.ACCESS_WRITE)

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()  # never exported, so this cannot raise BufferError
            self._mmap = None

    # -- entries -------------------------------------------------------------------------

    def entry(self, slot: int) -> tuple:
        return self.ENTRY.unpack_from(self._mmap, slot * self.entry_size)

    def _append_entry(self, *values: int) -> None:
        if self.entries >= self.max_entries:
            raise ValueError(f"{self.path}: index is full ({self.entries} entries)")
        position = self.entries * self.entry_size
        if position + self.entry_size > self._reserved:
            end = min(self.length, max(position + self.entry_size, self._reserved + RESERVE_BYTES))
            os.posix_fallocate(self._fd, self._reserved, end - self._reserved)  # ENOSPC here, not SIGBUS below
            self._reserved = end
        self.ENTRY.pack_into(self._mmap, position, *values)
        self.entries += 1

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries; the dropped ones are zeroed so a later crash cannot
        bring them back."""
        if n < self.entries:
            start, end = n * self.entry_size, self.entries * self.entry_size
            self._mmap[start:end] = bytes(end - start)
            self.entries = n

    def reset(self) -> None:
        """Drop every entry (before a rebuild): the file is cut to zero and preallocated again."""
        self._unmap()
        os.ftruncate(self._fd, 0)
        self.length = self.entries = self.opened_length = self._reserved = 0
        self.resize(self.max_index_size)

    def largest_lower_bound_slot_for(self, target: int, column: int = 0) -> int:
        """Slot of the largest entry whose ``column`` is <= ``target``; -1 if none is.

        Binary search over the mapping, warm section first (see WARM_SECTION_BYTES).
        """
        n = self.entries
        if n == 0:
            return -1
        key_struct, key_offset = self.SEARCH_KEYS[column]
        unpack, buf, size = key_struct.unpack_from, self._mmap, self.entry_size
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

    def _check_entry(self, entry: tuple, previous: tuple | None, log_size: int,
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
        return os.dup(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            self._unmap()
            os.close(self._fd)
            self._fd = -1
