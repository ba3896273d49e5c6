"""Hand-written codecs for the messages on the data path: the request header, Produce
requests/responses and Fetch requests/responses.

They run for every request on the data path, where construct's interpreted, field-by-field
parsing is too slow; so they use module-level ``struct.Struct`` objects and ``unpack_from``
over a memoryview instead, and never copy record data: produce records come out as
memoryview slices of the request frame, and fetch responses go out as a list of buffers
with the log's memoryviews in it.
Every length read from the wire is checked against what remains (``struct.unpack_from``
checks fixed-width fields itself). The construct schemas in ``protocol/messages/`` are
the specification; ``tests/protocol/test_fast_codecs.py`` checks these codecs against them.

Versions: Produce 3-8 (non-flexible), Fetch 4-11 (non-flexible).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence, overload

from .errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from .records import decode_uvarint

if TYPE_CHECKING:
    from typing import TypeAlias

    from .records import Buffer

    # The record data of one partition: a slice of the request frame, or the log's memoryview.
    Records: TypeAlias = bytes | bytearray | memoryview
    # [(topic, [(partition, records or None)])]: the data of a Produce request.
    ProduceTopics: TypeAlias = list[tuple[str, list[tuple[int, Records | None]]]]
    # [(topic, [(partition, error_code, base_offset, log_append_time, log_start_offset)])]
    ProduceResults: TypeAlias = list[tuple[str, list[tuple[int, int, int, int, int]]]]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEADER_FIXED = struct.Struct(">hhi")
_HH = struct.Struct(">hi")  # acks, timeout
_FETCH_TOP_V4 = struct.Struct(">iiiib")      # replica_id, max_wait, min_bytes, max_bytes, isolation
_FETCH_SESSION = struct.Struct(">ii")         # session_id, session_epoch
_FETCH_PART_V4 = struct.Struct(">iqi")        # partition, fetch_offset, partition_max_bytes
_FETCH_PART_V5 = struct.Struct(">iqqi")       # + log_start_offset
_FETCH_PART_V9 = struct.Struct(">iiqqi")      # + current_leader_epoch

PRODUCE_VERSIONS = (3, 8)
FETCH_VERSIONS = (4, 11)


def _check_version(version: int, supported: tuple[int, int], what: str) -> None:
    """These layouts are fixed per version range; any other version would be read or written
    as garbage, so calling with one is a bug on our side (the broker answers UNSUPPORTED_VERSION first)."""
    if not supported[0] <= version <= supported[1]:
        raise LocalProtocolError(f"{what} v{version} is not handled here (v{supported[0]}-v{supported[1]})")


def _malformed(what: str) -> RemoteProtocolError:
    return RemoteProtocolError(what, ErrorCode.INVALID_REQUEST)


@overload
def _read_string(buf: Buffer, pos: int, end: int, nullable: Literal[False] = False) -> tuple[str, int]: ...
@overload
def _read_string(buf: Buffer, pos: int, end: int, nullable: bool) -> tuple[str | None, int]: ...


def _read_string(buf: Buffer, pos: int, end: int, nullable: bool = False) -> tuple[str | None, int]:
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise _malformed(f"string length {n}")
    stop = pos + n
    if stop > end:
        raise _malformed(f"string of {n} bytes runs past the frame")
    try:
        return str(buf[pos:stop], "utf-8"), stop
    except UnicodeDecodeError:
        raise _malformed("string is not UTF-8") from None


def _read_count(buf: Buffer, pos: int, end: int, min_item: int) -> tuple[int, int]:
    """An array count; no array these codecs read is nullable, so -1 is as malformed as -2
    (Kafka: "non-nullable field ... was serialized as null")."""
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        raise _malformed(f"array count {n}")
    if n * min_item > end - pos:
        raise _malformed(f"array of {n} entries cannot fit in the frame")
    return n, pos


# ---------------------------------------------------------------------------
# Request header (v1: client id; v2: + tagged fields) and response header


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes of the header: the body starts here


def parse_request_header(buf: Buffer, flexible: bool | None = None, *,
                         flexible_for: Callable[[int, int], bool] | None = None) -> RequestHeader:
    """Parse a request header v1/v2 at the start of ``buf``.

    Whether the tagged-field block (v2) follows depends on the API and version, so pass
    ``flexible`` or a ``flexible_for(api_key, api_version) -> bool`` callable.
    Raises RemoteProtocolError with error_code None: without a header there is nobody to answer.
    """
    end = len(buf)
    try:
        api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(buf, 0)
        (n,) = _I16.unpack_from(buf, 8)
    except struct.error:
        raise RemoteProtocolError(f"request header needs 10 bytes, frame has {end}") from None
    pos = 10
    if n == -1:
        client_id = None
    elif n < 0 or pos + n > end:
        raise RemoteProtocolError(f"client id length {n} does not fit the {end}-byte frame")
    else:
        try:
            client_id = str(buf[pos:pos + n], "utf-8")
        except UnicodeDecodeError:
            raise RemoteProtocolError("client id is not UTF-8") from None
        pos += n
    if flexible is None:
        flexible = flexible_for(api_key, api_version) if flexible_for is not None else False
    if flexible:
        try:
            pos = skip_tagged_fields(buf, pos)
        except (IndexError, ValueError):
            raise RemoteProtocolError("request header tagged fields are truncated") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    count, pos = decode_uvarint(buf, pos, 5)
    for _ in range(count):
        _tag, pos = decode_uvarint(buf, pos, 5)
        size, pos = decode_uvarint(buf, pos, 5)
        pos += size
        if pos > len(buf):
            raise ValueError("tagged field runs past the frame")
    return pos


def encode_request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                          flexible: bool) -> bytes:
    if client_id is None:
        cid = b"\xff\xff"
    else:
        raw = client_id.encode()
        cid = _I16.pack(len(raw)) + raw
    return _HEADER_FIXED.pack(api_key, api_version, correlation_id) + cid + (b"\x00" if flexible else b"")


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (correlation id) or v1 (+ empty tagged fields)."""
    return _I32.pack(correlation_id) + b"\x00" if flexible else _I32.pack(correlation_id)


# ---------------------------------------------------------------------------
# Produce


@dataclass(slots=True)
class ProduceRequest:
    """A decoded Produce request; ``topics`` is [(name, [(partition, records or None)])],
    where records is a memoryview into the request frame (writable if the frame is a bytearray)."""

    version: int
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: ProduceTopics


def decode_produce_request(version: int, buf: Buffer, pos: int) -> ProduceRequest:
    """Decode a Produce v3-v8 body starting at ``pos`` of ``buf`` (a memoryview of the frame)."""
    _check_version(version, PRODUCE_VERSIONS, "Produce request")
    end = len(buf)
    try:
        txn_id, pos = _read_string(buf, pos, end, nullable=True)
        acks, timeout_ms = _HH.unpack_from(buf, pos)
        pos += 6
        ntopics, pos = _read_count(buf, pos, end, 6)
        topics: ProduceTopics = []
        for _ in range(ntopics):
            name, pos = _read_string(buf, pos, end)
            nparts, pos = _read_count(buf, pos, end, 8)
            parts: list[tuple[int, Records | None]] = []
            for _ in range(nparts):
                partition, size = _HEADER_PART.unpack_from(buf, pos)
                pos += 8
                if size < 0:
                    if size != -1:
                        raise _malformed(f"records length {size}")
                    parts.append((partition, None))
                    continue
                stop = pos + size
                if stop > end:
                    raise _malformed(f"records of {size} bytes run past the frame")
                parts.append((partition, buf[pos:stop]))
                pos = stop
            topics.append((name, parts))
    except struct.error:
        raise _malformed("produce request is truncated") from None
    return ProduceRequest(version, txn_id, acks, timeout_ms, topics)


_HEADER_PART = struct.Struct(">ii")  # partition index, records length
_PRODUCE_PART_V3 = struct.Struct(">ihqq")     # index, error, base_offset, log_append_time
_PRODUCE_PART_V5 = struct.Struct(">ihqqq")    # + log_start_offset
_EMPTY_V8 = b"\x00\x00\x00\x00\xff\xff"       # record_errors = [], error_message = null


def _encode_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
        return
    raw = value.encode()[:32767]
    out += _I16.pack(len(raw))
    out += raw


def _encode_record_errors(out: bytearray, record_errors: Sequence[tuple[int, str | None]], message: str | None) -> None:
    out += _I32.pack(len(record_errors))
    for batch_index, batch_message in record_errors:
        out += _I32.pack(batch_index)
        _encode_nullable_string(out, batch_message)
    _encode_nullable_string(out, message)


def encode_produce_response(version: int, correlation_id: int, responses: Sequence[tuple[str, Sequence[Sequence[Any]]]],
                            throttle_time_ms: int = 0) -> bytes:
    """A whole Produce v3-v8 response frame (size prefix included).

    ``responses``: [(topic, [(partition, error_code, base_offset, log_append_time, log_start_offset)])];
    a row may add (record_errors, error_message): [(batch index, message)] and a message, which
    v8+ carries (Kafka's RecordError list and PartitionResponse.errorMessage).
    """
    _check_version(version, PRODUCE_VERSIONS, "Produce response")
    out = bytearray(8)
    part = _PRODUCE_PART_V5 if version >= 5 else _PRODUCE_PART_V3
    out += _I32.pack(len(responses))
    for topic, parts in responses:
        raw = topic.encode()
        out += _I16.pack(len(raw))
        out += raw
        out += _I32.pack(len(parts))
        for p in parts:
            out += part.pack(*p[:5]) if version >= 5 else part.pack(*p[:4])
            if version >= 8:
                if len(p) > 5:
                    _encode_record_errors(out, p[5], p[6])
                else:
                    out += _EMPTY_V8
    out += _I32.pack(throttle_time_ms)
    _I32.pack_into(out, 0, len(out) - 4)
    _I32.pack_into(out, 4, correlation_id)
    return bytes(out)


# ---------------------------------------------------------------------------
# Fetch


@dataclass(slots=True)
class FetchPartition:
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchRequest:
    version: int
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[tuple[str, list[FetchPartition]]]
    forgotten_topics: list[tuple[str, list[int]]]
    rack_id: str


def decode_fetch_request(version: int, buf: Buffer, pos: int) -> FetchRequest:
    """Decode a Fetch v4-v11 body starting at ``pos``."""
    _check_version(version, FETCH_VERSIONS, "Fetch request")
    end = len(buf)
    try:
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation = _FETCH_TOP_V4.unpack_from(buf, pos)
        pos += 17
        session_id, session_epoch = 0, -1
        if version >= 7:
            session_id, session_epoch = _FETCH_SESSION.unpack_from(buf, pos)
            pos += 8
        if version >= 9:
            pstruct, psize = _FETCH_PART_V9, 28
        elif version >= 5:
            pstruct, psize = _FETCH_PART_V5, 24
        else:
            pstruct, psize = _FETCH_PART_V4, 16
        ntopics, pos = _read_count(buf, pos, end, 6)
        topics = []
        for _ in range(ntopics):
            name, pos = _read_string(buf, pos, end)
            nparts, pos = _read_count(buf, pos, end, psize)
            parts = []
            for _ in range(nparts):
                if version >= 9:
                    partition, epoch, offset, log_start, pmax = pstruct.unpack_from(buf, pos)
                elif version >= 5:
                    partition, offset, log_start, pmax = pstruct.unpack_from(buf, pos)
                    epoch = -1
                else:
                    partition, offset, pmax = pstruct.unpack_from(buf, pos)
                    epoch, log_start = -1, -1
                pos += psize
                parts.append(FetchPartition(partition, epoch, offset, log_start, pmax))
            topics.append((name, parts))
        forgotten = []
        if version >= 7:
            nforgot, pos = _read_count(buf, pos, end, 6)
            for _ in range(nforgot):
                name, pos = _read_string(buf, pos, end)
                n, pos = _read_count(buf, pos, end, 4)
                forgotten.append((name, list(struct.unpack_from(f">{n}i", buf, pos))))
                pos += 4 * n
        rack_id = ""
        if version >= 11:
            rack_id, pos = _read_string(buf, pos, end)
    except struct.error:
        raise _malformed("fetch request is truncated") from None
    return FetchRequest(version, replica_id, max_wait_ms, min_bytes, max_bytes, isolation, session_id,
                        session_epoch, topics, forgotten, rack_id)


@dataclass(slots=True)
class FetchPartitionData:
    """One partition's slot in a Fetch response; ``records`` is a buffer (memoryview of the log) or None."""

    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Records | None = None
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1

_FETCH_PD_V4 = struct.Struct(">ihqq")   # partition, error, hw, lso
_FETCH_PD_V5 = struct.Struct(">ihqqq")  # + log_start_offset
_ABORTED = struct.Struct(">qq")


def encode_fetch_response(version: int, correlation_id: int, responses: Sequence[tuple[str, Sequence[FetchPartitionData]]],
                          *, throttle_time_ms: int = 0, error_code: int = 0, session_id: int = 0
                          ) -> tuple[list[Records], int]:
    """A Fetch v4-v11 response frame as a list of buffers for ``writelines`` (record data
    is not copied), and its total length in bytes.

    ``responses``: [(topic, [FetchPartitionData])].
    """
    _check_version(version, FETCH_VERSIONS, "Fetch response")
    chunks: list[Records] = []
    out = bytearray(8)
    out += _I32.pack(throttle_time_ms)
    if version >= 7:
        out += _I16.pack(error_code)
        out += _I32.pack(session_id)
    out += _I32.pack(len(responses))
    total = 0
    for topic, parts in responses:
        raw = topic.encode()
        out += _I16.pack(len(raw))
        out += raw
        out += _I32.pack(len(parts))
        for p in parts:
            if version >= 5:
                out += _FETCH_PD_V5.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset,
                                         p.log_start_offset)
            else:
                out += _FETCH_PD_V4.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\xff\xff\xff\xff"
            else:
                out += _I32.pack(len(aborted))
                for producer_id, first_offset in aborted:
                    out += _ABORTED.pack(producer_id, first_offset)
            if version >= 11:
                out += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                out += b"\xff\xff\xff\xff"
            else:
                n = len(records)
                out += _I32.pack(n)
                if n:
                    if n < 512:
                        out += records
                    else:
                        chunks.append(out)
                        total += len(out)
                        chunks.append(records)
                        total += n
                        out = bytearray()
    chunks.append(out)
    total += len(out)
    head = chunks[0]
    _I32.pack_into(head, 0, total - 4)
    _I32.pack_into(head, 4, correlation_id)
    return chunks, total


# ---------------------------------------------------------------------------
# The client side of the same two messages (producers, the replica fetcher, the load generator)


def encode_produce_request(version: int, correlation_id: int, client_id: str | None, acks: int, timeout_ms: int,
                           topics: Sequence[tuple[str, Sequence[tuple[int, Records | None]]]],
                           transactional_id: str | None = None) -> list[Records]:
    """A whole Produce v3-v8 request frame as buffers; ``topics``: [(topic, [(partition, records)])]."""
    _check_version(version, PRODUCE_VERSIONS, "Produce request")
    out = bytearray(4)
    out += encode_request_header(0, version, correlation_id, client_id, False)
    if transactional_id is None:
        out += b"\xff\xff"
    else:
        raw = transactional_id.encode()
        out += _I16.pack(len(raw)) + raw
    out += _HH.pack(acks, timeout_ms)
    out += _I32.pack(len(topics))
    chunks: list[Records] = []
    total = 0
    for topic, parts in topics:
        raw = topic.encode()
        out += _I16.pack(len(raw))
        out += raw
        out += _I32.pack(len(parts))
        for partition, records in parts:
            if records is None:
                out += _HEADER_PART.pack(partition, -1)
                continue
            out += _HEADER_PART.pack(partition, len(records))
            chunks.append(out)
            total += len(out)
            chunks.append(records)
            total += len(records)
            out = bytearray()
    chunks.append(out)
    total += len(out)
    _I32.pack_into(chunks[0], 0, total - 4)
    return chunks


def decode_produce_response(version: int, buf: Buffer, pos: int = 0) -> ProduceResults:
    """[(topic, [(partition, error, base_offset, log_append_time, log_start_offset)])] of a Produce v3-v8 body."""
    _check_version(version, PRODUCE_VERSIONS, "Produce response")
    end = len(buf)
    try:
        ntopics, pos = _read_count(buf, pos, end, 6)
        out = []
        for _ in range(ntopics):
            name, pos = _read_string(buf, pos, end)
            nparts, pos = _read_count(buf, pos, end, 14)
            parts = []
            for _ in range(nparts):
                if version >= 5:
                    p = _PRODUCE_PART_V5.unpack_from(buf, pos)
                    pos += _PRODUCE_PART_V5.size
                else:
                    p = _PRODUCE_PART_V3.unpack_from(buf, pos) + (-1,)
                    pos += _PRODUCE_PART_V3.size
                if version >= 8:
                    nerr, pos = _read_count(buf, pos, end, 6)
                    for _ in range(nerr):
                        pos += 4
                        _msg, pos = _read_string(buf, pos, end, nullable=True)
                    _msg, pos = _read_string(buf, pos, end, nullable=True)
                parts.append(p)
            out.append((name, parts))
        _I32.unpack_from(buf, pos)  # throttle_time_ms: not returned, but a response without it is truncated
    except struct.error:
        raise RemoteProtocolError("produce response is truncated") from None
    return out


def encode_fetch_request(version: int, correlation_id: int, client_id: str | None, request: FetchRequest) -> bytes:
    """A whole Fetch v4-v11 request frame."""
    _check_version(version, FETCH_VERSIONS, "Fetch request")
    out = bytearray(4)
    out += encode_request_header(1, version, correlation_id, client_id, False)
    out += _FETCH_TOP_V4.pack(request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes,
                              request.isolation_level)
    if version >= 7:
        out += _FETCH_SESSION.pack(request.session_id, request.session_epoch)
    out += _I32.pack(len(request.topics))
    for topic, parts in request.topics:
        raw = topic.encode()
        out += _I16.pack(len(raw)) + raw
        out += _I32.pack(len(parts))
        for fp in parts:
            if version >= 9:
                out += _FETCH_PART_V9.pack(fp.partition, fp.current_leader_epoch, fp.fetch_offset,
                                           fp.log_start_offset, fp.partition_max_bytes)
            elif version >= 5:
                out += _FETCH_PART_V5.pack(fp.partition, fp.fetch_offset, fp.log_start_offset, fp.partition_max_bytes)
            else:
                out += _FETCH_PART_V4.pack(fp.partition, fp.fetch_offset, fp.partition_max_bytes)
    if version >= 7:
        out += _I32.pack(len(request.forgotten_topics))
        for topic, partitions in request.forgotten_topics:
            raw = topic.encode()
            out += _I16.pack(len(raw)) + raw
            out += _I32.pack(len(partitions))
            out += struct.pack(f">{len(partitions)}i", *partitions)
    if version >= 11:
        raw = request.rack_id.encode()
        out += _I16.pack(len(raw)) + raw
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


@dataclass(slots=True)
class FetchResponse:
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[tuple[str, list[FetchPartitionData]]]  # records are memoryviews of the frame


def decode_fetch_response(version: int, buf: Buffer, pos: int = 0) -> FetchResponse:
    """Decode a Fetch v4-v11 response body; record data stays a memoryview slice of ``buf``."""
    _check_version(version, FETCH_VERSIONS, "Fetch response")
    end = len(buf)
    try:
        (throttle,) = _I32.unpack_from(buf, pos)
        pos += 4
        error_code, session_id = 0, 0
        if version >= 7:
            (error_code,) = _I16.unpack_from(buf, pos)
            (session_id,) = _I32.unpack_from(buf, pos + 2)
            pos += 6
        ntopics, pos = _read_count(buf, pos, end, 6)
        responses = []
        for _ in range(ntopics):
            name, pos = _read_string(buf, pos, end)
            nparts, pos = _read_count(buf, pos, end, 30)
            parts = []
            for _ in range(nparts):
                if version >= 5:
                    partition, error, hw, lso, log_start = _FETCH_PD_V5.unpack_from(buf, pos)
                    pos += _FETCH_PD_V5.size
                else:
                    partition, error, hw, lso = _FETCH_PD_V4.unpack_from(buf, pos)
                    log_start = -1
                    pos += _FETCH_PD_V4.size
                (naborted,) = _I32.unpack_from(buf, pos)
                pos += 4
                aborted = None
                if naborted >= 0:
                    if naborted * 16 > end - pos:
                        raise _malformed("aborted transactions run past the frame")
                    aborted = [_ABORTED.unpack_from(buf, pos + 16 * i) for i in range(naborted)]
                    pos += 16 * naborted
                elif naborted != -1:
                    raise _malformed(f"aborted transactions count {naborted}")
                preferred = -1
                if version >= 11:
                    (preferred,) = _I32.unpack_from(buf, pos)
                    pos += 4
                (size,) = _I32.unpack_from(buf, pos)
                pos += 4
                records = None
                if size >= 0:
                    stop = pos + size
                    if stop > end:
                        raise _malformed(f"records of {size} bytes run past the frame")
                    records = buf[pos:stop]
                    pos = stop
                elif size != -1:
                    raise _malformed(f"records length {size}")
                parts.append(FetchPartitionData(partition, error, hw, lso, log_start, records, aborted, preferred))
            responses.append((name, parts))
    except struct.error:
        raise _malformed("fetch response is truncated") from None
    return FetchResponse(throttle, error_code, session_id, responses)
