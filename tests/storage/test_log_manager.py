"""LogManager: create/load/delete partition logs across log dirs, checkpoints, the
clean-shutdown marker, and the retention/flush/checkpoint passes."""

from __future__ import annotations

import logging
import os

from storage_helpers import batch, check_consistent, record_fsyncs

from protocol.clock import MockTime
from storage import LogConfig, LogManager, OffsetCheckpointFile
from storage.log_manager import CLEAN_SHUTDOWN_FILE
from storage import fileio

CONFIG = LogConfig(segment_bytes=1000, index_interval_bytes=100, segment_index_bytes=1024)


def fill(log, n):
    for _ in range(n):
        log.append_as_leader(batch(2, value_size=100), 0)


def test_a_new_partition_goes_to_the_dir_holding_fewest_counting_loads_and_deletes(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, CONFIG, time=MockTime())
    manager.startup()
    logs = [manager.get_or_create_log("t", p) for p in range(4)]  # a, b, a, b
    for p in (0, 2):  # both of a's
        manager.delete_log("t", p)
    assert manager.get_or_create_log("t", 4).dir.parent.name == "a"
    assert manager.get_or_create_log("t", 5).dir.parent.name == "a"
    manager.get_or_create_log("t", 6)
    manager.shutdown()

    # Reloaded: a holds 3 (4, 5 and one of 6/7), b 2 (1, 3) plus 6 -> the next goes where fewest.
    again = LogManager(dirs, CONFIG, time=MockTime())
    again.startup()
    held = {d.name: sum(1 for tp in again.all_logs() if again.get_log(*tp).dir.parent == d) for d in dirs}
    fewest = min(held, key=lambda name: (held[name], name))
    assert again.get_or_create_log("t", 9).dir.parent.name == fewest
    assert logs  # keep the first manager's logs referenced until shut down


def test_create_spreads_partitions_and_shutdown_writes_everything(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, CONFIG, time=MockTime())
    assert manager.startup() == []
    logs = [manager.get_or_create_log("orders", p) for p in range(4)]
    assert manager.get_or_create_log("orders", 0) is logs[0]
    assert sorted(log.dir.parent.name for log in logs) == ["a", "a", "b", "b"]
    for log in logs:
        fill(log, 5)
        log.update_high_watermark(8)
    logs[1].maybe_increment_log_start_offset(3)
    manager.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
        assert (d / "recovery-point-offset-checkpoint").read_text().startswith("0\n2\n")
    a_dir = logs[0].dir.parent
    assert OffsetCheckpointFile(a_dir / "recovery-point-offset-checkpoint").read()[("orders", 0)] == 10
    assert OffsetCheckpointFile(a_dir / "replication-offset-checkpoint").read()[("orders", 0)] == 8

    again = LogManager(dirs, CONFIG, time=MockTime())
    reports = again.startup()
    assert len(reports) == 4 and all(r.had_clean_shutdown and not r.needed_recovery for r in reports)
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    assert set(again.all_logs()) == {("orders", p) for p in range(4)}
    log1 = again.get_log("orders", 1)
    assert (log1.log_end_offset, log1.high_watermark, log1.log_start_offset, log1.recovery_point) == (10, 8, 3, 10)
    assert again.get_log("orders", 9) is None


def test_unclean_startup_recovers_from_checkpointed_recovery_points(tmp_path, caplog):
    manager = LogManager([tmp_path], CONFIG, time=MockTime())
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    fill(log, 10)
    log.flush()
    manager.checkpoint_recovery_points()
    fill(log, 3)
    # no shutdown: as after kill -9
    caplog.set_level(logging.INFO, logger="kbroker.storage")
    again = LogManager([tmp_path], CONFIG, time=MockTime())
    (report,) = again.startup()
    assert not report.had_clean_shutdown and report.needed_recovery and report.log_end_offset == 26
    recovered_lines = [r for r in caplog.records if r.getMessage().startswith("recovered t-0")]
    assert len(recovered_lines) == 1 and recovered_lines[0].levelno == logging.INFO
    assert again.get_log("t", 0).recovery_point == 20
    check_consistent(again.get_log("t", 0))


def test_topic_config_and_delete_log(tmp_path):
    configs = {"small": LogConfig(segment_bytes=500)}
    time = MockTime()
    manager = LogManager([tmp_path], CONFIG, time=time, topic_config=lambda t: configs.get(t, CONFIG))
    manager.startup()
    assert manager.get_or_create_log("small", 0).config.segment_bytes == 500
    log = manager.get_or_create_log("big", 0)
    assert log.config is CONFIG
    fill(log, 3)
    view = log.read(0, 1000).records  # a read in flight does not stop the deletion
    manager.delete_log("big", 0)
    assert manager.get_log("big", 0) is None and not (tmp_path / "big-0").exists()
    # renamed <name>.<uuid>-delete, removed after file.delete.delay.ms (Kafka's asynchronous delete)
    [doomed] = tmp_path.glob("*-delete")
    time.sleep(CONFIG.file_delete_delay_ms - 1)
    assert manager.delete_due() == 0 and doomed.exists()
    time.sleep(1)
    assert manager.delete_due() == 1
    assert not list(tmp_path.glob("*-delete"))
    assert len(view) > 0
    (tmp_path / "gone-0.0123abcd-delete").mkdir()  # an interrupted deletion
    manager.shutdown()
    assert [r.topic for r in LogManager([tmp_path], CONFIG, time=MockTime()).startup()] == ["small"]
    assert not (tmp_path / "gone-0.0123abcd-delete").exists()


def test_retention_and_flush_passes(tmp_path):
    time = MockTime()
    config = LogConfig(segment_bytes=1000, retention_bytes=1000, flush_ms=5000)
    manager = LogManager([tmp_path], config, time=time)
    manager.startup()
    logs = [manager.get_or_create_log("t", p) for p in range(2)]
    for log in logs:
        fill(log, 12)
        log.update_high_watermark(log.log_end_offset)
    assert manager.cleanup_logs() > 0
    assert all(log.log_start_offset > 0 for log in logs)
    assert manager.flush_dirty_logs() == []
    time.sleep(5000)
    plans = manager.flush_dirty_logs()
    assert {plan.log for plan in plans} == set(logs)
    for plan in plans:
        plan.run()
        plan.log.complete_flush(plan)
    assert all(log.recovery_point == log.log_end_offset for log in logs)
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_high_watermarks()
    starts = OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read()
    assert starts == {("t", p): logs[p].log_start_offset for p in range(2)}


def test_a_flush_pass_holds_a_bounded_number_of_descriptors(tmp_path):
    """Plans hold their descriptors until they ran: with many logs due at once, one pass
    prepares plans holding about ``max_fds``, the longest unflushed first; the next passes
    take the rest."""
    time = MockTime()
    manager = LogManager([tmp_path], LogConfig(flush_ms=1000), time=time)
    manager.startup()
    logs = []
    for p in range(10):
        log = manager.get_or_create_log("t", p)
        fill(log, 1)
        logs.append(log)
        time.sleep(10)  # t-0 is the longest unflushed
    time.sleep(1000)
    flushed = []
    while len(flushed) < len(logs):
        plans = manager.flush_dirty_logs(max_fds=8)
        assert plans and sum(plan.descriptors for plan in plans) < 8 + 4  # one plan: 3 files and the dir
        for plan in plans:
            plan.run()
            plan.log.complete_flush(plan)
            flushed.append(plan.log)
    assert flushed == logs and all(log.recovery_point == log.log_end_offset for log in logs)
    assert manager.flush_dirty_logs() == []
    manager.shutdown()


def test_leader_epoch_files_are_written_by_the_flush_and_the_clean_shutdown_only(tmp_path, monkeypatch):
    """A new leader epoch and the appends at it only change memory: no flush pass writes the
    file until the recovery point is to pass the entry (the log's flush), a clean shutdown
    writes the rest. A cache whose only change is an epoch at the LEO (a leader that appended
    nothing, as after a restart: every partition's LeaderAndIsr) costs no write and no fsync,
    not even at shutdown: loading drops such an entry anyway (storage/epoch_cache.py)."""
    manager = LogManager([tmp_path], CONFIG, time=MockTime())
    manager.startup()
    logs = [manager.get_or_create_log("t", p) for p in range(3)]
    files = [log.dir / "leader-epoch-checkpoint" for log in logs]
    for log in logs:
        log.leader_epoch_cache.assign(1, 0)  # Partition.make_leader
    for log in logs:
        log.append_as_leader(batch(2), leader_epoch=1)
    assert manager.flush_dirty_logs() == []  # Kafka's default flush policy: nothing due
    assert [f.exists() for f in files] == [False, False, False]
    logs[0].flush()  # the recovery point passes the entry: the file first
    assert [f.exists() for f in files] == [True, False, False]
    manager.shutdown()
    assert [f.read_text() for f in files] == ["0\n1\n1 0\n"] * 3

    again = LogManager([tmp_path], CONFIG, time=MockTime())
    again.startup()
    synced = record_fsyncs(monkeypatch)
    for p in range(3):
        log = again.get_log("t", p)
        assert log.leader_epoch_cache.entries() == [(1, 0)]
        log.leader_epoch_cache.assign(2, log.log_end_offset)
    assert again.flush_dirty_logs() == []
    again.shutdown()
    assert [f.read_text() for f in files] == ["0\n1\n1 0\n"] * 3
    assert "leader-epoch-checkpoint" not in synced and CLEAN_SHUTDOWN_FILE in synced


def test_corrupt_checkpoint_is_ignored_with_a_warning(tmp_path, caplog):
    manager = LogManager([tmp_path], CONFIG, time=MockTime())
    manager.startup()
    fill(manager.get_or_create_log("t", 0), 4)
    manager.shutdown()
    (tmp_path / "replication-offset-checkpoint").write_text("0\n5\nt 0 3\n")
    again = LogManager([tmp_path], CONFIG, time=MockTime())
    again.startup()
    assert again.get_log("t", 0).high_watermark == 0
    assert any("replication-offset-checkpoint" in r.getMessage() for r in caplog.records)


def test_shutdown_flushes_every_log_in_parallel_batches_and_a_failure_leaves_no_marker(tmp_path, monkeypatch):
    """flush_all: every log's recovery point reaches its LEO (plans of a bounded number of
    descriptors, fsynced on a pool of threads); one fsync failing fails the shutdown with
    KAFKA_STORAGE_ERROR, after the other plans ran, and no clean-shutdown marker is written."""
    import errno
    import threading

    import pytest

    from protocol.errors import KafkaStorageError
    from storage import log_manager as manager_module

    from storage.log import FlushPlan, Log

    monkeypatch.setattr(manager_module, "FLUSH_PASS_MAX_FDS", 8)
    manager = LogManager([tmp_path], CONFIG, time=MockTime())
    manager.startup()
    manager.segment_budget.files.budget = 8  # plans holding about 8 descriptors at a time
    logs = [manager.get_or_create_log("t", p) for p in range(12)]
    for log in logs:
        fill(log, 3)
    held, most, lock = [0], [0], threading.Lock()
    real_begin, real_run = Log.begin_flush, FlushPlan.run

    def begin_flush(self, offset=None):
        plan = real_begin(self, offset)
        if plan is not None:
            with lock:
                held[0] += plan.descriptors
                most[0] = max(most[0], held[0])
        return plan

    def run(self):
        n = self.descriptors
        try:
            real_run(self)
        finally:
            with lock:  # (FlushPlan.run runs on the pool's threads)
                held[0] -= n
    monkeypatch.setattr(Log, "begin_flush", begin_flush)
    monkeypatch.setattr(FlushPlan, "run", run)
    real_fsync, failed = os.fsync, []

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("t-5/00000000000000000000.log") and not failed:
            failed.append(fd)
            raise OSError(errno.EIO, "I/O error (injected)")
        return real_fsync(fd)
    monkeypatch.setattr(fileio, "fsync", fsync)
    with pytest.raises(KafkaStorageError, match="t-5"):
        manager.shutdown()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert logs[5].recovery_point == 0
    assert all(log.recovery_point == log.log_end_offset for log in logs[:5])  # the batches before it ran
    manager.shutdown()  # the fsync works again: everything flushed, the marker written
    assert all(log.recovery_point == log.log_end_offset for log in logs)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert 4 < most[0] <= 8 + 5  # (a plan: the .log, its two indexes, the leader-epoch-checkpoint, the dir)


def test_a_checkpoint_snapshot_written_late_never_overwrites_a_newer_one(tmp_path, monkeypatch):
    """The periodic checkpoints are snapshots taken on the loop and written on a thread later.
    A follower's truncation below its recovery point writes the lowered recovery points at once
    (checkpoint_recovery_points_after_truncation): a periodic snapshot taken before it and
    written after it must not bring the old, higher recovery point back (a crash would then
    skip recovering what was appended after the truncation)."""
    manager = LogManager([tmp_path], CONFIG, time=MockTime())
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    fill(log, 10)
    log.flush()
    high = log.recovery_point
    assert high > 0
    periodic = manager.snapshot_recovery_points()  # taken, its write waiting for the flush thread
    log.truncate_to(4)
    assert log.recovery_point <= 4
    manager.checkpoint_recovery_points_after_truncation(log)
    synced = record_fsyncs(monkeypatch)
    assert periodic.write() == 0  # older than what the file holds: skipped
    assert synced == []
    checkpoint = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert dict(checkpoint)[("t", 0)] == log.recovery_point
    # a snapshot taken later is written
    fill(log, 2)
    log.flush()
    assert manager.snapshot_recovery_points().write() == 1
    assert dict(OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read())[("t", 0)] == \
        log.recovery_point
    manager.shutdown()


def test_a_checkpoint_write_never_waits_behind_another_files_write(tmp_path):
    """Each checkpoint file has its own lock: the loop's write of one file (the recovery points
    after a truncation) does not wait while the flush thread holds another (an fsync of the
    high watermarks', or another log dir's, file in progress)."""
    import threading
    from storage.log_manager import CheckpointSnapshot, CheckpointWrites
    writes = CheckpointWrites()
    busy, free = tmp_path / "replication-offset-checkpoint", tmp_path / "recovery-point-offset-checkpoint"
    snapshot = CheckpointSnapshot(writes, 1, [(free, {("t", 0): 7})])
    done: list[int] = []
    with writes.lock(busy):  # the other file's write is in progress
        writer = threading.Thread(target=lambda: done.append(snapshot.write()))
        writer.start()
        writer.join(timeout=30)  # returns at once unless it waits for the busy file's lock
        blocked = writer.is_alive()
    writer.join()
    assert not blocked and done == [1]
    assert dict(OffsetCheckpointFile(free).read()) == {("t", 0): 7}
    assert writes.lock(busy) is writes.lock(busy) and writes.lock(busy) is not writes.lock(free)
