"""Replication under the controller process: three broker processes registered with a real
controller. ISR changes go through AlterPartition and take effect when the controller commits
them (its own view, asked directly, agrees with the leader's); a restarted controller has a new
epoch, and a request in the old one changes nothing on a broker."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from controller.launcher import LocalCluster, metadata
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, 3, broker_props={"replica.lag.time.max.ms": 1500, "replica.fetch.backoff.ms": 200,
                                                "broker.heartbeat.interval.ms": 500})
    try:
        c.start()
        yield c
    finally:
        c.kill()


async def connect(port: int) -> BrokerConnection:
    conn = BrokerConnection("127.0.0.1", port, client_id="test")
    await conn.connect()
    return conn


async def create(cluster, name: str, assignment: list[int], configs: dict) -> None:
    conn = await connect(cluster.brokers[1].port)
    try:
        resp = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": name, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": assignment}],
            "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "timeout_ms": 10000})
    finally:
        conn.close()
    assert resp.topics[0].error_code == 0, resp


async def produce(port: int, topic: str, n: int, acks: int = -1) -> tuple[int, int]:
    conn = await connect(port)
    try:
        batch = build_batch([Record(value=b"v", timestamp=1)] * n)
        [(_t, [(_p, error, base, _lat, _lso)])] = await conn.produce(acks, 5000, [(topic, [(0, batch)])])
        return error, base
    finally:
        conn.close()


async def isr(port: int, topic: str) -> list[int]:
    conn = await connect(port)
    try:
        md = await conn.request(ApiKey.METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
                                version=8)
    finally:
        conn.close()
    return sorted(md.topics[0].partitions[0].isr_nodes)


async def wait_isr(cluster, topic: str, expected: list[int], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        # The leader's view and the controller's (its own Metadata) must both show it.
        leader_view = await isr(cluster.brokers[1].port, topic)
        controller_view = await isr(cluster.controller.port, topic)
        if leader_view == controller_view == expected:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"ISR {leader_view} (leader) / {controller_view} (controller), expected {expected}")
        await asyncio.sleep(0.05)


async def test_isr_shrinks_and_grows_through_the_controller(cluster):
    await create(cluster, "rep", [1, 2, 3], {"min.insync.replicas": "2"})
    leader = cluster.brokers[1].port
    assert await produce(leader, "rep", 10) == (ErrorCode.NONE, 0)
    b2, b3 = cluster.brokers[2], cluster.brokers[3]
    b3.signal(signal.SIGSTOP)
    try:
        assert (await produce(leader, "rep", 10, acks=1))[0] == ErrorCode.NONE  # broker 3 now lags
        await wait_isr(cluster, "rep", [1, 2])
        assert await produce(leader, "rep", 10) == (ErrorCode.NONE, 20)  # acks=all goes on with ISR [1, 2]
        b2.signal(signal.SIGSTOP)
        try:
            assert (await produce(leader, "rep", 5, acks=1))[0] == ErrorCode.NONE
            await wait_isr(cluster, "rep", [1])
            assert (await produce(leader, "rep", 10))[0] == ErrorCode.NOT_ENOUGH_REPLICAS
        finally:
            b2.signal(signal.SIGCONT)
    finally:
        b3.signal(signal.SIGCONT)
    await wait_isr(cluster, "rep", [1, 2, 3])
    assert await produce(leader, "rep", 10) == (ErrorCode.NONE, 35)


async def test_a_restarted_controller_has_a_new_epoch_and_the_old_one_is_refused(cluster):
    await create(cluster, "e", [2, 3, 1], {})
    conn = await connect(cluster.brokers[2].port)
    try:
        before = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {"replica_id": -2, "topics": [
            {"topic": "e", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
    finally:
        conn.close()
    assert before.topics[0].partitions[0].error_code == 0
    assert cluster.controller.stop() == 0
    cluster.controller.start()
    cluster.wait_live()
    await create(cluster, "after", [1, 2, 3], {})  # the new controller works with the same brokers
    assert metadata(cluster.controller.port).controller_id == cluster.controller.node_id
    # A zombie of the first controller (epoch 0) tries to move the leadership: refused, nothing changes.
    conn = await connect(cluster.brokers[2].port)
    try:
        stale = await conn.request(ApiKey.LEADER_AND_ISR, {
            "controller_id": cluster.controller.node_id, "controller_epoch": 0, "broker_epoch": -1, "type": 1,
            "topic_states": [{"topic_name": "e", "topic_id": None, "partition_states": [
                {"partition_index": 0, "controller_epoch": 0, "leader": 3, "leader_epoch": 99, "isr": [3],
                 "partition_epoch": 99, "replicas": [2, 3, 1]}]}],
            "live_leaders": []}, version=4)
        assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
        stale_md = await conn.request(ApiKey.UPDATE_METADATA, {
            "controller_id": cluster.controller.node_id, "controller_epoch": 0, "broker_epoch": -1,
            "topic_states": [], "live_brokers": []}, version=7)
        assert stale_md.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    finally:
        conn.close()
    assert (await produce(cluster.brokers[2].port, "e", 3))[0] == ErrorCode.NONE  # broker 2 still leads
