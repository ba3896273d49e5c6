"""kbroker.log.writeback.bytes / kbroker.log.page.cache.retain.bytes (storage/file_records.py,
"Writeback"): the active segment starts the writeback of every step appended, and drops the page
cache of what lies more than the retained bytes behind its end; on by default in the broker (1 MiB),
off in storage's own LogConfig; a failing call turns it off for the segment, a platform without it
for every segment, the append stands; truncation and rolls start it over."""

from __future__ import annotations

import os
import subprocess

import pytest
from storage_helpers import batch, check_consistent, open_log

from broker.config import KafkaConfig
from protocol.clock import MockTime
from storage import Log, LogConfig, file_records, fileio
from storage.file_records import PAGE_SIZE, FileRecords

STEP = 64 << 10
RETAIN = 128 << 10
CHUNK = bytes(range(256)) * 64  # 16 KiB


@pytest.fixture(autouse=True)
def available(monkeypatch):
    """Each test starts on a machine where the writeback works (a test may find it unavailable),
    before any job ran."""
    monkeypatch.setattr(file_records, "_writeback_unavailable", False)
    monkeypatch.setattr(fileio.writeback_thread, "worked", False)


@pytest.fixture
def calls(monkeypatch):
    """The writeback and drop calls made (offset, length), still made for real after being noted."""
    seen: dict[str, list[tuple[int, int]]] = {"write": [], "drop": []}
    real_write, real_drop = fileio.sync_file_range_write, fileio.drop_cached

    def write(fd, offset, length):
        seen["write"].append((offset, length))
        real_write(fd, offset, length)

    def drop(fd, offset, length):
        seen["drop"].append((offset, length))
        real_drop(fd, offset, length)
    monkeypatch.setattr(fileio, "sync_file_range_write", write)
    monkeypatch.setattr(fileio, "drop_cached", drop)
    yield seen
    fileio.writeback_thread.barrier()


def appended(records: FileRecords, data: bytes) -> None:
    """Append, then wait for the writeback thread to have run what the append queued."""
    records.append(data)
    fileio.writeback_thread.barrier()


def test_every_step_appended_starts_its_writeback_up_to_the_retained_tail_and_drops_what_is_behind(tmp_path, calls):
    records = FileRecords(tmp_path / "0.log")
    records.write_back_every(STEP, RETAIN)
    for _ in range(64):
        appended(records, CHUNK)
        # the writeback started up to the retained tail, never into it, at most a step behind
        written = sum(length for _, length in calls["write"])
        assert written <= records.size - RETAIN or not written
        assert records.size - RETAIN - written < STEP + PAGE_SIZE
        for offset, length in calls["drop"]:  # never into the retained tail
            assert offset % PAGE_SIZE == 0 and (offset + length) % PAGE_SIZE == 0
            assert offset + length <= records.size - RETAIN
    # the writebacks cover the data from the start, each range once, in order
    position = 0
    for offset, length in calls["write"]:
        assert offset == position and length > 0
        position += length
    # all that was written back was dropped
    assert calls["drop"] and max(o + n for o, n in calls["drop"]) == sum(n for _, n in calls["write"])
    assert records.slice(0, records.size).tobytes() == CHUNK * 64  # the data is all there
    records.close()


def test_the_dropped_pages_leave_the_page_cache(tmp_path):
    """For real: pages behind the retained tail, written back (fsync here), leave the page cache
    at the next step (``fincore``: resident pages)."""
    path = tmp_path / "0.log"
    records = FileRecords(path)
    records.write_back_every(STEP, RETAIN)
    for _ in range(256):  # 4 MiB
        records.append(CHUNK)
    fd = records.dup_fd()
    os.fsync(fd)  # all clean now
    os.close(fd)
    for _ in range(STEP // len(CHUNK)):  # one more step: its drop finds them clean
        appended(records, CHUNK)
    resident = int(subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", str(path)],
                                  capture_output=True, text=True, check=True).stdout)
    assert resident <= RETAIN + 3 * STEP, resident  # of 4 MiB + a step
    records.close()


def test_off_by_default_and_when_step_is_zero(tmp_path, calls):
    records = FileRecords(tmp_path / "0.log")
    for _ in range(16):
        records.append(CHUNK)
    records.write_back_every(0, RETAIN)
    for _ in range(16):
        appended(records, CHUNK)
    assert calls == {"write": [], "drop": []}
    records.close()


def test_without_retain_nothing_is_dropped(tmp_path, calls):
    records = FileRecords(tmp_path / "0.log")
    records.write_back_every(STEP)
    for _ in range(32):
        appended(records, CHUNK)
        written = sum(length for _, length in calls["write"])
        assert records.size - written < STEP
    assert not calls["drop"]
    position = 0  # all of it, up to the end, each range once
    for offset, length in calls["write"]:
        assert offset == position and length >= STEP
        position += length
    assert position == records.size == 32 * len(CHUNK)
    records.close()


def test_without_retain_only_whole_pages_are_written_back(tmp_path, calls):
    """A partial last page is left for a later step: written back now, it would be written again
    once the next append fills it."""
    records = FileRecords(tmp_path / "0.log")
    records.write_back_every(STEP)
    odd = CHUNK + b"x" * 1000
    for _ in range(16):
        appended(records, odd)
    assert calls["write"]
    position = 0
    for offset, length in calls["write"]:
        assert offset == position and (offset + length) % PAGE_SIZE == 0
        position += length
    assert records.size - PAGE_SIZE < position < records.size  # all whole pages but the last, partial one
    records.close()


def test_a_failing_writeback_turns_it_off_for_the_segment_and_the_append_stands(tmp_path, monkeypatch, caplog):
    def fail(fd, offset, length):
        raise OSError(5, "sync_file_range: Input/output error")
    monkeypatch.setattr(fileio, "sync_file_range_write", fail)
    records = FileRecords(tmp_path / "0.log")
    records.write_back_every(STEP, RETAIN)
    submitted = []
    real_submit = fileio.writeback_thread.submit
    monkeypatch.setattr(fileio.writeback_thread, "submit", lambda *job: (submitted.append(job), real_submit(*job)))
    for _ in range(32):
        appended(records, CHUNK)
    assert records.size == 32 * len(CHUNK)
    assert len([r for r in caplog.records if "writeback" in r.getMessage()]) == 1
    assert len(submitted) == 1  # the failure was seen at the next step, and nothing more was queued
    records.close()
    # a failure of one file's: the next segment tries again
    other = FileRecords(tmp_path / "1.log")
    other.write_back_every(STEP, RETAIN)
    appended(other, CHUNK * 16)  # (a step past the retained tail)
    assert len(submitted) == 2
    other.close()


@pytest.mark.parametrize("code", [38, 95, 1])  # ENOSYS, EOPNOTSUPP (no such C function), EPERM (seccomp)
def test_a_platform_without_it_turns_it_off_for_every_segment_said_once(tmp_path, monkeypatch, caplog, code):
    def fail(fd, offset, length):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(fileio, "sync_file_range_write", fail)
    submitted = []
    real_submit = fileio.writeback_thread.submit
    monkeypatch.setattr(fileio.writeback_thread, "submit", lambda *job: (submitted.append(job), real_submit(*job)))
    for name in ("0.log", "1.log", "2.log"):
        records = FileRecords(tmp_path / name)
        records.write_back_every(STEP, RETAIN)
        for _ in range(32):
            appended(records, CHUNK)
        assert records.size == 32 * len(CHUNK)
        records.close()
    assert len(submitted) == 1  # the first segment's first step found it unavailable; none tried after
    assert len([r for r in caplog.records if "writeback" in r.getMessage()]) == 1


def test_truncation_starts_the_writeback_over_from_the_new_end(tmp_path, calls):
    records = FileRecords(tmp_path / "0.log")
    records.write_back_every(STEP, RETAIN)
    for _ in range(32):
        records.append(CHUNK)
    records.truncate_to(4 * len(CHUNK))
    fileio.writeback_thread.barrier()
    calls["write"].clear()
    for _ in range(16):
        appended(records, CHUNK)
    assert calls["write"][0][0] == 4 * len(CHUNK)  # from the new end, not from where it was
    records.close()


def test_the_log_writes_back_its_active_segment_only_and_a_roll_moves_it(tmp_path, calls):
    log = open_log(tmp_path / "t-0", segment_bytes=1 << 20, writeback_bytes=STEP, cache_retain_bytes=RETAIN)
    for _ in range(40):
        log.append_as_leader(batch(20, value_size=1000), leader_epoch=0)
    fileio.writeback_thread.barrier()
    first = log.active_segment
    assert calls["write"] and first.writeback == (STEP, RETAIN)
    log.roll()
    assert first.writeback == (0, -1) and log.active_segment.writeback == (STEP, RETAIN)
    fileio.writeback_thread.barrier()
    calls["write"].clear()
    for _ in range(8):
        log.append_as_leader(batch(20, value_size=1000), leader_epoch=0)
    fileio.writeback_thread.barrier()
    assert calls["write"] and calls["write"][0][0] == 0  # the new segment's file, from its start
    check_consistent(log)
    log.close()
    log = open_log(tmp_path / "t-0", segment_bytes=1 << 20, writeback_bytes=STEP)  # a restart: the active again
    assert log.active_segment.writeback == (STEP, -1)
    log.close()


def test_without_the_setting_the_log_leaves_it_to_the_kernel(tmp_path, calls):
    log = open_log(tmp_path / "t-0", segment_bytes=1 << 20)
    for _ in range(40):
        log.append_as_leader(batch(20, value_size=1000), leader_epoch=0)
    fileio.writeback_thread.barrier()
    assert calls == {"write": [], "drop": []}
    log.close()


def test_the_broker_keys_reach_the_log_config_and_are_no_topic_configs():
    assert LogConfig.from_topic_properties(KafkaConfig().log_config_defaults()).writeback_bytes == 1 << 20
    assert LogConfig().writeback_bytes == 0  # storage's own default: the broker's config turns it on
    off = KafkaConfig({"kbroker.log.writeback.bytes": "0"})
    assert LogConfig.from_topic_properties(off.log_config_defaults()).writeback_bytes == 0
    config = KafkaConfig({"kbroker.log.writeback.bytes": "1048576", "kbroker.log.page.cache.retain.bytes": "8388608"})
    log_config = LogConfig.from_topic_properties(config.log_config_defaults())
    assert (log_config.writeback_bytes, log_config.cache_retain_bytes) == (1 << 20, 8 << 20)
    assert "writeback.bytes" not in log_config.to_topic_properties()
    assert "writeback.bytes" not in config.topic_defaults()
    with pytest.raises(ValueError):
        KafkaConfig({"kbroker.log.page.cache.retain.bytes": "-2"})


def resident_bytes(path) -> int:
    return int(subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", str(path)],
                              capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("how", ["truncated", "reopened"])
def test_after_a_truncation_or_a_restart_the_retained_tail_is_kept(tmp_path, calls, how):
    path = tmp_path / "0.log"
    records = FileRecords(path)
    records.write_back_every(STEP, RETAIN)
    for _ in range(64):
        appended(records, CHUNK)
    if how == "truncated":
        records.truncate_to(records.size - PAGE_SIZE)
    else:
        records.close()
        records = FileRecords(path)
        records.write_back_every(STEP, RETAIN)
    calls["drop"].clear()
    for _ in range(STEP // len(CHUNK)):  # one step
        appended(records, CHUNK)
    assert calls["drop"]
    for offset, length in calls["drop"]:
        assert offset + length <= records.size - RETAIN
    records.close()


def test_a_rolled_segments_tail_is_dropped_once_the_next_holds_the_retained_bytes(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=8 << 20, writeback_bytes=STEP, cache_retain_bytes=RETAIN)
    for _ in range(40):
        log.append_as_leader(batch(20, value_size=1000), leader_epoch=0)
    old = log.active_segment.log_path
    log.roll()
    fileio.writeback_thread.barrier()
    assert resident_bytes(old) >= RETAIN  # its tail is kept while readers at the end may read it
    while log.active_segment.size < RETAIN + 2 * STEP:
        log.append_as_leader(batch(20, value_size=1000), leader_epoch=0)
    fileio.writeback_thread.barrier()
    assert resident_bytes(old) == 0
    assert resident_bytes(log.active_segment.log_path) <= RETAIN + 3 * STEP
    log.close()


def test_while_a_job_waits_no_other_is_queued_and_the_next_covers_what_was_skipped(tmp_path, monkeypatch):
    """A slow disk: the thread has not run the first job; the steps after it queue nothing (no
    pile of jobs), and the next job after it covers all that was appended. A queued job names
    the file by its path: it holds no descriptor."""
    jobs = []

    def submit(state, file, write, drop):
        assert file == str(tmp_path / "0.log")
        state.pending = True
        jobs.append((write, drop))
    monkeypatch.setattr(fileio.writeback_thread, "submit", submit)
    records = FileRecords(tmp_path / "0.log")
    records.write_back_every(STEP, RETAIN)
    for _ in range(64):
        records.append(CHUNK)
    assert len(jobs) == 1
    records._writeback_job.pending = False  # it ran
    for _ in range(STEP // len(CHUNK)):
        records.append(CHUNK)
    assert len(jobs) == 2
    (first, _), (second, _) = jobs
    assert second[0] == first[0] + first[1]  # from where the first stopped ...
    assert second[0] + second[1] == (records.size - RETAIN) & ~(PAGE_SIZE - 1)  # ... to the retained tail
    records.close()


def test_a_writeback_thread_that_cannot_start_leaves_the_append_standing(tmp_path, monkeypatch, caplog):
    import threading

    def refuse(self):
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(fileio, "writeback_thread", fileio.WritebackThread())
    monkeypatch.setattr(threading.Thread, "start", refuse)
    for name in ("0.log", "1.log"):  # said once, and the next segment does not try again
        records = FileRecords(tmp_path / name)
        records.write_back_every(STEP, RETAIN)
        for _ in range(16):
            records.append(CHUNK)
        assert records.size == 16 * len(CHUNK)
        assert records._writeback_step == 0
        records.close()
    assert len([r for r in caplog.records if "writeback" in r.getMessage()]) == 1


def test_once_found_unavailable_active_segments_stop_too(tmp_path, monkeypatch):
    """Segments already writing back when another finds it unavailable queue nothing more."""
    submitted = []
    real_submit = fileio.writeback_thread.submit
    monkeypatch.setattr(fileio.writeback_thread, "submit", lambda *job: (submitted.append(job), real_submit(*job)))
    active = FileRecords(tmp_path / "0.log")
    active.write_back_every(STEP)
    appended(active, CHUNK * 4)
    assert len(submitted) == 1
    monkeypatch.setattr(file_records, "_writeback_unavailable", True)  # (another segment found out)
    for _ in range(8):
        appended(active, CHUNK * 4)
    assert len(submitted) == 1 and active._writeback_step == 0
    active.close()


def test_after_a_call_worked_an_error_is_the_files_own(tmp_path, monkeypatch, caplog):
    """Once a job succeeded, EPERM (say, a network file system's) turns off that segment only."""
    records = FileRecords(tmp_path / "0.log")
    records.write_back_every(STEP)
    appended(records, CHUNK * 8)
    assert fileio.writeback_thread.worked

    def fail(fd, offset, length):
        raise OSError(1, "Operation not permitted")
    monkeypatch.setattr(fileio, "sync_file_range_write", fail)
    for _ in range(4):
        appended(records, CHUNK * 8)
    assert not file_records._writeback_unavailable and records._writeback_step == 0
    other = FileRecords(tmp_path / "1.log")
    other.write_back_every(STEP)
    assert other._writeback_step == STEP
    records.close()
    other.close()


def test_a_log_from_the_brokers_defaults_writes_back_its_appends(tmp_path, calls):
    """KafkaConfig()'s defaults reach the log: a broker's partition starts its writeback every MiB."""
    config = LogConfig.from_topic_properties(KafkaConfig().log_config_defaults())
    log = Log.open(tmp_path / "t-0", config, time=MockTime())
    for _ in range(40):
        log.append_as_leader(batch(20, value_size=3000), leader_epoch=0)  # ~2.4 MB
    fileio.writeback_thread.barrier()
    assert calls["write"] and calls["write"][0][0] == 0 and sum(n for _, n in calls["write"]) >= 1 << 20
    log.close()
