"""The aborted transaction index (Kafka's ``TransactionIndex``, ``<base offset>.txnindex``).

One file per segment, holding the transactions aborted by a marker in that segment, in the
order their markers were written. An entry is 34 bytes, big-endian (Kafka's ``AbortedTxn``)::

    version           int16   0
    producer id       int64
    first offset      int64   the transaction's first offset on this partition
    last offset       int64   its ABORT marker's offset
    last stable offset int64  the LSO once the marker was written: a fetch whose upper bound
                              is at or below it needs no later entry (``collect``)

``TransactionIndex`` keeps every segment's entries in memory (aborts are rare; a list per
segment) and appends each new one to its file; truncation cuts the files, dropped segments
remove them. A file is fsynced by the flush of its segment (``dup_fds_for_flush`` /
``mark_synced``; Kafka's ``LogSegment.flush`` flushes its ``txnIndex``): recovery after a crash
rebuilds only the entries at or above the recovery point, from the producer state snapshot at
or below it (log_loader.py), so those below it must be durable. One whose append failed is
rewritten whole by that flush. Truncation cuts a file in place (``_cut``), even to nothing,
never rewrites or removes it: its durable entries stay durable, and the next flush's fsync
makes the cut durable. A file a crash left with a torn last entry is cut to its
whole entries when loaded (else the next append would land after the torn bytes and misread).
The files carry no checksum, as Kafka's.
Not thread-safe: the owning Log's thread only.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from . import fileio
from .checkpoint import write_atomically
from .segment import file_name

log = logging.getLogger("kbroker.storage.txn_index")

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
assert ENTRY_SIZE == 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def decode_entries(data: bytes | bytearray | memoryview) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file; a torn tail (a crash mid-write) is ignored."""
    out = []
    whole = len(data) - len(data) % ENTRY_SIZE
    for version, pid, first, last, lso in _ENTRY.iter_unpack(memoryview(data)[:whole]):
        if version != 0:
            raise ValueError(f"aborted transaction entry version {version}, only 0 is known")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TransactionIndex:
    """Every segment's aborted transactions, by segment base offset, and their files."""

    def __init__(self, dir: Path) -> None:
        self.dir = Path(dir)
        self._by_segment: dict[int, list[AbortedTxn]] = {}
        self._all: list[AbortedTxn] = []  # every entry, by last offset (markers are in log order)
        self._lasts: list[int] = []
        # Files changed since their last fsync, each with a change count (a flush marks it synced
        # only if it did not change meanwhile); and those whose append failed (rewritten whole).
        self._unsynced: dict[int, int] = {}
        self._failed: set[int] = set()
        self.unreadable: list[int] = []  # load: the segments whose file did not read

    def __len__(self) -> int:
        return len(self._all)

    def path(self, base: int) -> Path:
        return self.dir / file_name(base, TXN_INDEX_SUFFIX)

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._all)

    def segment_entries(self, base: int) -> list[AbortedTxn]:
        return list(self._by_segment.get(base, ()))

    # -- loading ----------------------------------------------------------------------------

    def load(self, bases: list[int], names: Iterable[str]) -> None:
        """Read the files of the segments ``bases`` (``names``: the directory's listing); a
        file of no segment is deleted, one that does not read is dropped and its segment's base
        offset put in ``unreadable``: the loader recovers from there, which rebuilds its entries
        (Kafka recovers a segment whose index is corrupt)."""
        wanted = set(bases)
        self.unreadable = []
        for name in names:
            if not name.endswith(TXN_INDEX_SUFFIX):
                continue
            stem = name[:-len(TXN_INDEX_SUFFIX)]
            if len(stem) != 20 or not stem.isdigit():
                continue
            base = int(stem)
            path = self.dir / name
            if base not in wanted:
                fileio.unlink_if_exists(path)
                continue
            try:
                data = path.read_bytes()
                entries = decode_entries(data)
            except (OSError, ValueError) as exc:
                log.warning("%s: %s does not read (%s): rebuilding it from its segment", self.dir.name, name, exc)
                fileio.unlink_if_exists(path)
                self.unreadable.append(base)
                continue
            if entries:
                self._by_segment[base] = entries
            if len(data) % ENTRY_SIZE:
                log.info("%s: cutting the torn last entry of %s", self.dir.name, name)
                self._cut(base, entries)
        self._reindex()

    def _reindex(self) -> None:
        self._all = sorted((e for entries in self._by_segment.values() for e in entries), key=lambda e: e.last_offset)
        self._lasts = [e.last_offset for e in self._all]

    # -- changes ----------------------------------------------------------------------------

    def append(self, base: int, txn: AbortedTxn) -> None:
        """A transaction aborted by a marker in the segment ``base`` (its file appended to)."""
        self._by_segment.setdefault(base, []).append(txn)
        if self._lasts and txn.last_offset < self._lasts[-1]:
            self._reindex()
        else:
            self._all.append(txn)
            self._lasts.append(txn.last_offset)
        self._changed(base)
        try:
            fileio.append_to(self.path(base), txn.encode())
        except OSError as exc:
            # the log holds the marker: the next flush of the segment rewrites the file
            self._failed.add(base)
            log.error("%s: cannot append to %s: %s", self.dir.name, self.path(base).name, exc)

    def truncate_from(self, offset: int) -> None:
        """Forget the transactions whose marker is at or after ``offset`` (the log was cut there)."""
        if not self._lasts or self._lasts[-1] < offset:
            return
        for base in list(self._by_segment):
            entries = self._by_segment[base]
            kept = [e for e in entries if e.last_offset < offset]
            if len(kept) != len(entries):
                self._cut(base, kept)
        self._reindex()

    def drop_segments(self, bases: Iterable[int]) -> None:
        """The segments ``bases`` left the log: their entries and files go."""
        changed = False
        for base in bases:
            if self._by_segment.pop(base, None) is not None:
                changed = True
            self._unsynced.pop(base, None)
            self._failed.discard(base)
            fileio.unlink_if_exists(self.path(base))
        if changed:
            self._reindex()

    def replace_segments(self, old_bases: list[int], new_base: int, entries: list[AbortedTxn] | None = None) -> None:
        """A compaction swap merged the segments ``old_bases`` into one at ``new_base``: its file
        holds ``entries`` (the cleaner's: the aborted transactions whose marker it kept because
        it removed their data in that pass, Kafka's cleaned transaction index), or, when None,
        all their entries."""
        merged = [e for b in old_bases for e in self._by_segment.pop(b, ())]
        if entries is not None:
            merged = list(entries)
        # The merged file first, fsynced (a new inode: the old file's fsyncs do not cover it, and
        # the swap it goes with is durable at once), then the old segments' files go.
        self._set(new_base, sorted(merged, key=lambda e: e.last_offset), sync=True)
        for b in old_bases:
            if b != new_base:
                self._unsynced.pop(b, None)
                self._failed.discard(b)
                fileio.unlink_if_exists(self.path(b))
        self._reindex()

    def clear(self) -> None:
        for base in list(self._by_segment):
            fileio.unlink_if_exists(self.path(base))
        self._by_segment.clear()
        self._unsynced.clear()
        self._failed.clear()
        self._reindex()

    def _set(self, base: int, entries: list[AbortedTxn], sync: bool = False) -> None:
        """Rewrite the file of segment ``base`` whole; ``sync``: fsynced now (else by the next
        flush that reaches it)."""
        path = self.path(base)
        if entries:
            self._by_segment[base] = entries
        else:
            self._by_segment.pop(base, None)
        self._changed(base)
        self._failed.discard(base)
        try:
            if entries:
                write_atomically(path, b"".join(e.encode() for e in entries), sync=sync)
                if sync:
                    self._unsynced.pop(base, None)
            else:
                fileio.unlink_if_exists(path)
        except OSError as exc:
            self._failed.add(base)
            log.error("%s: cannot rewrite %s: %s", self.dir.name, path.name, exc)

    def _cut(self, base: int, kept: list[AbortedTxn]) -> None:
        """The file of ``base`` holds ``kept`` and then more (entries or a torn one): cut it in
        place to ``kept``, its first entries. Not rewritten: a rewrite renamed into place unsynced
        could lose, in a power loss, entries below the recovery point that were durable, which
        recovery does not rebuild; a cut undone by one only brings back what the next load drops."""
        if base in self._failed:  # the file may not hold what memory does: rewritten whole
            self._set(base, kept)
            return
        path = self.path(base)
        if kept:
            self._by_segment[base] = kept
        else:
            self._by_segment.pop(base, None)
        self._changed(base)
        try:
            # cut to nothing too, not removed: the flush that moves the recovery point past the
            # cut fsyncs the file (``dup_fds_for_flush``), while a removal is durable only with
            # an fsync of the directory, which no flush does for it: a power loss could bring
            # the file back, entries of markers since truncated away, below the recovery point
            fd = fileio.open(path, os.O_WRONLY)
            try:
                fileio.ftruncate(fd, len(kept) * ENTRY_SIZE)
            finally:
                fileio.close(fd)
        except FileNotFoundError:
            if kept:
                self._failed.add(base)
                log.error("%s: cannot cut %s: it is gone", self.dir.name, path.name)
        except OSError as exc:
            self._failed.add(base)
            log.error("%s: cannot cut %s: %s", self.dir.name, path.name, exc)

    def _changed(self, base: int) -> None:
        self._unsynced[base] = self._unsynced.get(base, 0) + 1

    # -- flushing ---------------------------------------------------------------------------

    def dup_fds_for_flush(self, up_to_base: int) -> tuple[list[int], dict[int, int], bool]:
        """Descriptors (the caller owns them) of the changed files of the segments up to
        ``up_to_base``, for a flush's fsync, what to pass to ``mark_synced`` after it, and
        whether a file was renamed into place or removed (the directory needs an fsync too): a
        file whose last write failed is rewritten first (OSError propagates)."""
        fds: list[int] = []
        token: dict[int, int] = {}
        renamed = False
        try:
            for base in sorted(b for b in self._unsynced if b <= up_to_base):
                entries = self._by_segment.get(base)
                if base in self._failed:
                    if entries:
                        write_atomically(self.path(base), b"".join(e.encode() for e in entries), sync=False)
                    else:
                        fileio.unlink_if_exists(self.path(base))
                    self._failed.discard(base)
                    renamed = True
                token[base] = self._unsynced[base]
                if entries:
                    fds.append(fileio.open(self.path(base), os.O_RDONLY))
                else:  # a file cut to nothing (``_cut``) is fsynced too; one removed is not
                    try:
                        fds.append(fileio.open(self.path(base), os.O_RDONLY))
                    except FileNotFoundError:
                        pass
        except BaseException:
            for fd in fds:
                fileio.close(fd)
            raise
        return fds, token, renamed

    def mark_synced(self, token: dict[int, int]) -> None:
        """After the fsync of ``dup_fds_for_flush``'s descriptors: the files not changed since are durable."""
        for base, count in token.items():
            if self._unsynced.get(base) == count:
                del self._unsynced[base]

    # -- reading ----------------------------------------------------------------------------

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read of [``fetch_offset``, ``upper_bound_offset``) overlaps:
        marker at or after the fetch offset, first offset below the upper bound (Kafka's
        collectAbortedTxns); the scan stops at the first entry whose last stable offset
        reaches the upper bound, as no later transaction can start below it."""
        if not self._all:
            return []
        out = []
        all_ = self._all
        for i in range(bisect.bisect_left(self._lasts, fetch_offset), len(all_)):
            txn = all_[i]
            if txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                break
        return out
