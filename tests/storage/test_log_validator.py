"""storage/log_validator.py: the compiled record walk and its Python twin give the same
answer on every input (well formed, mutated, random), and the validator's rules."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode, KafkaError
from protocol.records import HEADER_SIZE, Record, build_batch, encode_record
from storage import log_validator
from storage.log_validator import WALK_OK, validate_client_batches, walk_records_py


def body_of(n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    recs = [Record(key=os.urandom(rng.randrange(0, 4)) if rng.random() < 0.5 else None,
                   value=None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 300)),
                   headers=[(f"h{j}", rng.randbytes(rng.randrange(0, 5)) if rng.random() < 0.8 else None)
                            for j in range(rng.randrange(0, 3))],
                   timestamp=1000 + rng.randrange(0, 100000)) for _ in range(n)]
    return build_batch(recs)[HEADER_SIZE:] if recs else b""


def test_the_extension_is_built():
    """make test-deps builds storage/_record_walk.c (the produce path's one per-record cost)."""
    assert log_validator.COMPILED, "storage._record_walk is not built: run `make test-deps`"


@settings(max_examples=400, deadline=None)
@given(n=st.integers(0, 20), seed=st.integers(0, 2**32), flips=st.lists(st.tuples(st.integers(0, 10**6),
                                                                               st.integers(0, 255)), max_size=4),
       cut=st.integers(-3, 3), count_skew=st.integers(-2, 2), require_key=st.booleans())
def test_compiled_and_python_walks_agree(n, seed, flips, cut, count_skew, require_key):
    body = bytearray(body_of(n, seed))
    for where, value in flips:
        if body:
            body[where % len(body)] = value
    if cut < 0:
        body = body[:max(0, len(body) + cut)]
    else:
        body += bytes(cut)
    count = max(0, n + count_skew)
    py = walk_records_py(body, 0, len(body), count, require_key)
    assert log_validator.walk_records(body, 0, len(body), count, require_key) == py
    if not flips and cut == 0 and count_skew == 0 and not require_key:
        assert py[0] == WALK_OK and py[1] == n


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400), count=st.integers(0, 2**31 - 1))
def test_random_bytes_agree(data, count):
    assert log_validator.walk_records(data, 0, len(data), count) == walk_records_py(data, 0, len(data), count)


def test_varint_edge_cases_agree():
    for body in [b"\xff" * 5 + b"\x01", b"\x80\x80\x80\x80\x10", b"\xfe\xff\xff\xff\x0f",
                 encode_record(0, 2**62, None, b"x"), encode_record(0, -(2**62), b"", b""),
                 b"\x0c\x00" + b"\xff" * 10 + b"\x00", b""]:
        for count in (0, 1, 2):
            assert log_validator.walk_records(body, 0, len(body), count) == walk_records_py(body, 0, len(body), count)


# Each varint width around its bounds: 1 byte up to |63|, 2 bytes up to |8191| (the compiled
# walk's own path for them), then the general loop.
WIDTH_EDGES = [0, 1, -1, 63, -64, 64, -65, 100, 8191, -8192, 8192, -8193, 1 << 20, -(1 << 27), 2**31 - 1]


@pytest.mark.parametrize("delta", WIDTH_EDGES)
def test_every_varint_width_agrees(delta):
    """A record's timestamp delta (varint64), value and header lengths (varint32) and length
    of each width: the same answer both ways, and the delta read back exactly."""
    for size in (0, 1, 63, 64, 200, 8191, 8192):
        body = encode_record(0, delta, None, b"v" * size, [("h" * min(size, 70), b"x" * (size // 2))])
        py = walk_records_py(body, 0, len(body), 1)
        assert log_validator.walk_records(body, 0, len(body), 1) == py == (WALK_OK, 1, delta)
        assert log_validator.walk_records(body, 0, len(body) - 1, 1) == walk_records_py(body, 0, len(body) - 1, 1)


def test_walk_reports_max_timestamp_delta():
    body = body_of(30, 7)
    status, n, delta = log_validator.walk_records(body, 0, len(body), 30)
    assert (status, n) == (WALK_OK, 30) and delta >= 0


def test_offset_window_must_be_inside_the_buffer():
    with pytest.raises(ValueError):
        log_validator.walk_records(b"abc", 0, 5, 1)
    with pytest.raises(ValueError):
        walk_records_py(b"abc", 0, 5, 1)


def test_record_count_over_what_is_present_is_refused_without_a_long_loop():
    batch = bytearray(build_batch([Record(value=b"v", timestamp=1)] * 3))
    import struct
    from crc32c import crc32c
    struct.pack_into(">i", batch, 23, 2**31 - 2)
    struct.pack_into(">i", batch, 57, 2**31 - 1)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    with pytest.raises(KafkaError) as exc:
        validate_client_batches(batch, max_message_bytes=10**6, log_append_time=False)
    assert exc.value.error_code == ErrorCode.INVALID_RECORD and "record 3" in str(exc.value)


def test_compacted_topics_need_keys():
    keyed = bytearray(build_batch([Record(key=b"k", value=b"v", timestamp=1)] * 2))
    validate_client_batches(keyed, max_message_bytes=10**6, log_append_time=False, require_keys=True)
    keyless = bytearray(build_batch([Record(key=b"k", value=b"v", timestamp=1), Record(value=b"v", timestamp=1)]))
    validate_client_batches(bytearray(keyless), max_message_bytes=10**6, log_append_time=False)
    with pytest.raises(KafkaError) as exc:
        validate_client_batches(keyless, max_message_bytes=10**6, log_append_time=False, require_keys=True)
    # Kafka's RecordValidationException: each keyless record by its index in the batch.
    assert exc.value.error_code == ErrorCode.INVALID_RECORD and "batchIndex=1" in str(exc.value)
    assert [(i, "without key" in m) for i, m in exc.value.record_errors] == [(1, True)]


def _validated(buf: bytearray, **kwargs):
    """validate_client_batches' outcome: (the buffer as patched, its batches) or the error."""
    try:
        out, batches = validate_client_batches(buf, **kwargs)
    except KafkaError as exc:
        return type(exc), str(exc), bytes(buf)
    return bytes(out), batches


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 6), batches=st.integers(1, 3),
       producer=st.sampled_from([(-1, -1, -1), (7, 0, 0), (7, 0, -1)]), transactional=st.booleans(),
       control=st.booleans(), append_time_type=st.booleans(), codec=st.sampled_from([0, 0, 0, 1]),
       base_offset=st.sampled_from([0, 0, 5]),
       flips=st.lists(st.tuples(st.integers(0, 10**5), st.integers(0, 255)), max_size=2),
       stale_max_timestamp=st.booleans(), cut=st.integers(-2, 2), max_message_bytes=st.sampled_from([10**6, 200]),
       log_append_time=st.booleans(), require_keys=st.booleans(), from_coordinator=st.booleans(),
       target_codec=st.sampled_from([None, 0, 1]))
def test_accepted_batches_validate_as_without_the_compiled_accept(
        seed, n, batches, producer, transactional, control, append_time_type, codec, base_offset, flips,
        stale_max_timestamp, cut, max_message_bytes, log_append_time, require_keys, from_coordinator, target_codec):
    """storage/_record_walk.c's ``accept`` decides a whole batch in one call: what it accepts must
    validate exactly as the Python checks alone validate it (same buffer, headers and errors),
    on well-formed, mutated, cut and odd batches (producer fields, control, LogAppendTime,
    a maxTimestamp that is not the records' largest, a compressed one)."""
    import struct

    from crc32c import crc32c

    rng = random.Random(seed)
    data = bytearray()
    for b in range(batches):
        recs = [Record(key=b"k" if rng.random() < 0.7 else None, value=rng.randbytes(rng.choice([0, 5, 70, 300])),
                       timestamp=1000 + rng.randrange(0, 20000)) for _ in range(n)]
        batch = bytearray(build_batch(recs, base_offset=base_offset, compression=codec, producer_id=producer[0],
                                      producer_epoch=producer[1], base_sequence=producer[2],
                                      transactional=transactional, control=control,
                                      timestamp_type=1 if append_time_type else 0))
        if stale_max_timestamp:  # a CreateTime maxTimestamp that is not the records' largest (CRC redone)
            struct.pack_into(">q", batch, 35, 5)
            struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
        data += batch
    for where, value in flips:
        data[where % len(data)] = value
    data = data[:len(data) + cut] if cut < 0 else data + bytes(cut)
    kwargs = dict(max_message_bytes=max_message_bytes, log_append_time=log_append_time, target_codec=target_codec,
                  require_keys=require_keys, where="t-0", from_coordinator=from_coordinator)
    compiled = _validated(bytearray(data), **kwargs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(log_validator, "accept_batch", None)
        assert compiled == _validated(bytearray(data), **kwargs)


def test_a_plain_client_batch_is_accepted_in_one_call():
    """The produce path's common batch (uncompressed, CreateTime, no producer) takes the compiled
    accept, and one the checks would rewrite does not."""
    batch = bytearray(build_batch([Record(value=b"v" * 100, timestamp=1000 + i) for i in range(148)]))
    accepted = log_validator.accept_batch(batch, 0, len(batch), 10**6, False, False, False)
    assert accepted is not None and accepted[1] == len(batch)
    assert tuple(accepted[0]) == tuple(log_validator.read_header(batch, 0))
    claims_append_time = bytearray(build_batch([Record(value=b"v", timestamp=1)], timestamp_type=1))
    assert log_validator.accept_batch(claims_append_time, 0, len(claims_append_time), 10**6, False, False, False) is None
