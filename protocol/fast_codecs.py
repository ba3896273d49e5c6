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

The Produce request decoder and response encoder run compiled when protocol/_produce_codec.c
is built (setup.py; one C call instead of one Python call per field: about a tenth of a
produce request's CPU in the broker, bench/produce_path_bench.py), and so do the Fetch request
decoder and response encoder for the common message (no forgotten topics, rack id or aborted
transactions: every follower's fetch; ~7% of a leader's instructions per acks=all produce,
bench/replication_instructions.py), the rest falling back to Python; the Python below is the
reference, used without the module, and tests/protocol/test_fast_codecs.py checks that both
give the same answer on any input.
"""

from __future__ import annotations

import functools
import struct
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Container, Literal, NamedTuple, Sequence, overload

from .errors import CorruptRecordError, ErrorCode, LocalProtocolError, RemoteProtocolError
from .records import HEADER_SIZE, decode_uvarint, encode_uvarint, first_batch_size, produce_records_error

_PRODUCE_CODEC_ABI = 4  # the interface of protocol/_produce_codec.c these calls expect (its ABI)
try:
    from . import _produce_codec
except ImportError:  # not built (setup.py): the Python codecs below
    _produce_codec = None  # type: ignore[assignment]
else:
    if getattr(_produce_codec, "ABI", None) != _PRODUCE_CODEC_ABI:
        # Built from an older source (a checkout moved on without `pip install -e .`): its
        # calls take other arguments, so the Python codecs serve instead, and say so once.
        import logging as _logging
        _logging.getLogger("kbroker.codecs").warning(
            "protocol/_produce_codec is built from an older source (interface %s, expected %d): the Python "
            "codecs serve; rebuild with `pip install -e .`", getattr(_produce_codec, "ABI", None), _PRODUCE_CODEC_ABI)
        _produce_codec = None  # type: ignore[assignment]

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
_ZERO_UUID = uuid.UUID(int=0)
_HEADER_FIXED = struct.Struct(">hhi")
_HEADER_FIXED_CID = struct.Struct(">hhih")  # and the client id's length
_HH = struct.Struct(">hi")  # acks, timeout
_FETCH_TOP_V4 = struct.Struct(">iiiib")      # replica_id, max_wait, min_bytes, max_bytes, isolation
_FETCH_SESSION = struct.Struct(">ii")         # session_id, session_epoch
_FETCH_TOP_V7 = struct.Struct(">iiiibiii")    # _FETCH_TOP_V4's, _FETCH_SESSION's and the topic count
_SIZE_HEADER_FIXED = struct.Struct(">ihhi")   # a frame's size, then _HEADER_FIXED's
_FETCH_PART_V4 = struct.Struct(">iqi")        # partition, fetch_offset, partition_max_bytes
_FETCH_PART_V5 = struct.Struct(">iqqi")       # + log_start_offset
_FETCH_PART_V9 = struct.Struct(">iiqqi")      # + current_leader_epoch

PRODUCE_VERSIONS = (3, 8)
_PRODUCE_LOW, _PRODUCE_HIGH = PRODUCE_VERSIONS
FETCH_VERSIONS = (4, 11)
_FETCH_LOW, _FETCH_HIGH = FETCH_VERSIONS


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
                         flexible_for: Callable[[int, int], bool] | None = None,
                         flexible_versions: Container[tuple[int, int]] | None = None,
                         cls: type[RequestHeader] = RequestHeader) -> RequestHeader:
    """Parse a request header v1/v2 at the start of ``buf`` into a ``cls``.

    Whether the tagged-field block (v2) follows depends on the API and version, so pass
    ``flexible``, or the (api_key, api_version) pairs that have it (``flexible_versions``:
    protocol.messages.REQUEST_FLEXIBLE_VERSIONS, a set lookup, no Python call per request), or
    a ``flexible_for(api_key, api_version) -> bool`` callable.
    Raises RemoteProtocolError with error_code None: without a header there is nobody to answer.
    """
    end = len(buf)
    if end < 10:
        raise RemoteProtocolError(f"request header needs 10 bytes, frame has {end}")
    api_key, api_version, correlation_id, n = _HEADER_FIXED_CID.unpack_from(buf, 0)  # one call: every request
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
        if flexible_versions is not None:
            flexible = (api_key, api_version) in flexible_versions
        else:
            flexible = flexible_for(api_key, api_version) if flexible_for is not None else False
    if flexible:
        try:
            pos = skip_tagged_fields(buf, pos)
        except (IndexError, ValueError):
            raise RemoteProtocolError("request header tagged fields are truncated") from None
    return cls(api_key, api_version, correlation_id, client_id, pos)


def parse_header_py(buf: Buffer, flexible_versions: Container[tuple[int, int]],
                    cls: type[RequestHeader] = RequestHeader) -> RequestHeader | str:
    """``parse_request_header(buf, flexible_versions=...)`` answering a malformed header with
    the reason (a str) instead of raising: the reference of protocol/_produce_codec.c's
    ``parse_header``, which the broker calls for every request (``parse_header``)."""
    try:
        return parse_request_header(buf, flexible_versions=flexible_versions, cls=cls)
    except RemoteProtocolError as exc:
        return str(exc)


# The broker's header parse: parse_header(frame, REQUEST_FLEXIBLE_VERSIONS, RequestHeader) ->
# RequestHeader | reason, one C call where protocol/_produce_codec.c is built.
parse_header: Callable[[Buffer, Container[tuple[int, int]], type[RequestHeader]], RequestHeader | str] = (
    _produce_codec.parse_header if _produce_codec is not None else parse_header_py)


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
    # Every partition's records are one whole batch that the produce path's checks before the
    # log pass as they are (``produce_request_is_plain_py``): broker/apis.py then skips them.
    plain: bool = False


def decode_produce_request(version: int, buf: Buffer, pos: int) -> ProduceRequest:
    """Decode a Produce v3-v8 body starting at ``pos`` of ``buf`` (a memoryview of the frame)."""
    if not _PRODUCE_LOW <= version <= _PRODUCE_HIGH:  # every request: no call unless it fails
        _check_version(version, PRODUCE_VERSIONS, "Produce request")
    if _produce_codec is not None:
        decoded = _produce_codec.decode(buf, pos, version)
        if decoded.__class__ is str:
            raise _malformed(decoded)
        return ProduceRequest(version, *decoded)
    return decode_produce_request_py(version, buf, pos)


def decode_produce_request_py(version: int, buf: Buffer, pos: int) -> ProduceRequest:
    """``decode_produce_request`` in Python: the reference of protocol/_produce_codec.c."""
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
    return ProduceRequest(version, txn_id, acks, timeout_ms, topics, produce_request_is_plain_py(version, topics))


def produce_request_is_plain_py(version: int, topics: ProduceTopics) -> bool:
    """Whether every partition's records are exactly one whole batch, of a v2 header's size at
    least, that broker/apis.py's checks before the log pass as they are: the first batch read
    the way Kafka's batch iterator reads it (``first_batch_size``: no CORRUPT_MESSAGE), not
    transactional, nothing after it, and ``produce_records_error`` None (magic 2, a codec
    ``version`` allows). The reference of the ``plain`` flag protocol/_produce_codec.c sets;
    False is always safe (the checks then run)."""
    for _t, parts in topics:
        for _p, records in parts:
            if records is None or len(records) < HEADER_SIZE:
                return False
            try:
                size, transactional = first_batch_size(records)
            except CorruptRecordError:
                return False
            if transactional or size != len(records) or produce_records_error(version, records, size) is not None:
                return False
    return True


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
    if not _PRODUCE_LOW <= version <= _PRODUCE_HIGH:
        _check_version(version, PRODUCE_VERSIONS, "Produce response")
    if _produce_codec is not None:
        # None: a row with record errors, or a value the C encoder leaves to Python (which says why)
        encoded: bytes | None = _produce_codec.encode(version, correlation_id, responses, throttle_time_ms)
        if encoded is not None:
            return encoded
    return encode_produce_response_py(version, correlation_id, responses, throttle_time_ms)


def encode_produce_response_py(version: int, correlation_id: int,
                               responses: Sequence[tuple[str, Sequence[Sequence[Any]]]],
                               throttle_time_ms: int = 0) -> bytes:
    """``encode_produce_response`` in Python: the reference of protocol/_produce_codec.c."""
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
    """Decode a Fetch v4-v11 body starting at ``pos``: one C call where protocol/_produce_codec.c
    is built and the body is the common one (no forgotten topics, no rack id: every follower's
    fetch, issue 29), else ``decode_fetch_request_py``, which also says what is malformed."""
    if _produce_codec is not None:
        request = _produce_codec.decode_fetch(buf, pos, version, FetchRequest, FetchPartition)
        if request is not None:
            return request  # type: ignore[no-any-return]
    return decode_fetch_request_py(version, buf, pos)


# decode_fetch_request's compiled decoder itself (None without protocol/_produce_codec.c):
# decode_fetch_c(buf, pos, version, FetchRequest, FetchPartition) -> FetchRequest, or None for what
# it leaves to decode_fetch_request_py (KafkaApis' follower fetches call it directly, issue 29).
decode_fetch_c: Callable[..., FetchRequest | None] | None = (
    _produce_codec.decode_fetch if _produce_codec is not None else None)
# encode_fetch_response's compiled encoder itself (None without it): encode_fetch_c(version,
# correlation_id, responses, throttle_time_ms, error_code, session_id, FetchPartitionData) ->
# (buffers, size), or None for what it leaves to encode_fetch_response_py (KafkaApis' answers to
# followers call it directly, issue 29).
encode_fetch_c: Callable[..., tuple[list[Records], int] | None] | None = (
    _produce_codec.encode_fetch if _produce_codec is not None else None)


def decode_fetch_request_py(version: int, buf: Buffer, pos: int) -> FetchRequest:
    """``decode_fetch_request`` in Python: the reference of protocol/_produce_codec.c's
    ``decode_fetch``, and the decoder of what it leaves (forgotten topics, a rack id, errors)."""
    if not _FETCH_LOW <= version <= _FETCH_HIGH:  # (_check_version's test, its call only when it fails)
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
        # The counts and strings are read inline (a fetch per follower per produce, issue 29):
        # _read_count and _read_string are called only for what they refuse, to raise.
        (ntopics,) = _I32.unpack_from(buf, pos)
        if ntopics < 0 or ntopics * 6 > end - pos - 4:
            _read_count(buf, pos, end, 6)
        pos += 4
        topics = []
        for _ in range(ntopics):
            (n,) = _I16.unpack_from(buf, pos)
            stop = pos + 2 + n
            if n < 0 or stop > end:
                _read_string(buf, pos, end)
            name = str(buf[pos + 2:stop], "utf-8")
            (nparts,) = _I32.unpack_from(buf, stop)
            pos = stop + 4
            if nparts < 0 or nparts * psize > end - pos:
                _read_count(buf, stop, end, psize)
            parts = []
            if version >= 9:  # the fields in FetchPartition's order
                unpack = pstruct.unpack_from
                for _ in range(nparts):
                    parts.append(FetchPartition(*unpack(buf, pos)))
                    pos += psize
                topics.append((name, parts))
                continue
            for _ in range(nparts):
                if version >= 5:
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
            (nforgot,) = _I32.unpack_from(buf, pos)
            if nforgot:
                nforgot, pos = _read_count(buf, pos, end, 6)
                for _ in range(nforgot):
                    name, pos = _read_string(buf, pos, end)
                    n, pos = _read_count(buf, pos, end, 4)
                    forgotten.append((name, list(struct.unpack_from(f">{n}i", buf, pos))))
                    pos += 4 * n
            else:
                pos += 4
        rack_id = ""
        if version >= 11 and _I16.unpack_from(buf, pos)[0] != 0:  # (an empty rack id: "")
            rack_id, pos = _read_string(buf, pos, end)
    except struct.error:
        raise _malformed("fetch request is truncated") from None
    except UnicodeDecodeError:  # (a topic name, read inline)
        raise _malformed("string is not UTF-8") from None
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
# the same fixed fields, then a null aborted list (-1), the preferred replica (v11) and the records length
_FETCH_PD_PLAIN_V4 = struct.Struct(">ihqqii")
_FETCH_PD_PLAIN_V5 = struct.Struct(">ihqqqii")
_FETCH_PD_PLAIN_V11 = struct.Struct(">ihqqqiii")
_FETCH_PD_HEAD_V4 = struct.Struct(">ihqqi")  # (decoding) the fixed fields and the aborted count
_FETCH_PD_HEAD_V5 = struct.Struct(">ihqqqi")
_FETCH_RESP_TOP_V7 = struct.Struct(">ihii")  # throttle_time_ms, error_code, session_id, topic count
_FETCH_RESP_ONE_TOPIC = struct.Struct(">ihiih")  # and the first topic name's length
_FETCH_RESP_ONE_PARTITION = struct.Struct(">iihqqqiii")  # a partition count, then _FETCH_PD_PLAIN_V11's
_FETCH_RESP_TOP_V7_HEAD = struct.Struct(">ihi")
_I32X2 = struct.Struct(">ii")


def encode_fetch_response(version: int, correlation_id: int, responses: Sequence[tuple[str, Sequence[FetchPartitionData]]],
                          *, throttle_time_ms: int = 0, error_code: int = 0, session_id: int = 0
                          ) -> tuple[list[Records], int]:
    """A Fetch v4-v11 response frame as a list of buffers for ``writelines`` (record data
    is not copied), and its total length in bytes.

    ``responses``: [(topic, [FetchPartitionData])]. One C call where protocol/_produce_codec.c
    is built and no partition has aborted transactions (every answer to a follower, issue 29),
    else ``encode_fetch_response_py``, which also says what does not fit.
    """
    if _produce_codec is not None:
        encoded = _produce_codec.encode_fetch(version, correlation_id, responses, throttle_time_ms, error_code,
                                              session_id, FetchPartitionData)
        if encoded is not None:
            return encoded
    return encode_fetch_response_py(version, correlation_id, responses, throttle_time_ms=throttle_time_ms,
                                     error_code=error_code, session_id=session_id)


def encode_fetch_response_py(version: int, correlation_id: int,
                             responses: Sequence[tuple[str, Sequence[FetchPartitionData]]],
                             *, throttle_time_ms: int = 0, error_code: int = 0, session_id: int = 0
                             ) -> tuple[list[Records], int]:
    """``encode_fetch_response`` in Python: the reference of protocol/_produce_codec.c's
    ``encode_fetch``, and the encoder of what it leaves."""
    if not _FETCH_LOW <= version <= _FETCH_HIGH:
        _check_version(version, FETCH_VERSIONS, "Fetch response")
    chunks: list[Records] = []
    out = bytearray(8)
    if version >= 7:
        out += _FETCH_RESP_TOP_V7.pack(throttle_time_ms, error_code, session_id, len(responses))
    else:
        out += _I32X2.pack(throttle_time_ms, len(responses))
    # A partition without aborted transactions (all but read_committed answers) is one pack of
    # its fixed fields, the null aborted list, the preferred replica (v11) and the records length.
    v5 = version >= 5
    v11 = version >= 11
    plain = _FETCH_PD_PLAIN_V11 if v11 else (_FETCH_PD_PLAIN_V5 if v5 else _FETCH_PD_PLAIN_V4)
    total = 0
    for topic, parts in responses:
        raw = topic.encode()
        out += _I16.pack(len(raw))
        out += raw
        out += _I32.pack(len(parts))
        for p in parts:
            records = p.records
            # (a memoryview's len counts items: its bytes are nbytes; the compiled encoder leaves
            # a view of wider items to this one)
            n = -1 if records is None else (records.nbytes if records.__class__ is memoryview else len(records))
            aborted = p.aborted_transactions
            if aborted is None:
                if v11:
                    out += plain.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset,
                                      p.log_start_offset, -1, p.preferred_read_replica, n)
                elif v5:
                    out += plain.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset,
                                      p.log_start_offset, -1, n)
                else:
                    out += plain.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset, -1, n)
            else:
                if v5:
                    out += _FETCH_PD_V5.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset,
                                             p.log_start_offset)
                else:
                    out += _FETCH_PD_V4.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
                out += _I32.pack(len(aborted))
                for producer_id, first_offset in aborted:
                    out += _ABORTED.pack(producer_id, first_offset)
                if v11:
                    out += _I32X2.pack(p.preferred_read_replica, n)
                else:
                    out += _I32.pack(n)
            if records:  # (n > 0)
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
    """A whole Fetch v4-v11 request frame. (A follower sends one per response, issue 29: the
    fixed fields go in one ``pack``, the client id, topic names and rack id from _string16's cache.)"""
    if not _FETCH_LOW <= version <= _FETCH_HIGH:
        _check_version(version, FETCH_VERSIONS, "Fetch request")  # raises
    # the size (patched at the end) and the request header v1 (encode_request_header's, inline)
    out = bytearray(_SIZE_HEADER_FIXED.pack(0, 1, version, correlation_id))
    out += b"\xff\xff" if client_id is None else _string16(client_id)
    topics = request.topics
    if version >= 7:
        out += _FETCH_TOP_V7.pack(request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes,
                                  request.isolation_level, request.session_id, request.session_epoch, len(topics))
    else:
        out += _FETCH_TOP_V4.pack(request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes,
                                  request.isolation_level)
        out += _I32.pack(len(topics))
    if version >= 9:
        pack = _FETCH_PART_V9.pack
        for topic, parts in topics:
            out += _string16(topic)
            out += _I32.pack(len(parts))
            for fp in parts:
                out += pack(fp.partition, fp.current_leader_epoch, fp.fetch_offset, fp.log_start_offset,
                            fp.partition_max_bytes)
    else:
        for topic, parts in topics:
            out += _string16(topic)
            out += _I32.pack(len(parts))
            for fp in parts:
                if version >= 5:
                    out += _FETCH_PART_V5.pack(fp.partition, fp.fetch_offset, fp.log_start_offset,
                                               fp.partition_max_bytes)
                else:
                    out += _FETCH_PART_V4.pack(fp.partition, fp.fetch_offset, fp.partition_max_bytes)
    if version >= 7:
        forgotten = request.forgotten_topics
        out += _I32.pack(len(forgotten))
        for topic, partitions in forgotten:
            out += _string16(topic)
            out += _I32.pack(len(partitions))
            out += struct.pack(f">{len(partitions)}i", *partitions)
    if version >= 11:
        out += _string16(request.rack_id)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


@functools.lru_cache(maxsize=4096)
def _string16(value: str) -> bytes:
    """A STRING's bytes: its int16 length, then UTF-8. Cached (a hit runs no Python): a
    follower's every Fetch names the same client id, topics and rack id."""
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


@dataclass(slots=True)
class FetchResponse:
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[tuple[str, list[FetchPartitionData]]]  # records are memoryviews of the frame


def decode_fetch_response(version: int, buf: Buffer, pos: int = 0) -> FetchResponse:
    """Decode a Fetch v4-v11 response body; record data stays a memoryview slice of ``buf``.
    (The counts and names are read inline: _read_count and _read_string are called only to raise.)"""
    if not _FETCH_LOW <= version <= _FETCH_HIGH:
        _check_version(version, FETCH_VERSIONS, "Fetch response")  # raises
    end = len(buf)
    if version >= 11 and pos + 16 <= end:
        # One topic of one partition without aborted transactions (a follower's every response
        # at low or half load, issue 29): two unpacks, then the general way's objects; any
        # other shape, or one it would refuse, goes the general way.
        throttle, error_code, session_id, ntopics, n = _FETCH_RESP_ONE_TOPIC.unpack_from(buf, pos)
        stop = pos + 16 + n
        if ntopics == 1 and n >= 0 and stop + 46 <= end:
            nparts, partition, error, hw, lso, log_start, naborted, preferred, size = \
                _FETCH_RESP_ONE_PARTITION.unpack_from(buf, stop)
            records_pos = stop + 46
            if nparts == 1 and naborted == -1 and size >= 0 and records_pos + size <= end:
                try:
                    name = str(buf[pos + 16:stop], "utf-8")
                except UnicodeDecodeError:
                    pass  # (the general way raises)
                else:
                    return FetchResponse(throttle, error_code, session_id, [(name, [FetchPartitionData(
                        partition, error, hw, lso, log_start, buf[records_pos:records_pos + size], None, preferred)])])
    return _decode_fetch_response_any(version, buf, pos)


def _decode_fetch_response_any(version: int, buf: Buffer, pos: int) -> FetchResponse:
    """``decode_fetch_response`` of any shape (the reference of its one-partition way)."""
    end = len(buf)
    try:
        if version >= 7:
            throttle, error_code, session_id, ntopics = _FETCH_RESP_TOP_V7.unpack_from(buf, pos)
            pos += 14
        else:
            throttle, ntopics = _I32X2.unpack_from(buf, pos)
            pos += 8
            error_code, session_id = 0, 0
        if ntopics < 0 or ntopics * 6 > end - pos:
            _read_count(buf, pos - 4, end, 6)  # raises
        v5 = version >= 5
        v11 = version >= 11
        head = _FETCH_PD_HEAD_V5 if v5 else _FETCH_PD_HEAD_V4
        head_unpack, head_size = head.unpack_from, head.size
        plain_unpack = _FETCH_PD_PLAIN_V11.unpack_from
        responses = []
        for _ in range(ntopics):
            (n,) = _I16.unpack_from(buf, pos)
            stop = pos + 2 + n
            if n < 0 or stop > end:
                _read_string(buf, pos, end)  # raises
            try:
                name = str(buf[pos + 2:stop], "utf-8")
            except UnicodeDecodeError:
                _read_string(buf, pos, end)  # raises
            pos = stop
            (nparts,) = _I32.unpack_from(buf, pos)
            if nparts < 0 or nparts * 30 > end - pos - 4:
                _read_count(buf, pos, end, 30)  # raises
            pos += 4
            parts = []
            for _ in range(nparts):
                if v11 and pos + 42 <= end:
                    # (v11, no aborted transactions: a follower's every partition) the fixed
                    # fields, the null aborted list, the preferred replica and the records size at once
                    partition, error, hw, lso, log_start, naborted, preferred, size = plain_unpack(buf, pos)
                    if naborted == -1 and size >= 0 and pos + 42 + size <= end:
                        pos += 42
                        stop = pos + size
                        parts.append(FetchPartitionData(partition, error, hw, lso, log_start, buf[pos:stop], None,
                                                        preferred))
                        pos = stop
                        continue
                if v5:
                    partition, error, hw, lso, log_start, naborted = head_unpack(buf, pos)
                else:
                    partition, error, hw, lso, naborted = head_unpack(buf, pos)
                    log_start = -1
                pos += head_size
                aborted = None
                if naborted >= 0:
                    if naborted * 16 > end - pos:
                        raise _malformed("aborted transactions run past the frame")
                    aborted = [_ABORTED.unpack_from(buf, pos + 16 * i) for i in range(naborted)]
                    pos += 16 * naborted
                elif naborted != -1:
                    raise _malformed(f"aborted transactions count {naborted}")
                if v11:
                    preferred, size = _I32X2.unpack_from(buf, pos)
                    pos += 8
                else:
                    preferred = -1
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


# ---------------------------------------------------------------------------
# The controller's LeaderAndIsr and UpdateMetadata (and LeaderAndIsr's response)
#
# A full state carries every partition of the cluster (tens of thousands of entries), sent on
# every broker registration and to every broker by a new controller: construct spends seconds
# on one, in the process that also runs the broker. These cover every version the broker
# accepts (LeaderAndIsr 0-7, flexible 4+; UpdateMetadata 0-8, flexible 6+), with the layouts of
# protocol/messages/control.py: decoded values carry the fields of construct's Containers
# under the same names (fields a version lacks at the schema's defaults), so handlers read
# them the same way. Unknown tagged fields are skipped; a repeated known tag overrides.

LEADER_AND_ISR_VERSIONS = (0, 7)
UPDATE_METADATA_VERSIONS = (0, 8)
_LISR_FLEXIBLE = 4
_UM_FLEXIBLE = 6
_UM_TYPE_TAG = 0                 # UpdateMetadata v8+: the request type, tagged
_UM_TOPIC_CONFIGS_TAG = 10000    # kbroker's topic config overrides (messages/control.py)
_UM_METADATA_RECORDS_TAG = 10001  # kbroker's security records (messages/control.py)
_I32X4 = struct.Struct(">iiii")
_II = struct.Struct(">ii")
_IH = struct.Struct(">ih")
_UUID = struct.Struct(">16s")


@dataclass(slots=True)
class LeaderAndIsrPartitionState:
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: Sequence[int]
    partition_epoch: int
    replicas: Sequence[int]
    adding_replicas: Sequence[int] = ()
    removing_replicas: Sequence[int] = ()
    is_new: bool = False
    leader_recovery_state: int = 0
    topic_name: str = ""  # v0-1 only (ungrouped states)


@dataclass(slots=True)
class LeaderAndIsrTopicState:
    topic_name: str
    topic_id: uuid.UUID
    partition_states: list[LeaderAndIsrPartitionState]


@dataclass(slots=True)
class LeaderAndIsrLiveLeader:
    broker_id: int
    host_name: str
    port: int


@dataclass(slots=True)
class LeaderAndIsrRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int = -1
    type: int = 0
    topic_states: list[LeaderAndIsrTopicState] = field(default_factory=list)            # v2+
    live_leaders: list[LeaderAndIsrLiveLeader] = field(default_factory=list)
    ungrouped_partition_states: list[LeaderAndIsrPartitionState] = field(default_factory=list)  # v0-1
    is_kraft_controller: bool = False


@dataclass(slots=True)
class LeaderAndIsrPartitionError:
    partition_index: int
    error_code: int
    topic_name: str = ""  # v0-4 only


@dataclass(slots=True)
class LeaderAndIsrTopicError:
    topic_id: uuid.UUID
    partition_errors: list[LeaderAndIsrPartitionError]


@dataclass(slots=True)
class LeaderAndIsrResponse:
    error_code: int
    partition_errors: list[LeaderAndIsrPartitionError] = field(default_factory=list)  # v0-4
    topics: list[LeaderAndIsrTopicError] = field(default_factory=list)                # v5+


@dataclass(slots=True)
class UpdateMetadataPartitionState:
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: Sequence[int]
    zk_version: int
    replicas: Sequence[int]
    offline_replicas: Sequence[int] = ()
    topic_name: str = ""  # v0-4 only (ungrouped states)


class UpdateMetadataTopicConfig(NamedTuple):
    name: str
    value: str


@dataclass(slots=True)
class UpdateMetadataTopicState:
    topic_name: str
    topic_id: uuid.UUID
    partition_states: list[UpdateMetadataPartitionState]
    topic_configs: list[UpdateMetadataTopicConfig] = field(default_factory=list)  # v6+, tag 10000


@dataclass(slots=True)
class UpdateMetadataEndpoint:
    port: int
    host: str
    listener: str
    security_protocol: int


@dataclass(slots=True)
class UpdateMetadataBroker:
    id: int
    endpoints: list[UpdateMetadataEndpoint] = field(default_factory=list)  # v1+
    rack: str | None = ""       # v2+
    v0_host: str = ""           # v0 only
    v0_port: int = 0


@dataclass(slots=True)
class UpdateMetadataRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int = -1
    type: int = 0
    topic_states: list[UpdateMetadataTopicState] = field(default_factory=list)                    # v5+
    live_brokers: list[UpdateMetadataBroker] = field(default_factory=list)
    ungrouped_partition_states: list[UpdateMetadataPartitionState] = field(default_factory=list)  # v0-4
    is_kraft_controller: bool = False
    metadata_records: list[bytes] = field(default_factory=list)  # v6+, tag 10001: framed metadata records


class _Reader:
    """A cursor over one frame for the flexible and non-flexible layouts alike: compact
    (uvarint length + 1) or classic lengths, every length checked against what remains."""

    __slots__ = ("buf", "pos", "end", "flexible")

    def __init__(self, buf: Buffer, pos: int, end: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.flexible = flexible

    def uvarint(self) -> int:
        buf, pos = self.buf, self.pos
        if pos >= self.end:
            raise _malformed("truncated varint")
        b = buf[pos]
        if b < 0x80:
            self.pos = pos + 1
            return b
        result = b & 0x7F
        shift = 7
        while True:
            pos += 1
            if pos >= self.end:
                raise _malformed("truncated varint")
            b = buf[pos]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos + 1
                return result
            shift += 7
            if shift >= 35:
                raise _malformed("unsigned varint longer than 5 bytes")

    def fixed(self, s: struct.Struct) -> tuple[Any, ...]:
        pos = self.pos
        if pos + s.size > self.end:
            raise _malformed("truncated")
        self.pos = pos + s.size
        return s.unpack_from(self.buf, pos)

    def int8(self) -> int:
        value: int = self.fixed(_I8)[0]
        return value

    def int16(self) -> int:
        value: int = self.fixed(_I16)[0]
        return value

    def int32(self) -> int:
        value: int = self.fixed(_I32)[0]
        return value

    def int64(self) -> int:
        value: int = self.fixed(_I64)[0]
        return value

    def flag(self) -> bool:
        pos = self.pos
        if pos >= self.end:
            raise _malformed("truncated")
        self.pos = pos + 1
        return self.buf[pos] != 0

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.fixed(_UUID)[0]))

    def length(self, nullable: bool, what: str) -> int:
        """A string's or array's length; -1 is null (refused unless ``nullable``)."""
        if self.flexible:
            n = self.uvarint() - 1
        else:
            n = self.int16() if what == "string" else self.int32()
        if n < -1 or (n == -1 and not nullable):
            raise _malformed(f"{what} length {n}")
        return n

    def string(self, nullable: bool = False) -> str | None:
        n = self.length(nullable, "string")
        if n == -1:
            return None
        pos = self.pos
        stop = pos + n
        if stop > self.end:
            raise _malformed(f"string of {n} bytes runs past the frame")
        self.pos = stop
        try:
            return str(self.buf[pos:stop], "utf-8")
        except UnicodeDecodeError:
            raise _malformed("string is not UTF-8") from None

    def count(self, min_item: int) -> int:
        n = self.length(False, "array")
        if n * min_item > self.end - self.pos:
            raise _malformed(f"array of {n} entries cannot fit in the frame")
        return n

    def int32s(self) -> tuple[int, ...]:
        n = self.count(4)
        pos = self.pos
        self.pos = pos + 4 * n
        return struct.unpack_from(f">{n}i", self.buf, pos)

    def tags(self, known: dict[int, Callable[["_Reader"], None]] | None = None) -> None:
        """A tagged-field block: known tags are read by their callable (within the tag's bytes,
        as Kafka's readers do), the others skipped."""
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            stop = self.pos + size
            if stop > self.end:
                raise _malformed("tagged field runs past the frame")
            read = known.get(tag) if known else None
            if read is not None:
                read(_Reader(self.buf, self.pos, stop, True))
            self.pos = stop


def _read_control_request_head(r: _Reader, req: LeaderAndIsrRequest | UpdateMetadataRequest, kraft: bool,
                               broker_epoch: bool) -> None:
    """controller id, isKRaftController (if ``kraft``), controller epoch, broker epoch (if ``broker_epoch``)."""
    req.controller_id = r.int32()
    if kraft:
        req.is_kraft_controller = r.flag()
    req.controller_epoch = r.int32()
    if broker_epoch:
        req.broker_epoch = r.int64()


def _lisr_partition(r: _Reader, version: int, with_topic: bool) -> LeaderAndIsrPartitionState:
    topic = r.string() if with_topic else ""
    index, controller_epoch, leader, leader_epoch = r.fixed(_I32X4)
    isr = r.int32s()
    partition_epoch = r.int32()
    replicas = r.int32s()
    ps = LeaderAndIsrPartitionState(index, controller_epoch, leader, leader_epoch, isr, partition_epoch, replicas,
                                    topic_name=topic)  # type: ignore[arg-type]
    if version >= 3:
        ps.adding_replicas = r.int32s()
        ps.removing_replicas = r.int32s()
    if version >= 1:
        ps.is_new = r.flag()
    if version >= 6:
        ps.leader_recovery_state = r.int8()
    if r.flexible:
        r.tags()
    return ps


def decode_leader_and_isr_request(version: int, buf: Buffer, pos: int) -> LeaderAndIsrRequest:
    """Decode a LeaderAndIsr v0-7 body starting at ``pos``."""
    _check_version(version, LEADER_AND_ISR_VERSIONS, "LeaderAndIsr request")
    r = _Reader(buf, pos, len(buf), version >= _LISR_FLEXIBLE)
    req = LeaderAndIsrRequest(0, 0)
    _read_control_request_head(r, req, version >= 7, version >= 2)
    if version >= 5:
        req.type = r.int8()
    if version <= 1:
        req.ungrouped_partition_states = [_lisr_partition(r, version, True) for _ in range(r.count(26))]
    else:
        for _ in range(r.count(3)):
            name = r.string()
            topic_id = r.uuid() if version >= 5 else _ZERO_UUID
            parts = [_lisr_partition(r, version, False) for _ in range(r.count(24))]
            if r.flexible:
                r.tags()
            req.topic_states.append(LeaderAndIsrTopicState(name, topic_id, parts))  # type: ignore[arg-type]
    for _ in range(r.count(7)):
        broker_id = r.int32()
        host = r.string()
        port = r.int32()
        if r.flexible:
            r.tags()
        req.live_leaders.append(LeaderAndIsrLiveLeader(broker_id, host, port))  # type: ignore[arg-type]
    if r.flexible:
        r.tags()
    return req


class _Writer:
    """Appends Kafka's encodings to a bytearray, compact in flexible versions."""

    __slots__ = ("out", "flexible")

    def __init__(self, flexible: bool) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def uvarint(self, value: int) -> None:
        if value < 0x80:
            self.out.append(value)
        else:
            self.out += encode_uvarint(value)

    def length(self, n: int, wide: bool) -> None:
        if self.flexible:
            self.uvarint(n + 1)
        else:
            self.out += (_I32 if wide else _I16).pack(n)

    def string(self, value: str | None) -> None:
        if value is None:
            self.length(-1, False)
            return
        raw = value.encode()
        if not self.flexible and len(raw) > 32767:
            raise LocalProtocolError("string longer than 32767 bytes")
        self.length(len(raw), False)
        self.out += raw

    def int32s(self, values: Sequence[int]) -> None:
        n = len(values)
        self.length(n, True)
        if n:
            self.out += struct.pack(f">{n}i", *values)

    def no_tags(self) -> None:
        if self.flexible:
            self.out.append(0)

    def tag(self, tag: int, data: bytes | bytearray) -> None:
        self.uvarint(tag)
        self.uvarint(len(data))
        self.out += data


def _control_request_head(out: bytearray, req: LeaderAndIsrRequest | UpdateMetadataRequest, kraft: bool,
                          broker_epoch: bool) -> None:
    """controller id, isKRaftController (if ``kraft``), controller epoch, broker epoch (if ``broker_epoch``)."""
    out += _I32.pack(req.controller_id)
    if kraft:
        out.append(1 if req.is_kraft_controller else 0)
    out += _I32.pack(req.controller_epoch)
    if broker_epoch:
        out += _I64.pack(req.broker_epoch)


def _partition_state_head(w: _Writer, ps: LeaderAndIsrPartitionState | UpdateMetadataPartitionState, epoch: int,
                          with_topic: bool) -> None:
    """The fields both partition states start with: [topic], partition, controller epoch,
    leader, leader epoch, ISR, partition epoch (UpdateMetadata's ZkVersion), replicas."""
    out = w.out
    if with_topic:
        w.string(ps.topic_name)
    out += _I32X4.pack(ps.partition_index, ps.controller_epoch, ps.leader, ps.leader_epoch)
    w.int32s(ps.isr)
    out += _I32.pack(epoch)
    w.int32s(ps.replicas)


def encode_leader_and_isr_request(version: int, req: LeaderAndIsrRequest) -> bytes:
    """A LeaderAndIsr v0-7 body: v0-1 send ``ungrouped_partition_states`` (with topic names),
    v2+ ``topic_states``."""
    _check_version(version, LEADER_AND_ISR_VERSIONS, "LeaderAndIsr request")
    w = _Writer(version >= _LISR_FLEXIBLE)
    out = w.out
    _control_request_head(out, req, version >= 7, version >= 2)
    if version >= 5:
        out += _I8.pack(req.type)

    def partitions(states: Sequence[LeaderAndIsrPartitionState], with_topic: bool) -> None:
        w.length(len(states), True)
        for ps in states:
            _partition_state_head(w, ps, ps.partition_epoch, with_topic)
            if version >= 3:
                w.int32s(ps.adding_replicas)
                w.int32s(ps.removing_replicas)
            if version >= 1:
                out.append(1 if ps.is_new else 0)
            if version >= 6:
                out.extend(_I8.pack(ps.leader_recovery_state))
            w.no_tags()

    if version <= 1:
        partitions(req.ungrouped_partition_states, True)
    else:
        w.length(len(req.topic_states), True)
        for ts in req.topic_states:
            w.string(ts.topic_name)
            if version >= 5:
                out += ts.topic_id.bytes
            partitions(ts.partition_states, False)
            w.no_tags()
    w.length(len(req.live_leaders), True)
    for leader in req.live_leaders:
        out += _I32.pack(leader.broker_id)
        w.string(leader.host_name)
        out += _I32.pack(leader.port)
        w.no_tags()
    w.no_tags()
    return bytes(out)


def decode_leader_and_isr_response(version: int, buf: Buffer, pos: int = 0) -> LeaderAndIsrResponse:
    """Decode a LeaderAndIsr v0-7 response body (the controller's side)."""
    _check_version(version, LEADER_AND_ISR_VERSIONS, "LeaderAndIsr response")
    r = _Reader(buf, pos, len(buf), version >= _LISR_FLEXIBLE)
    resp = LeaderAndIsrResponse(r.int16())
    if version <= 4:
        for _ in range(r.count(8)):
            topic = r.string()
            index, code = r.fixed(_IH)
            if r.flexible:
                r.tags()
            resp.partition_errors.append(LeaderAndIsrPartitionError(index, code, topic))  # type: ignore[arg-type]
    else:
        for _ in range(r.count(18)):
            topic_id = r.uuid()
            errors = []
            for _ in range(r.count(7)):
                index, code = r.fixed(_IH)
                r.tags()
                errors.append(LeaderAndIsrPartitionError(index, code))
            r.tags()
            resp.topics.append(LeaderAndIsrTopicError(topic_id, errors))
    if r.flexible:
        r.tags()
    return resp


def encode_leader_and_isr_response(version: int, resp: LeaderAndIsrResponse) -> bytes:
    """A LeaderAndIsr v0-7 response body: v0-4 ``partition_errors`` (with topic names), v5+ ``topics``."""
    _check_version(version, LEADER_AND_ISR_VERSIONS, "LeaderAndIsr response")
    w = _Writer(version >= _LISR_FLEXIBLE)
    out = w.out
    out += _I16.pack(resp.error_code)
    if version <= 4:
        w.length(len(resp.partition_errors), True)
        for pe in resp.partition_errors:
            w.string(pe.topic_name)
            out += _IH.pack(pe.partition_index, pe.error_code)
            w.no_tags()
    else:
        w.length(len(resp.topics), True)
        for te in resp.topics:
            out += te.topic_id.bytes
            w.length(len(te.partition_errors), True)
            for pe in te.partition_errors:
                out += _IH.pack(pe.partition_index, pe.error_code)
                out.append(0)
            out.append(0)
    w.no_tags()
    return bytes(out)


def _um_partition(r: _Reader, version: int, with_topic: bool) -> UpdateMetadataPartitionState:
    topic = r.string() if with_topic else ""
    index, controller_epoch, leader, leader_epoch = r.fixed(_I32X4)
    isr = r.int32s()
    zk_version = r.int32()
    replicas = r.int32s()
    offline = r.int32s() if version >= 4 else ()
    if r.flexible:
        r.tags()
    return UpdateMetadataPartitionState(index, controller_epoch, leader, leader_epoch, isr, zk_version, replicas,
                                        offline, topic)  # type: ignore[arg-type]


def _um_topic_configs(r: _Reader) -> list[UpdateMetadataTopicConfig]:
    configs = []
    for _ in range(r.count(3)):
        name = r.string()
        value = r.string()
        r.tags()
        configs.append(UpdateMetadataTopicConfig(name, value))  # type: ignore[arg-type]
    return configs


def decode_update_metadata_request(version: int, buf: Buffer, pos: int) -> UpdateMetadataRequest:
    """Decode an UpdateMetadata v0-8 body starting at ``pos``."""
    _check_version(version, UPDATE_METADATA_VERSIONS, "UpdateMetadata request")
    r = _Reader(buf, pos, len(buf), version >= _UM_FLEXIBLE)
    req = UpdateMetadataRequest(0, 0)
    _read_control_request_head(r, req, version >= 8, version >= 5)
    if version <= 4:
        req.ungrouped_partition_states = [_um_partition(r, version, True) for _ in range(r.count(26))]
    else:
        for _ in range(r.count(3)):
            name = r.string()
            topic_id = r.uuid() if version >= 7 else _ZERO_UUID
            parts = [_um_partition(r, version, False) for _ in range(r.count(24))]
            ts = UpdateMetadataTopicState(name, topic_id, parts)  # type: ignore[arg-type]
            if r.flexible:
                def configs(tr: _Reader, ts: UpdateMetadataTopicState = ts) -> None:
                    ts.topic_configs = _um_topic_configs(tr)
                r.tags({_UM_TOPIC_CONFIGS_TAG: configs})
            req.topic_states.append(ts)
    for _ in range(r.count(4)):
        b = UpdateMetadataBroker(r.int32())
        if version == 0:
            b.v0_host = r.string()  # type: ignore[assignment]
            b.v0_port = r.int32()
        else:
            for _ in range(r.count(4)):
                port = r.int32()
                host = r.string()
                listener = r.string() if version >= 3 else ""
                security_protocol = r.int16()
                if r.flexible:
                    r.tags()
                b.endpoints.append(UpdateMetadataEndpoint(port, host, listener, security_protocol))  # type: ignore[arg-type]
        if version >= 2:
            b.rack = r.string(nullable=True)
        if r.flexible:
            r.tags()
        req.live_brokers.append(b)
    if r.flexible:
        def request_type(tr: _Reader) -> None:
            req.type = tr.int8()

        def metadata_records(tr: _Reader) -> None:
            req.metadata_records = _um_metadata_records(tr)
        known: dict[int, Callable[[_Reader], None]] = {_UM_METADATA_RECORDS_TAG: metadata_records}
        if version >= 8:
            known[_UM_TYPE_TAG] = request_type
        r.tags(known)
    return req


def _um_metadata_records(r: _Reader) -> list[bytes]:
    records = []
    for _ in range(r.count(2)):
        n = r.length(False, "bytes")
        pos = r.pos
        if pos + n > r.end:
            raise _malformed(f"record of {n} bytes runs past the frame")
        r.pos = pos + n
        records.append(bytes(r.buf[pos:pos + n]))
        r.tags()
    return records


def encode_update_metadata_request(version: int, req: UpdateMetadataRequest) -> bytes:
    """An UpdateMetadata v0-8 body: v0-4 send ``ungrouped_partition_states`` (with topic names),
    v5+ ``topic_states``; tagged fields at their defaults (type 0, no topic configs) are not written."""
    _check_version(version, UPDATE_METADATA_VERSIONS, "UpdateMetadata request")
    w = _Writer(version >= _UM_FLEXIBLE)
    out = w.out
    _control_request_head(out, req, version >= 8, version >= 5)

    def partitions(states: Sequence[UpdateMetadataPartitionState], with_topic: bool) -> None:
        w.length(len(states), True)
        for ps in states:
            _partition_state_head(w, ps, ps.zk_version, with_topic)
            if version >= 4:
                w.int32s(ps.offline_replicas)
            w.no_tags()

    if version <= 4:
        partitions(req.ungrouped_partition_states, True)
    else:
        w.length(len(req.topic_states), True)
        for ts in req.topic_states:
            w.string(ts.topic_name)
            if version >= 7:
                out += ts.topic_id.bytes
            partitions(ts.partition_states, False)
            if w.flexible:
                if ts.topic_configs:
                    cw = _Writer(True)
                    cw.length(len(ts.topic_configs), True)
                    for name, value in ts.topic_configs:
                        cw.string(name)
                        cw.string(value)
                        cw.no_tags()
                    out.append(1)
                    w.tag(_UM_TOPIC_CONFIGS_TAG, cw.out)
                else:
                    out.append(0)
    w.length(len(req.live_brokers), True)
    for b in req.live_brokers:
        out += _I32.pack(b.id)
        if version == 0:
            w.string(b.v0_host)
            out += _I32.pack(b.v0_port)
        else:
            w.length(len(b.endpoints), True)
            for e in b.endpoints:
                out += _I32.pack(e.port)
                w.string(e.host)
                if version >= 3:
                    w.string(e.listener)
                out += _I16.pack(e.security_protocol)
                w.no_tags()
        if version >= 2:
            w.string(b.rack)
        w.no_tags()
    if w.flexible:
        tags = []
        if version >= 8 and req.type != 0:
            tags.append((_UM_TYPE_TAG, _I8.pack(req.type)))
        if req.metadata_records:
            rw = _Writer(True)
            rw.length(len(req.metadata_records), True)
            for record in req.metadata_records:
                rw.length(len(record), True)
                rw.out += record
                rw.no_tags()
            tags.append((_UM_METADATA_RECORDS_TAG, bytes(rw.out)))
        w.uvarint(len(tags))
        for tag, data in tags:
            w.tag(tag, data)
    return bytes(out)
