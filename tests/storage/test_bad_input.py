"""Bad produce input: each defect is rejected with its Kafka error code and nothing is written."""

from __future__ import annotations

import struct

import pytest
from storage_helpers import batch, check_consistent, open_log

from protocol.errors import ErrorCode, KafkaError
from protocol.records import CRC_OFFSET, LAST_OFFSET_DELTA_OFFSET, LENGTH_OFFSET, MAGIC_OFFSET, compute_crc


def patched(data: bytes, offset: int, fmt: str, value: int, fix_crc: bool = False) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    if fix_crc:
        struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


GOOD = batch(3, value_size=50)
CASES = {
    "wrong CRC": (patched(GOOD, len(GOOD) - 1, ">B", GOOD[-1] ^ 0xFF), ErrorCode.CORRUPT_MESSAGE),
    "length past the buffer": (patched(GOOD, LENGTH_OFFSET, ">i", len(GOOD)), ErrorCode.CORRUPT_MESSAGE),
    "length shorter than a header": (patched(GOOD, LENGTH_OFFSET, ">i", 10), ErrorCode.CORRUPT_MESSAGE),
    "truncated batch": (GOOD[:-5], ErrorCode.CORRUPT_MESSAGE),
    "trailing partial header": (GOOD + GOOD[:20], ErrorCode.CORRUPT_MESSAGE),
    # a client's magic 1 is INVALID_RECORD (Kafka's answer to a v3+ produce); a follower's is corruption
    "magic 1": (patched(GOOD, MAGIC_OFFSET, ">b", 1), {"leader": ErrorCode.INVALID_RECORD,
                                                      "follower": ErrorCode.CORRUPT_MESSAGE}),
    # a magic outside 0..2 is corruption for both (Kafka's batch iterator: "Invalid magic found in record")
    "magic 3": (patched(GOOD, MAGIC_OFFSET, ">b", 3), ErrorCode.CORRUPT_MESSAGE),
    "magic -1": (patched(GOOD, MAGIC_OFFSET, ">b", -1), ErrorCode.CORRUPT_MESSAGE),
    "count disagrees with lastOffsetDelta": (patched(GOOD, LAST_OFFSET_DELTA_OFFSET, ">i", 5, fix_crc=True),
                                             ErrorCode.INVALID_RECORD),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("role", ["leader", "follower"])
def test_bad_batch_rejected_and_nothing_written(tmp_path, case, role):
    data, code = CASES[case]
    if isinstance(code, dict):
        code = code[role]
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(1), 0)
    size = log.size_in_bytes()
    # the bad batch comes second: the good first one must not be written either
    prefix = batch(2) if role == "leader" else batch(2, base_offset=1)
    bad = prefix + patched(data, 0, ">q", 3) if role == "follower" else prefix + data
    with pytest.raises(KafkaError) as exc:
        if role == "leader":
            log.append_as_leader(bad, 0)
        else:
            log.append_as_follower(bad)
    assert exc.value.error_code == code, exc.value
    assert log.log_end_offset == 1 and log.size_in_bytes() == size
    check_consistent(log)


def test_batch_over_max_message_bytes(tmp_path):
    log = open_log(tmp_path / "t-0", max_message_bytes=1000)
    big = batch(1, value_size=2000)
    with pytest.raises(KafkaError) as exc:
        log.append_as_leader(batch(1) + big, 0)
    assert exc.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0 and log.size_in_bytes() == 0
    assert log.append_as_follower(batch(1, value_size=2000)).record_count == 1  # followers take it


def test_request_over_segment_bytes(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=1000)
    with pytest.raises(KafkaError) as exc:
        log.append_as_leader(batch(1, value_size=600) + batch(1, value_size=600), 0)
    assert exc.value.error_code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0 and log.size_in_bytes() == 0
