"""OffsetIndex and TimeIndex: appends, floor lookups at every boundary, truncation,
trim/resize, sanity checks, and floor lookups against a linear scan (hypothesis)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.index import CorruptIndexError
from storage.offset_index import OffsetIndex, OffsetPosition
from storage.time_index import TimeIndex, TimestampOffset

BASE = 1000


def make_offset_index(tmp_path, entries, max_size=4096, name="x.index"):
    index = OffsetIndex(tmp_path / name, BASE, max_size, writable=True)
    for offset, position in entries:
        index.append(offset, position)
    return index


def test_offset_index_lookup_at_every_boundary(tmp_path):
    entries = [(BASE + 3 * i + 2, 100 * i + 50) for i in range(50)]
    index = make_offset_index(tmp_path, entries)
    assert index.lookup(BASE - 5) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 1) == OffsetPosition(BASE, 0)
    for offset, position in entries:
        assert index.lookup(offset) == (offset, position)
        assert index.lookup(offset + 1) == (offset, position)
        assert index.lookup_by_position(position) == (offset, position)
        assert index.lookup_by_position(position + 99) == (offset, position)
    assert index.lookup(10**9) == entries[-1]
    assert index.last_offset == entries[-1][0]


def test_offset_index_rejects_non_increasing_and_overflowing_offsets(tmp_path):
    index = make_offset_index(tmp_path, [(BASE + 5, 10)])
    with pytest.raises(ValueError):
        index.append(BASE + 5, 20)
    with pytest.raises(ValueError):
        index.append(BASE + 2**31, 30)


def test_written_behind_then_trimmed_and_reopened(tmp_path):
    index = make_offset_index(tmp_path, [(BASE + i + 1, i * 10 + 10) for i in range(5)], max_size=1000)
    assert not index.path.exists() and index.held_fds == 0  # entries in memory, written behind
    assert index.max_entries == 125
    fd = index.dup_fd()  # what a flush fsyncs: the entries are written first
    os.close(fd)
    assert os.path.getsize(index.path) == 40 and not index.dirty
    for i in range(5, 10):
        index.append(BASE + i + 1, i * 10 + 10)
    assert os.path.getsize(index.path) == 40 and index.dirty
    index.trim_to_valid_size()
    assert os.path.getsize(index.path) == 80 and index.max_entries == 10
    index.close()
    reopened = OffsetIndex(tmp_path / "x.index", BASE, 1000, writable=False)
    assert reopened.entries == 10 and reopened.lookup(BASE + 7) == (BASE + 7, 70)
    reopened.sanity_check(log_size=1000, next_offset_bound=BASE + 11)
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check(log_size=1000, next_offset_bound=BASE + 10)  # an entry at the next segment
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check(log_size=50, next_offset_bound=None)  # points past the log


def test_full_index(tmp_path):
    index = make_offset_index(tmp_path, [(BASE + i + 1, i + 1) for i in range(4)], max_size=32)
    assert index.is_full()
    with pytest.raises(ValueError):
        index.append(BASE + 10, 100)


def test_truncation_reaches_the_file_on_persist(tmp_path):
    index = make_offset_index(tmp_path, [(BASE + 10 * i + 9, 100 * i) for i in range(1, 8)], max_size=64)
    index.persist()
    assert os.path.getsize(index.path) == 56
    index.truncate_to(BASE + 39)  # drops the entry for 39 and later
    assert index.entries == 2 and index.last_offset == BASE + 29
    index.append(BASE + 45, 450)
    index.persist()  # the dropped entries go, the new one is written in their place
    assert open(index.path, "rb").read() == index.ENTRY.pack(19, 100) + index.ENTRY.pack(29, 200) + \
        index.ENTRY.pack(45, 450)
    index.truncate_to(BASE + 25)  # between entries: keeps 19 and drops 29 and 45
    assert index.entries == 1 and index.last_offset == BASE + 19
    index.persist()
    assert os.path.getsize(index.path) == 8
    reopened = OffsetIndex(index.path, BASE, 64)
    assert reopened.entries == 1 and reopened.lookup(BASE + 30) == (BASE + 19, 100)


def test_untrimmed_preallocated_index_fails_the_sanity_check(tmp_path):
    make_offset_index(tmp_path, [(BASE + 1, 10), (BASE + 2, 20)], max_size=800).close()
    with open(tmp_path / "x.index", "ab") as f:  # as an older broker's crash left it: preallocated
        f.write(bytes(800 - 16))
    reopened = OffsetIndex(tmp_path / "x.index", BASE, 800, writable=True)
    assert reopened.entries == 100  # the file length says so; the zeros are caught below
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check(log_size=100, next_offset_bound=None)


def test_garbage_and_partial_entry_fail_the_sanity_check(tmp_path):
    path = tmp_path / "g.index"
    path.write_bytes(os.urandom(8 * 64))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, BASE, -1, writable=False).sanity_check(1 << 20, None)
    path.write_bytes(bytes(13))
    with pytest.raises(CorruptIndexError, match="multiple"):
        OffsetIndex(path, BASE, -1, writable=False).sanity_check(1 << 20, None)


def test_time_index_lookup_truncate_and_reserved_slot(tmp_path):
    index = TimeIndex(tmp_path / "t.timeindex", BASE, 12 * 6, writable=True)
    assert index.lookup(5) == TimestampOffset(-1, BASE)
    for i in range(1, 6):
        index.maybe_append(100 * i, BASE + 10 * i)
        index.maybe_append(100 * i, BASE + 10 * i + 5)  # same timestamp: ignored
    assert index.entries == 5 and index.is_full()  # the sixth slot is kept for the roll
    index.maybe_append(999, BASE + 99, skip_full_check=True)
    assert index.entries == 6
    assert index.lookup(99) == (-1, BASE)
    assert index.lookup(100) == (100, BASE + 10)
    assert index.lookup(250) == (200, BASE + 20)
    assert index.lookup(10**6) == (999, BASE + 99)
    index.truncate_to(BASE + 30)
    assert index.entries == 2 and index.last_entry() == (200, BASE + 20)


def test_warm_section_and_cold_search_agree(tmp_path):
    n = 5000  # 40 KB of entries: well past the 8 KiB warm section
    index = make_offset_index(tmp_path, [(BASE + 2 * i + 1, 10 * i + 10) for i in range(n)], max_size=8 * n)
    for target in (BASE, BASE + 1, BASE + 2, BASE + 5000, BASE + 2 * n - 1, BASE + 2 * n, BASE + 2 * n + 50):
        expected = max((e for e in [(BASE + 2 * i + 1, 10 * i + 10) for i in range(n)] if e[0] <= target),
                       default=(BASE, 0))
        assert index.lookup(target) == expected


@settings(max_examples=60, deadline=None)
@given(deltas=st.lists(st.integers(1, 1000), max_size=3000), targets=st.lists(st.integers(-10, 10**6), max_size=30),
       column=st.sampled_from([OffsetIndex.OFFSET, OffsetIndex.POSITION]))
def test_offset_index_floor_lookup_matches_linear_scan(tmp_path_factory, deltas, targets, column):
    tmp = tmp_path_factory.mktemp("idx")
    entries, offset = [], BASE
    for i, d in enumerate(deltas):
        offset += d
        entries.append((offset, 3 * (offset - BASE) + i))
    index = make_offset_index(tmp, entries, max_size=8 * max(1, len(entries)))
    try:
        for target in targets + [e[column] for e in entries[:20]]:
            candidates = [e for e in entries if e[column] <= target]
            expected = candidates[-1] if candidates else (BASE, 0)
            found = index.lookup(target) if column == OffsetIndex.OFFSET else index.lookup_by_position(target)
            assert found == expected
    finally:
        index.close()


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 5)), max_size=2000),
       targets=st.lists(st.integers(0, 200_000), max_size=30))
def test_time_index_floor_lookup_matches_linear_scan(tmp_path_factory, steps, targets):
    tmp = tmp_path_factory.mktemp("tidx")
    index = TimeIndex(tmp / "t.timeindex", BASE, 12 * (len(steps) + 2), writable=True)
    entries, ts, offset = [], 0, BASE
    for dt, doff in steps:
        ts += dt
        offset += doff
        before = index.entries
        index.maybe_append(ts, offset)
        if index.entries > before:
            entries.append((ts, offset))
    try:
        for target in targets:
            candidates = [e for e in entries if e[0] <= target]
            assert index.lookup(target) == (candidates[-1] if candidates else (-1, BASE))
    finally:
        index.close()
