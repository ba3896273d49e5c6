"""Coordinator failover: a controller and three broker processes; the broker leading the group's
``__consumer_offsets`` partition is killed -9; the controller elects another leader, which loads
the group from its replica of the partition, and the members go on from their commits."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from controller.launcher import LocalCluster
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from tests.compat.test_groups import PARTITIONS, Member, all_offsets, committed, produce_per_partition, wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, 3,
                     broker_props={"broker.heartbeat.interval.ms": 500, "replica.fetch.backoff.ms": 200,
                                   "replica.lag.time.max.ms": 10000, "offsets.topic.num.partitions": 5,
                                   "group.initial.rebalance.delay.ms": 0},
                     controller_props={"broker.session.timeout.ms": 3000, "default.replication.factor": 3})
    try:
        c.start()
        yield c
    finally:
        c.kill()


def find_coordinator(cluster, group: str, exclude: int | None = None) -> int:
    """The node id FindCoordinator names for ``group``, asked of a live broker."""
    async def ask() -> int:
        deadline = time.monotonic() + 60
        while True:
            for node_id, broker in cluster.brokers.items():
                if node_id == exclude or not broker.running:
                    continue
                conn = BrokerConnection("127.0.0.1", broker.port, client_id="test")
                try:
                    await conn.connect()
                    r = await conn.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0}, 2)
                finally:
                    conn.close()
                if r.error_code == 0 and r.node_id != exclude:
                    return r.node_id
            assert time.monotonic() < deadline, "no coordinator found"
            await asyncio.sleep(0.1)
    return asyncio.run(ask())


def test_a_new_coordinator_loads_the_group_and_the_members_go_on_from_their_commits(cluster, kcat_path):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic("fo", PARTITIONS, 3)], operation_timeout=30).values():
        f.result(30)
    produce_per_partition(kcat_path, cluster.bootstrap, "fo", 0, 30)
    members = [Member("confluent", cluster.bootstrap, "fog", "fo") for _ in range(2)]
    try:
        wait_for(lambda: {r for m in members for r in m.records} == all_offsets(0, 30), members, 90, "180 records")
        wait_for(lambda: committed(cluster.bootstrap, "fog", "fo") == {p: 30 for p in range(PARTITIONS)}, members, 30,
                 "the commits")
        old = find_coordinator(cluster, "fog")
        cluster.brokers[old].kill()
        new = find_coordinator(cluster, "fog", exclude=old)
        assert new != old
        produce_per_partition(kcat_path, ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != old),
                              "fo", 30, 30)
        wait_for(lambda: {r for m in members for r in m.records} >= all_offsets(0, 60), members, 90,
                 "the records produced after the failover")
        consumed = [r for m in members for r in m.records]
        # the new coordinator served the committed offsets: nothing before them was consumed again
        assert len(consumed) == len(set(consumed)) == 360
        log = cluster.brokers[new].log_text()
        assert "Loading group metadata for fog" in log
        for m in members:
            m.close()
        assert committed(cluster.bootstrap, "fog", "fo") == {p: 60 for p in range(PARTITIONS)}
    finally:
        for m in members:
            m.kill()
