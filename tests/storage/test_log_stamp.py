"""Log.append_as_leader's compiled common case (storage/_record_walk.c's ``stamp``, through
``log_validator.stamp_batch``) against the Python path it short-cuts, which stays the reference:
the same log bytes, offsets, append info, producer state and errors on well-formed, mutated,
cut, corrupt and odd batches (CRC, magic, producer sequence and epoch, too large, timestamps)."""

from __future__ import annotations

import random
import struct
import tempfile
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.clock import MockTime
from protocol.errors import KafkaError
from protocol.records import Record, build_batch
from storage import Log, LogConfig, log as log_module, log_validator

START_MS = 1_700_000_000_000


def _records(rng: random.Random, n: int) -> list[Record]:
    return [Record(key=b"k" if rng.random() < 0.7 else None, value=rng.randbytes(rng.choice([0, 5, 70, 300])),
                   headers=[("h", b"x")] if rng.random() < 0.2 else [], timestamp=START_MS + rng.randrange(0, 20000))
            for _ in range(n)]


def _outcome(root: Path, config: LogConfig, earlier: list[bytes], data: bytes, epoch: int, readonly: bool,
             from_coordinator: bool):
    """Append ``earlier`` then ``data`` as leader to a new log: (what the last append returned
    or raised, the log's bytes, its end offset, the producer's state)."""
    time = MockTime(START_MS + 50_000)
    log = Log.open(root, LogConfig(), time=time)
    try:
        for b in earlier:
            log.append_as_leader(bytearray(b), epoch)
        log.update_config(config)
        try:
            info = log.append_as_leader(bytes(data) if readonly else bytearray(data), epoch, from_coordinator)
            result: object = (info.first_offset, info.last_offset, info.max_timestamp, info.offset_of_max_timestamp,
                              info.log_append_time, info.record_count, info.valid_bytes, info.batch_count,
                              [tuple(h) for h in info.batches], info.duplicate)
        except KafkaError as exc:
            result = (type(exc).__name__, int(exc.error_code), str(exc))
        entry = log.producer_state.last_entry(7)
        state = None if entry is None else (entry.producer_epoch, entry.last_seq, entry.last_offset,
                                           entry.current_txn_first_offset)
        written = log.read(log.log_start_offset, 10**7)
        return result, bytes(written.records) if written.records is not None else b"", log.log_end_offset, state
    finally:
        log.close()


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 6), batches=st.sampled_from([1, 1, 1, 2]),
       earlier=st.integers(0, 2), epoch=st.sampled_from([0, 3]),
       producer=st.sampled_from([(-1, -1, -1), (7, 0, None), (7, 0, 0), (7, 0, 99), (7, 1, 0), (7, 0, -1)]),
       transactional=st.booleans(), control=st.booleans(), append_time_type=st.booleans(),
       codec=st.sampled_from([0, 0, 0, 1]), base_offset=st.sampled_from([0, 0, 0, 5]),
       flips=st.lists(st.tuples(st.integers(0, 10**5), st.integers(0, 255)), max_size=2),
       crc_flip=st.booleans(), magic=st.sampled_from([2, 2, 2, 1, 3]), stale_max_timestamp=st.booleans(),
       cut=st.sampled_from([0, 0, 0, -1, -30, 2]), max_message_bytes=st.sampled_from([10**6, 10**6, 200]),
       timestamp_type=st.sampled_from(["CreateTime", "CreateTime", "LogAppendTime"]),
       compression_type=st.sampled_from(["producer", "producer", "uncompressed", "gzip"]),
       compact=st.booleans(), readonly=st.booleans(), from_coordinator=st.sampled_from([False, False, True]))
def test_the_compiled_stamp_appends_as_the_python_path(
        seed, n, batches, earlier, epoch, producer, transactional, control, append_time_type, codec, base_offset,
        flips, crc_flip, magic, stale_max_timestamp, cut, max_message_bytes, timestamp_type, compression_type,
        compact, readonly, from_coordinator):
    rng = random.Random(seed)
    pid, pepoch, seq = producer
    # the producer's earlier batches: sequences 0, n, 2n, ...; None: the next one (in order)
    before = [build_batch(_records(rng, n), producer_id=pid, producer_epoch=0, base_sequence=i * n if pid >= 0 else -1)
              for i in range(earlier)]
    if seq is None:
        seq = earlier * n
    data = bytearray()
    for _ in range(batches):
        batch = bytearray(build_batch(_records(rng, n), base_offset=base_offset, compression=codec, producer_id=pid,
                                      producer_epoch=pepoch, base_sequence=seq, transactional=transactional,
                                      control=control, timestamp_type=1 if append_time_type else 0))
        if magic != 2:
            batch[16] = magic
        if stale_max_timestamp:  # a CreateTime maxTimestamp that is not the records' largest (CRC redone)
            struct.pack_into(">q", batch, 35, 5)
            struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
        if crc_flip:
            batch[17] ^= 0x01
        data += batch
    for where, value in flips:
        data[where % len(data)] = value
    data = data[:max(1, len(data) + cut)] if cut < 0 else data + bytes(cut)
    config = LogConfig(max_message_bytes=max_message_bytes, message_timestamp_type=timestamp_type,
                       compression_type=compression_type, cleanup_policy="compact" if compact else "delete")
    with tempfile.TemporaryDirectory(prefix="kbroker-stamp-") as tmp:
        compiled = _outcome(Path(tmp) / "a" / "t-0", config, before, data, epoch, readonly, from_coordinator)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(log_module, "stamp_batch", None)
            python = _outcome(Path(tmp) / "b" / "t-0", config, before, data, epoch, readonly, from_coordinator)
    assert compiled[0] == python[0]
    assert compiled[1:] == python[1:]


def test_a_producers_request_takes_the_compiled_stamp(tmp_path, monkeypatch):
    """The produce path's common batch (one per partition, uncompressed, CreateTime) is appended
    by one compiled call, idempotent or not; one it would not take (LogAppendTime) goes the
    Python way."""
    assert log_validator.COMPILED and log_module.stamp_batch is not None, "run `make test-deps`"
    calls = []
    real = log_module.stamp_batch

    def counted(*args):
        calls.append(out := real(*args))
        return out

    monkeypatch.setattr(log_module, "stamp_batch", counted)
    log = Log.open(tmp_path / "t-0", LogConfig(), time=MockTime(START_MS))
    records = [Record(value=b"v" * 100, timestamp=START_MS + i) for i in range(148)]
    info = log.append_as_leader(bytearray(build_batch(records)), 4)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 147, 148)
    info = log.append_as_leader(build_batch(records, producer_id=7, producer_epoch=0, base_sequence=0), 4)
    assert (info.first_offset, info.last_offset) == (148, 295)
    assert [h.base_offset for h in calls] == [0, 148] and all(h.partition_leader_epoch == 4 for h in calls)
    assert log.producer_state.last_entry(7).last_seq == 147
    log.close()
    calls.clear()
    append_time = Log.open(tmp_path / "t-1", LogConfig(message_timestamp_type="LogAppendTime"), time=MockTime(START_MS))
    append_time.append_as_leader(bytearray(build_batch(records)), 0)
    assert calls == []
    append_time.close()


def test_stamp_leaves_what_it_does_not_take_untouched():
    """None from ``stamp`` means the buffer is as it was: the Python path then reads it whole."""
    good = bytearray(build_batch([Record(value=b"v", timestamp=START_MS)] * 3))
    for broken in (good[:-1], good + b"\x00", bytearray(good[:17]) + b"\x07" + good[18:]):
        before = bytes(broken)
        assert log_validator.stamp_batch(broken, 10**6, False, False, 42, 1) is None
        assert bytes(broken) == before
    header = log_validator.stamp_batch(good, 10**6, False, False, 42, 1)
    assert (header.base_offset, header.partition_leader_epoch) == (42, 1)
    assert struct.unpack_from(">qii", good, 0)[::2] == (42, 1)
