"""broker/error_response.py: the answer to a request whose handler failed unexpectedly
(UNKNOWN_SERVER_ERROR, connection kept). Issue 12 §6: Kafka never sends a Fetch partition's
records as null (librdkafka rejects the whole response, "invalid MessageSetSize -1"); that
holds on this path too, for every Fetch version served."""

from __future__ import annotations

import pytest

from broker.error_response import error_response_body
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import APIS

FETCH = APIS[ApiKey.FETCH]


@pytest.mark.parametrize("version", range(FETCH.min_version, FETCH.max_version + 1))
def test_a_failed_fetch_answers_every_partition_with_empty_records_not_null(version):
    request = FETCH.request.parse(version, FETCH.request.build(version, {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": t, "partitions": [{"partition": p, "fetch_offset": 0, "current_leader_epoch": -1,
                                                "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                                               for p in (0, 1)]} for t in ("a", "b")]}))
    body = error_response_body(FETCH, version, request, ErrorCode.UNKNOWN_SERVER_ERROR)
    answer = FETCH.response.parse(version, FETCH.response.build(version, body))
    parts = [(t.topic, p.partition_index, p.error_code, p.records) for t in answer.responses for p in t.partitions]
    assert parts == [(t, p, ErrorCode.UNKNOWN_SERVER_ERROR, b"") for t in ("a", "b") for p in (0, 1)]
