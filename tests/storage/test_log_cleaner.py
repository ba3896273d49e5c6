"""LogCleaner on real segment files and a MockTime: one record per key after cleaning, offsets
kept (gaps), tombstones dropped only after delete.retention.ms from the clean head, the dirty
ratio, partially kept batches re-encoded (compressed too), reads over the gaps, reopening a
compacted log, and the crash-safe swap (.cleaned dropped, .swap completed on load)."""

from __future__ import annotations

import os

import pytest
from storage_helpers import START_MS

from protocol.clock import MockTime
from protocol.compression import Compression
from protocol.records import Record, build_batch, check_batch, iter_batch_headers, iter_records
from storage import Log, LogConfig, LogManager
from storage.checkpoint import OffsetCheckpointFile
from storage.log_cleaner import CleanAborted, LogCleaner, dirty_ratio
from storage.log_manager import CLEANER_OFFSET_CHECKPOINT
from storage.segment import CLEANED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, file_name

DAY_MS = 86_400_000


def open_compacted(path, time, **config) -> Log:
    config.setdefault("segment_bytes", 2000)
    return Log.open(path, LogConfig(cleanup_policy="compact", **config), time=time)


def append(log: Log, rows, time: MockTime, compression=Compression.NONE) -> None:
    """One batch of (key, value) rows."""
    log.append_as_leader(build_batch([Record(timestamp=time.milliseconds(), key=k, value=v) for k, v in rows],
                                     compression=compression), 0)
    log.update_high_watermark(log.log_end_offset)


def records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, read through Log.read from the log start."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not len(data.records):
            break
        for r in iter_records(data.records):
            if r.offset >= offset:
                out.append((r.offset, r.key, r.value))
        *_, (_pos, last) = iter_batch_headers(data.records)
        offset = last.next_offset  # a batch emptied by compaction still moves the position on
    return out


def cleaner_for(log: Log, time: MockTime) -> LogCleaner:
    return LogCleaner(time, lambda: {(log.topic, log.partition): log})


def test_many_commits_to_the_same_keys_leave_one_record_per_key(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "t-0", time)
    for i in range(300):  # 300 "commits" cycling over 10 keys, 1 to 3 records each
        append(log, [(f"k{(i + j) % 10}".encode(), f"v{i}-{j}".encode()) for j in range(1 + i % 3)], time)
        time.sleep(10)
    log.roll()  # the active segment is never cleaned
    log.update_high_watermark(log.log_end_offset)
    before = records(log)
    newest = {}
    for offset, key, value in before:
        newest[key] = (offset, value)
    segments_before = log.num_segments
    stats = cleaner_for(log, time).clean_once()
    assert stats is not None and stats.records_kept == 10 and stats.records_read == len(before)
    after = records(log)
    assert sorted(after) == sorted((o, k, v) for k, (o, v) in newest.items())  # one per key, its newest, same offsets
    assert log.num_segments == segments_before  # groups are formed by the sizes before cleaning (as Kafka)
    cleaner_for(log, time).clean(log)  # the next pass merges the now small segments
    assert log.num_segments < segments_before
    assert records(log) == after
    assert log.log_end_offset == before[-1][0] + 1
    for segment in log.segments:  # every batch valid
        buf = segment.records.buffer(segment.size)
        for pos, h in iter_batch_headers(buf, 0, segment.size):
            check_batch(buf, pos, pos + h.size, compacted=True)
        del buf
    # reopened: the gaps are no damage, the same records come back
    log.close()
    reopened = open_compacted(tmp_path / "t-0", time)
    assert reopened.log_end_offset == log.log_end_offset
    reopened.update_high_watermark(reopened.log_end_offset)
    assert records(reopened) == after
    reopened.close()


def test_only_logs_over_the_dirty_ratio_are_cleaned_and_delete_logs_never(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "c-0", time)
    plain = Log.open(tmp_path / "d-0", LogConfig(segment_bytes=2000), time=time)
    for i in range(100):  # distinct keys: compaction keeps them all
        append(log, [(f"k{i}".encode(), b"x" * 50)], time)
        append(plain, [(b"k", b"x" * 50)], time)
    log.roll()
    plain.roll()
    cleaner = LogCleaner(time, lambda: {("c", 0): log, ("d", 0): plain})
    assert dirty_ratio(log, time.milliseconds())[0] == 1.0
    assert cleaner.clean_once().records_kept == 100
    assert dirty_ratio(log, time.milliseconds()) == (0.0, 0)  # all clean now
    assert cleaner.clean_once() is None  # nothing dirty; the delete log is not the cleaner's
    assert len(records(plain)) == 100
    # a little new dirt over a big clean head stays below min.cleanable.dirty.ratio (0.5)
    for i in range(3):
        append(log, [(f"k{i}".encode(), b"y" * 50)], time)
    log.roll()
    ratio, dirty = dirty_ratio(log, time.milliseconds())
    assert dirty > 0 and ratio < 0.5
    assert cleaner.clean_once() is None
    log.update_config(LogConfig(cleanup_policy="compact", segment_bytes=2000, min_cleanable_dirty_ratio=0.01))
    assert cleaner.clean_once().records_kept == 100  # 3 of the 103 superseded
    log.close()
    plain.close()


def test_tombstones_stay_until_delete_retention_ms_after_they_were_cleaned(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "t-0", time, min_cleanable_dirty_ratio=0.0)
    append(log, [(b"a", b"1"), (b"b", b"1")], time)
    append(log, [(b"a", None)], time)  # delete a
    log.roll()
    cleaner = cleaner_for(log, time)
    cleaner.clean(log)
    assert [(k, v) for _o, k, v in records(log)] == [(b"b", b"1"), (b"a", None)]  # first pass: kept
    time.sleep(DAY_MS - 1000)
    append(log, [(b"c", b"1")], time)
    log.roll()
    cleaner.clean(log)
    assert (b"a", None) in [(k, v) for _o, k, v in records(log)]  # not a day old yet
    time.sleep(2000)
    stats = cleaner.clean(log)
    assert stats.tombstones_dropped == 1
    assert [(k, v) for _o, k, v in records(log)] == [(b"b", b"1"), (b"c", b"1")]
    log.close()


def test_partly_kept_batches_are_re_encoded_with_their_offsets_and_compression(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "t-0", time)
    append(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], time, Compression.ZSTD)
    append(log, [(b"b", b"2")], time)
    log.roll()
    cleaner_for(log, time).clean(log)
    assert records(log) == [(0, b"a", b"1"), (2, b"c", b"1"), (3, b"b", b"2")]
    [segment, _active] = log.segments
    buf = segment.records.buffer(segment.size)
    headers = [h for _p, h in iter_batch_headers(buf, 0, segment.size)]
    del buf
    assert headers[0].compression == Compression.ZSTD and headers[0].records_count == 2
    assert (headers[0].base_offset, headers[0].last_offset) == (0, 2)  # the batch still ends where it ended
    log.close()


def partial_clean(log: Log, time: MockTime):
    """A pass over the first two cleanable segments only, its .cleaned file written but not swapped
    in (a crash before the swap): (the .cleaned path, the offsets the pass drops)."""
    task = cleaner_for(log, time).begin_clean(log)
    assert task is not None
    group = task.groups[0]
    assert len(group.segments) >= 2
    group.segments, group.next_bases, group.buffers = group.segments[:2], group.next_bases[:2], group.buffers[:2]
    task.groups = [group]
    task.first_dirty = task.horizon = 0
    latest = task._build_offset_map()
    task.run()
    task.release()
    end = group.next_bases[-1]
    return group.cleaned, {o for o, k, _v in records(log) if latest[k] > o and o < end}


def test_an_interrupted_swap_is_completed_and_a_partial_clean_dropped_on_load(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "t-0", time, segment_bytes=600)
    for i in range(40):
        append(log, [(f"k{i % 4}".encode(), b"v" * 40)], time)
    log.roll()
    log.update_config(LogConfig(cleanup_policy="compact", segment_bytes=2000))  # groups of several segments
    assert log.num_segments >= 4
    cleaned, _dropped = partial_clean(log, time)
    assert cleaned.exists()
    expected = records(log)
    log.close()
    # crash 1: only the .cleaned file was written: it is dropped, the log is as before
    reopened = open_compacted(tmp_path / "t-0", time, segment_bytes=600)
    assert not cleaned.exists()
    reopened.update_high_watermark(reopened.log_end_offset)
    assert records(reopened) == expected
    reopened.close()
    # crash 2: renamed to .swap, old segments not yet deleted: the load completes the swap
    log = open_compacted(tmp_path / "t-0", time, segment_bytes=2000)
    log.update_high_watermark(log.log_end_offset)
    cleaned, dropped = partial_clean(log, time)
    base = log.segments[0].base_offset
    log.close()
    os.replace(cleaned, tmp_path / "t-0" / (file_name(base, LOG_SUFFIX) + SWAP_SUFFIX))
    reopened = open_compacted(tmp_path / "t-0", time, segment_bytes=600)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert dropped and records(reopened) == [r for r in expected if r[0] not in dropped]
    names = [p.name for p in (tmp_path / "t-0").iterdir()]
    assert not any(n.endswith((SWAP_SUFFIX, CLEANED_SUFFIX)) for n in names)
    reopened.close()


# -- the pass in three steps (begin on the log's thread, run on the cleaner's, complete) ----------

def dirty_log(tmp_path, time: MockTime) -> Log:
    log = open_compacted(tmp_path / "t-0", time)
    for i in range(60):
        append(log, [(f"k{i % 5}".encode(), f"v{i}".encode())], time)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def test_appends_and_reads_go_on_while_the_pass_runs_and_the_swap_keeps_them(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = dirty_log(tmp_path, time)
    cleaner = cleaner_for(log, time)
    task = cleaner.begin_clean(log)
    assert task is not None
    newest = {k: (o, v) for o, k, v in records(log)}
    for i in range(30):  # the producer goes on: appends, and rolls, between begin and complete
        append(log, [(f"n{i}".encode(), b"x" * 50)], time)
    task.run()
    assert all(g.cleaned.exists() for g in task.groups)
    stats = cleaner.complete_clean(task)
    assert stats is not None and stats.records_kept == 5
    after = records(log)
    assert [(o, k, v) for o, k, v in after if k.startswith(b"k")] == sorted((o, k, v) for k, (o, v) in newest.items())
    assert [k for _o, k, _v in after if k.startswith(b"n")] == [f"n{i}".encode() for i in range(30)]
    assert log.first_dirty_offset == stats.end_offset
    log.close()


def test_a_truncation_while_the_pass_runs_drops_the_pass(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = dirty_log(tmp_path, time)
    cleaner = cleaner_for(log, time)
    task = cleaner.begin_clean(log)
    task.run()
    log.truncate_to(30)  # a follower truncating (to below what the pass read)
    before = records(log)
    assert cleaner.complete_clean(task) is None and cleaner.aborted_passes == 1
    assert not any(g.cleaned.exists() for g in task.groups)
    assert records(log) == before and log.first_dirty_offset == 0
    log.close()


def test_an_aborted_pass_leaves_no_file(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = dirty_log(tmp_path, time)
    task = cleaner_for(log, time).begin_clean(log)
    assert len(task.groups) >= 2
    task.on_group_cleaned = lambda t, i: t.abort()  # the broker shuts down after the first group
    with pytest.raises(CleanAborted):
        task.run()
    assert not task.done and not any(g.cleaned.exists() for g in task.groups)
    assert not list(log.dir.glob("*" + CLEANED_SUFFIX))
    log.close()


def test_the_cleaner_offset_checkpoint_keeps_the_clean_head_across_a_restart(tmp_path):
    time = MockTime(start_ms=START_MS)
    config = LogConfig(cleanup_policy="compact", segment_bytes=2000)
    manager = LogManager([tmp_path], config, time=time)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    for i in range(60):
        append(log, [(f"k{i % 5}".encode(), f"v{i}".encode())], time)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    cleaner = LogCleaner(time, manager.all_logs)
    first = cleaner.clean_once()
    assert first is not None and log.first_dirty_offset == first.end_offset > 0
    manager.checkpoint_cleaner_offsets()
    assert f"t 0 {first.end_offset}" in (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text()
    manager.shutdown()
    again = LogManager([tmp_path], config, time=time)
    again.startup()
    reopened = again.get_log("t", 0)
    assert reopened.first_dirty_offset == first.end_offset
    assert dirty_ratio(reopened, time.milliseconds()) == (0.0, 0)  # nothing to clean again from zero
    assert LogCleaner(time, again.all_logs).clean_once() is None
    again.shutdown()
    # a checkpoint beyond the log (it was truncated meanwhile) is not trusted
    OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).write({("t", 0): 10**6})
    third = LogManager([tmp_path], config, time=time)
    third.startup()
    assert third.get_log("t", 0).first_dirty_offset == third.get_log("t", 0).log_start_offset
    third.shutdown()
