"""``kbroker cluster reassign`` (kafka-reassign-partitions.sh's plans: --generate, --execute,
--verify, --list, --cancel) and ``kbroker cluster decommission`` against a controller and four
broker processes: a topic moves off broker 1 by a generated plan; broker 2 is emptied, stopped
and unregistered (UnregisterBroker); then a decommission that would leave a partition below its
min.insync.replicas (too few brokers left to keep its replication factor) is refused, naming
it, and moves nothing."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from controller.launcher import LocalCluster
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from protocol.errors import ErrorCode
from tests.cli.test_cli import KBROKER, kbroker

from .helpers import wait_for

pytestmark = pytest.mark.timeout(300)

BROKER_PROPS = {"broker.heartbeat.interval.ms": 500, "replica.fetch.backoff.ms": 200, "replica.lag.time.max.ms": 3000}


async def create(cluster, name: str, assignment: list[list[int]], min_isr: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    conn = BrokerConnection("127.0.0.1", cluster.brokers[1].port, client_id="test")
    await conn.connect()
    try:
        resp = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": name, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": p, "broker_ids": r} for p, r in enumerate(assignment)],
            "configs": [{"name": k, "value": v} for k, v in {"min.insync.replicas": str(min_isr), **(configs or {})}.items()]}],
            "timeout_ms": 30000,
            "validate_only": False}, version=4)
        assert resp.topics[0].error_code == 0, resp
    finally:
        conn.close()


async def unregister(cluster, broker_id: int) -> int:
    conn = BrokerConnection("127.0.0.1", cluster.brokers[1].port, client_id="test")
    await conn.connect()
    try:
        return (await conn.request(ApiKey.UNREGISTER_BROKER, {"broker_id": broker_id})).error_code
    finally:
        conn.close()


def replicas_of(bootstrap: str, topics_file) -> dict[int, list[int]]:
    """The current assignment, as --generate prints it first."""
    plan = json.loads(kbroker(bootstrap, "cluster", "reassign", "--generate", "--topics-to-move-json-file",
                              str(topics_file), "--broker-list", "1,2,3,4").stdout.decode().split("\n")[1])
    return {p["partition"]: p["replicas"] for p in plan["partitions"]}


async def test_reassign_by_plan_then_decommission_and_unregister(tmp_path):
    cluster = LocalCluster(tmp_path / "c", 4, broker_props=BROKER_PROPS,
                           controller_props={"broker.session.timeout.ms": 3000,
                                             # the operator's moves only: an unregistration would
                                             # start the node_add autobalancer beside them
                                             "partition.autobalancing.mode": "off"}).start()
    bootstrap = cluster.bootstrap
    try:
        await create(cluster, "ops", [[1, 2], [2, 3], [3, 1], [1, 3], [2, 1], [3, 2]])
        await create(cluster, "tight", [[1, 3, 4]], min_isr=3)
        topics = tmp_path / "topics.json"
        topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "ops"}]}))
        assert replicas_of(bootstrap, topics) == {0: [1, 2], 1: [2, 3], 2: [3, 1], 3: [1, 3], 4: [2, 1], 5: [3, 2]}

        # --generate over brokers 2-4: nothing on broker 1 any more, racks (none) apart, counts even
        out = kbroker(bootstrap, "cluster", "reassign", "--generate", "--topics-to-move-json-file", str(topics),
                      "--broker-list", "2,3,4").stdout.decode().split("\n")
        assert out[0] == "Current partition replica assignment" and out[3] == "Proposed partition reassignment " \
                                                                              "configuration"
        proposed = json.loads(out[4])
        assert all(1 not in p["replicas"] and len(set(p["replicas"])) == 2 for p in proposed["partitions"])
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps(proposed))

        out = kbroker(bootstrap, "cluster", "reassign", "--execute", "--reassignment-json-file", str(plan))
        assert "Successfully started partition reassignments for ops-0," in out.stdout.decode(), out.stdout

        async def verified() -> bool:
            r = subprocess.run([KBROKER, "cluster", "reassign", "-b", bootstrap, "--verify",
                                "--reassignment-json-file", str(plan)], capture_output=True,
                               env=dict(os.environ, COLUMNS="200"), timeout=60)
            done = r.stdout.decode().count("is completed.")
            assert r.returncode == (0 if done == 6 else 1), r
            return done == 6
        await wait_for(verified, 60, "the plan completed (--verify)")
        assert kbroker(bootstrap, "cluster", "reassign", "--list").stdout == b"No partition reassignments found.\n"
        assert replicas_of(bootstrap, topics) == {p["partition"]: p["replicas"] for p in proposed["partitions"]}


        # decommission broker 2: its replicas move, it is told to stop, stopped, unregistered
        proc = subprocess.Popen([KBROKER, "cluster", "decommission", "-b", cluster.brokers[1].bootstrap, "--broker",
                                 "2", "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=dict(os.environ, COLUMNS="200"))
        try:
            lines = []
            for raw in proc.stdout:
                lines.append(raw.decode())
                if raw.startswith(b"Stop broker 2 now"):
                    break
            assert any(line.startswith("Broker 2 holds no replicas.") for line in lines), lines
            assert all(2 not in r for r in replicas_of(bootstrap, topics).values())
            cluster.brokers[2].stop()
            rest, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, (lines, rest, err)
            assert rest.decode().strip().endswith("Broker 2 is unregistered.")
        finally:
            proc.kill()
        # gone from the controller's registrations: a second UnregisterBroker finds nothing
        assert await unregister(cluster, 2) == ErrorCode.BROKER_ID_NOT_REGISTERED

        # with broker 2 gone, decommissioning broker 4 would leave tight-0 (on 1, 3, 4) with 2
        # replicas, below its min.insync.replicas=3: refused, naming it, nothing moves
        before = replicas_of(bootstrap, topics)
        refused = kbroker(cluster.brokers[1].bootstrap, "cluster", "decommission", "--broker", "4", expect=2)
        assert b"tight-0 would keep 2 replica(s), below its min.insync.replicas=3" in refused.stderr, refused.stderr
        assert kbroker(bootstrap, "cluster", "reassign", "--list").stdout == b"No partition reassignments found.\n"
        assert replicas_of(bootstrap, topics) == before
    finally:
        cluster.kill()
