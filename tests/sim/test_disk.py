"""sim/disk.py: the page cache is the real files; fsync makes bytes durable; a power loss
keeps only durable bytes plus, maybe, a torn prefix of the last write; storage/ on top of it."""

from __future__ import annotations

import errno
import os
import random
from types import SimpleNamespace

import pytest

from protocol.clock import MockTime
from protocol.records import Record, build_batch
from sim.disk import DiskFaults, SimDisk
from storage import Log, LogConfig, fileio
from storage.checkpoint import write_atomically


@pytest.fixture
def disk(tmp_path):
    (tmp_path / "m").mkdir()
    d = SimDisk(tmp_path, random.Random(1), SimpleNamespace(_now=0.0))
    d.install()
    yield d
    d.uninstall()
    d.close_all()


def test_an_fsync_makes_bytes_durable_and_a_power_loss_keeps_them_plus_a_torn_prefix(disk, tmp_path):
    path = tmp_path / "m" / "f"
    outcomes = set()
    for seed in range(40):
        disk.rng = random.Random(seed)
        fd = fileio.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        fileio.pwrite(fd, b"durable-", 0)
        fileio.fsync(fd)
        fileio.pwrite(fd, b"lost-1", 8)
        fileio.pwrite(fd, b"lost-2", 14)
        lost = disk.crash("m", power_loss=True)
        data = path.read_bytes()
        assert data.startswith(b"durable-")
        tail = data[8:]
        # nothing of the first unsynced write but what the torn last write overwrote: zeros, then a prefix of it
        assert tail == b"" or (tail[:6] == bytes(6) and b"lost-2".startswith(tail[6:]))
        assert lost == ["f"]
        outcomes.add(len(data))
    assert len(outcomes) > 2  # the torn prefix's length varies with the PRNG


def test_overwritten_durable_bytes_come_back_and_a_kill_keeps_everything(disk, tmp_path):
    seen = set()
    for seed in range(20):
        disk.rng = random.Random(seed)
        path = tmp_path / "m" / f"g{seed}"
        fd = fileio.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fileio.pwrite(fd, b"0123456789", 0)
        fileio.fsync(fd)
        fileio.pwrite(fd, b"xx", 3)
        fileio.ftruncate(fd, 6)
        assert disk.crash("m", power_loss=False) == []  # a killed process: the page cache stays
        assert path.read_bytes() == b"012xx5"
        assert disk.crash("m", power_loss=True) == [path.name]
        seen.add(path.read_bytes())
    # the durable bytes back, and maybe a torn prefix of the last write ("xx" at 3) over them
    assert seen == {b"0123456789", b"012x456789", b"012xx56789"}


def test_an_unsynced_atomic_replace_can_leave_an_empty_file(disk, tmp_path):
    path = tmp_path / "m" / "checkpoint"
    write_atomically(path, b"old", sync=True)
    write_atomically(path, b"new contents", sync=False)
    assert path.read_bytes() == b"new contents"
    disk.rng = random.Random(3)
    disk.crash("m", power_loss=True)
    assert b"new contents".startswith(path.read_bytes())  # renamed durably, its bytes not: empty or torn


def test_faults(disk, tmp_path):
    path = tmp_path / "m" / "h"
    fd = fileio.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    disk.faults["m"] = DiskFaults(enospc=True)
    with pytest.raises(OSError) as exc:
        fileio.pwrite(fd, b"x", 0)
    assert exc.value.errno == errno.ENOSPC
    disk.faults["m"] = DiskFaults(eio=1.0)
    with pytest.raises(OSError) as exc:
        fileio.fsync(fd)
    assert exc.value.errno == errno.EIO
    disk.faults.clear()
    assert fileio.pwrite(fd, b"x", 0) == 1


def batch(i: int) -> bytes:
    return build_batch([Record(value=f"v{i}".encode(), timestamp=1_700_000_000_000)], base_offset=0)


def test_a_log_recovers_its_flushed_records_after_a_power_loss(disk, tmp_path):
    """storage/ on the simulated disk: a log flushed at 5 records, 5 more appended, the power
    lost: recovery keeps at least the flushed 5 and a valid prefix of the rest."""
    time = MockTime()
    config = LogConfig(segment_bytes=1 << 20)
    for seed in range(10):
        disk.rng = random.Random(seed)
        d = tmp_path / "m" / f"t-{seed}"
        log = Log.open(d, config, time=time)
        for i in range(5):
            log.append_as_leader(batch(i), 0)
        log.flush()
        for i in range(5, 10):
            log.append_as_leader(batch(i), 0)
        disk.crash("m", power_loss=True)
        recovered = Log.open(d, config, time=time, recovery_point=5)
        assert 5 <= recovered.log_end_offset <= 10
        recovered.close()


def test_a_descriptor_a_crash_closed_is_refused_not_passed_on_to_whatever_file_reused_its_number(disk, tmp_path):
    """The crashed process's code may still run after its crash (a coroutine finalized later):
    its descriptors are refused with EBADF, with no system call on a number that another
    file, opened since, may hold."""
    fd = fileio.open(tmp_path / "m" / "a", os.O_RDWR | os.O_CREAT, 0o644)
    disk.crash("m", power_loss=False)
    other = os.open(tmp_path / "b", os.O_RDWR | os.O_CREAT, 0o644)  # (the lowest number free: fd's)
    try:
        assert other == fd
        for call in (lambda: fileio.close(fd), lambda: fileio.fsync(fd), lambda: fileio.pwrite(fd, b"x", 0),
                     lambda: fileio.write(fd, b"x"), lambda: fileio.ftruncate(fd, 0), lambda: fileio.dup(fd)):
            with pytest.raises(OSError) as raised:
                call()
            assert raised.value.errno == errno.EBADF
        os.fstat(other)  # still open
        assert (tmp_path / "b").read_bytes() == b""
    finally:
        os.close(other)
    fd = fileio.open(tmp_path / "m" / "a", os.O_RDWR, 0o644)
    fileio.close(fd)
    with pytest.raises(OSError) as raised:
        fileio.close(fd)  # closed twice
    assert raised.value.errno == errno.EBADF


def test_a_txn_index_cut_by_a_truncation_keeps_its_durable_entries_through_a_power_loss(disk, tmp_path):
    """A truncation cuts a .txnindex file in place: rewritten and renamed into place unsynced,
    a power loss left it empty (a rename is durable here at once, its contents are not), and
    the aborted transactions below the recovery point, which recovery does not rebuild (it
    replays from the snapshot at or below the recovery point), were gone for good."""
    from storage.txn_index import AbortedTxn

    def txn(pid: int, seq: int) -> bytes:
        return build_batch([Record(timestamp=1_700_000_000_000, value=b"v")], producer_id=pid, producer_epoch=0,
                           base_sequence=seq, transactional=True)

    time = MockTime()
    d = tmp_path / "m" / "t-0"
    log = Log.open(d, LogConfig(), time=time)
    log.append_as_leader(txn(1, 0), 0)                # 0
    log.append_end_txn_marker(1, 0, 0, False, 0)      # 1: 1 aborts
    log.flush()
    log.close()                                       # clean: the snapshot at 2 is where a replay starts
    log = Log.open(d, LogConfig(), time=time)
    log.append_as_leader(txn(2, 0), 0)                # 2
    log.append_end_txn_marker(2, 0, 0, False, 0)      # 3: 2 aborts
    log.truncate_to(3)                                # (a follower's truncation) its entry goes
    assert log.txn_index.entries == [AbortedTxn(1, 0, 1, 2)]
    disk.crash("m", power_loss=True)
    recovered = Log.open(d, LogConfig(), time=time, recovery_point=2, had_clean_shutdown=False)
    assert recovered.producer_state.snapshot_offsets == [2]
    assert recovered.txn_index.entries == [AbortedTxn(1, 0, 1, 2)]
    recovered.close()
