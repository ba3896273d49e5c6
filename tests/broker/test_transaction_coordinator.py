"""The transaction coordinator's state machine on MockTime: the append to __transaction_state
and the markers are injected (they call back when told), so every transition is seen written
first and applied on acknowledgement. A table lists each bad input with Kafka's error code."""

from __future__ import annotations

import pytest

from broker.transaction.coordinator import TransactionConfig, TransactionCoordinator, TxnMarkerSender, TxnState
from protocol.clock import MockTime
from protocol.errors import ErrorCode as E
from protocol.messages.transactions import read_transaction_log_key, read_transaction_log_value

TID = "tx"


class Ids:
    def __init__(self) -> None:
        self.next = 1000

    def generate(self, callback) -> None:
        self.next += 1
        callback(0, self.next)


class Markers(TxnMarkerSender):
    def __init__(self) -> None:
        self.sent: list[tuple] = []
        self.done: list = []

    def send(self, transactional_id, producer_id, epoch, commit, coordinator_epoch, partitions, done) -> None:
        self.sent.append((transactional_id, producer_id, epoch, commit, coordinator_epoch, set(partitions)))
        self.done.append(done)

    def ack_all(self) -> None:
        done, self.done = self.done, []
        for d in done:
            d()


class Harness:
    def __init__(self, hold_appends: bool = False) -> None:
        self.time = MockTime()
        self.log: list[tuple[int, bytes, bytes | None]] = []
        self.held: list = []
        self.hold = hold_appends
        self.fail_with = 0
        self.markers = Markers()
        self.c = TransactionCoordinator(TransactionConfig(num_partitions=1, max_timeout_ms=900000), self.time,
                                        self.append, self.read, Ids(), self.markers)
        self.c.on_elected(0, 5)

    def append(self, partition, records, callback) -> None:
        if self.fail_with:
            return callback(self.fail_with)
        for k, v in records:
            self.log.append((partition, k, v))
        if self.hold:
            self.held.append(callback)
        else:
            callback(0)

    def read(self, partition, done) -> None:
        done([(k, v) for p, k, v in self.log if p == partition])

    def init(self, timeout_ms=60000, pid=-1, epoch=-1):
        out = []
        self.c.handle_init_producer_id(TID, timeout_ms, pid, epoch, lambda *r: out.append(r))
        return out[0] if out else None

    def add(self, pid, epoch, parts=(("t", 0),)):
        out = []
        self.c.handle_add_partitions(TID, pid, epoch, list(parts), out.append)
        return out[0] if out else None

    def end(self, pid, epoch, commit):
        out = []
        self.c.handle_end_txn(TID, pid, epoch, commit, out.append)
        return out[0] if out else None

    def state(self) -> TxnState:
        return self.c.txns[TID].state

    def written_states(self) -> list[TxnState]:
        return [TxnState(read_transaction_log_value(v).status) for _p, _k, v in self.log if v is not None]


def test_commit_goes_through_prepare_and_complete_written_first():
    h = Harness()
    err, pid, epoch = h.init()
    assert (err, epoch) == (E.NONE, 0)
    assert h.add(pid, epoch) == E.NONE and h.state() == TxnState.ONGOING
    assert h.end(pid, epoch, True) == E.NONE
    assert h.state() == TxnState.PREPARE_COMMIT
    assert h.markers.sent == [(TID, pid, 0, True, 5, {("t", 0)})]  # coordinator epoch = leader epoch
    h.markers.ack_all()
    assert h.state() == TxnState.COMPLETE_COMMIT
    assert h.written_states() == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT,
                                  TxnState.COMPLETE_COMMIT]
    assert read_transaction_log_key(h.log[0][1]) == TID
    # a retried EndTxn(commit) of a completed commit is fine; an abort of it is not
    assert h.end(pid, epoch, True) == E.NONE
    assert h.end(pid, epoch, False) == E.INVALID_TXN_STATE


def test_a_transition_is_applied_only_when_acknowledged():
    h = Harness(hold_appends=True)
    out = []
    h.c.handle_init_producer_id(TID, 60000, -1, -1, lambda *r: out.append(r))
    assert out == [] and h.c.txns[TID].pending is not None
    # another request meanwhile: CONCURRENT_TRANSACTIONS
    assert h.init() == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    h.held.pop(0)(0)
    assert out == [(E.NONE, 1001, 0)]


def test_a_failed_append_changes_nothing():
    h = Harness()
    _e, pid, epoch = h.init()
    h.fail_with = E.NOT_LEADER_OR_FOLLOWER
    assert h.add(pid, epoch) == E.NOT_COORDINATOR
    assert h.state() == TxnState.EMPTY and h.c.txns[TID].pending is None
    h.fail_with = E.NOT_ENOUGH_REPLICAS
    assert h.add(pid, epoch) == E.COORDINATOR_NOT_AVAILABLE


def test_init_with_an_ongoing_transaction_fences_and_aborts_it():
    h = Harness()
    _e, pid, epoch = h.init()
    h.add(pid, epoch)
    assert h.init() == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert h.state() == TxnState.PREPARE_ABORT and h.c.txns[TID].producer_epoch == 1
    assert h.markers.sent[-1][2:4] == (1, False)  # markers with the bumped epoch
    # the old producer is fenced from now on
    assert h.end(pid, 0, True) == E.PRODUCER_FENCED
    h.markers.ack_all()
    assert h.state() == TxnState.COMPLETE_ABORT
    assert h.init() == (E.NONE, pid, 2)


def test_timed_out_transaction_is_aborted_with_an_epoch_bump():
    h = Harness()
    h.c.startup()
    _e, pid, epoch = h.init(timeout_ms=1000)
    h.add(pid, epoch)
    h.time.sleep(500)
    assert h.state() == TxnState.ONGOING
    h.time.sleep(10_000)  # the abort pass runs every 10 s
    assert h.state() == TxnState.PREPARE_ABORT and h.c.txns[TID].producer_epoch == 1
    h.markers.ack_all()
    assert h.state() == TxnState.COMPLETE_ABORT
    assert h.add(pid, 0) == E.PRODUCER_FENCED
    h.c.shutdown()


def test_a_new_coordinator_loads_and_resends_prepared_markers():
    h = Harness()
    _e, pid, epoch = h.init()
    h.add(pid, epoch, [("t", 0), ("t", 1)])
    h.end(pid, epoch, True)
    assert h.state() == TxnState.PREPARE_COMMIT
    # another coordinator (a new leader, epoch 6) loads the same log: it completes the commit
    other = Harness()
    other.log = list(h.log)
    other.c.on_resigned(0, 5)
    other.c.on_elected(0, 6)
    assert other.state() == TxnState.PREPARE_COMMIT
    assert other.markers.sent == [(TID, pid, 0, True, 6, {("t", 0), ("t", 1)})]
    other.markers.ack_all()
    assert other.state() == TxnState.COMPLETE_COMMIT


def test_a_leader_and_isr_of_the_same_leader_epoch_does_not_reload_the_partition():
    """An ISR change of __transaction_state (the same leader epoch) comes as LeaderAndIsr too: a
    reload would resend the prepared transaction's markers, a second COMMIT marker in each of its
    partitions (seen in tests/cluster/test_transactions_cluster.py: the end offset one too far)."""
    h = Harness()
    _e, pid, epoch = h.init()
    h.add(pid, epoch, [("t", 0)])
    h.end(pid, epoch, True)
    other = Harness()
    other.log = list(h.log)
    other.c.on_resigned(0, 5)
    other.c.on_elected(0, 6)
    assert len(other.markers.sent) == 1
    other.c.on_elected(0, 6)  # the ISR grew: same leader epoch
    assert len(other.markers.sent) == 1
    other.markers.ack_all()
    assert other.state() == TxnState.COMPLETE_COMMIT
    other.c.on_elected(0, 6)
    assert other.state() == TxnState.COMPLETE_COMMIT and len(other.markers.sent) == 1
    other.c.on_elected(0, 7)  # a new leader epoch: the partition is loaded again
    assert other.c.owned[0] == 7 and other.state() == TxnState.COMPLETE_COMMIT


def test_idle_ids_expire():
    h = Harness()
    h.c.config.id_expiration_ms = 1000
    h.init()
    h.time.sleep(2000)
    h.c.remove_expired_transactional_ids()
    assert TID not in h.c.txns and h.log[-1][2] is None  # a tombstone


def test_kip360_bump_by_the_current_producer_only():
    h = Harness()
    _e, pid, epoch = h.init()
    assert h.init(pid=pid, epoch=epoch) == (E.NONE, pid, 1)
    assert h.init(pid=pid, epoch=0) == (E.NONE, pid, 1)  # a retry of that bump
    assert h.init(pid=pid + 5, epoch=1)[0] == E.PRODUCER_FENCED


@pytest.mark.parametrize("case, expected", [
    ("empty transactional id", E.INVALID_REQUEST),
    ("timeout 0", E.INVALID_TRANSACTION_TIMEOUT),
    ("timeout above transaction.max.timeout.ms", E.INVALID_TRANSACTION_TIMEOUT),
    ("AddPartitions, stale epoch", E.PRODUCER_FENCED),
    ("AddPartitions, wrong producer id", E.INVALID_PRODUCER_ID_MAPPING),
    ("AddPartitions, unknown transactional id", E.INVALID_PRODUCER_ID_MAPPING),
    ("EndTxn, stale epoch", E.PRODUCER_FENCED),
    ("EndTxn, wrong producer id", E.INVALID_PRODUCER_ID_MAPPING),
    ("EndTxn with no transaction (Empty)", E.INVALID_TXN_STATE),
    ("EndTxn(abort) during PrepareCommit", E.INVALID_TXN_STATE),
    ("AddPartitions during PrepareCommit", E.CONCURRENT_TRANSACTIONS),
    ("not the coordinator", E.NOT_COORDINATOR),
])
def test_bad_input_gets_kafkas_error_and_changes_nothing(case, expected):
    h = Harness()
    _e, pid, epoch = h.init()
    before = len(h.log)
    c = h.c
    got: list = []
    if case == "empty transactional id":
        c.handle_init_producer_id("", 60000, -1, -1, lambda *r: got.append(r[0]))
    elif case == "timeout 0":
        c.handle_init_producer_id("other", 0, -1, -1, lambda *r: got.append(r[0]))
    elif case == "timeout above transaction.max.timeout.ms":
        c.handle_init_producer_id("other", 900001, -1, -1, lambda *r: got.append(r[0]))
    elif case == "AddPartitions, stale epoch":
        got.append(h.add(pid, epoch - 1))
    elif case == "AddPartitions, wrong producer id":
        got.append(h.add(pid + 1, epoch))
    elif case == "AddPartitions, unknown transactional id":
        c.handle_add_partitions("nobody", pid, epoch, [("t", 0)], got.append)
    elif case == "EndTxn, stale epoch":
        got.append(h.end(pid, epoch - 1, True))
    elif case == "EndTxn, wrong producer id":
        got.append(h.end(pid + 1, epoch, True))
    elif case == "EndTxn with no transaction (Empty)":
        got.append(h.end(pid, epoch, True))
    elif case in ("EndTxn(abort) during PrepareCommit", "AddPartitions during PrepareCommit"):
        h.add(pid, epoch)
        h.end(pid, epoch, True)
        before = len(h.log)
        got.append(h.end(pid, epoch, False) if case.startswith("EndTxn") else h.add(pid, epoch, [("u", 0)]))
    elif case == "not the coordinator":
        c.on_resigned(0, 5)
        got.append(h.add(pid, epoch))
    assert got == [expected]
    assert len(h.log) == before  # nothing written


def verify(h, pid, epoch, parts=(("t", 0),)):
    out = []
    h.c.handle_add_partitions(TID, pid, epoch, list(parts), out.append, verify_only=True)
    return out[0] if out else None


def test_kip890_verify_only_answers_and_changes_nothing():
    """AddPartitionsToTxn v4 verify_only (a leader asking before a transactional produce):
    Kafka's handleVerifyPartitionsInTransaction, nothing written."""
    h = Harness()
    _err, pid, epoch = h.init()
    assert verify(h, pid, epoch) == E.INVALID_TXN_STATE            # no transaction yet
    assert h.add(pid, epoch, [("t", 0)]) == 0
    written = len(h.log)
    assert verify(h, pid, epoch) == 0
    assert verify(h, pid, epoch, [("t", 0), ("t", 1)]) == E.INVALID_TXN_STATE   # t-1 never added
    assert verify(h, pid, epoch - 1 if epoch else 5) == E.PRODUCER_FENCED
    assert verify(h, pid + 1, epoch) == E.INVALID_PRODUCER_ID_MAPPING
    assert len(h.log) == written
    assert h.end(pid, epoch, True) == 0                            # PrepareCommit, markers not yet acknowledged
    assert verify(h, pid, epoch) == E.CONCURRENT_TRANSACTIONS
    h.markers.ack_all()
    assert verify(h, pid, epoch) == E.INVALID_TXN_STATE            # the transaction is over


def test_kip890_verification_errors_for_the_producer():
    from broker.transaction.verification import client_error
    assert {e: client_error(e) for e in (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS,
                                         E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.NETWORK_EXCEPTION,
                                         E.PRODUCER_FENCED, E.INVALID_TXN_STATE, E.INVALID_PRODUCER_ID_MAPPING)} == {
        E.CONCURRENT_TRANSACTIONS: E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_LOAD_IN_PROGRESS: E.NOT_ENOUGH_REPLICAS,
        E.COORDINATOR_NOT_AVAILABLE: E.NOT_ENOUGH_REPLICAS, E.NOT_COORDINATOR: E.NOT_ENOUGH_REPLICAS,
        E.NETWORK_EXCEPTION: E.NOT_ENOUGH_REPLICAS, E.PRODUCER_FENCED: E.INVALID_PRODUCER_EPOCH,
        E.INVALID_TXN_STATE: E.INVALID_TXN_STATE, E.INVALID_PRODUCER_ID_MAPPING: E.INVALID_PRODUCER_ID_MAPPING}


def test_end_txn_to_markers_latency_is_counted_from_the_end_txn():
    """The commit latency histogram: from EndTxn's arrival, through the Prepare* write, to the
    last marker acknowledged; a coordinator's own abort (a fence) is not an EndTxn."""
    h = Harness(hold_appends=True)
    out = []
    h.c.handle_init_producer_id(TID, 60000, -1, -1, lambda *r: out.append(r))
    h.held.pop(0)(0)
    _e, pid, epoch = out[0]
    h.c.handle_add_partitions(TID, pid, epoch, [("t", 0)], lambda e: None)
    h.held.pop(0)(0)
    h.c.handle_end_txn(TID, pid, epoch, True, lambda e: None)
    h.time.sleep(4)            # the PrepareCommit write takes 4 ms
    h.held.pop(0)(0)
    h.time.sleep(12)           # the markers 12 more
    h.markers.ack_all()
    hist = h.c.end_txn_latency
    assert hist.count == 1 and hist.sum == pytest.approx(0.016)
    assert dict(hist.cumulative())["0.015"] == 0 and dict(hist.cumulative())["0.02"] == 1
    h.held.pop(0)(0)           # CompleteCommit
    # a fence (InitProducerId during a transaction) aborts without an EndTxn: not counted
    h.c.handle_add_partitions(TID, pid, epoch, [("t", 0)], lambda e: None)
    h.held.pop(0)(0)
    h.c.handle_init_producer_id(TID, 60000, -1, -1, lambda *r: None)
    while h.held:
        h.held.pop(0)(0)
    h.markers.ack_all()
    assert h.c.end_txn_latency.count == 1
