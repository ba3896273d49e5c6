"""LeaderEpochFileCache: which leader epoch began at which offset, for one partition.

Kafka's ``LeaderEpochFileCache``: an ordered list of (epoch, start offset), persisted to
``<partition dir>/leader-epoch-checkpoint`` (``0``, count, then ``epoch startOffset`` lines).
Replication uses ``end_offset_for`` to answer OffsetForLeaderEpoch and to truncate a follower
by leader epoch.

When the file is written (Kafka's KAFKA-15046 and KAFKA-16541 go the same way). A change
(``assign``, ``truncate_from_end``, ``truncate_from_start``) only changes the entries in
memory; ``clear`` (the log was deleted and starts again) alone writes at once. The file is
written, atomically (temp file, rename; the first write creates it in place, and an empty
file, left by a process that died in between, reads as no entries), by:

* the log's flush, before the recovery point may move: ``Log.begin_flush(target)`` writes the
  file when the entries starting below ``target`` differ from the file's (``write_needed``),
  and puts it (and the directory) into the FlushPlan to fsync when they differ from what is
  known durable (``sync_needed``);
* a clean shutdown (``LogManager.shutdown``: the files written on threads, then a flush up to
  the LEO, then ``Log.close``).

Nothing else writes it: not a new epoch, not an append at it, not a background pass. Kafka
writes the file on every ``assign``; here a broker restarted with 10,000 partitions (a new
epoch each) would write 10,000 files in its first seconds of traffic: a background pass doing
that off the loop (~150 us a file on ext4) held 40 % of the broker's py-spy samples for ~20 s
after each restart and slowed produce to 10,000 partitions then (issue 12). The
file is only read by the loader, and what it must hold is only what lies below the recovery
point (below): the log's flush writes exactly that, before the recovery point moves.

An entry starting at the LEO (a leader that appended nothing in its epoch) is never a reason
to write: loading drops it anyway (``truncate_from_end(LEO)``, as Kafka's loader), and its
leader assigns it again on the next LeaderAndIsr. So a broker made leader of 10,000 partitions
at start, or loading 10,000 logs whose latest epoch appended nothing, writes no file for it.

What survives a crash. Let RP be the recovery point the loader uses (the log dir's
checkpoint: at most the log's recovery point when it was written, and rewritten at once when
a follower truncates below it, ``LogManager.checkpoint_recovery_points_after_truncation``).

1. Below RP the file (durably, for a power loss too) holds what the cache held: the recovery
   point moves to ``target`` only through a flush begun after the file was written (and, when
   needed, fsynced) with the entries below ``target``. Afterwards the entries below ``target``
   change only by a log truncation below it (which voids that flush's advance and lowers the
   recovery point to the truncation offset) or by ``truncate_from_start`` (point 3).
2. At or above RP the file may lack entries (assigned since) or hold entries the cache
   dropped (truncated since). After an unclean shutdown the loader re-validates every batch
   from the segment holding RP, at base offset X <= RP: it first drops the file's entries
   starting at or after X, then assigns each epoch again from the batch headers
   (log_loader.py). Only an epoch without any batch is not rebuilt; such an entry is the
   latest one, starting at the LEO (an ``assign`` at the same offset replaces it), and losing
   it does not change how a follower truncates: its leader assigns it again on its next
   LeaderAndIsr, and meanwhile ``end_offset_for`` answers the previous epoch with the same end
   offset (the LEO). After a clean shutdown every entry below the LEO was written and fsynced.
3. Entries wholly below the log start offset that ``truncate_from_start`` dropped may still be
   in the file; loading applies ``truncate_from_start`` again with the checkpointed log start
   offset (Kafka flushes that truncation asynchronously too).

Concurrency: the entries are the owning Log's thread's; the file may also be written by
another thread (``EpochCacheWrite.run``, at shutdown), so writes go under a lock and a write never
replaces the file with an older state than it holds (the versions say which is newer: the
problem Kafka met in KAFKA-17142, an older snapshot written over a newer one).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable, NamedTuple

from . import fileio
from .checkpoint import CheckpointFile, CheckpointFormatError, fsync_dir, fsync_path

log = logging.getLogger("kbroker.storage.epoch")

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FILE_NAME = "leader-epoch-checkpoint"


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def _parse(fields: list[str]) -> EpochEntry:
    epoch, offset = fields
    return EpochEntry(int(epoch), int(offset))


def _below(entries: list[EpochEntry], offset: int) -> list[EpochEntry]:
    """The entries starting below ``offset`` (a prefix: start offsets increase)."""
    n = len(entries)
    while n and entries[n - 1].start_offset >= offset:
        n -= 1
    return entries if n == len(entries) else entries[:n]


class EpochCacheWrite:
    """One write of a cache's file with its entries as they were when it was made
    (``LeaderEpochFileCache.pending_write``). ``run`` is thread-safe: a clean shutdown runs
    them on threads (``LogManager.flush_all``)."""

    __slots__ = ("cache", "version", "entries")

    def __init__(self, cache: LeaderEpochFileCache, version: int, entries: list[EpochEntry]) -> None:
        self.cache = cache
        self.version = version
        self.entries = entries

    def run(self, sync: bool = False) -> None:
        """Write the file unless it holds this state or a newer one already; with ``sync``,
        fsync it and its directory too (whichever state it holds, this one or newer)."""
        self.cache._write(self.version, self.entries, sync)


class LeaderEpochFileCache:
    """The entries are for the owning Log's thread only; the file is written under a lock
    (see the module docstring).

    ``log_end_offset`` is a callable returning the log's current LEO (the end offset of
    the latest epoch). ``exists``: whether the file exists, when the caller listed the
    directory already (None: look).
    """

    def __init__(self, path: Path, log_end_offset: Callable[[], int], *, exists: bool | None = None) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, lambda e: f"{e.epoch} {e.start_offset}", _parse)
        self._log_end_offset = log_end_offset
        # The entries: a list replaced, never changed in place (a pending write keeps the one it was made with).
        self._entries: list[EpochEntry] = []
        self._version = 0  # bumped by every change of the entries
        self._lock = threading.Lock()  # the file and the two fields below
        self._file_version = 0  # the change the file holds
        self._file_entries: list[EpochEntry] = []  # what it holds
        self._synced_entries: list[EpochEntry] = []  # what is known to be durable (fsynced)
        self._file_exists = exists is not False
        if exists is False:
            return
        try:
            entries = self._file.read_or_none()
        except CheckpointFormatError as exc:
            if os.stat(self._file.path).st_size:  # (empty: created, and the process died before writing)
                log.warning("%s; starting with an empty leader epoch cache", exc)
            entries = []
        if entries is None:
            self._file_exists = False
            entries = []
        self._entries = self._file_entries = self._synced_entries = entries

    @property
    def path(self) -> Path:
        return self._file.path

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def latest_epoch(self) -> int | None:
        """The newest epoch, or None when the cache is empty."""
        return self._entries[-1].epoch if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range contains ``offset`` (None before the first entry or when empty)."""
        found = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` began at ``start_offset`` (Kafka's ``assign``).

        Ignored for a negative epoch or when the latest entry already has this epoch with
        an earlier start. Otherwise entries with an epoch >= ``epoch`` or a start offset
        >= ``start_offset`` are dropped from the end first. Returns whether it changed.
        In memory only (see the module docstring).
        """
        if epoch < 0:
            return False
        latest = self.latest_entry()
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False
        kept = self._entries
        while kept and (kept[-1].epoch >= epoch or kept[-1].start_offset >= start_offset):
            kept = kept[:-1]
        if kept and len(kept) < len(self._entries):
            log.warning("%s: epoch %d at offset %d replaces %s", self.path, epoch, start_offset,
                        self._entries[len(kept):])
        self._set(kept + [EpochEntry(epoch, start_offset)])
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int | None = None) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's ``endOffsetFor``: the end offset of the largest
        epoch <= ``requested_epoch`` (the start offset of the next epoch, or the LEO for the
        latest epoch); (-1, -1) when unknown."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            leo = self._log_end_offset() if log_end_offset is None else log_end_offset
            return requested_epoch, leo
        floor = None
        for entry in self._entries:
            if entry.epoch > requested_epoch:
                return (requested_epoch if floor is None else floor.epoch), entry.start_offset
            floor = entry
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries that start at or after ``end_offset`` (the log was truncated there).
        In memory only (see the module docstring)."""
        kept = _below(self._entries, end_offset)
        if len(kept) != len(self._entries):
            self._set(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop epochs wholly before it and move the
        start of the epoch that contains it up to it. In memory only (see the module docstring)."""
        keep_from = 0
        for i, entry in enumerate(self._entries):
            if entry.start_offset <= start_offset:
                keep_from = i
        if not self._entries or self._entries[keep_from].start_offset > start_offset:
            return
        first = self._entries[keep_from]
        if keep_from == 0 and first.start_offset == start_offset:
            return
        self._set([EpochEntry(first.epoch, start_offset)] + self._entries[keep_from + 1:])

    def clear(self) -> None:
        """No entries (the log was deleted and starts again): the file is written at once, so
        that no entry of the history before survives a crash."""
        self._set([])
        self.write()

    # -- the file ------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """The file does not hold the entries as they are now (at or above the LEO included)."""
        return self._version != self._file_version

    def write_needed(self, below: int | None = None) -> bool:
        """The entries starting below ``below`` (default: the LEO) differ from the file's."""
        if self._version == self._file_version:
            return False
        offset = self._log_end_offset() if below is None else below
        return _below(self._entries, offset) != _below(self._file_entries, offset)

    def sync_needed(self, below: int | None = None) -> bool:
        """The entries starting below ``below`` (default: the LEO) differ from those known durable."""
        offset = self._log_end_offset() if below is None else below
        return _below(self._entries, offset) != _below(self._synced_entries, offset)

    def pending_write(self) -> EpochCacheWrite | None:
        """A write of the entries as they are now; None when the file holds them already."""
        if self._version == self._file_version:
            return None
        return EpochCacheWrite(self, self._version, self._entries)

    def write(self, sync: bool = False) -> None:
        """Write the file now (if it does not hold the entries already); ``sync``: and fsync it."""
        self._write(self._version, self._entries, sync)
        if sync:
            self.mark_synced(self._entries)

    def open_for_sync(self) -> tuple[int, list[EpochEntry]]:
        """A read-only descriptor of the file and the entries it holds, for a FlushPlan to fsync;
        once fsynced, ``mark_synced`` takes the entries back. Raises OSError."""
        with self._lock:
            return fileio.open(self._file.path, os.O_RDONLY), self._file_entries

    def mark_synced(self, entries: list[EpochEntry]) -> None:
        """The file holding ``entries`` (and the directory entry) reached the disk."""
        self._synced_entries = entries

    def flush(self) -> None:
        """Write the file and fsync it (and its directory) now."""
        self.write(sync=True)

    def _write(self, version: int, entries: list[EpochEntry], sync: bool) -> None:
        with self._lock:
            if version <= self._file_version:  # the file holds this state or a newer one
                if sync and self._file_exists:
                    fsync_path(self._file.path)
                    fsync_dir(self._file.path.parent)
                return
            # The first write (a new partition's first leader epoch) creates the file in place,
            # without a temp file and rename: an empty file reads as no entries.
            if sync or self._file_exists or not self._file.write_new(entries):
                self._file.write(entries, sync=sync)
            self._file_exists = True
            self._file_version = version
            self._file_entries = entries

    def _set(self, entries: list[EpochEntry]) -> None:
        self._entries = entries
        self._version += 1
