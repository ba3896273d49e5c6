"""One consumer-group member as its own process, for the group compat tests:
``python group_member.py CLIENT BOOTSTRAP GROUP TOPIC`` with CLIENT one of kafka-python,
aiokafka, confluent. It subscribes (round-robin assignor, which all three clients have;
session timeout 6 s), and after every batch it polls it prints what it got and commits
synchronously; when partitions are revoked it commits first (commit-before-revoke). SIGTERM
closes it cleanly (commit, LeaveGroup). One line per event on stdout:

    A <partitions, comma separated>   partitions assigned (the whole new assignment)
    R <partition> <offset>            a record consumed
    C                                 a commit succeeded
    X                                 closed
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time

CLIENT, BOOTSTRAP, GROUP, TOPIC = sys.argv[1:5]
# the Python clients' own log (joins, assignments, errors) on stderr, which the tests drain and
# show when a member does not get where it should
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
SESSION_MS = 6000
HEARTBEAT_MS = 500
stopping = False


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def stop(*_args) -> None:
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)

# A member whose test died (killed, timed out) must not outlive it: a client left polling a
# broker that is gone spins on reconnects for ever. Exit when the parent changes, or after
# MAX_LIFETIME_S in any case (every test that starts members ends well before that).
PARENT = os.getppid()
MAX_LIFETIME_S = 600.0


def _watchdog() -> None:
    waited = 0.0
    while os.getppid() == PARENT and waited < MAX_LIFETIME_S:
        threading.Event().wait(0.5)
        waited += 0.5
    os._exit(3)


threading.Thread(target=_watchdog, daemon=True).start()


def run_kafka_python() -> None:
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=GROUP, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                             partition_assignment_strategy=[RoundRobinPartitionAssignor])

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            # kafka-python runs listeners on its IO thread, where a blocking commit is refused;
            # every polled batch is committed before the next poll, so nothing is left to commit.
            pass

        def on_partitions_assigned(self, assigned):
            out("A " + ",".join(str(tp.partition) for tp in sorted(assigned)))

    # As the group's leader, kafka-python computes the assignment with the metadata it has; if the
    # topic is not in it yet (the join answers at once with group.initial.rebalance.delay.ms=0, before
    # its first metadata response under load) it assigns nothing ("No partition metadata for topic"),
    # and kafka-python 3.0.12 does not always recover: it was seen to keep an empty assignment with
    # its metadata and assignment snapshots equal, or to hang in the SyncGroup of the rejoin that
    # follows. So the member knows the topic's partitions before it subscribes, as an application
    # started after its topic was created does.
    deadline = time.monotonic() + 30
    while not consumer.partitions_for_topic(TOPIC) and time.monotonic() < deadline:
        time.sleep(0.1)
    consumer.subscribe([TOPIC], listener=Listener())
    while not stopping:
        batches = consumer.poll(timeout_ms=200)
        for tp, records in batches.items():
            for r in records:
                out(f"R {r.partition} {r.offset}")
        if batches:
            consumer.commit()
            out("C")
    consumer.commit()
    consumer.close()
    out("X")


def run_confluent() -> None:
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
                         "heartbeat.interval.ms": HEARTBEAT_MS, "partition.assignment.strategy": "roundrobin"})

    def commit() -> None:
        try:
            consumer.commit(asynchronous=False)
            out("C")
        except KafkaException as exc:
            if exc.args[0].code() != -168:  # _NO_OFFSET: nothing new to commit
                raise

    def on_assign(c, partitions):
        out("A " + ",".join(str(tp.partition) for tp in sorted(partitions, key=lambda tp: tp.partition)))

    def on_revoke(c, partitions):
        if partitions:
            try:
                commit()
            except KafkaException as exc:
                # During close() librdkafka may refuse the revoke callback's commit with _DESTROY
                # (the handle is terminating); the commit just before close() already stored
                # every offset this member consumed, which the tests check by what others read.
                if not (stopping and exc.args[0].code() == -197):
                    raise

    consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
    while not stopping:
        messages = consumer.consume(num_messages=100, timeout=0.2)
        got = False
        for m in messages:
            if m.error():
                continue
            got = True
            out(f"R {m.partition()} {m.offset()}")
        if got:
            commit()
    commit()
    consumer.close()
    out("X")


async def run_aiokafka() -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=GROUP, auto_offset_reset="earliest",
                                enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                                heartbeat_interval_ms=HEARTBEAT_MS,
                                partition_assignment_strategy=(RoundRobinPartitionAssignor,))

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            if revoked:
                await consumer.commit()
                out("C")

        async def on_partitions_assigned(self, assigned):
            out("A " + ",".join(str(tp.partition) for tp in sorted(assigned)))

    consumer.subscribe([TOPIC], listener=Listener())
    await consumer.start()
    try:
        while not stopping:
            batches = await consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                for r in records:
                    out(f"R {r.partition} {r.offset}")
            if batches:
                await consumer.commit()
                out("C")
        await consumer.commit()
    finally:
        await consumer.stop()
    out("X")


if CLIENT == "kafka-python":
    run_kafka_python()
elif CLIENT == "confluent":
    run_confluent()
elif CLIENT == "aiokafka":
    asyncio.run(run_aiokafka())
else:
    raise SystemExit(f"unknown client {CLIENT}")
