"""Log._append_stamped's common case (one batch stamped at the LEO, appended to an active segment
it does not roll, in one function) against the general path it short-cuts (``_append_info``,
``_append``: LogSegment.should_roll, append and _index_batch; ``_maybe_assign_epoch``), which
stays the reference: the same append info, log and index bytes, segment bookkeeping, LEO,
recovery point and epochs after every append, and the same files once closed, over batch sizes,
timestamps, epochs and settings that roll segments (bytes, time, full indexes) and add index
entries."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Callable

from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.clock import MockTime
from protocol.errors import KafkaError
from protocol.records import Record, build_batch
from storage import Log, LogConfig
from storage.segment_budget import OpenSegmentBudget

START_MS = 1_700_000_000_000


def _state(log: Log) -> tuple:
    segments = []
    for s in log.segments:
        offset_index, time_index = s._offset_index, s._time_index
        segments.append((s.base_offset, s.size, s.active, s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far,
                         s.bytes_since_last_index_entry, s.rolling_based_timestamp, s._tail_offset, s._tail_position,
                         None if offset_index is None else (bytes(offset_index._buf), offset_index.last),
                         None if time_index is None else (bytes(time_index._buf), time_index.last)))
    return (log.log_end_offset, log.recovery_point, log.log_start_offset,
            [tuple(e) for e in log.leader_epoch_cache.entries()], segments)


def _info(info) -> tuple:
    return (info.first_offset, info.last_offset, info.max_timestamp, info.offset_of_max_timestamp,
            info.log_append_time, info.record_count, info.valid_bytes, info.batch_count,
            [tuple(h) for h in info.batches], info.duplicate)


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


def _assert_fast_path_writes_as_the_general_path(prefix: str, config: LogConfig, small_budget: bool,
                                                 appends: list[tuple[int, Callable[[Log], object]]],
                                                 producers: Callable[[Log], object] | None = None) -> None:
    """Each append ((ms the clock moves first, the call)) on a log with the fast path and on one
    without: the same info or error and log state after each (and ``producers``' view of the
    producer state), and the same files at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        outcomes = []
        for fast in (True, False):
            root = Path(tmp) / ("fast" if fast else "general") / "t-0"
            time = MockTime(START_MS)
            budget = OpenSegmentBudget(1) if small_budget else None
            log = Log.open(root, config, time=time, budget=budget)
            log.fast_append = fast
            steps = []
            try:
                for advance, append in appends:
                    time.sleep(advance)
                    try:
                        result: object = _info(append(log))
                    except KafkaError as exc:  # a batch over segment.bytes, and the sequences after it
                        result = (type(exc).__name__, str(exc))
                    steps.append((result, _state(log), producers(log) if producers is not None else None))
            finally:
                log.close()
            outcomes.append((steps, _files(root)))
        fast_outcome, general_outcome = outcomes
        for step, (fast_step, general_step) in enumerate(zip(fast_outcome[0], general_outcome[0])):
            assert fast_step == general_step, f"append {step}"
        assert fast_outcome[1] == general_outcome[1]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), appends=st.integers(1, 40),
       segment_bytes=st.sampled_from([2_000, 6_000, 30_000, 10**9]),
       index_interval_bytes=st.sampled_from([0, 300, 1_500, 4096]),
       segment_index_bytes=st.sampled_from([24, 36, 120, 10 * 2**20]),
       segment_ms=st.sampled_from([500, 5_000, 604_800_000]),
       flush_messages=st.sampled_from([7, 10**9]), idempotent=st.booleans(), small_budget=st.booleans())
def test_the_fast_append_writes_as_the_general_path(seed, appends, segment_bytes, index_interval_bytes,
                                                    segment_index_bytes, segment_ms, flush_messages, idempotent,
                                                    small_budget):
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes,
                       segment_index_bytes=segment_index_bytes, segment_ms=segment_ms, flush_messages=flush_messages)
    requests = []
    ts = START_MS
    sequence = 0
    for _ in range(appends):
        n = rng.choice([1, 1, 3, 10, 40])
        records = []
        for _ in range(n):
            ts += rng.choice([0, 1, 7, 300, 3_000, -50])  # timestamps that go back too (the max is per batch)
            records.append(Record(key=None, value=rng.randbytes(rng.choice([0, 10, 100, 700])), timestamp=ts))
        batch = build_batch(records, producer_id=5 if idempotent else -1, producer_epoch=0,
                            base_sequence=sequence if idempotent else -1)
        sequence += n
        epoch = rng.choice([0, 0, 0, 1, 2]) + len(requests) // 10  # epochs that grow now and then
        requests.append((batch, epoch, rng.choice([0, 0, 10, 2_000])))
    _assert_fast_path_writes_as_the_general_path(
        "kbroker-fast-append-", config, small_budget,
        [(advance, lambda log, b=batch, e=epoch: log.append_as_leader(bytearray(b), e))
         for batch, epoch, advance in requests])


def test_the_common_appends_take_the_fast_path(tmp_path, monkeypatch):
    """One stamped batch to a written active segment that does not roll (with an index entry
    and without) never reaches the general ``_append``; a rolling one does."""
    general = []
    real = Log._append
    monkeypatch.setattr(Log, "_append", lambda self, *args: (general.append(args[2].first_offset), real(self, *args)))
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=4096, segment_bytes=60_000),
                   time=MockTime(START_MS))
    try:
        small = [Record(value=b"v" * 10, timestamp=START_MS + i) for i in range(3)]
        large = [Record(value=b"v" * 100, timestamp=START_MS + i) for i in range(148)]  # 16 KiB: an index entry each
        log.append_as_leader(bytearray(build_batch(small)), 0)  # the first batch of an empty segment: general
        log.append_as_leader(bytearray(build_batch(small)), 0)
        log.append_as_leader(bytearray(build_batch(large)), 0)
        log.append_as_leader(bytearray(build_batch(large)), 0)
        assert log.segments[-1].offset_index.entries == 1  # the second large batch came after > 4096 bytes
        log.append_as_leader(bytearray(build_batch(large)), 1)
        assert general == [0]
        assert log.leader_epoch_cache.latest_epoch() == 1
        log.append_as_leader(bytearray(build_batch(large)), 1)  # a fourth 16 KiB batch > 60,000 bytes: rolls
        assert general == [0, 450] and len(log.segments) == 2
    finally:
        log.close()


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32), appends=st.integers(1, 40),
       segment_bytes=st.sampled_from([2_000, 6_000, 30_000, 10**9]),
       index_interval_bytes=st.sampled_from([0, 300, 1_500, 4096]),
       segment_index_bytes=st.sampled_from([24, 36, 120, 10 * 2**20]),
       segment_ms=st.sampled_from([500, 5_000, 604_800_000]),
       flush_messages=st.sampled_from([7, 10**9]), idempotent=st.booleans(), compact=st.booleans(),
       small_budget=st.booleans())
def test_a_followers_one_batch_appends_as_the_general_path(seed, appends, segment_bytes, index_interval_bytes,
                                                           segment_index_bytes, segment_ms, flush_messages, idempotent,
                                                           compact, small_budget):
    """append_as_follower's one-batch way (its offset check, then _append_stamped with the batch's
    own epoch, then the producer state) against its loop over batches and the general append: the
    same info or error, state, producer state and files. Batches carry the leader's offsets and
    epochs (some of them -1), and now and then one starts past the LEO (a compacted log's gap:
    taken; else OffsetsOutOfOrderError) or below it (refused either way); now and then one is
    damaged (its CRC, its magic, cut short, a length past its end: refused by both ways), holds
    fewer records than offsets (a compacted log's batch: refused unless compacted) or two
    batches come (the general way in both)."""
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes,
                       segment_index_bytes=segment_index_bytes, segment_ms=segment_ms, flush_messages=flush_messages,
                       cleanup_policy="compact" if compact else "delete")
    fetched = []
    ts = START_MS
    offset = sequence = 0
    epoch = 0
    for _ in range(appends):
        n = rng.choice([1, 1, 3, 10, 40])
        records = [Record(key=b"k", value=rng.randbytes(rng.choice([0, 10, 100, 700])), timestamp=ts + i)
                   for i in range(n)]
        ts += rng.choice([0, 1, 300, 3_000, -50])
        epoch += rng.choice([0, 0, 0, 1])
        base = offset + rng.choice([0, 0, 0, 0, 0, 0, 2, -1])
        batch = build_batch(records, base_offset=max(0, base), producer_id=5 if idempotent else -1,
                            producer_epoch=0, base_sequence=sequence if idempotent else -1,
                            partition_leader_epoch=rng.choice([epoch, epoch, -1]))
        defect = rng.choice([None] * 10 + ["crc", "magic", "cut", "longer", "two", "compacted"])
        if defect is not None:  # refused by both ways (else both take it: two batches)
            damaged = bytearray(batch)
            if defect == "crc":
                damaged[-1] ^= 1
            elif defect == "magic":
                damaged[16] = 1
            elif defect == "cut":
                del damaged[-1]
            elif defect == "compacted":  # an offset more than records (compaction's; else INVALID_RECORD)
                damaged[23:27] = n.to_bytes(4, "big")
                damaged[17:21] = crc32c(bytes(damaged[21:])).to_bytes(4, "big")
            elif defect == "longer":
                damaged[8:12] = (len(batch) - 12 + 1).to_bytes(4, "big")
            else:
                damaged += build_batch(records[:1], base_offset=max(0, base) + n, partition_leader_epoch=epoch)
            batch = bytes(damaged)
        fetched.append((batch, rng.choice([0, 0, 10, 2_000])))
        if base >= offset and defect in (None, "two", "compacted"):
            offset = base + n + (defect is not None)
            sequence += n
    _assert_fast_path_writes_as_the_general_path(
        "kbroker-fast-follower-", config, small_budget,
        [(advance, lambda log, b=batch: log.append_as_follower(memoryview(b))) for batch, advance in fetched],
        producers=lambda log: {pid: (e.producer_epoch, list(e.batches), e.last_timestamp, e.current_txn_first_offset)
                               for pid, e in log.producer_state.producers.items()})
