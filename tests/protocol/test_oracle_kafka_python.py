"""Byte for byte against kafka-python 3.0.12, whose ``kafka.protocol`` is generated from the
same Kafka JSON: for every API in APIS and every version of its Message, hypothesis draws a
value, both sides encode it, the bytes must be identical, and each side decodes the other's.
The consumer protocol's Subscription and Assignment (version-prefixed data, not API
messages) are checked the same way, through our codecs.

Versions we advertise (plus Produce 0-2, which kafka-python can still encode) get more
examples; the versions above them, which our Messages define but the broker does not speak
yet (the flexible ones, mostly), are checked with fewer.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings

from kafka.protocol.admin.client_quotas import (AlterClientQuotasRequest, AlterClientQuotasResponse,
                                                DescribeClientQuotasRequest, DescribeClientQuotasResponse)
from kafka.protocol.admin.cluster import (DescribeClusterRequest, DescribeClusterResponse, DescribeLogDirsRequest,
                                          DescribeLogDirsResponse)
from kafka.protocol.admin.acl import (CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
                                      DescribeAclsRequest, DescribeAclsResponse)
from kafka.protocol.admin.configs import (AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest,
                                         DescribeConfigsResponse, IncrementalAlterConfigsRequest,
                                         IncrementalAlterConfigsResponse)
from kafka.protocol.admin.groups import (DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
                                         DescribeGroupsResponse, ListGroupsRequest, ListGroupsResponse)
from kafka.protocol.admin.topics import (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
                                        CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
                                        CreateTopicsResponse, DeleteRecordsRequest, DeleteRecordsResponse,
                                        DeleteTopicsRequest, DeleteTopicsResponse, ElectLeadersRequest,
                                        ElectLeadersResponse, ListPartitionReassignmentsRequest,
                                        ListPartitionReassignmentsResponse)
from kafka.protocol.admin.users import (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
                                        DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.group import (HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
                                           LeaveGroupRequest, LeaveGroupResponse, OffsetCommitRequest, OffsetCommitResponse,
                                           OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse,
                                           SyncGroupRequest, SyncGroupResponse)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.protocol.consumer.offsets import (ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest,
                                             OffsetForLeaderEpochResponse)
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
                                                 AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
                                                 TxnOffsetCommitRequest, TxnOffsetCommitResponse, WriteTxnMarkersRequest,
                                                 WriteTxnMarkersResponse)
from kafka.protocol.admin.transactions import (DescribeProducersRequest, DescribeProducersResponse,
                                               DescribeTransactionsRequest, DescribeTransactionsResponse,
                                               ListTransactionsRequest, ListTransactionsResponse)
from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
                                 SaslHandshakeResponse)
from kafka.protocol.schemas.fields.codecs.types import BitField
from kafka.protocol.schemas.fields.simple import SimpleField
from kafka.protocol.schemas.fields.struct import StructField
from kafka.protocol.schemas.fields.struct_array import StructArrayField

from protocol.api_keys import ApiKey
from protocol.messages import APIS, consumer_protocol, produce
from protocol.schema import Field as F, Message

from .kafka_values import FAST, complete, first_difference, message_strategy, plain, with_absent

KP = {
    ApiKey.PRODUCE: (ProduceRequest, ProduceResponse),
    ApiKey.FETCH: (FetchRequest, FetchResponse),
    ApiKey.LIST_OFFSETS: (ListOffsetsRequest, ListOffsetsResponse),
    ApiKey.METADATA: (MetadataRequest, MetadataResponse),
    ApiKey.FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse),
    ApiKey.API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    ApiKey.SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse),
    ApiKey.SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    ApiKey.CREATE_TOPICS: (CreateTopicsRequest, CreateTopicsResponse),
    ApiKey.DELETE_TOPICS: (DeleteTopicsRequest, DeleteTopicsResponse),
    ApiKey.INIT_PRODUCER_ID: (InitProducerIdRequest, InitProducerIdResponse),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    ApiKey.DESCRIBE_CONFIGS: (DescribeConfigsRequest, DescribeConfigsResponse),
    ApiKey.OFFSET_COMMIT: (OffsetCommitRequest, OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: (OffsetFetchRequest, OffsetFetchResponse),
    ApiKey.JOIN_GROUP: (JoinGroupRequest, JoinGroupResponse),
    ApiKey.HEARTBEAT: (HeartbeatRequest, HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (LeaveGroupRequest, LeaveGroupResponse),
    ApiKey.SYNC_GROUP: (SyncGroupRequest, SyncGroupResponse),
    ApiKey.DESCRIBE_GROUPS: (DescribeGroupsRequest, DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: (ListGroupsRequest, ListGroupsResponse),
    ApiKey.DELETE_GROUPS: (DeleteGroupsRequest, DeleteGroupsResponse),
    ApiKey.OFFSET_DELETE: (OffsetDeleteRequest, OffsetDeleteResponse),
    ApiKey.ALTER_CONFIGS: (AlterConfigsRequest, AlterConfigsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    ApiKey.CREATE_PARTITIONS: (CreatePartitionsRequest, CreatePartitionsResponse),
    ApiKey.ELECT_LEADERS: (ElectLeadersRequest, ElectLeadersResponse),
    ApiKey.DESCRIBE_ACLS: (DescribeAclsRequest, DescribeAclsResponse),
    ApiKey.CREATE_ACLS: (CreateAclsRequest, CreateAclsResponse),
    ApiKey.DELETE_ACLS: (DeleteAclsRequest, DeleteAclsResponse),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
    ApiKey.ADD_PARTITIONS_TO_TXN: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    ApiKey.ADD_OFFSETS_TO_TXN: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    ApiKey.END_TXN: (EndTxnRequest, EndTxnResponse),
    ApiKey.WRITE_TXN_MARKERS: (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    ApiKey.TXN_OFFSET_COMMIT: (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    ApiKey.DESCRIBE_PRODUCERS: (DescribeProducersRequest, DescribeProducersResponse),
    ApiKey.DESCRIBE_TRANSACTIONS: (DescribeTransactionsRequest, DescribeTransactionsResponse),
    ApiKey.LIST_TRANSACTIONS: (ListTransactionsRequest, ListTransactionsResponse),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse),
    ApiKey.DELETE_RECORDS: (DeleteRecordsRequest, DeleteRecordsResponse),
    ApiKey.DESCRIBE_LOG_DIRS: (DescribeLogDirsRequest, DescribeLogDirsResponse),
    ApiKey.DESCRIBE_CLUSTER: (DescribeClusterRequest, DescribeClusterResponse),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (DescribeClientQuotasRequest, DescribeClientQuotasResponse),
    ApiKey.ALTER_CLIENT_QUOTAS: (AlterClientQuotasRequest, AlterClientQuotasResponse),
}

# Broker-internal APIs: kafka-python 3.0.12 dropped their schemas (test_schema_conformance checks
# these against Kafka's JSON instead).
BROKER_INTERNAL = {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN,
                   ApiKey.ALTER_PARTITION, ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT,
                   ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.UNREGISTER_BROKER}

# kafka-python patches MetadataResponse: both *_authorized_operations become a 'bitfield'
# named authorized_operations (a set of bit numbers; INT32_MIN, "not requested", is None).
KP_NAMES = {"cluster_authorized_operations": "authorized_operations",
            "topic_authorized_operations": "authorized_operations"}
INT32_MIN = -(1 << 31)

# ---------------------------------------------------------------------------
# Our value trees <-> kafka-python objects


def _kp_field(kp_struct, name):
    fields = kp_struct.fields
    return fields[name] if name in fields else fields[KP_NAMES[name]]


def _to_kp_value(kf, val, v):
    if val is None:
        return None
    if isinstance(kf, StructArrayField):
        return [to_kp(kf.array_of, item, v) for item in val]
    if isinstance(kf, StructField):
        return to_kp(kf, val, v)
    if isinstance(kf, SimpleField) and kf.type_str == "bitfield":
        bits = BitField.from_32_bit_field(val & 0xFFFFFFFF)
        return None if bits == {31} else bits
    return val


def to_kp(kp_struct, tree, v, cls=None):
    """Our value tree as a kafka-python object (``cls`` for the top level, data classes below)."""
    kwargs = {}
    for name, val in tree.items():
        kf = _kp_field(kp_struct, name)
        kwargs[kf.name] = _to_kp_value(kf, val, v)
    return (cls or kp_struct.data_class)(version=v, **kwargs)


def _from_kp_value(kf, ours_field, val, v):
    if isinstance(kf, StructArrayField):
        return None if val is None else [from_kp(kf.array_of, ours_field.fields, i, v) for i in val]
    if isinstance(kf, StructField):
        if val is None:  # kafka-python's default for an absent tagged struct; ours is a default instance
            return plain(ours_field.default_value(v))
        return from_kp(kf, ours_field.fields, val, v)
    if isinstance(kf, SimpleField) and kf.type_str == "bitfield":
        raw = BitField.to_32_bit_field({31} if val is None else val)
        return raw - (1 << 32) if raw & 0x80000000 else raw
    if isinstance(kf, SimpleField) and kf.type_str == "uuid":
        return uuid.UUID(int=0) if val is None else val
    return plain(val)


def from_kp(kp_struct, fields, obj, v):
    """A decoded kafka-python object as our value tree (fields the version lacks at our defaults)."""
    out = {f.name: _from_kp_value(_kp_field(kp_struct, f.name), f, getattr(obj, _kp_field(kp_struct, f.name).name), v)
           for f in fields if f.active(v)}
    return with_absent(fields, out, v)


def kp_decode(cls, data, v):
    # ApiVersionsResponse.decode falls back to the v0 layout whenever error_code != 0 (KIP-511);
    # here we compare layouts, so decode as the version given.
    return ApiMessage.decode.__func__(cls, bytes(data), version=v)


# ---------------------------------------------------------------------------
# The cases: (api, request or response, version)


def _cases():
    """Every (API, side, version) kafka-python can encode. The rest — the broker-internal APIs
    it dropped and versions outside its classes' ranges — are checked against Kafka's JSON by
    test_schema_conformance, not skipped here."""
    for api in APIS.values():
        if api.key not in KP:
            continue
        msg_lo, msg_hi = api.request.valid
        for side in (0, 1):
            kp_cls = KP[api.key][side]
            for v in range(max(msg_lo, kp_cls.min_version), min(msg_hi, kp_cls.max_version) + 1):
                advertised = api.advertise[0] <= v <= api.advertise[1]
                suffix = "" if advertised else "-beyond-advertised"
                yield pytest.param(api, side, v, advertised, id=f"{(api.request, api.response)[side].name}-v{v}{suffix}")


def check_against_kafka_python(msg, kp_cls, v, tree):
    ours = msg.build(v, tree)
    theirs = bytes(to_kp(kp_cls._struct, tree, v, cls=kp_cls).encode(version=v))
    assert ours == theirs, (f"{msg.name} v{v} encodes differently from kafka-python for {tree!r}\n"
                            + first_difference(ours, theirs))
    expected = complete(msg.fields, tree, v)
    assert plain(msg.parse(v, theirs)) == expected
    assert from_kp(kp_cls._struct, msg.fields, kp_decode(kp_cls, ours, v), v) == expected


@pytest.mark.parametrize("api,side,v,advertised", list(_cases()))
def test_same_bytes_as_kafka_python(api, side, v, advertised) -> None:
    msg = (api.request, api.response)[side]
    kp_cls = KP[api.key][side]

    @settings(FAST, max_examples=FAST.max_examples if advertised else 4)
    @given(message_strategy(msg, v))
    def run(tree):
        check_against_kafka_python(msg, kp_cls, v, tree)

    run()


def test_every_client_api_has_a_kafka_python_class() -> None:
    client_apis = set(APIS) - BROKER_INTERNAL
    assert client_apis <= set(KP) <= set(APIS)
    for key, (req, resp) in KP.items():
        assert req.API_KEY == resp.API_KEY == key


def test_produce_v0_to_v2_are_checked() -> None:
    """Advertised-but-rejected Produce 0-2 still has a layout, and kafka-python can encode it."""
    ids = {p.id for p in _cases()}
    assert {f"{side}-v{v}" for v in range(3) for side in ("ProduceRequest", "ProduceResponse")} <= ids
    assert ProduceRequest.min_version == 0


def test_the_oracle_notices_a_wrong_field() -> None:
    """A Message with one field of the wrong width must make the comparison fail."""
    tree = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x"}]}]}
    check_against_kafka_python(produce.REQUEST, ProduceRequest, 3, tree)
    wrong = Message("ProduceRequest", 0, "0-13", "9+",
                    [F("acks", "int32") if f.name == "acks" else f for f in produce.REQUEST.fields])
    with pytest.raises(AssertionError, match="encodes differently"):
        check_against_kafka_python(wrong, ProduceRequest, 3, tree)


# ---------------------------------------------------------------------------
# The consumer protocol (version-prefixed data, through protocol/messages/consumer_protocol.py)

CONSUMER_PROTOCOL = [
    pytest.param(consumer_protocol.SUBSCRIPTION, ConsumerProtocolSubscription, consumer_protocol.encode_subscription,
                 consumer_protocol.decode_subscription, id="Subscription"),
    pytest.param(consumer_protocol.ASSIGNMENT, ConsumerProtocolAssignment, consumer_protocol.encode_assignment,
                 consumer_protocol.decode_assignment, id="Assignment"),
]


@pytest.mark.parametrize("msg,kp_cls,encode,decode", CONSUMER_PROTOCOL)
@pytest.mark.parametrize("v", range(4))
def test_consumer_protocol_same_bytes_as_kafka_python(msg, kp_cls, encode, decode, v) -> None:
    @settings(FAST)
    @given(message_strategy(msg, v))
    def run(tree):
        ours = encode(tree, v)
        theirs = bytes(to_kp(kp_cls._struct, tree, v, cls=kp_cls).encode(version=v))
        assert ours == theirs, first_difference(ours, theirs)
        expected = complete(msg.fields, tree, v)
        decoded = plain(decode(theirs))
        assert decoded.pop("version") == v
        assert decoded == expected
        assert from_kp(kp_cls._struct, msg.fields, kp_cls.decode(ours), v) == expected

    run()
