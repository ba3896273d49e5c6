"""ConsumerProtocolSubscription and ConsumerProtocolAssignment: what consumers put in the
opaque member metadata (JoinGroup) and assignment (SyncGroup) bytes of groups with protocol
type "consumer", with their codecs.

Each is an int16 version followed by the struct. As Kafka's ConsumerProtocol does, a version
newer than the newest known is read with the newest layout (new versions only append
fields), and a negative version is an error. The broker reads them to know a group's
subscribed topics (OffsetDelete, offset expiry) and to describe groups.
"""

from __future__ import annotations

import struct
from typing import Any

from construct import Container

from ..schema import Buffer, Field as F, Message, SchemaError

PROTOCOL_TYPE = "consumer"

SUBSCRIPTION = Message("ConsumerProtocolSubscription", None, "0-3", "none", [
    F("topics", "[]string"),
    F("user_data", "bytes", nullable="0+", default="null"),
    F("owned_partitions", "[]TopicPartition", "1+", fields=[
        F("topic", "string", "1+"),
        F("partitions", "[]int32", "1+"),
    ]),
    F("generation_id", "int32", "2+", default=-1),
    F("rack_id", "string", "3+", nullable="3+", default="null"),
])

ASSIGNMENT = Message("ConsumerProtocolAssignment", None, "0-3", "none", [
    F("assigned_partitions", "[]TopicPartition", fields=[
        F("topic", "string"),
        F("partitions", "[]int32"),
    ]),
    F("user_data", "bytes", nullable="0+", default="null"),
])

_VERSION = struct.Struct(">h")


def _read(msg: Message, data: Buffer) -> Container:
    if len(data) < 2:
        raise SchemaError(f"{msg.name}: {len(data)} bytes, too short for a version")
    version = _VERSION.unpack_from(data, 0)[0]
    if version < 0:
        raise SchemaError(f"{msg.name}: negative version {version}")
    value = msg.parse(min(version, msg.max_version), data, 2)
    value.version = version
    return value


def encode_subscription(value: Any, version: int = SUBSCRIPTION.max_version) -> bytes:
    return _VERSION.pack(version) + SUBSCRIPTION.build(version, value)


def decode_subscription(data: Buffer) -> Container:
    """topics, user_data, owned_partitions, generation_id, rack_id and the ``version`` read."""
    return _read(SUBSCRIPTION, data)


def subscribed_topics(data: Buffer) -> list[str]:
    """Only the topics, read with the v0 layout every version starts with (what Kafka's
    coordinator does, so it depends on no particular newer version)."""
    if len(data) < 2 or _VERSION.unpack_from(data, 0)[0] < 0:
        raise SchemaError("ConsumerProtocolSubscription: bad version")
    topics: list[str] = SUBSCRIPTION.parse(0, data, 2).topics
    return topics


def encode_assignment(value: Any, version: int = ASSIGNMENT.max_version) -> bytes:
    return _VERSION.pack(version) + ASSIGNMENT.build(version, value)


def decode_assignment(data: Buffer) -> Container:
    """assigned_partitions, user_data and the ``version`` read."""
    return _read(ASSIGNMENT, data)
