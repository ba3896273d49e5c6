"""The hand-written fast codecs (protocol/fast_codecs.py) against their interpreted construct
schemas (protocol/messages/), which are the specification and the oracle: the broker side
(request header, Produce/Fetch request decoders and response encoders) and the client side
(request encoders, response decoders).

For each version: hypothesis draws a value, construct encodes it, the hand-written decoder
must return the same value (and the hand-written encoder the same bytes). Malformed input
(every truncation, negative and overrunning lengths, mutated bytes) must raise
RemoteProtocolError, and where construct accepts mutated bytes both must agree on the value.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from protocol import fast_codecs as H
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from protocol.framing import frame
from protocol.messages import APIS, control, fetch, header, produce
from protocol.records import encode_uvarint
from protocol.schema import SchemaError

from .kafka_values import FAST, complete, first_difference, message_strategy, plain, with_absent

PRODUCE_VERSIONS = list(range(H.PRODUCE_VERSIONS[0], H.PRODUCE_VERSIONS[1] + 1))
FETCH_VERSIONS = list(range(H.FETCH_VERSIONS[0], H.FETCH_VERSIONS[1] + 1))
LISR_VERSIONS = list(range(H.LEADER_AND_ISR_VERSIONS[0], H.LEADER_AND_ISR_VERSIONS[1] + 1))
UM_VERSIONS = list(range(H.UPDATE_METADATA_VERSIONS[0], H.UPDATE_METADATA_VERSIONS[1] + 1))


def test_fast_codec_ranges_cover_what_we_advertise() -> None:
    assert (APIS[ApiKey.PRODUCE].min_version, APIS[ApiKey.PRODUCE].max_version) == (3, 8)
    assert H.PRODUCE_VERSIONS == (3, 8) and H.FETCH_VERSIONS == (4, 11)
    assert APIS[ApiKey.FETCH].advertise[0] >= H.FETCH_VERSIONS[0] and APIS[ApiKey.FETCH].max_version <= H.FETCH_VERSIONS[1]
    assert not any(produce.REQUEST.is_flexible(v) for v in PRODUCE_VERSIONS)
    assert not any(fetch.REQUEST.is_flexible(v) for v in FETCH_VERSIONS)
    # the control codecs cover every version the broker accepts
    for key, versions in ((ApiKey.LEADER_AND_ISR, H.LEADER_AND_ISR_VERSIONS),
                          (ApiKey.UPDATE_METADATA, H.UPDATE_METADATA_VERSIONS)):
        assert (APIS[key].min_version, APIS[key].max_version) == versions
        assert (APIS[key].request.min_version, APIS[key].request.max_version) == versions


# ---------------------------------------------------------------------------
# Hand-written objects as value trees, for comparison with construct


def project(fields, tree: dict, v: int) -> dict:
    """The hand-written object's fields as construct parses them: those the hot path does not
    carry at all (later versions' fields) at the schema's defaults; the ones it carries, even
    when the version lacks them, as it fills them (which must then equal the schema's defaults)."""
    out = {}
    for f in fields:
        if f.name not in tree:
            continue
        val = tree[f.name]
        if f.fields and val is not None:
            val = [project(f.fields, i, v) for i in val] if f.type.startswith("[]") else project(f.fields, val, v)
        out[f.name] = val
    return with_absent(fields, out, v)


def without(tree, names):
    """``tree`` minus the fields a hand-written decoder does not return, at any depth."""
    if isinstance(tree, list):
        return [without(i, names) for i in tree]
    if isinstance(tree, dict):
        return {k: without(x, names) for k, x in tree.items() if k not in names}
    return tree


def _records(r):
    return None if r is None else bytes(r)


def produce_request_tree(req: H.ProduceRequest, v: int) -> dict:
    return project(produce.REQUEST.fields, {
        "transactional_id": req.transactional_id, "acks": req.acks, "timeout_ms": req.timeout_ms,
        "topic_data": [{"name": name, "partition_data": [{"index": i, "records": _records(r)} for i, r in parts]}
                       for name, parts in req.topics]}, v)


def fetch_request_tree(req: H.FetchRequest, v: int) -> dict:
    return project(fetch.REQUEST.fields, {
        "replica_id": req.replica_id, "max_wait_ms": req.max_wait_ms, "min_bytes": req.min_bytes,
        "max_bytes": req.max_bytes, "isolation_level": req.isolation_level, "session_id": req.session_id,
        "session_epoch": req.session_epoch,
        "topics": [{"topic": t, "partitions": [
            {"partition": p.partition, "current_leader_epoch": p.current_leader_epoch, "fetch_offset": p.fetch_offset,
             "log_start_offset": p.log_start_offset, "partition_max_bytes": p.partition_max_bytes} for p in parts]}
            for t, parts in req.topics],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in req.forgotten_topics],
        "rack_id": req.rack_id}, v)


def produce_response_tree(responses, v: int) -> dict:
    return project(produce.RESPONSE.fields, {"responses": [{"name": t, "partition_responses": [
        {"index": i, "error_code": e, "base_offset": b, "log_append_time_ms": la, "log_start_offset": ls}
        for i, e, b, la, ls in parts]} for t, parts in responses]}, v)


def fetch_response_tree(resp: H.FetchResponse, v: int) -> dict:
    return project(fetch.RESPONSE.fields, {
        "throttle_time_ms": resp.throttle_time_ms, "error_code": resp.error_code, "session_id": resp.session_id,
        "responses": [{"topic": t, "partitions": [
            {"partition_index": p.partition, "error_code": p.error_code, "high_watermark": p.high_watermark,
             "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
             "aborted_transactions": None if p.aborted_transactions is None else [
                 {"producer_id": a, "first_offset": b} for a, b in p.aborted_transactions],
             "preferred_read_replica": p.preferred_read_replica, "records": _records(p.records)} for p in parts]}
            for t, parts in resp.responses]}, v)


def control_tree(x):
    """A decoded control message (dataclasses, tuples, (name, value) configs) as construct's
    value tree: the dataclasses carry construct's field names."""
    if dataclasses.is_dataclass(x):
        out = {f.name: control_tree(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if "topic_configs" in out:
            out["topic_configs"] = [{"name": n, "value": v} for n, v in x.topic_configs]
        if "metadata_records" in out:
            out["metadata_records"] = [{"record": r} for r in x.metadata_records]
        return out
    if isinstance(x, (list, tuple)):
        return [control_tree(i) for i in x]
    return x


def control_decoder(msg):
    return lambda obj, v: project(msg.fields, control_tree(obj), v)


class Decoder:
    """A hand-written decoder, its construct oracle, and what it leaves out of its result."""

    def __init__(self, msg, versions, decode, to_tree, dropped=(), answers=True):
        self.msg, self.versions, self.decode, self.to_tree = msg, versions, decode, to_tree
        self.dropped = frozenset(dropped)
        self.answers = answers  # a request: the header parsed, so errors carry INVALID_REQUEST

    def __call__(self, v, data, pos=0):
        return without(self.to_tree(self.decode(v, memoryview(data), pos), v), self.dropped)

    def expected(self, tree, v):
        return without(complete(self.msg.fields, tree, v), self.dropped)


DECODERS = {
    "produce-request": Decoder(produce.REQUEST, PRODUCE_VERSIONS, H.decode_produce_request, produce_request_tree),
    "fetch-request": Decoder(fetch.REQUEST, FETCH_VERSIONS, H.decode_fetch_request, fetch_request_tree),
    # client side: throttling and per-record errors are not returned
    "produce-response": Decoder(produce.RESPONSE, PRODUCE_VERSIONS, H.decode_produce_response, produce_response_tree,
                                dropped={"throttle_time_ms", "record_errors", "error_message"}, answers=False),
    "fetch-response": Decoder(fetch.RESPONSE, FETCH_VERSIONS, H.decode_fetch_response, fetch_response_tree,
                              answers=False),
    # the controller's requests (the broker decodes them) and LeaderAndIsr's response (the controller does)
    "leader-and-isr-request": Decoder(control.LEADER_AND_ISR_REQUEST, LISR_VERSIONS, H.decode_leader_and_isr_request,
                                      control_decoder(control.LEADER_AND_ISR_REQUEST)),
    "update-metadata-request": Decoder(control.UPDATE_METADATA_REQUEST, UM_VERSIONS,
                                       H.decode_update_metadata_request,
                                       control_decoder(control.UPDATE_METADATA_REQUEST)),
    "leader-and-isr-response": Decoder(control.LEADER_AND_ISR_RESPONSE, LISR_VERSIONS,
                                       H.decode_leader_and_isr_response,
                                       control_decoder(control.LEADER_AND_ISR_RESPONSE), answers=False),
}
DECODER_CASES = [pytest.param(name, v, id=f"{name}-v{v}") for name, d in DECODERS.items() for v in d.versions]


def _body_strategy(name, v):
    msg = DECODERS[name].msg
    return message_strategy(msg, v).map(lambda tree: (tree, msg.build(v, tree)))


# ---------------------------------------------------------------------------
# Decoders: same values as construct; whole, at an offset, with trailing bytes


@pytest.mark.parametrize("name,v", DECODER_CASES)
def test_decoder_matches_construct(name, v) -> None:
    dec = DECODERS[name]

    @FAST
    @given(_body_strategy(name, v), st.binary(max_size=6), st.binary(max_size=6))
    def run(tree_and_body, prefix, trailing):
        tree, body = tree_and_body
        expected = dec.expected(tree, v)
        assert dec(v, body) == expected
        # At an offset inside a larger frame, with bytes after it (ignored, as construct does).
        frame = bytearray(prefix + body + trailing)
        assert dec(v, frame, len(prefix)) == expected
        assert without(plain(dec.msg.parse(v, bytes(frame), len(prefix))), dec.dropped) == expected

    run()


def test_produce_records_are_views_into_the_frame() -> None:
    """No copy of record data: a writable view of the request frame, so offsets can be stamped in place."""
    tree = {"transactional_id": "txn-é", "acks": -1, "timeout_ms": 1500,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"A" * 70},
                                                            {"index": 1, "records": None}]}]}
    frame = bytearray(b"\x00" * 3 + produce.REQUEST.build(3, tree))
    req = H.decode_produce_request(3, memoryview(frame), 3)
    (_, parts), = req.topics
    records = parts[0][1]
    assert isinstance(records, memoryview) and records.obj is frame and not records.readonly
    records[0:1] = b"B"
    assert frame.count(b"B") == 1
    assert parts[1] == (1, None)
    assert sum(len(parts) for _, parts in req.topics) == 2


@pytest.mark.parametrize("call", [
    lambda v: H.decode_produce_request(v, memoryview(b""), 0), lambda v: H.decode_produce_response(v, b""),
    lambda v: H.encode_produce_response(v, 1, []), lambda v: H.encode_produce_request(v, 1, None, 1, 1, []),
])
@pytest.mark.parametrize("v", [0, 2, 9, 13])
def test_produce_codecs_refuse_other_versions(call, v) -> None:
    with pytest.raises(LocalProtocolError):
        call(v)


@pytest.mark.parametrize("call", [
    lambda v: H.decode_fetch_request(v, memoryview(b""), 0), lambda v: H.decode_fetch_response(v, b""),
    lambda v: H.encode_fetch_response(v, 1, []),
    lambda v: H.encode_fetch_request(v, 1, None, H.FetchRequest(v, -1, 0, 0, 0, 0, 0, -1, [], [], "")),
])
@pytest.mark.parametrize("v", [3, 12, 18])
def test_fetch_codecs_refuse_other_versions(call, v) -> None:
    with pytest.raises(LocalProtocolError):
        call(v)


# ---------------------------------------------------------------------------
# Encoders: same bytes as construct (whole frames: size, header, body)


def _produce_response_strategy(v):
    return message_strategy(produce.RESPONSE, v)


def joined(chunks) -> bytes:
    return b"".join(bytes(c) for c in chunks)


def encode_produce_response(v, tree, correlation_id):
    responses = [(t["name"], [(p["index"], p["error_code"], p["base_offset"], p["log_append_time_ms"],
                               p.get("log_start_offset", -1),
                               [(e["batch_index"], e["batch_index_error_message"]) for e in p.get("record_errors", [])],
                               p.get("error_message")) for p in t["partition_responses"]])
                 for t in tree["responses"]]
    return H.encode_produce_response(v, correlation_id, responses, tree["throttle_time_ms"])


def encode_fetch_response(v, tree, correlation_id):
    responses = [(t["topic"], [H.FetchPartitionData(
        p["partition_index"], p["error_code"], p["high_watermark"], p["last_stable_offset"],
        p.get("log_start_offset", -1), p["records"],
        None if p["aborted_transactions"] is None else [(a["producer_id"], a["first_offset"])
                                                        for a in p["aborted_transactions"]],
        p.get("preferred_read_replica", -1)) for p in t["partitions"]]) for t in tree["responses"]]
    chunks, total = H.encode_fetch_response(v, correlation_id, responses, throttle_time_ms=tree["throttle_time_ms"],
                                            error_code=tree.get("error_code", 0), session_id=tree.get("session_id", 0))
    data = joined(chunks)
    assert total == len(data)
    return data


CLIENT_ID = "kbroker-tëst"


def encode_produce_request(v, tree, correlation_id):
    topics = [(t["name"], [(p["index"], p["records"]) for p in t["partition_data"]]) for t in tree["topic_data"]]
    return joined(H.encode_produce_request(v, correlation_id, CLIENT_ID, tree["acks"], tree["timeout_ms"], topics,
                                           tree["transactional_id"]))


def encode_fetch_request(v, tree, correlation_id):
    full = complete(fetch.REQUEST.fields, tree, v)
    req = H.FetchRequest(v, full["replica_id"], full["max_wait_ms"], full["min_bytes"], full["max_bytes"],
                         full["isolation_level"], full["session_id"], full["session_epoch"],
                         [(t["topic"], [H.FetchPartition(p["partition"], p["current_leader_epoch"], p["fetch_offset"],
                                                         p["log_start_offset"], p["partition_max_bytes"])
                                        for p in t["partitions"]]) for t in full["topics"]],
                         [(t["topic"], t["partitions"]) for t in full["forgotten_topics_data"]], full["rack_id"])
    return H.encode_fetch_request(v, correlation_id, CLIENT_ID, req)


def _request_frame(api_key, msg, v, tree, correlation_id) -> bytes:
    head = header.REQUEST_HEADER.build(1, {"request_api_key": api_key, "request_api_version": v,
                                           "correlation_id": correlation_id, "client_id": CLIENT_ID})
    return frame(head + msg.build(v, tree))


def _response_frame(msg, v, tree, correlation_id) -> bytes:
    return frame(header.RESPONSE_HEADER.build(0, {"correlation_id": correlation_id}) + msg.build(v, tree))


# name -> (versions, hand-written encoder, strategy, the frame construct builds)
ENCODERS = {
    "produce-response": (PRODUCE_VERSIONS, encode_produce_response, _produce_response_strategy,
                         lambda v, t, c: _response_frame(produce.RESPONSE, v, t, c)),
    "fetch-response": (FETCH_VERSIONS, encode_fetch_response, lambda v: message_strategy(fetch.RESPONSE, v),
                       lambda v, t, c: _response_frame(fetch.RESPONSE, v, t, c)),
    "produce-request": (PRODUCE_VERSIONS, encode_produce_request, lambda v: message_strategy(produce.REQUEST, v),
                        lambda v, t, c: _request_frame(0, produce.REQUEST, v, t, c)),
    "fetch-request": (FETCH_VERSIONS, encode_fetch_request, lambda v: message_strategy(fetch.REQUEST, v),
                      lambda v, t, c: _request_frame(1, fetch.REQUEST, v, t, c)),
}
ENCODER_CASES = [pytest.param(name, v, id=f"{name}-v{v}") for name, (vs, _, _, _) in ENCODERS.items() for v in vs]


@pytest.mark.parametrize("name,v", ENCODER_CASES)
def test_encoder_matches_construct(name, v) -> None:
    _, encode, strategy, oracle = ENCODERS[name]

    @FAST
    @given(strategy(v), st.integers(-2**31, 2**31 - 1))
    def run(tree, correlation_id):
        ours = encode(v, tree, correlation_id)
        expected = oracle(v, tree, correlation_id)
        assert ours == expected, first_difference(ours, expected)

    run()


def test_fetch_response_passes_large_records_by_reference() -> None:
    log = bytearray(range(256)) * 4  # 1 KiB: above the inline threshold
    records = memoryview(log)[10:900]
    small = b"s" * 20
    parts = [H.FetchPartitionData(0, 0, 5, 5, 0, records), H.FetchPartitionData(1, 0, 5, 5, 0, small),
             H.FetchPartitionData(2, 3, -1, -1, -1, None)]
    chunks, total = H.encode_fetch_response(11, 7, [("topic", parts)])
    assert any(c is records for c in chunks), "large record data must not be copied"
    data = joined(chunks)
    assert total == len(data) and struct.unpack_from(">i", data)[0] == total - 4
    common = {"aborted_transactions": None, "preferred_read_replica": -1}
    tree = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "topic", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5, "log_start_offset": 0,
         "records": bytes(records), **common},
        {"partition_index": 1, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5, "log_start_offset": 0,
         "records": small, **common},
        {"partition_index": 2, "error_code": 3, "high_watermark": -1, "last_stable_offset": -1,
         "log_start_offset": -1, "records": None, **common}]}]}
    assert data == _response_frame(fetch.RESPONSE, 11, tree, 7)
    assert fetch_response_tree(H.decode_fetch_response(11, data, 8), 11) == complete(fetch.RESPONSE.fields, tree, 11)


def test_produce_request_passes_records_by_reference() -> None:
    records = memoryview(bytearray(b"r" * 100))
    chunks = H.encode_produce_request(3, 1, None, -1, 100, [("t", [(0, records), (1, None)])])
    assert any(c is records for c in chunks)


# ---------------------------------------------------------------------------
# Headers


def header_strategy(v):
    return message_strategy(header.REQUEST_HEADER, v)


def tagged_block():
    """A v2 header's tagged fields: unknown tags in ascending order, each with some bytes."""
    return st.dictionaries(st.integers(0, 300), st.binary(max_size=4), max_size=3).map(
        lambda d: encode_uvarint(len(d)) + b"".join(encode_uvarint(t) + encode_uvarint(len(b)) + b for t, b in sorted(d.items())))


def parsed_header(h: H.RequestHeader) -> dict:
    return {"request_api_key": h.api_key, "request_api_version": h.api_version,
            "correlation_id": h.correlation_id, "client_id": h.client_id}


@pytest.mark.parametrize("v", [1, 2])
def test_request_header_matches_construct(v) -> None:
    flexible = v == 2

    @FAST
    @given(header_strategy(v), tagged_block(), st.binary(max_size=8))
    def run(tree, tags, body):
        built = header.REQUEST_HEADER.build(v, tree)
        encoded = H.encode_request_header(tree["request_api_key"], tree["request_api_version"],
                                          tree["correlation_id"], tree["client_id"], flexible)
        assert encoded == built
        if flexible:
            built = built[:-1] + tags  # replace the empty tagged block with some unknown tags
        h = H.parse_request_header(memoryview(built + body), flexible)
        expected, size = header.REQUEST_HEADER.parse_with_size(v, built + body)
        assert parsed_header(h) == plain(expected)
        assert h.size == size == len(built)
        # flexible_for decides per (api key, version) when flexible is not given
        seen = []
        h2 = H.parse_request_header(built + body, flexible_for=lambda k, ver: seen.append((k, ver)) or flexible)
        assert seen == [(tree["request_api_key"], tree["request_api_version"])] and h2.size == h.size
        # or the set of flexible (api key, version) pairs
        pair = (tree["request_api_key"], tree["request_api_version"])
        h3 = H.parse_request_header(built + body, flexible_versions={pair} if flexible else {(pair[0], pair[1] + 1)})
        assert h3 == h2

    run()


@pytest.mark.parametrize("v", [0, 1])
def test_response_header_matches_construct(v) -> None:
    for cid in (0, 1, -1, 2**31 - 1, -2**31, 0x01020304):
        assert H.response_header(cid, v == 1) == header.RESPONSE_HEADER.build(v, {"correlation_id": cid})


def test_response_header_layout() -> None:
    assert H.response_header(5, False) == b"\x00\x00\x00\x05"
    assert H.response_header(5, True) == b"\x00\x00\x00\x05\x00"


def test_null_client_id() -> None:
    raw = H.encode_request_header(18, 3, 9, None, True)
    assert raw == b"\x00\x12\x00\x03\x00\x00\x00\x09\xff\xff\x00"
    h = H.parse_request_header(raw, True)
    assert (h.client_id, h.size) == (None, 11)


def test_short_request_header() -> None:
    """Under 10 bytes (api key, version, correlation id, client id length) is no header: the
    error names the frame's size, whatever the buffer type; 10 bytes with a null client id is one."""
    raw = H.encode_request_header(0, 3, 7, None, False)
    for n in range(10):
        for buf in (raw[:n], bytearray(raw[:n]), memoryview(raw[:n])):
            with pytest.raises(RemoteProtocolError, match=f"request header needs 10 bytes, frame has {n}$"):
                H.parse_request_header(buf, False)
    h = H.parse_request_header(bytearray(raw), False)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.size) == (0, 3, 7, None, 10)


# ---------------------------------------------------------------------------
# Malformed input


def rich_produce(v):
    return {"transactional_id": "tx", "acks": 1, "timeout_ms": 100,
            "topic_data": [{"name": "tøpic", "partition_data": [{"index": 0, "records": b"abc"},
                                                                {"index": 1, "records": None}]},
                           {"name": "", "partition_data": []}]}


def rich_fetch(v):
    return {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_id": 3, "session_epoch": 4,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 2, "fetch_offset": 10,
                                                      "log_start_offset": 0, "partition_max_bytes": 1000}]}],
            "forgotten_topics_data": [{"topic": "gone", "partitions": [1, 2]}], "rack_id": "r1"}


def rich_produce_response(v):
    return {"responses": [{"name": "tøpic", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 10, "log_append_time_ms": -1, "log_start_offset": 0,
         "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}], "error_message": "msg"}]},
        {"name": "", "partition_responses": []}], "throttle_time_ms": 5}


def rich_fetch_response(v):
    return {"throttle_time_ms": 1, "error_code": 0, "session_id": 9, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5, "log_start_offset": 0,
         "aborted_transactions": [{"producer_id": 1, "first_offset": 2}], "preferred_read_replica": -1,
         "records": b"abc"},
        {"partition_index": 1, "error_code": 1, "high_watermark": 5, "last_stable_offset": 5, "log_start_offset": 0,
         "aborted_transactions": None, "preferred_read_replica": -1, "records": None}]}]}


_LISR_PART = {"topic_name": "tøpic", "partition_index": 3, "controller_epoch": 7, "leader": 1, "leader_epoch": 9,
              "isr": [1, 2], "partition_epoch": 11, "replicas": [1, 2, 3], "adding_replicas": [3],
              "removing_replicas": [2], "is_new": True, "leader_recovery_state": 1}
_UM_PART = {"topic_name": "tøpic", "partition_index": 3, "controller_epoch": 7, "leader": 1, "leader_epoch": 9,
            "isr": [1, 2], "zk_version": 11, "replicas": [1, 2, 3], "offline_replicas": [3]}


def rich_leader_and_isr(v):
    """Every field away from its default (and kbroker's broker epoch and type set)."""
    return {"controller_id": 1, "is_kraft_controller": True, "controller_epoch": 7, "broker_epoch": 99, "type": 2,
            "ungrouped_partition_states": [_LISR_PART, dict(_LISR_PART, partition_index=4, isr=[])],
            "topic_states": [{"topic_name": "tøpic", "topic_id": uuid.UUID(int=5),
                              "partition_states": [_LISR_PART, dict(_LISR_PART, partition_index=4, isr=[])]},
                             {"topic_name": "", "topic_id": uuid.UUID(int=6), "partition_states": []}],
            "live_leaders": [{"broker_id": 1, "host_name": "hôst", "port": 9092},
                             {"broker_id": 2, "host_name": "", "port": 1}]}


def rich_update_metadata(v):
    return {"controller_id": 1, "is_kraft_controller": True, "type": 2, "controller_epoch": 7, "broker_epoch": 99,
            "ungrouped_partition_states": [_UM_PART, dict(_UM_PART, partition_index=4, isr=[])],
            "topic_states": [{"topic_name": "tøpic", "topic_id": uuid.UUID(int=5),
                              "partition_states": [_UM_PART, dict(_UM_PART, partition_index=4, isr=[])],
                              "topic_configs": [{"name": "retention.ms", "value": "1000"},
                                                {"name": "cleanup.policy", "value": "cömpact"}]},
                             {"topic_name": "", "topic_id": uuid.UUID(int=6), "partition_states": [],
                              "topic_configs": []}],
            "live_brokers": [{"id": 0, "v0_host": "h0", "v0_port": 9, "rack": None, "endpoints": [
                {"port": 9092, "host": "hôst", "listener": "PLAINTEXT", "security_protocol": 0},
                {"port": 9093, "host": "h", "listener": "SSL", "security_protocol": 1}]},
                {"id": 1, "v0_host": "", "v0_port": 10, "rack": "r1", "endpoints": []}],
            "metadata_records": [{"record": b"\x01\x12\x00" + bytes(40)}, {"record": b""}]}


def rich_leader_and_isr_response(v):
    return {"error_code": 0, "partition_errors": [{"topic_name": "tøpic", "partition_index": 1, "error_code": 0},
                                                  {"topic_name": "", "partition_index": 2, "error_code": 59}],
            "topics": [{"topic_id": uuid.UUID(int=5), "partition_errors": [
                {"partition_index": 1, "error_code": 0}, {"partition_index": 2, "error_code": 59}]},
                {"topic_id": uuid.UUID(int=6), "partition_errors": []}]}


RICH = {"produce-request": rich_produce, "fetch-request": rich_fetch,
        "produce-response": rich_produce_response, "fetch-response": rich_fetch_response,
        "leader-and-isr-request": rich_leader_and_isr, "update-metadata-request": rich_update_metadata,
        "leader-and-isr-response": rich_leader_and_isr_response}


def assert_malformed(name, v, data) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as info:
        DECODERS[name](v, data)
    if DECODERS[name].answers:
        assert info.value.error_code is ErrorCode.INVALID_REQUEST  # the header parsed: answer it
    return info.value


@pytest.mark.parametrize("name,v", DECODER_CASES)
def test_every_truncation_raises(name, v) -> None:
    dec = DECODERS[name]
    body = dec.msg.build(v, RICH[name](v))
    assert dec(v, body) == dec.expected(RICH[name](v), v)
    for n in range(len(body)):
        assert_malformed(name, v, body[:n])
        with pytest.raises(SchemaError):
            dec.msg.parse(v, body[:n])


def _patch(data: bytes, pos: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, pos, value)
    return bytes(out)


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


_TOPIC = len(_string("tøpic"))
# (decoder, version, where in the rich example's bytes: an offset, or the end of a string, format, value, what)
# Produce v3: transactional id "tx" at 0, acks at 4, timeout at 6, topic count at 10, first topic at 14.
# Fetch v11: the fixed part is 4*4 + 1 + 2*4 = 25 bytes: topic count at 25, first topic ("t") at 29.
BAD_LENGTHS = [
    ("produce-request", 3, 0, ">h", -2, "transactional id length -2"),
    ("produce-request", 3, 0, ">h", 1000, "transactional id runs past the end"),
    ("produce-request", 3, 10, ">i", -1, "null topic array (not nullable)"),
    ("produce-request", 3, 10, ">i", -7, "negative topic count"),
    ("produce-request", 3, 10, ">i", 0x7FFFFFFF, "topic count past the end"),
    ("produce-request", 3, 14, ">h", -1, "null topic name (not nullable)"),
    ("produce-request", 3, 14, ">h", 0x7FFF, "topic name runs past the end"),
    ("produce-request", 3, 14 + _TOPIC, ">i", -1, "null partition array"),
    ("produce-request", 3, 14 + _TOPIC, ">i", 1 << 30, "partition count past the end"),
    ("produce-request", 3, 14 + _TOPIC + 8, ">i", -2, "records length -2"),
    ("produce-request", 3, 14 + _TOPIC + 8, ">i", 1 << 30, "records run past the end"),
    ("fetch-request", 11, 25, ">i", -1, "null topic array"),
    ("fetch-request", 11, 25, ">i", -2, "negative topic count"),
    ("fetch-request", 11, 25, ">i", 1 << 28, "topic count past the end"),
    ("fetch-request", 11, 29, ">h", -1, "null topic name"),
    ("fetch-request", 11, 29, ">h", 300, "topic name past the end"),
    ("fetch-request", 11, 32, ">i", -1, "null partition array"),
    ("fetch-request", 11, 32, ">i", 1 << 28, "partition count past the end"),
    ("fetch-request", 11, "gone", ">i", -1, "null forgotten partitions"),
    ("fetch-request", 11, "gone", ">i", 3, "forgotten partitions past the end"),
    ("fetch-request", 11, "gone", ">i", 1 << 29, "forgotten partition count past the end"),
    ("fetch-response", 11, 10, ">i", -1, "null topic array"),
    ("fetch-response", 11, "t", ">i", 1 << 28, "partition count past the end"),
    ("fetch-response", 11, "t", ">i", -1, "null partition array"),
    ("produce-response", 5, 0, ">i", -3, "negative topic count"),
]


def test_bad_length_offsets_point_where_they_say() -> None:
    produce_body = produce.REQUEST.build(3, rich_produce(3))
    assert produce_body[:4] == _string("tx") and produce_body[14:14 + _TOPIC] == _string("tøpic")
    assert fetch.REQUEST.build(11, rich_fetch(11))[29:32] == _string("t")


@pytest.mark.parametrize("name,v,where,fmt,value,what", BAD_LENGTHS, ids=[row[-1] for row in BAD_LENGTHS])
def test_bad_lengths(name, v, where, fmt, value, what) -> None:
    dec = DECODERS[name]
    body = dec.msg.build(v, RICH[name](v))
    pos = where if isinstance(where, int) else body.index(_string(where)) + len(_string(where))
    bad = _patch(body, pos, fmt, value)
    assert_malformed(name, v, bad)
    with pytest.raises(SchemaError):
        dec.msg.parse(v, bad)


def test_produce_bad_utf8() -> None:
    body = produce.REQUEST.build(3, rich_produce(3))
    bad = body.replace("tøpic".encode(), b"t\xff\xfepic")
    err = assert_malformed("produce-request", 3, bad)
    assert "UTF-8" in str(err)


def test_fetch_bad_utf8() -> None:
    """A Fetch's topic names are read inline (issue 29): one that is not UTF-8 is refused as
    the string reader refuses it."""
    body = fetch.REQUEST.build(11, rich_fetch(11))
    bad = body.replace(_string("t"), struct.pack(">h", 2) + b"\xff\xfe", 1)
    assert len(bad) == len(body) + 1
    err = assert_malformed("fetch-request", 11, bad)
    assert "UTF-8" in str(err)


@pytest.mark.parametrize("name,message", [(struct.pack(">h", 2) + b"\xff\xfe", "not UTF-8"),
                                          (struct.pack(">h", -1), "string length -1"),
                                          (struct.pack(">h", -2), "string length -2"),
                                          (struct.pack(">h", 0x7FFF), "runs past the frame")])
def test_fetch_response_bad_topic_names(name, message) -> None:
    """A Fetch response's topic names are read inline (issue 29: a follower reads one per
    produce); one the string reader refuses is refused with its reason, not read as garbage."""
    body = fetch.RESPONSE.build(11, rich_fetch_response(11))
    bad = body.replace(_string("t"), name, 1)
    err = assert_malformed("fetch-response", 11, bad)
    assert message in str(err)


def _mutations(draw_data: bytes):
    return st.one_of(
        st.tuples(st.just("set"), st.integers(0, max(0, len(draw_data) - 1)), st.integers(0, 255)),
        st.tuples(st.just("cut"), st.integers(0, len(draw_data)), st.just(0)),
        st.tuples(st.just("add"), st.integers(0, len(draw_data)), st.integers(0, 255)),
        st.tuples(st.just("null"), st.integers(0, len(draw_data)), st.sampled_from([2, 4])),  # a length -> -1
    )


def mutate(data: bytes, op) -> bytes:
    kind, pos, byte = op
    if kind == "set" and data:
        return data[:pos] + bytes([byte]) + data[pos + 1:]
    if kind == "cut":
        return data[:pos]
    if kind == "null":
        return data[:pos] + b"\xff" * byte + data[pos + byte:]
    return data[:pos] + bytes([byte]) + data[pos:]


def outcome(fn, *args, errors):
    try:
        return ("ok", fn(*args))
    except errors as exc:
        return ("error", type(exc).__name__)


EDGE_CASES = [pytest.param(name, v, id=f"{name}-v{v}") for name, d in DECODERS.items()
              for v in sorted({d.versions[0], d.versions[len(d.versions) // 2], d.versions[-1]})]


@pytest.mark.parametrize("name,v", EDGE_CASES)
def test_mutated_bytes_agree_with_construct(name, v) -> None:
    """Mutated bytes: the hand-written decoder raises exactly when construct does, else agrees on the value."""
    dec = DECODERS[name]

    @settings(FAST, max_examples=40)  # the adversarial ones get more
    @given(st.data())
    def run(data):
        _tree, body = data.draw(_body_strategy(name, v))
        for op in data.draw(st.lists(_mutations(body), min_size=1, max_size=3)):
            body = mutate(body, op)
        theirs = outcome(lambda b: without(plain(dec.msg.parse(v, b)), dec.dropped), body, errors=SchemaError)
        ours = outcome(dec, v, body, errors=RemoteProtocolError)
        assert (ours[0], ours[1] if ours[0] == "ok" else None) == (theirs[0], theirs[1] if theirs[0] == "ok" else None)

    run()


@pytest.mark.parametrize("name,v", EDGE_CASES)
def test_garbage_raises_remote_protocol_error_only(name, v) -> None:
    @settings(FAST, max_examples=40)  # the adversarial ones get more
    @given(st.binary(max_size=64))
    def run(junk):
        try:
            DECODERS[name](v, junk)
        except RemoteProtocolError:
            pass

    run()


# Header: errors carry error_code None (no header, nobody to answer).


def assert_bad_header(data, flexible) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        H.parse_request_header(data, flexible)
    assert info.value.error_code is None


@pytest.mark.parametrize("flexible", [False, True])
def test_header_truncations(flexible) -> None:
    raw = H.encode_request_header(0, 7, 1, "cliënt", False)
    if flexible:
        raw += b"\x01\x05\x02ab"  # one unknown tag (5) of 2 bytes
    assert H.parse_request_header(raw, flexible).size == len(raw)
    for n in range(len(raw)):
        assert_bad_header(raw[:n], flexible)


@pytest.mark.parametrize("raw,flexible", [
    (b"\x00\x00\x00\x03\x00\x00\x00\x01\xff\xfe", False),           # client id length -2
    (b"\x00\x00\x00\x03\x00\x00\x00\x01\x80\x00", False),           # client id length -32768
    (b"\x00\x00\x00\x03\x00\x00\x00\x01\x00\x09abc", False),        # client id past the end
    (b"\x00\x00\x00\x03\x00\x00\x00\x01\x00\x02\xc3\x28", False),   # client id not UTF-8
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x01\x00\x05ab", True),    # tagged field past the end
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x80\x80\x80\x80\x80\x01", True),  # over-long varint
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x02\x00\x00", True),      # two tags announced, one there
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x80\x80\x80\x80\x80\x00", True),  # 0 in 6 bytes (Kafka: max 5)
])
def test_bad_headers(raw, flexible) -> None:
    assert_bad_header(raw, flexible)
    with pytest.raises(SchemaError):
        header.REQUEST_HEADER.parse(2 if flexible else 1, raw)


def test_header_tags_in_any_order() -> None:
    """Kafka's generated readers do not check tag order; neither side may reject it."""
    raw = b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x01c" + b"\x02\x05\x01x\x02\x00" + b"body"
    h = H.parse_request_header(raw, True)
    tree, size = header.REQUEST_HEADER.parse_with_size(2, raw)
    assert h.size == size == len(raw) - 4
    assert parsed_header(h) == plain(tree) == {"request_api_key": 18, "request_api_version": 3,
                                               "correlation_id": 1, "client_id": "c"}


@pytest.mark.parametrize("v", [1, 2])
def test_mutated_headers_agree_with_construct(v) -> None:
    @settings(FAST, max_examples=40)  # the adversarial ones get more
    @given(st.data())
    def run(data):
        tree = data.draw(header_strategy(v))
        raw = header.REQUEST_HEADER.build(v, tree)
        if v == 2:
            raw = raw[:-1] + data.draw(tagged_block())
        for op in data.draw(st.lists(_mutations(raw), min_size=1, max_size=3)):
            raw = mutate(raw, op)
        theirs = outcome(lambda b: (plain(header.REQUEST_HEADER.parse_with_size(v, b)[0]),
                                    header.REQUEST_HEADER.parse_with_size(v, b)[1]), raw, errors=SchemaError)
        ours = outcome(lambda b: (parsed_header(H.parse_request_header(b, v == 2)), H.parse_request_header(b, v == 2).size),
                       raw, errors=RemoteProtocolError)
        assert ours[0] == theirs[0] and (ours[0] == "error" or ours[1] == theirs[1])

    run()


@given(st.binary(max_size=40), st.booleans())
@FAST
def test_header_garbage_raises_remote_protocol_error_only(junk, flexible) -> None:
    try:
        h = H.parse_request_header(junk, flexible)
    except RemoteProtocolError as exc:
        assert exc.error_code is None
    else:
        assert 10 <= h.size <= len(junk)


# ---------------------------------------------------------------------------
# The control codecs' encoders (bodies): same bytes as construct, for every version


def _lisr_partition(p) -> H.LeaderAndIsrPartitionState:
    return H.LeaderAndIsrPartitionState(p["partition_index"], p["controller_epoch"], p["leader"], p["leader_epoch"],
                                        p["isr"], p["partition_epoch"], p["replicas"], p["adding_replicas"],
                                        p["removing_replicas"], p["is_new"], p["leader_recovery_state"],
                                        p["topic_name"])


def leader_and_isr_from_tree(tree, v, fill=True) -> H.LeaderAndIsrRequest:
    t = complete(control.LEADER_AND_ISR_REQUEST.fields, tree, v) if fill else tree
    return H.LeaderAndIsrRequest(
        t["controller_id"], t["controller_epoch"], t["broker_epoch"], t["type"],
        [H.LeaderAndIsrTopicState(ts["topic_name"], ts["topic_id"], [_lisr_partition(p) for p in ts["partition_states"]])
         for ts in t["topic_states"]],
        [H.LeaderAndIsrLiveLeader(lv["broker_id"], lv["host_name"], lv["port"]) for lv in t["live_leaders"]],
        [_lisr_partition(p) for p in t["ungrouped_partition_states"]], t["is_kraft_controller"])


def _um_partition(p) -> H.UpdateMetadataPartitionState:
    return H.UpdateMetadataPartitionState(p["partition_index"], p["controller_epoch"], p["leader"], p["leader_epoch"],
                                          p["isr"], p["zk_version"], p["replicas"], p["offline_replicas"],
                                          p["topic_name"])


def update_metadata_from_tree(tree, v, fill=True) -> H.UpdateMetadataRequest:
    t = complete(control.UPDATE_METADATA_REQUEST.fields, tree, v) if fill else tree
    return H.UpdateMetadataRequest(
        t["controller_id"], t["controller_epoch"], t["broker_epoch"], t["type"],
        [H.UpdateMetadataTopicState(ts["topic_name"], ts["topic_id"], [_um_partition(p) for p in ts["partition_states"]],
                                    [H.UpdateMetadataTopicConfig(c["name"], c["value"]) for c in ts["topic_configs"]])
         for ts in t["topic_states"]],
        [H.UpdateMetadataBroker(b["id"], [H.UpdateMetadataEndpoint(e["port"], e["host"], e["listener"],
                                                                   e["security_protocol"]) for e in b["endpoints"]],
                                b["rack"], b["v0_host"], b["v0_port"]) for b in t["live_brokers"]],
        [_um_partition(p) for p in t["ungrouped_partition_states"]], t["is_kraft_controller"],
        [bytes(r["record"]) for r in t["metadata_records"]])


def leader_and_isr_response_from_tree(tree, v, fill=True) -> H.LeaderAndIsrResponse:
    t = complete(control.LEADER_AND_ISR_RESPONSE.fields, tree, v) if fill else tree
    return H.LeaderAndIsrResponse(
        t["error_code"], [H.LeaderAndIsrPartitionError(e["partition_index"], e["error_code"], e["topic_name"])
                          for e in t["partition_errors"]],
        [H.LeaderAndIsrTopicError(te["topic_id"], [H.LeaderAndIsrPartitionError(e["partition_index"], e["error_code"])
                                                   for e in te["partition_errors"]]) for te in t["topics"]])


CONTROL_ENCODERS = {
    "leader-and-isr-request": lambda v, t, fill=True: H.encode_leader_and_isr_request(
        v, leader_and_isr_from_tree(t, v, fill)),
    "update-metadata-request": lambda v, t, fill=True: H.encode_update_metadata_request(
        v, update_metadata_from_tree(t, v, fill)),
    "leader-and-isr-response": lambda v, t, fill=True: H.encode_leader_and_isr_response(
        v, leader_and_isr_response_from_tree(t, v, fill)),
}
CONTROL_CASES = [pytest.param(name, v, id=f"{name}-v{v}") for name in CONTROL_ENCODERS
                 for v in DECODERS[name].versions]


@pytest.mark.parametrize("name,v", CONTROL_CASES)
def test_control_encoder_matches_construct(name, v) -> None:
    """Encoded by hand, the bytes construct builds; decoded by hand, what was encoded (and
    construct's bytes decode by hand to construct's value: test_decoder_matches_construct)."""
    dec, encode = DECODERS[name], CONTROL_ENCODERS[name]

    @settings(FAST, max_examples=25)
    @given(message_strategy(dec.msg, v))
    def run(tree):
        ours = encode(v, tree)
        expected = dec.msg.build(v, tree)
        assert ours == expected, first_difference(ours, expected)
        assert dec(v, ours) == dec.expected(tree, v)

    run()
    # Every field set away from its default, those the version lacks too: both leave them out.
    rich = RICH[name](v)
    assert encode(v, rich, False) == dec.msg.build(v, rich)


@pytest.mark.parametrize("name", list(CONTROL_ENCODERS))
def test_control_codecs_refuse_other_versions(name) -> None:
    dec = DECODERS[name]
    for v in (dec.versions[0] - 1, dec.versions[-1] + 1):
        with pytest.raises(LocalProtocolError):
            dec.decode(v, memoryview(b""), 0)


def test_update_metadata_tags_in_any_order_and_unknown_tags_skipped() -> None:
    """v8: the topic configs tag (10000) and the type tag (0), with unknown tags around them,
    in descending order: both readers take them (a repeated tag: the last wins)."""
    cfg = b"\x02\x02a\x02b\x00"  # [("a", "b")]: compact array of one, compact strings, no tags
    topic = b"\x02t" + bytes(16) + b"\x01" + b"\x03" + b"\x7f\x01z" + b"\x90\x4e" + bytes([len(cfg)]) + cfg + b"\x05\x00"
    body = (struct.pack(">ib", 1, 0) + struct.pack(">iq", 2, 3) + b"\x02" + topic + b"\x01"
            + b"\x03" + b"\x09\x01x" + b"\x00\x01\x02" + b"\x00\x01\x01")
    ours = H.decode_update_metadata_request(8, memoryview(body), 0)
    theirs = control.UPDATE_METADATA_REQUEST.parse(8, body)
    assert ours.type == theirs.type == 1
    assert ours.topic_states[0].topic_configs == [H.UpdateMetadataTopicConfig("a", "b")]
    assert DECODERS["update-metadata-request"](8, body) == without(plain(theirs), set())


# ---------------------------------------------------------------------------
# protocol/_produce_codec.c against its Python reference


def test_the_produce_codec_is_built() -> None:
    """make test-deps builds protocol/_produce_codec.c (the Produce request's decoder and answer)."""
    assert H._produce_codec is not None, "protocol._produce_codec is not built: run `make test-deps`"


def _outcome(fn, *args):
    """What a call gives: its value (records as bytes), or its error's type and text."""
    try:
        out = fn(*args)
    except (RemoteProtocolError, struct.error, TypeError, ValueError, OverflowError, IndexError) as exc:
        return type(exc), str(exc), getattr(exc, "error_code", None)
    if isinstance(out, H.ProduceRequest):
        return dataclasses.replace(out, topics=[(t, [(p, None if r is None else (type(r), bytes(r))) for p, r in parts])
                                                for t, parts in out.topics])
    return out


def _mutate(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for kind, where, value in mutations:
        where = min(where, len(out))
        if kind == "set" and out:
            out[min(where, len(out) - 1)] = value
        elif kind == "cut":
            del out[where:]
        elif kind == "add":
            out[where:where] = bytes([value])
        elif kind == "null" and len(out) >= where + value:
            out[where:where + value] = b"\xff" * value
    return bytes(out)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_compiled_produce_decoder_agrees_with_python(data) -> None:
    v = data.draw(st.sampled_from(PRODUCE_VERSIONS))
    body = produce.REQUEST.build(v, data.draw(message_strategy(produce.REQUEST, v)))
    body = _mutate(body, data.draw(st.lists(_mutations(body), max_size=3)))
    prefix = data.draw(st.integers(0, 3))
    buf = memoryview(bytearray(b"\x07" * prefix + body))
    compiled = _outcome(H.decode_produce_request, v, buf, prefix)
    assert compiled == _outcome(H.decode_produce_request_py, v, buf, prefix)
    if isinstance(compiled, H.ProduceRequest):  # records are writable views of the frame, as in Python
        for _t, parts in H.decode_produce_request(v, buf, prefix).topics:
            for _p, records in parts:
                assert records is None or (isinstance(records, memoryview) and not records.readonly
                                           and records.obj is buf.obj)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=60), st.integers(0, 8))
def test_compiled_produce_decoder_agrees_on_random_bytes(raw, pos) -> None:
    buf = memoryview(raw)
    assert _outcome(H.decode_produce_request, 3, buf, pos) == _outcome(H.decode_produce_request_py, 3, buf, pos)


_ANY_INT = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**70), 2**70), st.sampled_from(list(ErrorCode)),
                     st.booleans())
_ROW = st.one_of(
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=5, max_size=5),  # the plain row
    st.lists(_ANY_INT, min_size=3, max_size=6),  # short, long, out of range
    st.tuples(st.integers(0, 10), st.sampled_from(list(ErrorCode)), st.integers(-1, 2**40), st.integers(-1, 5),
              st.integers(0, 9), st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.text(max_size=5))),
                                          max_size=2), st.one_of(st.none(), st.text(max_size=5))),  # record errors
    st.just([0, 0, 0.5, 0, 0]),  # not an int
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PRODUCE_VERSIONS), _ANY_INT,
       st.lists(st.tuples(st.text(max_size=6), st.lists(_ROW, max_size=3)), max_size=3), _ANY_INT)
def test_compiled_produce_encoder_agrees_with_python(v, correlation_id, responses, throttle) -> None:
    assert (_outcome(H.encode_produce_response, v, correlation_id, responses, throttle)
            == _outcome(H.encode_produce_response_py, v, correlation_id, responses, throttle))


def test_request_is_flexible_follows_the_schemas() -> None:
    """The header's flexibility table (protocol/messages: read per request) says what each schema says."""
    from protocol.messages import request_is_flexible

    for key, api in APIS.items():
        req = api.request
        for v in range(-1, req.valid[1] + 3):
            assert request_is_flexible(key, v) == (req.valid[0] <= v <= req.valid[1] and req.is_flexible(v)), (key, v)
    assert not request_is_flexible(32000, 0)


def test_the_flexible_versions_set_is_request_is_flexible() -> None:
    """REQUEST_FLEXIBLE_VERSIONS (the broker's header parse) holds exactly the pairs request_is_flexible says yes to."""
    from protocol.messages import REQUEST_FLEXIBLE_VERSIONS, request_is_flexible

    for key in [*range(-2, max(APIS) + 3), 32000, -32768]:
        for v in [*range(-3, 64), 32767, -32768]:
            assert ((key, v) in REQUEST_FLEXIBLE_VERSIONS) == request_is_flexible(key, v), (key, v)


class _Resizing:
    """An integer (``__index__``) that resizes a list of rows when read: Python code running
    in the middle of the compiled encoder, which sized its buffer from the lists' lengths."""

    def __init__(self, rows: list, size: int) -> None:
        self.rows, self.size = rows, size

    def __index__(self) -> int:
        del self.rows[self.size:]
        self.rows.extend([(0, 0, 0, 0, 0)] * (self.size - len(self.rows)))
        return 0


@pytest.mark.parametrize("later_rows", [0, 1, 5])
def test_compiled_produce_encoder_survives_rows_resized_while_it_encodes(later_rows) -> None:
    """A later topic's rows resized (fewer, or more) while a row before is read: the compiled
    encoder may not write the frame it sized before (past its end, or leaving garbage), it
    gives what Python gives."""
    for v in PRODUCE_VERSIONS:
        def responses():
            later = [(1, 0, 2, 3, 4)] * 3
            return [("a", [(0, _Resizing(later, later_rows), 1, 2, 3)]), ("b", later)], later
        compiled, _ = responses()
        reference, _ = responses()
        assert (_outcome(H.encode_produce_response, v, 7, compiled, 0)
                == _outcome(H.encode_produce_response_py, v, 7, reference, 0)), v


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(range(PRODUCE_VERSIONS[0], PRODUCE_VERSIONS[1] + 1)),
       partitions=st.lists(st.tuples(st.integers(1, 3), st.sampled_from([0, 0, 0, 1, 4]), st.booleans(),
                                     st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=2),
                                     st.sampled_from([0, 0, 0, -1, -50, 3, 100]), st.booleans()),
                           min_size=1, max_size=4))
def test_the_compiled_plain_flag_is_the_python_one(version, partitions) -> None:
    """``plain`` (the produce path's checks before the log would pass every partition as it is)
    from protocol/_produce_codec.c equals ``produce_request_is_plain_py`` on whole, cut, padded,
    flipped, transactional, zstd and null records."""
    from protocol.records import Record, build_batch

    parts = []
    for i, (n, codec, transactional, flips, cut, null) in enumerate(partitions):
        if null:
            parts.append({"index": i, "records": None})
            continue
        batch = bytearray(build_batch([Record(value=b"v" * 30, timestamp=1)] * n, producer_id=5 if transactional else -1,
                                      producer_epoch=0 if transactional else -1, base_sequence=0 if transactional else -1,
                                      transactional=transactional))
        batch[22] |= codec  # the codec bits only: the checks read nothing else of them
        for where, value in flips:
            batch[where % len(batch)] = value
        batch = batch[:max(0, len(batch) + cut)] if cut < 0 else batch + bytes(cut)
        parts.append({"index": i, "records": bytes(batch)})
    body = produce.REQUEST.build(version, {"transactional_id": None, "acks": 1, "timeout_ms": 5,
                                           "topic_data": [{"name": "t", "partition_data": parts}]})
    buf = memoryview(bytearray(body))
    compiled = H.decode_produce_request(version, buf, 0)
    assert compiled.plain == H.produce_request_is_plain_py(version, compiled.topics)
    assert compiled == H.decode_produce_request_py(version, buf, 0)


def test_a_compiled_codec_built_from_an_older_source_is_not_used():
    """A checkout that moved on without `pip install -e .` leaves an older _produce_codec in place:
    its decode takes other arguments, so the Python codecs serve (with a warning), and an older
    _record_walk (no stamp) leaves the record walk in Python: no Produce fails on a stale build."""
    import subprocess
    import sys
    from pathlib import Path
    code = (
        "import sys, types\n"
        "old = types.ModuleType('protocol._produce_codec'); old.decode = old.encode = lambda *a: 1/0\n"
        "sys.modules['protocol._produce_codec'] = old\n"
        "walk = types.ModuleType('storage._record_walk'); walk.walk = walk.accept = lambda *a: 1/0\n"
        "sys.modules['storage._record_walk'] = walk\n"
        "from protocol import fast_codecs\n"
        "from storage import log_validator\n"
        "print(fast_codecs._produce_codec is None, log_validator.COMPILED, log_validator.stamp_batch is None)\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True"]
    assert "built from an older source" in out.stderr


# The request header: protocol/_produce_codec.c's parse_header against fast_codecs.parse_header_py

def _header_outcome(fn, buf, flexible_versions):
    """A header's fields and size, or the reason a malformed one is refused (a str)."""
    h = fn(buf, flexible_versions, H.RequestHeader)
    if isinstance(h, str):
        return h
    assert type(h) is H.RequestHeader
    return (h.api_key, h.api_version, h.correlation_id, h.client_id, h.size)


def test_the_broker_parses_headers_compiled() -> None:
    assert H.parse_header is H._produce_codec.parse_header


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_compiled_header_parser_agrees_with_python(data) -> None:
    """Valid headers v1 and v2 (unknown tags in any order), then mutated: the same header, or the
    same reason, word for word, with the (api key, version) pair flexible or not."""
    v = data.draw(st.sampled_from([1, 2]))
    tree = data.draw(header_strategy(v))
    raw = header.REQUEST_HEADER.build(v, tree)
    if v == 2:
        raw = raw[:-1] + data.draw(tagged_block())
    raw += data.draw(st.binary(max_size=6))
    for op in data.draw(st.lists(_mutations(raw), max_size=3)):
        raw = mutate(raw, op)
    pair = (tree["request_api_key"], tree["request_api_version"])
    flexible_versions = data.draw(st.sampled_from([frozenset(), frozenset({pair}), {pair, (1, 2)}, {(pair[0], -1)}]))
    for buf in (raw, bytearray(raw), memoryview(bytearray(raw))):
        compiled = _header_outcome(H._produce_codec.parse_header, buf, flexible_versions)
        assert compiled == _header_outcome(H.parse_header_py, buf, flexible_versions)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.booleans())
def test_compiled_header_parser_agrees_on_random_bytes(raw, flexible) -> None:
    pairs = {(int.from_bytes(raw[:2], "big", signed=True), int.from_bytes(raw[2:4], "big", signed=True))} if flexible else set()
    compiled = _header_outcome(H._produce_codec.parse_header, raw, pairs)
    assert compiled == _header_outcome(H.parse_header_py, raw, pairs)


@pytest.mark.parametrize("raw,flexible", [
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x01\x00\x05ab", True),    # tagged field past the end
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x01\x00\x03ab", True),    # ... by one byte
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x80\x80\x80\x80\x80\x01", True),  # over-long varint
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x02\x00\x00", True),      # two tags announced, one there
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x8f\x80\x80\x80\x0f", True),  # 2**32-1 tags announced
    (b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x01\x00\xff\xff\xff\xff\x0f", True),  # a 2**32-1 byte tag
    (b"\x00\x00\x00\x03\x00\x00\x00\x01\x00\x02\xc3\x28", False),   # client id not UTF-8
    (b"\x00\x00\x00\x03\x00\x00\x00\x01\x00\x09abc", False),        # client id past the end
    (b"\x00\x00\x00\x03\x00\x00\x00\x01\xff\xfe", False),           # client id length -2
    (b"\x00\x00\x00\x03\x00\x00\x00\x01\xff", False),               # 9 bytes
])
def test_compiled_header_parser_refuses_as_python_does(raw, flexible) -> None:
    pairs = {(raw[0] << 8 | raw[1], raw[2] << 8 | raw[3])} if flexible else set()
    reason = _header_outcome(H.parse_header_py, raw, pairs)
    assert isinstance(reason, str)
    assert _header_outcome(H._produce_codec.parse_header, raw, pairs) == reason


def _fetch_outcome(fn, *args):
    """A Fetch request decoder's value, or its error's type, text and code."""
    try:
        return fn(*args)
    except (RemoteProtocolError, LocalProtocolError, struct.error, TypeError, ValueError, OverflowError,
            IndexError) as exc:
        return type(exc), str(exc), getattr(exc, "error_code", None)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_compiled_fetch_decoder_agrees_with_python(data) -> None:
    """protocol/_produce_codec.c's decode_fetch, behind decode_fetch_request, gives what the Python
    reference gives on whole, cut and mutated bodies, with and without what it leaves to Python
    (forgotten topics, a rack id), and decodes the common body (a follower's) itself."""
    v = data.draw(st.sampled_from(FETCH_VERSIONS))
    tree = data.draw(message_strategy(fetch.REQUEST, v))
    common = data.draw(st.booleans())
    if common:
        tree = dict(tree, forgotten_topics_data=[], rack_id="")
    body = fetch.REQUEST.build(v, tree)
    if common and data.draw(st.booleans()):
        compiled = H._produce_codec.decode_fetch(memoryview(body), 0, v, H.FetchRequest, H.FetchPartition)
        assert compiled is not None and compiled == H.decode_fetch_request_py(v, memoryview(body), 0)
    body = _mutate(body, data.draw(st.lists(_mutations(body), max_size=3)))
    prefix = data.draw(st.integers(0, 3))
    buf = memoryview(bytearray(b"\x07" * prefix + body))
    assert _fetch_outcome(H.decode_fetch_request, v, buf, prefix) == _fetch_outcome(H.decode_fetch_request_py, v, buf,
                                                                                      prefix)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80), st.integers(0, 8), st.sampled_from(FETCH_VERSIONS + [3, 12]))
def test_compiled_fetch_decoder_agrees_on_random_bytes(raw, pos, v) -> None:
    buf = memoryview(raw)
    assert _fetch_outcome(H.decode_fetch_request, v, buf, pos) == _fetch_outcome(H.decode_fetch_request_py, v, buf,
                                                                                   pos)


def _fetch_encoded(fn, *args, **kwargs):
    """An encoder's chunks (type, bytes, and the object itself where it is not a bytearray of its
    own) and total, or its error's type and text."""
    try:
        chunks, total = fn(*args, **kwargs)
    except (RemoteProtocolError, LocalProtocolError, struct.error, TypeError, ValueError, OverflowError,
            IndexError, AttributeError, UnicodeEncodeError) as exc:
        return type(exc), str(exc)
    return [(type(c), bytes(c), None if type(c) is bytearray else id(c)) for c in chunks], total


_RECORDS = st.one_of(
    st.none(), st.just(b""), st.binary(max_size=20), st.binary(min_size=500, max_size=700),
    st.binary(max_size=700).map(bytearray), st.binary(max_size=700).map(memoryview),
    st.binary(max_size=64).map(lambda b: memoryview(b[:len(b) // 4 * 4]).cast("i")),  # len() is not its bytes
    st.just("not a buffer"))
_FIELD_INT = st.one_of(st.integers(-1, 2**31 - 1), st.integers(-(2**64), 2**64), st.sampled_from(list(ErrorCode)),
                       st.booleans(), st.just(1.5))


_I16_INT = st.integers(-(2**15), 2**15 - 1)
_I32_INT = st.integers(-(2**31), 2**31 - 1)
_I64_INT = st.integers(-(2**63), 2**63 - 1)


@st.composite
def _fetch_partition_data(draw, wild):
    """A row: every field in its range (wild False: what the compiled encoder takes, but for
    aborted transactions and odd records), or anything (wild True)."""
    def value(fit):
        return draw(st.one_of(fit, _FIELD_INT) if wild else fit)
    pd = H.FetchPartitionData(value(st.one_of(st.integers(0, 99), _I32_INT)),
                              value(st.one_of(st.sampled_from(list(ErrorCode)), _I16_INT)),
                              value(st.one_of(st.integers(-1, 2**40), _I64_INT)),
                              value(st.one_of(st.integers(-1, 2**40), _I64_INT)),
                              value(st.one_of(st.integers(-1, 2**40), _I64_INT)),
                              draw(_RECORDS),
                              draw(st.one_of(st.none(), st.none(), st.none(),
                                             st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=2))),
                              value(st.one_of(st.integers(-1, 5), _I32_INT)))
    return pd if not wild or draw(st.integers(0, 9)) else ("not", "a row")


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_compiled_fetch_encoder_agrees_with_python(data) -> None:
    """protocol/_produce_codec.c's encode_fetch, behind encode_fetch_response, gives what the
    Python reference gives: the same chunks (record buffers of 512 bytes or more by reference),
    the same total, or the same error; on rows in range (mostly its own) and on anything."""
    wild = data.draw(st.booleans())
    draw = data.draw
    v = draw(st.sampled_from(FETCH_VERSIONS + [3, 12]) if wild else st.sampled_from(FETCH_VERSIONS))
    ints = (lambda fit: draw(_ANY_INT)) if wild else draw
    correlation_id, throttle, error, session = ints(_I32_INT), ints(_I32_INT), ints(_I16_INT), ints(_I32_INT)
    responses = draw(st.lists(st.tuples(st.one_of(st.text(max_size=6), st.just("\ud800")) if wild else st.text(max_size=6),
                                        st.lists(_fetch_partition_data(wild), max_size=3)), max_size=3))
    if draw(st.booleans()):
        responses = tuple((t, tuple(parts)) for t, parts in responses)
    kwargs = dict(throttle_time_ms=throttle, error_code=error, session_id=session)
    assert (_fetch_encoded(H.encode_fetch_response, v, correlation_id, responses, **kwargs)
            == _fetch_encoded(H.encode_fetch_response_py, v, correlation_id, responses, **kwargs))


def test_fetch_response_counts_a_views_bytes_not_its_items() -> None:
    """Records given as a memoryview of wider items (a cast) are framed by their bytes: the
    length field and the total say nbytes, and the frame is the one the same bytes give."""
    raw = bytes(range(256)) * 4
    for size in (40, 1024):  # inlined (< 512 bytes) and passed by reference
        wide = memoryview(raw[:size]).cast("I")
        assert len(wide) != wide.nbytes
        parts = [H.FetchPartitionData(0, 0, 5, 5, 0, wide)]
        want = joined(H.encode_fetch_response_py(11, 7, [("t", [H.FetchPartitionData(0, 0, 5, 5, 0, raw[:size])])])[0])
        for encode in (H.encode_fetch_response, H.encode_fetch_response_py):
            chunks, total = encode(11, 7, [("t", parts)])
            data = joined(chunks)
            assert total == len(data) == len(want)
            assert data == want


def test_compiled_fetch_encoder_answers_a_followers_fetch() -> None:
    """The answer to a follower (no aborted transactions) is the compiled one, not the reference's."""
    parts = [H.FetchPartitionData(0, 0, 5, 5, 0, memoryview(b"x" * 600)), H.FetchPartitionData(1, 0, 5, 5, 0, b"y")]
    compiled = H._produce_codec.encode_fetch(11, 7, [("t", parts)], 0, 0, 9, H.FetchPartitionData)
    assert compiled is not None
    chunks, total = compiled
    assert chunks[1] is parts[0].records
    assert (_fetch_encoded(lambda *a, **k: compiled, 0) == _fetch_encoded(H.encode_fetch_response_py, 11, 7,
                                                                           [("t", parts)], session_id=9))
