"""Checkpoint files in Kafka's text format, written atomically.

Format (Kafka's ``CheckpointFile``)::

    0            <- version
    2            <- number of entries
    topic 0 42   <- one entry per line
    topic 1 17

Used for ``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint`` (high
watermarks) and ``log-start-offset-checkpoint`` (one per log dir, entries
``topic partition offset``) and for each partition's ``leader-epoch-checkpoint`` (entries
``epoch startOffset``).

A write goes to ``<file>.tmp``, is fsynced, renamed over the file, and the directory is
fsynced, so a crash leaves either the old or the new file, never a torn one. A write with
``sync=False`` skips both fsyncs: the rename still makes it atomic for a process crash
(kill -9 leaves the page cache, hence the new file, intact); its owner makes it durable
later (the leader epoch cache's file is written and fsynced with its log's flush, see epoch_cache.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Generic, Iterable, TypeVar

from . import fileio

E = TypeVar("E")
VERSION = 0


class CheckpointFormatError(ValueError):
    """The file exists but is not a well-formed version-0 checkpoint."""


def fsync_path(path: Path, flags: int = os.O_RDONLY) -> None:
    """Open ``path`` with ``flags`` (0o644 if they create it), fsync it, close it."""
    fd = fileio.open(path, flags, 0o644)
    try:
        fileio.fsync(fd)
    finally:
        fileio.close(fd)


def fsync_dir(path: Path) -> None:
    fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)


def write_atomically(path: Path, data: bytes, *, sync: bool = True, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory (without
    the two fsyncs when ``sync`` is False: atomic, but durable only once the caller fsyncs).
    ``mode``: the new file's permissions (before the umask)."""
    tmp = path.with_name(path.name + ".tmp")
    fileio.unlink_if_exists(tmp)  # a stray one from a crash keeps its own mode otherwise
    fd = fileio.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[fileio.write(fd, view):]
        if sync:
            fileio.fsync(fd)
    finally:
        fileio.close(fd)
    fileio.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def write_new(path: Path, data: bytes) -> bool:
    """Create ``path`` holding ``data`` in place: one file created, where ``write_atomically``
    creates a temp file and renames it (two directory changes; under a busy disk each costs
    milliseconds). False, and nothing written, when ``path`` exists. Not durable, and a crash
    between creating and writing leaves an empty file: its reader must take an empty file
    for the state before the write (no file)."""
    try:
        fd = fileio.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[fileio.write(fd, view):]
    finally:
        fileio.close(fd)
    return True


class CheckpointFile(Generic[E]):
    """One checkpoint file; ``format_entry``/``parse_entry`` convert an entry to and from its line.

    Not thread-safe.
    """

    def __init__(self, path: Path, format_entry: Callable[[E], str], parse_entry: Callable[[list[str]], E]) -> None:
        self.path = Path(path)
        self._format = format_entry
        self._parse = parse_entry

    def write(self, entries: Iterable[E], *, sync: bool = True) -> None:
        write_atomically(self.path, self._encode(entries), sync=sync)

    def write_new(self, entries: Iterable[E]) -> bool:
        """Create the file holding ``entries`` (``write_new``); False if it exists."""
        return write_new(self.path, self._encode(entries))

    def _encode(self, entries: Iterable[E]) -> bytes:
        lines = [self._format(e) for e in entries]
        return (f"{VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)).encode()

    def read(self) -> list[E]:
        """The entries; [] when the file does not exist. Raises CheckpointFormatError."""
        entries = self.read_or_none()
        return [] if entries is None else entries

    def read_or_none(self) -> list[E] | None:
        """The entries; None when the file does not exist. Raises CheckpointFormatError."""
        try:
            with open(self.path, "rb") as f:  # (builtin open: cheaper than Path.read_text, once per partition at start)
                data = f.read()
        except FileNotFoundError:
            return None
        try:
            lines = data.decode().splitlines()  # (bytes a crash left that are not UTF-8: malformed too)
            version, count = int(lines[0]), int(lines[1])
            if version != VERSION:
                raise CheckpointFormatError(f"{self.path}: unsupported version {version}")
            body = [line for line in lines[2:] if line.strip()]
            if len(body) != count:
                raise CheckpointFormatError(f"{self.path}: header says {count} entries, found {len(body)}")
            return [self._parse(line.split()) for line in body]
        except (IndexError, ValueError) as exc:
            if isinstance(exc, CheckpointFormatError):
                raise
            raise CheckpointFormatError(f"{self.path}: malformed checkpoint ({exc})") from None


def _format_offset(entry: tuple[tuple[str, int], int]) -> str:
    (topic, partition), offset = entry
    return f"{topic} {partition} {offset}"


def _parse_offset(fields: list[str]) -> tuple[tuple[str, int], int]:
    topic, partition, offset = fields
    return (topic, int(partition)), int(offset)


class OffsetCheckpointFile:
    """A per-log-dir ``topic partition offset`` checkpoint. Not thread-safe."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[tuple[str, int], int]] = CheckpointFile(path, _format_offset, _parse_offset)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        return dict(self._file.read())
