"""LeaderEpochFileCache: which leader epoch began at which offset, for one partition.

Kafka's ``LeaderEpochFileCache``: an ordered list of (epoch, start offset), persisted to
``<partition dir>/leader-epoch-checkpoint`` (``0``, count, then ``epoch startOffset`` lines)
atomically on every change. Replication uses ``end_offset_for`` to answer
OffsetForLeaderEpoch and to truncate a follower by leader epoch.
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

    def flush(self) -> None:
        self._file.write(self._entries)

    def _set(self, entries: list[EpochEntry]) -> None:
        self._entries = entries
        self.flush()
