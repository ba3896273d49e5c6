"""Transactions on a 3-broker cluster (a controller and three broker processes), with faults:

- the transaction coordinator is killed -9 between PrepareCommit and the markers: the new
  coordinator loads PrepareCommit and completes the commit; the LSO moves past the transaction;
- a transaction left open by a producer killed -9 is aborted at its timeout: the LSO reaches the
  high watermark and ``kbroker transactions find-hanging`` lists nothing;
- a partition leader with committed, aborted and ongoing transactions is killed -9 and
  restarted: its ``.txnindex`` and producer state (the open transaction's first offset) are
  recovered, and a read_committed consumer's view is the same before and after.

The exactly-once pipeline under kills is in test_eos_pipeline.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from storage.txn_index import decode_entries
from tests.cli.test_cli import kbroker
from tests.cli.test_transactions_cli import rows
from tests.cluster.txn_helpers import (create_topic, find_coordinator, isr, leaders, live_bootstrap, offsets,
                                       read_committed, start_cluster)
from tests.support import wait_until

pytestmark = pytest.mark.timeout(240)


def describe(bootstrap: str, transactional_id: str) -> list[str]:
    [row] = rows(kbroker(bootstrap, "transactions", "describe", "--transactional-id", transactional_id).stdout.decode())
    return row


def test_a_coordinator_killed_between_prepare_commit_and_the_markers(tmp_path):
    # the ISR drops a stopped replica after 1.5 s, well before its session (8 s) expires: the
    # PrepareCommit is acknowledged while the partition leader cannot take its marker
    cluster = start_cluster(tmp_path, session_ms=8000, **{"replica.lag.time.max.ms": 1500})
    stopped = None
    try:
        create_topic(cluster, "pc", 3)
        tid = "pc-txn"
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 0})
        producer.init_transactions(60)
        coordinator = find_coordinator(cluster, tid, 1)
        led = leaders(cluster, "pc")
        # a partition led by another broker than the coordinator: its marker is what we hold back
        partition, target = next((p, n) for p, n in sorted(led.items()) if n != coordinator)
        producer.begin_transaction()
        for i in range(10):
            producer.produce("pc", value=f"v{i}".encode(), partition=partition)
        producer.flush(30)
        assert read_committed(cluster.bootstrap, "pc", 3)[partition] == []
        os.kill(cluster.brokers[target].pid, signal.SIGSTOP)
        stopped = target
        producer.commit_transaction(60)  # EndTxn answered once PrepareCommit is in the log
        state = describe(cluster.brokers[coordinator].bootstrap, tid)
        assert state[4] == "PrepareCommit", state  # the marker to the stopped leader is pending
        cluster.brokers[coordinator].kill()
        os.kill(cluster.brokers[target].pid, signal.SIGCONT)
        stopped = None
        new = find_coordinator(cluster, tid, 1, exclude={coordinator})
        assert new != coordinator
        bootstrap = live_bootstrap(cluster, {coordinator})
        wait_until(lambda: describe(bootstrap, tid)[4] == "CompleteCommit", 60, 0.2, "the new coordinator's commit")
        assert "transactional ids of __transaction_state" in cluster.brokers[new].log_text()
        wait_until(lambda: offsets(bootstrap, "pc", 3, 1)[partition] == offsets(bootstrap, "pc", 3, 0)[partition] == 11,
                   60, 0.2, "the LSO past the transaction and its marker")
        assert read_committed(bootstrap, "pc", 3)[partition] == [f"v{i}".encode() for i in range(10)]
    finally:
        if stopped is not None:
            os.kill(cluster.brokers[stopped].pid, signal.SIGCONT)
        cluster.kill()


DEAD_PRODUCER = """
import os, sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "dead", "transaction.timeout.ms": 4000,
              "linger.ms": 0})
p.init_transactions(60)
p.begin_transaction()
for i in range(30):
    p.produce(sys.argv[2], value=b"dead-%d" % i, partition=i % 3)
p.flush(30)
print("open", flush=True)
os.kill(os.getpid(), 9)
"""


def test_a_transaction_left_open_by_a_dead_producer_is_aborted_at_its_timeout(tmp_path):
    cluster = start_cluster(tmp_path)
    try:
        create_topic(cluster, "dp", 3)
        b = cluster.bootstrap
        live = Producer({"bootstrap.servers": b, "transactional.id": "alive", "linger.ms": 0})
        live.init_transactions(60)
        live.begin_transaction()
        for i in range(6):
            live.produce("dp", value=f"ok-{i}".encode(), partition=i % 3)
        live.commit_transaction(60)
        result = subprocess.run([sys.executable, "-c", DEAD_PRODUCER, b, "dp"], capture_output=True, timeout=120)
        assert result.returncode == -9 and result.stdout == b"open\n", result.stderr.decode()[-2000:]
        high = offsets(b, "dp", 3, 0)
        assert sum(high.values()) == 6 + 3 + 30  # "alive": 6 records and a COMMIT marker per partition; the open 30
        # the transaction holds the LSO of every partition while it is open
        stable = offsets(b, "dp", 3, 1)
        assert all(stable[p] < high[p] for p in range(3)), (stable, high)
        assert describe(b, "dead")[4] in ("Ongoing", "PrepareAbort", "CompleteAbort")
        # aborted at its 4 s timeout (checked every 0.5 s), with an epoch bump
        wait_until(lambda: describe(b, "dead")[4] == "CompleteAbort", 60, 0.2, "the timed-out transaction's abort")
        wait_until(lambda: offsets(b, "dp", 3, 1) == offsets(b, "dp", 3, 0), 30, 0.2, "the LSO at the high watermark")
        assert sum(offsets(b, "dp", 3, 0).values()) == 6 + 3 + 30 + 3  # and an ABORT marker per partition
        seen = read_committed(b, "dp", 3)
        assert sorted(v for vs in seen.values() for v in vs) == sorted(f"ok-{i}".encode() for i in range(6))
        hanging = kbroker(b, "transactions", "find-hanging", "--topic", "dp", "--max-transaction-timeout", "0")
        assert rows(hanging.stdout.decode()) == []
        for p in range(3):
            producers = rows(kbroker(b, "transactions", "describe-producers", "--topic", "dp", "--partition",
                                     str(p)).stdout.decode())
            assert producers and all(r[5] == "None" for r in producers)
    finally:
        cluster.kill()


def txnindex_entries(log_dir) -> list:
    return [e for name in sorted(os.listdir(log_dir)) if name.endswith(".txnindex")
            for e in decode_entries((log_dir / name).read_bytes())]


def test_a_leader_killed_with_ongoing_transactions_recovers_its_index_and_producer_state(tmp_path):
    cluster = start_cluster(tmp_path, **{"log.segment.bytes": 2048})
    try:
        create_topic(cluster, "kt", 1)
        b = cluster.bootstrap
        done = Producer({"bootstrap.servers": b, "transactional.id": "done", "linger.ms": 0})
        done.init_transactions(60)
        for t in range(6):  # committed and aborted transactions across several segments
            done.begin_transaction()
            for i in range(10):
                done.produce("kt", value=f"t{t}-{i}-".encode() + b"x" * 100, partition=0)
            if t % 2:
                done.flush(30)
                done.abort_transaction(60)
            else:
                done.commit_transaction(60)
        open_ = Producer({"bootstrap.servers": b, "transactional.id": "open", "linger.ms": 0,
                          "transaction.timeout.ms": 300000})
        open_.init_transactions(60)
        open_.begin_transaction()
        for i in range(5):
            open_.produce("kt", value=f"open-{i}".encode(), partition=0)
        open_.flush(30)
        done.begin_transaction()  # committed after the open one started: above the LSO
        done.produce("kt", value=b"late", partition=0)
        done.commit_transaction(60)

        leader = leaders(cluster, "kt")[0]
        log_dir = cluster.brokers[leader].log_dir / "kt-0"
        entries = txnindex_entries(log_dir)
        assert len(entries) == 3
        producers = {r[0]: r for r in rows(kbroker(b, "transactions", "describe-producers", "--topic", "kt",
                                                   "--partition", "0").stdout.decode())}
        open_start = [r[5] for r in producers.values() if r[5] != "None"]
        assert len(open_start) == 1
        stable, high = offsets(b, "kt", 1, 1)[0], offsets(b, "kt", 1, 0)[0]
        assert stable == int(open_start[0]) < high
        before = read_committed(b, "kt", 1)[0]
        assert [v.split(b"-")[0] for v in before] == [f"t{t}".encode() for t in (0, 2, 4) for _ in range(10)]

        cluster.brokers[leader].kill()
        leaders(cluster, "kt", exclude={leader})
        others = live_bootstrap(cluster, {leader})
        assert read_committed(others, "kt", 1)[0] == before  # a follower took over with the same view
        cluster.brokers[leader].start()
        wait_until(lambda: leader in isr(cluster, "kt", 0), 60, 0.2, "the restarted broker back in the ISR")
        # its own recovered state: the same aborted transactions, the same open transaction
        assert txnindex_entries(log_dir) == entries
        mine = {r[0]: r for r in rows(kbroker(b, "transactions", "describe-producers", "--topic", "kt", "--partition",
                                              "0", "--broker-id", str(leader)).stdout.decode())}
        assert {k: r[5] for k, r in mine.items()} == {k: r[5] for k, r in producers.items()}
        assert read_committed(b, "kt", 1)[0] == before
        # the restarted broker leads again (preferred leader) or not: the view is the same from it
        assert offsets(cluster.brokers[leader].bootstrap, "kt", 1, 1)[0] == stable
        open_.commit_transaction(60)
        after = read_committed(b, "kt", 1)[0]
        assert after[:len(before)] == before
        assert after[len(before):] == [f"open-{i}".encode() for i in range(5)] + [b"late"]
    finally:
        cluster.kill()


def test_pipelined_first_batches_of_a_transaction_share_one_verification(tmp_path):
    """KIP-890: a producer's first batches of a transaction on a partition, several in flight
    (librdkafka with batch.num.messages=1, as 0103_transactions' fatal_idempo test), are verified
    with a coordinator on another broker at the same time; each must find the verification
    still holding (one guard per producer and partition, as Kafka's VerificationGuard), not
    INVALID_TXN_STATE for all but the last."""
    cluster = start_cluster(tmp_path)
    try:
        create_topic(cluster, "pv", 3)
        tid = "pipelined"
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 0,
                             "batch.num.messages": 1, "max.in.flight.requests.per.connection": 5})
        producer.init_transactions(60)
        coordinator = find_coordinator(cluster, tid, 1)
        partition = next(p for p, n in sorted(leaders(cluster, "pv").items()) if n != coordinator)
        expected = []
        for t in range(3):
            producer.begin_transaction()
            for i in range(20):
                value = f"t{t}-{i}".encode()
                producer.produce("pv", value=value, partition=partition)
                expected.append(value)
            producer.commit_transaction(60)
        assert read_committed(cluster.bootstrap, "pv", 3)[partition] == expected
    finally:
        cluster.kill()
