"""Error codes and exception classes (protocol/errors.py).

The retriable flags are checked against the "J" column of shared/kafka-protocol/ERRORS.md
(whether the Java client's exception extends RetriableException), transcribed here so a
fresh clone can run it; invalid_metadata against the same file's kafka-python "+md" marks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol import errors as E
from protocol.errors import ErrorCode, KafkaError, RemoteProtocolError, UnknownServerError, error_for, for_code

# (code, name) for every row of ERRORS.md with J = Y, and with J = n.
JAVA_RETRIABLE = [
    (2, "CORRUPT_MESSAGE"), (3, "UNKNOWN_TOPIC_OR_PARTITION"), (5, "LEADER_NOT_AVAILABLE"),
    (6, "NOT_LEADER_OR_FOLLOWER"), (7, "REQUEST_TIMED_OUT"), (9, "REPLICA_NOT_AVAILABLE"), (13, "NETWORK_EXCEPTION"),
    (14, "COORDINATOR_LOAD_IN_PROGRESS"), (15, "COORDINATOR_NOT_AVAILABLE"), (16, "NOT_COORDINATOR"),
    (19, "NOT_ENOUGH_REPLICAS"), (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND"), (41, "NOT_CONTROLLER"),
    (51, "CONCURRENT_TRANSACTIONS"), (56, "KAFKA_STORAGE_ERROR"), (70, "FETCH_SESSION_ID_NOT_FOUND"),
    (71, "INVALID_FETCH_SESSION_EPOCH"), (74, "FENCED_LEADER_EPOCH"), (75, "UNKNOWN_LEADER_EPOCH"),
    (78, "OFFSET_NOT_AVAILABLE"), (88, "UNSTABLE_OFFSET_COMMIT"), (89, "THROTTLING_QUOTA_EXCEEDED"),
    (100, "UNKNOWN_TOPIC_ID"),
]
JAVA_NOT_RETRIABLE = [
    (-1, "UNKNOWN_SERVER_ERROR"), (1, "OFFSET_OUT_OF_RANGE"), (4, "INVALID_FETCH_SIZE"), (8, "BROKER_NOT_AVAILABLE"),
    (10, "MESSAGE_TOO_LARGE"), (11, "STALE_CONTROLLER_EPOCH"), (12, "OFFSET_METADATA_TOO_LARGE"),
    (17, "INVALID_TOPIC_EXCEPTION"), (18, "RECORD_LIST_TOO_LARGE"), (21, "INVALID_REQUIRED_ACKS"),
    (22, "ILLEGAL_GENERATION"), (23, "INCONSISTENT_GROUP_PROTOCOL"), (24, "INVALID_GROUP_ID"),
    (25, "UNKNOWN_MEMBER_ID"), (26, "INVALID_SESSION_TIMEOUT"), (27, "REBALANCE_IN_PROGRESS"),
    (28, "INVALID_COMMIT_OFFSET_SIZE"), (29, "TOPIC_AUTHORIZATION_FAILED"), (30, "GROUP_AUTHORIZATION_FAILED"),
    (31, "CLUSTER_AUTHORIZATION_FAILED"), (32, "INVALID_TIMESTAMP"), (33, "UNSUPPORTED_SASL_MECHANISM"),
    (34, "ILLEGAL_SASL_STATE"), (35, "UNSUPPORTED_VERSION"), (36, "TOPIC_ALREADY_EXISTS"), (37, "INVALID_PARTITIONS"),
    (38, "INVALID_REPLICATION_FACTOR"), (39, "INVALID_REPLICA_ASSIGNMENT"), (40, "INVALID_CONFIG"),
    (42, "INVALID_REQUEST"), (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT"), (44, "POLICY_VIOLATION"),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER"), (46, "DUPLICATE_SEQUENCE_NUMBER"), (47, "INVALID_PRODUCER_EPOCH"),
    (58, "SASL_AUTHENTICATION_FAILED"), (59, "UNKNOWN_PRODUCER_ID"), (68, "NON_EMPTY_GROUP"),
    (69, "GROUP_ID_NOT_FOUND"), (73, "TOPIC_DELETION_DISABLED"), (76, "UNSUPPORTED_COMPRESSION_TYPE"),
    (79, "MEMBER_ID_REQUIRED"), (81, "GROUP_MAX_SIZE_REACHED"), (82, "FENCED_INSTANCE_ID"), (87, "INVALID_RECORD"),
    (90, "PRODUCER_FENCED"),
]
# ERRORS.md, kafka-python column "+md": a client refreshes its metadata after these.
INVALID_METADATA = {3, 5, 6, 9, 13, 56, 74, 75, 100}

REAL_CODES = [c for c in ErrorCode if c is not ErrorCode.NONE]


@pytest.mark.parametrize("code", REAL_CODES, ids=lambda c: c.name)
def test_for_code_round_trip(code) -> None:
    cls = for_code(int(code))
    assert issubclass(cls, KafkaError) and cls.error_code is code
    exc = error_for(int(code), "details")
    assert isinstance(exc, cls) and exc.error_code is code and exc.message == "details"
    assert str(cls()) == code.name  # no message: the code's name
    assert getattr(E, cls.__name__) is cls


def test_class_names_are_distinct() -> None:
    names = [for_code(int(c)).__name__ for c in REAL_CODES]
    assert len(set(names)) == len(names)
    assert all(n.endswith("Error") for n in names)


@pytest.mark.parametrize("code", [109, 116, 1000, -2, 32767, -32768])
def test_unknown_codes_map_to_unknown_server_error(code) -> None:
    assert for_code(code) is UnknownServerError
    assert UnknownServerError.error_code is ErrorCode.UNKNOWN_SERVER_ERROR


@pytest.mark.parametrize("code,name,retriable", [(c, n, True) for c, n in JAVA_RETRIABLE] +
                         [(c, n, False) for c, n in JAVA_NOT_RETRIABLE])
def test_retriable_matches_the_java_client(code, name, retriable) -> None:
    assert ErrorCode(code).name == name
    assert for_code(code)().retriable is retriable


def test_every_retriable_code_is_in_the_table() -> None:
    """Nothing is retriable that ERRORS.md does not list with J = Y."""
    ours = {int(c) for c in REAL_CODES if for_code(int(c))().retriable}
    assert ours == {c for c, _ in JAVA_RETRIABLE}


def test_invalid_metadata_flags() -> None:
    assert {int(c) for c in REAL_CODES if for_code(int(c))().invalid_metadata} == INVALID_METADATA


@pytest.mark.parametrize("alias,code", [
    ("CorruptRecordError", ErrorCode.CORRUPT_MESSAGE), ("CorruptMessageError", ErrorCode.CORRUPT_MESSAGE),
    ("OffsetOutOfRangeError", ErrorCode.OFFSET_OUT_OF_RANGE), ("MessageTooLargeError", ErrorCode.MESSAGE_TOO_LARGE),
    ("InvalidRecordError", ErrorCode.INVALID_RECORD), ("KafkaStorageError", ErrorCode.KAFKA_STORAGE_ERROR),
    ("NotLeaderOrFollowerError", ErrorCode.NOT_LEADER_OR_FOLLOWER), ("InvalidTopicError", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("UnsupportedVersionError", ErrorCode.UNSUPPORTED_VERSION), ("InvalidRequestError", ErrorCode.INVALID_REQUEST),
    ("RequestTimedOutError", ErrorCode.REQUEST_TIMED_OUT), ("NotEnoughReplicasError", ErrorCode.NOT_ENOUGH_REPLICAS),
])
def test_named_aliases(alias, code) -> None:
    assert getattr(E, alias) is for_code(int(code))


def test_core_codes_are_fixed() -> None:
    assert [(c.name, int(c)) for c in (ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.OFFSET_OUT_OF_RANGE,
                                        ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                        ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT,
                                        ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.NOT_ENOUGH_REPLICAS)] == [
        ("UNKNOWN_SERVER_ERROR", -1), ("OFFSET_OUT_OF_RANGE", 1), ("CORRUPT_MESSAGE", 2),
        ("UNKNOWN_TOPIC_OR_PARTITION", 3), ("NOT_LEADER_OR_FOLLOWER", 6), ("REQUEST_TIMED_OUT", 7),
        ("MESSAGE_TOO_LARGE", 10), ("NOT_ENOUGH_REPLICAS", 19)]


def test_remote_protocol_error() -> None:
    assert RemoteProtocolError("bad").error_code is None
    assert RemoteProtocolError("bad", ErrorCode.INVALID_REQUEST).error_code is ErrorCode.INVALID_REQUEST
    assert not issubclass(RemoteProtocolError, KafkaError)


def _defined_error_classes() -> list[type[KafkaError]]:
    """The KafkaError subclasses protocol/errors.py defines (aliases counted once)."""
    classes = {id(v): v for v in vars(E).values()
               if isinstance(v, type) and issubclass(v, KafkaError) and v is not KafkaError and v.__module__ == E.__name__}
    return list(classes.values())


def test_one_explicit_class_per_code() -> None:
    by_code: dict[int, list[str]] = {}
    for cls in _defined_error_classes():
        by_code.setdefault(int(cls.error_code), []).append(cls.__name__)
    assert sorted(by_code) == sorted(int(c) for c in REAL_CODES)
    assert {code: names for code, names in by_code.items() if len(names) != 1} == {}
    for code in REAL_CODES:
        assert for_code(code).error_code == code
        assert E.__dict__[for_code(code).__name__] is for_code(code)  # a module-level name, not only the table
    for code in (109, -2, 5000):
        assert for_code(code) is UnknownServerError


def test_error_classes_are_written_out_not_generated() -> None:
    """Classes written into globals() at import time are invisible to grep, IDEs and type checkers."""
    root = Path(E.__file__).resolve().parent
    offenders = [str(p.relative_to(root.parent)) for p in sorted(root.rglob("*.py")) if "globals()[" in p.read_text()]
    assert offenders == []
    source = Path(E.__file__).read_text()
    for cls in _defined_error_classes():
        assert f"\nclass {cls.__name__}(KafkaError):\n    error_code = ErrorCode.{cls.error_code.name}\n" in source
