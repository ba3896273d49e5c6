"""Partition reassignment (KIP-455) on a controller and four broker processes, driven by
kafka-python's KafkaAdminClient (alter_partition_reassignments, list_partition_reassignments)
under confluent-kafka's idempotent acks=all load: every replica of a 12-partition RF=3 topic
moves from brokers 1-3 to 2-4 while a broker, or the controller, is kill -9'd midway; the move
completes, nothing is listed as moving any more, and every acknowledged record is there once,
in order. Bad targets get Kafka's answers and change nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import InvalidReplicationAssignmentError, UnknownTopicOrPartitionError

from controller.launcher import LocalCluster
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from tests.cli.test_cli import KBROKER

from .helpers import NumberedProducer, read_all, resolved, topic_metadata, wait_for

pytestmark = pytest.mark.timeout(300)

SESSION_MS = 3000
BROKER_PROPS = {"broker.heartbeat.interval.ms": 500, "replica.fetch.backoff.ms": 200, "replica.lag.time.max.ms": 3000,
                "min.insync.replicas": 2}
TOPIC = "moving"
PARTITIONS = 12


def start_cluster(tmp_path) -> LocalCluster:
    return LocalCluster(tmp_path, 4, broker_props=BROKER_PROPS,
                        controller_props={"broker.session.timeout.ms": SESSION_MS,
                                          # the operator's moves only (no autobalancer beside them)
                                          "partition.autobalancing.mode": "off"}).start()


def kafka_admin(cluster, broker_id: int = 1) -> KafkaAdminClient:
    """Every broker names the lowest live broker, 1, as the controller (as a KRaft broker names a
    live broker): the faults below never hit broker 1, kafka-python's controller."""
    return KafkaAdminClient(bootstrap_servers=cluster.brokers[broker_id].bootstrap, request_timeout_ms=30000)


async def create_on_first_three(cluster) -> None:
    """12 partitions, RF 3, every replica on brokers 1-3 (a rotating assignment)."""
    brokers = [1, 2, 3]
    assignment = [{"partition_index": p, "broker_ids": brokers[p % 3:] + brokers[:p % 3]} for p in range(PARTITIONS)]
    conn = BrokerConnection("127.0.0.1", cluster.brokers[1].port, client_id="test")
    await conn.connect()
    try:
        resp = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": TOPIC, "num_partitions": -1, "replication_factor": -1, "assignments": assignment,
            "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 30000, "validate_only": False},
            version=4)
        assert resp.topics[0].error_code == 0, resp
    finally:
        conn.close()


async def replica_sets(cluster, port: int | None = None) -> dict[int, list[int]]:
    _md, t = await topic_metadata(port or cluster.brokers[4].port, TOPIC)
    return {p.partition_index: list(p.replica_nodes) for p in t.partitions}


def live_logs(cluster, broker_id: int) -> list[str]:
    return sorted(d.name for d in cluster.brokers[broker_id].log_dir.glob(f"{TOPIC}-*") if d.name[len(TOPIC) + 1:].isdigit())


def target(p: int) -> list[int]:
    brokers = [2, 3, 4]
    return brokers[p % 3:] + brokers[:p % 3]


def plan() -> dict[TopicPartition, list[int]]:
    return {TopicPartition(TOPIC, p): target(p) for p in range(PARTITIONS)}


async def moved(cluster) -> bool:
    sets = await replica_sets(cluster)
    return sets == {p: target(p) for p in range(PARTITIONS)}


def check_every_acked_record_once_in_order(cluster, producer: NumberedProducer) -> None:
    assert not producer.errors, producer.errors[:5]
    read = read_all(cluster.bootstrap, TOPIC, PARTITIONS)
    for p in range(PARTITIONS):
        acked = producer.acked[p]
        assert acked, f"nothing acknowledged on partition {p}"
        assert len(set(read[p])) == len(read[p]), f"duplicates in partition {p}"
        assert read[p] == sorted(read[p]), f"partition {p} out of order"
        missing = set(acked) - set(read[p])
        assert not missing, f"partition {p} lost {len(missing)} acknowledged records, e.g. {sorted(missing)[:5]}"


async def run_move_with_a_fault(tmp_path, fault) -> None:
    cluster = start_cluster(tmp_path)
    try:
        await create_on_first_three(cluster)
        admin = kafka_admin(cluster)
        try:
            with NumberedProducer(cluster.bootstrap, TOPIC, PARTITIONS, max_seconds=120) as producer:
                await wait_for(lambda: resolved(producer.count > 3000), 60, "records acknowledged before the move")
                result = admin.alter_partition_reassignments(plan())
                assert result == {tp: None for tp in plan()}, result
                await fault(cluster, admin)
                await wait_for(lambda: moved(cluster), 120, "every partition on brokers 2-4")
                assert admin.list_partition_reassignments() == {}
                count = producer.count
                await wait_for(lambda: resolved(producer.count > count + 500), 60, "records acknowledged after the move")
            check_every_acked_record_once_in_order(cluster, producer)
        finally:
            admin.close()
        # broker 1 holds none of the topic any more: its replicas were stopped and deleted (a
        # deleted log's directory is renamed <name>.<id>-delete first, gone after file.delete.delay.ms)
        assert not live_logs(cluster, 1)
    finally:
        cluster.kill()


async def test_move_survives_a_broker_kill_9_midway(tmp_path):
    async def kill_the_new_broker(cluster, admin):
        # broker 4 gets every new replica: killed, no move can complete until it is back
        cluster.brokers[4].signal(signal.SIGKILL)
        cluster.brokers[4].proc.wait(10)
        ongoing = admin.list_partition_reassignments()
        assert len(ongoing) == PARTITIONS, ongoing
        first = ongoing[TopicPartition(TOPIC, 0)]
        assert first["adding_replicas"] == [4] and first["removing_replicas"] == [1], first
        time.sleep(SESSION_MS / 1000 + 1)  # fenced meanwhile
        cluster.brokers[4].start()
    await run_move_with_a_fault(tmp_path, kill_the_new_broker)


async def test_move_survives_a_controller_kill_9_midway(tmp_path):
    async def kill_the_controller(cluster, admin):
        cluster.brokers[4].signal(signal.SIGSTOP)  # holds every move back while the controller dies
        try:
            assert len(admin.list_partition_reassignments()) == PARTITIONS
            cluster.controller.kill()
        finally:
            cluster.brokers[4].signal(signal.SIGCONT)
        time.sleep(1)
        cluster.controller.start()
    await run_move_with_a_fault(tmp_path, kill_the_controller)


async def test_bad_targets_get_kafkas_answers_and_change_nothing(tmp_path):
    cluster = start_cluster(tmp_path)
    try:
        await create_on_first_three(cluster)
        before = await replica_sets(cluster)
        admin = kafka_admin(cluster)
        try:
            result = admin.alter_partition_reassignments({
                TopicPartition(TOPIC, 0): [1, 2, 9], TopicPartition(TOPIC, 1): [2, 2, 3],
                TopicPartition(TOPIC, 99): [1, 2, 3], TopicPartition("nope", 0): [1, 2, 3]})
            assert result == {TopicPartition(TOPIC, 0): InvalidReplicationAssignmentError,
                              TopicPartition(TOPIC, 1): InvalidReplicationAssignmentError,
                              TopicPartition(TOPIC, 99): UnknownTopicOrPartitionError,
                              TopicPartition("nope", 0): UnknownTopicOrPartitionError}, result
            assert admin.list_partition_reassignments() == {}
        finally:
            admin.close()
        assert await replica_sets(cluster) == before
    finally:
        cluster.kill()


CANCELLED = "cancelled"


async def isr_and_replicas(port: int, topic: str) -> dict[int, tuple[list[int], list[int]]]:
    _md, t = await topic_metadata(port, topic)
    return {p.partition_index: (list(p.replica_nodes), sorted(p.isr_nodes)) for p in t.partitions}


async def test_cancel_midway_puts_the_replicas_back_and_deletes_the_added_ones(tmp_path):
    """4 partitions RF 2 on brokers 1-2 move to 3, 4, 1 while broker 3 is down (kill -9,
    fenced: a registered broker is a valid target), so no move can complete; broker 4 creates
    its replicas and joins the ISRs. Cancelled (kafka-python, a None target): the replica sets
    and ISRs are 1-2 again (as sets: Kafka's PartitionReassignmentRevert keeps the order of
    the moving replica list, target then removing, less the added ones, so [2, 1] comes back
    as [1, 2]), nothing is listed as moving, broker 4's replicas are deleted from
    its disk, and under idempotent acks=all load every acknowledged record is there once, in order."""
    cluster = start_cluster(tmp_path)
    try:
        conn = BrokerConnection("127.0.0.1", cluster.brokers[1].port, client_id="test")
        await conn.connect()
        try:
            resp = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
                "name": CANCELLED, "num_partitions": -1, "replication_factor": -1,
                "assignments": [{"partition_index": p, "broker_ids": [1, 2] if p % 2 else [2, 1]} for p in range(4)],
                "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 30000,
                "validate_only": False}, version=4)
            assert resp.topics[0].error_code == 0, resp
        finally:
            conn.close()
        original = await isr_and_replicas(cluster.brokers[1].port, CANCELLED)
        assert all(sorted(r) == isr == [1, 2] for r, isr in original.values()), original
        cluster.brokers[3].signal(signal.SIGKILL)
        cluster.brokers[3].proc.wait(10)

        async def broker_3_fenced() -> bool:
            conn = BrokerConnection("127.0.0.1", cluster.brokers[1].port, client_id="test")
            await conn.connect()
            try:
                md = await conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False}, version=8)
            finally:
                conn.close()
            return 3 not in {b.node_id for b in md.brokers}
        # kafka-python's admin asks any broker Metadata has: not one just killed (connection refused, not retried)
        await wait_for(broker_3_fenced, 30, "broker 3 fenced")
        admin = kafka_admin(cluster)
        try:
            with NumberedProducer(cluster.bootstrap, CANCELLED, 4, max_seconds=120) as producer:
                await wait_for(lambda: resolved(producer.count > 1000), 60, "records acknowledged before the move")
                moves = {TopicPartition(CANCELLED, p): [3, 4, 1] for p in range(4)}
                assert admin.alter_partition_reassignments(moves) == {tp: None for tp in moves}

                async def broker_4_in_sync() -> bool:
                    state = await isr_and_replicas(cluster.brokers[1].port, CANCELLED)
                    return all(4 in isr for _r, isr in state.values())
                await wait_for(broker_4_in_sync, 60, "broker 4's new replicas in the ISRs")
                ongoing = admin.list_partition_reassignments()
                assert {tp: (r["adding_replicas"], r["removing_replicas"]) for tp, r in ongoing.items()} == \
                    {tp: ([3, 4], [2]) for tp in moves}, ongoing
                assert len(live_logs_of(cluster, 4, CANCELLED)) == 4
                # kbroker cluster status shows the moves in progress (and exits 1: broker 3 is down)
                cluster.save_state()
                status = subprocess.run([KBROKER, "cluster", "status", "--dir", str(cluster.directory)],
                                        capture_output=True, env=dict(os.environ, COLUMNS="400"), timeout=60)
                text = status.stdout.decode()
                assert status.returncode == 1, (status.returncode, text, status.stderr)
                assert "4 partition(s) being reassigned" in text and "(adding 3,4; removing 2)" in text, text
                assert "reassignment" in text and "left" in text, text

                assert admin.alter_partition_reassignments({tp: None for tp in moves}) == {tp: None for tp in moves}

                async def back() -> bool:
                    now = await isr_and_replicas(cluster.brokers[1].port, CANCELLED)
                    return {p: (sorted(r), isr) for p, (r, isr) in now.items()} == \
                        {p: (sorted(r), isr) for p, (r, isr) in original.items()}
                await wait_for(back, 60, "the original replica sets and ISRs")
                assert admin.list_partition_reassignments() == {}
                count = producer.count
                await wait_for(lambda: resolved(producer.count > count + 500), 60, "records acknowledged after")
            assert not producer.errors, producer.errors[:5]
            read = read_all(cluster.bootstrap, CANCELLED, 4)
            for p in range(4):
                assert len(set(read[p])) == len(read[p]) and read[p] == sorted(read[p]), p
                assert not set(producer.acked[p]) - set(read[p]), f"partition {p} lost acknowledged records"
        finally:
            admin.close()
        await wait_for(lambda: resolved(not live_logs_of(cluster, 4, CANCELLED)), 30,
                       "broker 4's added replicas deleted")
        assert len(live_logs_of(cluster, 1, CANCELLED)) == len(live_logs_of(cluster, 2, CANCELLED)) == 4
    finally:
        cluster.kill()


def live_logs_of(cluster, broker_id: int, topic: str) -> list[str]:
    return sorted(d.name for d in cluster.brokers[broker_id].log_dir.glob(f"{topic}-*")
                  if d.name[len(topic) + 1:].isdigit())
