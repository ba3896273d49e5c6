"""Isolation without split brain: a controller and three brokers, each in its own network
namespace (tests/netns.py); the leader is cut from the controller and the followers while the
test's client (the root namespace) still reaches it.

The isolated leader cannot acknowledge an acks=all write (its ISR shrink needs the controller,
which it cannot reach, so the high watermark stays); the controller fences it and elects a
follower; acknowledged writes go on there. After healing, the old leader learns it is a
follower, truncates the divergent tail it appended alone (acks=1 and the unacknowledged
acks=all records) and follows; made leader again, it serves exactly the acknowledged records.
"""

from __future__ import annotations

import pytest

from controller.launcher import BrokerProcess, ControllerProcess
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection, KafkaClient
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch
from tests.netns import NetnsNetwork, netns_available

from .helpers import read_all, wait_for

pytestmark = pytest.mark.timeout(240)

SESSION_MS = 3000
PORT = 9092


async def produce(host: str, values: range, acks: int = -1, timeout_ms: int = 5000) -> tuple[int, int]:
    conn = BrokerConnection(host, PORT, client_id="test")
    await conn.connect()
    try:
        batch = build_batch([Record(value=str(i).encode(), timestamp=1) for i in values])
        [(_t, [(_p, error, base, _lat, _lso)])] = await conn.produce(acks, timeout_ms, [("iso", [(0, batch)])])
        return error, base
    finally:
        conn.close()


@pytest.fixture
def net():
    reason = netns_available()
    if reason is not None:
        pytest.fail(reason)
    with NetnsNetwork(4) as network:
        yield network


async def test_an_isolated_leader_cannot_acknowledge_and_truncates_its_tail_after_healing(net, tmp_path):
    ctl_host, *broker_hosts = net.hosts
    controller = ControllerProcess(tmp_path / "controller", PORT, 3000, {"broker.session.timeout.ms": SESSION_MS},
                                   host=ctl_host.address, prefix=ctl_host.exec_prefix())
    brokers = {i: BrokerProcess(tmp_path / f"broker-{i}", PORT, i, {
        "process.roles": "broker", "node.id": i, "controller.quorum.bootstrap.servers": controller.address,
        "controller.listener.names": "CONTROLLER", "broker.heartbeat.interval.ms": 500,
        "replica.fetch.backoff.ms": 200, "replica.lag.time.max.ms": 1500, "replica.fetch.wait.max.ms": 200},
        host=h.address, prefix=h.exec_prefix()) for i, h in zip((1, 2, 3), broker_hosts)}
    try:
        controller.start(60)
        for b in brokers.values():
            b.launch()
        for b in brokers.values():
            b.wait_ready(60)
        conn = BrokerConnection(brokers[1].host, PORT, client_id="test")
        await conn.connect()
        try:
            created = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
                "name": "iso", "num_partitions": -1, "replication_factor": -1,
                "assignments": [{"partition_index": 0, "broker_ids": [1, 2, 3]}],
                "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 10000})
        finally:
            conn.close()
        assert created.topics[0].error_code == 0, created

        async def in_sync(port_host: str, leader: int):
            p = (await partitions_of_host(port_host))[0]
            return p.leader_id == leader and sorted(p.isr_nodes) == [1, 2, 3]
        await wait_for(lambda: in_sync(brokers[2].host, 1), 20, "leader 1 with ISR [1, 2, 3]")
        assert await produce(brokers[1].host, range(0, 100)) == (ErrorCode.NONE, 0)

        # Cut broker 1 from the controller and both followers; the test still reaches it.
        net.isolate(broker_hosts[0], [ctl_host, *broker_hosts])
        error, _ = await produce(brokers[1].host, range(500, 510), acks=-1, timeout_ms=3000)
        # It waits for followers it cannot reach (its ISR shrink is never committed) until the timeout.
        assert error == ErrorCode.REQUEST_TIMED_OUT, error
        assert (await produce(brokers[1].host, range(1000, 1010), acks=1))[0] == ErrorCode.NONE  # its own tail

        async def new_leader():
            p = (await partitions_of_host(brokers[2].host))[0]
            # min.insync.replicas is 2: under load the new leader may briefly shrink its ISR to itself
            # (replica.lag.time.max.ms is 1.5 s here) until the other follower catches up again.
            return p.leader_id in (2, 3) and len(p.isr_nodes) >= 2 and p.leader_id
        leader = await wait_for(new_leader, SESSION_MS / 1000 + 30, "a new leader with an ISR of two")
        assert await produce(brokers[leader].host, range(100, 200)) == (ErrorCode.NONE, 100)

        # Heal: broker 1 becomes a follower, truncates what it appended alone, and rejoins the ISR.
        net.heal_all()
        await wait_for(lambda: in_sync(brokers[2].host, leader), 60, "broker 1 back in the ISR")
        async with KafkaClient(brokers[2].bootstrap) as client:
            results = await client.elect_leaders([("iso", 0)])
        assert results == {("iso", 0): ErrorCode.NONE}
        await wait_for(lambda: in_sync(brokers[2].host, 1), 30, "broker 1 leading again")
        assert read_all(brokers[1].bootstrap, "iso", 1)[0] == list(range(200))
        assert "truncat" in brokers[1].log_text().lower()
    finally:
        for b in brokers.values():
            b.kill()
        controller.kill()


async def partitions_of_host(host: str):
    """The partitions of "iso" as the broker at ``host`` describes them."""
    conn = BrokerConnection(host, PORT, client_id="test")
    await conn.connect()
    try:
        md = await conn.request(ApiKey.METADATA, {"topics": [{"name": "iso"}], "allow_auto_topic_creation": False},
                                version=8)
    finally:
        conn.close()
    return {p.partition_index: p for p in md.topics[0].partitions}

