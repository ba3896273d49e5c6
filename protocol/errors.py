"""Kafka wire error codes, and one exception class per code that crosses the wire.

Codes come from Kafka's ``Errors.java``; names may change there but codes never do.
Only errors that travel in responses belong here. Layers below the broker raise these
(storage raises ``CorruptRecordError`` etc.), and whoever builds a response puts
``exc.error_code`` into the partition's slot.
"""

from __future__ import annotations

import enum
from typing import ClassVar


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
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115


class KafkaError(Exception):
    """Base of every error that maps to a wire code.

    ``retriable``: Kafka's Java client retries the error (its exception extends
    ``RetriableException``). ``invalid_metadata``: a client refreshes its metadata before it
    retries (kafka-python's and aiokafka's flag of the same name).
    """

    error_code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.error_code.name)

    @property
    def message(self) -> str:
        return str(self)


# One class per ErrorCode except NONE, in code order. Names are the code's in CamelCase with
# an "Error" suffix (a trailing EXCEPTION becomes Error).

class UnknownServerError(KafkaError):
    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(KafkaError):
    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(KafkaError):
    error_code = ErrorCode.CORRUPT_MESSAGE
    retriable = True


class UnknownTopicOrPartitionError(KafkaError):
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    retriable = True
    invalid_metadata = True


class InvalidFetchSizeError(KafkaError):
    error_code = ErrorCode.INVALID_FETCH_SIZE


class LeaderNotAvailableError(KafkaError):
    error_code = ErrorCode.LEADER_NOT_AVAILABLE
    retriable = True
    invalid_metadata = True


class NotLeaderOrFollowerError(KafkaError):
    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True
    invalid_metadata = True


class RequestTimedOutError(KafkaError):
    error_code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True


class BrokerNotAvailableError(KafkaError):
    error_code = ErrorCode.BROKER_NOT_AVAILABLE


class ReplicaNotAvailableError(KafkaError):
    error_code = ErrorCode.REPLICA_NOT_AVAILABLE
    retriable = True
    invalid_metadata = True


class MessageTooLargeError(KafkaError):
    error_code = ErrorCode.MESSAGE_TOO_LARGE


class StaleControllerEpochError(KafkaError):
    error_code = ErrorCode.STALE_CONTROLLER_EPOCH


class OffsetMetadataTooLargeError(KafkaError):
    error_code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class NetworkError(KafkaError):
    error_code = ErrorCode.NETWORK_EXCEPTION
    retriable = True
    invalid_metadata = True


class CoordinatorLoadInProgressError(KafkaError):
    error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    retriable = True


class CoordinatorNotAvailableError(KafkaError):
    error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class NotCoordinatorError(KafkaError):
    error_code = ErrorCode.NOT_COORDINATOR
    retriable = True


class InvalidTopicError(KafkaError):
    error_code = ErrorCode.INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(KafkaError):
    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(KafkaError):
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppendError(KafkaError):
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True


class InvalidRequiredAcksError(KafkaError):
    error_code = ErrorCode.INVALID_REQUIRED_ACKS


class IllegalGenerationError(KafkaError):
    error_code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(KafkaError):
    error_code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(KafkaError):
    error_code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(KafkaError):
    error_code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(KafkaError):
    error_code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(KafkaError):
    error_code = ErrorCode.REBALANCE_IN_PROGRESS


class InvalidCommitOffsetSizeError(KafkaError):
    error_code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE


class TopicAuthorizationFailedError(KafkaError):
    error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(KafkaError):
    error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(KafkaError):
    error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class InvalidTimestampError(KafkaError):
    error_code = ErrorCode.INVALID_TIMESTAMP

    def __init__(self, message: str = "", record_errors: list[tuple[int, str]] | None = None) -> None:
        """``record_errors`` as InvalidRecordError's (Kafka's RecordValidationException wrapping an
        InvalidTimestampException)."""
        super().__init__(message)
        self.record_errors = list(record_errors or ())


class UnsupportedSaslMechanismError(KafkaError):
    error_code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(KafkaError):
    error_code = ErrorCode.ILLEGAL_SASL_STATE


class UnsupportedVersionError(KafkaError):
    error_code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(KafkaError):
    error_code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(KafkaError):
    error_code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaError):
    error_code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(KafkaError):
    error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(KafkaError):
    error_code = ErrorCode.INVALID_CONFIG


class NotControllerError(KafkaError):
    error_code = ErrorCode.NOT_CONTROLLER
    retriable = True


class InvalidRequestError(KafkaError):
    error_code = ErrorCode.INVALID_REQUEST


class UnsupportedForMessageFormatError(KafkaError):
    error_code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class PolicyViolationError(KafkaError):
    error_code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceNumberError(KafkaError):
    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(KafkaError):
    error_code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaError):
    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(KafkaError):
    error_code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMappingError(KafkaError):
    error_code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(KafkaError):
    error_code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(KafkaError):
    error_code = ErrorCode.CONCURRENT_TRANSACTIONS
    retriable = True


class TransactionCoordinatorFencedError(KafkaError):
    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class TransactionalIdAuthorizationFailedError(KafkaError):
    error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class SecurityDisabledError(KafkaError):
    error_code = ErrorCode.SECURITY_DISABLED


class OperationNotAttemptedError(KafkaError):
    error_code = ErrorCode.OPERATION_NOT_ATTEMPTED


class KafkaStorageError(KafkaError):
    error_code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True
    invalid_metadata = True


class LogDirNotFoundError(KafkaError):
    error_code = ErrorCode.LOG_DIR_NOT_FOUND


class SaslAuthenticationFailedError(KafkaError):
    error_code = ErrorCode.SASL_AUTHENTICATION_FAILED


class UnknownProducerIdError(KafkaError):
    error_code = ErrorCode.UNKNOWN_PRODUCER_ID


class ReassignmentInProgressError(KafkaError):
    error_code = ErrorCode.REASSIGNMENT_IN_PROGRESS


class DelegationTokenAuthDisabledError(KafkaError):
    error_code = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


class DelegationTokenNotFoundError(KafkaError):
    error_code = ErrorCode.DELEGATION_TOKEN_NOT_FOUND


class DelegationTokenOwnerMismatchError(KafkaError):
    error_code = ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH


class DelegationTokenRequestNotAllowedError(KafkaError):
    error_code = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


class DelegationTokenAuthorizationFailedError(KafkaError):
    error_code = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED


class DelegationTokenExpiredError(KafkaError):
    error_code = ErrorCode.DELEGATION_TOKEN_EXPIRED


class InvalidPrincipalTypeError(KafkaError):
    error_code = ErrorCode.INVALID_PRINCIPAL_TYPE


class NonEmptyGroupError(KafkaError):
    error_code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(KafkaError):
    error_code = ErrorCode.GROUP_ID_NOT_FOUND


class FetchSessionIdNotFoundError(KafkaError):
    error_code = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    retriable = True


class InvalidFetchSessionEpochError(KafkaError):
    error_code = ErrorCode.INVALID_FETCH_SESSION_EPOCH
    retriable = True


class ListenerNotFoundError(KafkaError):
    error_code = ErrorCode.LISTENER_NOT_FOUND


class TopicDeletionDisabledError(KafkaError):
    error_code = ErrorCode.TOPIC_DELETION_DISABLED


class FencedLeaderEpochError(KafkaError):
    error_code = ErrorCode.FENCED_LEADER_EPOCH
    retriable = True
    invalid_metadata = True


class UnknownLeaderEpochError(KafkaError):
    error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
    retriable = True
    invalid_metadata = True


class UnsupportedCompressionTypeError(KafkaError):
    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class StaleBrokerEpochError(KafkaError):
    error_code = ErrorCode.STALE_BROKER_EPOCH


class OffsetNotAvailableError(KafkaError):
    error_code = ErrorCode.OFFSET_NOT_AVAILABLE
    retriable = True


class MemberIdRequiredError(KafkaError):
    error_code = ErrorCode.MEMBER_ID_REQUIRED


class PreferredLeaderNotAvailableError(KafkaError):
    error_code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


class GroupMaxSizeReachedError(KafkaError):
    error_code = ErrorCode.GROUP_MAX_SIZE_REACHED


class FencedInstanceIdError(KafkaError):
    error_code = ErrorCode.FENCED_INSTANCE_ID


class EligibleLeadersNotAvailableError(KafkaError):
    error_code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


class ElectionNotNeededError(KafkaError):
    error_code = ErrorCode.ELECTION_NOT_NEEDED


class NoReassignmentInProgressError(KafkaError):
    error_code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


class GroupSubscribedToTopicError(KafkaError):
    error_code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


class InvalidRecordError(KafkaError):
    error_code = ErrorCode.INVALID_RECORD

    def __init__(self, message: str = "", record_errors: list[tuple[int, str]] | None = None) -> None:
        """``record_errors``: [(batch index, message)] of the records that failed validation
        (Kafka's RecordValidationException: Produce v8+ answers them, ``message`` being its
        "One or more records have been rejected ..." text)."""
        super().__init__(message)
        self.record_errors = list(record_errors or ())


class UnstableOffsetCommitError(KafkaError):
    error_code = ErrorCode.UNSTABLE_OFFSET_COMMIT
    retriable = True


class ThrottlingQuotaExceededError(KafkaError):
    error_code = ErrorCode.THROTTLING_QUOTA_EXCEEDED
    retriable = True


class ProducerFencedError(KafkaError):
    error_code = ErrorCode.PRODUCER_FENCED


class ResourceNotFoundError(KafkaError):
    error_code = ErrorCode.RESOURCE_NOT_FOUND


class DuplicateResourceError(KafkaError):
    error_code = ErrorCode.DUPLICATE_RESOURCE


class UnacceptableCredentialError(KafkaError):
    error_code = ErrorCode.UNACCEPTABLE_CREDENTIAL


class InconsistentVoterSetError(KafkaError):
    error_code = ErrorCode.INCONSISTENT_VOTER_SET


class InvalidUpdateVersionError(KafkaError):
    error_code = ErrorCode.INVALID_UPDATE_VERSION


class FeatureUpdateFailedError(KafkaError):
    error_code = ErrorCode.FEATURE_UPDATE_FAILED


class PrincipalDeserializationFailureError(KafkaError):
    error_code = ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE


class SnapshotNotFoundError(KafkaError):
    error_code = ErrorCode.SNAPSHOT_NOT_FOUND


class PositionOutOfRangeError(KafkaError):
    error_code = ErrorCode.POSITION_OUT_OF_RANGE


class UnknownTopicIdError(KafkaError):
    error_code = ErrorCode.UNKNOWN_TOPIC_ID
    retriable = True
    invalid_metadata = True


class DuplicateBrokerRegistrationError(KafkaError):
    error_code = ErrorCode.DUPLICATE_BROKER_REGISTRATION


class BrokerIdNotRegisteredError(KafkaError):
    error_code = ErrorCode.BROKER_ID_NOT_REGISTERED


class InconsistentTopicIdError(KafkaError):
    error_code = ErrorCode.INCONSISTENT_TOPIC_ID


class InconsistentClusterIdError(KafkaError):
    error_code = ErrorCode.INCONSISTENT_CLUSTER_ID


class TransactionalIdNotFoundError(KafkaError):
    error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


class FetchSessionTopicIdError(KafkaError):
    error_code = ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


class IneligibleReplicaError(KafkaError):
    error_code = ErrorCode.INELIGIBLE_REPLICA


class NewLeaderElectedError(KafkaError):
    error_code = ErrorCode.NEW_LEADER_ELECTED


class MismatchedEndpointTypeError(KafkaError):
    error_code = ErrorCode.MISMATCHED_ENDPOINT_TYPE


class UnsupportedEndpointTypeError(KafkaError):
    error_code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


# A record-level name for CORRUPT_MESSAGE, as storage and the record codecs use it.
CorruptRecordError = CorruptMessageError

# Every class above, by code. Built from KafkaError's direct subclasses defined in this module,
# so subclasses elsewhere (a client's connection error, a storage refinement) never shadow them.
_BY_CODE: dict[int, type[KafkaError]] = {
    int(cls.error_code): cls for cls in KafkaError.__subclasses__() if cls.__module__ == __name__}


def for_code(code: int) -> type[KafkaError]:
    """The exception class for a wire code (UnknownServerError for codes we don't know)."""
    return _BY_CODE.get(code, UnknownServerError)


def error_for(code: int, message: str = "") -> KafkaError:
    return for_code(code)(message)


class RemoteProtocolError(Exception):
    """The peer sent bytes we cannot make sense of (h11's sense).

    ``error_code`` is what to answer when the header parsed; ``None`` means close the connection.
    """

    def __init__(self, message: str, error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class LocalProtocolError(Exception):
    """We were asked to encode something the protocol cannot carry (a bug on our side)."""
