"""RecordBatch v2 (protocol/records.py): golden bytes against kafka-python's and aiokafka's
builders, cross-decoding of compressed batches, round trips, varints, validation errors and
the in-place rewrites the broker does. The 61-byte header's construct schema below is the
oracle for the hand-written ``HEADER`` struct."""

from __future__ import annotations

import struct

import pytest
from construct import Int8sb, Int16sb, Int32sb, Int32ub, Int64sb, Struct
from crc32c import crc32c
from hypothesis import given, settings, strategies as st

import aiokafka.record.default_records as aio_records
import kafka.codec
from kafka.record.default_records import DefaultRecordBatch as KpBatch, DefaultRecordBatchBuilder as KpBuilder
from kafka.record.util import decode_varint as kp_decode_varint, encode_varint as kp_encode_varint

from protocol import records as R
from protocol.compression import Compression, compress, decompress
from protocol.errors import CorruptRecordError, ErrorCode, InvalidRecordError

from .kafka_values import FAST

# ---------------------------------------------------------------------------
# The header's construct schema: the specification of R.HEADER

HEADER_SCHEMA = Struct(
    "base_offset" / Int64sb,
    "batch_length" / Int32sb,          # bytes after this field
    "partition_leader_epoch" / Int32sb,
    "magic" / Int8sb,
    "crc" / Int32ub,                   # CRC-32C of [attributes, end)
    "attributes" / Int16sb,
    "last_offset_delta" / Int32sb,
    "base_timestamp" / Int64sb,
    "max_timestamp" / Int64sb,
    "producer_id" / Int64sb,
    "producer_epoch" / Int16sb,
    "base_sequence" / Int32sb,
    "records_count" / Int32sb,
)
_FIELD_CONS = [sc for sc in HEADER_SCHEMA.subcons]
OFFSET_CONSTANTS = {
    "base_offset": R.BASE_OFFSET_OFFSET, "batch_length": R.LENGTH_OFFSET,
    "partition_leader_epoch": R.PARTITION_LEADER_EPOCH_OFFSET, "magic": R.MAGIC_OFFSET, "crc": R.CRC_OFFSET,
    "attributes": R.ATTRIBUTES_OFFSET, "last_offset_delta": R.LAST_OFFSET_DELTA_OFFSET,
    "base_timestamp": R.BASE_TIMESTAMP_OFFSET, "max_timestamp": R.MAX_TIMESTAMP_OFFSET,
    "producer_id": R.PRODUCER_ID_OFFSET, "producer_epoch": R.PRODUCER_EPOCH_OFFSET,
    "base_sequence": R.BASE_SEQUENCE_OFFSET, "records_count": R.RECORDS_COUNT_OFFSET,
}


def test_header_layout_matches_the_construct_schema() -> None:
    assert R.HEADER_SIZE == HEADER_SCHEMA.sizeof() == R.RECORDS_OFFSET == 61
    assert list(R.BatchHeader._fields) == [sc.name for sc in _FIELD_CONS]
    pos = 0
    for sc in _FIELD_CONS:
        assert OFFSET_CONSTANTS[sc.name] == pos, sc.name
        pos += sc.sizeof()


def _int(con):
    bits = con.sizeof() * 8
    if con is Int32ub:
        return st.integers(0, 2**32 - 1)
    return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


HEADER_VALUES = st.fixed_dictionaries({sc.name: _int(sc.subcon) for sc in _FIELD_CONS})


@given(HEADER_VALUES)
@FAST
def test_header_struct_matches_construct(values) -> None:
    packed = R.HEADER.pack(*(values[sc.name] for sc in _FIELD_CONS))
    assert packed == HEADER_SCHEMA.build(values)
    assert R.read_header(b"xx" + packed, 2)._asdict() == {k: v for k, v in HEADER_SCHEMA.parse(packed).items()
                                                          if not k.startswith("_")}


# ---------------------------------------------------------------------------
# Records and builders

TIMESTAMPS = st.integers(0, 2**41)
HEADERS = st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6)), max_size=3)
RECORD = st.builds(R.Record, timestamp=TIMESTAMPS, key=st.none() | st.binary(max_size=12),
                   value=st.none() | st.binary(max_size=30), headers=HEADERS)
RECORDS = st.lists(RECORD, min_size=1, max_size=5)
PRODUCER = st.one_of(st.just((-1, -1, -1, False)),
                     st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1),
                               st.booleans()))


def _kafka_python_builder(codec, producer):
    builder = KpBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
                        base_sequence=-1, batch_size=1 << 24)
    builder.set_producer_state(*producer)
    return builder, 0  # kafka-python writes partition leader epoch 0


def _aiokafka_builder(cls):
    def make(codec, producer):
        pid, epoch, seq, txn = producer
        return cls(2, codec, int(txn), pid, epoch, seq, 1 << 24), -1  # aiokafka writes partition leader epoch -1
    return make


# name -> (factory(codec, producer) -> (builder, the partition leader epoch it writes), codecs it has libraries for)
BUILDERS = {
    "kafka-python": (_kafka_python_builder, {0, 1} | {c for c, ok in ((2, kafka.codec.has_snappy()),
                                                                        (3, kafka.codec.has_lz4()),
                                                                        (4, kafka.codec.has_zstd())) if ok}),
    "aiokafka": (_aiokafka_builder(aio_records.DefaultRecordBatchBuilder), {0, 1, 2, 3, 4}),
    "aiokafka-py": (_aiokafka_builder(aio_records._DefaultRecordBatchBuilderPy), {0, 1, 2, 3, 4}),
}
READERS = {"kafka-python": KpBatch, "aiokafka": aio_records.DefaultRecordBatch,
           "aiokafka-py": aio_records._DefaultRecordBatchPy}


def their_batch(name, records, codec=0, producer=(-1, -1, -1, False)):
    factory, codecs = BUILDERS[name]
    if codec not in codecs:
        pytest.skip(f"{name} has no library for {Compression(codec).name} here")
    builder, epoch = factory(codec, producer)
    for i, r in enumerate(records):
        assert builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers)) is not None
    return bytes(builder.build()), epoch


def our_batch(records, epoch, codec=0, producer=(-1, -1, -1, False)):
    pid, pepoch, seq, txn = producer
    return R.build_batch(records, compression=codec, partition_leader_epoch=epoch, producer_id=pid,
                         producer_epoch=pepoch, base_sequence=seq, transactional=txn)


def as_tuples(records):
    return [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in records]


def their_records(name, data):
    batch = READERS[name](bytes(data))
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
             [(k, None if v is None else bytes(v)) for k, v in r.headers]) for r in batch]


def expected_records(records, base_offset=0):
    return [(base_offset + i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(records)]


@pytest.mark.parametrize("name", BUILDERS)
def test_uncompressed_batches_are_byte_identical(name) -> None:
    @FAST
    @given(RECORDS, PRODUCER)
    def run(records, producer):
        theirs, epoch = their_batch(name, records, producer=producer)
        ours = our_batch(records, epoch, producer=producer)
        assert ours == theirs
        assert their_records(name, ours) == expected_records(records)

    run()


def test_golden_batch() -> None:
    """Fixed bytes (as kafka-python 3.0.12 builds them), so both sides changing together still fails."""
    records = [R.Record(timestamp=1_700_000_000_000, key=b"k", value=b"v", headers=[("h", b"1"), ("n", None)]),
               R.Record(timestamp=1_699_999_999_990, key=None, value=b"", headers=[])]
    golden = bytes.fromhex(
        "0000000000000000" "00000048" "00000000" "02" "3b49dc06" "0000" "00000001"  # offset, length, epoch, magic, crc
        "0000018bcfe56800" "0000018bcfe56800" "ffffffffffffffff" "ffff" "ffffffff" "00000002"
        "1e" "00" "00" "00" "026b" "0276" "04" "0268" "0231" "026e" "01"  # record 0: 15 bytes, 2 headers
        "0c" "00" "13" "02" "01" "00" "00")  # record 1: timestamp delta -10, null key, empty value
    assert our_batch(records, 0) == golden == their_batch("kafka-python", records)[0]
    h = R.check_batch(golden, 0, len(golden))
    assert (h.crc, h.max_timestamp, h.last_offset_delta) == (0x3B49DC06, 1_700_000_000_000, 1)


COMPRESSIBLE = st.lists(st.builds(R.Record, timestamp=TIMESTAMPS, key=st.just(b"key" * 20),
                                  value=st.binary(max_size=4).map(lambda b: b * 40 + b"v" * 100), headers=HEADERS),
                        min_size=1, max_size=4)
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("name", BUILDERS)
def test_compressed_batches_cross_decode(name, codec) -> None:
    if codec not in BUILDERS[name][1]:
        pytest.skip(f"{name} has no library for {codec.name} here")

    @FAST
    @given(COMPRESSIBLE)
    def run(records):
        theirs, epoch = their_batch(name, records, codec)
        assert R.read_header(theirs).compression == codec  # they did compress (no fallback to none)
        h, decoded = R.decode_batch(theirs)
        assert as_tuples(decoded) == expected_records(records)
        ours = our_batch(records, epoch, codec)
        assert R.read_header(ours).compression == codec
        assert their_records(name, ours) == expected_records(records)
        assert as_tuples(R.decode_batch(ours)[1]) == expected_records(records)

    run()


def test_raw_snappy_is_accepted_too() -> None:
    import cramjam
    records = [R.Record(timestamp=5, key=None, value=b"x" * 200)]
    plain_batch = bytearray(our_batch(records, -1))
    body = bytes(cramjam.snappy.compress_raw(bytes(plain_batch[61:])))
    batch = bytearray(plain_batch[:61] + body)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, Compression.SNAPPY)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    assert as_tuples(R.decode_batch(batch)[1]) == expected_records(records)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("junk", [b"", b"\x00" * 7, b"not compressed at all", b"\x82SNAPPY\x00" + bytes(8) + b"\x00\x00\x01"])
def test_undecompressable_data_raises_value_error(codec, junk) -> None:
    with pytest.raises(ValueError):
        decompress(codec, junk)


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_compression_round_trip(codec) -> None:
    data = bytes(range(256)) * 300  # more than one 32 KiB xerial block
    assert decompress(codec, compress(codec, data)) == data
    assert Compression.parse(codec.name.lower()) is codec and Compression.parse(int(codec)) is codec


def test_compression_names() -> None:
    assert Compression.parse(None) is Compression.parse("") is Compression.parse("uncompressed") is Compression.NONE
    with pytest.raises(ValueError):
        Compression.parse("brotli")


# ---------------------------------------------------------------------------
# Round trips


@given(RECORDS, st.integers(0, 2**62), st.sampled_from(list(Compression)), PRODUCER,
       st.sampled_from([R.CREATE_TIME, R.LOG_APPEND_TIME]), st.integers(-1, 2**31 - 1))
@FAST
def test_decode_batch_round_trip(records, base_offset, codec, producer, ts_type, epoch) -> None:
    pid, pepoch, seq, txn = producer
    data = R.build_batch(records, base_offset=base_offset, compression=codec, producer_id=pid, producer_epoch=pepoch,
                         base_sequence=seq, transactional=txn, timestamp_type=ts_type, partition_leader_epoch=epoch)
    h, decoded = R.decode_batch(b"\x00" * 3 + data, 3)
    stamps = [r.timestamp for r in records]
    assert (h.base_offset, h.size, h.partition_leader_epoch, h.magic) == (base_offset, len(data), epoch, 2)
    assert (h.compression, h.timestamp_type, h.is_transactional, h.is_control) == (codec, ts_type, txn, False)
    assert (h.base_timestamp, h.max_timestamp) == (stamps[0], max(stamps))
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, pepoch, seq)
    assert (h.records_count, h.last_offset, h.next_offset) == (len(records), base_offset + len(records) - 1,
                                                               base_offset + len(records))
    expected = expected_records(records, base_offset)
    if ts_type == R.LOG_APPEND_TIME:  # every record reports the batch's max timestamp
        expected = [(o, max(stamps), k, v, hs) for o, _, k, v, hs in expected]
    assert as_tuples(decoded) == expected


def test_records_without_timestamp_take_now() -> None:
    data = R.build_batch([R.Record(key=b"a"), R.Record(timestamp=7, key=b"b")], now_ms=1000)
    assert [r.timestamp for r in R.decode_batch(data)[1]] == [1000, 7]
    with pytest.raises(ValueError):
        R.build_batch([R.Record()])
    with pytest.raises(ValueError):
        R.build_batch([])


def test_control_batches() -> None:
    marker = R.Record(timestamp=1, key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x05")
    data = R.build_batch([marker], control=True, transactional=True, producer_id=9, producer_epoch=1)
    normal = R.build_batch([R.Record(timestamp=2, value=b"v")], base_offset=1)
    h, _ = R.decode_batch(data)
    assert h.is_control and h.is_transactional
    assert [r.value for r in R.iter_records(data + normal)] == [b"v"]
    assert [r.key for r in R.iter_records(data + normal, skip_control=False)] == [marker.key, None]


# ---------------------------------------------------------------------------
# Varints

EDGES = [0, 1, -1, 63, -64, 64, -65, 2**31 - 1, -2**31, 2**31, -2**31 - 1, 2**63 - 1, -2**63]


def kp_varint(value: int) -> bytes:
    out = bytearray()
    kp_encode_varint(value, out.append)
    return bytes(out)


@pytest.mark.parametrize("value", EDGES)
def test_varint_edges(value) -> None:
    raw = R.encode_varint(value)
    assert raw == kp_varint(value)
    assert R.decode_varint(raw + b"\x01", 0) == (value, len(raw))
    assert kp_decode_varint(bytearray(raw), 0) == (value, len(raw))


def test_varint_known_bytes() -> None:
    assert R.encode_varint(0) == b"\x00" and R.encode_varint(-1) == b"\x01" and R.encode_varint(1) == b"\x02"
    assert R.encode_varint(2**31 - 1) == b"\xfe\xff\xff\xff\x0f" and R.encode_varint(-2**31) == b"\xff\xff\xff\xff\x0f"
    assert R.encode_varint(-2**63) == b"\xff" * 9 + b"\x01"
    assert R.encode_uvarint(300) == b"\xac\x02" and R.decode_uvarint(b"\xac\x02", 0) == (300, 2)


@given(st.integers(-2**63, 2**63 - 1))
@FAST
def test_varint_matches_kafka_python(value) -> None:
    raw = R.encode_varint(value)
    assert raw == kp_varint(value)
    assert R.decode_varint(b"\x00" + raw, 1) == (value, len(raw) + 1)


@pytest.mark.parametrize("value", [v for v in EDGES if abs(v) > 63])
def test_truncated_varints_raise_value_error(value) -> None:
    raw = R.encode_varint(value)
    for n in range(len(raw)):
        with pytest.raises(ValueError):
            R.decode_varint(raw[:n], 0)
        with pytest.raises(ValueError):
            R.decode_uvarint(b"zz" + raw[:n], 2)


def test_over_long_varint_raises() -> None:
    with pytest.raises(ValueError):
        R.decode_uvarint(b"\x80" * 10 + b"\x01", 0)
    assert R.decode_uvarint(b"\x80" * 9 + b"\x01", 0) == (1 << 63, 10)
    with pytest.raises(ValueError):
        R.encode_uvarint(-1)


# ---------------------------------------------------------------------------
# check_batch: each bad case, its error class

GOOD = R.build_batch([R.Record(timestamp=10, key=b"k", value=b"v" * 10), R.Record(timestamp=11, value=b"w")])


def patched(data, pos, fmt, value, *, fix_crc=False):
    out = bytearray(data)
    struct.pack_into(fmt, out, pos, value)
    if fix_crc:
        struct.pack_into(">I", out, R.CRC_OFFSET, crc32c(bytes(out[R.ATTRIBUTES_OFFSET:])))
    return bytes(out)


def test_error_classes_carry_the_wire_codes() -> None:
    assert CorruptRecordError.error_code is ErrorCode.CORRUPT_MESSAGE
    assert InvalidRecordError.error_code is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("data,error", [
    pytest.param(GOOD[:-1] + bytes([GOOD[-1] ^ 1]), CorruptRecordError, id="bad-crc-in-records"),
    pytest.param(patched(GOOD, R.CRC_OFFSET, ">I", 0), CorruptRecordError, id="bad-crc-field"),
    pytest.param(patched(GOOD, R.MAX_TIMESTAMP_OFFSET, ">q", 99), CorruptRecordError, id="header-changed-under-crc"),
    pytest.param(GOOD[:60], CorruptRecordError, id="short-header"),
    pytest.param(b"", CorruptRecordError, id="empty"),
    pytest.param(GOOD[:-1], CorruptRecordError, id="short-body"),
    pytest.param(patched(GOOD, R.LENGTH_OFFSET, ">i", len(GOOD) - 12 + 1), CorruptRecordError, id="overlong"),
    pytest.param(patched(GOOD, R.LENGTH_OFFSET, ">i", 48), CorruptRecordError, id="length-below-header"),
    pytest.param(patched(GOOD, R.LENGTH_OFFSET, ">i", -5), CorruptRecordError, id="negative-length"),
    pytest.param(patched(GOOD, R.MAGIC_OFFSET, ">b", 1), CorruptRecordError, id="magic-1"),
    pytest.param(patched(GOOD, R.MAGIC_OFFSET, ">b", 3), CorruptRecordError, id="magic-3"),
    pytest.param(patched(GOOD, R.RECORDS_COUNT_OFFSET, ">i", 3, fix_crc=True), InvalidRecordError, id="count-3"),
    pytest.param(patched(GOOD, R.RECORDS_COUNT_OFFSET, ">i", 0, fix_crc=True), InvalidRecordError, id="count-0"),
    pytest.param(patched(GOOD, R.LAST_OFFSET_DELTA_OFFSET, ">i", 0, fix_crc=True), InvalidRecordError, id="delta"),
])
def test_check_batch_rejects(data, error) -> None:
    with pytest.raises(error):
        R.check_batch(data, 0, len(data))
    with pytest.raises(error):  # the same batch further into a buffer
        R.check_batch(b"\x07" * 5 + data, 5, 5 + len(data))


def test_check_batch_accepts_good_batches_among_others() -> None:
    buf = GOOD + GOOD
    assert R.check_batch(buf, 0, len(buf)).size == len(GOOD)
    assert R.check_batch(buf, len(GOOD), len(buf)).records_count == 2
    bad_crc = GOOD[:-1] + bytes([GOOD[-1] ^ 1])
    assert R.check_batch(bad_crc, 0, len(bad_crc), verify_crc=False).crc == R.read_header(GOOD).crc


def _body_batch(body: bytes, count: int) -> bytes:
    """A batch around hand-made record bytes (valid header and CRC)."""
    out = bytearray(GOOD[:61] + body)
    struct.pack_into(">i", out, R.LENGTH_OFFSET, len(out) - 12)
    struct.pack_into(">i", out, R.LAST_OFFSET_DELTA_OFFSET, count - 1)
    struct.pack_into(">i", out, R.RECORDS_COUNT_OFFSET, count)
    struct.pack_into(">I", out, R.CRC_OFFSET, crc32c(bytes(out[R.ATTRIBUTES_OFFSET:])))
    return bytes(out)


def _raw_record(fields: bytes) -> bytes:
    return R.encode_varint(len(fields)) + fields


GOOD_RECORD = R.encode_record(0, 0, b"k", b"v", [("h", b"x")])


@pytest.mark.parametrize("body,count", [
    pytest.param(_raw_record(b"\x00\x00\x00\x01\x01" + R.encode_varint(-1)), 1, id="negative-header-count"),
    pytest.param(_raw_record(b"\x00\x00\x00\x01\x01\x02\x01\x00"), 1, id="null-header-key"),
    pytest.param(GOOD_RECORD + b"\x00", 1, id="bytes-after-the-last-record"),
    pytest.param(GOOD_RECORD[:-1], 1, id="truncated-record"),
    pytest.param(GOOD_RECORD, 2, id="fewer-records-than-counted"),
    pytest.param(_raw_record(b"\x00\x00\x00\x08ab\x01\x00"), 1, id="key-past-the-record"),
    pytest.param(R.encode_varint(-3) + GOOD_RECORD[1:], 1, id="negative-record-length"),
    pytest.param(b"", 1, id="no-records-at-all"),
])
def test_decode_rejects_malformed_records(body, count) -> None:
    data = _body_batch(body, count)
    R.check_batch(data, 0, len(data))  # the framing is fine: only the records are not
    with pytest.raises(ValueError):
        R.decode_batch(data)


def test_hand_made_body_helper_is_sound() -> None:
    assert as_tuples(R.decode_batch(_body_batch(GOOD_RECORD, 1))[1]) == [(0, 10, b"k", b"v", [("h", b"x")])]


# ---------------------------------------------------------------------------
# What the broker rewrites


@given(st.integers(0, 2**62), st.integers(-2**31, 2**31 - 1))
@FAST
def test_set_base_offset_and_epoch_keeps_the_crc(base_offset, epoch) -> None:
    buf = bytearray(b"\xaa" * 4 + GOOD + GOOD)
    R.set_base_offset_and_epoch(buf, 4 + len(GOOD), base_offset, epoch)
    h = R.check_batch(buf, 4 + len(GOOD), len(buf))
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (base_offset, epoch, R.read_header(GOOD).crc)
    assert buf[:4 + len(GOOD)] == b"\xaa" * 4 + GOOD  # nothing else touched
    assert [r.offset for r in R.decode_batch(buf, 4 + len(GOOD))[1]] == [base_offset, base_offset + 1]
    assert their_records("aiokafka", bytes(buf[4 + len(GOOD):]))[1][0] == base_offset + 1


def test_set_log_append_time_recomputes_the_crc() -> None:
    buf = bytearray(b"\x00\x00" + GOOD)
    R.set_log_append_time(buf, 2, len(GOOD), 123_456)
    h = R.check_batch(buf, 2, len(buf))
    assert h.crc != R.read_header(GOOD).crc and h.crc == crc32c(bytes(buf[2 + R.ATTRIBUTES_OFFSET:]))
    assert (h.timestamp_type, h.max_timestamp, h.base_timestamp) == (R.LOG_APPEND_TIME, 123_456, 10)
    assert h.attributes == R.read_header(GOOD).attributes | R.TIMESTAMP_TYPE_MASK
    assert [r.timestamp for r in R.decode_batch(buf, 2)[1]] == [123_456, 123_456]
    assert [r[1] for r in their_records("kafka-python", bytes(buf[2:]))] == [123_456, 123_456]


@pytest.mark.parametrize("seq,inc,expected", [
    (0, 0, 0), (0, 5, 5), (R.INT32_MAX, 1, 0), (R.INT32_MAX - 1, 3, 1), (R.INT32_MAX, R.INT32_MAX, R.INT32_MAX - 1),
    (10, R.INT32_MAX - 10, R.INT32_MAX),
])
def test_increment_sequence_wraps(seq, inc, expected) -> None:
    assert R.increment_sequence(seq, inc) == expected


@given(st.integers(0, R.INT32_MAX), st.integers(0, R.INT32_MAX))
@FAST
def test_increment_sequence_is_modulo_2_31(seq, inc) -> None:
    assert R.increment_sequence(seq, inc) == (seq + inc) % 2**31


def test_last_sequence() -> None:
    data = R.build_batch([R.Record(timestamp=1)] * 3, producer_id=1, producer_epoch=0, base_sequence=R.INT32_MAX - 1)
    assert R.read_header(data).last_sequence == 0  # MAX-1, MAX, then 0
    assert R.read_header(GOOD).last_sequence == R.NO_SEQUENCE


def test_iter_batch_headers_stops_at_a_partial_tail() -> None:
    third = R.build_batch([R.Record(timestamp=3, value=b"three")], base_offset=2)
    blob = GOOD + GOOD + third
    starts = [0, len(GOOD), 2 * len(GOOD)]
    for cut in range(len(blob) + 1):
        got = [pos for pos, _ in R.iter_batch_headers(blob[:cut])]
        assert got == [s for s, size in zip(starts, (len(GOOD), len(GOOD), len(third))) if s + size <= cut], cut
    assert [h.base_offset for _, h in R.iter_batch_headers(blob, len(GOOD))] == [0, 2]
    assert [pos for pos, _ in R.iter_batch_headers(blob, 0, 2 * len(GOOD) + 60)] == starts[:2]
    assert [r.value for r in R.iter_records(blob + third[:70])] == [b"v" * 10, b"w", b"v" * 10, b"w", b"three"]


def test_find_batch_finds_what_a_scan_of_the_headers_finds() -> None:
    """find_batch (the log's offset lookup) against the scan it replaces, for every offset, start
    boundary and cut of batches of 1, 3 and 2 records (offsets 0, 1-3, 4-5), corrupt length included."""
    batches = [R.build_batch([R.Record(timestamp=1, value=b"a")], base_offset=0),
               R.build_batch([R.Record(timestamp=1, value=b"b" * n) for n in (1, 20, 3)], base_offset=1),
               R.build_batch([R.Record(timestamp=1, value=b"c")] * 2, base_offset=4)]
    blob = b"".join(batches)
    boundaries = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    bad = bytearray(blob)
    struct.pack_into(">i", bad, boundaries[2] + 8, 3)  # a batch length below the header's
    for buf in (blob, bytes(bad)):
        for start in boundaries:
            for end in range(start, len(buf) + 1):
                for offset in range(-1, 8):
                    expected = next(((pos, h) for pos, h in R.iter_batch_headers(buf, start, end)
                                     if h.last_offset >= offset), None)
                    assert R.find_batch(buf, offset, start, end) == expected, (start, end, offset)
    assert R.find_batch(memoryview(blob), 5) == (boundaries[2], R.read_header(batches[2]))


def _batch_head_bytes():
    """Bytes that reach every branch of next_batch_size: short, a batchLength under 14, a
    magic past 2 (negative as an int8 too), a batch longer than what is there, a whole one,
    transactional or not."""
    length = st.one_of(st.integers(-5, 20), st.integers(-(2**31), 2**31 - 1), st.integers(14, 120))
    head = st.builds(lambda n, magic, attrs: R.struct.pack(">qi", 0, n) + b"\0\0\0\0" + bytes([magic]) + b"\0" * 4
                     + R.struct.pack(">H", attrs), length, st.integers(0, 255), st.integers(0, 0xFFFF))
    # the head, any tail, then up to 80 bytes cut off the end (a batch shorter than it claims)
    return st.tuples(head, st.binary(max_size=130), st.integers(0, 80)).map(
        lambda t: (t[0] + t[1])[:len(t[0]) + len(t[1]) - t[2]])


@given(_batch_head_bytes())
@settings(max_examples=400, deadline=None)
def test_first_batch_size_is_next_batch_size_and_transactional(records):
    """first_batch_size inlines next_batch_size: the same size and the same error, whatever
    the bytes, and the transactional bit of first_batch_is_transactional."""
    def reference():
        return R.next_batch_size(records, 0, len(records)), R.first_batch_is_transactional(records)

    try:
        expected = reference()
    except CorruptRecordError as exc:
        with pytest.raises(CorruptRecordError) as got:
            R.first_batch_size(records)
        assert str(got.value) == str(exc)
        return
    assert R.first_batch_size(records) == expected
    assert R.first_batch_size(None) == (None, False)
