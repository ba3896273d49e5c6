"""Produce v8+ says why a batch was refused, as Kafka does: ``record_errors`` (batch index and
message of each record that failed validation) and ``error_message`` (Kafka's "One or more
records have been rejected ..." summary; for a batch refused as a whole, the reason). Raw
frames against a real broker; v7 answers carry neither field and stay as they were."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from protocol.records import Record, build_batch
from tests.compat.helpers import create_topic
from tests.support import ThreadedBroker

from .frames import Raw, good_batch, rebuilt

COMPACT = "errors-compact"
PLAIN = "errors-plain"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = ThreadedBroker(tmp_path_factory.mktemp("record-errors") / "data",
                       overrides={"listeners": "PLAINTEXT://127.0.0.1:0"}).start()
    create_topic(b, COMPACT, configs={"cleanup.policy": "compact"})
    create_topic(b, PLAIN, partitions=2)
    yield b
    b.stop()


@pytest.fixture
def raw(broker):
    r = Raw(broker.port)
    yield r
    r.close()


def test_keyless_records_on_a_compacted_topic_are_each_named_with_their_batch_index(raw):
    batch = build_batch([Record(key=b"k0", value=b"a", timestamp=1), Record(key=None, value=b"b", timestamp=1),
                         Record(key=b"k2", value=b"c", timestamp=1), Record(key=None, value=b"d", timestamp=1)])
    answer = raw.produce_answers({(COMPACT, 0): batch})[(COMPACT, 0)]
    assert answer.error_code == ErrorCode.INVALID_RECORD
    message = f"Compacted topic cannot accept message without key in topic partition {COMPACT}-0."
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [(1, message), (3, message)]
    assert answer.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first three "
        f"errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=3, message='{message}')]")


def test_a_batch_refused_as_a_whole_has_a_message_and_no_record_errors(raw):
    lying = rebuilt(good_batch(3), records_count=5, last_offset_delta=4)
    answers = raw.produce_answers({(PLAIN, 0): lying, (PLAIN, 1): good_batch(2)})
    refused, written = answers[(PLAIN, 0)], answers[(PLAIN, 1)]
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert list(refused.record_errors) == []
    assert refused.error_message.startswith(f"{PLAIN}-0: ") and "5 records declared" in refused.error_message
    assert (written.error_code, list(written.record_errors), written.error_message) == (ErrorCode.NONE, [], None)


def test_checks_before_the_log_have_a_message_too(raw):
    two_batches = good_batch(1) + good_batch(1)
    answer = raw.produce_answers({(PLAIN, 0): two_batches})[(PLAIN, 0)]
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert answer.error_message == f"{PLAIN}-0: Produce v8 allows exactly one record batch per partition"
    corrupt = rebuilt(good_batch(2), fix_crc=False, base_timestamp=5)
    answer = raw.produce_answers({(PLAIN, 0): corrupt})[(PLAIN, 0)]
    assert answer.error_code == ErrorCode.CORRUPT_MESSAGE
    assert "CRC" in answer.error_message or "crc" in answer.error_message


def test_v7_answers_are_unchanged(raw):
    lying = rebuilt(good_batch(3), records_count=5, last_offset_delta=4)
    assert raw.produce({(PLAIN, 0): lying}, version=7) == {(PLAIN, 0): ErrorCode.INVALID_RECORD}
    assert raw.produce({(PLAIN, 0): good_batch(1)}, version=7) == {(PLAIN, 0): ErrorCode.NONE}
