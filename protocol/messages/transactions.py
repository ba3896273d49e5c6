"""Transactions (KIP-98, KIP-447, KIP-664, KIP-890): the producer's AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26) and TxnOffsetCommit (28); the coordinator's WriteTxnMarkers
(27) to partition leaders; the admin APIs DescribeProducers (61), DescribeTransactions (65)
and ListTransactions (66); and the records of ``__transaction_state`` (TransactionLogKey /
TransactionLogValue), field for field as Kafka's JSON."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..schema import Buffer, Field as F, Message, SchemaError

_TOPIC = [
    F("name", "string"),
    F("partitions", "[]int32"),
]

ADD_PARTITIONS_TO_TXN_REQUEST = Message("AddPartitionsToTxnRequest", 24, "0-5", "3+", [
    F("transactions", "[]AddPartitionsToTxnTransaction", "4+", fields=[
        F("transactional_id", "string", "4+"),
        F("producer_id", "int64", "4+"),
        F("producer_epoch", "int16", "4+"),
        F("verify_only", "bool", "4+", default=False),
        F("topics", "[]AddPartitionsToTxnTopic", "4+", fields=_TOPIC),
    ]),
    F("v3_and_below_transactional_id", "string", "0-3"),
    F("v3_and_below_producer_id", "int64", "0-3"),
    F("v3_and_below_producer_epoch", "int16", "0-3"),
    F("v3_and_below_topics", "[]AddPartitionsToTxnTopic", "0-3", fields=_TOPIC),
])

_TOPIC_RESULT = [
    F("name", "string"),
    F("results_by_partition", "[]AddPartitionsToTxnPartitionResult", fields=[
        F("partition_index", "int32"),
        F("partition_error_code", "int16"),
    ]),
]

ADD_PARTITIONS_TO_TXN_RESPONSE = Message("AddPartitionsToTxnResponse", 24, "0-5", "3+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16", "4+"),
    F("results_by_transaction", "[]AddPartitionsToTxnResult", "4+", fields=[
        F("transactional_id", "string", "4+"),
        F("topic_results", "[]AddPartitionsToTxnTopicResult", "4+", fields=_TOPIC_RESULT),
    ]),
    F("results_by_topic_v3_and_below", "[]AddPartitionsToTxnTopicResult", "0-3", fields=_TOPIC_RESULT),
])

ADD_OFFSETS_TO_TXN_REQUEST = Message("AddOffsetsToTxnRequest", 25, "0-4", "3+", [
    F("transactional_id", "string"),
    F("producer_id", "int64"),
    F("producer_epoch", "int16"),
    F("group_id", "string"),
])

ADD_OFFSETS_TO_TXN_RESPONSE = Message("AddOffsetsToTxnResponse", 25, "0-4", "3+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
])

END_TXN_REQUEST = Message("EndTxnRequest", 26, "0-5", "3+", [
    F("transactional_id", "string"),
    F("producer_id", "int64"),
    F("producer_epoch", "int16"),
    F("committed", "bool"),
])

END_TXN_RESPONSE = Message("EndTxnResponse", 26, "0-5", "3+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("producer_id", "int64", "5+", default=-1),
    F("producer_epoch", "int16", "5+", default=-1),
])

WRITE_TXN_MARKERS_REQUEST = Message("WriteTxnMarkersRequest", 27, "1-2", "1+", [
    F("markers", "[]WritableTxnMarker", fields=[
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("transaction_result", "bool"),
        F("topics", "[]WritableTxnMarkerTopic", fields=[
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ]),
        F("coordinator_epoch", "int32"),
        F("transaction_version", "int8", "2+", default=0),
    ]),
])

WRITE_TXN_MARKERS_RESPONSE = Message("WriteTxnMarkersResponse", 27, "1-2", "1+", [
    F("markers", "[]WritableTxnMarkerResult", fields=[
        F("producer_id", "int64"),
        F("topics", "[]WritableTxnMarkerTopicResult", fields=[
            F("name", "string"),
            F("partitions", "[]WritableTxnMarkerPartitionResult", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ]),
])

TXN_OFFSET_COMMIT_REQUEST = Message("TxnOffsetCommitRequest", 28, "0-5", "3+", [
    F("transactional_id", "string"),
    F("group_id", "string"),
    F("producer_id", "int64"),
    F("producer_epoch", "int16"),
    F("generation_id", "int32", "3+", default=-1),
    F("member_id", "string", "3+", default=""),
    F("group_instance_id", "string", "3+", nullable="3+", default="null"),
    F("topics", "[]TxnOffsetCommitRequestTopic", fields=[
        F("name", "string"),
        F("partitions", "[]TxnOffsetCommitRequestPartition", fields=[
            F("partition_index", "int32"),
            F("committed_offset", "int64"),
            F("committed_leader_epoch", "int32", "2+", default=-1),
            F("committed_metadata", "string", nullable="0+"),
        ]),
    ]),
])

TXN_OFFSET_COMMIT_RESPONSE = Message("TxnOffsetCommitResponse", 28, "0-5", "3+", [
    F("throttle_time_ms", "int32"),
    F("topics", "[]TxnOffsetCommitResponseTopic", fields=[
        F("name", "string"),
        F("partitions", "[]TxnOffsetCommitResponsePartition", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
        ]),
    ]),
])

DESCRIBE_PRODUCERS_REQUEST = Message("DescribeProducersRequest", 61, "0", "0+", [
    F("topics", "[]TopicRequest", fields=[
        F("name", "string"),
        F("partition_indexes", "[]int32"),
    ]),
])

DESCRIBE_PRODUCERS_RESPONSE = Message("DescribeProducersResponse", 61, "0", "0+", [
    F("throttle_time_ms", "int32"),
    F("topics", "[]TopicResponse", fields=[
        F("name", "string"),
        F("partitions", "[]PartitionResponse", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default="null"),
            F("active_producers", "[]ProducerState", fields=[
                F("producer_id", "int64"),
                F("producer_epoch", "int32"),
                F("last_sequence", "int32", default=-1),
                F("last_timestamp", "int64", default=-1),
                F("coordinator_epoch", "int32"),
                F("current_txn_start_offset", "int64", default=-1),
            ]),
        ]),
    ]),
])

DESCRIBE_TRANSACTIONS_REQUEST = Message("DescribeTransactionsRequest", 65, "0", "0+", [
    F("transactional_ids", "[]string"),
])

DESCRIBE_TRANSACTIONS_RESPONSE = Message("DescribeTransactionsResponse", 65, "0", "0+", [
    F("throttle_time_ms", "int32"),
    F("transaction_states", "[]TransactionState", fields=[
        F("error_code", "int16"),
        F("transactional_id", "string"),
        F("transaction_state", "string"),
        F("transaction_timeout_ms", "int32"),
        F("transaction_start_time_ms", "int64"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("topics", "[]TopicData", fields=[
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
    ]),
])

LIST_TRANSACTIONS_REQUEST = Message("ListTransactionsRequest", 66, "0-2", "0+", [
    F("state_filters", "[]string"),
    F("producer_id_filters", "[]int64"),
    F("duration_filter", "int64", "1+", default=-1),
    F("transactional_id_pattern", "string", "2+", nullable="2+", default="null"),
])

LIST_TRANSACTIONS_RESPONSE = Message("ListTransactionsResponse", 66, "0-2", "0+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("unknown_state_filters", "[]string"),
    F("transaction_states", "[]TransactionState", fields=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("transaction_state", "string"),
    ]),
])

# -- __transaction_state records ------------------------------------------------------------
# Key: int16 version 0, then TransactionLogKey. Value: int16 version, then TransactionLogValue
# (kbroker writes v0, as Kafka does without transaction version 2; v1, flexible, reads too).
# A null value is a tombstone: the transactional id expired.

TRANSACTION_LOG_KEY = Message("TransactionLogKey", None, "0", "none", [
    F("transactional_id", "string"),
])

TRANSACTION_LOG_VALUE = Message("TransactionLogValue", None, "0-1", "1+", [
    F("producer_id", "int64"),
    F("previous_producer_id", "int64", "1+", tag=0, tagged="1+", default=-1),
    F("next_producer_id", "int64", "1+", tag=1, tagged="1+", default=-1),
    F("producer_epoch", "int16"),
    F("transaction_timeout_ms", "int32"),
    F("transaction_status", "int8"),
    F("transaction_partitions", "[]PartitionsSchema", nullable="0+", fields=[
        F("topic", "string"),
        F("partition_ids", "[]int32"),
    ]),
    F("transaction_last_update_timestamp_ms", "int64"),
    F("transaction_start_timestamp_ms", "int64"),
    F("client_transaction_version", "int16", "1+", tag=2, tagged="1+", default=0),
])

_VERSION = struct.Struct(">h")
TRANSACTION_LOG_VALUE_VERSION = 0


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int


def transaction_log_key(transactional_id: str) -> bytes:
    return _VERSION.pack(0) + TRANSACTION_LOG_KEY.build(0, {"transactional_id": transactional_id})


def read_transaction_log_key(data: Buffer) -> str:
    if len(data) < 2:
        raise SchemaError("__transaction_state key shorter than its version")
    version = _VERSION.unpack_from(data, 0)[0]
    if version != 0:
        raise SchemaError(f"__transaction_state key version {version}, only 0 is known")
    return str(TRANSACTION_LOG_KEY.parse(0, data, 2).transactional_id)


def transaction_log_value(v: TxnLogValue) -> bytes:
    topics: dict[str, list[int]] = {}
    for topic, partition in v.partitions:
        topics.setdefault(topic, []).append(partition)
    return _VERSION.pack(TRANSACTION_LOG_VALUE_VERSION) + TRANSACTION_LOG_VALUE.build(TRANSACTION_LOG_VALUE_VERSION, {
        "producer_id": v.producer_id, "producer_epoch": v.producer_epoch, "transaction_timeout_ms": v.timeout_ms,
        "transaction_status": v.status,
        "transaction_partitions": [{"topic": t, "partition_ids": ps} for t, ps in topics.items()],
        "transaction_last_update_timestamp_ms": v.last_update_ms, "transaction_start_timestamp_ms": v.start_ms})


def read_transaction_log_value(data: Buffer) -> TxnLogValue:
    if len(data) < 2:
        raise SchemaError("__transaction_state value shorter than its version")
    version = _VERSION.unpack_from(data, 0)[0]
    if not TRANSACTION_LOG_VALUE.min_version <= version <= TRANSACTION_LOG_VALUE.max_version:
        raise SchemaError(f"__transaction_state value version {version} is not known")
    c = TRANSACTION_LOG_VALUE.parse(version, data, 2)
    parts = tuple((t.topic, p) for t in (c.transaction_partitions or ()) for p in t.partition_ids)
    return TxnLogValue(c.producer_id, c.producer_epoch, c.transaction_timeout_ms, c.transaction_status, parts,
                       c.transaction_last_update_timestamp_ms, c.transaction_start_timestamp_ms)
