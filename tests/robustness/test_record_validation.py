"""Kafka's LogValidator over real sockets: every batch a client produces is decoded and
checked before anything is written. Each case below was acknowledged with error 0 and
written before (issue 12 §1); now it gets Kafka's error code and one log line, nothing of it
reaches the log, other partitions of the same request are served, and a real consumer
reads the topic afterwards."""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import NamedTuple

import pytest

from protocol.api_keys import ApiKey
from protocol.client import KafkaClient
from protocol.compression import Compression, compress
from protocol.errors import ErrorCode
from protocol.records import (CONTROL_MASK, HEADER_SIZE, MAGIC_OFFSET, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, Record,
                              build_batch, encode_record, encode_varint, read_header)
from tests.compat.helpers import create_topic
from tests.support import ThreadedBroker

from .frames import good_batch, read_log, rebuilt

INVALID_RECORD = ErrorCode.INVALID_RECORD
TOPIC = "validated"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = ThreadedBroker(tmp_path_factory.mktemp("validation") / "data",
                       overrides={"listeners": "PLAINTEXT://127.0.0.1:0"}).start()
    create_topic(b, TOPIC, partitions=2)
    yield b
    b.stop()


def log_dir(broker):
    return broker.server.config.log_dirs[0]


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("kbroker") and r.levelno >= logging.WARNING]


def record(i: int, value: bytes = b"x" * 10, key: bytes | None = None, headers=()) -> bytes:
    return encode_record(i, i, key, value, headers)


def garbage_records(seed: int) -> bytes:
    """A records section that starts well and then turns to random bytes."""
    rng = random.Random(seed)
    return record(0) + bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 200)))


class Case(NamedTuple):
    records: bytes
    code: int
    why: str  # the check of Kafka's that gives this code (kbroker's where it differs, said so)


CORRUPT = ErrorCode.CORRUPT_MESSAGE
INVALID_TIMESTAMP = ErrorCode.INVALID_TIMESTAMP
BASE = good_batch(3)
NEXT = "validateRecords, the batch iterator's hasNext() for a second batch"
# What each hostile batch for partition 0 is answered (partition 1 of the same request gets a good
# batch and is written), and why, after Kafka's KafkaApis.handleProduceRequest ->
# ProduceRequest.validateRecords (reading batches with ByteBufferLogInputStream) ->
# UnifiedLog.analyzeAndValidateRecords -> LogValidator. Every batch has a correct CRC unless the
# case is about it. The first batch's header is read before all of it (RequestUtils.hasTransac-
# tionalRecords): a corrupt one there fails the whole request, see REQUEST_CASES.
CASES = {
    # -- ByteBufferLogInputStream yields no batch: validateRecords' "must have at least one record batch"
    "empty records": Case(b"", INVALID_RECORD, "no batch"),
    "11 bytes: not even a batchLength": Case(BASE[:11], INVALID_RECORD, "no batch: under LOG_OVERHEAD (12)"),
    "records shorter than their batchLength": Case(BASE[:-5], INVALID_RECORD, "no batch: fewer bytes than it claims"),
    "16 bytes of a magic-3 batch": Case(rebuilt(BASE, magic=3)[:16], INVALID_RECORD,
                                        "no batch: the magic (byte 16) is read from 17 bytes on"),
    "magic 1, shorter than its batchLength": Case(BASE[:MAGIC_OFFSET] + b"\x01" + b"\x00" * 20, INVALID_RECORD,
                                                  "no batch"),
    # -- validateRecords on the first batch
    "magic 1": Case(rebuilt(BASE, magic=1), INVALID_RECORD, "validateRecords: only magic 2 from Produce v3"),
    "magic 0": Case(rebuilt(BASE, magic=0), INVALID_RECORD, "validateRecords: only magic 2 from Produce v3"),
    "two batches for one partition": Case(good_batch(2) + good_batch(2), INVALID_RECORD,
                                          "validateRecords: exactly one batch per partition"),
    "a batch, then a second header with magic 3": Case(good_batch(2) + rebuilt(BASE, magic=3), CORRUPT,
                                                       f"{NEXT}: Invalid magic found in record"),
    "a batch, then 16 bytes whose batchLength is 13": Case(good_batch(2) + rebuilt(BASE, batch_length=13)[:16], CORRUPT,
                                                           f"{NEXT}: Record size 13 is less than 14"),
    # -- UnifiedLog.analyzeAndValidateRecords, in its order
    "baseOffset 5": Case(rebuilt(BASE, base_offset=5), INVALID_RECORD, "analyze: a client's baseOffset must be 0"),
    "batchLength 30: magic 2, shorter than a v2 header": Case(rebuilt(BASE, batch_length=30)[:42], CORRUPT,
                                                             "analyze: isValid() needs 61 bytes"),
    "wrong CRC": Case(rebuilt(BASE, fix_crc=False, base_timestamp=5), CORRUPT, "analyze: isValid(), the CRC"),
    # -- LogValidator.validateBatch
    "count 2^31-1 over three records": Case(rebuilt(BASE, records_count=2**31 - 1, last_offset_delta=2**31 - 2),
                                            INVALID_RECORD, "validateBatch agrees; the records are fewer (readFrom)"),
    "count 5 over three records": Case(rebuilt(BASE, records_count=5, last_offset_delta=4), INVALID_RECORD,
                                       "records: premature EOF"),
    "count 2 over three records": Case(rebuilt(BASE, records_count=2, last_offset_delta=1), INVALID_RECORD,
                                       "records: bytes left after the last (incorrect declared batch size)"),
    "count disagrees with lastOffsetDelta": Case(rebuilt(BASE, last_offset_delta=7), INVALID_RECORD,
                                                 "validateBatch: inconsistent offset range and count"),
    "lastOffsetDelta -1, count 0": Case(rebuilt(BASE, last_offset_delta=-1, records_count=0), INVALID_RECORD,
                                        "validateBatch: invalid offset range"),
    "control batch": Case(rebuilt(BASE, attributes=CONTROL_MASK), INVALID_RECORD,
                          "validateBatch: clients may not write control records"),
    "producer id without a sequence": Case(rebuilt(BASE, producer_id=7, producer_epoch=0, base_sequence=-1),
                                           INVALID_RECORD, "validateBatch: invalid sequence number"),
    # -- the records (DefaultRecord.readFrom): "Found invalid record structure" and kin
    "varint of eleven 0xff bytes": Case(rebuilt(BASE, body=record(0) + b"\xff" * 11, records_count=2,
                                                last_offset_delta=1), INVALID_RECORD, "records"),
    "negative record length": Case(rebuilt(BASE, body=encode_varint(-5) + record(1), records_count=2,
                                           last_offset_delta=1), INVALID_RECORD, "records"),
    "header count -59": Case(rebuilt(BASE, body=encode_varint(7) + b"\x00\x00\x00\x01\x01" + encode_varint(-59) + b"\x00",
                                     records_count=1, last_offset_delta=0), INVALID_RECORD, "records"),
    "negative key length -7": Case(rebuilt(BASE, body=encode_varint(6) + b"\x00\x00\x00" + encode_varint(-7) + b"\x01\x00",
                                           records_count=1, last_offset_delta=0), INVALID_RECORD,
                                   "kbroker is stricter: Kafka reads a length below -1 as null"),
    "negative header key length": Case(rebuilt(BASE, body=encode_varint(8) + b"\x00\x00\x00\x01\x01\x02"
                                               + encode_varint(-3) + b"\x01", records_count=1, last_offset_delta=0),
                                       INVALID_RECORD, "records: invalid negative header key size"),
    "record length past its fields": Case(rebuilt(BASE, body=encode_varint(9) + record(0)[1:] + b"\x00\x00",
                                                  records_count=1, last_offset_delta=0), INVALID_RECORD, "records"),
    "bytes after the declared records": Case(rebuilt(BASE, body=record(0) + record(1) + b"\x00",
                                                     records_count=2, last_offset_delta=1), INVALID_RECORD,
                                             "records: incorrect declared batch size"),
    "offset deltas 0, 5": Case(rebuilt(BASE, body=record(0) + encode_record(5, 0, None, b"y", ()),
                                       records_count=2, last_offset_delta=1), INVALID_RECORD,
                               "kbroker is stricter: Kafka stores or renumbers them"),
    "random bytes after one record (seed 1)": Case(rebuilt(BASE, body=garbage_records(1), records_count=3,
                                                           last_offset_delta=2), INVALID_RECORD, "records"),
    "random bytes after one record (seed 2)": Case(rebuilt(BASE, body=garbage_records(2), records_count=3,
                                                           last_offset_delta=2), INVALID_RECORD, "records"),
    # -- compression. Where the payload cannot be decompressed (or the codec id is 5-7) Kafka's
    # KafkaException (IllegalArgumentException) escapes as UNKNOWN_SERVER_ERROR; kbroker answers
    # INVALID_RECORD: the batch is at fault, not the broker. A stream cut short is EOF: INVALID_RECORD in both.
    "gzip attribute, plain payload": Case(rebuilt(BASE, attributes=int(Compression.GZIP)), INVALID_RECORD,
                                          "kbroker: not gzip (Kafka: UNKNOWN_SERVER_ERROR)"),
    "zstd attribute, plain payload": Case(rebuilt(BASE, attributes=int(Compression.ZSTD)), INVALID_RECORD,
                                          "kbroker: not zstd (Kafka: UNKNOWN_SERVER_ERROR)"),
    "lz4 attribute, gzip payload": Case(rebuilt(BASE, attributes=int(Compression.LZ4),
                                                body=compress(Compression.GZIP, BASE[HEADER_SIZE:])), INVALID_RECORD,
                                        "kbroker: not lz4 (Kafka: UNKNOWN_SERVER_ERROR)"),
    "gzip of garbage records": Case(rebuilt(BASE, attributes=int(Compression.GZIP),
                                            body=compress(Compression.GZIP, garbage_records(3))), INVALID_RECORD,
                                    "records"),
    "codec id 6": Case(rebuilt(BASE, attributes=6), INVALID_RECORD,
                       "kbroker: no such codec (Kafka: CompressionType.forId throws, UNKNOWN_SERVER_ERROR)"),
    # -- LogValidator.validateTimestamp
    "LogAppendTime claimed, maxTimestamp -1": Case(rebuilt(BASE, attributes=TIMESTAMP_TYPE_MASK, max_timestamp=-1),
                                                   INVALID_TIMESTAMP, "producers should not set LogAppendTime"),
}
# A corrupt header of a partition's first batch fails the whole request with CORRUPT_MESSAGE
# (RequestUtils.hasTransactionalRecords reads it first; KafkaApis' handleError answers every partition).
REQUEST_CASES = {
    "magic 3": (rebuilt(BASE, magic=3), "Invalid magic found in record: 3"),
    "magic 127": (rebuilt(BASE, magic=127), "Invalid magic found in record: 127"),
    "magic -1 (0xff)": (rebuilt(BASE, magic=-1), "Invalid magic found in record: -1"),
    "magic -128": (rebuilt(BASE, magic=-128), "Invalid magic found in record: -128"),
    "magic 3, batch cut short (17 bytes are enough)": (rebuilt(BASE, magic=3)[:30], "Invalid magic found in record: 3"),
    "batchLength 13": (rebuilt(BASE, batch_length=13), "Record size 13 is less than the minimum record overhead (14)"),
    "batchLength -1, 12 bytes": (rebuilt(BASE, batch_length=-1)[:12],
                                 "Record size -1 is less than the minimum record overhead (14)"),
}
# A tail that is no batch after the one batch is cut off and the batch written (trimInvalidBytes).
TAIL_CASES = {
    "11 bytes": b"\x00" * 11,
    "a second batch cut short": good_batch(2)[:-1],
    "16 bytes of a magic-3 batch": rebuilt(BASE, magic=3)[:16],
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_batch_is_refused_and_the_other_partition_is_written(broker, raw, caplog, case):
    records, expected, _why = CASES[case]
    before = read_log(log_dir(broker), TOPIC, 0)
    leo1 = sum(len(r) for _, r in read_log(log_dir(broker), TOPIC, 1))
    caplog.clear()
    errors = raw.produce({(TOPIC, 0): records, (TOPIC, 1): good_batch(2)})
    assert errors == {(TOPIC, 0): expected, (TOPIC, 1): 0}
    lines = [w for w in warnings(caplog) if f"{TOPIC}-0" in w]
    assert len(lines) == 1, lines  # one log line, naming the partition and the code
    assert ErrorCode(expected).name in lines[0]
    assert read_log(log_dir(broker), TOPIC, 0) == before  # nothing of it reached the log
    after1 = read_log(log_dir(broker), TOPIC, 1)
    assert sum(len(r) for _, r in after1) == leo1 + 2 and after1[-1][0] == leo1
    # the connection stays usable: a good batch to the same partition goes in at the next offset
    assert raw.produce({(TOPIC, 0): good_batch(1)}) == {(TOPIC, 0): 0}
    got = read_log(log_dir(broker), TOPIC, 0)
    assert got[:-1] == before and got[-1][0] == sum(len(r) for _, r in before)


@pytest.mark.parametrize("case", list(REQUEST_CASES))
def test_a_corrupt_first_batch_header_fails_the_whole_request(broker, raw, caplog, case):
    """Issue 24 §3: magic 3 was INVALID_RECORD for its partition alone; Kafka reads every
    partition's first batch header before anything else, and a corrupt one is CORRUPT_MESSAGE
    for the whole request (each partition, Kafka's message in v8), nothing written."""
    records, message = REQUEST_CASES[case]
    before = [read_log(log_dir(broker), TOPIC, p) for p in (0, 1)]
    caplog.clear()
    answers = raw.produce_answers({(TOPIC, 1): good_batch(2), (TOPIC, 0): records})
    assert {k: (a.error_code, a.error_message) for k, a in answers.items()} == {
        (TOPIC, 0): (CORRUPT, message), (TOPIC, 1): (CORRUPT, message)}
    assert [read_log(log_dir(broker), TOPIC, p) for p in (0, 1)] == before
    assert [w for w in warnings(caplog) if "CORRUPT_MESSAGE" in w] == [w for w in warnings(caplog)]
    assert len(warnings(caplog)) == 1 and message in warnings(caplog)[0]


def test_the_first_header_read_decides_between_corrupt_and_transactional(broker, raw):
    """hasTransactionalRecords stops at the first transactional batch; a corrupt header read
    before it fails the request as corrupt, one after it is never read."""
    txn = rebuilt(BASE, attributes=TRANSACTIONAL_MASK, producer_id=1, producer_epoch=0, base_sequence=0)
    corrupt = rebuilt(BASE, magic=3)
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert raw.produce({(TOPIC, 0): txn, (TOPIC, 1): corrupt}) == {(TOPIC, 0): code, (TOPIC, 1): code}
    assert raw.produce({(TOPIC, 0): corrupt, (TOPIC, 1): txn}) == {(TOPIC, 0): CORRUPT, (TOPIC, 1): CORRUPT}


@pytest.mark.parametrize("case", list(TAIL_CASES))
def test_a_tail_that_is_no_batch_is_cut_off_and_the_batch_written(broker, raw, case):
    before = read_log(log_dir(broker), TOPIC, 0)
    batch = good_batch(2)
    assert raw.produce({(TOPIC, 0): batch + TAIL_CASES[case]}) == {(TOPIC, 0): 0}
    got = read_log(log_dir(broker), TOPIC, 0)
    assert got[:-1] == before and [r.value for r in got[-1][1]] == [b"v" * 20 + b"0", b"v" * 20 + b"1"]


def test_zstd_needs_produce_v7(broker, raw):
    zstd = good_batch(2, compression=Compression.ZSTD)
    assert raw.produce({(TOPIC, 0): zstd}, version=6) == {(TOPIC, 0): ErrorCode.UNSUPPORTED_COMPRESSION_TYPE}
    assert raw.produce({(TOPIC, 0): zstd}, version=7) == {(TOPIC, 0): 0}


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compressed_batches_are_decompressed_checked_and_kept(broker, raw, codec):
    before = read_log(log_dir(broker), TOPIC, 1)
    batch = good_batch(5, value=os.urandom(30), compression=codec)
    assert raw.produce({(TOPIC, 1): batch}) == {(TOPIC, 1): 0}
    got = read_log(log_dir(broker), TOPIC, 1)
    assert len(got) == len(before) + 1 and len(got[-1][1]) == 5


@pytest.mark.parametrize("transactional_id", [None])
def test_transactional_batch_is_refused_for_the_whole_request(broker, raw, caplog, transactional_id):
    """Transactional records without a transactional id (a transactional id without the
    transaction is the coordinator's business: tests/compat/test_transactions.py)."""
    before = [read_log(log_dir(broker), TOPIC, p) for p in (0, 1)]
    txn = rebuilt(BASE, attributes=TRANSACTIONAL_MASK, producer_id=1, producer_epoch=0, base_sequence=0)
    caplog.clear()
    errors = raw.produce({(TOPIC, 0): txn, (TOPIC, 1): good_batch(1)}, transactional_id=transactional_id)
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # Kafka's answer when the id is missing or not authorized
    assert errors == {(TOPIC, 0): code, (TOPIC, 1): code}
    assert [read_log(log_dir(broker), TOPIC, p) for p in (0, 1)] == before
    assert len([w for w in warnings(caplog) if "transactional" in w]) == 1


def init_transactional_producer(broker, transactional_id: str) -> tuple[int, int]:
    """InitProducerId for ``transactional_id`` at its coordinator (this one broker), retried
    while __transaction_state is being created; (producer id, epoch)."""
    async def init() -> tuple[int, int]:
        async with KafkaClient(broker.bootstrap, client_id="test-txn") as client:
            conn = await client.any_connection()
            for _ in range(100):
                found = await conn.request(ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": 1}, 3)
                if found.error_code == ErrorCode.NONE:
                    resp = await conn.request(ApiKey.INIT_PRODUCER_ID, {
                        "transactional_id": transactional_id, "transaction_timeout_ms": 60000}, 1)
                    if resp.error_code == ErrorCode.NONE:
                        return resp.producer_id, resp.producer_epoch
                await asyncio.sleep(0.1)
            raise AssertionError("no transaction coordinator within 10 s")
    return broker.run(init())


def test_transactional_batch_to_a_partition_never_added_is_refused(broker, raw, caplog):
    """KIP-890 verification: the producer's transaction exists at the coordinator but this
    partition was never added to it (no AddPartitionsToTxn): INVALID_TXN_STATE, nothing
    written; the request's other partition is served."""
    producer_id, epoch = init_transactional_producer(broker, "txn-1")
    before = [read_log(log_dir(broker), TOPIC, p) for p in (0, 1)]
    txn = rebuilt(BASE, attributes=TRANSACTIONAL_MASK, producer_id=producer_id, producer_epoch=epoch, base_sequence=0)
    caplog.clear()
    errors = raw.produce({(TOPIC, 0): txn, (TOPIC, 1): good_batch(1)}, transactional_id="txn-1")
    assert errors == {(TOPIC, 0): ErrorCode.INVALID_TXN_STATE, (TOPIC, 1): 0}
    assert read_log(log_dir(broker), TOPIC, 0) == before[0]
    assert len(read_log(log_dir(broker), TOPIC, 1)) == len(before[1]) + 1
    assert len([w for w in warnings(caplog) if "verification" in w]) == 1


def test_max_timestamp_and_type_follow_the_records(broker, raw):
    """A CreateTime batch claiming a max timestamp its records do not have, or LogAppendTime,
    is stored as Kafka stores it: header corrected, CRC recomputed (setMaxTimestamp)."""
    lying = rebuilt(good_batch(3, ts=1000), max_timestamp=9_999_999, attributes=TIMESTAMP_TYPE_MASK)
    assert raw.produce({(TOPIC, 1): lying}) == {(TOPIC, 1): 0}
    path = sorted((log_dir(broker) / f"{TOPIC}-1").glob("*.log"))[-1]
    data = path.read_bytes()
    last = None
    from protocol.records import iter_batch_headers
    for _pos, h in iter_batch_headers(data):
        last = h
    assert last.max_timestamp == 1002 and last.timestamp_type == 0
    assert [r.timestamp for r in read_log(log_dir(broker), TOPIC, 1)[-1][1]] == [1000, 1001, 1002]


def test_a_real_consumer_reads_the_topic_after_every_case(broker, raw):
    """kafka-python raised CorruptRecordError on what used to be stored; it reads all now."""
    from kafka import KafkaConsumer, TopicPartition

    for records, _, _ in CASES.values():
        raw.produce({(TOPIC, 0): records})
    for records, _ in REQUEST_CASES.values():
        raw.produce({(TOPIC, 0): records})
    for tail in TAIL_CASES.values():
        raw.produce({(TOPIC, 0): good_batch(2) + tail})
    raw.produce({(TOPIC, 0): good_batch(4)})
    expected = sum(len(r) for _, r in read_log(log_dir(broker), TOPIC, 0))
    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = [m.offset for m in consumer]
    finally:
        consumer.close()
    assert got == list(range(expected))
    assert read_header(good_batch(1), 0).records_count == 1


def test_compacted_topic_refuses_a_record_without_a_key(broker, raw):
    create_topic(broker, "validated-compact", configs={"cleanup.policy": "compact"})
    keyless = build_batch([Record(key=b"k", value=b"a", timestamp=1), Record(key=None, value=b"b", timestamp=1)])
    assert raw.produce({("validated-compact", 0): keyless}) == {("validated-compact", 0): INVALID_RECORD}
    keyed = build_batch([Record(key=b"k", value=b"a", timestamp=1)])
    assert raw.produce({("validated-compact", 0): keyed}) == {("validated-compact", 0): 0}
    assert [len(r) for _, r in read_log(log_dir(broker), "validated-compact", 0)] == [1]


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_decompression_bomb_is_refused_without_expanding_it(broker, raw, monkeypatch, codec):
    """A few KiB that decompress to far more than a batch may (the limit is lowered to 1 MiB
    here: 128 MiB in the broker) are INVALID_RECORD; the broker never holds the expansion."""
    from storage import log_validator

    monkeypatch.setattr(log_validator, "MAX_DECOMPRESSED_BATCH_BYTES", 1 << 20)
    body = encode_record(0, 0, None, bytes(4 << 20), ())
    bomb = rebuilt(BASE, attributes=int(codec), body=compress(codec, body), records_count=1, last_offset_delta=0)
    assert len(bomb) < 1 << 20
    before = read_log(log_dir(broker), TOPIC, 0)
    assert raw.produce({(TOPIC, 0): bomb}) == {(TOPIC, 0): INVALID_RECORD}
    assert read_log(log_dir(broker), TOPIC, 0) == before
    small = rebuilt(BASE, attributes=int(codec), body=compress(codec, encode_record(0, 0, None, bytes(1000), ())),
                    records_count=1, last_offset_delta=0)
    assert raw.produce({(TOPIC, 0): small}) == {(TOPIC, 0): 0}


# Produce v8+ says why a batch was refused, as Kafka does: ``record_errors`` (batch index and
# message of each record that failed validation) and ``error_message`` (Kafka's "One or more
# records have been rejected ..." summary; for a batch refused as a whole, the reason). v7
# answers carry neither field.
COMPACT = "errors-compact"
PLAIN = "errors-plain"


LOG_APPEND_TIME = "errors-log-append-time"
SMALL = "errors-small"


@pytest.fixture(scope="module")
def topics(broker):
    create_topic(broker, COMPACT, configs={"cleanup.policy": "compact"})
    create_topic(broker, PLAIN, partitions=2)
    create_topic(broker, LOG_APPEND_TIME, configs={"message.timestamp.type": "LogAppendTime"})
    create_topic(broker, SMALL, configs={"max.message.bytes": "100"})


def test_a_batch_claiming_log_append_time_on_such_a_topic_is_invalid_timestamp(topics, raw):
    """LogValidator.validateTimestamp: producers should not set LogAppendTime; on a LogAppendTime
    topic every record is named (RecordValidationException around InvalidTimestampException)."""
    claiming = build_batch([Record(key=b"k", value=b"abc", timestamp=5), Record(value=b"d", timestamp=6)],
                           timestamp_type=1)
    answer = raw.produce_answers({(LOG_APPEND_TIME, 0): claiming})[(LOG_APPEND_TIME, 0)]
    assert answer.error_code == INVALID_TIMESTAMP
    assert answer.error_message == "One or more records have been rejected due to invalid timestamp"
    stamp = read_header(claiming, 0).max_timestamp
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (i, f"Invalid timestamp type in message DefaultRecord(offset={i}, timestamp={stamp}, key={k} bytes, "
            f"value={v} bytes). Producer should not set timestamp type to LogAppendTime.")
        for i, k, v in ((0, 1, 3), (1, 0, 1))]
    plain = build_batch([Record(value=b"d", timestamp=6)])
    assert raw.produce({(LOG_APPEND_TIME, 0): plain}) == {(LOG_APPEND_TIME, 0): 0}


def test_max_message_bytes_is_checked_before_the_crc(topics, raw):
    """analyzeAndValidateRecords' order: baseOffset, then the size, then isValid (the CRC)."""
    big = good_batch(3)
    assert len(big) > 100
    assert raw.produce({(SMALL, 0): rebuilt(big, fix_crc=False, base_timestamp=5)}) == {
        (SMALL, 0): ErrorCode.MESSAGE_TOO_LARGE}
    assert raw.produce({(SMALL, 0): rebuilt(big, base_offset=3, fix_crc=False)}) == {(SMALL, 0): INVALID_RECORD}


def test_an_unknown_partition_is_answered_before_its_records_are_checked(topics, raw):
    """KafkaApis answers UNKNOWN_TOPIC_OR_PARTITION before validateRecords looks at the records."""
    assert raw.produce({(PLAIN, 7): b"", (PLAIN, 0): good_batch(1)}) == {
        (PLAIN, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (PLAIN, 0): 0}
    assert raw.produce({(PLAIN, 7): good_batch(1) + good_batch(1)}) == {(PLAIN, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_keyless_records_on_a_compacted_topic_are_each_named_with_their_batch_index(topics, raw):
    batch = build_batch([Record(key=b"k0", value=b"a", timestamp=1), Record(key=None, value=b"b", timestamp=1),
                         Record(key=b"k2", value=b"c", timestamp=1), Record(key=None, value=b"d", timestamp=1)])
    answer = raw.produce_answers({(COMPACT, 0): batch})[(COMPACT, 0)]
    assert answer.error_code == ErrorCode.INVALID_RECORD
    message = f"Compacted topic cannot accept message without key in topic partition {COMPACT}-0."
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [(1, message), (3, message)]
    assert answer.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first three "
        f"errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=3, message='{message}')]")


def test_a_batch_refused_as_a_whole_has_a_message_and_no_record_errors(topics, raw):
    lying = rebuilt(good_batch(3), records_count=5, last_offset_delta=4)
    answers = raw.produce_answers({(PLAIN, 0): lying, (PLAIN, 1): good_batch(2)})
    refused, written = answers[(PLAIN, 0)], answers[(PLAIN, 1)]
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert list(refused.record_errors) == []
    assert refused.error_message.startswith(f"{PLAIN}-0: ") and "5 records declared" in refused.error_message
    assert (written.error_code, list(written.record_errors), written.error_message) == (ErrorCode.NONE, [], None)


def test_checks_before_the_log_have_a_message_too(topics, raw):
    two_batches = good_batch(1) + good_batch(1)
    answer = raw.produce_answers({(PLAIN, 0): two_batches})[(PLAIN, 0)]
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert answer.error_message == f"{PLAIN}-0: Produce v8 allows exactly one record batch per partition"
    corrupt = rebuilt(good_batch(2), fix_crc=False, base_timestamp=5)
    answer = raw.produce_answers({(PLAIN, 0): corrupt})[(PLAIN, 0)]
    assert answer.error_code == ErrorCode.CORRUPT_MESSAGE
    assert "CRC" in answer.error_message or "crc" in answer.error_message


def test_v7_answers_are_unchanged(topics, raw):
    lying = rebuilt(good_batch(3), records_count=5, last_offset_delta=4)
    assert raw.produce({(PLAIN, 0): lying}, version=7) == {(PLAIN, 0): ErrorCode.INVALID_RECORD}
    assert raw.produce({(PLAIN, 0): good_batch(1)}, version=7) == {(PLAIN, 0): ErrorCode.NONE}
