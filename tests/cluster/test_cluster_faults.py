"""Faults of a controller and three broker processes, driven by real clients
(confluent-kafka's producer and consumer, kbroker's own connection for raw requests):

* every ISR member down: the partition goes offline (leader -1, producers get a retriable
  error) and an out-of-sync replica that comes back is not elected; an ISR member that comes
  back leads, with every acknowledged record;
* a broker's SIGTERM moves its leaderships before it exits, and after its restart the
  controller's periodic rebalance (auto.leader.rebalance.enable) gives them back;
* the controller kill -9'd mid-load: produce and consume go on while it is down; after its
  restart no topic, assignment or leader epoch is lost, its epoch has grown, and a request
  in the old epoch changes nothing.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time

import pytest
from confluent_kafka.admin import NewTopic

from controller.launcher import LocalCluster
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch

from .helpers import NumberedProducer, admin, partitions_of, read_all, resolved, wait_for, wait_futures

pytestmark = pytest.mark.timeout(240)

SESSION_MS = 3000
BROKER_PROPS = {"broker.heartbeat.interval.ms": 500, "replica.fetch.backoff.ms": 200, "replica.lag.time.max.ms": 1500}


def start_cluster(tmp_path, **controller_props) -> LocalCluster:
    return LocalCluster(tmp_path, 3, broker_props=BROKER_PROPS,
                        controller_props={"broker.session.timeout.ms": SESSION_MS, **controller_props}).start()


@pytest.fixture
def cluster(tmp_path):
    c = start_cluster(tmp_path)
    try:
        yield c
    finally:
        c.kill()


async def produce(port: int, topic: str, values: range, acks: int = -1) -> tuple[int, int]:
    """One batch of numbered records to partition 0 through the broker on ``port``: (error, base offset)."""
    conn = BrokerConnection("127.0.0.1", port, client_id="test")
    await conn.connect()
    try:
        batch = build_batch([Record(value=str(i).encode(), timestamp=1) for i in values])
        [(_t, [(_p, error, base, _lat, _lso)])] = await conn.produce(acks, 5000, [(topic, [(0, batch)])])
        return error, base
    finally:
        conn.close()


async def produce_acked(port: int, topic: str, values: range) -> int:
    """``produce`` until acknowledged: NOT_ENOUGH_REPLICAS (a follower of a loaded machine
    briefly out of the ISR) is refused before the append, so a retry adds no duplicate.
    Returns the base offset."""
    deadline = time.monotonic() + 30
    while True:
        error, base = await produce(port, topic, values)
        if error == ErrorCode.NONE:
            return base
        assert error == ErrorCode.NOT_ENOUGH_REPLICAS and time.monotonic() < deadline, error
        await asyncio.sleep(0.2)


async def test_all_isr_members_down_leaves_the_partition_offline_until_one_returns(cluster):
    # (confluent-kafka 2.16's NewTopic refuses a replica assignment: CreateTopics by hand.)
    conn = BrokerConnection("127.0.0.1", cluster.brokers[1].port, client_id="test")
    await conn.connect()
    try:
        created = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": "off", "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": [1, 2, 3]}],
            "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 10000})
    finally:
        conn.close()
    assert created.topics[0].error_code == 0, created
    controller = cluster.controller.port

    async def isr_is(members):
        parts = await partitions_of(controller, "off")
        return bool(parts) and sorted(parts[0].isr_nodes) == members
    await wait_for(lambda: isr_is([1, 2, 3]), 20, "ISR [1, 2, 3]")
    assert await produce_acked(cluster.brokers[1].port, "off", range(0, 100)) == 0

    # Broker 3 dies and leaves the ISR; records 100-149 are acknowledged by 1 and 2 only.
    cluster.brokers[3].kill()
    await wait_for(lambda: isr_is([1, 2]), 20, "ISR [1, 2]")
    assert await produce_acked(cluster.brokers[1].port, "off", range(100, 150)) == 100

    # Both ISR members die: offline, no leader.
    cluster.brokers[1].kill()
    cluster.brokers[2].kill()

    async def offline():
        p = (await partitions_of(controller, "off"))[0]
        return p.leader_id == -1 and p
    p = await wait_for(offline, SESSION_MS / 1000 + 10, "the partition to go offline")
    last_isr = list(p.isr_nodes)
    assert last_isr and set(last_isr) <= {1, 2}, last_isr  # the ISR keeps who had every record

    # The out-of-sync replica returns: it is live, but nothing is elected from it (unclean
    # election is off); its producers get a retriable error.
    b3 = cluster.brokers[3].start(60)
    cluster.wait_live([3])
    deadline = time.monotonic() + SESSION_MS / 1000  # a few heartbeat rounds of a live broker 3
    while time.monotonic() < deadline:
        assert (await partitions_of(controller, "off"))[0].leader_id == -1
        assert (await partitions_of(b3.port, "off"))[0].leader_id == -1
        await asyncio.sleep(0.2)
    error, _ = await produce(b3.port, "off", range(150, 151))
    assert error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE), error

    # An ISR member returns: it leads, with every acknowledged record.
    back = last_isr[0]
    cluster.brokers[back].start(60)

    async def led_by_it():
        return (await partitions_of(controller, "off"))[0].leader_id == back
    await wait_for(led_by_it, 30, f"broker {back} to lead")
    assert read_all(cluster.brokers[back].bootstrap, "off", 1)[0] == list(range(150))


async def test_sigterm_moves_leaderships_and_the_rebalance_gives_them_back_after_the_restart(tmp_path):
    cluster = start_cluster(tmp_path, **{"auto.leader.rebalance.enable": "true",
                                         "leader.imbalance.check.interval.seconds": 1})
    try:
        client = admin(cluster)
        wait_futures(client.create_topics([NewTopic("pref", 3, 3)]))
        port = cluster.brokers[1].port

        async def in_sync_with_preferred_leaders():
            parts = await partitions_of(port, "pref")
            return (len(parts) == 3 and all(sorted(p.isr_nodes) == [1, 2, 3] for p in parts.values())
                    and all(p.leader_id == p.replica_nodes[0] for p in parts.values()) and parts)
        parts = await wait_for(in_sync_with_preferred_leaders, 20, "preferred leaders in sync")
        led_by_2 = sorted(i for i, p in parts.items() if p.leader_id == 2)
        assert led_by_2

        b2 = cluster.brokers[2]
        b2.signal(signal.SIGTERM)
        assert b2.proc.wait(30) == 0
        # Moved before it exited, not after a session: the controller let it go only once it led
        # nothing. The other brokers learn the new leaders from the controller's LeaderAndIsr and
        # UpdateMetadata, which may still be on their way.
        parts = await partitions_of(cluster.controller.port, "pref")
        assert all(p.leader_id in (1, 3) for p in parts.values()), parts

        async def moved_on_broker_1():
            return all(p.leader_id in (1, 3) for p in (await partitions_of(port, "pref")).values())
        await wait_for(moved_on_broker_1, 20, "broker 1 to see the leaderships moved")

        b2.start(60)
        await wait_for(in_sync_with_preferred_leaders, 30, "broker 2 leading its preferred partitions again")
    finally:
        cluster.kill()


def claimed_epochs(cluster) -> list[int]:
    return [int(e) for e in re.findall(r"claimed controller epoch (\d+)", cluster.controller.log_text())]


async def test_controller_kill_9_mid_load_loses_nothing_and_its_old_epoch_is_refused(cluster):
    client = admin(cluster)
    wait_futures(client.create_topics([NewTopic("ck", 3, 3, config={"min.insync.replicas": "2"})]))
    controller = cluster.controller.port
    await wait_for(lambda: partitions_of(controller, "ck"), 20, "the topic")
    with NumberedProducer(cluster.bootstrap, "ck", 3) as producer:
        await wait_for(lambda: resolved(producer.count > 500), 30, "records to flow")
        [old_epoch] = claimed_epochs(cluster)
        before = {i: (list(p.replica_nodes), p.leader_id, p.leader_epoch)
                  for i, p in (await partitions_of(controller, "ck")).items()}

        cluster.controller.kill()
        # Produce and consume go on without it.
        count = producer.count
        await wait_for(lambda: resolved(producer.count > count + 2000), 60, "records acknowledged without a controller")
        read = read_all(cluster.bootstrap, "ck", 3)
        assert sum(len(v) for v in read.values()) >= count
        for p in range(3):
            assert read[p] == producer.acked[p][:len(read[p])]

        cluster.controller.start(60)
        cluster.wait_live()
        [first, new_epoch] = claimed_epochs(cluster)
        assert first == old_epoch and new_epoch > old_epoch
        after = {i: (list(p.replica_nodes), p.leader_id, p.leader_epoch)
                 for i, p in (await partitions_of(controller, "ck")).items()}
        assert after == before
        count = producer.count
        await wait_for(lambda: resolved(producer.count > count + 500), 60, "the producer to go on")

        # A zombie in the old epoch tries to move a leadership: refused, nothing changes.
        leader = before[0][1]
        conn = BrokerConnection("127.0.0.1", cluster.brokers[leader].port, client_id="zombie")
        await conn.connect()
        try:
            stale = await conn.request(ApiKey.LEADER_AND_ISR, {
                "controller_id": cluster.controller.node_id, "controller_epoch": old_epoch, "broker_epoch": -1,
                "type": 1, "topic_states": [{"topic_name": "ck", "topic_id": None, "partition_states": [
                    {"partition_index": 0, "controller_epoch": old_epoch, "leader": -1, "leader_epoch": 999,
                     "isr": [], "partition_epoch": 999, "replicas": before[0][0]}]}],
                "live_leaders": []}, version=4)
        finally:
            conn.close()
        assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
        assert (await partitions_of(cluster.brokers[leader].port, "ck"))[0].leader_id == leader
    assert producer.unflushed == 0 and producer.errors == []
    read = read_all(cluster.bootstrap, "ck", 3)
    assert all(read[p] == producer.acked[p] for p in range(3))
