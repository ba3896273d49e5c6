"""LogValidator: every batch a client produces is checked record by record before the log
takes any of it (Kafka's ``storage.internals.log.LogValidator``).

``Log.append_as_leader`` calls ``validate_client_batches`` on the request's records; the
first defect raises and nothing of the request reaches the log (the partition's other
requests and other partitions are not affected). Checks, in Kafka's order and with its codes:

* framing (``protocol.records.next_batch_size``, Kafka's batch iterator): a batchLength under
  14 or a magic outside 0..2 -> CORRUPT_MESSAGE; bytes that are no whole batch ->
  CORRUPT_MESSAGE here (the produce path has cut such a tail off first, as Kafka's
  trimInvalidBytes does); magic 0/1 -> INVALID_RECORD (what Kafka answers a v3+ Produce);
* UnifiedLog.analyzeAndValidateRecords: a baseOffset other than 0 -> INVALID_RECORD; a batch
  over ``max.message.bytes`` -> MESSAGE_TOO_LARGE; shorter than a v2 header, or a wrong CRC
  -> CORRUPT_MESSAGE;
* LogValidator.validateBatch: lastOffsetDelta >= 0, recordsCount >= 1 and lastOffsetDelta ==
  recordsCount - 1 -> else INVALID_RECORD;
* control batches come only from the broker itself; a producer id needs a base sequence;
  a codec id other than 0-4 -> INVALID_RECORD;
* every record, decompressed first when the batch is compressed (as Kafka does; at most
  ``MAX_DECOMPRESSED_BATCH_BYTES``, a decompression bomb is INVALID_RECORD): the
  record length, attributes, timestamp delta, offset delta, key, value and headers are
  read with a bound on every length and count against the bytes of that record; the
  fields must fill the record exactly, the records the batch exactly (Kafka's
  ``DefaultRecord.readFrom`` / "Incorrect declared batch size"). Stricter than Kafka in
  two places no real client notices: offset deltas must be 0, 1, 2, ... (Kafka rewrites a
  compressed batch whose deltas are not, and stores an uncompressed one as it is, which
  readers then mis-number), and a key, value or header value length below -1 is refused
  (Kafka reads any negative length as null). On a compacted topic every record needs a key.
  -> INVALID_RECORD with the record's index.
* a batch claiming LogAppendTime on a LogAppendTime topic, or claiming it with no timestamp
  (maxTimestamp -1) -> INVALID_TIMESTAMP, every record named (LogValidator.validateTimestamp).
* ``compression.type`` (the topic's, else the broker's): a batch in another codec than the
  topic's is rebuilt in it (Kafka re-compresses too; "producer", the default, keeps each
  batch as it came). The re-compression is CPU the producer would otherwise have paid.
* the batch's maxTimestamp and timestamp type are what the records and the topic's
  ``message.timestamp.type`` say: a CreateTime batch whose maxTimestamp is not its
  largest record timestamp, or one claiming LogAppendTime on a CreateTime topic, is
  corrected in place with the CRC recomputed (Kafka's ``setMaxTimestamp``).

The record walk is the one per-record cost on the produce path. It runs in C
(``storage/_record_walk.c``, built by ``pip install``/``make``; no Python object per
record) and falls back to ``walk_records_py`` below, the same rules in Python, when the
extension is not built. ``tests/storage/test_log_validator.py`` holds the two to the same
answers on random and mutated input.
"""

from __future__ import annotations

import importlib
import logging
import struct
from typing import TYPE_CHECKING, Callable

from crc32c import crc32c

from protocol.compression import Compression, compress, decompress_bounded
from protocol.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError, MessageTooLargeError
from protocol.records import (ATTRIBUTES_OFFSET, CODEC_MASK, CONTROL_MASK, CRC_OFFSET, HEADER, HEADER_SIZE,
                              LOG_OVERHEAD, MAGIC_OFFSET, MAX_TIMESTAMP_OFFSET, NO_PARTITION_LEADER_EPOCH, NO_TIMESTAMP,
                              RECORDS_OFFSET, TIMESTAMP_TYPE_MASK, BatchHeader, decode_records, next_batch_size,
                              read_header)

if TYPE_CHECKING:
    from protocol.records import Buffer, WritableBuffer

log = logging.getLogger("kbroker.storage.log_validator")
_tuple_new = tuple.__new__  # a BatchHeader from the 13 fields the compiled module read

WALK_OK = 0
WALK_TRUNCATED = 1
WALK_VARINT_TOO_LONG = 2
WALK_NEGATIVE_LENGTH = 3
WALK_LENGTH_PAST_END = 4
WALK_OFFSET_DELTA = 5
WALK_BAD_KEY_LENGTH = 6
WALK_BAD_VALUE_LENGTH = 7
WALK_BAD_HEADER_COUNT = 8
WALK_BAD_HEADER_KEY = 9
WALK_BAD_HEADER_VALUE = 10
WALK_SIZE_MISMATCH = 11
WALK_TRAILING = 12
WALK_NULL_KEY = 13

_WALK_MESSAGES = {
    WALK_TRUNCATED: "a field runs past the end of the record (or the batch)",
    WALK_VARINT_TOO_LONG: "a varint is longer than its type allows",
    WALK_NEGATIVE_LENGTH: "negative record length {detail}",
    WALK_LENGTH_PAST_END: "record length {detail} runs past the batch",
    WALK_OFFSET_DELTA: "offset delta {detail}, expected the record's index",
    WALK_BAD_KEY_LENGTH: "invalid key length {detail}",
    WALK_BAD_VALUE_LENGTH: "invalid value length {detail}",
    WALK_BAD_HEADER_COUNT: "invalid number of record headers {detail}",
    WALK_BAD_HEADER_KEY: "invalid negative header key size {detail}",
    WALK_BAD_HEADER_VALUE: "invalid header value length {detail}",
    WALK_SIZE_MISMATCH: "record length disagrees with its fields ({detail} bytes left over)",
    WALK_TRAILING: "{detail} bytes follow the declared records (incorrect declared batch size)",
    WALK_NULL_KEY: "compacted topic cannot accept message without key",
}

_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_MAX_CODEC = 4  # zstd
# What one compressed batch may decompress to (Kafka streams and has no limit; holding the
# whole batch, this broker bounds it so a few KiB of zstd cannot expand to gigabytes).
MAX_DECOMPRESSED_BATCH_BYTES = 128 * 1024 * 1024


def _uvarint(buf: Buffer, pos: int, end: int, max_bytes: int) -> tuple[int, int, int]:
    """(status, value, next position) of an unsigned varint inside [pos, end)."""
    value = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            return WALK_TRUNCATED, 0, pos
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return WALK_OK, value, pos
        shift += 7
    return WALK_VARINT_TOO_LONG, 0, pos


def _varint32(buf: Buffer, pos: int, end: int) -> tuple[int, int, int]:
    status, raw, pos = _uvarint(buf, pos, end, 5)
    raw &= 0xFFFFFFFF  # Java keeps the low 32 bits of the five bytes
    value = (raw >> 1) ^ -(raw & 1)
    return status, value, pos


def _varint64(buf: Buffer, pos: int, end: int) -> tuple[int, int, int]:
    status, raw, pos = _uvarint(buf, pos, end, 10)
    raw &= 0xFFFFFFFFFFFFFFFF
    value = (raw >> 1) ^ -(raw & 1)
    return status, value, pos


def walk_records_py(buf: Buffer, start: int, end: int, count: int, require_key: bool = False) -> tuple[int, int, int]:
    """The records walk in Python: (WALK_OK, count, largest timestamp delta) or (status,
    record index, offending value). Same contract as ``_record_walk.walk``."""
    if start < 0 or end > len(buf) or start > end:
        raise ValueError("walk: [start, end) is not inside the buffer")
    pos = start
    max_ts_delta = _INT64_MIN
    index = 0
    while index < count:
        st, length, pos = _varint32(buf, pos, end)
        if st:
            return st, index, 0
        if length < 0:
            return WALK_NEGATIVE_LENGTH, index, length
        if length > end - pos:
            return WALK_LENGTH_PAST_END, index, length
        rend = pos + length
        if pos >= rend:
            return WALK_TRUNCATED, index, 0
        pos += 1  # attributes
        st, ts_delta, pos = _varint64(buf, pos, rend)
        if st:
            return st, index, 0
        if ts_delta > max_ts_delta:
            max_ts_delta = ts_delta
        st, offset_delta, pos = _varint32(buf, pos, rend)
        if st:
            return st, index, 0
        if offset_delta != index:
            return WALK_OFFSET_DELTA, index, offset_delta
        for bad in (WALK_BAD_KEY_LENGTH, WALK_BAD_VALUE_LENGTH):
            st, n, pos = _varint32(buf, pos, rend)
            if st:
                return st, index, 0
            if n < -1:
                return bad, index, n
            if n < 0 and require_key and bad == WALK_BAD_KEY_LENGTH:
                return WALK_NULL_KEY, index, n
            if n > rend - pos:
                return WALK_TRUNCATED, index, n
            if n > 0:
                pos += n
        st, headers, pos = _varint32(buf, pos, rend)
        if st:
            return st, index, 0
        if headers < 0:
            return WALK_BAD_HEADER_COUNT, index, headers
        for _ in range(headers):
            st, n, pos = _varint32(buf, pos, rend)
            if st:
                return st, index, 0
            if n < 0:
                return WALK_BAD_HEADER_KEY, index, n
            if n > rend - pos:
                return WALK_TRUNCATED, index, n
            pos += n
            st, n, pos = _varint32(buf, pos, rend)
            if st:
                return st, index, 0
            if n < -1:
                return WALK_BAD_HEADER_VALUE, index, n
            if n > rend - pos:
                return WALK_TRUNCATED, index, n
            if n > 0:
                pos += n
        if pos != rend:
            return WALK_SIZE_MISMATCH, index, rend - pos
        index += 1
    if pos != end:
        return WALK_TRAILING, index, end - pos
    return WALK_OK, count, max_ts_delta if count > 0 else 0


walk_records: Callable[[Buffer, int, int, int, bool], tuple[int, int, int]]
# The compiled module's ``accept``: a batch that passes every check but the CRC and needs no
# rewrite, decided in one call (see validate_client_batches); None where it is not built.
accept_batch: Callable[[Buffer, int, int, int, bool, bool, bool], tuple[tuple[int, ...], int] | None] | None
# The compiled module's ``stamp``: Log.append_as_leader's common case in one call (a request's
# one batch for a partition, stored as it came, CreateTime: accepted, CRC checked, its offset and
# leader epoch stamped; the header as written, or None, nothing touched, for the path below to
# decide); None where the module is not built.
stamp_batch: Callable[[WritableBuffer, int, bool, bool, int, int], BatchHeader | None] | None
try:
    # By name: the extension has no .py source, and an ``import`` of it would read (to the
    # import-graph check, tests/test_architecture.py) as an import of the storage package.
    _compiled = importlib.import_module("storage._record_walk")
    if not (hasattr(_compiled, "stamp") and hasattr(_compiled, "configure")):
        # built from an older source (a checkout moved on without `pip install -e .`)
        log.warning("storage._record_walk is built from an older source (no stamp): the record walk runs in "
                    "Python; rebuild with `pip install -e .`")
        raise ImportError("storage._record_walk is out of date")
except ImportError:  # not built (no compiler at install time): the same rules, in Python
    walk_records = walk_records_py
    accept_batch = None
    stamp_batch = None
    COMPILED = False
    log.debug("storage._record_walk is not built; the record walk runs in Python")
else:
    walk_records, accept_batch, stamp_batch = _compiled.walk, _compiled.accept, _compiled.stamp
    _compiled.configure(crc32c, BatchHeader)
    COMPILED = True


def walk_error_message(status: int, index: int, detail: int) -> str:
    return f"record {index}: " + _WALK_MESSAGES.get(status, "status {detail}").format(detail=detail)


def validate_client_batches(buf: bytearray | memoryview, *, max_message_bytes: int, log_append_time: bool,
                            target_codec: int | None = None, require_keys: bool = False, where: str = "",
                            from_coordinator: bool = False,
                            ) -> tuple[bytearray | memoryview, list[tuple[int, BatchHeader]]]:
    """Check every batch of ``buf`` (a client's records for one partition) and every record
    in it; return the buffer to append (``buf`` itself, or a new one when a batch was
    re-compressed) and [(position, header)] of its batches, headers as corrected.

    ``require_keys``: the topic is compacted (cleanup.policy has compact): a record without a
    key is INVALID_RECORD, as in Kafka.
    ``from_coordinator``: the group coordinator's transactional offset commits (Kafka's
    AppendOrigin.COORDINATOR), whose producer batches carry no sequence number.
    ``target_codec``: the topic's compression.type as a codec id, None for "producer". A
    batch in another codec is rebuilt in the target one (same records, producer fields and
    timestamps; Kafka's buildRecordsAndAssignOffsets; offsets are stamped by the caller).

    Raises CorruptRecordError / InvalidRecordError / MessageTooLargeError / InvalidTimestampError naming ``where``
    and the first defect; ``buf`` may have been patched (timestamps, CRC) before a later
    batch fails, which writes nothing."""
    size = len(buf)
    batches: list[tuple[int, BatchHeader]] = []
    pieces: list[Buffer] | None = None  # set once a batch is rebuilt: the new buffer's parts
    out_pos = 0
    pos = 0
    prefix = f"{where}: " if where else ""
    # A batch stored as it came (no re-compression) that the compiled module accepts whole and
    # whose CRC holds needs none of the checks below: they would pass it unchanged (the module
    # turns down anything they would refuse or rewrite, and those go through them).
    accept = accept_batch if target_codec is None or target_codec == 0 else None
    while pos < size:
        if accept is not None:
            accepted = accept(buf, pos, size, max_message_bytes, log_append_time, require_keys, from_coordinator)
            if accepted is not None:
                fields, whole = accepted
                if crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + whole]) == fields[4]:
                    if pieces is not None:
                        pieces.append(memoryview(buf)[pos:pos + whole])
                    batches.append((out_pos, _tuple_new(BatchHeader, fields)))
                    out_pos += whole
                    pos += whole
                    continue
        # Kafka's order: its batch iterator (ByteBufferLogInputStream), UnifiedLog.analyzeAndValidate-
        # Records (baseOffset, max.message.bytes, then isValid: size and CRC), LogValidator.validateBatch.
        try:
            batch_size = next_batch_size(buf, pos, size)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{prefix}batch at byte {pos}: {exc}") from None
        if batch_size is None:  # the produce path cuts such a tail off first (Kafka's trimInvalidBytes)
            raise CorruptRecordError(f"{prefix}batch at byte {pos}: the {size - pos} bytes left are no whole batch")
        magic = buf[pos + MAGIC_OFFSET]
        if magic != 2:
            raise InvalidRecordError(f"{prefix}batch at byte {pos}: magic {magic}, "
                                     f"produce requests may only carry magic 2 batches")
        (base_offset,) = _I64.unpack_from(buf, pos)
        if base_offset != 0:
            raise InvalidRecordError(f"The baseOffset of the record batch in the append to {where or 'the log'} should "
                                     f"be 0, but it is {base_offset}")
        if batch_size > max_message_bytes:
            raise MessageTooLargeError(f"{prefix}a {batch_size}-byte batch exceeds max.message.bytes {max_message_bytes}")
        if batch_size < HEADER_SIZE:
            raise CorruptRecordError(f"{prefix}batch at byte {pos}: {batch_size} bytes, shorter than a v2 batch header")
        header = read_header(buf, pos)
        actual = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + batch_size])
        if actual != header.crc:
            raise CorruptRecordError(f"{prefix}Record is corrupt (stored crc = {header.crc}, computed {actual}) "
                                     f"in batch at byte {pos}")
        count = header.records_count
        if header.last_offset_delta < 0:
            raise InvalidRecordError(f"{prefix}batch at byte {pos}: Batch has an invalid offset range: "
                                     f"[0, {header.last_offset_delta}]")
        if count <= 0:
            raise InvalidRecordError(f"{prefix}batch at byte {pos}: Invalid reported count for record batch: {count}")
        if header.last_offset_delta != count - 1:
            raise InvalidRecordError(f"{prefix}batch at byte {pos}: recordsCount {count} disagrees with "
                                     f"lastOffsetDelta {header.last_offset_delta}")
        attributes = header.attributes
        if attributes & CONTROL_MASK:
            raise InvalidRecordError(f"{prefix}batch at byte {pos}: clients are not allowed to write control records")
        if header.producer_id >= 0 and header.base_sequence < 0 and not from_coordinator:
            raise InvalidRecordError(f"{prefix}batch at byte {pos}: invalid sequence number {header.base_sequence} "
                                     f"in a batch with producerId {header.producer_id}")
        codec = attributes & CODEC_MASK
        body: Buffer
        if codec == 0:
            body = buf
            status, index, detail = walk_records(buf, pos + RECORDS_OFFSET, pos + batch_size, count, require_keys)
        else:
            if codec > _MAX_CODEC:
                raise InvalidRecordError(f"{prefix}batch at byte {pos}: unknown compression codec id {codec}")
            try:
                body = decompress_bounded(codec, memoryview(buf)[pos + RECORDS_OFFSET:pos + batch_size],
                                          MAX_DECOMPRESSED_BATCH_BYTES)
            except ValueError as exc:
                raise InvalidRecordError(f"{prefix}batch at byte {pos}: {exc}") from None
            status, index, detail = walk_records(body, 0, len(body), count, require_keys)
        if status == WALK_NULL_KEY:
            start, stop = (pos + RECORDS_OFFSET, pos + batch_size) if codec == 0 else (0, len(body))
            raise _keyless_records_error(body, start, stop, header, where)
        if status:
            raise InvalidRecordError(f"{prefix}batch at byte {pos} ({count} records declared): "
                                     f"{walk_error_message(status, index, detail)}")
        if attributes & TIMESTAMP_TYPE_MASK and (log_append_time or header.max_timestamp == NO_TIMESTAMP):
            # LogValidator.validateTimestamp: a record claiming LogAppendTime where its timestamp
            # is not read as CreateTime (the topic appends the time itself, or the claim carries none).
            start, stop = (pos + RECORDS_OFFSET, pos + batch_size) if codec == 0 else (0, len(body))
            raise _log_append_time_claimed_error(body, start, stop, header)
        max_timestamp = header.max_timestamp
        if not log_append_time:
            max_timestamp = header.base_timestamp + detail
            if not _INT64_MIN <= max_timestamp <= _INT64_MAX:
                raise InvalidRecordError(f"{prefix}batch at byte {pos}: record timestamps overflow int64")
        if target_codec is not None and codec != target_codec:
            records = bytes(memoryview(buf)[pos + RECORDS_OFFSET:pos + batch_size]) if codec == 0 else body
            rebuilt = _rebuild(header, records, target_codec, max_timestamp, log_append_time)
            if len(rebuilt) > max_message_bytes:
                raise MessageTooLargeError(f"{prefix}batch at byte {pos} re-compressed to {len(rebuilt)} bytes, over "
                                           f"max.message.bytes {max_message_bytes}")
            if pieces is None:
                pieces = [memoryview(buf)[:pos]]
            pieces.append(rebuilt)
            batches.append((out_pos, read_header(rebuilt, 0)))
            out_pos += len(rebuilt)
        else:
            if not log_append_time and (max_timestamp != header.max_timestamp or attributes & TIMESTAMP_TYPE_MASK):
                _set_create_time_max_timestamp(buf, pos, batch_size, attributes, max_timestamp)
                header = read_header(buf, pos)
            if pieces is not None:
                pieces.append(memoryview(buf)[pos:pos + batch_size])
            batches.append((out_pos, header))
            out_pos += batch_size
        pos += batch_size
    if pieces is None:
        return buf, batches
    return bytearray(b"".join(pieces)), batches


def _keyless_records_error(body: Buffer, start: int, end: int, header: BatchHeader, where: str) -> InvalidRecordError:
    """Kafka's RecordValidationException for records without a key on a compacted topic: one
    RecordError (batch index, message) per such record, and its summary message. The records
    are well-formed (the walk got to the key check), so they decode."""
    message = f"Compacted topic cannot accept message without key in topic partition {where}."
    records = decode_records(header, memoryview(body)[start:end])
    errors = [(i, message) for i, r in enumerate(records) if r.key is None]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return InvalidRecordError(f"One or more records have been rejected due to {len(errors)} record errors in total, "
                              f"and only showing the first three errors at most: [{shown}]", errors)


def _log_append_time_claimed_error(body: Buffer, start: int, end: int, header: BatchHeader) -> InvalidTimestampError:
    """Kafka's RecordValidationException(InvalidTimestampException): every record of the batch,
    each named as Kafka's DefaultRecord.toString names it (the records are well-formed)."""
    errors = [(i, f"Invalid timestamp type in message DefaultRecord(offset={r.offset}, timestamp={header.max_timestamp}, "
                  f"key={len(r.key or b'')} bytes, value={len(r.value or b'')} bytes). Producer should not set "
                  f"timestamp type to LogAppendTime.")
              for i, r in enumerate(decode_records(header, memoryview(body)[start:end]))]
    return InvalidTimestampError("One or more records have been rejected due to invalid timestamp", errors)


def _rebuild(header: BatchHeader, records: Buffer, codec: int, max_timestamp: int, log_append_time: bool) -> bytes:
    """The batch again, its (uncompressed) records section compressed with ``codec``."""
    payload = compress(Compression(codec), bytes(records)) if codec else bytes(records)
    attributes = (header.attributes & ~(CODEC_MASK | TIMESTAMP_TYPE_MASK)) | codec
    if log_append_time:
        attributes |= header.attributes & TIMESTAMP_TYPE_MASK
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(out, 0, 0, len(out) - LOG_OVERHEAD, NO_PARTITION_LEADER_EPOCH, 2, 0, attributes,
                     header.last_offset_delta, header.base_timestamp, max_timestamp, header.producer_id,
                     header.producer_epoch, header.base_sequence, header.records_count)
    out[HEADER_SIZE:] = payload
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def _set_create_time_max_timestamp(buf: WritableBuffer, pos: int, size: int, attributes: int,
                                   max_timestamp: int) -> None:
    """Kafka's setMaxTimestamp(CREATE_TIME, max): the header says what the records say."""
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes & ~TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    _U32.pack_into(buf, pos + CRC_OFFSET, crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size]))
