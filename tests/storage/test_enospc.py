"""A full disk during append: KAFKA_STORAGE_ERROR for that partition, the log stays
consistent and readable, and appends work again once there is room.

The real thing is a small tmpfs (we run as root); where mounting is not possible the
same test injects OSError(ENOSPC) at the write call instead.
"""

from __future__ import annotations

import errno
import os
import subprocess

import pytest
from storage_helpers import batch, check_consistent, open_log

from protocol.clock import MockTime
from protocol.errors import ErrorCode, KafkaStorageError
from storage import Log, LogConfig
from storage import file_records
from storage import fileio

CONFIG = dict(segment_index_bytes=64 * 1024, index_interval_bytes=4096)


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs, or None when mounting is not possible here."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                             capture_output=True).returncode == 0
    yield mnt if mounted else None
    if mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill_until_storage_error(log, value_size):
    appended = 0
    with pytest.raises(KafkaStorageError) as exc:
        for _ in range(10_000):
            appended += log.append_as_leader(batch(4, value_size=value_size), 0).record_count
    assert exc.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    return appended


def test_enospc_on_a_real_small_filesystem(small_disk, tmp_path, monkeypatch):
    if small_disk is None:
        calls = {"n": 0}
        real = os.pwrite

        def failing_pwrite(fd, data, offset):
            calls["n"] += 1
            if calls["n"] > 20:
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            return real(fd, data, offset)
        monkeypatch.setattr(file_records.os, "pwrite", failing_pwrite)
        where = tmp_path / "disk"
    else:
        where = small_disk
    (where / "ballast").write_bytes(bytes(128 * 1024))
    log = open_log(where / "t-0", **CONFIG)
    appended = fill_until_storage_error(log, value_size=3000)
    assert appended > 0 and log.log_end_offset == appended
    check_consistent(log)
    assert sum(len(log.read(o, 1 << 20).records) > 0 for o in range(0, appended, 4)) == appended // 4
    if small_disk is None:
        monkeypatch.undo()
    (where / "ballast").unlink()
    assert log.append_as_leader(batch(4, value_size=3000), 0).first_offset == appended
    del log
    recovered = Log.open(where / "t-0", LogConfig(**CONFIG), time=MockTime(), had_clean_shutdown=False)
    assert recovered.log_end_offset == appended + 4 and not recovered.recovery_report.bytes_truncated
    check_consistent(recovered)
    recovered.close()


def test_failed_write_is_undone(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", index_interval_bytes=0)
    for _ in range(3):
        log.append_as_leader(batch(2), 0)
    before = (log.log_end_offset, log.size_in_bytes(), log.active_segment.offset_index.entries)
    real, failed = os.pwrite, []

    def fail_once(fd, data, offset):
        if not failed:
            failed.append(offset)
            real(fd, bytes(data)[: max(1, len(data) // 2)], offset)
            raise OSError(errno.EIO, "I/O error (injected)")
        return real(fd, data, offset)
    monkeypatch.setattr(fileio, "pwrite", fail_once)
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(batch(2) + batch(3), 0)
    monkeypatch.undo()
    assert (log.log_end_offset, log.size_in_bytes(), log.active_segment.offset_index.entries) == before
    assert os.path.getsize(log.active_segment.log_path) == log.active_segment.size
    check_consistent(log)
    assert log.append_as_leader(batch(1), 0).first_offset == before[0]
    check_consistent(log)


def fail_time_index_writes(monkeypatch) -> list[str]:
    """Every pwrite to a .timeindex fails with ENOSPC; returns the names of the files written meanwhile."""
    real, written = os.pwrite, []

    def pwrite(fd, data, offset):
        name = os.readlink(f"/proc/self/fd/{fd}")
        if name.endswith(".timeindex"):
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        written.append(name)
        return real(fd, data, offset)
    monkeypatch.setattr(fileio, "pwrite", pwrite)
    return written


def test_a_full_disk_when_index_entries_are_persisted(tmp_path, monkeypatch):
    """Index entries are written behind (storage/index.py): a full disk shows when they are
    persisted, at a flush or a roll. That flush or append fails with KAFKA_STORAGE_ERROR, the
    entries stay in memory and the log as it was; once there is room everything reaches the files."""
    log = open_log(tmp_path / "t-0", index_interval_bytes=0, segment_bytes=1000)
    while log.size_in_bytes() < 600:
        log.append_as_leader(batch(2), 0)
    active = log.active_segment
    before = (log.log_end_offset, log.size_in_bytes(), active.offset_index.entries, active.time_index.entries)
    recovery_point = log.recovery_point
    written = fail_time_index_writes(monkeypatch)
    with pytest.raises(KafkaStorageError):
        log.flush()
    assert log.recovery_point == recovery_point
    with pytest.raises(KafkaStorageError):  # this one must roll: the old segment's indexes are persisted first
        log.append_as_leader(batch(2, value_size=300), 0)
    assert not [name for name in written if name.endswith(".log")]  # nothing reached the .log
    monkeypatch.undo()
    assert log.active_segment is active and active.active and log.num_segments == 1
    assert (log.log_end_offset, log.size_in_bytes(), active.offset_index.entries) == before[:3]
    assert active.time_index.entries >= before[3]  # perhaps the final entry of a roll that failed
    check_consistent(log)
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert os.path.getsize(active.time_index_path) == active.time_index.entries * 12
    assert log.append_as_leader(batch(2, value_size=300), 0).first_offset == before[0]
    assert log.num_segments == 2
    check_consistent(log)
    log.close()
    reopened = open_log(tmp_path / "t-0", index_interval_bytes=0, segment_bytes=1000)
    assert not reopened.recovery_report.needed_recovery and reopened.log_end_offset == before[0] + 2
    check_consistent(reopened)
    reopened.close()
