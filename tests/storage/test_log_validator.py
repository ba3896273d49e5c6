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
