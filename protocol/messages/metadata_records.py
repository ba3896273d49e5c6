"""KRaft metadata records (Kafka's metadata/src/main/resources/common/metadata/*.json), the
controller's log and snapshot format.

Each record is one ``Message`` whose ``api_key`` is the record type. On disk a record is
framed as Kafka's ``ApiMessageAndVersion`` does it (MetadataRecordSerde): unsigned varint
frame version (1), unsigned varint record type, unsigned varint record version, then the
body in the flexible encoding; each framed record is the value of one Record of a
RecordBatch v2. ``encode_record`` / ``decode_record`` do that framing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from construct import Container

from ..records import decode_uvarint, encode_uvarint
from ..schema import Buffer, Field as F, Message, SchemaError

FRAME_VERSION = 1

_BROKER_ENDPOINT = [
    F("name", "string"),
    F("host", "string"),
    F("port", "uint16"),
    F("security_protocol", "int16"),
]
_BROKER_FEATURE = [
    F("name", "string"),
    F("min_supported_version", "int16"),
    F("max_supported_version", "int16"),
]

REGISTER_BROKER_RECORD = Message("RegisterBrokerRecord", 0, "0-3", "0+", [
    F("broker_id", "int32"),
    F("is_migrating_zk_broker", "bool", "2+", default=False),
    F("incarnation_id", "uuid"),
    F("broker_epoch", "int64"),
    F("end_points", "[]BrokerEndpoint", fields=_BROKER_ENDPOINT),
    F("features", "[]BrokerFeature", fields=_BROKER_FEATURE),
    F("rack", "string", nullable="0+"),
    F("fenced", "bool", default=True),
    F("in_controlled_shutdown", "bool", "1+", default=False),
    F("log_dirs", "[]uuid", "3+", tag=0, tagged="3+"),
])

UNREGISTER_BROKER_RECORD = Message("UnregisterBrokerRecord", 1, "0", "0+", [
    F("broker_id", "int32"),
    F("broker_epoch", "int64"),
])

TOPIC_RECORD = Message("TopicRecord", 2, "0", "0+", [
    F("name", "string"),
    F("topic_id", "uuid"),
])

PARTITION_RECORD = Message("PartitionRecord", 3, "0-2", "0+", [
    F("partition_id", "int32", default=-1),
    F("topic_id", "uuid"),
    F("replicas", "[]int32"),
    F("isr", "[]int32"),
    F("removing_replicas", "[]int32"),
    F("adding_replicas", "[]int32"),
    F("leader", "int32", default=-1),
    F("leader_recovery_state", "int8", tag=0, tagged="0+", default=0),
    F("leader_epoch", "int32", default=-1),
    F("partition_epoch", "int32", default=-1),
    F("directories", "[]uuid", "1+"),
    F("eligible_leader_replicas", "[]int32", "2+", nullable="2+", default="null", tag=1, tagged="2+"),
    F("last_known_elr", "[]int32", "2+", nullable="2+", default="null", tag=2, tagged="2+"),
])

CONFIG_RECORD = Message("ConfigRecord", 4, "0", "0+", [
    F("resource_type", "int8"),
    F("resource_name", "string"),
    F("name", "string"),
    F("value", "string", nullable="0+"),
])

PARTITION_CHANGE_RECORD = Message("PartitionChangeRecord", 5, "0-2", "0+", [
    F("partition_id", "int32", default=-1),
    F("topic_id", "uuid"),
    F("isr", "[]int32", nullable="0+", default="null", tag=0, tagged="0+"),
    F("leader", "int32", default=-2, tag=1, tagged="0+"),
    F("replicas", "[]int32", nullable="0+", default="null", tag=2, tagged="0+"),
    F("removing_replicas", "[]int32", nullable="0+", default="null", tag=3, tagged="0+"),
    F("adding_replicas", "[]int32", nullable="0+", default="null", tag=4, tagged="0+"),
    F("leader_recovery_state", "int8", default=-1, tag=5, tagged="0+"),
    F("directories", "[]uuid", "1+", nullable="1+", default="null", tag=8, tagged="1+"),
    F("eligible_leader_replicas", "[]int32", "2+", nullable="2+", default="null", tag=6, tagged="2+"),
    F("last_known_elr", "[]int32", "2+", nullable="2+", default="null", tag=7, tagged="2+"),
])

FENCE_BROKER_RECORD = Message("FenceBrokerRecord", 7, "0", "0+", [
    F("id", "int32"),
    F("epoch", "int64"),
])

UNFENCE_BROKER_RECORD = Message("UnfenceBrokerRecord", 8, "0", "0+", [
    F("id", "int32"),
    F("epoch", "int64"),
])

REMOVE_TOPIC_RECORD = Message("RemoveTopicRecord", 9, "0", "0+", [
    F("topic_id", "uuid"),
])

FEATURE_LEVEL_RECORD = Message("FeatureLevelRecord", 12, "0", "0+", [
    F("name", "string"),
    F("feature_level", "int16"),
])

PRODUCER_IDS_RECORD = Message("ProducerIdsRecord", 15, "0", "0+", [
    F("broker_id", "int32"),
    F("broker_epoch", "int64", default=-1),
    F("next_producer_id", "int64"),
])

BROKER_REGISTRATION_CHANGE_RECORD = Message("BrokerRegistrationChangeRecord", 17, "0-2", "0+", [
    F("broker_id", "int32"),
    F("broker_epoch", "int64"),
    F("fenced", "int8", tag=0, tagged="0+"),
    F("in_controlled_shutdown", "int8", "1+", tag=1, tagged="1+"),
    F("log_dirs", "[]uuid", "2+", tag=2, tagged="2+"),
])

NO_OP_RECORD = Message("NoOpRecord", 20, "0", "0+", [])

USER_SCRAM_CREDENTIAL_RECORD = Message("UserScramCredentialRecord", 11, "0", "0+", [
    F("name", "string"),
    F("mechanism", "int8"),
    F("salt", "bytes"),
    F("stored_key", "bytes"),
    F("server_key", "bytes"),
    F("iterations", "int32"),
])

ACCESS_CONTROL_ENTRY_RECORD = Message("AccessControlEntryRecord", 18, "0", "0+", [
    F("id", "uuid"),
    F("resource_type", "int8"),
    F("resource_name", "string"),
    F("pattern_type", "int8"),
    F("principal", "string"),
    F("host", "string"),
    F("operation", "int8"),
    F("permission_type", "int8"),
])

REMOVE_ACCESS_CONTROL_ENTRY_RECORD = Message("RemoveAccessControlEntryRecord", 19, "0", "0+", [
    F("id", "uuid"),
])

REMOVE_USER_SCRAM_CREDENTIAL_RECORD = Message("RemoveUserScramCredentialRecord", 22, "0", "0+", [
    F("name", "string"),
    F("mechanism", "int8"),
])


CLIENT_QUOTA_RECORD = Message("ClientQuotaRecord", 14, "0", "0+", [
    F("entity", "[]EntityData", fields=[
        F("entity_type", "string"),
        F("entity_name", "string", nullable="0+"),
    ]),
    F("key", "string"),
    F("value", "float64"),
    F("remove", "bool"),
])


class MetadataRecordType(enum.IntEnum):
    """Kafka's MetadataRecordType numbers (the record's api key)."""

    REGISTER_BROKER = 0
    UNREGISTER_BROKER = 1
    TOPIC = 2
    PARTITION = 3
    CONFIG = 4
    PARTITION_CHANGE = 5
    FENCE_BROKER = 7
    UNFENCE_BROKER = 8
    REMOVE_TOPIC = 9
    USER_SCRAM_CREDENTIAL = 11
    FEATURE_LEVEL = 12
    CLIENT_QUOTA = 14
    PRODUCER_IDS = 15
    BROKER_REGISTRATION_CHANGE = 17
    ACCESS_CONTROL_ENTRY = 18
    REMOVE_ACCESS_CONTROL_ENTRY = 19
    NO_OP = 20
    REMOVE_USER_SCRAM_CREDENTIAL = 22


RECORDS: dict[int, Message] = {int(m.api_key): m for m in (
    REGISTER_BROKER_RECORD, UNREGISTER_BROKER_RECORD, TOPIC_RECORD, PARTITION_RECORD, CONFIG_RECORD,
    PARTITION_CHANGE_RECORD, FENCE_BROKER_RECORD, UNFENCE_BROKER_RECORD, REMOVE_TOPIC_RECORD, FEATURE_LEVEL_RECORD,
    PRODUCER_IDS_RECORD, BROKER_REGISTRATION_CHANGE_RECORD, NO_OP_RECORD, USER_SCRAM_CREDENTIAL_RECORD,
    ACCESS_CONTROL_ENTRY_RECORD, REMOVE_ACCESS_CONTROL_ENTRY_RECORD, REMOVE_USER_SCRAM_CREDENTIAL_RECORD,
    CLIENT_QUOTA_RECORD)
    if m.api_key is not None}

# The version of each record kbroker writes: the layouts of Kafka's metadata.version 3.3-IV3
# (KIP-841: RegisterBrokerRecord v1 and BrokerRegistrationChangeRecord v1 carry
# InControlledShutdown; no directories, no eligible leader replicas).
WRITE_VERSIONS: dict[int, int] = {key: 0 for key in RECORDS}
WRITE_VERSIONS[MetadataRecordType.REGISTER_BROKER] = 1
WRITE_VERSIONS[MetadataRecordType.BROKER_REGISTRATION_CHANGE] = 1


class MetadataRecordError(ValueError):
    """Bytes that are not one framed metadata record."""


@dataclass(frozen=True, slots=True)
class ApiMessageAndVersion:
    """One metadata record: its type, the version it is (or will be) encoded in, and its fields
    (a construct ``Container``: ``record.data.broker_id``)."""

    type: MetadataRecordType
    version: int
    data: Any

    @property
    def message(self) -> Message:
        return RECORDS[self.type]

    def __getattr__(self, name: str) -> Any:
        # Fields read straight off the record: ``record.broker_id`` (only called for names
        # that are no attribute; the guard keeps copy/pickle probes from recursing).
        if name.startswith("_") or name in ("type", "version", "data"):
            raise AttributeError(name)
        try:
            return object.__getattribute__(self, "data")[name]
        except KeyError:
            raise AttributeError(name) from None

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ApiMessageAndVersion) and (self.type, self.version) == (other.type, other.version)
                and _plain(self.data) == _plain(other.data))

    def __hash__(self) -> int:
        return hash((self.type, self.version))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in _plain(self.data).items())
        return f"{RECORDS[self.type].name}(v{self.version}: {fields})"


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items() if not (isinstance(k, str) and k.startswith("_"))}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def _containers(value: Any) -> Any:
    """Nested dicts as construct Containers, so a record made here reads like a decoded one."""
    if isinstance(value, dict):
        return Container((k, _containers(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_containers(v) for v in value]
    return value


def make_record(record_type: int, version: int | None = None, **fields: Any) -> ApiMessageAndVersion:
    """A record of ``record_type`` with ``fields`` set and every other field at its default.
    Unknown field names raise TypeError (a typo must not silently become a default)."""
    v = WRITE_VERSIONS[record_type] if version is None else version
    active, inactive, known = _field_defaults(record_type, v)
    data = Container()
    for name, default in active:
        data[name] = _containers(fields[name]) if name in fields else _containers(default)
    for name, default in inactive:  # fields of other versions at their defaults, as decoding gives them
        data[name] = _containers(default)
    unknown = set(fields) - known
    if unknown:
        raise TypeError(f"{RECORDS[record_type].name} v{v} has no field(s) {', '.join(sorted(unknown))}")
    return ApiMessageAndVersion(MetadataRecordType(record_type), v, data)


# (record type, version) -> ((name, default) of the fields of that version, of the others, the names of the
# first): what make_record fills in, worked out once (a broker's fencing makes tens of thousands of records).
_DEFAULTS: dict[tuple[int, int], tuple[tuple[tuple[str, Any], ...], tuple[tuple[str, Any], ...], frozenset[str]]] = {}


def _field_defaults(record_type: int, v: int
                    ) -> tuple[tuple[tuple[str, Any], ...], tuple[tuple[str, Any], ...], frozenset[str]]:
    found = _DEFAULTS.get((record_type, v))
    if found is None:
        fields = RECORDS[record_type].fields
        active = tuple((f.name, f.default_value(v)) for f in fields if f.active(v))
        names = {name for name, _ in active}
        inactive = []
        for f in fields:
            if f.name not in names:
                names.add(f.name)
                inactive.append((f.name, f.default_value(v)))
        found = _DEFAULTS[(record_type, v)] = (active, tuple(inactive), frozenset(name for name, _ in active))
    return found


def encode_record(record: ApiMessageAndVersion) -> bytes:
    """The ApiMessageAndVersion frame: uvarint frame version, uvarint type, uvarint version, body."""
    body = RECORDS[record.type].build(record.version, record.data)
    return encode_uvarint(FRAME_VERSION) + encode_uvarint(record.type) + encode_uvarint(record.version) + body


def decode_record(data: Buffer) -> ApiMessageAndVersion:
    """Inverse of ``encode_record``. Raises MetadataRecordError for an unknown frame version,
    record type or version, a truncated body, or bytes after the body."""
    buf = memoryview(data)
    try:
        frame, pos = decode_uvarint(buf, 0, 5)
        record_type, pos = decode_uvarint(buf, pos, 5)
        version, pos = decode_uvarint(buf, pos, 5)
    except (IndexError, ValueError) as exc:
        raise MetadataRecordError(f"truncated record frame: {exc}") from None
    if frame != FRAME_VERSION:
        raise MetadataRecordError(f"unknown metadata record frame version {frame}")
    message = RECORDS.get(record_type)
    if message is None:
        raise MetadataRecordError(f"unknown metadata record type {record_type}")
    if not message.min_version <= version <= message.max_version:
        raise MetadataRecordError(f"{message.name} v{version} is outside {message.min_version}-{message.max_version}")
    try:
        body, size = message.parse_with_size(version, buf, pos)
    except SchemaError as exc:
        raise MetadataRecordError(str(exc)) from None
    if pos + size != len(buf):
        raise MetadataRecordError(f"{message.name}: {len(buf) - pos - size} bytes follow the record")
    return ApiMessageAndVersion(MetadataRecordType(record_type), version, body)
