"""Kafka wire error codes, and one exception class per code that crosses the wire.

Codes come from Kafka's ``Errors.java``; names may change there but codes never do.
Only errors that travel in responses belong here. Layers below the broker raise these
(storage raises ``CorruptRecordError`` etc.), and whoever builds a response puts
``exc.error_code`` into the partition's slot.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108


# Codes the Java client treats as retriable (its exception extends RetriableException).
_RETRIABLE = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.NOT_CONTROLLER,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.UNSTABLE_OFFSET_COMMIT, ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.UNKNOWN_TOPIC_ID,
})

# Codes after which a client should refresh its metadata.
_INVALID_METADATA = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_ID,
})


class KafkaError(Exception):
    """Base of every error that maps to a wire code."""

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.error_code.name)

    @property
    def retriable(self) -> bool:
        return self.error_code in _RETRIABLE

    @property
    def invalid_metadata(self) -> bool:
        return self.error_code in _INVALID_METADATA

    @property
    def message(self) -> str:
        return str(self)


_BY_CODE: dict[int, type[KafkaError]] = {}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.lower().split("_"))


def _make_classes() -> None:
    for code in ErrorCode:
        if code is ErrorCode.NONE:
            continue
        cls_name = _camel(code.name) + ("" if code.name.endswith(("ERROR", "EXCEPTION")) else "Error")
        cls_name = cls_name.replace("Exception", "Error")
        cls = type(cls_name, (KafkaError,), {"error_code": code, "__module__": __name__})
        globals()[cls_name] = cls
        _BY_CODE[int(code)] = cls


_make_classes()
UnknownServerError: type[KafkaError] = _BY_CODE[-1]


def for_code(code: int) -> type[KafkaError]:
    """The exception class for a wire code (UnknownServerError for codes we don't know)."""
    return _BY_CODE.get(code, UnknownServerError)


def error_for(code: int, message: str = "") -> KafkaError:
    return for_code(code)(message)


# Explicit names for the classes other modules import (also reachable via for_code).
CorruptMessageError = _BY_CODE[ErrorCode.CORRUPT_MESSAGE]
CorruptRecordError = CorruptMessageError
OffsetOutOfRangeError = _BY_CODE[ErrorCode.OFFSET_OUT_OF_RANGE]
MessageTooLargeError = _BY_CODE[ErrorCode.MESSAGE_TOO_LARGE]
RecordListTooLargeError = _BY_CODE[ErrorCode.RECORD_LIST_TOO_LARGE]
InvalidRecordError = _BY_CODE[ErrorCode.INVALID_RECORD]
KafkaStorageError = _BY_CODE[ErrorCode.KAFKA_STORAGE_ERROR]
UnknownTopicOrPartitionError = _BY_CODE[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
NotLeaderOrFollowerError = _BY_CODE[ErrorCode.NOT_LEADER_OR_FOLLOWER]
UnsupportedVersionError = _BY_CODE[ErrorCode.UNSUPPORTED_VERSION]
InvalidRequestError = _BY_CODE[ErrorCode.INVALID_REQUEST]
InvalidTimestampError = _BY_CODE[ErrorCode.INVALID_TIMESTAMP]
OutOfOrderSequenceNumberError = _BY_CODE[ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
InvalidProducerEpochError = _BY_CODE[ErrorCode.INVALID_PRODUCER_EPOCH]
UnknownProducerIdError = _BY_CODE[ErrorCode.UNKNOWN_PRODUCER_ID]
FencedLeaderEpochError = _BY_CODE[ErrorCode.FENCED_LEADER_EPOCH]
UnknownLeaderEpochError = _BY_CODE[ErrorCode.UNKNOWN_LEADER_EPOCH]
NotEnoughReplicasError = _BY_CODE[ErrorCode.NOT_ENOUGH_REPLICAS]
NotEnoughReplicasAfterAppendError = _BY_CODE[ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]
RequestTimedOutError = _BY_CODE[ErrorCode.REQUEST_TIMED_OUT]
InvalidTopicError = _BY_CODE[ErrorCode.INVALID_TOPIC_EXCEPTION]
TopicAlreadyExistsError = _BY_CODE[ErrorCode.TOPIC_ALREADY_EXISTS]
StaleControllerEpochError = _BY_CODE[ErrorCode.STALE_CONTROLLER_EPOCH]


class RemoteProtocolError(Exception):
    """The peer sent bytes we cannot make sense of (h11's sense).

    ``error_code`` is what to answer when the header parsed; ``None`` means close the connection.
    """

    def __init__(self, message: str, error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class LocalProtocolError(Exception):
    """We were asked to encode something the protocol cannot carry (a bug on our side)."""
