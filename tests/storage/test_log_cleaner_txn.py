"""The log cleaner and transactions (Kafka's Cleaner with CleanedTransactionMetadata), on real
segment files and a MockTime:

- an aborted transaction's data goes in the first pass (and never hides an older committed
  value of its keys); its ABORT marker and ``.txnindex`` entry stay for that pass, the next pass
  past ``delete.retention.ms`` removes both (the two-pass rule);
- a COMMIT marker goes only once compaction removed every batch of its transaction and it is
  past the horizon;
- nothing at or above the last stable offset is cleaned: an open transaction's batches stay;
- a read_committed reader sees the same records before and after, also after a restart."""

from __future__ import annotations

from storage_helpers import START_MS

from protocol.clock import MockTime
from protocol.records import Record, build_batch, iter_batch_headers, iter_records, read_control_record
from storage import Log, LogConfig
from storage.log_cleaner import LogCleaner
from storage.txn_index import AbortedTxn, decode_entries

DAY_MS = 86_400_000
A, B, C = 1000, 2000, 3000


def open_compacted(path, time, **config) -> Log:
    config.setdefault("segment_bytes", 100_000)
    config.setdefault("min_cleanable_dirty_ratio", 0.0)
    return Log.open(path, LogConfig(cleanup_policy="compact", **config), time=time)


class Producer:
    """A transactional producer's batches (its own sequence numbers)."""

    def __init__(self, log: Log, time: MockTime, pid: int) -> None:
        self.log, self.time, self.pid, self.seq = log, time, pid, 0

    def send(self, *rows: tuple[bytes, bytes | None]) -> None:
        self.log.append_as_leader(build_batch([Record(timestamp=self.time.milliseconds(), key=k, value=v) for k, v in rows],
                                              producer_id=self.pid, producer_epoch=0, base_sequence=self.seq,
                                              transactional=True), 0)
        self.seq += len(rows)
        self.log.update_high_watermark(self.log.log_end_offset)

    def end(self, commit: bool) -> None:
        self.log.append_end_txn_marker(self.pid, 0, 0, commit, 0)
        self.log.update_high_watermark(self.log.log_end_offset)


def plain(log: Log, time: MockTime, *rows: tuple[bytes, bytes | None]) -> None:
    log.append_as_leader(build_batch([Record(timestamp=time.milliseconds(), key=k, value=v) for k, v in rows]), 0)
    log.update_high_watermark(log.log_end_offset)


def batches(log: Log) -> list[tuple[int, str, int]]:
    """(base offset, kind, producer id) of every batch: kind is data, COMMIT or ABORT."""
    out = []
    for segment in log.segments:
        buf = segment.records.buffer(segment.size)
        for pos, h in iter_batch_headers(buf, 0, segment.size):
            if h.is_control:
                kind = "COMMIT" if read_control_record(buf, pos, h).type == 1 else "ABORT"
            else:
                kind = "data"
            out.append((h.base_offset, kind, h.producer_id))
        del buf
    return out


def read_committed(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer gets (as librdkafka filters): records up to the LSO, less
    those of the aborted transactions the fetch lists, control batches skipped."""
    upper = log.last_stable_offset
    aborted = log.collect_aborted_transactions(log.log_start_offset, upper)
    out = []
    offset = log.log_start_offset
    while offset < upper:
        data = log.read(offset, 1 << 20)
        if not len(data.records):
            break
        buf = data.records
        for pos, h in iter_batch_headers(buf):
            if h.base_offset >= upper:
                break
            if h.is_control or h.last_offset < offset:
                continue
            if h.is_transactional and any(t.producer_id == h.producer_id and t.first_offset <= h.base_offset <= t.last_offset
                                          for t in aborted):
                continue
            out.extend((r.offset, r.key, r.value) for r in iter_records(buf[pos:pos + h.size]) if r.offset >= offset)
        *_, (_pos, last) = iter_batch_headers(buf)
        offset = last.next_offset
    return out


def cleaner_for(log: Log, time: MockTime) -> LogCleaner:
    return LogCleaner(time, lambda: {(log.topic, log.partition): log})


def test_aborted_data_goes_in_one_pass_and_its_marker_in_the_next_past_the_horizon(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "t-0", time)
    a, b = Producer(log, time, A), Producer(log, time, B)
    plain(log, time, (b"k1", b"old1"), (b"k2", b"old2"))  # 0-1
    a.send((b"k1", b"aborted1"))                          # 2: A, aborted below
    b.send((b"k3", b"committed3"))                        # 3: B, committed below
    a.send((b"k2", b"aborted2"), (b"k4", b"aborted4"))    # 4-5
    a.end(commit=False)                                   # 6: ABORT
    b.end(commit=True)                                    # 7: COMMIT
    log.roll()
    assert log.txn_index.entries == [AbortedTxn(A, 2, 6, 3)]
    view = read_committed(log)
    assert [(k, v) for _o, k, v in view] == [(b"k1", b"old1"), (b"k2", b"old2"), (b"k3", b"committed3")]

    cleaner = cleaner_for(log, time)
    stats = cleaner.clean(log)
    assert stats.aborted_records_dropped == 3 and stats.markers_dropped == 0
    # the aborted records did not hide k1/k2's committed values; the markers stay this pass,
    # and the ABORT marker keeps its index entry (data was removed in this pass)
    assert batches(log) == [(0, "data", -1), (3, "data", B), (6, "ABORT", A), (7, "COMMIT", B)]
    assert log.txn_index.entries == [AbortedTxn(A, 2, 6, 3)]
    assert read_committed(log) == view

    # second pass, not yet past delete.retention.ms: no data of A is left, so its index entry
    # goes, but the marker stays until the horizon
    plain(log, time, (b"k9", b"x"))
    log.roll()
    stats = cleaner.clean(log)
    assert stats.markers_dropped == 0
    assert [k for _o, k, _t in batches(log)].count("ABORT") == 1
    assert log.txn_index.entries == []
    assert read_committed(log) == view + [(8, b"k9", b"x")]

    # past the horizon: the ABORT marker goes; the COMMIT marker stays (B's batch is still there)
    time.sleep(DAY_MS + 1000)
    plain(log, time, (b"k9", b"y"))
    log.roll()
    stats = cleaner.clean(log)
    assert stats.markers_dropped == 1
    assert [(o, k) for o, k, _p in batches(log)] == [(0, "data"), (3, "data"), (7, "COMMIT"), (9, "data")]
    assert [(k, v) for _o, k, v in read_committed(log)] == [(b"k1", b"old1"), (b"k2", b"old2"), (b"k3", b"committed3"),
                                                          (b"k9", b"y")]
    # the cleaned segments' .txnindex files say the same after a restart
    log.close()
    reopened = open_compacted(tmp_path / "t-0", time)
    assert reopened.txn_index.entries == []
    assert not any(p.name.endswith(".txnindex") and decode_entries(p.read_bytes()) for p in (tmp_path / "t-0").iterdir())
    reopened.close()


def test_a_commit_marker_goes_once_its_data_is_compacted_away_and_past_the_horizon(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "t-0", time)
    c = Producer(log, time, C)
    c.send((b"k", b"v1"))       # 0
    c.end(commit=True)          # 1: COMMIT
    log.roll()
    cleaner = cleaner_for(log, time)
    cleaner.clean(log)
    time.sleep(DAY_MS + 1000)
    cleaner.clean(log)
    assert [k for _o, k, _p in batches(log)] == ["data", "COMMIT"]  # its batch is still there: kept
    plain(log, time, (b"k", b"v2"))  # 2: supersedes C's record
    log.roll()
    stats = cleaner.clean(log)       # C's batch goes; the marker saw it go in this pass: kept
    assert stats.markers_dropped == 0
    assert [k for _o, k, _p in batches(log)] == ["COMMIT", "data"]
    time.sleep(DAY_MS + 1000)
    plain(log, time, (b"z", b"1"))
    log.roll()
    stats = cleaner.clean(log)       # no batch of C left: the marker goes
    assert stats.markers_dropped == 1
    assert [(o, k) for o, k, _p in batches(log)] == [(2, "data"), (3, "data")]
    assert read_committed(log) == [(2, b"k", b"v2"), (3, b"z", b"1")]


def test_nothing_at_or_above_the_last_stable_offset_is_cleaned(tmp_path):
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "t-0", time, segment_bytes=200)
    a = Producer(log, time, A)
    plain(log, time, (b"k", b"v0"))
    log.roll()
    a.send((b"k", b"open"))          # 1: an open transaction from here
    log.roll()
    for i in range(5):               # committed-looking writes of the same key after it
        plain(log, time, (b"k", f"v{i + 1}".encode()))
        log.roll()
    assert log.last_stable_offset == 1
    cleaner = cleaner_for(log, time)
    stats = cleaner.clean(log)
    # only the segment below the LSO is cleanable (nothing to drop there); the open
    # transaction's batch and everything after it stays as it was
    assert stats is not None and stats.end_offset == 1
    assert [o for o, _k, _p in batches(log)] == [0, 1, 2, 3, 4, 5, 6]
    a.end(commit=False)              # 7: aborted; the LSO moves to the HW
    log.roll()
    stats = cleaner.clean(log)
    assert stats.aborted_records_dropped == 1
    assert [(o, k) for o, k, _p in batches(log)] == [(6, "data"), (7, "ABORT")]
    assert read_committed(log) == [(6, b"k", b"v5")]


def test_a_transaction_whose_marker_is_in_the_active_segment(tmp_path):
    """The data in a cleaned segment, the ABORT marker in the active one: the data goes, the
    marker's index entry (in the active segment's .txnindex) stays."""
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "t-0", time)
    a = Producer(log, time, A)
    plain(log, time, (b"k", b"committed"))
    a.send((b"k", b"aborted"))
    log.roll()
    a.end(commit=False)
    view = read_committed(log)
    assert [v for _o, _k, v in view] == [b"committed"]
    stats = cleaner_for(log, time).clean(log)
    assert stats.aborted_records_dropped == 1
    assert batches(log) == [(0, "data", -1), (2, "ABORT", A)]
    assert log.txn_index.segment_entries(log.segments[-1].base_offset) == [AbortedTxn(A, 1, 2, 3)]
    assert read_committed(log) == view


def test_the_cleaned_segments_txn_index_is_durable_when_the_swap_is(tmp_path, monkeypatch):
    """The swap writes the cleaned segment's .txnindex as a new file (a new inode under the old
    name) and removes the old segments' files: that file is fsynced with the swap, as the
    cleaned log is. Written unsynced, a power loss before the next flush took it while the swap
    itself was durable: the ABORT marker kept below the recovery point had no entry left, and a
    read_committed fetch was handed the aborted records."""
    import os

    from storage import fileio
    durable: dict[int, int] = {}  # inode -> its size at its last fsync (renames keep the inode)
    real = fileio.fsync

    def fsync(fd: int) -> None:
        real(fd)
        st = os.fstat(fd)
        durable[st.st_ino] = st.st_size
    monkeypatch.setattr(fileio, "fsync", fsync)
    time = MockTime(start_ms=START_MS)
    log = open_compacted(tmp_path / "t-0", time)
    a, b = Producer(log, time, A), Producer(log, time, B)
    plain(log, time, (b"k1", b"old1"), (b"k2", b"old2"))  # 0-1
    a.send((b"k1", b"aborted1"))                          # 2: A, aborted below
    b.send((b"k3", b"committed3"))                        # 3
    a.send((b"k2", b"aborted2"))                          # 4
    a.end(commit=False)                                   # 5: ABORT
    b.end(commit=True)                                    # 6: COMMIT
    log.roll()
    plain(log, time, (b"k5", b"x"))                       # 7: the second segment
    log.roll()
    log.flush()
    recovery_point = log.recovery_point
    assert recovery_point == log.log_end_offset
    view = read_committed(log)
    # from here on only what is fsynced survives: the old inodes' fsyncs do not cover new files
    durable.clear()
    stats = cleaner_for(log, time).clean(log)
    assert stats.aborted_records_dropped == 2
    assert log.txn_index.entries == [AbortedTxn(A, 2, 5, 3)]
    for segment in log.segments:                          # a power loss: no close, no flush
        segment.close()
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith(".txnindex"):
            path = tmp_path / "t-0" / name
            os.truncate(path, durable.get(os.stat(path).st_ino, 0))
    reopened = Log.open(tmp_path / "t-0", LogConfig(cleanup_policy="compact", segment_bytes=100_000),
                        time=time, recovery_point=recovery_point, had_clean_shutdown=False)
    assert reopened.txn_index.entries == [AbortedTxn(A, 2, 5, 3)]
    reopened.update_high_watermark(reopened.log_end_offset)
    assert read_committed(reopened) == view
    reopened.close()
