"""KRaft metadata records: Kafka's ApiMessageAndVersion framing, checked against bytes written
out by hand from the record JSONs (uvarint frame version 1, uvarint type, uvarint version,
then the flexible body: compact strings/arrays, a tagged-field block)."""

from __future__ import annotations

import uuid

import pytest

from protocol.messages.metadata_records import (RECORDS, WRITE_VERSIONS, MetadataRecordError, MetadataRecordType as T,
                                                decode_record, encode_record, make_record)

TOPIC_ID = uuid.UUID(bytes=bytes(range(16)))
INCARNATION = uuid.UUID(bytes=bytes(range(16, 32)))
UUID_HEX = bytes(range(16)).hex()

GOLDEN = [
    pytest.param(make_record(T.TOPIC, name="foo", topic_id=TOPIC_ID),
                 "01 02 00" + "04 666f6f" + UUID_HEX + "00", id="TopicRecord"),
    pytest.param(make_record(T.PARTITION_CHANGE, partition_id=0, topic_id=TOPIC_ID, isr=[1, 2], leader=1),
                 "01 05 00" + "00000000" + UUID_HEX
                 + "02" + "00 09 03 00000001 00000002" + "01 04 00000001", id="PartitionChangeRecord-isr-and-leader"),
    pytest.param(make_record(T.PARTITION_CHANGE, partition_id=3, topic_id=TOPIC_ID, leader=-1),
                 "01 05 00" + "00000003" + UUID_HEX + "01" + "01 04 ffffffff", id="PartitionChangeRecord-offline"),
    pytest.param(make_record(T.PARTITION, partition_id=1, topic_id=TOPIC_ID, replicas=[2, 3], isr=[2, 3], leader=2,
                             leader_epoch=0, partition_epoch=0),
                 "01 03 00" + "00000001" + UUID_HEX + "03 00000002 00000003" + "03 00000002 00000003"
                 + "01" + "01" + "00000002" + "00000000" + "00000000" + "00", id="PartitionRecord"),
    pytest.param(make_record(T.REGISTER_BROKER, broker_id=1, incarnation_id=INCARNATION, broker_epoch=42,
                             end_points=[{"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": 0}],
                             rack=None),
                 "01 00 01" + "00000001" + bytes(range(16, 32)).hex() + "000000000000002a"
                 + "02" + "0a" + b"PLAINTEXT".hex() + "02 68" + "2384" + "0000" + "00"
                 + "01" + "00" + "01" + "00" + "00", id="RegisterBrokerRecord-v1"),
    pytest.param(make_record(T.BROKER_REGISTRATION_CHANGE, broker_id=2, broker_epoch=7, in_controlled_shutdown=1),
                 "01 11 01" + "00000002" + "0000000000000007" + "01" + "01 01 01", id="BrokerRegistrationChangeRecord"),
    pytest.param(make_record(T.FENCE_BROKER, id=5, epoch=300),
                 "01 07 00" + "00000005" + "000000000000012c" + "00", id="FenceBrokerRecord"),
    pytest.param(make_record(T.CONFIG, resource_type=2, resource_name="t", name="retention.ms", value=None),
                 "01 04 00" + "02" + "02 74" + "0d" + b"retention.ms".hex() + "00" + "00", id="ConfigRecord-delete"),
    pytest.param(make_record(T.PRODUCER_IDS, broker_id=1, broker_epoch=10, next_producer_id=1000),
                 "01 0f 00" + "00000001" + "000000000000000a" + "00000000000003e8" + "00", id="ProducerIdsRecord"),
    pytest.param(make_record(T.FEATURE_LEVEL, name="metadata.version", feature_level=7),
                 "01 0c 00" + "11" + b"metadata.version".hex() + "0007" + "00", id="FeatureLevelRecord"),
    pytest.param(make_record(T.NO_OP), "01 14 00 00", id="NoOpRecord"),
]


@pytest.mark.parametrize("record,hex_bytes", GOLDEN)
def test_golden_bytes(record, hex_bytes):
    expected = bytes.fromhex(hex_bytes.replace(" ", ""))
    assert encode_record(record) == expected
    assert decode_record(expected) == record


@pytest.mark.parametrize("record,hex_bytes", GOLDEN)
def test_truncated_and_trailing_bytes_are_rejected(record, hex_bytes):
    data = bytes.fromhex(hex_bytes.replace(" ", ""))
    for cut in range(len(data)):
        with pytest.raises(MetadataRecordError):
            decode_record(data[:cut])
    with pytest.raises(MetadataRecordError, match="follow"):
        decode_record(data + b"\x00")


def test_unknown_frame_type_and_version():
    with pytest.raises(MetadataRecordError, match="frame version 2"):
        decode_record(b"\x02\x14\x00\x00")
    with pytest.raises(MetadataRecordError, match="record type 99"):
        decode_record(b"\x01\x63\x00\x00")
    with pytest.raises(MetadataRecordError, match="outside"):
        decode_record(b"\x01\x14\x05\x00")


def test_partition_change_defaults_mean_no_change():
    record = make_record(T.PARTITION_CHANGE, partition_id=0, topic_id=TOPIC_ID)
    assert record.isr is None and record.leader == -2 and record.replicas is None
    assert encode_record(record) == bytes.fromhex("010500" + "00000000" + UUID_HEX + "00")


def test_make_record_rejects_unknown_fields():
    with pytest.raises(TypeError, match="no field"):
        make_record(T.TOPIC, nmae="x")


def test_every_record_type_has_a_write_version_it_defines():
    assert set(WRITE_VERSIONS) == set(RECORDS) == {t.value for t in T}
    for key, version in WRITE_VERSIONS.items():
        assert RECORDS[key].min_version <= version <= RECORDS[key].max_version


@pytest.mark.parametrize("record_type", sorted(RECORDS))
def test_made_records_hold_every_field_at_its_default_and_share_no_default(record_type) -> None:
    """make_record works out each (type, version)'s defaults once: a record still holds every
    field of the schema (those of other versions too) at the schema's default, and no two
    records share a default list or struct."""
    message = RECORDS[record_type]
    for v in range(message.min_version, message.max_version + 1):
        a, b = make_record(record_type, v), make_record(record_type, v)
        expected = {}
        for f in message.fields:
            if f.active(v):
                expected[f.name] = f.default_value(v)
        for f in message.fields:
            expected.setdefault(f.name, f.default_value(v))
        assert dict(a.data) == expected
        for name, value in a.data.items():
            if isinstance(value, (list, dict)):
                assert value is not b.data[name]
