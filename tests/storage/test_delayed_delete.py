"""Delayed segment deletion (Kafka's asyncDelete), on a MockTime: segments leaving the log by
retention, the log start offset, truncation or a compaction swap are renamed to
``<name>.deleted`` and deleted only after ``file.delete.delay.ms``; a reader that still holds
such a segment (a fetch in flight, the log cleaner) reads it whole meanwhile."""

from __future__ import annotations

from storage_helpers import START_MS, batch, check_consistent, open_log

from protocol.clock import MockTime
from protocol.records import Record, build_batch, iter_records
from storage import Log, LogConfig
from storage.log_cleaner import LogCleaner
from storage.segment import DELETED_SUFFIX

DELAY_MS = 60_000


def fill(log: Log, batches: int) -> None:
    for _ in range(batches):
        log.append_as_leader(batch(1, value_size=200), 0)
    log.update_high_watermark(log.log_end_offset)


def names(log: Log, suffix: str) -> list[str]:
    return sorted(p.name for p in log.dir.iterdir() if p.name.endswith(suffix))


def test_retention_renames_to_deleted_and_deletes_after_file_delete_delay_ms(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_log(tmp_path / "t-0", time, segment_bytes=1000, retention_bytes=1000)
    assert log.config.file_delete_delay_ms == DELAY_MS  # Kafka's default
    fill(log, 12)
    old = log.segments[0]
    old_base, old_size = old.base_offset, old.size
    in_flight = log.read(0, 1 << 20).records  # a fetch response still being sent
    expected = bytes(in_flight)
    deleted = log.delete_old_segments()
    assert deleted >= 1 and log.log_start_offset > old_base
    gone = names(log, DELETED_SUFFIX)
    assert f"{old_base:020d}.log.deleted" in gone and f"{old_base:020d}.index.deleted" in gone
    assert f"{old_base:020d}.log" not in names(log, ".log")
    assert bytes(in_flight) == expected
    # a reader that held the segment object reads it again (its files reopen under the new names)
    found = old.read(old_base, 1 << 20)
    assert found is not None and len(found[1]) == old_size
    assert [r.offset for r in iter_records(found[1])][0] == old_base
    assert log.pending_deletes == log.pending_deletes[:deleted] and len(log.pending_deletes) == deleted
    time.sleep(DELAY_MS - 1)
    assert log.delete_due_segments() == 0 and names(log, DELETED_SUFFIX) == gone
    time.sleep(1)
    assert log.delete_due_segments() == deleted
    assert names(log, DELETED_SUFFIX) == [] and log.pending_deletes == []
    check_consistent(log)
    log.close()


def test_a_delay_of_zero_deletes_at_once_and_the_topic_level_key_is_read(tmp_path):
    config = LogConfig.from_topic_properties({"file.delete.delay.ms": "0", "segment.bytes": "1000",
                                              "retention.bytes": "1000"})
    assert config.file_delete_delay_ms == 0
    log = Log.open(tmp_path / "t-0", config, time=MockTime(start_ms=START_MS))
    fill(log, 12)
    assert log.delete_old_segments() >= 1
    assert names(log, DELETED_SUFFIX) == [] and log.pending_deletes == []
    log.close()


def test_truncation_renames_and_a_new_segment_of_the_same_name_is_no_clash(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_log(tmp_path / "t-0", time, segment_bytes=1000)
    fill(log, 12)
    doomed = log.segments[2:]
    assert log.truncate_to(doomed[0].base_offset - 1)  # inside segment 1, which stays
    assert names(log, ".log.deleted") == sorted(f"{s.base_offset:020d}.log.deleted" for s in doomed)
    log.truncate_fully_and_start_at(0)  # the new segment 0 takes the name the old one had
    assert names(log, ".log") == ["00000000000000000000.log"]
    assert "00000000000000000000.log.deleted" in names(log, DELETED_SUFFIX)
    fill(log, 2)
    log.truncate_fully_and_start_at(0)  # and again: the older 0.log.deleted is replaced, not kept twice
    assert [s.log_path.name for s in log.pending_deletes].count("00000000000000000000.log.deleted") == 1
    time.sleep(DELAY_MS)
    log.delete_due_segments()
    assert names(log, DELETED_SUFFIX) == []
    fill(log, 1)
    check_consistent(log)
    log.close()


def test_a_compaction_swap_leaves_the_old_segments_readable_until_the_delay(tmp_path):
    """The cleaner swapped segments out while a reader (a fetch, another cleaning pass) held
    them: that reader goes on reading them, from their .deleted files."""
    time = MockTime(start_ms=START_MS)
    log = Log.open(tmp_path / "t-0", LogConfig(cleanup_policy="compact", segment_bytes=600), time=time)
    for i in range(40):
        log.append_as_leader(build_batch([Record(timestamp=START_MS, key=b"k%d" % (i % 3), value=b"v" * 40)]), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    held = log.segments[:-1]
    sizes = [s.size for s in held]
    for segment in held:
        segment.close_handles()  # as the open-files budget may do while a reader waits
    stats = LogCleaner(time, lambda: {("t", 0): log}).clean(log)
    assert stats is not None and stats.records_kept == 3
    assert len(log.pending_deletes) == len(held)
    for segment, size in zip(held, sizes):
        found = segment.read(segment.base_offset, 1 << 20)
        assert found is not None and len(found[1]) == size
    time.sleep(DELAY_MS)
    assert log.delete_due_segments() == len(held)
    assert names(log, DELETED_SUFFIX) == []
    log.close()


def test_close_deletes_what_waits_and_a_restart_removes_leftovers(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_log(tmp_path / "t-0", time, segment_bytes=1000, retention_bytes=1000)
    fill(log, 12)
    log.delete_old_segments()
    assert names(log, DELETED_SUFFIX)
    log.close()
    assert names(log, DELETED_SUFFIX) == []
    (tmp_path / "t-0" / "00000000000000000000.log.deleted").write_bytes(b"x")  # a crash left one
    reopened = open_log(tmp_path / "t-0", time, segment_bytes=1000)
    assert names(reopened, DELETED_SUFFIX) == []
    reopened.close()
