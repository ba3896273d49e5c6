"""LogLoader on its own: what it hands the Log (segments, offsets, whether the directory
changed) and what it updates in place (leader epoch cache, producer state). The recovery
rules themselves are exercised through Log.open in test_recovery.py."""

from __future__ import annotations

import logging

from storage_helpers import START_MS, batch, check_consistent, open_log

from protocol.clock import MockTime
from storage import LeaderEpochFileCache, LogConfig, LogLoader, OpenSegmentBudget, ProducerStateManager
from storage.epoch_cache import FILE_NAME as EPOCH_FILE_NAME

CONFIG = dict(segment_bytes=1000, index_interval_bytes=100)


def build(path, batches=20):
    """A closed log of ``batches`` two-record batches over several segments; idempotent from
    the tenth batch on (producer 7), leader epoch 1 then 2; returns (LEO, segment bases)."""
    log = open_log(path, **CONFIG)
    for i in range(batches):
        idempotent = dict(producer_id=7, producer_epoch=0, base_sequence=2 * (i - 10)) if i >= 10 else {}
        log.append_as_leader(batch(2, ts=START_MS + i, value_size=60, **idempotent), leader_epoch=1 + i // 10)
    leo, bases = log.log_end_offset, [s.base_offset for s in log.segments]
    log.close()
    return leo, bases


def loader(path, *, clean=True, recovery_point=0, log_start_offset=0, budget=None):
    time = MockTime()
    cache = LeaderEpochFileCache(path / EPOCH_FILE_NAME, lambda: -1)
    producers = ProducerStateManager(path, time, LogConfig().producer_id_expiration_ms)
    return LogLoader(path, "t", 0, LogConfig(**CONFIG), time, budget or OpenSegmentBudget(1000),
                     had_clean_shutdown=clean, log_start_offset_checkpoint=log_start_offset,
                     recovery_point_checkpoint=recovery_point, leader_epoch_cache=cache, producer_state=producers)


def test_a_clean_load_hands_over_the_segments_and_offsets_and_changes_nothing_on_disk(tmp_path):
    path = tmp_path / "t-0"
    leo, bases = build(path)
    files = sorted(p.name for p in path.iterdir())
    budget = OpenSegmentBudget(1000)
    it = loader(path, log_start_offset=3, budget=budget)
    loaded = it.load()
    assert [s.base_offset for s in loaded.segments] == bases and len(bases) > 2
    assert loaded.segments[-1].active and not any(s.active for s in loaded.segments[:-1])
    assert all(s.budget is budget for s in loaded.segments)
    assert (loaded.log_start_offset, loaded.log_end_offset, loaded.recovery_point) == (3, leo, leo)
    assert not loaded.dir_changed and not loaded.report.needed_recovery
    assert loaded.report.segments == len(bases) and loaded.report.log_end_offset == leo
    assert it.leader_epoch_cache.entries() == [(1, 3), (2, 20)]  # cut to the log start offset
    assert it.producer_state.producers[7].last_seq == 19  # from the snapshot close took at the LEO
    assert loaded.report.producer_batches_replayed == 0
    assert sorted(p.name for p in path.iterdir()) == files


def test_an_empty_directory_gets_one_segment_at_the_log_start_offset(tmp_path):
    path = tmp_path / "t-0"
    path.mkdir()
    loaded = loader(path, log_start_offset=42).load()
    assert [s.base_offset for s in loaded.segments] == [42] and loaded.segments[0].active
    assert (loaded.log_start_offset, loaded.log_end_offset, loaded.recovery_point) == (42, 42, 42)
    assert loaded.dir_changed  # a segment was created: the directory must be fsynced


def test_an_unclean_load_rebuilds_epochs_and_producers_and_reports_dropped_segments(tmp_path, caplog):
    path = tmp_path / "t-0"
    leo, bases = build(path)
    (path / EPOCH_FILE_NAME).unlink()
    for snapshot in path.glob("*.snapshot"):
        snapshot.unlink()
    torn = path / f"{bases[-2]:020d}.log"
    torn.write_bytes(torn.read_bytes()[:-7])  # its last batch torn: the last segment no longer follows
    caplog.clear()
    it = loader(path, clean=False, recovery_point=0)
    loaded = it.load()
    assert len(loaded.segments) == len(bases) - 1 and loaded.report.segments_deleted == 1
    assert loaded.log_end_offset == bases[-1] - 2 > 24 and loaded.recovery_point == 0
    assert loaded.dir_changed and loaded.report.truncation
    warnings = [r for r in caplog.records if r.name.startswith("kbroker.storage") and r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "later segments" in warnings[0].getMessage()
    assert it.leader_epoch_cache.entries() == [(1, 0), (2, 20)]  # read back from the batches
    assert {pid: e.last_seq for pid, e in it.producer_state.producers.items()} == {7: loaded.log_end_offset - 21}
    assert loaded.report.producer_batches_replayed > 0


def test_the_first_flush_after_a_load_that_changed_the_directory_syncs_it(tmp_path):
    path = tmp_path / "t-0"
    fresh = open_log(path, **CONFIG)  # created its first segment
    plan = fresh.begin_flush()
    assert plan is not None and len(plan._fds) == 1  # nothing appended: the directory only
    plan.run()
    fresh.complete_flush(plan)
    assert fresh.begin_flush() is None
    fresh.close()
    reopened = open_log(path, **CONFIG)
    assert reopened.begin_flush() is None  # nothing was created or deleted
    check_consistent(reopened)
    reopened.close()
