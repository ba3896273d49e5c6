"""KIP-890 verification of transactional produce on a partition leader (KafkaApis with the
replica manager on real log files and a MockTime; the transaction coordinator is a fake whose
answers the test gives, in the order it likes): a producer's pipelined batches are appended in
the order their requests arrived, whatever order the verification answers come back in; and a
batch refused as out of order is logged with the sequence the producer state expected."""

from __future__ import annotations

import logging
import struct

import pytest

from broker.network import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import APIS
from protocol.records import Record, build_batch

from .test_apis import Broker
from .test_network import MockTransport

PID, EPOCH, TID = 4000, 0, "tid"


class FakeVerifier:
    """The TransactionVerifier's interface; each ``verify`` waits for the test to answer it."""

    def __init__(self) -> None:
        self.asked: list = []  # (topic partitions, done), in call order

    def verify(self, transactional_id, producer_id, epoch, partitions, done) -> None:
        assert (transactional_id, producer_id, epoch) == (TID, PID, EPOCH)
        self.asked.append((list(partitions), done))

    def answer(self, i: int, error: int = ErrorCode.NONE) -> None:
        partitions, done = self.asked[i]
        done({tp: error for tp in partitions})


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    b.create_online("t", partitions=2)
    b.apis.txn_verifier = FakeVerifier()
    yield b
    b.close()


def produce(b: Broker, *batches: tuple[int, int]) -> int:
    """A transactional Produce (acks=all) of one batch per (partition, base sequence)."""
    return b.send(ApiKey.PRODUCE, 8, {"transactional_id": TID, "acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "t", "partition_data": [
            {"index": p, "records": build_batch([Record(value=b"v%d" % seq, timestamp=1)], producer_id=PID,
                                                producer_epoch=EPOCH, base_sequence=seq, transactional=True)}
            for p, seq in batches]}]})


def reconnect(b: Broker) -> None:
    b.conn = KafkaConnection(b.conn.server, "PLAINTEXT")
    b.transport = MockTransport()
    b.conn.connection_made(b.transport)


def answers(b: Broker) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """The Produce answers written so far, in order: (correlation id, [(partition, error, base offset)])."""
    data = b"".join(b.transport.written)
    b.transport.written.clear()
    out = []
    while data:
        size, correlation_id = struct.unpack_from(">ii", data)
        body = APIS[ApiKey.PRODUCE].response.parse(8, data, 8)
        out.append((correlation_id, [(p.index, p.error_code, p.base_offset)
                                     for t in body.responses for p in t.partition_responses]))
        data = data[4 + size:]
    return out


def test_a_batch_verified_before_an_earlier_one_waits_for_it(broker):
    """The first batches of a transaction, pipelined, each verifying (the later ones because
    earlier ones are): the coordinator's answer for sequence 2 arriving before sequence 1's
    (TxnMarkerChannel.connection let a verification overtake others still waiting for the
    first connection to the coordinator) must not append sequence 2 first, which the log
    refuses as OUT_OF_ORDER_SEQUENCE_NUMBER and librdkafka takes for a fatal desync."""
    verifier = broker.apis.txn_verifier
    first = produce(broker, (0, 0))
    second = produce(broker, (0, 1))
    assert len(verifier.asked) == 2 and answers(broker) == []
    verifier.answer(0)
    assert answers(broker) == [(first, [(0, ErrorCode.NONE, 0)])]
    third = produce(broker, (0, 2))  # the transaction is open, but sequence 1 is still verifying
    assert len(verifier.asked) == 3
    verifier.answer(2)
    assert answers(broker) == []  # sequence 2 waits for sequence 1
    verifier.answer(1)
    assert answers(broker) == [(second, [(0, ErrorCode.NONE, 1)]), (third, [(0, ErrorCode.NONE, 2)])]
    fourth = produce(broker, (0, 3))  # nothing verifying: appended at once
    assert len(verifier.asked) == 3
    assert answers(broker) == [(fourth, [(0, ErrorCode.NONE, 3)])]


def test_a_request_waits_for_the_earlier_ones_on_each_of_its_partitions(broker):
    """A request with batches for two partitions is appended once every request that
    arrived before it on either partition has been; one that failed its verification does
    not hold the others back (and its later batch is refused, retriably, as out of order)."""
    verifier = broker.apis.txn_verifier
    a = produce(broker, (0, 0))
    b = produce(broker, (1, 0))
    c = produce(broker, (0, 1), (1, 1))
    assert len(verifier.asked) == 3
    verifier.answer(2)
    verifier.answer(0)
    assert answers(broker) == [(a, [(0, ErrorCode.NONE, 0)])]  # c still waits for b on partition 1
    verifier.answer(1, ErrorCode.NOT_ENOUGH_REPLICAS)
    assert answers(broker) == [(b, [(1, ErrorCode.NOT_ENOUGH_REPLICAS, -1)]),
                               (c, [(0, ErrorCode.NONE, 1), (1, ErrorCode.NOT_ENOUGH_REPLICAS, -1)])]


def test_a_batch_that_needs_no_verification_waits_with_its_request_and_the_next_waits_for_it(broker):
    """A request verifying its first batch on partition 0 also carries the next batch of the
    transaction already open on partition 1; the producer's following batch on partition 1
    (nothing verifying there) must not be appended before it."""
    verifier = broker.apis.txn_verifier
    opening = produce(broker, (1, 0))
    verifier.answer(0)
    assert answers(broker) == [(opening, [(1, ErrorCode.NONE, 0)])]
    both = produce(broker, (0, 0), (1, 1))
    assert [tps for tps, _done in verifier.asked[1:]] == [[("t", 0)]]  # partition 1 needs no verification
    after = produce(broker, (1, 2))
    assert answers(broker) == []
    for i in range(1, len(verifier.asked)):
        verifier.answer(i)
    assert answers(broker) == [(both, [(0, ErrorCode.NONE, 0), (1, ErrorCode.NONE, 1)]),
                               (after, [(1, ErrorCode.NONE, 2)])]


def test_a_cancelled_request_does_not_hold_back_the_ones_after_it(broker):
    """The connection of a request still verifying closes: the producer's requests verifying
    after it (its retries, on a new connection) do not wait for its answer."""
    verifier = broker.apis.txn_verifier
    produce(broker, (0, 0))
    broker.conn.close("gone")  # its answer is still to come
    reconnect(broker)
    retry = produce(broker, (0, 0))
    verifier.answer(1)
    assert answers(broker) == [(retry, [(0, ErrorCode.NONE, 0)])]
    verifier.answer(0)  # the first attempt's answer, late: nothing more is written
    assert answers(broker) == []
    assert not broker.rm.get_partition("t", 0).verifying(PID)
    assert broker.rm.get_partition("t", 0).log.log_end_offset == 1


def test_a_batch_out_of_order_is_logged_with_the_sequence_the_producer_state_expected(broker, caplog):
    def idempotent(seq: int) -> int:
        return broker.send(ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_batch(
                [Record(value=b"v", timestamp=1)], producer_id=PID, producer_epoch=EPOCH, base_sequence=seq)}]}]})

    idempotent(0)
    with caplog.at_level(logging.INFO, logger="kbroker"):
        out_of_order = idempotent(2)
    assert answers(broker)[1] == (out_of_order, [(0, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)])
    [line] = [r.getMessage() for r in caplog.records if "OUT_OF_ORDER_SEQUENCE_NUMBER" in r.getMessage()]
    assert "produce to t-0 rejected" in line and f"producer {PID}" in line and "sequence 2, expected 1" in line


def test_a_cancelled_request_releases_one_queued_behind_it(broker):
    """A request queued behind an earlier one (answered, waiting for its turn) goes on when the
    earlier one's connection closes (red with cancel() not releasing the queue)."""
    verifier = broker.apis.txn_verifier
    produce(broker, (0, 0))
    first_conn = broker.conn
    first_transport = broker.transport
    reconnect(broker)
    second = produce(broker, (0, 0))  # its retry, queued behind it (same producer, same partition)
    verifier.answer(1)
    assert answers(broker) == []  # the first is still verifying
    first_conn.close("gone")
    assert answers(broker) == [(second, [(0, ErrorCode.NONE, 0)])]
    assert first_transport.written == []


def test_a_verify_that_raises_does_not_hold_back_the_producers_next_requests(broker):
    """The verifier failing at once (a bug in the coordinator's inline path) answers that request
    with an error; the producer's next request on the same connection is not queued behind it
    forever (it was, until the connection closed)."""
    verifier = broker.apis.txn_verifier
    real = verifier.verify
    calls = []

    def failing_once(*args) -> None:
        calls.append(args)
        if len(calls) == 1:
            raise RuntimeError("coordinator bug")
        real(*args)

    verifier.verify = failing_once
    produce(broker, (0, 0))
    [(_failed, [(partition, error, _offset)])] = answers(broker)
    assert partition == 0 and error != ErrorCode.NONE
    retry = produce(broker, (0, 0))
    verifier.answer(0)
    assert answers(broker) == [(retry, [(0, ErrorCode.NONE, 0)])]
    assert not broker.rm.get_partition("t", 0).verifying(PID)


def test_a_waiting_batch_whose_transaction_a_marker_ended_is_refused(broker):
    """A request verifying on partition 0 also carries the next batch of the transaction open on
    partition 1; an abort marker on partition 1 while it waits ends that transaction: the batch
    is refused INVALID_TXN_STATE, not appended after the marker (a hanging transaction)."""
    verifier = broker.apis.txn_verifier
    opening = produce(broker, (1, 0))
    verifier.answer(0)
    assert answers(broker) == [(opening, [(1, ErrorCode.NONE, 0)])]
    both = produce(broker, (0, 0), (1, 1))
    p1 = broker.rm.get_partition("t", 1)
    p1.append_end_txn_marker(PID, EPOCH, 0, False)
    end = p1.log.log_end_offset
    verifier.answer(1)
    assert answers(broker) == [(both, [(0, ErrorCode.NONE, 0), (1, ErrorCode.INVALID_TXN_STATE, -1)])]
    assert p1.log.log_end_offset == end
    assert p1.log.producer_state.last_entry(PID).current_txn_first_offset < 0  # nothing left open


def test_a_new_leadership_drops_the_guards_of_the_last(broker):
    """A guard left from an earlier leadership (its transaction's marker came by replication,
    which drops no guard) must not refuse the producer's next first batch for good (its stale
    lowest sequence made every retry NOT_ENOUGH_REPLICAS)."""
    from broker.partition import LeaderAndIsrState

    verifier = broker.apis.txn_verifier
    p0 = broker.rm.get_partition("t", 0)
    p0.start_verification(PID, 0)  # a verification that never finished here
    state = LeaderAndIsrState("t", 0, 1, p0.local_broker_id + 1, p0.leader_epoch + 1, [p0.local_broker_id],
                              1, [p0.local_broker_id, p0.local_broker_id + 1])
    p0.make_follower(state)
    assert p0.verification_guards == {}
    state = LeaderAndIsrState("t", 0, 1, p0.local_broker_id, p0.leader_epoch + 1, [p0.local_broker_id], 2,
                              [p0.local_broker_id, p0.local_broker_id + 1])
    p0.start_verification(PID, 0)
    p0.make_leader(state)
    assert p0.verification_guards == {}
    first = produce(broker, (0, 1))  # the producer's first batch here starts at sequence 1
    verifier.answer(len(verifier.asked) - 1)
    assert answers(broker) == [(first, [(0, ErrorCode.NONE, 0)])]
