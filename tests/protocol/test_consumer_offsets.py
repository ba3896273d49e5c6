"""The ``__consumer_offsets`` record formats and the consumer protocol, in golden bytes.

The expected bytes are written out by hand from Kafka's JSON definitions (OffsetCommitKey/
Value, GroupMetadataKey/Value, ConsumerProtocolSubscription/Assignment): an int16 version,
then the fields of that version in order; non-flexible strings are int16 length + UTF-8,
bytes int32 length, arrays int32 count; flexible versions use uvarint length+1 and end each
struct with a tagged-field count.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from protocol.messages import consumer_offsets as CO, consumer_protocol as CP
from protocol.schema import SchemaError

from .kafka_values import FAST, complete, message_strategy, plain


def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)
def i64(v): return struct.pack(">q", v)
def s16(t): return i16(len(t.encode())) + t.encode()
def b32(b): return i32(len(b)) + b
def cs(t): return bytes([len(t.encode()) + 1]) + t.encode()  # compact string, short
def cb(b): return bytes([len(b) + 1]) + b


# ---------------------------------------------------------------------------
# keys

def test_offset_commit_key_v1_golden() -> None:
    data = CO.offset_commit_key("grp", "orders", 7)
    assert data == i16(1) + s16("grp") + s16("orders") + i32(7)
    assert CO.read_message_key(data) == CO.OffsetKey("grp", "orders", 7)


def test_offset_commit_key_v0_reads_the_same_layout() -> None:
    data = i16(0) + s16("g") + s16("t") + i32(0)
    assert CO.read_message_key(data) == CO.OffsetKey("g", "t", 0)


def test_group_metadata_key_v2_golden() -> None:
    data = CO.group_metadata_key("billing")
    assert data == i16(2) + s16("billing")
    assert CO.read_message_key(data) == CO.GroupMetadataKey("billing")


@pytest.mark.parametrize("version", [3, 4, 100, -1])
def test_unknown_key_versions_are_reported_not_raised(version) -> None:
    assert CO.read_message_key(i16(version) + b"whatever") == CO.UnknownKey(version)


@pytest.mark.parametrize("data", [b"", b"\x00", i16(1) + s16("g")[:2], i16(2) + i16(5) + b"ab"])
def test_truncated_keys_raise(data) -> None:
    with pytest.raises(SchemaError):
        CO.read_message_key(data)


# ---------------------------------------------------------------------------
# offset commit values

def test_offset_commit_value_v3_golden() -> None:
    data = CO.offset_commit_value(42, 7, "meta", 1_700_000_000_000)
    assert data == i16(3) + i64(42) + i32(7) + s16("meta") + i64(1_700_000_000_000)
    v = CO.read_offset_commit_value(data)
    assert (v.version, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp) == (
        3, 42, 7, "meta", 1_700_000_000_000, -1)


def test_offset_commit_value_v1_carries_the_expire_timestamp_and_no_epoch() -> None:
    data = CO.offset_commit_value(5, 9, "", 1000, expire_timestamp=2000)
    assert data == i16(1) + i64(5) + s16("") + i64(1000) + i64(2000)
    v = CO.read_offset_commit_value(data)
    assert (v.version, v.offset, v.leader_epoch, v.commit_timestamp, v.expire_timestamp) == (1, 5, -1, 1000, 2000)


@pytest.mark.parametrize("version", [0, 2])
def test_offset_commit_value_v0_v2_layout(version) -> None:
    data = i16(version) + i64(11) + s16("x") + i64(99)
    v = CO.read_offset_commit_value(data)
    assert (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp) == (11, -1, "x", 99, -1)


def test_offset_commit_value_v4_is_flexible() -> None:
    data = i16(4) + i64(11) + i32(3) + cs("x") + i64(99) + b"\x00"
    v = CO.read_offset_commit_value(data)
    assert (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp) == (11, 3, "x", 99)
    assert CO.OFFSET_COMMIT_VALUE.build(4, v) == data[2:]


@pytest.mark.parametrize("data", [i16(5) + i64(1), i16(-1), i16(3) + i64(1) + i32(0)])
def test_bad_offset_commit_values_raise(data) -> None:
    with pytest.raises(SchemaError):
        CO.read_offset_commit_value(data)


# ---------------------------------------------------------------------------
# group metadata values

MEMBER = {"member_id": "c-1", "group_instance_id": "i-1", "client_id": "c", "client_host": "/10.0.0.1",
          "rebalance_timeout": 300000, "session_timeout": 10000, "subscription": b"\x00\x01", "assignment": b"\x02"}
GROUP = {"protocol_type": "consumer", "generation": 4, "protocol": "range", "leader": "c-1",
         "current_state_timestamp": 1234, "members": [MEMBER]}


def test_group_metadata_value_v3_golden() -> None:
    data = CO.group_metadata_value(GROUP)
    member = (s16("c-1") + s16("i-1") + s16("c") + s16("/10.0.0.1") + i32(300000) + i32(10000)
              + b32(b"\x00\x01") + b32(b"\x02"))
    assert data == i16(3) + s16("consumer") + i32(4) + s16("range") + s16("c-1") + i64(1234) + i32(1) + member
    v = CO.read_group_metadata_value(data)
    assert v.version == 3 and plain(v.members) == [MEMBER]
    assert (v.protocol_type, v.generation, v.protocol, v.leader, v.current_state_timestamp) == ("consumer", 4, "range", "c-1",
                                                                                               1234)


def test_group_metadata_value_v0_has_no_rebalance_timeout_state_time_or_instance_id() -> None:
    member = s16("m") + s16("cid") + s16("h") + i32(6000) + b32(b"s") + b32(b"a")
    data = i16(0) + s16("consumer") + i32(1) + s16("range") + s16("m") + i32(1) + member
    v = CO.read_group_metadata_value(data)
    assert v.current_state_timestamp == -1
    m = v.members[0]
    assert (m.member_id, m.group_instance_id, m.client_id, m.rebalance_timeout, m.session_timeout) == ("m", None, "cid", -1, 6000)


def test_group_metadata_value_of_an_empty_group_has_null_protocol_and_leader() -> None:
    data = CO.group_metadata_value({"protocol_type": "consumer", "generation": 9, "protocol": None, "leader": None,
                                    "current_state_timestamp": 5, "members": []})
    assert data == i16(3) + s16("consumer") + i32(9) + i16(-1) + i16(-1) + i64(5) + i32(0)
    v = CO.read_group_metadata_value(data)
    assert v.protocol is None and v.leader is None and v.members == []


def test_group_metadata_value_v4_is_flexible() -> None:
    member = cs("m") + b"\x00" + cs("c") + cs("h") + i32(1) + i32(2) + cb(b"s") + cb(b"a") + b"\x00"
    data = i16(4) + cs("consumer") + i32(1) + cs("range") + cs("m") + i64(7) + bytes([2]) + member + b"\x00"
    v = CO.read_group_metadata_value(data)
    assert v.members[0].group_instance_id is None and v.members[0].subscription == b"s"
    assert CO.group_metadata_value(v, version=4) == data


@FAST
@given(message_strategy(CO.GROUP_METADATA_VALUE, 3))
def test_group_metadata_value_round_trips(tree) -> None:
    assert plain(CO.read_group_metadata_value(CO.group_metadata_value(tree))) == dict(
        complete(CO.GROUP_METADATA_VALUE.fields, tree, 3), version=3)


@pytest.mark.parametrize("version", [5, -1])
def test_unknown_group_metadata_value_versions_raise(version) -> None:
    with pytest.raises(SchemaError):
        CO.read_group_metadata_value(i16(version) + CO.group_metadata_value(GROUP)[2:])


def test_every_truncation_of_a_group_value_raises() -> None:
    data = CO.group_metadata_value(GROUP)
    for n in range(len(data)):
        with pytest.raises(SchemaError):
            CO.read_group_metadata_value(data[:n])


# ---------------------------------------------------------------------------
# consumer protocol

def test_subscription_v0_golden() -> None:
    data = CP.encode_subscription({"topics": ["a", "bb"], "user_data": None}, 0)
    assert data == i16(0) + i32(2) + s16("a") + s16("bb") + i32(-1)
    assert plain(CP.decode_subscription(data)) == {"topics": ["a", "bb"], "user_data": None, "owned_partitions": [],
                                                   "generation_id": -1, "rack_id": None, "version": 0}


def test_subscription_v3_golden() -> None:
    value = {"topics": ["t"], "user_data": b"u", "owned_partitions": [{"topic": "t", "partitions": [0, 2]}],
             "generation_id": 5, "rack_id": "r1"}
    data = CP.encode_subscription(value, 3)
    assert data == (i16(3) + i32(1) + s16("t") + b32(b"u") + i32(1) + s16("t") + i32(2) + i32(0) + i32(2) + i32(5)
                    + s16("r1"))
    assert CP.subscribed_topics(data) == ["t"]


def test_a_newer_subscription_version_reads_with_the_newest_layout() -> None:
    data = CP.encode_subscription({"topics": ["t"], "user_data": None, "generation_id": 1, "rack_id": None}, 3)
    newer = i16(9) + data[2:] + b"future fields"
    v = CP.decode_subscription(newer)
    assert v.version == 9 and v.topics == ["t"] and v.generation_id == 1
    assert CP.subscribed_topics(newer) == ["t"]


def test_assignment_golden() -> None:
    data = CP.encode_assignment({"assigned_partitions": [{"topic": "orders", "partitions": [1, 3]}], "user_data": None}, 0)
    assert data == i16(0) + i32(1) + s16("orders") + i32(2) + i32(1) + i32(3) + i32(-1)
    v = CP.decode_assignment(data)
    assert plain(v.assigned_partitions) == [{"topic": "orders", "partitions": [1, 3]}]


@pytest.mark.parametrize("data", [b"", b"\x00", i16(-1) + i32(0), i16(0) + i32(1)])
def test_bad_consumer_protocol_bytes_raise(data) -> None:
    with pytest.raises(SchemaError):
        CP.decode_subscription(data)
    with pytest.raises(SchemaError):
        CP.subscribed_topics(data)


@given(st.integers(0, 3), st.integers(-2**63, 2**63 - 1), st.integers(-2**31, 2**31 - 1), st.text(max_size=20),
       st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1))
def test_the_hand_read_offset_commit_values_match_the_schema(version, offset, epoch, metadata, commit_ts, expire_ts):
    """Loading reads OffsetCommitValue v0-3 by hand: the same values as the construct schema."""
    value = {"offset": offset, "leader_epoch": epoch, "metadata": metadata, "commit_timestamp": commit_ts,
             "expire_timestamp": expire_ts}
    data = i16(version) + CO.OFFSET_COMMIT_VALUE.build(version, value)
    fast = CO.read_offset_commit_value(data)
    slow = CO.OFFSET_COMMIT_VALUE.parse(version, data, 2)
    for name in ("offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp"):
        assert fast[name] == slow[name], name
    for cut in range(2, len(data)):
        with pytest.raises(SchemaError):
            CO.read_offset_commit_value(data[:cut])


@given(st.integers(0, 1), st.text(max_size=30), st.text(max_size=30), st.integers(-2**31, 2**31 - 1))
def test_the_hand_read_offset_commit_keys_match_the_schema(version, group, topic, partition):
    data = i16(version) + CO.OFFSET_COMMIT_KEY.build(version, {"group": group, "topic": topic, "partition": partition})
    assert CO.read_message_key(data) == CO.OffsetKey(group, topic, partition)


@given(st.text(max_size=30), st.text(max_size=30), st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1),
       st.integers(-2**31, 2**31 - 1), st.text(max_size=20), st.integers(-2**63, 2**63 - 1),
       st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)))
def test_the_hand_written_offset_records_are_the_schemas_bytes(group, topic, partition, offset, epoch, metadata,
                                                               commit_ts, expire_ts):
    assert CO.offset_commit_key(group, topic, partition) == i16(1) + CO.OFFSET_COMMIT_KEY.build(
        1, {"group": group, "topic": topic, "partition": partition})
    version = 3 if expire_ts is None else 1
    assert CO.offset_commit_value(offset, epoch, metadata, commit_ts, expire_ts) == i16(version) + \
        CO.OFFSET_COMMIT_VALUE.build(version, {"offset": offset, "leader_epoch": epoch, "metadata": metadata,
                                               "commit_timestamp": commit_ts,
                                               "expire_timestamp": -1 if expire_ts is None else expire_ts})
