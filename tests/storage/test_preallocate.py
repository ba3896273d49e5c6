"""log.preallocate: a new active segment's blocks are reserved up to segment.bytes (fallocate
with FALLOC_FL_KEEP_SIZE, the file's size unchanged), given back when it rolls and when the log
closes; a restart reserves the active segment's again; the data reads back the same."""

from __future__ import annotations

import os

import pytest
from storage_helpers import batch, check_consistent, open_log

from broker.config import KafkaConfig
from storage import LogConfig, fileio

SEGMENT = 1 << 20


def allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def log_files(log):
    return sorted(p for p in log.dir.iterdir() if p.suffix == ".log")


def test_the_active_segment_reserves_segment_bytes_and_keeps_its_size(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=SEGMENT, preallocate=True)
    log.append_as_leader(batch(10), leader_epoch=0)
    (path,) = log_files(log)
    assert os.stat(path).st_size == log.active_segment.size  # nothing past the data is visible
    assert allocated(path) >= SEGMENT
    log.close()


def test_without_preallocate_nothing_is_reserved(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=SEGMENT)
    log.append_as_leader(batch(10), leader_epoch=0)
    (path,) = log_files(log)
    assert allocated(path) < 64 << 10
    log.close()


def test_a_roll_gives_the_old_segment_back_and_reserves_the_new_one(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=SEGMENT, preallocate=True)
    log.append_as_leader(batch(10), leader_epoch=0)
    log.roll()
    log.append_as_leader(batch(10), leader_epoch=0)
    old, new = log_files(log)
    assert os.stat(old).st_size < 4096 and allocated(old) <= 8192  # no more than its data's pages
    assert allocated(new) >= SEGMENT
    log.close()
    assert allocated(new) >= SEGMENT  # a closing log keeps it (a restart reserves it again) ...
    log = open_log(tmp_path / "t-0", segment_bytes=SEGMENT, preallocate=True)
    log.append_as_leader(batch(10), leader_epoch=0)
    log.roll()  # ... and its roll gives it back
    assert allocated(new) <= 8192
    log.close()


def test_a_restart_reserves_the_active_segment_again_and_reads_the_same(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=SEGMENT, preallocate=True)
    for _ in range(5):
        log.append_as_leader(batch(10), leader_epoch=0)
    end = log.log_end_offset
    log.close()
    log = open_log(tmp_path / "t-0", segment_bytes=SEGMENT, preallocate=True)
    assert log.log_end_offset == end
    log.append_as_leader(batch(10), leader_epoch=0)
    (path,) = log_files(log)
    assert allocated(path) >= SEGMENT
    check_consistent(log)
    log.close()


def test_a_file_system_that_cannot_reserve_only_loses_the_reservation(tmp_path, monkeypatch, caplog):
    calls = []

    def refuse(fd, offset, length):
        calls.append(offset)
        raise OSError(95, "Operation not supported")
    monkeypatch.setattr(fileio, "fallocate", refuse)
    log = open_log(tmp_path / "t-0", segment_bytes=SEGMENT, preallocate=True)
    for _ in range(3):
        log.append_as_leader(batch(10), leader_epoch=0)
    assert log.log_end_offset == 30
    assert len(calls) == 1  # tried once a segment, not on every append
    assert len([r for r in caplog.records if "log.preallocate" in r.getMessage()]) == 1
    log.close()


def test_the_config_key_and_the_topic_config():
    assert LogConfig.from_topic_properties({"preallocate": "TRUE"}).preallocate is True
    assert LogConfig().to_topic_properties()["preallocate"] == "false"
    with pytest.raises(ValueError, match="preallocate"):
        LogConfig.from_topic_properties({"preallocate": "yes"})
    assert KafkaConfig().topic_defaults()["preallocate"] == "false"
    assert KafkaConfig({"log.preallocate": "true"}).topic_defaults()["preallocate"] == "true"


def test_a_reservation_that_cannot_be_given_back_does_not_fail_the_roll(tmp_path, monkeypatch, caplog):
    log = open_log(tmp_path / "t-0", segment_bytes=SEGMENT, preallocate=True)
    log.append_as_leader(batch(10), leader_epoch=0)

    def broken(fd, length):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(fileio, "ftruncate", broken)
    log.roll()
    log.append_as_leader(batch(10), leader_epoch=0)
    assert log.log_end_offset == 20 and len(log_files(log)) == 2
    assert any("cannot give back" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    log.close()


def test_a_truncation_reserves_again(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=SEGMENT, preallocate=True)
    for _ in range(3):
        log.append_as_leader(batch(10), leader_epoch=0)
    log.truncate_to(10)  # inside the active segment: the ftruncate freed the reservation
    log.append_as_leader(batch(10), leader_epoch=0)
    (path,) = log_files(log)
    assert allocated(path) >= SEGMENT
    log.roll()
    log.append_as_leader(batch(10), leader_epoch=0)
    log.truncate_to(15)  # drops the new segment: the older one is active again
    log.append_as_leader(batch(10), leader_epoch=0)
    (path,) = log_files(log)
    assert allocated(path) >= SEGMENT
    check_consistent(log)
    log.close()
