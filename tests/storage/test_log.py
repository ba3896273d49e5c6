"""Log: offsets and epochs on append, LogAppendTime, follower appends, reads, timestamps,
truncation, log start offset, retention, rolling, flushing, and the open-file LRU."""

from __future__ import annotations

import dataclasses
import os
import struct

import pytest
from storage_helpers import START_MS, batch, check_consistent, follower_batch, open_log, record_fsyncs

from protocol.clock import MockTime
from protocol.compression import Compression
from protocol.errors import InvalidRecordError, OffsetOutOfRangeError
from protocol.records import (CRC_OFFSET, LAST_OFFSET_DELTA_OFFSET, LOG_APPEND_TIME, RECORDS_COUNT_OFFSET, Record,
                              build_batch, check_batch, compute_crc, iter_batch_headers, iter_records)
from storage import Log, LogConfig, OffsetsOutOfOrderError, TimestampAndOffset
from storage.log import run_flush_plans
from storage.segment_budget import ACTIVE_SEGMENT_FDS, OpenSegmentBudget


def test_directory_layout_and_topic_partition(tmp_path):
    log = open_log(tmp_path / "my-topic-with-dashes-7")
    assert (log.topic, log.partition) == ("my-topic-with-dashes-7"[:-2], 7)
    log.append_as_leader(batch(2), leader_epoch=0)
    log.flush()  # the indexes' files come with their first entries, or a flush (storage/index.py)
    assert sorted(p.name for p in log.dir.iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
        "leader-epoch-checkpoint"]
    with pytest.raises(ValueError):
        open_log(tmp_path / "nodash")


def test_append_assigns_offsets_and_epoch_in_place(tmp_path):
    log = open_log(tmp_path / "t-0")
    buf = bytearray(batch(3) + batch(2))
    info = log.append_as_leader(buf, leader_epoch=4)
    assert (info.first_offset, info.last_offset, info.record_count, info.batch_count) == (0, 4, 5, 2)
    assert info.valid_bytes == len(buf) and info.log_append_time == -1
    assert info.max_timestamp == START_MS + 2 and info.offset_of_max_timestamp == 2
    assert [(h.base_offset, h.partition_leader_epoch) for h in info.batches] == [(0, 4), (3, 4)]
    assert [h.base_offset for _, h in iter_batch_headers(buf)] == [0, 3]  # patched in place
    check_batch(buf, 0, len(buf))  # CRC untouched and still valid
    info = log.append_as_leader(batch(1), leader_epoch=4)  # bytes: copied once, then patched
    assert info.first_offset == 5 and log.log_end_offset == 6
    assert log.leader_epoch_cache.entries() == [(4, 0)]
    log.append_as_leader(memoryview(bytearray(batch(1))), leader_epoch=6)
    assert log.leader_epoch_cache.entries() == [(4, 0), (6, 6)]
    assert log.leader_epoch_cache.end_offset_for(4) == (4, 6)
    assert log.leader_epoch_cache.end_offset_for(6) == (6, 7)
    check_consistent(log)


@pytest.mark.parametrize("append_time", [False, True])
def test_one_batch_append_info_and_headers_are_what_was_written(tmp_path, append_time):
    """A single batch's LogAppendInfo (the one-batch path of _append_info) is the general
    loop's, and the header it carries is the one in the log, read back from the file: offsets
    and epoch stamped (without a second unpack), and with LogAppendTime the rewritten
    attributes, max timestamp and CRC."""
    time = MockTime()
    config = {"message_timestamp_type": "LogAppendTime"} if append_time else {}
    log = open_log(tmp_path / "t-0", time, **config)
    for i, ts in enumerate([START_MS, 0, START_MS + 7, 1]):
        time.sleep(3)
        info = log.append_as_leader(bytearray(batch(i + 1, ts=ts)), leader_epoch=2 + i)
        (header,) = info.batches
        buf = log.read(info.first_offset, 1 << 20).records
        on_disk = check_batch(buf, 0, len(buf))
        assert header == on_disk and header.partition_leader_epoch == 2 + i
        assert info == log._append_info_any(buf[:on_disk.size], [(0, header)], info.log_append_time)
    check_consistent(log)


def test_log_append_time_rewrites_max_timestamp_and_crc(tmp_path):
    time = MockTime()
    log = open_log(tmp_path / "t-0", time, message_timestamp_type="LogAppendTime")
    time.sleep(5000)
    info = log.append_as_leader(batch(3, ts=START_MS - 10_000), leader_epoch=0)
    assert info.log_append_time == time.milliseconds() == info.max_timestamp
    data = log.read(0, 10_000).records
    h = check_batch(data, 0, len(data))
    assert h.timestamp_type == LOG_APPEND_TIME and h.max_timestamp == time.milliseconds()
    assert [r.timestamp for r in iter_records(data)] == [time.milliseconds()] * 3


def test_empty_append(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(1), 0)
    info = log.append_as_follower(b"")
    assert info.record_count == 0 and info.batch_count == 0 and log.log_end_offset == 1
    assert log.append_as_leader(b"", 3).record_count == 0
    assert log.leader_epoch_cache.latest_epoch() == 0


def test_follower_keeps_offsets_and_rejects_gaps(tmp_path):
    log = open_log(tmp_path / "t-0")
    data = follower_batch(0, 3, epoch=2) + follower_batch(3, 2, epoch=5)
    info = log.append_as_follower(data)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (0, 4, 5)
    assert log.leader_epoch_cache.entries() == [(2, 0), (5, 3)]
    for bad in (follower_batch(6), follower_batch(4), follower_batch(5) + follower_batch(7)):
        with pytest.raises(OffsetsOutOfOrderError) as exc:
            log.append_as_follower(bad)
        assert isinstance(exc.value, InvalidRecordError) and exc.value.error_code == 87
    assert log.log_end_offset == 5
    assert bytes(log.read(0, 1 << 20).records) == data
    check_consistent(log)


def test_a_follower_of_a_compacted_log_takes_the_gaps_the_cleaner_left(tmp_path):
    """The cleaner drops a batch that kept no record: the leader's compacted log has gaps between
    batches (and before its first one), which a follower takes as Kafka's does; offsets still
    only go up. Refused, a new replica of a cleaned partition (__consumer_offsets) fetched the
    same gap for ever."""
    log = open_log(tmp_path / "t-0", cleanup_policy="compact")
    data = follower_batch(2, 3, epoch=1) + follower_batch(9, 2, epoch=1)
    info = log.append_as_follower(data)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (2, 10, 11)
    for bad in (follower_batch(10), follower_batch(13) + follower_batch(12)):
        with pytest.raises(OffsetsOutOfOrderError):
            log.append_as_follower(bad)
    assert log.log_end_offset == 11
    log.append_as_follower(follower_batch(20, epoch=2))
    assert log.log_end_offset == 21
    assert bytes(log.read(2, 1 << 20).records) == data + follower_batch(20, epoch=2)
    log.close()
    reopened = open_log(tmp_path / "t-0", cleanup_policy="compact")
    assert reopened.log_end_offset == 21
    reopened.close()


def test_read_bounds_and_kip74(tmp_path):
    log = open_log(tmp_path / "t-0")
    sizes = []
    for n in range(1, 6):
        sizes.append(log.append_as_leader(batch(n, value_size=100), 0).valid_bytes)
    # offsets: [0] [1,2] [3,4,5] [6..9] [10..14]
    fetched = log.read(4, 1 << 20)
    assert fetched.first_batch_offset == 3 and len(fetched.records) == sum(sizes[2:])
    assert (fetched.log_start_offset, fetched.log_end_offset) == (0, 15)
    assert len(log.read(0, sizes[0] + sizes[1]).records) == sizes[0] + sizes[1]
    assert len(log.read(0, sizes[0] + sizes[1] - 1).records) == sizes[0]
    assert len(log.read(3, 10).records) == sizes[2]  # KIP-74: the first batch whole
    assert len(log.read(3, 10, min_one_batch=False).records) == 0
    assert len(log.read(0, 1 << 20, max_offset=6).records) == sum(sizes[:3])
    assert len(log.read(0, 1 << 20, max_offset=5).records) == sum(sizes[:2])  # batch [3..5] holds 5
    empty = log.read(6, 1 << 20, max_offset=6)
    assert len(empty.records) == 0 and empty.first_batch_offset == 6
    assert len(log.read(15, 100).records) == 0
    for bad in (-1, 16):
        with pytest.raises(OffsetOutOfRangeError) as exc:
            log.read(bad, 100)
        assert exc.value.error_code == 1


def test_a_read_bounded_at_the_log_end_looks_up_only_its_start(tmp_path, monkeypatch):
    """A consumer caught up reads with max_offset = its HW = the LEO: no batch ends there, so
    the bound is not looked up (LogSegment.translate_offset walked every batch from the fetch
    position to the segment's end to find none); the records are those of an unbounded read,
    and a bound inside the log is still looked up and applied."""
    from storage.segment import LogSegment
    log = open_log(tmp_path / "t-0")
    for n in range(1, 6):
        log.append_as_leader(batch(n, value_size=100), 0)  # offsets [0] [1,2] [3,4,5] [6..9] [10..14]
    lookups = []
    translate = LogSegment.translate_offset
    monkeypatch.setattr(LogSegment, "translate_offset", lambda self, offset, start=0: (
        lookups.append(offset), translate(self, offset, start))[1])
    unbounded = bytes(log.read(4, 1 << 20).records)
    lookups.clear()
    for bound in (15, 99):
        assert bytes(log.read(4, 1 << 20, max_offset=bound).records) == unbounded
    assert lookups == [4, 4]
    lookups.clear()
    assert len(log.read(4, 1 << 20, max_offset=10).records) < len(unbounded)  # [3..5] [6..9], not [10..14]
    assert lookups == [4, 10]


def test_read_is_a_view_of_the_mapping_and_one_segment_at_a_time(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=1000)
    for _ in range(10):
        log.append_as_leader(batch(2, value_size=150), 0)
    assert log.num_segments > 1
    fetched = log.read(0, 1 << 20)
    assert isinstance(fetched.records, memoryview) and fetched.records.readonly
    assert len(fetched.records) == log.segments[0].size  # stops at the segment's end
    second = log.segments[1].base_offset
    assert log.read(second, 1 << 20).first_batch_offset == second


def test_offset_for_timestamp_is_exact_to_the_record(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=2000, index_interval_bytes=100)
    for i in range(30):  # batch i: 4 records at START + 10*i + (0, 2, 4, 6)
        records = [Record(timestamp=START_MS + 10 * i + 2 * j, value=b"x" * 40) for j in range(4)]
        codec = Compression.ZSTD if i % 2 else Compression.NONE
        log.append_as_leader(build_batch(records, compression=codec), leader_epoch=3)
    assert log.num_segments > 2
    assert log.offset_for_timestamp(START_MS - 5) == TimestampAndOffset(START_MS, 0, 3)
    for i in (0, 7, 13, 29):
        for j in range(4):
            ts = START_MS + 10 * i + 2 * j
            assert log.offset_for_timestamp(ts) == TimestampAndOffset(ts, 4 * i + j, 3)
            assert log.offset_for_timestamp(ts - 1).offset == 4 * i + j
    assert log.offset_for_timestamp(START_MS + 10 * 29 + 7) is None
    assert log.fetch_offset_by_timestamp(-2) == TimestampAndOffset(-1, 0, 3)
    assert log.fetch_offset_by_timestamp(-1) == TimestampAndOffset(-1, 120, 3)
    assert log.fetch_offset_by_timestamp(-3) == TimestampAndOffset(START_MS + 296, 119, 3)


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path):
    log = open_log(tmp_path / "t-0", index_interval_bytes=0)
    for stamps in ([50, 10], [20, 30], [100, 5], [60, 70]):
        log.append_as_leader(build_batch([Record(timestamp=START_MS + t, value=b"v") for t in stamps]), 0)
    # first record (by offset) with ts >= target
    assert log.offset_for_timestamp(START_MS + 40).offset == 0
    assert log.offset_for_timestamp(START_MS + 55).offset == 4
    assert log.offset_for_timestamp(START_MS + 65).offset == 4
    assert log.offset_for_timestamp(START_MS + 101) is None


def test_offset_for_timestamp_respects_log_start_offset(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(4), 0)
    log.update_high_watermark(4)
    log.maybe_increment_log_start_offset(2)
    assert log.offset_for_timestamp(START_MS) == TimestampAndOffset(START_MS + 2, 2, 0)


def test_truncate_to_inside_and_across_segments(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    for epoch in (1, 1, 1, 2, 2, 2, 3, 3, 3, 3):
        log.append_as_leader(batch(2, value_size=100), epoch)
    log.update_high_watermark(20)
    log.flush()
    nseg = log.num_segments
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 6), (3, 12)]
    assert log.truncate_to(13)  # inside batch [12, 13]: the whole batch goes
    assert log.log_end_offset == 12 and log.high_watermark == 12 and log.recovery_point == 12
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 6)]
    assert log.num_segments < nseg
    assert not log.truncate_to(12)
    check_consistent(log)
    info = log.append_as_leader(batch(1), 4)
    assert info.first_offset == 12
    assert log.truncate_to(3) and log.log_end_offset == 2  # batch [2, 3]
    assert log.num_segments == 1
    check_consistent(log)
    assert [h.base_offset for _, h in iter_batch_headers(log.read(0, 1 << 20).records)] == [0]


def test_truncate_with_a_live_view_leaves_a_zero_tail_that_reopens_cleanly(tmp_path):
    log = open_log(tmp_path / "t-0")
    for _ in range(5):
        log.append_as_leader(batch(1, value_size=100), 0)
    view = log.read(0, 1 << 20).records  # a fetch response still being sent
    size_before = len(view)
    log.truncate_to(2)
    assert os.path.getsize(log.active_segment.log_path) == size_before  # not shrunk under the view
    assert bytes(view[len(view) - 10:]) == bytes(10)  # the dropped bytes read as zeros
    log.append_as_leader(batch(1, value_size=5), 0)
    check_consistent(log)
    del view
    log.close()
    assert os.path.getsize(log.active_segment.log_path) == log.active_segment.size  # shrunk on close
    reopened = open_log(tmp_path / "t-0")
    assert reopened.log_end_offset == 3
    check_consistent(reopened)


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=500)
    for _ in range(6):
        log.append_as_leader(batch(2, value_size=100), 1)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (100, 100, 1)
    assert log.leader_epoch_cache.entries() == []
    assert log.append_as_follower(follower_batch(100, epoch=2)).first_offset == 100
    with pytest.raises(OffsetOutOfRangeError):
        log.read(99, 10)
    check_consistent(log)
    assert sorted(p.name for p in log.dir.glob("*.log")) == ["00000000000000000100.log"]


def test_log_start_offset_and_high_watermark(tmp_path):
    log = open_log(tmp_path / "t-0")
    for epoch in (1, 2, 3):
        log.append_as_leader(batch(2), epoch)
    assert log.update_high_watermark(100) == 6
    assert log.update_high_watermark(4) == 4
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(5)
    assert log.maybe_increment_log_start_offset(3)
    assert not log.maybe_increment_log_start_offset(2)
    assert log.leader_epoch_cache.entries() == [(2, 3), (3, 4)]
    assert log.read(3, 1000).first_batch_offset == 2  # the batch holding 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 1000)
    assert log.update_high_watermark(0) == 3


def fill(log, batches, **kw):
    for _ in range(batches):
        log.append_as_leader(batch(1, value_size=200, **kw), 0)


def test_retention_by_bytes_never_the_active_segment_nor_above_the_hw(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=1000, retention_bytes=1500)
    fill(log, 20)
    nseg = log.num_segments
    assert log.delete_old_segments() == 0  # HW still 0
    log.update_high_watermark(log.log_end_offset)
    deleted = log.delete_old_segments()
    # Kafka deletes while what stays is still >= retention.bytes
    assert 0 < deleted < nseg and log.size_in_bytes() >= 1500
    assert log.size_in_bytes() - log.segments[0].size < 1500
    assert log.log_start_offset == log.segments[0].base_offset
    log.update_config(dataclasses.replace(log.config, retention_bytes=0))
    log.delete_old_segments()
    assert log.num_segments == 1  # the active segment stays
    check_consistent(log)


def test_retention_by_time_uses_the_largest_timestamp(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_log(tmp_path / "t-0", time, segment_bytes=1000, retention_ms=60_000)
    fill(log, 8, ts=START_MS)  # two segments at START
    fill(log, 8, ts=START_MS + 50_000)
    log.update_high_watermark(log.log_end_offset)
    time.sleep(61_000)
    deleted = log.delete_old_segments()
    assert deleted >= 1
    assert all(s.max_timestamp_so_far >= START_MS + 50_000 for s in log.segments)
    time.sleep(60_000)
    log.delete_old_segments()
    assert log.num_segments == 1


def test_retention_below_log_start_offset(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=1000)
    fill(log, 12)
    log.update_high_watermark(log.log_end_offset)
    second = log.segments[1].base_offset
    log.maybe_increment_log_start_offset(second + 1)
    assert log.delete_old_segments() == 1 and log.segments[0].base_offset == second


def test_roll_on_segment_ms_and_offset_overflow(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_log(tmp_path / "t-0", time, segment_ms=1000)
    log.append_as_leader(batch(1, ts=START_MS), 0)
    log.append_as_leader(batch(1, ts=START_MS + 500), 0)
    assert log.num_segments == 1
    log.append_as_leader(batch(1, ts=START_MS + 1001), 0)
    assert log.num_segments == 2
    # A batch claiming 2**31 - 1 records (never decoded) leaves the next offset at 2**31
    # relative to the segment's base: the next append must start a new segment.
    wide = bytearray(follower_batch(1))
    struct.pack_into(">i", wide, LAST_OFFSET_DELTA_OFFSET, 2**31 - 2)
    struct.pack_into(">i", wide, RECORDS_COUNT_OFFSET, 2**31 - 1)
    struct.pack_into(">I", wide, CRC_OFFSET, compute_crc(wide, 0, len(wide)))
    follower = open_log(tmp_path / "f-0")
    follower.append_as_follower(follower_batch(0) + wide)
    assert follower.log_end_offset == 2**31 and follower.num_segments == 1
    follower.append_as_follower(follower_batch(2**31))
    assert [s.base_offset for s in follower.segments] == [0, 2**31]
    check_consistent(follower)


def test_roll_when_the_index_is_full(tmp_path):
    log = open_log(tmp_path / "t-0", segment_index_bytes=64, index_interval_bytes=0)
    fill(log, 30)
    assert log.num_segments > 1
    for segment in log.segments[:-1]:
        assert segment.offset_index.entries <= 8
    check_consistent(log)


def test_roll_when_the_time_index_is_full(tmp_path):
    """Rising timestamps fill the time index (12-byte entries, its last slot kept for the roll)
    before the offset index (8-byte ones): the segment rolls then, as Kafka's timeIndex.isFull."""
    log = open_log(tmp_path / "t-0", segment_index_bytes=64, index_interval_bytes=0)
    for i in range(30):
        log.append_as_leader(batch(1, ts=START_MS + i, value_size=200), 0)
    assert log.num_segments > 1
    for segment in log.segments[:-1]:
        assert segment.time_index.entries == 4 and segment.offset_index.entries < 8
    check_consistent(log)


def test_explicit_roll_and_empty_active_segment(tmp_path):
    log = open_log(tmp_path / "t-0")
    assert log.roll() is log.active_segment and log.num_segments == 1
    log.append_as_leader(batch(1), 0)
    log.roll()
    assert log.num_segments == 2 and log.active_segment.base_offset == 1
    first = log.segments[0]
    assert os.path.getsize(first.index_path) == 0 and os.path.getsize(first.time_index_path) == 12


def test_flush_policy_and_split_flush(tmp_path):
    time = MockTime()
    log = open_log(tmp_path / "t-0", time, flush_messages=5, flush_ms=10_000)
    fill(log, 4)
    assert log.unflushed_messages() == 4 and log.recovery_point == 0 and not log.needs_flush_by_policy()
    fill(log, 1)  # the fifth message: flush.messages triggers an fsync in append
    assert log.recovery_point == 5 and log.unflushed_messages() == 0
    fill(log, 2)
    time.sleep(10_000)
    assert log.time_since_last_flush_ms() == 10_000 and log.needs_flush_by_policy()
    plan = log.begin_flush()
    fill(log, 1)  # appends may continue while the plan runs elsewhere
    plan.run()
    log.complete_flush(plan)
    assert log.recovery_point == 7 and log.unflushed_messages() == 1
    plan = log.begin_flush()
    log.truncate_to(6)
    plan.run()
    log.complete_flush(plan)
    assert log.recovery_point == 6  # a truncation during the flush keeps the recovery point down
    assert log.begin_flush() is None


def test_a_failing_flush_plan_neither_stops_the_others_nor_keeps_its_descriptors(tmp_path):
    """The broker's flush pass runs many plans off the loop (run_flush_plans): one whose fsync
    fails (here: a descriptor gone bad, EBADF; EIO in life) is reported, the others still run
    and are completed, and every descriptor the plans held is closed."""
    time = MockTime()
    logs = [open_log(tmp_path / f"t-{i}", time) for i in range(3)]
    for log in logs:
        fill(log, 3)
    plans = [log.begin_flush() for log in logs]
    held = [fd for plan in plans for fd in plan._fds]
    bad = plans[1]._fds[0]
    os.close(bad)  # (nothing opens a file between here and the check: its number is not reused)
    durations: list[int] = []
    done, failed = run_flush_plans(plans, time.nanoseconds, durations)
    assert done == [plans[0], plans[2]] and [p for p, _ in failed] == [plans[1]] and len(durations) == 2
    for plan in done:
        plan.log.complete_flush(plan)
    assert [log.recovery_point for log in logs] == [3, 0, 3]
    still_open = [fd for fd in held if fd != bad and _is_open(fd)]
    assert still_open == []


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_only_a_bounded_number_of_segments_keep_files_open(tmp_path):
    budget = OpenSegmentBudget(ACTIVE_SEGMENT_FDS + 4)  # 4 descriptors beyond the active segment's
    log = open_log(tmp_path / "t-0", budget=budget, segment_bytes=300)
    fill(log, 40)
    assert log.num_segments > 10
    for offset in range(0, log.log_end_offset, 3):
        assert log.read(offset, 1000).records
    open_count = sum(1 for s in log.segments if s._records is not None and not s.active)
    assert open_count <= 4
    check_consistent(log)


def test_close_trims_and_reopen_continues(tmp_path):
    log = open_log(tmp_path / "t-0", segment_index_bytes=4096)
    fill(log, 30)
    log.close()
    active = log.active_segment
    assert os.path.getsize(active.index_path) % 8 == 0 and os.path.getsize(active.index_path) < 4096
    reopened = open_log(tmp_path / "t-0", segment_index_bytes=4096)
    assert reopened.log_end_offset == 30 and not reopened.recovery_report.needed_recovery
    assert reopened.active_segment.offset_index.max_entries == 4096 // 8  # room for appends again
    fill(reopened, 5)
    check_consistent(reopened)


def test_log_config_properties_round_trip():
    cfg = LogConfig.from_topic_properties({"segment.bytes": "1024", "message.timestamp.type": "LogAppendTime",
                                           "cleanup.policy": "delete"})
    assert cfg.segment_bytes == 1024 and cfg.log_append_time
    assert LogConfig.from_topic_properties(cfg.to_topic_properties()) == cfg
    assert LogConfig().max_message_bytes == 1048588 and LogConfig().flush_messages == 2**63 - 1
    for key, value in (("retention.ms", "soon"), ("segment.bytes", "3"), ("message.timestamp.type", "Now"),
                       ("min.insync.replicas", "0")):
        with pytest.raises(ValueError, match=key):
            LogConfig.from_topic_properties({key: value})
    base = LogConfig(retention_ms=5)
    assert LogConfig.from_topic_properties({"flush.messages": "1"}, base).retention_ms == 5


def test_delete_removes_the_directory(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, 3)
    log.delete()
    assert not (tmp_path / "t-0").exists()
    assert isinstance(Log.open(tmp_path / "t-0", LogConfig(), time=MockTime()), Log)


def test_the_leader_epoch_checkpoint_is_written_and_fsynced_by_the_flush_before_the_recovery_point_passes(
        tmp_path, monkeypatch):
    """A new leader epoch costs no write (a LeaderAndIsr making this broker leader of 10,000
    partitions paid one per partition): the cache changes in memory, and an epoch at the LEO
    asks for nothing. Once the epoch has batches, the log's flush writes the file before it
    prepares the plan and fsyncs it (and its directory) with the segments, so the recovery
    point never passes an epoch entry that is not on disk (epoch_cache.py)."""
    log = open_log(tmp_path / "t-0")
    log.flush()  # the new segment files and the directory
    synced = record_fsyncs(monkeypatch)
    cache = log.leader_epoch_cache
    path = log.dir / "leader-epoch-checkpoint"
    assert cache.assign(3, log.log_end_offset)  # what Partition.make_leader does
    assert not path.exists() and log.begin_flush() is None and synced == []
    log.append_as_leader(batch(2), leader_epoch=3)
    assert not path.exists()
    plan = log.begin_flush()
    assert path.read_text() == "0\n1\n3 0\n"  # written before the plan can move the recovery point
    plan.run()
    log.complete_flush(plan)
    assert log.recovery_point == 2
    assert "leader-epoch-checkpoint" in synced and "t-0" in synced and not cache.sync_needed()
    synced.clear()
    assert log.begin_flush() is None
    # Changed again while a flush is under way: that flush does not count for the newer entries.
    log.append_as_leader(batch(2), leader_epoch=4)
    plan = log.begin_flush()
    assert plan is not None and path.read_text() == "0\n2\n3 0\n4 2\n"
    log.append_as_leader(batch(2), leader_epoch=5)
    plan.run()
    log.complete_flush(plan)
    assert cache.sync_needed() and cache.write_needed()
    log.flush()
    assert not cache.sync_needed() and log.begin_flush() is None
    assert path.read_text() == "0\n3\n3 0\n4 2\n5 4\n"


def test_after_a_kill_the_epochs_below_the_recovery_point_are_there(tmp_path):
    """kill -9 (another Log opened on the directory, unclean, from the recovery point the
    first one reached): recovery re-reads only the segment holding the recovery point, so the
    epochs of the earlier segments must come from the file, which the flush wrote. Those of
    the re-read segments come back from the batch headers, written or not."""
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for epoch in range(6):
        log.leader_epoch_cache.assign(epoch, log.log_end_offset)
        log.append_as_leader(batch(2, value_size=60), leader_epoch=epoch)
    assert log.num_segments >= 4
    log.flush()
    for epoch in (6, 7):  # after the flush: in memory only
        log.leader_epoch_cache.assign(epoch, log.log_end_offset)
        log.append_as_leader(batch(2, value_size=60), leader_epoch=epoch)
    log.leader_epoch_cache.assign(8, log.log_end_offset)  # a leader that appended nothing yet
    expected = [e for e in log.leader_epoch_cache.entries() if e.start_offset < log.log_end_offset]
    assert len(expected) == 8
    recovered = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300), time=MockTime(),
                         recovery_point=log.recovery_point - 2, had_clean_shutdown=False)
    assert recovered.recovery_report.segments_recovered < log.num_segments  # (the first one is never closed)
    assert recovered.leader_epoch_cache.entries() == expected


def test_after_a_kill_an_epoch_truncated_but_not_yet_written_does_not_come_back(tmp_path):
    """A follower truncation drops an epoch in memory only; the log then grows again with
    another leader's batches of an older epoch. After kill -9 the file still holds the dropped
    entry, now below the LEO: recovery, which re-reads from the recovery point (at most the
    truncation offset), must not keep it (epoch_cache.py, point 2)."""
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for epoch in range(4):
        log.append_as_follower(follower_batch(log.log_end_offset, 2, epoch=epoch, value_size=60))
    log.append_as_follower(follower_batch(log.log_end_offset, 2, epoch=5, value_size=60))  # this one's own, not replicated
    log.flush()
    diverged = log.log_end_offset - 2
    assert (5, diverged) in log.leader_epoch_cache.entries()
    log.truncate_to(diverged)  # the new leader (epoch 6) has epoch 3's batches there
    log.append_as_follower(follower_batch(diverged, 2, epoch=3, value_size=60))
    log.append_as_follower(follower_batch(log.log_end_offset, 2, epoch=6, value_size=60))
    expected = log.leader_epoch_cache.entries()
    assert expected[-2:] == [(3, 6), (6, diverged + 2)]
    recovered = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300), time=MockTime(),
                         recovery_point=log.recovery_point, had_clean_shutdown=False)  # (the first one is never closed)
    assert recovered.leader_epoch_cache.entries() == expected
