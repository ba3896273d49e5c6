"""LogSegment on its own: sparse index density, translate_offset at every boundary,
reads bounded by size and offset, the roll predicate, and recover."""

from __future__ import annotations

from storage_helpers import START_MS, batch

from protocol.records import iter_batch_headers
from storage import LogSegment
from storage.segment_budget import OpenSegmentBudget


def new_segment(tmp_path, base=100, interval=500):
    return LogSegment.create(tmp_path, base, budget=OpenSegmentBudget(1000), index_interval_bytes=interval,
                             max_index_size=4096, segment_jitter_ms=0, now_ms=START_MS)


def append(segment, base_offset, n=2, **kw):
    data = batch(n, base_offset=base_offset, **kw)
    segment.append(data, list(iter_batch_headers(data)))
    return len(data)


def test_index_is_sparse_and_translate_offset_finds_every_batch(tmp_path):
    segment = new_segment(tmp_path)
    sizes, offset = [], 100
    for i in range(40):
        sizes.append(append(segment, offset, 2, value_size=60, ts=START_MS + i))
        offset += 2
    size = sizes[0]
    assert segment.size == 40 * size
    # one entry once more than index_interval_bytes were appended since the last one
    assert segment.offset_index.entries == len(range(0, 40, 500 // size + 1)) - 1
    for i in range(40):
        for target in (100 + 2 * i, 101 + 2 * i):
            position, header = segment.translate_offset(target)
            assert (position, header.base_offset) == (i * size, 100 + 2 * i)
    assert segment.translate_offset(180) is None
    assert segment.read_next_offset() == 180


def test_read_size_and_offset_bounds(tmp_path):
    segment = new_segment(tmp_path, interval=0)
    size = 0
    for i in range(10):
        size = append(segment, 100 + 3 * i, 3)
    base, view = segment.read(104, 3 * size)
    assert base == 103 and len(view) == 3 * size
    base, view = segment.read(104, 3 * size - 1)
    assert len(view) == 2 * size
    base, view = segment.read(100, 10 * size, max_offset=110)
    assert len(view) == 3 * size  # the batch [109..111] holds 110
    assert len(segment.read(100, 1, min_one_batch=False)[1]) == 0
    assert segment.read(130, 100) is None


def test_should_roll_reasons(tmp_path):
    segment = new_segment(tmp_path)
    kw = dict(max_timestamp=START_MS, last_offset=100, now_ms=START_MS, segment_bytes=1000, segment_ms=1000)
    assert segment.should_roll(set_size=5000, **kw) is None  # an empty segment never rolls
    size = append(segment, 100, 1)
    assert segment.should_roll(set_size=1000 - size, **kw) is None
    assert segment.should_roll(set_size=1001 - size, **kw) == "segment.bytes"
    assert segment.should_roll(set_size=10, **{**kw, "max_timestamp": START_MS + 1001}) == "segment.ms"
    assert segment.should_roll(set_size=10, **{**kw, "last_offset": 100 + 2**31}) == "relative offset overflow"


def test_should_roll_reads_the_clock_only_without_a_rolling_timestamp(tmp_path):
    """``now`` is called only when the wait counts from the segment's creation (no first
    batch timestamp), and then decides segment.ms as ``now_ms`` would."""
    calls = []

    def now(at):
        return lambda: calls.append(at) or at

    segment = new_segment(tmp_path)
    kw = dict(set_size=10, max_timestamp=START_MS, last_offset=100, segment_bytes=10**6, segment_ms=1000)
    append(segment, 100, 1)
    assert segment.rolling_based_timestamp is not None
    assert segment.should_roll(**kw, now=now(segment.created_ms + 10**9)) is None and calls == []
    segment.rolling_based_timestamp = None  # as a segment whose first batch had no timestamp
    assert segment.should_roll(**kw, now=now(segment.created_ms + 1000)) is None
    assert segment.should_roll(**kw, now=now(segment.created_ms + 1001)) == "segment.ms"
    assert calls == [segment.created_ms + 1000, segment.created_ms + 1001]


def test_recover_cuts_a_bad_tail_and_rebuilds_indexes(tmp_path):
    segment = new_segment(tmp_path, interval=0)
    for i in range(5):
        append(segment, 100 + i, 1)
    entries = segment.offset_index.entries
    good = segment.size
    segment.records.append(b"\x00" * 12 + b"garbage" * 10)
    segment.size = segment.records.size
    result = segment.recover()
    assert (result.valid_bytes, result.next_offset, result.truncated_bytes) == (good, 105, 82)
    assert result.error and not result.zero_tail
    assert segment.size == good and segment.offset_index.entries == entries
    assert segment.max_timestamp_so_far == START_MS and segment.offset_of_max_timestamp_so_far == 100


def test_translate_offset_at_the_last_append_skips_the_index_and_forgets_it_on_truncation(tmp_path, monkeypatch):
    segment = new_segment(tmp_path, interval=0)
    size = 0
    for i in range(10):
        size = append(segment, 100 + 3 * i, 3, value_size=40)
    lookups = []
    real_lookup = segment.offset_index.lookup
    monkeypatch.setattr(segment.offset_index, "lookup", lambda offset: lookups.append(offset) or real_lookup(offset))
    # a follower's fetch woken by the last append reads from its first batch: no index search
    for target in (127, 128, 129):
        position, header = segment.translate_offset(target)
        assert (position, header.base_offset) == (9 * size, 127)
    assert segment.translate_offset(130) is None
    assert lookups == []
    position, header = segment.translate_offset(126)  # before the last append: the index
    assert (position, header.base_offset) == (8 * size, 124) and lookups == [126]
    # truncated into an earlier batch and appended again with other sizes: the batch now holding
    # 127 starts elsewhere, and a remembered position would be mid-batch
    segment.truncate_to(122)
    assert segment.size == 7 * size and segment.translate_offset(127) is None
    append(segment, 121, 2, value_size=40)  # [121..122]: shorter than a 3-record batch
    first = segment.size
    append(segment, 123, 8, value_size=10)  # [123..130]
    for target in (127, 121):
        assert segment.translate_offset(target)[0] == {127: first, 121: 7 * size}[target]
    assert segment.read(127, 10_000)[0] == 123
