"""``kbroker transactions`` as a subprocess against a broker process, with kafka-transactions.sh's
behaviour: list, describe, describe-producers, find-hanging and abort (by start offset, and by
producer id + epoch + coordinator epoch).

A hanging transaction is made as Kafka's come about: a transactional batch written to a
partition its coordinator never heard of (KIP-890 verification, which refuses exactly that, is
turned off on this broker). A confluent-kafka transaction open at the same time is not hanging:
its coordinator lists the partition."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, Producer

from protocol.api_keys import ApiKey
from protocol.client import KafkaClient
from protocol.records import Record, build_batch
from tests.cli.test_cli import kbroker

OVERRIDES = {"transaction.partition.verification.enable": "false", "group.initial.rebalance.delay.ms": "0"}


def rows(text: str) -> list[list[str]]:
    """The body rows of a table printed as Kafka's prettyPrintTable (tab-separated, a header)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return [[c.strip() for c in line.split("\t")] for line in lines[1:]]


async def hanging_write(bootstrap: str, transactional_id: str, topic: str, value: bytes) -> tuple[int, int]:
    """A transactional batch for ``transactional_id``'s producer id written to ``topic``-0 without
    AddPartitionsToTxn: (producer id, epoch)."""
    async with KafkaClient(bootstrap) as client:
        while True:
            conn = await client.any_connection()
            r = await conn.request(ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": 1}, 3)
            if r.error_code == 0:
                break
            await asyncio.sleep(0.1)
        coordinator = await client.connection(r.node_id)
        while True:
            r = await coordinator.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": transactional_id,
                                                                    "transaction_timeout_ms": 60000})
            if r.error_code == 0:
                break
            await asyncio.sleep(0.1)
        pid, epoch = r.producer_id, r.producer_epoch
        batch = build_batch([Record(timestamp=int(time.time() * 1000), key=None, value=value)], producer_id=pid,
                            producer_epoch=epoch, base_sequence=0, transactional=True)
        leader = await client.leader_connection(topic, 0)
        r = await leader.request(ApiKey.PRODUCE, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 10000,
                                                  "topic_data": [{"name": topic, "partition_data": [
                                                      {"index": 0, "records": batch}]}]}, 8)
        assert r.responses[0].partition_responses[0].error_code == 0
        return pid, epoch


def read_committed(bootstrap: str, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{time.monotonic_ns()}", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    time.sleep(1)  # nothing more must come
    while (m := c.poll(0.2)) is not None:
        if not m.error():
            out.append(m.value())
    c.close()
    return out


def test_list_describe_find_hanging_and_abort(broker_process):
    node = broker_process(overrides=OVERRIDES).start()
    b = node.bootstrap
    kbroker(b, "topics", "create", "-t", "ht", "--partitions", "1")

    # a live transaction (its coordinator knows ht-0), left open for now
    live = Producer({"bootstrap.servers": b, "transactional.id": "live", "linger.ms": 0})
    live.init_transactions(30)
    live.begin_transaction()
    live.produce("ht", value=b"live-1")
    live.flush(30)
    # a hanging one: written to ht-0 behind its coordinator's back
    hang_pid, hang_epoch = asyncio.run(hanging_write(b, "hang", "ht", b"hanging"))

    listed = {r[0]: r for r in rows(kbroker(b, "transactions", "list").stdout.decode())}
    assert listed["live"][3] == "Ongoing" and listed["hang"][3] == "Empty"
    assert listed["hang"][2] == str(hang_pid) and listed["live"][1] == str(node.broker_id)
    described = rows(kbroker(b, "transactions", "describe", "--transactional-id", "live").stdout.decode())
    assert len(described) == 1 and described[0][1] == "live" and described[0][4] == "Ongoing"
    assert described[0][8] == "ht-0" and described[0][6] != "None"
    assert rows(kbroker(b, "transactions", "describe", "--transactional-id", "hang").stdout.decode())[0][7] == "None"
    missing = kbroker(b, "transactions", "describe", "--transactional-id", "nobody", expect=1)
    assert "Failed to describe transaction state of transactional-id `nobody`" in missing.stderr.decode()

    producers = {int(r[0]): r for r in rows(kbroker(b, "transactions", "describe-producers", "--topic", "ht",
                                                    "--partition", "0").stdout.decode())}
    assert len(producers) == 2 and producers[hang_pid][5] == "1"  # live's record at 0, the hanging one at 1
    live_pid = next(p for p in producers if p != hang_pid)
    assert producers[live_pid][5] == "0"

    # find-hanging needs a scope; with a zero timeout every open transaction is a candidate,
    # and only the one the coordinator does not expect to finish is hanging
    assert "requires either --topic or --broker-id" in kbroker(b, "transactions", "find-hanging",
                                                               expect=1).stderr.decode()
    time.sleep(0.05)
    found = rows(kbroker(b, "transactions", "find-hanging", "--topic", "ht", "--max-transaction-timeout", "0")
                 .stdout.decode())
    assert [(r[0], r[1], r[2], r[3], r[5]) for r in found] == [("ht", "0", str(hang_pid), str(hang_epoch), "1")]
    by_broker = rows(kbroker(b, "transactions", "find-hanging", "--broker-id", str(node.broker_id),
                             "--max-transaction-timeout", "0").stdout.decode())
    assert [r[2] for r in by_broker] == [str(hang_pid)]
    assert rows(kbroker(b, "transactions", "find-hanging", "--topic", "ht").stdout.decode()) == []  # not 15 min old

    # abort: identified, or refused with Kafka's messages
    assert "must be identified either with --start-offset" in kbroker(
        b, "transactions", "abort", "--topic", "ht", "--partition", "0", expect=1).stderr.decode()
    assert "Could not find any open transactions starting at offset 5 on partition ht-0" in kbroker(
        b, "transactions", "abort", "--topic", "ht", "--partition", "0", "--start-offset", "5", expect=1).stderr.decode()
    kbroker(b, "transactions", "abort", "--topic", "ht", "--partition", "0", "--start-offset", "1")
    assert rows(kbroker(b, "transactions", "find-hanging", "--topic", "ht", "--max-transaction-timeout", "0")
                .stdout.decode()) == []
    after = {int(r[0]): r for r in rows(kbroker(b, "transactions", "describe-producers", "--topic", "ht",
                                                "--partition", "0").stdout.decode())}
    assert after[hang_pid][5] == "None" and after[live_pid][5] == "0"

    # a second hanging transaction, aborted by producer id, epoch and coordinator epoch (-1: 0)
    pid2, epoch2 = asyncio.run(hanging_write(b, "hang2", "ht", b"hanging-2"))
    time.sleep(0.05)
    found = rows(kbroker(b, "transactions", "find-hanging", "--topic", "ht", "--partition", "0",
                         "--max-transaction-timeout", "0").stdout.decode())
    assert [r[2] for r in found] == [str(pid2)]
    assert "Missing required argument --producer-epoch" in kbroker(
        b, "transactions", "abort", "--topic", "ht", "--partition", "0", "--producer-id", str(pid2),
        expect=1).stderr.decode()
    kbroker(b, "transactions", "abort", "--topic", "ht", "--partition", "0", "--producer-id", str(pid2),
            "--producer-epoch", str(epoch2), "--coordinator-epoch", "-1")
    assert rows(kbroker(b, "transactions", "find-hanging", "--topic", "ht", "--max-transaction-timeout", "0")
                .stdout.decode()) == []

    # the live transaction commits: read_committed sees its records only
    live.produce("ht", value=b"live-2")
    live.commit_transaction(30)
    assert read_committed(b, "ht", 2) == [b"live-1", b"live-2"]
    listed = {r[0]: r for r in rows(kbroker(b, "transactions", "list").stdout.decode())}
    assert listed["live"][3] == "CompleteCommit"
