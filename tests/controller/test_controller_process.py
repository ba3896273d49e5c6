"""The controller as a real process (``python -m controller``), driven by test brokers that are
raw protocol clients plus a listener recording what the controller sends them. Real sockets,
real processes; nothing mocked."""

from __future__ import annotations

import asyncio
import collections
import uuid

import pytest

from controller.launcher import ControllerProcess
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection

from .recording_broker import RecordingBroker

pytestmark = pytest.mark.timeout(180)

SESSION_MS = 2000
HEARTBEAT_MS = 300


# The same tests against both metadata stores: the local metadata log, and ZooKeeper (a real
# ZooKeeper server; the controller starts as a standby and is elected; a short session timeout so
# that a restarted controller takes over from its killed predecessor quickly).
ZK_SESSION_MS = 2000


@pytest.fixture(params=["local", "zookeeper"])
def metadata_store(request) -> dict:
    if request.param == "local":
        return {}
    return {"controller.metadata.store": "zookeeper", "zookeeper.connect": request.getfixturevalue("zookeeper_connect"),
            "zookeeper.session.timeout.ms": ZK_SESSION_MS}


@pytest.fixture
def controller_process(tmp_path, metadata_store):
    procs = []

    def make(**overrides) -> ControllerProcess:
        props = {"broker.session.timeout.ms": SESSION_MS, **metadata_store, **overrides}
        proc = ControllerProcess(tmp_path / "metadata", overrides=props, await_active=bool(metadata_store))
        procs.append(proc)
        return proc

    yield make
    for p in procs:
        p.kill()


@pytest.fixture
def local_controller_process(tmp_path):
    procs = []

    def make(**overrides) -> ControllerProcess:
        proc = ControllerProcess(tmp_path / "metadata", overrides={"broker.session.timeout.ms": SESSION_MS, **overrides})
        procs.append(proc)
        return proc

    yield make
    for p in procs:
        p.kill()


async def admin(proc: ControllerProcess) -> BrokerConnection:
    conn = BrokerConnection("127.0.0.1", proc.port, client_id="test-admin")
    await conn.connect()
    return conn


async def metadata(proc: ControllerProcess):
    conn = await admin(proc)
    try:
        return await conn.request(ApiKey.METADATA, {"topics": None}, version=8)
    finally:
        conn.close()


async def start_brokers(proc, cluster_id, ids, heartbeat_ms=HEARTBEAT_MS):
    brokers = {}
    for i in ids:
        b = await RecordingBroker(i).start()
        await b.connect("127.0.0.1", proc.port)
        resp = await b.register(cluster_id)
        assert resp.error_code == 0, resp
        brokers[i] = b
    for b in brokers.values():
        await b.wait_unfenced()
        b.start_heartbeats(heartbeat_ms)
    return brokers


async def create_topic(proc, name, partitions, rf, configs=None):
    conn = await admin(proc)
    try:
        resp = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": rf,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}]})
        assert resp.topics[0].error_code == 0, resp
        return resp.topics[0]
    finally:
        conn.close()


async def close_all(brokers):
    for b in brokers.values():
        await b.close()


async def test_registration_fenced_then_heartbeat_unfences_after_the_full_state(controller_process):
    proc = controller_process().start()
    md = await metadata(proc)
    assert md.controller_id == 3000 and md.brokers == [] and md.cluster_id
    broker = await RecordingBroker(1).start()
    try:
        await broker.connect("127.0.0.1", proc.port)
        assert (await broker.register("wrong-cluster")).error_code == 104  # INCONSISTENT_CLUSTER_ID
        resp = await broker.register(md.cluster_id)
        assert resp.error_code == 0 and resp.broker_epoch >= 0
        assert (await metadata(proc)).brokers == []        # fenced: not shown
        await broker.wait_for(lambda: broker.requests(ApiKey.LEADER_AND_ISR), what="the full state")
        assert [r.name for r in broker.received][:2] == ["UPDATE_METADATA", "LEADER_AND_ISR"]
        assert broker.received[1].body.type == 2   # FULL
        await broker.wait_unfenced()
        md = await metadata(proc)
        assert [(b.node_id, b.port) for b in md.brokers] == [(1, broker.port)]
    finally:
        await broker.close()


async def test_topic_creation_sends_leader_and_isr_with_the_placement_spread(controller_process):
    proc = controller_process().start()
    cluster_id = (await metadata(proc)).cluster_id
    brokers = await start_brokers(proc, cluster_id, (1, 2, 3))
    try:
        await create_topic(proc, "spread", 6, 3, {"retention.ms": "3600000"})
        for b in brokers.values():
            await b.wait_for(lambda b=b: len(b.leader_and_isr_states()) == 6, what=f"broker {b.broker_id}'s LISR")
        leaders = collections.Counter()
        for b in brokers.values():
            states = b.leader_and_isr_states()
            about = b.mentioning("spread")
            # UpdateMetadata (with the topic's configs) before LeaderAndIsr.
            assert [r.name for r in about][:2] == ["UPDATE_METADATA", "LEADER_AND_ISR"]
            um = about[0].body
            assert [(c.name, c.value) for c in um.topic_states[0].topic_configs] == [("retention.ms", "3600000")]
            for (topic, pid), s in states.items():
                assert topic == "spread" and sorted(s.replicas) == [1, 2, 3] and sorted(s.isr) == [1, 2, 3]
                assert s.is_new and s.leader == s.replicas[0]
                if b.broker_id == 1:
                    leaders[s.leader] += 1
        assert sorted(leaders.values()) == [2, 2, 2]     # 2 leaders per broker
        md = await metadata(proc)
        assert sorted(p.leader_id for p in md.topics[0].partitions) == [1, 1, 2, 2, 3, 3]
    finally:
        await close_all(brokers)


async def test_a_silent_broker_is_fenced_after_the_session_timeout_and_loses_its_leaderships(controller_process):
    proc = controller_process().start()
    cluster_id = (await metadata(proc)).cluster_id
    brokers = await start_brokers(proc, cluster_id, (1, 2, 3))
    try:
        await create_topic(proc, "t", 3, 3)
        await brokers[1].wait_for(lambda: len(brokers[1].leader_and_isr_states()) == 3, what="LISR")
        led_by_3 = [p for (_t, p), s in brokers[1].leader_and_isr_states().items() if s.leader == 3]
        assert led_by_3
        loop = asyncio.get_running_loop()
        brokers[3].paused = True
        silent_since = loop.time()

        def moved():
            states = brokers[1].leader_and_isr_states()
            return all(states[("t", p)].leader in (1, 2) and 3 not in states[("t", p)].isr for p in led_by_3)

        await brokers[1].wait_for(moved, timeout_s=SESSION_MS / 1000 + 10, what="new leaders")
        elapsed = loop.time() - silent_since
        assert SESSION_MS / 1000 - HEARTBEAT_MS / 1000 - 0.2 <= elapsed <= SESSION_MS / 1000 + 2, elapsed
        md = await metadata(proc)
        assert sorted(b.node_id for b in md.brokers) == [1, 2]
        for p in md.topics[0].partitions:
            assert p.leader_id in (1, 2) and 3 not in p.isr_nodes and p.offline_replicas == [3]
        # Broker 3's heartbeats come back: its full state, then unfenced (not leader again until a rebalance).
        brokers[3].paused = False
        await brokers[3].wait_unfenced()
    finally:
        await close_all(brokers)


async def test_controller_kill_9_and_restart_loses_nothing_and_resends_full_state(controller_process):
    proc = controller_process().start()
    cluster_id = (await metadata(proc)).cluster_id
    brokers = await start_brokers(proc, cluster_id, (1, 2, 3))
    try:
        await create_topic(proc, "a", 4, 2)
        await create_topic(proc, "b", 2, 3)
        before = await metadata(proc)
        epoch_before = {r.body.controller_epoch for b in brokers.values() for r in b.received}
        assert len(epoch_before) == 1
        proc.kill()   # kill -9
        for b in brokers.values():
            b.received.clear()
        proc.start()
        after = await metadata(proc)
        assert after.cluster_id == before.cluster_id

        def view(md):
            return {t.name: (t.topic_id, sorted((p.partition_index, tuple(p.replica_nodes), p.leader_id, p.leader_epoch)
                                                for p in t.partitions)) for t in md.topics}
        assert view(after) == view(before)
        for b in brokers.values():
            await b.wait_for(lambda b=b: any(r.body.type == 2 for r in b.requests(ApiKey.LEADER_AND_ISR)),
                             what=f"broker {b.broker_id}'s full state")
            full = [r for r in b.requests(ApiKey.LEADER_AND_ISR) if r.body.type == 2][0]
            mine = {(t.topic_name, p.partition_index) for t in full.body.topic_states for p in t.partition_states}
            expected = {(t.name, p.partition_index) for t in before.topics for p in t.partitions
                        if b.broker_id in p.replica_nodes}
            assert mine == expected
        epochs_after = {r.body.controller_epoch for b in brokers.values() for r in b.received}
        assert epochs_after == {max(epoch_before) + 1}
        # The brokers keep their registrations (same epochs): heartbeats go on being accepted.
        # (two at once, on a connection lost: the harness reconnects once, as its heartbeat loop
        # and a test's own heartbeat do after a restart)
        for b in brokers.values():
            b.controller.close()
            assert [r.error_code for r in await asyncio.gather(b.heartbeat(), b.heartbeat())] == [0, 0]
    finally:
        await close_all(brokers)


async def test_every_request_to_brokers_carries_the_controller_epoch_and_the_broker_epoch(controller_process):
    proc = controller_process().start()
    cluster_id = (await metadata(proc)).cluster_id
    brokers = await start_brokers(proc, cluster_id, (1, 2))
    try:
        await create_topic(proc, "t", 2, 2)
        conn = await admin(proc)
        resp = await conn.request(ApiKey.DELETE_TOPICS, {"topic_names": ["t"], "timeout_ms": 1000})
        assert resp.responses[0].error_code == 0
        conn.close()
        for b in brokers.values():
            await b.wait_for(lambda b=b: b.requests(ApiKey.STOP_REPLICA), what="StopReplica")
            kinds = {r.name for r in b.received}
            assert kinds == {"UPDATE_METADATA", "LEADER_AND_ISR", "STOP_REPLICA"}
            for r in b.received:
                assert r.body.controller_id == 3000 and r.body.controller_epoch >= 0
                assert r.body.broker_epoch == b.broker_epoch
    finally:
        await close_all(brokers)


async def test_a_new_incarnation_of_a_broker_is_fenced_then_registered(controller_process):
    proc = controller_process().start()
    cluster_id = (await metadata(proc)).cluster_id
    brokers = await start_brokers(proc, cluster_id, (1, 2))
    try:
        await create_topic(proc, "t", 2, 2)
        old_epoch = brokers[1].broker_epoch
        resp = await brokers[1].register(cluster_id, uuid.uuid4())   # "restarted"
        assert resp.error_code == 0 and resp.broker_epoch > old_epoch
        md = await metadata(proc)
        assert [b.node_id for b in md.brokers] == [2]
        assert all(p.leader_id == 2 and p.isr_nodes == [2] for p in md.topics[0].partitions)
    finally:
        await close_all(brokers)


async def test_sigterm_stops_cleanly_and_a_second_controller_cannot_use_the_same_directory(local_controller_process,
                                                                                           tmp_path):
    proc = local_controller_process().start()
    other = ControllerProcess(tmp_path / "metadata")
    with pytest.raises(RuntimeError, match="in use"):
        other.start(timeout_s=20)
    assert proc.stop() == 0
    assert "shut down" in proc.log_text()


async def test_controlled_shutdown_through_heartbeats_over_the_wire(controller_process):
    proc = controller_process().start()
    cluster_id = (await metadata(proc)).cluster_id
    brokers = await start_brokers(proc, cluster_id, (1, 2, 3))
    try:
        await create_topic(proc, "t", 6, 3)
        await brokers[2].wait_for(lambda: len(brokers[2].leader_and_isr_states()) == 6, what="LISR")
        brokers[2].paused = True   # its own loop stops; it now asks to shut down
        async with asyncio.timeout(20):
            while not (await brokers[2].heartbeat(want_shut_down=True)).should_shut_down:
                await asyncio.sleep(HEARTBEAT_MS / 1000)
        # By then it has been told it leads nothing and is in no ISR.
        states = brokers[2].leader_and_isr_states()
        assert all(s.leader != 2 and 2 not in s.isr for s in states.values())
        md = await metadata(proc)
        assert [b.node_id for b in md.brokers] == [1, 3]
        assert {p.leader_id for p in md.topics[0].partitions} <= {1, 3}
    finally:
        await close_all(brokers)
