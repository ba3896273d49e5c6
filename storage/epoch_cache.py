"""LeaderEpochFileCache: which leader epoch began at which offset, for one partition.

Kafka's ``LeaderEpochFileCache``: an ordered list of (epoch, start offset), persisted to
``<partition dir>/leader-epoch-checkpoint`` (``0``, count, then ``epoch startOffset`` lines).
Replication uses ``end_offset_for`` to answer OffsetForLeaderEpoch and to truncate a follower
by leader epoch.

Durability. Every change rewrites the file atomically (temp file, rename) but without an
fsync: two fsyncs (file and directory) per change cost milliseconds each, and a LeaderAndIsr
making this broker leader of a thousand new partitions paid them per partition (Kafka met
the same cost, KAFKA-15046). A process killed with -9 leaves the page cache, so the file it
finds on restart is exactly the cache it had. The fsync comes with the log's flush:
``Log.begin_flush`` puts the file (and its directory) into the FlushPlan whenever ``unsynced``,
so before the recovery point moves past a batch, the entry for its epoch is durable. After a
machine crash the entries above the recovery point may be older than they were; the loader
re-validates those batches and assigns their epochs again from the batch headers (an epoch
whose batches start at or below an entry's start replaces it, see ``assign``), and a log
truncation is followed by ``truncate_from_end``. What cannot be rebuilt from headers is an
epoch that has no batch (a leader that appended nothing): its leader assigns it again on the
next LeaderAndIsr, and without it ``end_offset_for`` answers the previous epoch with the same
end offset, which truncates a follower to the same place (the epoch held no records).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, NamedTuple

from .checkpoint import CheckpointFile, CheckpointFormatError

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


class LeaderEpochFileCache:
    """Not thread-safe: the owning Log's thread only.

    ``log_end_offset`` is a callable returning the log's current LEO (the end offset of
    the latest epoch).
    """

    def __init__(self, path: Path, log_end_offset: Callable[[], int]) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, lambda e: f"{e.epoch} {e.start_offset}", _parse)
        self._log_end_offset = log_end_offset
        self._version = 0  # bumped by every write of the file
        self._synced_version = 0  # the newest write known to be fsynced
        try:
            self._entries: list[EpochEntry] = self._file.read()
        except CheckpointFormatError as exc:
            log.warning("%s; starting with an empty leader epoch cache", exc)
            self._entries = []

    @property
    def path(self) -> Path:
        return self._file.path

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def latest_epoch(self) -> int | None:
        """The newest epoch, or None when the cache is empty."""
        return self._entries[-1].epoch if self._entries else None

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
        """Drop entries that start at or after ``end_offset`` (the log was truncated there)."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) != len(self._entries):
            self._set(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop epochs wholly before it and move the
        start of the epoch that contains it up to it."""
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
        self._set([])

    @property
    def unsynced(self) -> bool:
        """The file was written since it was last fsynced (see the module docstring)."""
        return self._version != self._synced_version

    @property
    def version(self) -> int:
        """Which write of the file this is; ``mark_synced`` takes it back once fsynced."""
        return self._version

    def mark_synced(self, version: int) -> None:
        """The file as of write ``version`` (and the directory entry) reached the disk."""
        self._synced_version = max(self._synced_version, version)

    def flush(self) -> None:
        """Write the file and fsync it (and its directory) now."""
        self._file.write(self._entries)
        self._version += 1
        self._synced_version = self._version

    def _set(self, entries: list[EpochEntry]) -> None:
        self._entries = entries
        self._file.write(entries, sync=False)
        self._version += 1
