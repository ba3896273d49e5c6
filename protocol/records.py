"""RecordBatch v2 ("magic 2"): the unit the broker stores and serves.

Hand-written in the aiokafka style rather than with construct: the 61-byte header is one
precompiled ``struct.Struct`` (see ``tests/protocol/test_records.py`` for the construct
schema it is checked against), because the broker touches it once per produced batch.

Two audiences:

* the broker and storage: ``read_header`` / ``check_batch`` / ``iter_batch_headers`` look
  at headers only and never decode records; ``set_base_offset_and_epoch`` patches the two
  fields outside the CRC in place; ``set_log_append_time`` rewrites the max timestamp and
  recomputes the CRC.
* clients (CLI, tests, load generator): ``build_batch`` and ``decode_batch`` encode and
  decode records, varints, headers and compression.

Layout (big-endian, as Kafka's ``DefaultRecordBatch`` defines it)::

    0  baseOffset            int64   broker-assigned
    8  batchLength           int32   bytes after this field
    12 partitionLeaderEpoch  int32   broker-assigned
    16 magic                 int8    2
    17 crc                   uint32  CRC-32C over [21, end)
    21 attributes            int16   codec (0-2), timestamp type (3), txn (4), control (5)
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records ...
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, NamedTuple, Sequence

from crc32c import crc32c

from .compression import Compression, compress, decompress
from .errors import CorruptRecordError, ErrorCode, InvalidRecordError

if TYPE_CHECKING:
    import mmap
    from typing import TypeAlias

    # What batches are read from: request frames, memoryviews of them, the log's mappings.
    Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
    # What the broker stamps offsets and timestamps into, in place.
    WritableBuffer: TypeAlias = bytearray | memoryview | mmap.mmap

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what batchLength does not count

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
INT32_MAX = 2**31 - 1

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_OFFSET_LENGTH_EPOCH_MAGIC = struct.Struct(">qiib")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_BASE_OFFSET_AND_EPOCH_AT_0 = struct.Struct(">q")  # base offset (0..8)
_EPOCH = struct.Struct(">i")  # partition leader epoch (12..16)
_tuple_new = tuple.__new__  # BatchHeader._make minus its length check: HEADER unpacks exactly its 13 fields


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    """Sequences wrap from INT32_MAX to 0, as Kafka's DefaultRecordBatch.incrementSequence does."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Unpack the 61-byte header at ``pos``; the caller has checked it is all there."""
    return _tuple_new(BatchHeader, HEADER.unpack_from(buf, pos))


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    """CRC-32C of the CRC-covered part of the batch at ``pos`` of total ``size`` bytes."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size])


def check_batch(buf: Buffer, pos: int, end: int, *, verify_crc: bool = True, compacted: bool = False) -> BatchHeader:
    """Validate the framing and checksum of the batch at ``pos`` (records stay undecoded).

    Raises ``CorruptRecordError`` (CORRUPT_MESSAGE) for a short or overlong batch, a magic
    other than 2, or a CRC mismatch, and ``InvalidRecordError`` (INVALID_RECORD) when the
    record count disagrees with lastOffsetDelta. ``compacted``: the batch may come from a
    compacted log, where compaction removed records but kept lastOffsetDelta (fewer records
    than offsets is fine then, even none).
    """
    remaining = end - pos
    if remaining < HEADER_SIZE:
        raise CorruptRecordError(f"batch at byte {pos}: {remaining} bytes left, a header needs {HEADER_SIZE}")
    h = _tuple_new(BatchHeader, HEADER.unpack_from(buf, pos))
    size = h.batch_length + LOG_OVERHEAD
    if size < HEADER_SIZE:
        raise CorruptRecordError(f"batch at byte {pos}: batchLength {h.batch_length} is shorter than a header")
    if size > remaining:
        raise CorruptRecordError(f"batch at byte {pos}: batchLength {h.batch_length} runs past the {remaining} bytes present")
    if h.magic != 2:
        raise CorruptRecordError(f"batch at byte {pos}: magic {h.magic}, only magic 2 is supported")
    if verify_crc:
        actual = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size])
        if actual != h.crc:
            raise CorruptRecordError(f"batch at byte {pos}: CRC {h.crc:#010x} stored, {actual:#010x} computed")
    if compacted:
        if h.records_count < 0 or h.records_count > h.last_offset_delta + 1:
            raise InvalidRecordError(f"batch at byte {pos}: recordsCount {h.records_count} exceeds its "
                                     f"{h.last_offset_delta + 1} offsets")
    elif h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
        raise InvalidRecordError(
            f"batch at byte {pos}: recordsCount {h.records_count} disagrees with lastOffsetDelta {h.last_offset_delta}")
    return h


ZSTD_MIN_PRODUCE_VERSION = 7  # KIP-110
# Kafka's LegacyRecord.RECORD_OVERHEAD_V0: the smallest batchLength of any magic. Less is corrupt.
MIN_BATCH_LENGTH = 14
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1  # 17: where the magic can be read
CURRENT_MAGIC = 2


def next_batch_size(buf: Buffer, pos: int, end: int) -> int | None:
    """Kafka's ByteBufferLogInputStream.nextBatch over ``buf[pos:end]``: the size of the whole
    batch at ``pos``, or None when what is left holds none (under 12 bytes, under 17, or fewer
    than its batchLength claims: no batch at all, not a corrupt one). Raises CorruptRecordError
    (CORRUPT_MESSAGE) with Kafka's message for a batchLength under 14, or a magic outside 0..2,
    which is read as soon as 17 bytes are there, whether or not the batch is whole."""
    remaining = end - pos
    if remaining < LOG_OVERHEAD:
        return None
    (length,) = _I32.unpack_from(buf, pos + LENGTH_OFFSET)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"Record size {length} is less than the minimum record overhead ({MIN_BATCH_LENGTH})")
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return None
    magic = buf[pos + MAGIC_OFFSET]
    if magic > CURRENT_MAGIC:  # an int8: 0x80-0xff are negative, as out of range as 3-127
        raise CorruptRecordError(f"Invalid magic found in record: {magic - 256 if magic > 127 else magic}")
    size = length + LOG_OVERHEAD
    return size if size <= remaining else None


def produce_records_error(version: int, records: Buffer | None, first: int | None | bool = False,
                          ) -> tuple[ErrorCode, str] | None:
    """Kafka's ProduceRequest.validateRecords for one partition of a v3+ Produce, read the way
    its batch iterator reads (``next_batch_size``): (error, message), or None when the records
    may go on to the log (their first ``next_batch_size`` bytes: a tail that is no whole batch
    is cut off, as Kafka's trimInvalidBytes does). In order: no whole batch -> INVALID_RECORD;
    a first batch of magic 0/1 -> INVALID_RECORD; zstd below v7 -> UNSUPPORTED_COMPRESSION_TYPE;
    a second whole batch -> INVALID_RECORD; a corrupt header (``next_batch_size``) ->
    CORRUPT_MESSAGE (the first batch's fails the whole request before this: see
    ``first_batch_is_transactional``). ``first``: ``next_batch_size(records, 0, len(records))``
    when the caller has it already (``first_batch_size``)."""
    if records is None:
        return ErrorCode.INVALID_RECORD, f"Produce v{version} must carry a record batch for each partition"
    end = len(records)
    try:
        if first is False:
            first = next_batch_size(records, 0, end)
        if first is None:
            return ErrorCode.INVALID_RECORD, f"Produce v{version} must carry a record batch for each partition"
        magic = records[MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            return ErrorCode.INVALID_RECORD, f"magic {magic}: Produce v{version} allows only magic 2"
        if version < ZSTD_MIN_PRODUCE_VERSION and records[ATTRIBUTES_OFFSET + 1] & CODEC_MASK == 4:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Produce v{version} may not use zstd (v7 and above may)"
        if first < end and next_batch_size(records, first, end) is not None:  # nothing after it: no call
            return ErrorCode.INVALID_RECORD, f"Produce v{version} allows exactly one record batch per partition"
    except CorruptRecordError as exc:
        return ErrorCode.CORRUPT_MESSAGE, str(exc)
    return None


def first_batch_size(records: Buffer | None) -> tuple[int | None, bool]:
    """(``next_batch_size`` of the first batch, ``first_batch_is_transactional``) in one read:
    what the produce path asks of each partition's records before anything else. Raises
    CorruptRecordError as both do."""
    if records is None:
        return None, False
    # next_batch_size(records, 0, len(records)) inlined (every partition of every Produce):
    # the same reads, the same errors, in the same order.
    remaining = len(records)
    if remaining < LOG_OVERHEAD:
        return None, False
    (length,) = _I32.unpack_from(records, LENGTH_OFFSET)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"Record size {length} is less than the minimum record overhead ({MIN_BATCH_LENGTH})")
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return None, False
    magic = records[MAGIC_OFFSET]
    if magic > CURRENT_MAGIC:
        raise CorruptRecordError(f"Invalid magic found in record: {magic - 256 if magic > 127 else magic}")
    size = length + LOG_OVERHEAD
    if size > remaining:
        return None, False
    return size, magic == CURRENT_MAGIC and bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK)


def first_batch_is_transactional(records: Buffer | None) -> bool:
    """Whether the first whole batch of ``records`` has the transactional attribute (bit 4;
    Kafka's RequestUtils.hasTransactionalRecords, per partition). Raises CorruptRecordError
    when that batch's header is corrupt (``next_batch_size``): Kafka reads it before anything
    else, so the whole request fails with CORRUPT_MESSAGE."""
    if records is None:
        return False
    size = next_batch_size(records, 0, len(records))
    return size is not None and records[MAGIC_OFFSET] == CURRENT_MAGIC and bool(
        records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK)


def iter_batch_headers(buf: Buffer, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch in ``buf[start:end]``; stops at a partial tail.

    No validation beyond framing: for reading back what the log already accepted.
    """
    if end is None:
        end = len(buf)
    pos = start
    unpack = HEADER.unpack_from
    while end - pos >= HEADER_SIZE:
        h = _tuple_new(BatchHeader, unpack(buf, pos))
        size = h.batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > end:
            return
        yield pos, h
        pos += size


# baseOffset, batchLength and lastOffsetDelta: all a scan for an offset needs of a header.
_SCAN = struct.Struct(">qi11xi")


def find_batch(buf: Buffer, offset: int, start: int = 0, end: int | None = None) -> tuple[int, BatchHeader] | None:
    """(position, header) of the first complete batch in ``buf[start:end]`` whose last offset
    is >= ``offset``; None if none is (a partial tail ends the scan, as in iter_batch_headers).

    What ``next(h for h in iter_batch_headers(...) if h.last_offset >= offset)`` finds, reading
    three fields of each batch passed over instead of building its whole header (the log's
    offset lookup scans up to index.interval.bytes of batches this way on every read).
    """
    if end is None:
        end = len(buf)
    pos = start
    scan = _SCAN.unpack_from
    while end - pos >= HEADER_SIZE:
        base_offset, batch_length, last_offset_delta = scan(buf, pos)
        size = batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > end:
            return None
        if base_offset + last_offset_delta >= offset:
            return pos, _tuple_new(BatchHeader, HEADER.unpack_from(buf, pos))
        pos += size
    return None


def set_base_offset_and_epoch(buf: WritableBuffer, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Stamp the broker-assigned fields; both are outside the CRC, so it stays valid."""
    _I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)


def set_log_append_time(buf: WritableBuffer, pos: int, size: int, timestamp: int) -> None:
    """LogAppendTime: set attribute bit 3, maxTimestamp := timestamp, recompute the CRC."""
    (attrs,) = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    _U32.pack_into(buf, pos + CRC_OFFSET, crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size]))


# ---------------------------------------------------------------------------
# Varints. Record fields are zigzag varints; flexible protocol versions use unsigned ones.

def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("unsigned varint cannot be negative")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag varint (int32 or int64 alike: zigzag on Python ints is width-independent)."""
    return encode_uvarint((value << 1) ^ (value >> 63))


def decode_uvarint(buf: Buffer, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """(value, next position); raises ValueError on a truncated varint or one longer than
    ``max_bytes`` (10 for a varlong; Kafka's unsigned varints of flexible versions take 5)."""
    if pos >= len(buf):
        raise ValueError("truncated varint")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    limit = 7 * max_bytes
    pos += 1
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= limit:
            raise ValueError(f"varint longer than {max_bytes} bytes")


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    raw, pos = decode_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


# ---------------------------------------------------------------------------
# Records (client side)

@dataclass(slots=True)
class Record:
    offset: int = 0
    timestamp: int = NO_TIMESTAMP
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _encode_bytes(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + bytes(data)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[tuple[str, bytes | None]] = ()) -> bytes:
    body = [b"\x00", encode_varint(timestamp_delta), encode_varint(offset_delta),
            _encode_bytes(key), _encode_bytes(value), encode_varint(len(headers))]
    for hkey, hval in headers:
        kb = hkey.encode() if isinstance(hkey, str) else bytes(hkey)
        body.append(encode_varint(len(kb)))
        body.append(kb)
        body.append(_encode_bytes(hval))
    payload = b"".join(body)
    return encode_varint(len(payload)) + payload


def build_batch(records: Sequence[Record], *, base_offset: int = 0, compression: Compression | int = Compression.NONE,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                timestamp_type: int = CREATE_TIME, transactional: bool = False, control: bool = False,
                now_ms: int | None = None) -> bytes:
    """Encode one RecordBatch v2. Records with timestamp -1 get ``now_ms`` (required then)."""
    if not records:
        raise ValueError("a batch needs at least one record")
    stamps = []
    for r in records:
        ts = r.timestamp
        if ts is None or ts < 0:
            if now_ms is None:
                raise ValueError("record without a timestamp and no now_ms given")
            ts = now_ms
        stamps.append(ts)
    base_ts = stamps[0]
    max_ts = max(stamps)
    body = b"".join(encode_record(i, ts - base_ts, r.key, r.value, r.headers)
                    for i, (r, ts) in enumerate(zip(records, stamps)))
    codec = Compression(compression)
    if codec != Compression.NONE:
        body = compress(codec, body)
    attributes = int(codec) | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    size = HEADER_SIZE + len(body)
    buf = bytearray(size)
    HEADER.pack_into(buf, 0, base_offset, size - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes,
                     len(records) - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(records))
    buf[HEADER_SIZE:] = body
    _U32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def _read_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = decode_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ValueError("record field runs past the batch")
    return bytes(buf[pos:end]), end


def decode_records(header: BatchHeader, body: bytes | memoryview) -> list[Record]:
    """Decode the (already decompressed) records of a batch."""
    out: list[Record] = []
    pos = 0
    base_ts = header.base_timestamp
    append_time = header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else None
    for _ in range(header.records_count):
        length, pos = decode_varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise ValueError("record length runs past the batch")
        pos += 1  # attributes
        ts_delta, pos = decode_varint(body, pos)
        off_delta, pos = decode_varint(body, pos)
        key, pos = _read_bytes(body, pos)
        value, pos = _read_bytes(body, pos)
        nheaders, pos = decode_varint(body, pos)
        if nheaders < 0:  # Kafka: "Found invalid number of record headers"
            raise ValueError(f"negative record header count {nheaders}")
        headers = []
        for _h in range(nheaders):
            hk, pos = _read_bytes(body, pos)
            if hk is None:  # Kafka: header keys are non-null strings
                raise ValueError("null record header key")
            hv, pos = _read_bytes(body, pos)
            headers.append((hk.decode("utf-8", "replace"), hv))
        if pos != end:
            raise ValueError("record length disagrees with its fields")
        ts = append_time if append_time is not None else base_ts + ts_delta
        out.append(Record(header.base_offset + off_delta, ts, key, value, headers))
    if pos != len(body):  # Kafka/kafka-python: bytes left over after the declared records
        raise ValueError(f"{len(body) - pos} bytes follow the batch's {header.records_count} records")
    return out


def batch_body(buf: Buffer, pos: int, header: BatchHeader) -> bytes | memoryview:
    """The batch's records, decompressed."""
    raw = memoryview(buf)[pos + RECORDS_OFFSET:pos + header.size]
    if header.compression == Compression.NONE:
        return raw
    return decompress(header.compression, raw)


def decode_batch(buf: Buffer, pos: int = 0) -> tuple[BatchHeader, list[Record]]:
    """Check and decode the batch at ``pos``: header and records (control batches included)."""
    h = check_batch(buf, pos, len(buf), compacted=True)
    return h, decode_records(h, batch_body(buf, pos, h))


def iter_records(buf: Buffer, *, skip_control: bool = True, verify_crc: bool = True) -> Iterator[Record]:
    """Every record of every complete batch in a fetched blob (a partial trailing batch is ignored)."""
    for pos, h in iter_batch_headers(buf):
        if verify_crc:
            check_batch(buf, pos, pos + h.size, compacted=True)
        if skip_control and h.is_control:
            continue
        yield from decode_records(h, batch_body(buf, pos, h))


# -- transaction markers (control batches) ---------------------------------------------------
# A control batch holds one record whose key is (version int16 = 0, type int16) and, for the
# COMMIT and ABORT markers, whose value is (version int16 = 0, coordinator epoch int32): Kafka's
# ControlRecordType and EndTransactionMarker.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class ControlRecord(NamedTuple):
    type: int  # CONTROL_ABORT, CONTROL_COMMIT, or another control type (e.g. 2, 3: KRaft's)
    coordinator_epoch: int  # -1 when the record has no marker value


def build_end_txn_marker(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, *,
                         now_ms: int, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A COMMIT or ABORT marker batch (transactional, control, one record) for the producer."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch([Record(key=key, value=value, timestamp=now_ms)], producer_id=producer_id,
                       producer_epoch=producer_epoch, partition_leader_epoch=partition_leader_epoch,
                       transactional=True, control=True)


def read_control_record(buf: Buffer, pos: int, header: BatchHeader) -> ControlRecord:
    """The control record of the control batch at ``pos`` (uncompressed, as brokers write them);
    ValueError if it is not one."""
    body = batch_body(buf, pos, header)
    p = 0
    _length, p = decode_varint(body, p)
    p += 1  # attributes
    _ts, p = decode_varint(body, p)
    _off, p = decode_varint(body, p)
    key, p = _read_bytes(body, p)
    if key is None or len(key) < 4:
        raise ValueError("control record without a 4-byte key")
    _version, kind = _CONTROL_KEY.unpack_from(key, 0)
    value, p = _read_bytes(body, p)
    epoch = _MARKER_VALUE.unpack_from(value, 0)[1] if value is not None and len(value) >= 6 else -1
    return ControlRecord(kind, epoch)
