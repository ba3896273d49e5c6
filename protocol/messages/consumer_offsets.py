"""The record formats of ``__consumer_offsets``: keys and values as Kafka's group coordinator
writes them, with their codecs.

Every key and value is an int16 version followed by the struct of that version. The key's
version says what the record is: 0 and 1 an offset commit (OffsetCommitKey: group, topic,
partition), 2 a group's metadata (GroupMetadataKey: group). A null value is a tombstone: the
offset or the group is gone. Kafka writes OffsetCommitKey v1, GroupMetadataKey v2,
OffsetCommitValue v3 (v1 when the commit carries an explicit expire timestamp, OffsetCommit
v2-4's retention_time_ms) and GroupMetadataValue v3; every version up to 4 (flexible) reads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Union

from construct import Container

from ..schema import Buffer, Field as F, Message, SchemaError

OFFSET_COMMIT_KEY = Message("OffsetCommitKey", None, "0-1", "none", [
    F("group", "string", "0-1"),
    F("topic", "string", "0-1"),
    F("partition", "int32", "0-1"),
])

OFFSET_COMMIT_VALUE = Message("OffsetCommitValue", None, "0-4", "4+", [
    F("offset", "int64"),
    F("leader_epoch", "int32", "3+", default=-1),
    F("metadata", "string"),
    F("commit_timestamp", "int64"),
    F("expire_timestamp", "int64", "1", default=-1),
])

GROUP_METADATA_KEY = Message("GroupMetadataKey", None, "2", "none", [
    F("group", "string", "2"),
])

GROUP_METADATA_VALUE = Message("GroupMetadataValue", None, "0-4", "4+", [
    F("protocol_type", "string"),
    F("generation", "int32"),
    F("protocol", "string", nullable="0+"),
    F("leader", "string", nullable="0+"),
    F("current_state_timestamp", "int64", "2+", default=-1),
    F("members", "[]MemberMetadata", fields=[
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default="null"),
        F("client_id", "string"),
        F("client_host", "string"),
        F("rebalance_timeout", "int32", "1+", default=-1),
        F("session_timeout", "int32"),
        F("subscription", "bytes"),
        F("assignment", "bytes"),
    ]),
])

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3          # no explicit expire timestamp
OFFSET_COMMIT_VALUE_EXPIRING_VERSION = 1  # the one version with expire_timestamp
GROUP_METADATA_VALUE_VERSION = 3

_VERSION = struct.Struct(">h")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Reader:
    """A cursor over the non-flexible layouts of the hot records (offset commit keys and
    values: a coordinator loading a partition reads one of each per commit): the same bytes
    the construct schemas read, without their per-field overhead."""

    __slots__ = ("data", "pos", "what")

    def __init__(self, data: Buffer, what: str) -> None:
        self.data = data
        self.pos = 2
        self.what = what

    def _need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > len(self.data):
            raise SchemaError(f"{self.what}: truncated at byte {pos}")
        self.pos = pos + n
        return pos

    def int32(self) -> int:
        value: int = _I32.unpack_from(self.data, self._need(4))[0]
        return value

    def int64(self) -> int:
        value: int = _I64.unpack_from(self.data, self._need(8))[0]
        return value

    def string(self) -> str:
        (n,) = _I16.unpack_from(self.data, self._need(2))
        if n < 0:
            raise SchemaError(f"{self.what}: null string where one is required")
        pos = self._need(n)
        try:
            return bytes(self.data[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{self.what}: {exc}") from None


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key version this broker does not know (Kafka skips such records with a warning)."""

    version: int


BaseKey = Union[OffsetKey, GroupMetadataKey, UnknownKey]


def _prefixed(msg: Message, version: int, value: Any) -> bytes:
    return _VERSION.pack(version) + msg.build(version, value)


def _read_version(data: Buffer, what: str) -> int:
    if len(data) < 2:
        raise SchemaError(f"{what}: {len(data)} bytes, too short for a version")
    version: int = _VERSION.unpack_from(data, 0)[0]
    return version


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 32767:
        raise SchemaError(f"string of {len(data)} bytes is longer than 32767")
    return _I16.pack(len(data)) + data


# Written by hand (one key and one value per committed partition): the bytes the schemas build.
_KEY_V1 = _VERSION.pack(OFFSET_COMMIT_KEY_VERSION)
_VALUE_V3 = _VERSION.pack(OFFSET_COMMIT_VALUE_VERSION)
_VALUE_V1 = _VERSION.pack(OFFSET_COMMIT_VALUE_EXPIRING_VERSION)


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _KEY_V1 + _string(group) + _string(topic) + _I32.pack(partition)


def group_metadata_key(group: str) -> bytes:
    return _prefixed(GROUP_METADATA_KEY, GROUP_METADATA_KEY_VERSION, {"group": group})


def read_message_key(data: Buffer) -> BaseKey:
    version = _read_version(data, "__consumer_offsets key")
    if OFFSET_COMMIT_KEY.min_version <= version <= OFFSET_COMMIT_KEY.max_version:
        r = _Reader(data, "OffsetCommitKey")  # v0 and v1 share one layout
        return OffsetKey(r.string(), r.string(), r.int32())
    if GROUP_METADATA_KEY.min_version <= version <= GROUP_METADATA_KEY.max_version:
        return GroupMetadataKey(GROUP_METADATA_KEY.parse(version, data, 2).group)
    return UnknownKey(version)


def offset_commit_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int,
                        expire_timestamp: int | None = None) -> bytes:
    """Version 3, or version 1 (which has no leader epoch) when an expire timestamp is given."""
    if expire_timestamp is None:
        return _VALUE_V3 + _I64.pack(offset) + _I32.pack(leader_epoch) + _string(metadata) + _I64.pack(commit_timestamp)
    return _VALUE_V1 + _I64.pack(offset) + _string(metadata) + _I64.pack(commit_timestamp) + _I64.pack(expire_timestamp)


def read_offset_commit_value(data: Buffer) -> Container:
    """The value as a Container (offset, leader_epoch, metadata, commit_timestamp,
    expire_timestamp; fields a version lacks at Kafka's defaults) plus ``version``."""
    version = _read_version(data, "OffsetCommitValue")
    if not OFFSET_COMMIT_VALUE.min_version <= version <= OFFSET_COMMIT_VALUE.max_version:
        raise SchemaError(f"unknown offset commit value version {version}")
    if version <= 3:  # the non-flexible layouts, read by hand (the hot path of loading)
        r = _Reader(data, "OffsetCommitValue")
        offset = r.int64()
        leader_epoch = r.int32() if version >= 3 else -1
        metadata = r.string()
        commit_timestamp = r.int64()
        expire_timestamp = r.int64() if version == 1 else -1
        return Container(offset=offset, leader_epoch=leader_epoch, metadata=metadata, commit_timestamp=commit_timestamp,
                         expire_timestamp=expire_timestamp, version=version)
    value = OFFSET_COMMIT_VALUE.parse(version, data, 2)
    value.version = version
    return value


def group_metadata_value(value: Any, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    """``value`` holds protocol_type, generation, protocol, leader, current_state_timestamp and
    members (member_id, group_instance_id, client_id, client_host, rebalance_timeout,
    session_timeout, subscription, assignment)."""
    return _prefixed(GROUP_METADATA_VALUE, version, value)


def read_group_metadata_value(data: Buffer) -> Container:
    version = _read_version(data, "GroupMetadataValue")
    if not GROUP_METADATA_VALUE.min_version <= version <= GROUP_METADATA_VALUE.max_version:
        raise SchemaError(f"unknown group metadata value version {version}")
    value = GROUP_METADATA_VALUE.parse(version, data, 2)
    value.version = version
    return value
