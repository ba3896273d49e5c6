"""Bad transactional input over real sockets, the rows the coordinator's own table
(tests/broker/test_transaction_coordinator.py) cannot hold: they cross the group coordinator
and the partition leader. Each row gets Kafka's error code and one log line, and nothing is
written: not a byte more in ``__consumer_offsets`` or the topic, no pending offset
(OffsetFetch with require_stable answers as before).

Kafka's codes, per request version (3.6+, KIP-890 part 1):
- TxnOffsetCommit is verified with the transaction coordinator before the offsets are written
  (GroupCoordinator.handleTxnCommitOffsets -> ReplicaManager.maybeStartTransactionVerification-
  ForPartition on the group's ``__consumer_offsets`` partition). The coordinator answers
  PRODUCER_FENCED for a stale epoch, which AddPartitionsToTxnManager turns into
  INVALID_PRODUCER_EPOCH for every version ("Producers expect to handle INVALID_PRODUCER_EPOCH
  in this scenario"); INVALID_PRODUCER_ID_MAPPING for another producer id, INVALID_TXN_STATE
  for a group never added with AddOffsetsToTxn; maybeConvertOffsetCommitError keeps all three.
- A control batch from a client: LogValidator.validateBatch, INVALID_RECORD ("clients are not
  allowed to write control records"), also inside a transaction whose partition was added."""

from __future__ import annotations

import itertools
import logging
import time

import pytest

from broker.coordinator.group_metadata_manager import partition_for
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode as E
from protocol.records import CONTROL_MASK, TRANSACTIONAL_MASK
from tests.compat.helpers import create_topic
from tests.support import ThreadedBroker

from .frames import Raw, good_batch, read_log, rebuilt

TOPIC = "txn-bad"
GROUP = "txn-bad-group"
_ids = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = ThreadedBroker(tmp_path_factory.mktemp("txn-bad") / "data",
                       overrides={"listeners": "PLAINTEXT://127.0.0.1:0"}).start()
    create_topic(b, TOPIC, partitions=1)
    r = Raw(b.port)
    deadline = time.monotonic() + 30
    while r.ask(ApiKey.FIND_COORDINATOR, 3, {"key": GROUP, "key_type": 0}).error_code != E.NONE:
        # __consumer_offsets is created on the first lookup and loaded
        assert time.monotonic() < deadline, "no group coordinator within 30 s"
        time.sleep(0.1)
    r.close()
    yield b
    b.stop()


def init(raw: Raw, transactional_id: str) -> tuple[int, int]:
    """InitProducerId (retried while __transaction_state is created, with a deadline)."""
    deadline = time.monotonic() + 30
    while True:
        found = raw.ask(ApiKey.FIND_COORDINATOR, 3, {"key": transactional_id, "key_type": 1})
        if found.error_code == E.NONE:
            resp = raw.ask(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": transactional_id,
                                                        "transaction_timeout_ms": 60000})
            if resp.error_code == E.NONE:
                return resp.producer_id, resp.producer_epoch
        assert time.monotonic() < deadline, "no transaction coordinator within 30 s"
        time.sleep(0.1)


def add_offsets(raw: Raw, tid: str, pid: int, epoch: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        code = raw.ask(ApiKey.ADD_OFFSETS_TO_TXN, 1, {"transactional_id": tid, "producer_id": pid,
                                                      "producer_epoch": epoch, "group_id": GROUP}).error_code
        if code == E.NONE:
            return
        # the group's coordinator may still be loading __consumer_offsets
        assert code in (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS), code
        assert time.monotonic() < deadline, E(code).name
        time.sleep(0.1)


def txn_offset_commit(raw: Raw, version: int, tid: str, pid: int, epoch: int) -> list[int]:
    resp = raw.ask(ApiKey.TXN_OFFSET_COMMIT, version, {
        "transactional_id": tid, "group_id": GROUP, "producer_id": pid, "producer_epoch": epoch,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                   "committed_metadata": ""}]}]})
    return [p.error_code for t in resp.topics for p in t.partitions]


def offsets_state(broker, raw: Raw) -> tuple:
    """What a bad request must leave as it was: the group's __consumer_offsets partition's
    batches, and the group's offset of TOPIC-0 as OffsetFetch with require_stable answers it."""
    log_dir = broker.server.config.log_dirs[0]
    partition = partition_for(GROUP, 50)
    fetched = raw.ask(ApiKey.OFFSET_FETCH, 7, {"group_id": GROUP, "require_stable": True,
                                               "topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    answer = [(p.committed_offset, p.error_code) for t in fetched.topics for p in t.partitions]
    return read_log(log_dir, "__consumer_offsets", partition), fetched.error_code, answer


def kbroker_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("kbroker") and r.levelno >= logging.WARNING]


# (case, request version, Kafka's code)
TXN_OFFSET_COMMIT_ROWS = [
    *[(f"TxnOffsetCommit v{v}, stale epoch", v, E.INVALID_PRODUCER_EPOCH) for v in range(4)],
    *[(f"TxnOffsetCommit v{v}, wrong producer id", v, E.INVALID_PRODUCER_ID_MAPPING) for v in range(4)],
    *[(f"TxnOffsetCommit v{v}, group never added (no AddOffsetsToTxn)", v, E.INVALID_TXN_STATE) for v in (0, 3)],
]


@pytest.mark.parametrize("case, version, expected", TXN_OFFSET_COMMIT_ROWS, ids=[r[0] for r in TXN_OFFSET_COMMIT_ROWS])
def test_txn_offset_commit_bad_input(broker, raw, caplog, case, version, expected):
    tid = f"bad-{next(_ids)}"
    pid, epoch = init(raw, tid)
    if "stale epoch" in case:
        pid2, epoch = init(raw, tid)  # a second InitProducerId bumps the epoch: the first producer is stale
        assert pid2 == pid
        add_offsets(raw, tid, pid, epoch)
        bad_pid, bad_epoch = pid, epoch - 1
    elif "wrong producer id" in case:
        add_offsets(raw, tid, pid, epoch)
        bad_pid, bad_epoch = pid + 1, epoch
    else:
        bad_pid, bad_epoch = pid, epoch
    before = offsets_state(broker, raw)
    caplog.clear()
    assert txn_offset_commit(raw, version, tid, bad_pid, bad_epoch) == [expected]
    lines = kbroker_warnings(caplog)
    assert len(lines) == 1 and E(expected).name in lines[0], lines
    assert offsets_state(broker, raw) == before
    # the transaction itself is unharmed: its own producer commits offsets in it and ends it
    if "never added" not in case:
        assert txn_offset_commit(raw, version, tid, pid, epoch) == [E.NONE]
        assert raw.ask(ApiKey.END_TXN, 1, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                           "committed": False}).error_code == E.NONE


def test_a_control_batch_inside_a_transaction_is_invalid_record(broker, raw, caplog):
    """The producer's transaction holds the partition (AddPartitionsToTxn), so KIP-890's
    verification passes; the LogValidator still refuses a client's control batch."""
    tid = f"bad-{next(_ids)}"
    pid, epoch = init(raw, tid)
    added = raw.ask(ApiKey.ADD_PARTITIONS_TO_TXN, 1, {"v3_and_below_transactional_id": tid,
                                                      "v3_and_below_producer_id": pid,
                                                      "v3_and_below_producer_epoch": epoch,
                                                      "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})
    assert [p.partition_error_code for t in added.results_by_topic_v3_and_below for p in t.results_by_partition] == [0]
    log_dir = broker.server.config.log_dirs[0]
    before = read_log(log_dir, TOPIC, 0)
    control = rebuilt(good_batch(1), attributes=CONTROL_MASK | TRANSACTIONAL_MASK, producer_id=pid,
                      producer_epoch=epoch, base_sequence=0)
    caplog.clear()
    assert raw.produce({(TOPIC, 0): control}, transactional_id=tid) == {(TOPIC, 0): E.INVALID_RECORD}
    lines = kbroker_warnings(caplog)
    assert len(lines) == 1 and "INVALID_RECORD" in lines[0], lines
    assert read_log(log_dir, TOPIC, 0) == before
    # the producer's real batch at the same sequence goes in, and its transaction ends
    data = rebuilt(good_batch(2), attributes=TRANSACTIONAL_MASK, producer_id=pid, producer_epoch=epoch,
                   base_sequence=0)
    assert raw.produce({(TOPIC, 0): data}, transactional_id=tid) == {(TOPIC, 0): E.NONE}
    assert raw.ask(ApiKey.END_TXN, 1, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                       "committed": True}).error_code == E.NONE
