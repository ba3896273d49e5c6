"""The construct building blocks (protocol/primitives.py) and the DSL (protocol/schema.py)
on the edge cases the oracles above cannot reach: null and negative lengths, compact
varints, tagged-field blocks, and defaults that must not be shared between messages."""

from __future__ import annotations

import pytest
from construct import ConstructError
from hypothesis import given, settings
from kafka.protocol.producer import ProduceResponse

from protocol import primitives as P
from protocol.messages import api_versions, fetch, produce
from protocol.schema import SchemaError

from .kafka_values import FAST, all_messages, complete, message_strategy, plain


@pytest.mark.parametrize("con,raw", [
    (P.KString(), b"\xff\xff"),                       # null, not nullable
    (P.KString(nullable=True), b"\xff\xfe"),          # -2
    (P.KString(), b"\x00\x05abc"),                    # past the end
    (P.KString(), b"\x00\x02\xc3\x28"),               # not UTF-8
    (P.KString(compact=True), b"\x00"),               # compact null, not nullable
    (P.KString(compact=True), b"\x80\x80\x80\x80\x80\x01"),  # length varint of 6 bytes (Kafka: at most 5)
    (P.KBytes(), b"\xff\xff\xff\xff"),
    (P.KBytes(nullable=True), b"\xff\xff\xff\xfe"),
    (P.KBytes(), b"\x00\x00\x00\x09abc"),
    (P.KArray(P.Int32), b"\xff\xff\xff\xff"),
    (P.KArray(P.Int32, nullable=True), b"\x80\x00\x00\x00"),
    (P.KArray(P.Int32), b"\x00\x00\x00\x02\x00\x00\x00\x01"),
    (P.UUIDType, b"\x00" * 15),
])
def test_malformed_primitives_raise(con, raw) -> None:
    with pytest.raises(ConstructError):
        con.parse(raw)


@pytest.mark.parametrize("con,value,raw", [
    (P.KString(nullable=True), None, b"\xff\xff"),
    (P.KString(compact=True, nullable=True), None, b"\x00"),
    (P.KString(compact=True), "é", b"\x03\xc3\xa9"),
    (P.KString(), "", b"\x00\x00"),
    (P.KBytes(compact=True, nullable=True), None, b"\x00"),
    (P.KBytes(), b"ab", b"\x00\x00\x00\x02ab"),
    (P.KArray(P.Int16, compact=True), [1], b"\x02\x00\x01"),
    (P.KArray(P.Int16, nullable=True), None, b"\xff\xff\xff\xff"),
    (P.UVarInt, 300, b"\xac\x02"),
    (P.UVarInt, 2**32 - 1, b"\xff\xff\xff\xff\x0f"),
])
def test_primitive_round_trips(con, value, raw) -> None:
    assert con.build(value) == raw
    assert con.parse(raw) == value


@pytest.mark.parametrize("con,value", [(P.KString(), None), (P.KString(), "x" * 32768), (P.KBytes(), None),
                                       (P.KArray(P.Int8), None)])
def test_unencodable_values_raise(con, value) -> None:
    with pytest.raises(ConstructError):
        con.build(value)


def test_parsed_defaults_are_not_shared() -> None:
    """Mutating what one parse returned must not change the next parse or build."""
    raw = fetch.RESPONSE.build(16, {"responses": [{"partitions": [{"partition_index": 0}]}]})
    first = fetch.RESPONSE.parse(16, raw)
    part = first.responses[0].partitions[0]
    assert plain(part.current_leader) == {"leader_id": -1, "leader_epoch": -1}
    part.current_leader.leader_id = 42
    first.node_endpoints.append({"node_id": 1})
    again = fetch.RESPONSE.parse(16, raw)
    assert again.responses[0].partitions[0].current_leader.leader_id == -1
    assert again.node_endpoints == []
    assert fetch.RESPONSE.build(16, again) == raw


def _partition(**extra):
    return {"index": 0, "error_code": 0, "base_offset": 5, **extra}


def test_tagged_struct_at_its_default_is_not_written() -> None:
    """Kafka writes a tagged struct only if it differs from a fresh instance; kafka-python writes
    any non-None value. Ours follows Kafka, and both decode each other's bytes alike."""
    at_default = {"responses": [{"name": "t", "partition_responses": [
        _partition(current_leader={"leader_id": -1, "leader_epoch": -1})]}]}
    absent = {"responses": [{"name": "t", "partition_responses": [_partition()]}]}
    ours = produce.RESPONSE.build(10, at_default)
    assert ours == produce.RESPONSE.build(10, absent)
    kp = ProduceResponse(version=10, throttle_time_ms=0, responses=[
        ProduceResponse.TopicProduceResponse(version=10, name="t", partition_responses=[
            ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
                version=10, index=0, error_code=0, base_offset=5,
                current_leader=ProduceResponse.TopicProduceResponse.PartitionProduceResponse.LeaderIdAndEpoch(
                    version=10, leader_id=-1, leader_epoch=-1))])])
    theirs = bytes(kp.encode(version=10))
    # kafka-python adds tag 0, size 9, leader_id -1, leader_epoch -1 and the struct's empty tag block.
    assert theirs.replace(b"\x01\x00\x09" + b"\xff" * 8 + b"\x00", b"\x00", 1) == ours
    assert plain(produce.RESPONSE.parse(10, theirs)) == plain(produce.RESPONSE.parse(10, ours))


def test_tagged_fields_unknown_repeated_and_unordered() -> None:
    base = api_versions.RESPONSE.build(3, {"api_keys": []})
    assert base.endswith(b"\x00")
    # tag 9 (unknown, skipped), then tag 1 (finalized_features_epoch) twice, then tag 3, out of order
    epoch = lambda n: b"\x01\x08" + n.to_bytes(8, "big")  # noqa: E731
    block = b"\x04" + b"\x09\x02zz" + epoch(7) + b"\x03\x01\x01" + epoch(9)
    got = api_versions.RESPONSE.parse(3, base[:-1] + block)
    assert got.finalized_features_epoch == 9 and got.zk_migration_ready is True
    with pytest.raises(SchemaError):
        api_versions.RESPONSE.parse(3, base[:-1] + b"\x01\x01\x08" + b"\x00" * 4)  # tag past the end


def test_message_version_bounds() -> None:
    with pytest.raises(ValueError):
        fetch.REQUEST.schema(3)
    with pytest.raises(ValueError):
        fetch.REQUEST.schema(19)
    obj, size = produce.REQUEST.parse_with_size(3, produce.REQUEST.build(3, {"acks": 1, "timeout_ms": 1}) + b"xyz")
    assert size == 2 + 2 + 4 + 4 and obj.transactional_id is None and obj.topic_data == []


@pytest.mark.parametrize("msg,v", [pytest.param(m, v, id=f"{m.name}-v{v}") for m in all_messages()
                                   for v in range(m.min_version, m.max_version + 1)])
def test_every_message_version_round_trips(msg, v) -> None:
    """Self-consistency of every definition, including those no oracle covers (control.py)."""
    @settings(FAST, max_examples=3)
    @given(message_strategy(msg, v))
    def run(tree):
        data = msg.build(v, tree)
        obj, size = msg.parse_with_size(v, data + b"trailing")
        assert size == len(data)
        assert plain(obj) == complete(msg.fields, tree, v)
        assert msg.build(v, obj) == data

    run()
