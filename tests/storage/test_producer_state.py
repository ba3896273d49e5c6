"""Producer state for the idempotent producer: the sequence/epoch rules on client appends,
duplicates, snapshots (format, restart, corruption), truncation, followers, expiration,
and a property test against a model of the rules."""

from __future__ import annotations

import logging
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import START_MS, batch, check_consistent, open_log

from protocol.clock import MockTime
from protocol.errors import ErrorCode, InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceNumberError
from protocol.records import INT32_MAX, increment_sequence, iter_batch_headers, read_header
from storage import BatchMetadata, Log, LogConfig, LogManager, ProducerStateEntry, ProducerStateManager
from storage.producer_state import (CorruptSnapshotError, decode_snapshot, encode_snapshot, read_snapshot,
                                    snapshot_file_name)

PID = 1000
DAY_MS = 86_400_000


def idem(seq: int, n: int = 1, *, pid: int = PID, epoch: int = 0, ts: int = START_MS) -> bytes:
    """One idempotent batch of ``n`` records starting at sequence ``seq``."""
    return batch(n, ts=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def state_of(log: Log) -> dict[int, tuple[int, list[tuple[int, int, int, int, int]]]]:
    """producer id -> (epoch, [(first_seq, last_seq, first_offset, last_offset, timestamp)])."""
    return {pid: (e.producer_epoch, [(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
                                     for b in e.batches])
            for pid, e in log.producer_state.producers.items()}


def last_batches(log: Log) -> dict[int, tuple[int, int, int, int]]:
    """producer id -> (epoch, last sequence, last offset, offset delta): what a snapshot keeps."""
    return {pid: (e.producer_epoch, e.last_seq, e.last_offset, e.batches[-1].last_offset - e.batches[-1].first_offset)
            for pid, e in log.producer_state.producers.items()}


def snapshots(log: Log) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in log.dir.glob("*.snapshot"))


# -- the sequence and epoch rules --------------------------------------------------------------

def test_in_order_appends_and_duplicates_of_the_last_five(tmp_path):
    log = open_log(tmp_path / "t-0")
    appended = []  # (seq, n, info)
    seq = 0
    for i in range(7):
        n = i % 3 + 1
        appended.append((seq, n, log.append_as_leader(idem(seq, n, ts=START_MS + i), 0)))
        seq += n
    assert [info.first_offset for _s, _n, info in appended] == [0, 1, 3, 6, 7, 9, 12]
    assert not any(info.duplicate for _s, _n, info in appended)
    leo, size = log.log_end_offset, log.size_in_bytes()
    for seq, n, first in appended[-5:]:
        dup = log.append_as_leader(idem(seq, n), 0)
        assert dup.duplicate and dup.record_count == n and dup.batches == []
        assert (dup.first_offset, dup.last_offset, dup.max_timestamp) == (first.first_offset, first.last_offset,
                                                                           first.max_timestamp)
    assert (log.log_end_offset, log.size_in_bytes()) == (leo, size)
    for seq, n, _first in appended[:2]:  # no longer among the last five
        with pytest.raises(OutOfOrderSequenceNumberError) as exc:
            log.append_as_leader(idem(seq, n), 0)
        assert exc.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    last_seq, last_n, _ = appended[-1]
    with pytest.raises(OutOfOrderSequenceNumberError):  # same first sequence, other range: not a duplicate
        log.append_as_leader(idem(last_seq, last_n + 1), 0)
    assert (log.log_end_offset, log.size_in_bytes()) == (leo, size)
    assert log.append_as_leader(idem(last_seq + last_n), 0).first_offset == leo


def test_a_gap_is_out_of_order(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(idem(0, 2), 0)
    for seq in (3, 5, 1, INT32_MAX):
        with pytest.raises(OutOfOrderSequenceNumberError):
            log.append_as_leader(idem(seq), 0)
    assert log.append_as_leader(idem(2), 0).first_offset == 2


def test_a_stale_epoch_is_invalid_producer_epoch(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(idem(0, epoch=0), 0)
    log.append_as_leader(idem(0, epoch=1), 0)
    for seq in (0, 1):
        with pytest.raises(InvalidProducerEpochError) as exc:
            log.append_as_leader(idem(seq, epoch=0), 0)
        assert exc.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH == 47
    assert log.log_end_offset == 2


def test_an_epoch_bump_starts_at_sequence_zero(tmp_path):
    log = open_log(tmp_path / "t-0")
    for seq in range(3):
        log.append_as_leader(idem(seq, epoch=2), 0)
    for seq in (3, 1):
        with pytest.raises(OutOfOrderSequenceNumberError):
            log.append_as_leader(idem(seq, epoch=3), 0)
    bumped = log.append_as_leader(idem(0, epoch=3), 0)
    assert not bumped.duplicate and bumped.first_offset == 3
    assert state_of(log)[PID][0] == 3 and len(state_of(log)[PID][1]) == 1  # the old epoch's batches are gone
    assert log.append_as_leader(idem(0, epoch=3), 0).duplicate
    assert log.append_as_leader(idem(1, epoch=3), 0).first_offset == 4


def test_an_unknown_producer_is_accepted_at_any_sequence(tmp_path):
    """Kafka 2.5+ (KIP-360): a producer the partition has no state of (its batches went with
    retention or DeleteRecords, or it expired) is accepted at whatever sequence it is; 2.0-2.4
    answered UNKNOWN_PRODUCER_ID, and the client renumbered and resent."""
    log = open_log(tmp_path / "t-0")
    assert log.append_as_leader(idem(5), 0).first_offset == 0
    assert log.last_entry(PID).last_seq == 5
    with pytest.raises(OutOfOrderSequenceNumberError):  # from then on, in sequence
        log.append_as_leader(idem(7), 0)
    assert log.append_as_leader(idem(6), 0).first_offset == 1


def test_sequences_wrap_at_int32_max(tmp_path):
    log = open_log(tmp_path / "t-0")
    # A follower append takes any sequence: it puts the producer just below the wrap.
    log.append_as_follower(batch(3, base_offset=0, producer_id=PID, producer_epoch=0, base_sequence=INT32_MAX - 4))
    assert log.last_entry(PID).last_seq == INT32_MAX - 2
    wrapped = log.append_as_leader(idem(INT32_MAX - 1, 3), 0)  # sequences MAX-1, MAX, 0
    assert log.last_entry(PID).last_seq == 0 and wrapped.first_offset == 3
    dup = log.append_as_leader(idem(INT32_MAX - 1, 3), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (3, 5)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(idem(INT32_MAX), 0)
    assert log.append_as_leader(idem(1), 0).first_offset == 6
    log.close()
    reopened = open_log(tmp_path / "t-0")  # the snapshot stores last sequence and delta; the first wraps back
    assert reopened.append_as_leader(idem(1), 0).duplicate
    assert reopened.append_as_leader(idem(2), 0).first_offset == 7
    # A batch that ends exactly at INT32_MAX: the next one starts at 0.
    reopened.append_as_follower(batch(3, base_offset=8, producer_id=7, producer_epoch=0, base_sequence=INT32_MAX - 2))
    assert reopened.last_entry(7).last_seq == INT32_MAX
    with pytest.raises(OutOfOrderSequenceNumberError):
        reopened.append_as_leader(idem(1, pid=7), 0)
    assert reopened.append_as_leader(idem(0, pid=7), 0).first_offset == 11


def test_batches_without_a_producer_id_bypass_the_checks(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(idem(0), 0)
    before = state_of(log)
    plain = batch(2)
    for _ in range(3):
        assert not log.append_as_leader(plain, 0).duplicate  # the same bytes again are new records
    info = log.append_as_leader(batch(1) + batch(2) + batch(3), 0)
    assert (info.first_offset, info.last_offset, info.batch_count) == (7, 12, 3)
    assert state_of(log) == before
    assert log.append_as_leader(idem(1), 0).first_offset == 13


def test_a_request_with_several_batches_and_a_producer_id_is_invalid(tmp_path):
    log = open_log(tmp_path / "t-0")
    for records in (idem(0) + idem(1), batch(1) + idem(0), idem(0, pid=1) + idem(0, pid=2)):
        with pytest.raises(InvalidRecordError, match="exactly one batch") as exc:
            log.append_as_leader(records, 0)
        assert exc.value.error_code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 0 and log.size_in_bytes() == 0 and log.producer_state.producers == {}


def test_clients_may_not_send_control_batches_or_producer_batches_without_a_sequence(tmp_path):
    log = open_log(tmp_path / "t-0")
    with pytest.raises(InvalidRecordError, match="control"):
        log.append_as_leader(batch(1, producer_id=PID, producer_epoch=0, base_sequence=0, control=True), 0)
    with pytest.raises(InvalidRecordError, match="sequence number -1"):
        log.append_as_leader(batch(1, producer_id=PID, producer_epoch=0), 0)
    assert log.log_end_offset == 0 and log.producer_state.producers == {}


def test_a_rejected_batch_leaves_log_and_state_unchanged(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(idem(0, 2, pid=1), 0)
    log.append_as_leader(idem(0, pid=2, epoch=4), 0)
    before, leo, size = state_of(log), log.log_end_offset, log.size_in_bytes()
    epochs = log.leader_epoch_cache.entries()
    for records, error in ((idem(5, pid=1), OutOfOrderSequenceNumberError),
                           (idem(1, pid=2, epoch=3), InvalidProducerEpochError),
                           (idem(3, pid=2, epoch=5), OutOfOrderSequenceNumberError)):
        with pytest.raises(error):
            log.append_as_leader(records, 7)
        assert state_of(log) == before and (log.log_end_offset, log.size_in_bytes()) == (leo, size)
    assert log.leader_epoch_cache.entries() == epochs


def test_a_duplicate_on_a_log_append_time_topic_answers_the_first_append_time(tmp_path):
    time = MockTime()
    log = open_log(tmp_path / "t-0", time, message_timestamp_type="LogAppendTime")
    first = log.append_as_leader(idem(0, 2, ts=START_MS - 10_000), 0)
    assert first.log_append_time == time.milliseconds()
    time.sleep(5000)
    dup = log.append_as_leader(idem(0, 2), 0)
    assert dup.duplicate and dup.log_append_time == first.log_append_time == dup.max_timestamp
    create_time = open_log(tmp_path / "c-0", time)
    create_time.append_as_leader(idem(0), 0)
    assert create_time.append_as_leader(idem(0), 0).log_append_time == -1


def test_batches_of_one_producer_chain_through_the_working_copy(tmp_path):
    manager = ProducerStateManager(tmp_path, MockTime(), DAY_MS)

    def header(offset: int, seq: int, n: int = 1, epoch: int = 0):
        return read_header(batch(n, base_offset=offset, producer_id=PID, producer_epoch=epoch, base_sequence=seq))

    chained = [header(0, 0, 2), header(2, 2), header(3, 0, epoch=1), header(4, 1, 3, epoch=1)]
    with pytest.raises(OutOfOrderSequenceNumberError):  # the gap is against the copy, not the live state
        manager.prepare_append(chained + [header(7, 5, epoch=1)], validate=True)
    with pytest.raises(InvalidProducerEpochError):
        manager.prepare_append(chained + [header(7, 4)], validate=True)
    assert manager.producers == {}
    pending = manager.prepare_append(chained, validate=True)
    assert manager.producers == {}
    manager.update(pending.values())
    entry = manager.last_entry(PID)
    assert (entry.producer_epoch, [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches]
            ) == (1, [(0, 0, 3, 3), (1, 3, 4, 6)])
    duplicate, info = manager.analyze_client_batch(header(9, 1, 3, epoch=1))
    assert info is None and (duplicate.first_offset, duplicate.last_offset) == (4, 6)


# -- snapshot files ----------------------------------------------------------------------------

def _entry(pid: int, epoch: int, *batches: tuple[int, int, int, int, int], last_append_ms: int = 0):
    entry = ProducerStateEntry(pid, epoch, last_timestamp=batches[-1][4] if batches else -1,
                               last_append_ms=last_append_ms)
    entry.batches.extend(BatchMetadata(*b) for b in batches)
    return entry


def test_snapshot_golden_bytes():
    entry = _entry(42, 3, (7, 9, 90, 92, START_MS - 1), (10, 14, 100, 104, START_MS))
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 42, 3, 14, 104, 4, START_MS, -1, -1)
    assert encode_snapshot([entry]) == struct.pack(">hI", 1, crc32c(body)) + body
    empty = struct.pack(">i", 0)
    assert encode_snapshot([]) == struct.pack(">hI", 1, crc32c(empty)) + empty
    no_batch = _entry(5, 0)
    no_batch.last_timestamp = 77
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 5, 0, -1, -1, 0, 77, -1, -1)
    assert encode_snapshot([no_batch]) == struct.pack(">hI", 1, crc32c(body)) + body


def test_snapshot_round_trip_keeps_each_producers_last_batch():
    entries = [_entry(1, 0, (0, 0, 0, 0, 10), (1, 3, 5, 7, 11)),
               _entry(2**62, 32767, (INT32_MAX - 1, 1, 2**40, 2**40 + 3, -1)),
               _entry(3, 1)]
    decoded = decode_snapshot(encode_snapshot(entries))
    assert [e.producer_id for e in decoded] == [1, 2**62, 3]
    assert decoded[0] == _entry(1, 0, (1, 3, 5, 7, 11))
    assert decoded[1] == _entry(2**62, 32767, (INT32_MAX - 1, 1, 2**40, 2**40 + 3, -1))
    assert len(decoded[2].batches) == 0 and decoded[2].producer_epoch == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "version", "empty"])
def test_a_damaged_snapshot_does_not_decode(damage):
    data = bytearray(encode_snapshot([_entry(1, 0, (0, 0, 0, 0, 10)), _entry(2, 0, (0, 1, 1, 2, 12))]))
    if damage == "flip":
        data[30] ^= 0x40
    elif damage == "truncate":
        del data[-1]
    elif damage == "extend":
        data += b"\0"
    elif damage == "version":
        data[1] = 2
    else:
        data = bytearray(3)
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data))


def test_a_corrupt_snapshot_is_skipped_with_one_warning(tmp_path, caplog):
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    for seq in range(12):
        log.append_as_leader(idem(seq), 0)
    expected = last_batches(log)
    log.close()
    newest = snapshots(log)[-1]
    assert newest == log.log_end_offset and len(snapshots(log)) >= 2
    path = log.dir / snapshot_file_name(newest)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kbroker.storage"):
        reopened = open_log(tmp_path / "t-0", segment_bytes=400)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and path.name in warnings[0].getMessage()
    assert reopened.recovery_report.producer_batches_replayed > 0  # from the older snapshot
    assert last_batches(reopened) == expected == {PID: (0, 11, 11, 0)}
    assert reopened.append_as_leader(idem(11), 0).duplicate
    assert snapshots(reopened)[-1] == newest and read_snapshot(path)  # written again, intact


def test_snapshot_files_of_other_shapes_are_ignored(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    for name in ("12.snapshot", "x0000000000000000012.snapshot", "00000000000000000012.snapshot.tmp"):
        (d / name).write_bytes(b"junk")
    assert ProducerStateManager(d, MockTime(), DAY_MS).snapshot_offsets == []


# -- restarts ----------------------------------------------------------------------------------

def test_clean_restart_loads_the_snapshot_without_replaying(tmp_path):
    log = open_log(tmp_path / "t-0")
    for i in range(6):
        log.append_as_leader(idem(2 * i, 2, pid=1), 0)
        log.append_as_leader(batch(1), 0)
        log.append_as_leader(idem(i, pid=2, epoch=3), 0)
    last = log.append_as_leader(idem(12, 2, pid=1), 0)
    expected = last_batches(log)
    assert expected == {1: (0, 13, last.last_offset, 1), 2: (3, 5, last.first_offset - 1, 0)}
    log.close()
    assert snapshots(log) == [log.log_end_offset]
    reopened = open_log(tmp_path / "t-0")
    assert reopened.recovery_report.producer_batches_replayed == 0
    assert last_batches(reopened) == expected
    dup = reopened.append_as_leader(idem(12, 2, pid=1), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (last.first_offset, last.last_offset)
    assert reopened.append_as_leader(idem(5, pid=2, epoch=3), 0).duplicate
    # Only the last batch survives a snapshot (as in Kafka): an older retry is out of order.
    with pytest.raises(OutOfOrderSequenceNumberError):
        reopened.append_as_leader(idem(10, 2, pid=1), 0)
    assert reopened.append_as_leader(idem(14, pid=1), 0).first_offset == last.last_offset + 1


def test_a_roll_takes_a_snapshot_at_the_new_base_offset(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=500)
    seq = 0
    while log.num_segments < 2:
        log.append_as_leader(idem(seq), 0)
        seq += 1
    base = log.active_segment.base_offset
    assert snapshots(log) == [base] and base == seq - 1  # the batch that rolled went to the new segment
    entries = read_snapshot(log.dir / snapshot_file_name(base))
    assert [(e.producer_id, e.last_seq, e.last_offset) for e in entries] == [(PID, base - 1, base - 1)]


def test_snapshots_stay_few_while_the_log_rolls(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    seq = 0

    def append_until(segments: int) -> None:
        nonlocal seq
        while log.num_segments < segments:
            log.append_as_leader(idem(seq), 0)
            seq += 1
            assert len(snapshots(log)) <= 3

    append_until(5)
    assert snapshots(log) == [s.base_offset for s in log.segments[-2:]]  # nothing flushed: the last two
    log.flush()
    at_flush = log.recovery_point
    floor = max(s for s in snapshots(log) if s <= at_flush)
    append_until(15)
    # The newest snapshot at or below the recovery point stays (recovery after a crash may
    # cut the log down to the recovery point), plus the last two.
    assert snapshots(log) == [floor] + [s.base_offset for s in log.segments[-2:]]


def test_unclean_restart_replays_from_the_snapshot_at_or_below_the_recovery_point(tmp_path):
    """After a crash only what is below the recovery point is known durable: the replay starts
    from the newest snapshot at or below it (Kafka's recoverSegment), not from a newer one (a
    roll's, above markers whose .txnindex entries the crash may have taken), nor from zero.
    The snapshots above the recovery point go; one is taken at the LEO after the replay."""
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    seqs = {1: 0, 2: 0}
    last = {}
    for i in range(40):
        if i == 20:
            log.flush()
        pid, n = 1 + i % 2, 1 + i % 3
        info = log.append_as_leader(idem(seqs[pid], n, pid=pid), 0)
        last[pid] = (seqs[pid], n, info.first_offset, info.last_offset)
        seqs[pid] += n
    assert log.num_segments >= 3
    recovery_point = log.recovery_point
    floor = max(s for s in snapshots(log) if s <= recovery_point)
    assert 0 < floor <= recovery_point < max(snapshots(log))  # a newer snapshot, above the recovery point
    tail = sum(1 for s in log.segments for _pos, h in iter_batch_headers(s.records.buffer(s.size))
               if h.base_offset >= floor)
    expected = state_of(log)
    # A crash: the files as they are, never closed (no snapshot at the LEO).
    shutil.copytree(log.dir, tmp_path / "copy" / "t-0")
    crashed = Log.open(tmp_path / "copy" / "t-0", LogConfig(segment_bytes=600), time=MockTime(),
                       recovery_point=recovery_point, had_clean_shutdown=False)
    assert 0 < crashed.recovery_report.producer_batches_replayed == tail < 40
    assert [s for s in snapshots(crashed) if s >= floor] == [floor, crashed.log_end_offset]  # retaken after the replay
    for pid, (epoch, batches) in state_of(crashed).items():
        assert epoch == expected[pid][0] and batches == expected[pid][1][-len(batches):]
        seq, n, first, end = last[pid]
        dup = crashed.append_as_leader(idem(seq, n, pid=pid), 0)
        assert dup.duplicate and (dup.first_offset, dup.last_offset) == (first, end)
        leo = crashed.log_end_offset
        assert crashed.append_as_leader(idem(seq + n, pid=pid), 0).first_offset == leo


CHILD = r"""
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from protocol.clock import MockTime
from protocol.records import Record, build_batch
from storage import Log, LogConfig

log = Log.open(Path(sys.argv[2]), LogConfig(segment_bytes=2000), time=MockTime())
seqs = {1: 0, 2: 0, 3: 0}
for i in range(120):
    if i == 60:
        log.flush()
        print("flushed", log.recovery_point, flush=True)
    pid, n = 1 + i % 3, 1 + i % 4
    records = [Record(timestamp=1_700_000_000_000 + i, value=b"x" * 30) for _ in range(n)]
    info = log.append_as_leader(build_batch(records, producer_id=pid, producer_epoch=1, base_sequence=seqs[pid]), 0)
    print("appended", pid, seqs[pid], n, info.first_offset, info.last_offset, flush=True)
    seqs[pid] += n
print("done", log.num_segments, flush=True)
time.sleep(60)
"""


def test_kill_9_then_the_state_is_rebuilt(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(repo), str(tmp_path / "t-0")], stdout=subprocess.PIPE,
                             text=True)
    last: dict[int, tuple[int, int, int, int]] = {}
    recovery_point = 0
    for line in child.stdout:
        words = line.split()
        if words[0] == "done":
            assert int(words[1]) >= 3
            break
        if words[0] == "flushed":  # the replay starts from a snapshot at or below it
            recovery_point = int(words[1])
            continue
        pid, seq, n, first, end = map(int, words[1:])
        last[pid] = (seq, n, first, end)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    assert child.returncode == -signal.SIGKILL
    assert recovery_point > 0
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2000), time=MockTime(), recovery_point=recovery_point,
                   had_clean_shutdown=False)
    check_consistent(log)
    assert 0 < log.recovery_report.producer_batches_replayed < 120
    for pid, (seq, n, first, end) in last.items():
        dup = log.append_as_leader(idem(seq, n, pid=pid, epoch=1), 0)
        assert dup.duplicate and (dup.first_offset, dup.last_offset) == (first, end)
        leo = log.log_end_offset
        assert log.append_as_leader(idem(seq + n, pid=pid, epoch=1), 0).first_offset == leo


# -- truncation and the log start offset -------------------------------------------------------

def test_truncation_takes_the_state_back(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=700)
    for seq in range(30):
        log.append_as_leader(idem(seq, pid=1), 0)
        log.append_as_leader(idem(seq, pid=2), 0)
    assert log.num_segments >= 3
    log.truncate_to(41)  # pid 1's seq 20 is at offset 40, pid 2's seq 20 at 41
    assert log.log_end_offset == 41 and all(s <= 41 for s in snapshots(log))
    assert last_batches(log) == {1: (0, 20, 40, 0), 2: (0, 19, 39, 0)}
    assert log.append_as_leader(idem(20, pid=1), 0).duplicate  # still there
    with pytest.raises(OutOfOrderSequenceNumberError):  # was truncated: the state went back to seq 19
        log.append_as_leader(idem(21, pid=2), 0)
    again = log.append_as_leader(idem(20, pid=2), 0)  # was truncated: no duplicate, written again
    assert not again.duplicate and again.first_offset == 41
    assert log.append_as_leader(idem(21, pid=1), 0).first_offset == 42
    # The rebuilt state is what a reopened copy of the log rebuilds.
    shutil.copytree(log.dir, tmp_path / "copy" / "t-0")
    copied = Log.open(tmp_path / "copy" / "t-0", LogConfig(segment_bytes=700), time=MockTime(),
                      had_clean_shutdown=False)
    assert last_batches(copied) == last_batches(log)


def test_truncate_fully_clears_the_state_and_the_snapshots(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for seq in range(20):
        log.append_as_leader(idem(seq), 0)
    assert snapshots(log)
    log.truncate_fully_and_start_at(500)
    assert log.producer_state.producers == {} and snapshots(log) == []
    assert log.append_as_leader(idem(20), 0).first_offset == 500  # no state: any sequence (KIP-360)
    assert log.last_entry(PID).last_seq == 20


def test_advancing_the_log_start_drops_producers_whose_batches_are_gone(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    log.append_as_leader(idem(0, 3, pid=1), 0)             # offsets 0-2
    for seq in range(6):
        log.append_as_leader(idem(seq, pid=2), 0)          # offsets 3-8
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(5)
    assert set(log.producer_state.producers) == {2}
    assert [b.first_offset for b in log.last_entry(2).batches] == [5, 6, 7, 8]  # 3 and 4 are gone too
    assert all(s >= 5 for s in snapshots(log))
    assert log.append_as_leader(idem(6, pid=2), 0).first_offset == 9
    assert log.append_as_leader(idem(3, pid=1), 0).first_offset == 10  # forgotten: any sequence (KIP-360)


def test_loading_drops_producers_below_the_log_start_offset(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(idem(0, 3, pid=1), 0)
    log.append_as_leader(idem(0, 3, pid=2), 0)
    log.close()  # the snapshot holds both
    # The log start offset moved (a DeleteRecords checkpointed) but no snapshot followed.
    reopened = Log.open(tmp_path / "t-0", LogConfig(), time=MockTime(), log_start_offset=3)
    assert set(reopened.producer_state.producers) == {2}
    assert reopened.recovery_report.producer_batches_replayed == 0


def test_truncate_head_deletes_the_snapshots_below_the_log_start(tmp_path):
    manager = ProducerStateManager(tmp_path, MockTime(), DAY_MS)
    for offset in (2, 4, 6):
        assert manager.take_snapshot(offset)
    assert not manager.take_snapshot(6)  # one per offset
    manager.truncate_head(5)
    assert manager.snapshot_offsets == [6] and sorted(p.name for p in tmp_path.iterdir()) == [snapshot_file_name(6)]
    assert ProducerStateManager(tmp_path, MockTime(), DAY_MS).snapshot_offsets == [6]


def test_retention_moving_the_log_start_drops_producers(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=300, retention_bytes=600)
    log.append_as_leader(idem(0, pid=1), 0)
    for seq in range(30):
        log.append_as_leader(idem(seq, pid=2), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() > 0 and log.log_start_offset > 0
    assert set(log.producer_state.producers) == {2}
    assert all(s >= log.log_start_offset for s in snapshots(log))


# -- followers ---------------------------------------------------------------------------------

def _copy_to_follower(leader: Log, follower: Log, max_bytes: int) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(bytes(leader.read(follower.log_end_offset, max_bytes).records))


def test_a_follower_rebuilds_the_leaders_state(tmp_path):
    time = MockTime()
    leader = open_log(tmp_path / "leader" / "t-0", time, segment_bytes=800)
    seqs: dict[int, int] = {}
    for i in range(60):
        pid, epoch = 1 + i % 4, i // 25
        if i % 7 == 3:
            leader.append_as_leader(batch(2), 0)
            continue
        seq = seqs.get((pid, epoch), 0)
        leader.append_as_leader(idem(seq, 1 + i % 3, pid=pid, epoch=epoch, ts=START_MS + i), 0)
        seqs[(pid, epoch)] = seq + 1 + i % 3
        time.sleep(1)
    follower = open_log(tmp_path / "follower" / "t-0", time, segment_bytes=800)
    _copy_to_follower(leader, follower, 1000)
    assert follower.producer_state.producers == leader.producer_state.producers
    assert state_of(follower) == state_of(leader)
    follower.close()
    leader.close()
    assert last_batches(open_log(tmp_path / "follower" / "t-0")) == last_batches(leader)


def test_a_follower_takes_a_stale_epoch_with_a_warning(tmp_path, caplog):
    follower = open_log(tmp_path / "t-0")
    follower.append_as_follower(batch(1, base_offset=0, producer_id=PID, producer_epoch=5, base_sequence=0))
    with caplog.at_level(logging.WARNING, logger="kbroker.storage"):
        follower.append_as_follower(batch(1, base_offset=1, producer_id=PID, producer_epoch=4, base_sequence=7))
    assert "older than its last seen epoch 5" in caplog.text
    assert (follower.last_entry(PID).producer_epoch, follower.last_entry(PID).last_seq) == (4, 7)


# -- expiration --------------------------------------------------------------------------------

def test_producers_expire_after_producer_id_expiration_ms_without_appends(tmp_path):
    time = MockTime()
    log = open_log(tmp_path / "t-0", time, producer_id_expiration_ms=DAY_MS)
    log.append_as_leader(idem(0, pid=1), 0)
    log.append_as_leader(idem(0, pid=2, ts=START_MS - 30 * DAY_MS), 0)  # old CreateTime timestamps
    time.sleep(DAY_MS - 10)
    log.append_as_leader(idem(1, pid=2, ts=START_MS - 30 * DAY_MS), 0)
    time.sleep(9)
    assert log.remove_expired_producers(time.milliseconds()) == 0
    time.sleep(1)
    assert log.remove_expired_producers(time.milliseconds()) == 1
    assert set(log.producer_state.producers) == {2}  # active, whatever its timestamps say
    assert log.append_as_leader(idem(1, pid=1), 0).first_offset == 3  # expired: any sequence (KIP-360)


def test_expiration_counts_from_the_load_after_a_restart(tmp_path):
    time = MockTime()
    manager = LogManager([tmp_path], LogConfig(producer_id_expiration_ms=1000), time=time)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    log.append_as_leader(idem(0), 0)
    time.sleep(900)
    manager.shutdown()
    manager = LogManager([tmp_path], LogConfig(producer_id_expiration_ms=1000), time=time)
    manager.startup()
    log = manager.get_log("t", 0)
    time.sleep(900)
    assert manager.remove_expired_producers() == 0 and log.last_entry(PID) is not None
    time.sleep(100)
    assert manager.remove_expired_producers() == 1 and log.last_entry(PID) is None


def test_an_expired_producer_stays_forgotten_across_a_restart(tmp_path):
    time = MockTime()
    log = open_log(tmp_path / "t-0", time)
    log.append_as_leader(idem(0, pid=1), 0)
    log.append_as_leader(idem(0, pid=2), 0)
    log.close()
    log = open_log(tmp_path / "t-0", time)  # the snapshot at the log end is loaded
    time.sleep(DAY_MS // 2)
    log.append_as_leader(idem(1, pid=2), 0)
    log.close()
    log = open_log(tmp_path / "t-0", time)
    time.sleep(DAY_MS)
    assert log.remove_expired_producers(time.milliseconds()) == 2
    log.close()  # the log end did not move, yet the snapshot there is rewritten
    assert open_log(tmp_path / "t-0", time).producer_state.producers == {}


def test_the_expiration_setting_is_broker_level():
    assert LogConfig().producer_id_expiration_ms == DAY_MS
    config = LogConfig.from_topic_properties({"producer.id.expiration.ms": "5000"})
    assert config.producer_id_expiration_ms == 5000
    assert "producer.id.expiration.ms" not in config.to_topic_properties()
    with pytest.raises(ValueError, match="producer.id.expiration.ms"):
        LogConfig(producer_id_expiration_ms=0)


def test_update_config_changes_the_expiration(tmp_path):
    time = MockTime()
    log = open_log(tmp_path / "t-0", time)
    log.append_as_leader(idem(0), 0)
    time.sleep(10)
    assert log.remove_expired_producers(time.milliseconds()) == 0
    log.update_config(LogConfig(producer_id_expiration_ms=10))
    assert log.remove_expired_producers(time.milliseconds()) == 1


# -- the rules against a model -----------------------------------------------------------------

class Model:
    """The rules of producer_state.py, spelled out plainly. A clean restart keeps only each
    producer's last batch (what a snapshot holds)."""

    def __init__(self) -> None:
        self.leo = 0
        self.entries: dict[int, tuple[int, list[tuple[int, int, int, int]]]] = {}  # pid -> (epoch, batches)
        self.history: dict[int, list[tuple[int, int, int]]] = {}  # pid -> every accepted (epoch, seq, n)

    def produce(self, pid: int, epoch: int, seq: int, n: int) -> tuple:
        last_seq = increment_sequence(seq, n - 1)
        entry = self.entries.get(pid)
        if entry is not None:
            current_epoch, batches = entry
            if epoch == current_epoch:
                for first_seq, end_seq, first, last in batches:
                    if (first_seq, end_seq) == (seq, last_seq):
                        return "duplicate", first, last
            if epoch < current_epoch:
                return "error", ErrorCode.INVALID_PRODUCER_EPOCH
            if epoch > current_epoch and seq != 0:
                return "error", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            if epoch == current_epoch and seq != increment_sequence(batches[-1][1], 1):
                return "error", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # (no entry: any first sequence is accepted, Kafka 2.5+)
        first, last = self.leo, self.leo + n - 1
        self.leo += n
        batches = entry[1] if entry is not None and entry[0] == epoch else []
        self.entries[pid] = (epoch, (batches + [(seq, last_seq, first, last)])[-5:])
        self.history.setdefault(pid, []).append((epoch, seq, n))
        return "appended", first, last

    def restart(self) -> None:
        self.entries = {pid: (epoch, batches[-1:]) for pid, (epoch, batches) in self.entries.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_producers_follow_the_model(data):
    model = Model()
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "t-0"
        config = LogConfig(segment_bytes=1500)
        log = Log.open(path, config, time=MockTime())
        for _ in range(data.draw(st.integers(1, 60), label="steps")):
            action = data.draw(st.sampled_from(["next", "next", "next", "retry", "retry", "gap", "new epoch",
                                                "old epoch", "anything", "plain", "restart"]))
            pid = data.draw(st.sampled_from([1, 2, 3]))
            epoch, batches = model.entries.get(pid, (0, []))
            n = data.draw(st.integers(1, 3))
            seq = increment_sequence(batches[-1][1], 1) if batches else 0
            if action == "restart":
                log.close()
                log = Log.open(path, config, time=MockTime())
                model.restart()
                continue
            if action == "plain":
                assert log.append_as_leader(batch(n), 0).first_offset == model.leo
                model.leo += n
                continue
            if action == "retry" and model.history.get(pid):
                epoch, seq, n = data.draw(st.sampled_from(model.history[pid]))
            elif action == "gap":
                seq = increment_sequence(seq, data.draw(st.integers(1, 3)))
            elif action == "new epoch":
                epoch, seq = epoch + 1, data.draw(st.sampled_from([0, 0, 1, seq]))
            elif action == "old epoch":
                epoch = max(0, epoch - 1)
            elif action == "anything":
                epoch, seq = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 12))
            expected = model.produce(pid, epoch, seq, n)
            try:
                info = log.append_as_leader(idem(seq, n, pid=pid, epoch=epoch), 0)
            except (OutOfOrderSequenceNumberError, InvalidProducerEpochError) as exc:
                assert expected == ("error", exc.error_code), (pid, epoch, seq, n)
                continue
            outcome = "duplicate" if info.duplicate else "appended"
            assert expected == (outcome, info.first_offset, info.last_offset), (pid, epoch, seq, n)
        assert log.log_end_offset == model.leo
        assert {pid: (e.producer_epoch, [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches])
                for pid, e in log.producer_state.producers.items()} == model.entries
        headers = [h for segment in log.segments
                   for _pos, h in iter_batch_headers(segment.records.buffer(segment.size), 0, segment.size)]
        assert sum(h.records_count for h in headers) == model.leo
        log.close()
