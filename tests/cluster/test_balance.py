"""``kbroker cluster balance`` against a controller and four broker processes (racks a, b, a, b):
a topic created on brokers 1-3, two of its partitions with both replicas in rack a, and broker 4
joining empty. Without --execute nothing changes; --execute moves replicas onto broker 4 until
the counts are within one, spreads every partition over both racks, elects the new preferred
leaders, and every record written before is still there, in order; then the cluster is
balanced: a second run has nothing to move."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from confluent_kafka import Producer

from controller.launcher import LocalCluster
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from tests.cli.test_cli import kbroker

from .helpers import partitions_of, read_all, start_some

pytestmark = pytest.mark.timeout(300)

BROKER_PROPS = {"broker.heartbeat.interval.ms": 500, "replica.fetch.backoff.ms": 200, "replica.lag.time.max.ms": 3000}
RACKS = {1: "a", 2: "b", 3: "a", 4: "b"}
TOPIC = "spread"
# 12 partitions RF 2 on brokers 1-3: 24 replicas, 8 each; [1, 3] and [3, 1] keep both in rack a
ASSIGNMENT = [[1, 2], [2, 3], [3, 1], [1, 3], [2, 1], [3, 2], [1, 2], [2, 3], [3, 1], [3, 1], [2, 1], [3, 2]]


async def create(cluster) -> None:
    conn = BrokerConnection("127.0.0.1", cluster.brokers[1].port, client_id="test")
    await conn.connect()
    try:
        resp = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": TOPIC, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": p, "broker_ids": r} for p, r in enumerate(ASSIGNMENT)],
            "configs": []}], "timeout_ms": 30000, "validate_only": False}, version=4)
        assert resp.topics[0].error_code == 0, resp
    finally:
        conn.close()


def produce(bootstrap: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    errors = []
    for i in range(n):
        producer.produce(TOPIC, value=str(i).encode(), partition=i % len(ASSIGNMENT),
                         on_delivery=lambda err, _m: err is not None and errors.append(err))
    assert producer.flush(60) == 0 and not errors, errors


async def test_balance_proposes_then_moves_onto_a_new_broker_and_spreads_racks(tmp_path):
    cluster = LocalCluster(tmp_path / "c", 4, broker_props=BROKER_PROPS,
                           controller_props={"broker.session.timeout.ms": 3000,
                                             # the command's moves only: broker 4 joining would
                                             # start the node_add autobalancer beside it
                                             "partition.autobalancing.mode": "off"})
    for b, rack in RACKS.items():
        cluster.brokers[b].overrides["broker.rack"] = rack
    try:
        start_some(cluster, [1, 2, 3])
        bootstrap = cluster.brokers[1].bootstrap
        await create(cluster)
        produce(bootstrap, 1200)
        cluster.brokers[4].start()
        cluster.wait_live([1, 2, 3, 4])

        # proposal only: a plan is printed and written, nothing moves
        plan_file = tmp_path / "plan.json"
        out = kbroker(bootstrap, "cluster", "balance", "--output-json-file", str(plan_file)).stdout.decode()
        assert "Proposed partition reassignment configuration" in out, out
        plan = {p["partition"]: p["replicas"] for p in json.loads(plan_file.read_text())["partitions"]}
        assert plan and any(4 in r for r in plan.values()), plan
        assert {p: part.replica_nodes for p, part in (await partitions_of(cluster.brokers[1].port, TOPIC)).items()} \
            == dict(enumerate(ASSIGNMENT))

        out = kbroker(bootstrap, "cluster", "balance", "--execute", "--timeout", "120").stdout.decode()
        assert "Balanced." in out, out
        parts = await partitions_of(cluster.brokers[1].port, TOPIC)
        replicas = Counter(b for p in parts.values() for b in p.replica_nodes)
        assert max(replicas.values()) - min(replicas.values()) <= 1 and set(replicas) == {1, 2, 3, 4}, replicas
        for p in parts.values():
            assert {RACKS[b] for b in p.replica_nodes} == {"a", "b"}, p
            assert p.leader_id == p.replica_nodes[0], p  # the preferred leader leads
        leaders = Counter(p.leader_id for p in parts.values())
        assert max(leaders.values()) - min(leaders.values()) <= 1 and len(leaders) == 4, leaders
        # what the plan proposed is what happened (the moves were decided once)
        assert {p: part.replica_nodes for p, part in parts.items() if p in plan} == plan
        read = read_all(bootstrap, TOPIC, len(ASSIGNMENT))
        assert read == {p: list(range(p, 1200, len(ASSIGNMENT))) for p in range(len(ASSIGNMENT))}

        again = kbroker(bootstrap, "cluster", "balance").stdout.decode()
        assert "The cluster is balanced: nothing to move." in again, again
    finally:
        cluster.kill()
