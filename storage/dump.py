"""``dump``: print what a segment file holds, in the style of Kafka's kafka-dump-log.

For a ``.log``: one line per batch (offsets, count, producer fields, position, timestamp,
size, codec, CRC and whether it is valid), optionally each record, and a note on bytes at
the end that do not form a batch. For ``.index``/``.timeindex``: one line per entry; the
zero-filled preallocated tail of an untrimmed index is summarised, and entries that
disagree with the sibling ``.log`` are flagged. For a producer state ``.snapshot``: one line
per producer, or why the file does not read back intact.

``python -m storage dump <file>...`` (later ``kbroker dump-log``) calls ``dump``.
"""

from __future__ import annotations

import mmap
import struct
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TextIO

from protocol.compression import Compression
from protocol.records import (HEADER_SIZE, BatchHeader, batch_body, compute_crc, decode_records,
                              read_header)

from .offset_index import OffsetIndex
from .producer_state import SNAPSHOT_SUFFIX, CorruptSnapshotError, decode_snapshot
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from .time_index import TimeIndex

_Mapped = bytes | mmap.mmap  # a file's contents: mapped, or b"" when it is empty


def dump(path: str | Path, out: TextIO = sys.stdout, print_records: bool = False) -> int:
    """Print the contents of one segment file; 0 if all is valid, 1 if not, 2 if unreadable."""
    path = Path(path)
    dumpers = {LOG_SUFFIX: _dump_log, INDEX_SUFFIX: _dump_offset_index, TIME_INDEX_SUFFIX: _dump_time_index,
               SNAPSHOT_SUFFIX: _dump_snapshot}
    dumper = dumpers.get(path.suffix)
    if dumper is None:
        print(f"{path}: not a .log, .index, .timeindex or .snapshot file", file=out)
        return 2
    try:
        base_offset = int(path.stem)
    except ValueError:
        print(f"{path}: the file name is not a base offset", file=out)
        return 2
    print(f"Dumping {path}", file=out)
    try:
        with _mapped(path) as buf:
            return dumper(path, buf, base_offset, out, print_records)
    except OSError as exc:
        print(f"{path}: {exc}", file=out)
        return 2


@contextmanager
def _mapped(path: Path) -> Iterator[_Mapped]:
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
            yield m


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _batches(buf: _Mapped) -> Iterator[tuple[int, BatchHeader]]:
    """Framed batches (magic 2, sane length) until the data stops making sense."""
    pos, end = 0, len(buf)
    while end - pos >= HEADER_SIZE:
        header = read_header(buf, pos)
        if header.magic != 2 or header.size < HEADER_SIZE or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def _dump_log(path: Path, buf: _Mapped, base_offset: int, out: TextIO, print_records: bool) -> int:
    print(f"Log starting offset: {base_offset}", file=out)
    status, end = 0, 0
    for pos, h in _batches(buf):
        valid = compute_crc(buf, pos, h.size) == h.crc
        status |= not valid
        ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
        print(f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
              f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
              f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
              f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} position: {pos} "
              f"{ts_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
              f"compresscodec: {Compression(h.compression).name.lower()} crc: {h.crc} isvalid: {_bool(valid)}",
              file=out)
        if print_records and valid:
            status |= _dump_records(buf, pos, h, ts_type, out)
        end = pos + h.size
    if end < len(buf):
        tail = len(buf) - end
        kind = "zero" if buf[end:] == bytes(tail) else "invalid"
        print(f"Found {tail} {kind} bytes at the end of {path.name}", file=out)
        status = 1
    return status


def _dump_records(buf: _Mapped, pos: int, h: BatchHeader, ts_type: str, out: TextIO) -> int:
    try:
        records = decode_records(h, batch_body(buf, pos, h))
    except ValueError as exc:
        print(f"| cannot decode the records: {exc}", file=out)
        return 1
    for i, r in enumerate(records):
        sequence = h.base_sequence + i if h.base_sequence >= 0 else -1
        key_size = -1 if r.key is None else len(r.key)
        value_size = -1 if r.value is None else len(r.value)
        print(f"| offset: {r.offset} {ts_type}: {r.timestamp} keySize: {key_size} valueSize: {value_size} "
              f"sequence: {sequence} headerKeys: [{','.join(k for k, _ in r.headers)}] "
              f"key: {_text(r.key)} payload: {_text(r.value)}", file=out)
    return 0


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "backslashreplace")


def _dump_entries(path: Path, buf: _Mapped, entry: struct.Struct, format_entry: Callable[[tuple[int, int]], str],
                  out: TextIO) -> tuple[list[tuple[int, int]], int]:
    """Print each entry up to the preallocated zero tail; returns (entries, status)."""
    count = len(buf) // entry.size
    entries: list[tuple[int, int]] = []
    for i in range(count):
        values = entry.unpack_from(buf, i * entry.size)
        if i > 0 and not any(values):
            print(f"({count - i} empty preallocated entries not shown)", file=out)
            break
        entries.append(values)
        print(format_entry(values), file=out)
    status = 0
    if len(buf) % entry.size:
        print(f"Found {len(buf) % entry.size} bytes at the end of {path.name} that are not a whole entry", file=out)
        status = 1
    return entries, status


def _log_batches_by_position(path: Path) -> dict[int, BatchHeader] | None:
    log_path = path.with_suffix(LOG_SUFFIX)
    if not log_path.exists():
        return None
    with _mapped(log_path) as buf:
        return {pos: h for pos, h in _batches(buf)}


def _dump_offset_index(path: Path, buf: _Mapped, base_offset: int, out: TextIO, _print_records: bool) -> int:
    entries, status = _dump_entries(path, buf, OffsetIndex.ENTRY,
                                    lambda e: f"offset: {base_offset + e[0]} position: {e[1]}", out)
    batches = _log_batches_by_position(path)
    if batches is None:
        return status
    for relative, position in entries:
        batch = batches.get(position)
        if batch is None or batch.last_offset != base_offset + relative:
            found = "no batch" if batch is None else f"last offset {batch.last_offset}"
            print(f"Index mismatch: offset {base_offset + relative} position {position}: the log has {found} there",
                  file=out)
            status = 1
    return status


def _dump_time_index(path: Path, buf: _Mapped, base_offset: int, out: TextIO, _print_records: bool) -> int:
    _entries, status = _dump_entries(path, buf, TimeIndex.ENTRY,
                                     lambda e: f"timestamp: {e[0]} offset: {base_offset + e[1]}", out)
    return status


def _dump_snapshot(path: Path, buf: _Mapped, offset: int, out: TextIO, _print_records: bool) -> int:
    print(f"Producer state at offset: {offset}", file=out)
    try:
        entries = decode_snapshot(buf)
    except CorruptSnapshotError as exc:
        print(f"{path.name} is corrupt: {exc}", file=out)
        return 1
    for e in entries:
        line = f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} lastTimestamp: {e.last_timestamp}"
        if e.batches:
            b = e.batches[-1]
            line += (f" firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                     f"offsetDelta: {b.last_offset - b.first_offset} timestamp: {b.timestamp}")
        print(line, file=out)
    return 0
