"""Transactions in the log: producer state per transaction, markers, the last stable offset,
the aborted transaction index (``.txnindex``) and its recovery, truncation and retention."""

from __future__ import annotations

import os

import pytest
from storage_helpers import START_MS, batch, open_log

from protocol.clock import MockTime
from protocol.errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from protocol.records import iter_batch_headers, read_control_record
from storage import Log, LogConfig
from storage.txn_index import ENTRY_SIZE, AbortedTxn, decode_entries

A, B = 1000, 2000


def txn(pid: int, seq: int, n: int = 1, epoch: int = 0) -> bytes:
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


def plain(n: int = 1) -> bytes:
    return batch(n)


def test_lso_follows_the_earliest_open_transaction_and_the_high_watermark(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(plain(2), 0)                 # 0-1
    log.append_as_leader(txn(A, 0, 2), 0)             # 2-3: A starts at 2
    log.append_as_leader(txn(B, 0), 0)                # 4: B starts at 4
    log.append_as_leader(txn(A, 2), 0)                # 5
    assert log.first_unstable_offset == 2
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    log.append_end_txn_marker(A, 0, 0, True, 0)       # 6: A commits
    # the marker is not yet below the HW: A still holds the LSO
    assert log.last_stable_offset == 2
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 4                # B's first offset
    log.append_end_txn_marker(B, 0, 0, False, 0)      # 7: B aborts
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None
    assert log.last_stable_offset == log.high_watermark == 8
    # only B's aborted transaction is indexed; its LSO at the marker was past the marker
    assert log.txn_index.entries == [AbortedTxn(B, 4, 7, 8)]
    with open(log.txn_index.path(0), "rb") as f:
        assert decode_entries(f.read()) == [AbortedTxn(B, 4, 7, 8)]
    assert os.path.getsize(log.txn_index.path(0)) == ENTRY_SIZE
    # a fetch of [0, 8) overlaps it; one starting after its marker does not
    assert log.collect_aborted_transactions(0, 8) == [AbortedTxn(B, 4, 7, 8)]
    assert log.collect_aborted_transactions(8, 9) == []
    assert log.collect_aborted_transactions(0, 4) == []  # ends before B's first offset


def test_marker_batches_are_control_batches_with_the_coordinator_epoch(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn(A, 0), 0)
    info = log.append_end_txn_marker(A, 0, 7, False, 3)
    data = bytes(log.read(info.first_offset, 1 << 20).records)
    (pos, header), = list(iter_batch_headers(data))
    assert header.is_control and header.is_transactional and header.producer_id == A
    assert header.partition_leader_epoch == 3
    assert read_control_record(data, pos, header) == (0, 7)


def test_marker_checks_epochs(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn(A, 0, epoch=2), 0)
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.append_end_txn_marker(A, 1, 0, True, 0)
    log.append_end_txn_marker(A, 2, 5, True, 0)
    log.append_as_leader(txn(A, 1, epoch=2), 0)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_end_txn_marker(A, 2, 4, True, 0)
    assert log.log_end_offset == end + 2  # nothing written by the refused ones


def test_non_transactional_write_inside_a_transaction_is_refused(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn(A, 0), 0)
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(batch(1, producer_id=A, producer_epoch=0, base_sequence=1), 0)


def test_follower_replay_matches_the_leader(tmp_path):
    leader = open_log(tmp_path / "t-0")
    follower = open_log(tmp_path / "f" / "t-0")
    leader.append_as_leader(txn(A, 0), 0)
    leader.append_as_leader(txn(B, 0), 0)
    leader.append_end_txn_marker(A, 0, 0, False, 0)
    leader.append_as_leader(plain(), 0)
    follower.append_as_follower(bytes(leader.read(0, 1 << 20).records))
    assert follower.producer_state.ongoing_txns == leader.producer_state.ongoing_txns == {1: B}
    assert follower.txn_index.entries == leader.txn_index.entries == [AbortedTxn(A, 0, 2, 1)]


@pytest.mark.parametrize("lost", [None, (".txnindex", ".snapshot"), (".snapshot",)])
def test_recovery_rebuilds_the_index_and_the_open_transactions(tmp_path, lost):
    time = MockTime()
    log = open_log(tmp_path / "t-0", time=time, segment_bytes=400)
    for i in range(6):
        log.append_as_leader(txn(A, i), 0)
        log.append_as_leader(plain(), 0)
    log.append_end_txn_marker(A, 0, 0, False, 0)
    log.append_as_leader(txn(B, 0), 0)
    assert log.num_segments > 2
    entries = log.txn_index.entries
    ongoing = dict(log.producer_state.ongoing_txns)
    assert ongoing == {log.log_end_offset - 1: B}
    if lost is None:
        log.close()
    else:
        # a crash: the snapshots (and maybe the .txnindex files) are lost; recovery replays
        # the whole log and must neither miss nor repeat an entry
        for segment in log.segments:
            segment.close()
        for name in os.listdir(tmp_path / "t-0"):
            if name.endswith(lost):
                os.unlink(tmp_path / "t-0" / name)
    # (after the crash: an unclean shutdown, nothing flushed, recovery point 0; only the entries
    # at or above the recovery point are rebuilt, those below it are durable)
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400), time=time,
                        had_clean_shutdown=lost is None)
    assert reopened.txn_index.entries == entries
    assert reopened.producer_state.ongoing_txns == ongoing
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == reopened.log_end_offset - 1


def test_truncation_and_retention_follow_the_index(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    log.append_as_leader(txn(A, 0), 0)
    log.append_end_txn_marker(A, 0, 0, False, 0)      # 1
    log.roll()
    log.append_as_leader(txn(B, 0), 0)                # 2
    log.append_end_txn_marker(B, 0, 0, False, 0)      # 3
    assert [t.last_offset for t in log.txn_index.entries] == [1, 3]
    log.truncate_to(3)
    assert [t.last_offset for t in log.txn_index.entries] == [1]
    assert log.producer_state.ongoing_txns == {2: B}  # B's marker went with the truncation
    log.append_end_txn_marker(B, 0, 0, True, 0)
    log.append_as_leader(plain(), 0)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(2)
    log.delete_old_segments()
    assert log.txn_index.entries == []
    assert not log.txn_index.path(0).exists()


def test_idle_producer_with_an_open_transaction_does_not_expire(tmp_path):
    time = MockTime()
    log = open_log(tmp_path / "t-0", time=time, producer_id_expiration_ms=1000)
    log.append_as_leader(txn(A, 0), 0)
    log.append_as_leader(batch(1, producer_id=B, producer_epoch=0, base_sequence=0), 0)
    time.sleep(2000)
    assert log.remove_expired_producers(time.milliseconds()) == 1
    assert log.last_entry(A) is not None and log.last_entry(B) is None
    assert START_MS  # (timestamps of the helpers' batches)


@pytest.mark.parametrize("reopen", [False, True])
def test_log_start_passing_an_open_transaction_keeps_its_sequence(tmp_path, reopen):
    """librdkafka's 0103_transactions (do_test_fatal_idempo_error_without_kip360): a transaction
    commits, and a DeleteRecords past its data reaches the leader before the COMMIT marker (the
    coordinator writes markers after answering EndTxn). The producer's entry stays for its open
    transaction; its next transaction goes on at the next sequence with the same epoch, which
    must be accepted, as by Kafka, not refused OUT_OF_ORDER_SEQUENCE_NUMBER for want of a last
    sequence (librdkafka takes that for a fatal desynchronisation)."""
    log = open_log(tmp_path / "t-0")
    for seq in range(6):
        log.append_as_leader(txn(A, seq), 0)           # 0-5
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(6)
    assert log.last_entry(A).last_seq == 5             # kept: its transaction is open
    if reopen:
        log.close()                                    # the snapshot holds the entry as it is
        log = Log.open(tmp_path / "t-0", LogConfig(), time=MockTime(), log_start_offset=6)
    log.append_end_txn_marker(A, 0, 0, True, 0)       # 6: the commit
    assert log.append_as_leader(txn(A, 6), 0).first_offset == 7
    assert log.last_entry(A).last_seq == 6
    # once the log start passes the marker too, the producer is forgotten: any sequence
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(7)
    log.append_end_txn_marker(A, 0, 0, True, 0)       # 8
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(9)
    assert log.last_entry(A) is None


def _record_fsyncs(monkeypatch) -> dict[str, int]:
    """path -> its size at its last fsync (what a power loss keeps of it)."""
    from storage import fileio
    durable: dict[str, int] = {}
    real = fileio.fsync

    def fsync(fd: int) -> None:
        real(fd)
        durable[os.readlink(f"/proc/self/fd/{fd}")] = os.fstat(fd).st_size
    monkeypatch.setattr(fileio, "fsync", fsync)
    return durable


def _power_loss(dir_, durable: dict[str, int], suffix: str) -> None:
    """Cut the ``suffix`` files of ``dir_`` to what their last fsync made durable."""
    for name in os.listdir(dir_):
        if name.endswith(suffix):
            path = os.path.realpath(dir_ / name)
            os.truncate(path, durable.get(path, 0))


def test_flush_makes_the_aborted_txn_index_durable(tmp_path, monkeypatch):
    """The flush that moves the recovery point past an ABORT marker fsyncs the .txnindex
    entry of it (Kafka's LogSegment.flush flushes its txnIndex): recovery replays only from
    the producer state snapshot, so it never rebuilds entries below it. Seed 1696: a clean
    restart (snapshot and recovery point at the LEO) then a power loss lost the unsynced
    .txnindex; the new leader's fetches listed no aborted transaction and read_committed
    consumers read the aborted records."""
    durable = _record_fsyncs(monkeypatch)
    time = MockTime()
    log = open_log(tmp_path / "t-0", time=time)
    log.append_as_leader(txn(A, 0, 2), 0)             # 0-1
    log.append_end_txn_marker(A, 0, 0, False, 0)      # 2: A aborts
    log.append_as_leader(txn(B, 0), 0)                # 3
    log.append_end_txn_marker(B, 0, 0, True, 0)       # 4: B commits
    entries = [AbortedTxn(A, 0, 2, 3)]
    assert log.txn_index.entries == entries
    log.flush()
    assert durable[os.path.realpath(log.txn_index.path(0))] == ENTRY_SIZE
    end = log.log_end_offset
    log.close()                                       # a clean shutdown: the snapshot at the LEO
    _power_loss(tmp_path / "t-0", durable, ".txnindex")
    reopened = Log.open(tmp_path / "t-0", LogConfig(), time=time, recovery_point=end, had_clean_shutdown=False)
    assert reopened.txn_index.entries == entries
    assert reopened.collect_aborted_transactions(0, end) == entries
    # an unchanged index is not fsynced again; a new entry is
    durable.clear()
    reopened.append_as_leader(txn(A, 2), 0)
    reopened.flush()
    assert os.path.realpath(reopened.txn_index.path(0)) not in durable
    reopened.append_end_txn_marker(A, 0, 0, False, 0)
    reopened.flush()
    assert durable[os.path.realpath(reopened.txn_index.path(0))] == 2 * ENTRY_SIZE


def test_flush_rewrites_a_txn_index_whose_append_failed(tmp_path, monkeypatch):
    """An append to the .txnindex that failed (EIO: the marker is in the log) is made good
    by the next flush, which rewrites the file whole before the recovery point passes the
    marker (seed 1696's broker 1: an EIO then a restart left the entry out for good)."""
    from storage import fileio
    durable = _record_fsyncs(monkeypatch)
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn(A, 0), 0)
    real = fileio.append_to

    def append_to(path, data):
        if str(path).endswith(".txnindex"):
            raise OSError(5, "Input/output error")
        real(path, data)
    monkeypatch.setattr(fileio, "append_to", append_to)
    log.append_end_txn_marker(A, 0, 0, False, 0)
    monkeypatch.setattr(fileio, "append_to", real)
    assert log.txn_index.entries == [AbortedTxn(A, 0, 1, 2)]
    assert not os.path.exists(log.txn_index.path(0))
    log.flush()
    path = log.txn_index.path(0)
    with open(path, "rb") as f:
        assert decode_entries(f.read()) == [AbortedTxn(A, 0, 1, 2)]
    assert durable[os.path.realpath(path)] == ENTRY_SIZE


def test_unclean_restart_rebuilds_aborted_txns_above_the_recovery_point(tmp_path, monkeypatch):
    """After an unclean shutdown the producer state is replayed from a snapshot at or below the
    recovery point, not from a newer one (Kafka's LogLoader.recoverLog / recoverSegment): the
    snapshot taken (and fsynced) at a roll may sit above an ABORT marker whose .txnindex entry
    was never fsynced. A power loss takes that entry; replaying only from the newer snapshot
    never brought it back, and a read_committed fetch was handed the aborted records."""
    durable = _record_fsyncs(monkeypatch)
    time = MockTime()
    log = open_log(tmp_path / "t-0", time=time)
    log.append_as_leader(plain(2), 0)                 # 0-1
    log.append_as_leader(txn(B, 0), 0)                # 2: B's transaction, open across the roll
    log.flush()
    recovery_point = log.recovery_point
    assert recovery_point == 3
    log.append_as_leader(txn(A, 0, 2), 0)             # 3-4
    log.append_end_txn_marker(A, 0, 0, False, 0)      # 5: A aborts (B still open: LSO 2)
    end_of_abort = log.log_end_offset
    log.roll()                                        # a snapshot at 6, fsynced, above the marker
    log.append_as_leader(txn(B, 1), 0)                # 6
    log.append_end_txn_marker(B, 0, 0, False, 0)      # 7: B aborts
    entries = [AbortedTxn(A, 3, 5, 2), AbortedTxn(B, 2, 7, 8)]
    assert log.txn_index.entries == entries
    assert [s.base_offset for s in log.segments] == [0, end_of_abort]
    assert end_of_abort in log.producer_state.snapshot_offsets
    end = log.log_end_offset
    for segment in log.segments:                      # a power loss: no close, unsynced tails gone
        segment.close()
    _power_loss(tmp_path / "t-0", durable, ".txnindex")
    assert not any(os.path.getsize(log.txn_index.path(b)) for b in (0, end_of_abort)
                   if os.path.exists(log.txn_index.path(b)))
    reopened = Log.open(tmp_path / "t-0", LogConfig(), time=time, recovery_point=recovery_point,
                        had_clean_shutdown=False)
    assert reopened.log_end_offset == end
    assert reopened.txn_index.entries == entries
    assert reopened.txn_index.segment_entries(0) == entries[:1]
    assert reopened.collect_aborted_transactions(0, end) == entries
    assert reopened.producer_state.ongoing_txns == {}
    # the snapshots above the recovery point are not trusted: gone, one retaken at the LEO
    assert [o for o in reopened.producer_state.snapshot_offsets if o > recovery_point] == [end]


def test_a_torn_last_txn_index_entry_is_cut_at_load(tmp_path, monkeypatch):
    """A power loss in the middle of an append may leave a torn prefix of the last entry (the
    simulated disk's torn write). Loading cuts it: else the next entry is appended after the
    torn bytes, and every later load misreads the file from there (the new entry lost, a
    garbage one in its place)."""
    durable = _record_fsyncs(monkeypatch)
    time = MockTime()
    log = open_log(tmp_path / "t-0", time=time)
    log.append_as_leader(txn(A, 0), 0)                # 0
    log.append_end_txn_marker(A, 0, 0, False, 0)      # 1: A aborts, its entry fsynced below
    log.flush()
    recovery_point = log.log_end_offset
    log.close()                                       # a snapshot at 2: the replay starts there
    log = open_log(tmp_path / "t-0", time=time)
    log.append_as_leader(txn(B, 0), 0)                # 2
    log.append_end_txn_marker(B, 0, 0, False, 0)      # 3: B aborts; the crash keeps half its entry
    for segment in log.segments:
        segment.close()
    path = os.path.realpath(log.txn_index.path(0))
    assert durable[path] == ENTRY_SIZE
    os.truncate(path, ENTRY_SIZE + ENTRY_SIZE // 2)
    _power_loss(tmp_path / "t-0", durable, ".log")   # the log's tail is gone with it: LEO 2
    reopened = Log.open(tmp_path / "t-0", LogConfig(), time=time, recovery_point=recovery_point,
                        had_clean_shutdown=False)
    assert reopened.log_end_offset == recovery_point
    assert reopened.producer_state.snapshot_offsets == [recovery_point]
    assert reopened.txn_index.entries == [AbortedTxn(A, 0, 1, 2)]
    reopened.append_as_leader(txn(B, 0), 0)           # 2
    reopened.append_end_txn_marker(B, 0, 0, False, 0) # 3: B aborts again
    entries = [AbortedTxn(A, 0, 1, 2), AbortedTxn(B, 2, 3, 4)]
    reopened.close()
    again = Log.open(tmp_path / "t-0", LogConfig(), time=time)
    assert again.txn_index.entries == entries
    with open(path, "rb") as f:
        assert decode_entries(f.read()) == entries


def _record_cuts_and_unlinks(monkeypatch, durable: dict[str, int], cuts: bool = True) -> dict[str, bytes]:
    """A worse power loss than ``_power_loss`` alone: an ftruncate may be kept and the appends
    after it lost (``durable`` falls to the cut size, if ``cuts``), and a file's removal is kept
    only once its directory is fsynced (returned: path -> the durable bytes to bring back)."""
    from storage import fileio
    removed: dict[str, bytes] = {}
    real_ftruncate, real_unlink, real_fsync = fileio.ftruncate, fileio.unlink_if_exists, fileio.fsync

    def ftruncate(fd: int, size: int) -> None:
        real_ftruncate(fd, size)
        if cuts:
            path = os.readlink(f"/proc/self/fd/{fd}")
            durable[path] = min(durable.get(path, 0), size)

    def unlink_if_exists(path) -> None:
        real = os.path.realpath(path)
        if os.path.exists(real) and real.endswith(".txnindex"):
            with open(real, "rb") as f:
                removed[real] = f.read(durable.get(real, 0))
        real_unlink(path)

    def fsync(fd: int) -> None:
        real_fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.isdir(path):
            for p in [p for p in removed if os.path.dirname(p) == path]:
                del removed[p]
    monkeypatch.setattr(fileio, "ftruncate", ftruncate)
    monkeypatch.setattr(fileio, "unlink_if_exists", unlink_if_exists)
    monkeypatch.setattr(fileio, "fsync", fsync)
    return removed


def test_unclean_restart_at_the_recovery_point_leaves_durable_entries_alone(tmp_path, monkeypatch):
    """An unclean shutdown of an idle, fully flushed partition (recovery point == LEO): the
    replay starts from a snapshot below the LEO (here none: the log start), and once cut the
    .txnindex entries below the recovery point and appended them again, unsynced; the loader's
    unsynced snapshot at the LEO then covered them, and no flush synced them (nothing above the
    recovery point). A power loss keeping the cut and the snapshot, not the appends, lost the
    entries for good: read_committed fetches were handed the aborted records. The durable
    entries below the recovery point are left alone (Kafka's recovery starts at the segment of
    the recovery point)."""
    durable = _record_fsyncs(monkeypatch)
    _record_cuts_and_unlinks(monkeypatch, durable)
    time = MockTime()
    log = open_log(tmp_path / "t-0", time=time)
    log.append_as_leader(txn(A, 0, 2), 0)             # 0-1
    log.append_end_txn_marker(A, 0, 0, False, 0)      # 2: A aborts
    log.append_as_leader(plain(), 0)                  # 3
    log.flush()
    end = log.log_end_offset
    entries = [AbortedTxn(A, 0, 2, 3)]
    path = os.path.realpath(log.txn_index.path(0))
    assert durable[path] == ENTRY_SIZE
    for segment in log.segments:                      # a crash: no close, no snapshot
        segment.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(), time=time, recovery_point=end, had_clean_shutdown=False)
    assert reopened.txn_index.entries == entries
    assert reopened.producer_state.snapshot_offsets == [end]  # the loader's, not fsynced
    reopened.flush()                                  # nothing above the recovery point
    for segment in reopened.segments:                 # a power loss keeping the snapshot
        segment.close()
    _power_loss(tmp_path / "t-0", durable, ".txnindex")
    again = Log.open(tmp_path / "t-0", LogConfig(), time=time, recovery_point=end, had_clean_shutdown=False)
    assert again.txn_index.entries == entries
    assert again.collect_aborted_transactions(0, end) == entries


def test_truncation_to_no_entry_keeps_the_emptied_txn_index_durably(tmp_path, monkeypatch):
    """A follower's truncation that cuts every entry of a .txnindex file once removed it, and
    no directory fsync followed (no segment was dropped). The follower appended other records
    at those offsets and a flush moved the recovery point past them; a power loss brought the
    removed file back with its stale entry (a marker's offset now holding a plain record),
    below the recovery point, where recovery never looks: the aborted transaction was listed
    for records that were never in it. The file is cut to nothing instead, and the next
    flush's fsync makes that durable: a power loss here undoes the cut unless it was fsynced."""
    from storage import fileio
    durable = _record_fsyncs(monkeypatch)
    removed = _record_cuts_and_unlinks(monkeypatch, durable, cuts=False)
    time = MockTime()
    log = open_log(tmp_path / "t-0", time=time)
    log.append_as_leader(txn(A, 0), 0)                # 0
    log.append_end_txn_marker(A, 0, 0, False, 0)      # 1: A aborts
    log.flush()
    path = os.path.realpath(log.txn_index.path(0))
    assert durable[path] == ENTRY_SIZE
    with open(path, "rb") as f:
        stale = f.read()
    log.truncate_to(1)                                # the marker goes: no entry left
    assert log.txn_index.entries == []
    synced: set[str] = set()
    real_fsync = fileio.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
    monkeypatch.setattr(fileio, "fsync", fsync)
    log.append_as_leader(plain(3), 0)                 # 1-3: other records where the marker was
    log.flush()
    end = log.log_end_offset
    assert log.recovery_point == end
    for segment in log.segments:                      # a power loss (the replay, from 0, keeps
        segment.close()                               # the entries below the recovery point)
    if os.path.exists(path) and path not in synced:   # the cut, never fsynced, undone
        with open(path, "wb") as f:
            f.write(stale)
    _power_loss(tmp_path / "t-0", durable, ".txnindex")
    for p, data in removed.items():                   # removals the directory's fsync never kept
        with open(p, "wb") as f:
            f.write(data)
    reopened = Log.open(tmp_path / "t-0", LogConfig(), time=time, recovery_point=end, had_clean_shutdown=False)
    assert reopened.txn_index.entries == []
    assert reopened.collect_aborted_transactions(0, end) == []


def test_an_unreadable_txn_index_is_rebuilt_from_its_segment(tmp_path):
    """A .txnindex that does not read (here an entry of an unknown version) is rebuilt from its
    segment's markers at load, as Kafka recovers a segment whose index is corrupt: dropped
    alone, the aborted transactions of a segment below the recovery point were gone for good
    (no replay reaches them), and read_committed fetches were handed the aborted records."""
    time = MockTime()
    log = open_log(tmp_path / "t-0", time=time)
    log.append_as_leader(plain(2), 0)                 # 0-1
    log.append_as_leader(txn(A, 0, 2), 0)             # 2-3
    log.append_end_txn_marker(A, 0, 0, False, 0)      # 4: A aborts
    log.roll()
    log.append_as_leader(txn(B, 0), 0)                # 5
    log.append_end_txn_marker(B, 0, 0, False, 0)      # 6: B aborts
    log.roll()
    log.append_as_leader(plain(1), 0)                 # 7
    entries = [AbortedTxn(A, 2, 4, 5), AbortedTxn(B, 5, 6, 7)]
    assert log.txn_index.entries == entries
    end = log.log_end_offset
    log.close()                                       # clean: recovery point at the LEO
    path = tmp_path / "t-0" / log.txn_index.path(0).name
    path.write_bytes(b"\x00\x07" + path.read_bytes()[2:])
    reopened = Log.open(tmp_path / "t-0", LogConfig(), time=time, recovery_point=end, had_clean_shutdown=True)
    assert reopened.log_end_offset == end
    assert reopened.txn_index.entries == entries
    assert reopened.collect_aborted_transactions(0, end) == entries
    assert decode_entries(path.read_bytes()) == entries[:1]
    reopened.close()
