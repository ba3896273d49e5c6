"""Recovery on open: unclean shutdown re-validates from the recovery point only, cuts at
the first bad batch with one log line, and rebuilds missing, truncated or garbage indexes."""

from __future__ import annotations

import logging
import os

import pytest
from storage_helpers import START_MS, batch, check_consistent, open_log

from protocol.clock import MockTime
from protocol.records import iter_batch_headers
from storage import Log, LogConfig

CONFIG = dict(segment_bytes=2000, index_interval_bytes=100, segment_index_bytes=1024)


def build(path, batches=40, **extra):
    log = open_log(path, **{**CONFIG, **extra})
    for i in range(batches):
        log.append_as_leader(batch(2, ts=START_MS + 10 * i, value_size=60), leader_epoch=1 + i // 20)
    return log


def reopen(path, clean=False, recovery_point=0):
    return Log.open(path, LogConfig(**CONFIG), time=MockTime(), recovery_point=recovery_point,
                    had_clean_shutdown=clean)


def storage_warnings(caplog):
    return [r for r in caplog.records if r.name.startswith("kbroker.storage") and r.levelno >= logging.WARNING]


def test_unclean_shutdown_without_damage_loses_nothing(tmp_path, caplog):
    log = build(tmp_path / "t-0")
    leo = log.log_end_offset
    del log  # no close: indexes stay preallocated, as after kill -9
    recovered = reopen(tmp_path / "t-0")
    assert recovered.log_end_offset == leo and recovered.recovery_report.segments_recovered == recovered.num_segments
    check_consistent(recovered)
    assert recovered.offset_for_timestamp(START_MS + 105).offset == 22
    assert storage_warnings(caplog) == []


def test_only_segments_from_the_recovery_point_are_scanned(tmp_path, caplog):
    log = build(tmp_path / "t-0")
    log.flush()
    rp, nseg = log.recovery_point, log.num_segments
    for i in range(3):
        log.append_as_leader(batch(2), leader_epoch=2)
    del log
    recovered = reopen(tmp_path / "t-0", recovery_point=rp)
    bases = [s.base_offset for s in recovered.segments]
    floor = max(b for b in bases if b <= rp)
    assert nseg > 2 and recovered.recovery_report.segments_recovered == sum(1 for b in bases if b >= floor)
    assert recovered.recovery_point == rp and recovered.log_end_offset == rp + 6
    check_consistent(recovered)


def flip_byte(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        value = f.read(1)[0]
        f.seek(position)
        f.write(bytes([value ^ 0x40]))


def test_flipped_byte_in_the_tail_segment_truncates_there_with_one_log_line(tmp_path, caplog):
    log = build(tmp_path / "t-0")
    tail = log.active_segment
    positions = [pos for pos, _ in iter_batch_headers(tail.records.buffer(tail.size), 0, tail.size)]
    headers = [h for _, h in iter_batch_headers(tail.records.buffer(tail.size), 0, tail.size)]
    assert len(positions) >= 3
    bad_pos, bad, path = positions[2], headers[2], tail.log_path
    del log, tail
    flip_byte(path, bad_pos + 70)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kbroker.storage"):
        recovered = reopen(tmp_path / "t-0")
    assert recovered.log_end_offset == bad.base_offset
    warnings = storage_warnings(caplog)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert f"at byte {bad_pos}" in message and f"offset {bad.base_offset}" in message and "CRC" in message
    check_consistent(recovered)
    assert recovered.recovery_report.bytes_truncated > 0


def test_corruption_in_an_earlier_segment_drops_the_later_ones(tmp_path, caplog):
    log = build(tmp_path / "t-0")
    first = log.segments[0]
    nseg = log.num_segments
    del log
    flip_byte(first.log_path, first.size - 10)
    recovered = reopen(tmp_path / "t-0")
    assert recovered.num_segments == 1 and recovered.recovery_report.segments_deleted == nseg - 1
    assert len(storage_warnings(caplog)) == 1
    assert "later segments" in storage_warnings(caplog)[0].getMessage()
    assert recovered.leader_epoch_cache.entries() == [(1, 0)]
    check_consistent(recovered)


def test_torn_tail_and_zero_tail(tmp_path, caplog):
    log = build(tmp_path / "t-0")
    leo = log.log_end_offset
    path = log.active_segment.log_path
    del log
    with open(path, "ab") as f:
        f.write(batch(1)[:40])  # a torn write
    assert reopen(tmp_path / "t-0").log_end_offset == leo
    with open(path, "ab") as f:
        f.write(bytes(4096))  # zeros a crash can leave after the data
    caplog.clear()
    recovered = reopen(tmp_path / "t-0")
    assert recovered.log_end_offset == leo and os.path.getsize(path) == recovered.active_segment.size
    assert storage_warnings(caplog) == []  # a zero tail is the end of the data, not damage
    check_consistent(recovered)


def test_epoch_cache_tail_past_the_recovered_end_is_dropped(tmp_path):
    log = build(tmp_path / "t-0")
    log.leader_epoch_cache.assign(9, log.log_end_offset + 100)
    log.flush()  # as a clean shutdown: the file is written, with the entry past the end
    assert "9 " in (log.dir / "leader-epoch-checkpoint").read_text()
    del log
    recovered = reopen(tmp_path / "t-0", clean=True)
    assert recovered.leader_epoch_cache.entries() == [(1, 0), (2, 40)]


@pytest.mark.parametrize("damage", ["missing", "truncated", "garbage", "zero-padded"])
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_bad_index_is_rebuilt_and_lookups_stay_right(tmp_path, caplog, damage, suffix):
    log = build(tmp_path / "t-0")
    expected_reads = {o: bytes(log.read(o, 300).records) for o in range(0, log.log_end_offset, 7)}
    expected_times = {ts: log.offset_for_timestamp(ts) for ts in range(START_MS - 5, START_MS + 400, 13)}
    victim = log.segments[0]
    log.close()
    path = victim.index_path if suffix == ".index" else victim.time_index_path
    size = os.path.getsize(path)
    assert size > 24
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        os.truncate(path, size - 5)
    elif damage == "garbage":
        path.write_bytes(os.urandom(size))
    else:
        os.truncate(path, size + 1024)
    caplog.clear()
    recovered = reopen(tmp_path / "t-0", clean=True)
    assert recovered.recovery_report.indexes_rebuilt == [victim.log_path.name]
    assert any("rebuilding the indexes" in r.getMessage() for r in storage_warnings(caplog))
    check_consistent(recovered)
    assert {o: bytes(recovered.read(o, 300).records) for o in expected_reads} == expected_reads
    assert {ts: recovered.offset_for_timestamp(ts) for ts in expected_times} == expected_times
    assert os.path.getsize(path) == size  # rebuilt to the same entries, trimmed
