"""InitProducerId (22), and AllocateProducerIds (67): a broker asks the controller for a block of
producer ids."""

from ..schema import Field as F, Message

INIT_PRODUCER_ID_REQUEST = Message("InitProducerIdRequest", 22, "0-6", "2+", [
    F("transactional_id", "string", nullable="0+"),
    F("transaction_timeout_ms", "int32"),
    F("producer_id", "int64", "3+", default=-1),
    F("producer_epoch", "int16", "3+", default=-1),
    F("enable2_pc", "bool", "6+", default=False),
    F("keep_prepared_txn", "bool", "6+", default=False),
])

INIT_PRODUCER_ID_RESPONSE = Message("InitProducerIdResponse", 22, "0-6", "2+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("producer_id", "int64", default=-1),
    F("producer_epoch", "int16"),
    F("ongoing_txn_producer_id", "int64", "6+", default=-1),
    F("ongoing_txn_producer_epoch", "int16", "6+", default=-1),
])

ALLOCATE_PRODUCER_IDS_REQUEST = Message("AllocateProducerIdsRequest", 67, "0", "0+", [
    F("broker_id", "int32"),
    F("broker_epoch", "int64", default=-1),
])

ALLOCATE_PRODUCER_IDS_RESPONSE = Message("AllocateProducerIdsResponse", 67, "0", "0+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("producer_id_start", "int64"),
    F("producer_id_len", "int32"),
])
