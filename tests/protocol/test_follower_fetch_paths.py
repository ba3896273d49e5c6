"""The follower's per-response shortcuts (issue 29) held to the general ways they shortcut:
``decode_fetch_response``'s one-topic, one-partition way against ``_decode_fetch_response_any``
(and construct's schema, the oracle of both), and FetchSessionHandler.build (its one-partition
``to_send`` and its "nothing forgotten" test) against the builder it replaced, step by step
through random sessions."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

import protocol.fast_codecs as H
from protocol.errors import RemoteProtocolError
from protocol.fast_codecs import FetchPartition, FetchPartitionData, FetchResponse
from protocol.fetch_session import FetchSessionHandler
from protocol.messages import fetch
from tests.protocol.test_fast_codecs import complete, fetch_response_tree

_I16 = st.integers(-(1 << 15), (1 << 15) - 1)
_I32 = st.integers(-(1 << 31), (1 << 31) - 1)
_I64 = st.integers(-(1 << 63), (1 << 63) - 1)

_partition = st.fixed_dictionaries({
    "partition_index": _I32, "error_code": _I16, "high_watermark": _I64, "last_stable_offset": _I64,
    "log_start_offset": _I64,
    # mostly none (the follower's case), sometimes some: the general way's
    "aborted_transactions": st.one_of(st.none(), st.none(), st.lists(
        st.fixed_dictionaries({"producer_id": _I64, "first_offset": _I64}), max_size=2)),
    "preferred_read_replica": _I32,
    "records": st.one_of(st.none(), st.binary(max_size=40))})

_response = st.fixed_dictionaries({
    "throttle_time_ms": _I32, "error_code": _I16, "session_id": _I32,
    "responses": st.lists(st.fixed_dictionaries({
        "topic": st.text(max_size=6),
        # one partition mostly (the shortcut's shape), sometimes none or more
        "partitions": st.one_of(st.lists(_partition, min_size=1, max_size=1), st.lists(_partition, max_size=3))}),
        min_size=1, max_size=2)})


def _outcome(decode, buf):
    try:
        return fetch_response_tree(decode(11, buf, 8), 11)
    except RemoteProtocolError as exc:
        return ("raises", str(exc))


@settings(max_examples=400, deadline=None)
@given(_response, st.data())
def test_the_one_partition_way_decodes_as_the_general_way_and_construct(tree, data) -> None:
    """Whole, cut anywhere, with trailing bytes, and with a byte changed (a length, a count, a
    name that is not UTF-8): the same response or the same error."""
    body = fetch.RESPONSE.build(11, tree)
    whole = struct.pack(">ii", len(body) + 4, 5) + body
    assert fetch_response_tree(H.decode_fetch_response(11, memoryview(whole), 8), 11) == \
        complete(fetch.RESPONSE.fields, tree, 11)
    cut = data.draw(st.integers(8, len(whole)), label="cut")
    trailing = data.draw(st.binary(max_size=8), label="trailing")
    changed = bytearray(whole)
    where = data.draw(st.integers(8, len(whole) - 1), label="where")
    changed[where] = data.draw(st.integers(0, 255), label="byte")
    for buf in (whole, whole[:cut], whole + trailing, bytes(changed)):
        assert _outcome(H.decode_fetch_response, memoryview(buf)) == \
            _outcome(H._decode_fetch_response_any, memoryview(buf))


def test_the_one_partition_way_takes_a_followers_response() -> None:
    """(The shortcut is what answers a follower's response: not the general way.)"""
    frame = b"".join(bytes(c) for c in H.encode_fetch_response(11, 5, [("t", [FetchPartitionData(
        0, 0, 10, 10, 0, b"r" * 30)])])[0])
    calls = []
    general = H._decode_fetch_response_any
    H._decode_fetch_response_any = lambda *a: calls.append(a) or general(*a)  # type: ignore[assignment]
    try:
        response = H.decode_fetch_response(11, memoryview(frame), 8)
    finally:
        H._decode_fetch_response_any = general  # type: ignore[assignment]
    assert calls == [] and bytes(response.responses[0][1][0].records) == b"r" * 30


def test_a_followers_response_cut_anywhere_raises_as_the_general_way() -> None:
    frame = b"".join(bytes(c) for c in H.encode_fetch_response(11, 5, [("topic", [FetchPartitionData(
        3, 0, 10, 10, 0, bytes(range(40)), None, 2)])])[0])
    outcomes = [_outcome(H.decode_fetch_response, memoryview(frame[:cut])) for cut in range(8, len(frame) + 1)]
    assert outcomes == [_outcome(H._decode_fetch_response_any, memoryview(frame[:cut]))
                        for cut in range(8, len(frame) + 1)]
    assert outcomes[-1] != outcomes[-2] and outcomes[-2][0] == "raises"


def test_the_session_epoch_wraps_from_the_largest_int32_to_1() -> None:
    handler = FetchSessionHandler(1)
    wanted = {("a", 0): FetchPartition(0, 0, 0, 0, 1 << 20)}
    data = handler.build(wanted)
    assert handler.handle_response(FetchResponse(0, 0, 7, [("a", [FetchPartitionData(0)])]), data)
    handler.epoch = (1 << 31) - 1
    data = handler.build(wanted)
    assert data.epoch == (1 << 31) - 1 and handler.handle_response(FetchResponse(0, 0, 7, []), data)
    assert handler.epoch == 1


def _reference_build(previous: dict, wanted: dict):
    """FetchSessionHandler.build's incremental fetch before issue 29's shortcuts: (to_send, to_forget)."""
    to_send: dict[str, list[FetchPartition]] = {}
    for key, fp in wanted.items():
        if previous.get(key) != fp:
            to_send.setdefault(key[0], []).append(fp)
    forgotten: dict[str, list[int]] = {}
    for topic, index in previous:
        if (topic, index) not in wanted:
            forgotten.setdefault(topic, []).append(index)
    return list(to_send.items()), [(t, sorted(ps)) for t, ps in forgotten.items()]


_keys = st.sampled_from([(t, p) for t in ("a", "b", "c") for p in range(3)])
_wanted = st.dictionaries(_keys, st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 1)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(_wanted, min_size=1, max_size=12))
def test_build_sends_and_forgets_what_the_general_builder_does(rounds) -> None:
    handler = FetchSessionHandler(1)
    for i, chosen in enumerate(rounds):
        wanted = {k: FetchPartition(k[1], epoch, offset, log_start, 1 << 20)
                  for k, (epoch, offset, log_start) in chosen.items()}
        previous = dict(handler.session_partitions)
        data = handler.build(wanted)
        assert data.full == (i == 0)
        if data.full:
            assert data.to_forget == [] and sum(len(ps) for _t, ps in data.to_send) == len(wanted)
        else:
            assert (data.to_send, data.to_forget) == _reference_build(previous, wanted)
        assert handler.session_partitions == wanted
        answered = [(t, [FetchPartitionData(fp.partition) for fp in parts]) for t, parts in data.to_send]
        assert handler.handle_response(FetchResponse(0, 0, 7, answered), data)
        assert handler.epoch == i + 1 and handler.session_id == 7
