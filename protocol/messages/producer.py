"""InitProducerId (22)."""

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
