"""Helpers shared by the storage tests: batch builders and a whole-log consistency check."""

from __future__ import annotations

import os
from pathlib import Path

from protocol.clock import MockTime
from protocol.records import Record, build_batch, check_batch
from storage import Log, LogConfig
from storage.segment_budget import OpenSegmentBudget
from storage import fileio

START_MS = 1_700_000_000_000


def batch(n: int = 1, *, ts: int = START_MS, value_size: int = 20, key: bytes | None = b"k", **kw) -> bytes:
    """One batch of ``n`` records with timestamps ts, ts+1, ..."""
    return build_batch([Record(timestamp=ts + i, key=key, value=bytes([65 + i % 26]) * value_size)
                        for i in range(n)], **kw)


def follower_batch(base_offset: int, n: int = 1, epoch: int = 0, **kw) -> bytes:
    return batch(n, base_offset=base_offset, partition_leader_epoch=epoch, **kw)


def open_log(path: Path, time: MockTime | None = None, budget: OpenSegmentBudget | None = None, **config) -> Log:
    return Log.open(path, LogConfig(**config), time=time or MockTime(), budget=budget)


def check_consistent(log: Log) -> list:
    """Assert the invariants recovery must restore; returns the headers of every batch.

    Every batch CRC-valid, offsets contiguous from the first segment's base to the LEO,
    segments contiguous, and each index entry pointing at the batch it names.
    """
    headers = []
    expected = log.segments[0].base_offset
    for segment in log.segments:
        assert segment.base_offset == expected, (segment, expected)
        records = segment.records
        assert records.size == segment.size
        buf = records.buffer(records.size)
        pos, by_position = 0, {}
        while pos < segment.size:
            h = check_batch(buf, pos, segment.size)
            assert h.base_offset == expected, (segment, pos, h.base_offset, expected)
            by_position[pos] = h
            headers.append(h)
            expected = h.next_offset
            pos += h.size
        last_offsets = {h.last_offset for h in by_position.values()}
        oi, ti = segment.offset_index, segment.time_index
        for slot in range(oi.entries):
            offset, position = oi.lookup(oi.base_offset + oi.entry(slot)[0])
            assert position in by_position and by_position[position].last_offset == offset, (segment, slot)
        for slot in range(ti.entries):
            timestamp, relative = ti.entry(slot)
            assert ti.base_offset + relative in last_offsets, (segment, slot)
            assert timestamp <= segment.max_timestamp_so_far
    assert expected == log.log_end_offset, (expected, log.log_end_offset)
    return headers


def record_fsyncs(monkeypatch) -> list[str]:
    """From now on, the base name of every file (or directory) fsynced, in order."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)
    monkeypatch.setattr(fileio, "fsync", recording_fsync)
    return synced
