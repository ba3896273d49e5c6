"""QuorumController on MockTime: brokers' lifecycle, fencing, controlled shutdown, elections,
what brokers are sent, and replay equivalence across restarts and snapshots."""

from __future__ import annotations

import uuid

import pytest

from controller.channel_manager import LEADER_DURING_DELETE, LeaderAndIsrItem, StopReplicaItem, UpdateMetadataItem
from controller.partition_change import NO_LEADER, RECOVERING
from controller.quorum_controller import FENCE_CHECK_DEFER_MS
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage import fileio

from .helpers import Harness, create_topics, registration, request


@pytest.fixture(autouse=True, params=["local", "zookeeper"])
def metadata_store(request, monkeypatch) -> str:
    """Every test here runs against both stores: the local metadata log and ZooKeeper."""
    if request.param == "zookeeper":
        monkeypatch.setattr(Harness, "zookeeper", request.getfixturevalue("zookeeper").connect)
    return request.param


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path).start()
    yield harness
    await harness.stop()


async def test_registration_starts_fenced_with_the_record_offset_as_epoch(h):
    end = h.store.end_offset
    epochs = await h.register(1)
    assert epochs[1] == end
    assert h.broker(1).fenced
    resp = await h.heartbeat(1)
    assert resp == {"error_code": 0, "is_caught_up": True, "is_fenced": False, "should_shut_down": False}
    assert not h.broker(1).fenced


async def test_unfencing_waits_for_the_full_state_to_be_acknowledged(h):
    h.channel.auto_deliver = False
    await h.register(1)
    assert h.channel.kinds(1) == ["UM*", "LISR*", "B"]
    resp = await h.heartbeat(1)
    assert (resp["is_fenced"], resp["is_caught_up"]) == (True, False)
    h.channel.deliver(1)
    resp = await h.heartbeat(1)
    assert (resp["is_fenced"], resp["is_caught_up"]) == (False, True)


async def test_stale_epoch_and_unknown_broker_heartbeats(h):
    await h.register(1)
    resp = await h.controller.broker_heartbeat(request(ApiKey.BROKER_HEARTBEAT, 1, broker_id=1,
                                                       broker_epoch=h.epochs[1] + 1, current_metadata_offset=0))
    assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    resp = await h.controller.broker_heartbeat(request(ApiKey.BROKER_HEARTBEAT, 1, broker_id=9, broker_epoch=0,
                                                       current_metadata_offset=0))
    assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH


async def test_wrong_cluster_id_is_refused(h):
    resp = await h.controller.register_broker(registration(1, cluster_id="other"))
    assert resp["error_code"] == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert h.broker(1) is None


async def test_a_repeated_registration_keeps_its_epoch(h):
    await h.register(1)
    again = await h.controller.register_broker(registration(1))
    assert again == {"error_code": 0, "broker_epoch": h.epochs[1]}


async def test_a_new_incarnation_fences_the_old_one_first(h):
    await h.start_brokers(1, 2)
    await h.create(("t", 2, 2))
    led_by_1 = [p for p in (0, 1) if h.partition("t", p).leader == 1]
    old_epoch = h.epochs[1]
    resp = await h.controller.register_broker(registration(1, incarnation=uuid.uuid4()))
    assert resp["broker_epoch"] > old_epoch
    reg = h.broker(1)
    assert reg.fenced and reg.epoch == resp["broker_epoch"]
    for p in led_by_1:
        assert h.partition("t", p).leader == 2 and 1 not in h.partition("t", p).isr


async def test_session_expiry_fences_and_moves_leaderships(h):
    await h.start_brokers(1, 2, 3)
    await h.create(("t", 6, 3))
    led = {b: [p for p in range(6) if h.partition("t", p).leader == b] for b in (1, 2, 3)}
    assert sorted(len(v) for v in led.values()) == [2, 2, 2]
    for _ in range(4):  # brokers 1 and 2 keep heartbeating; 3 has not since it registered
        await h.advance(2000)
        await h.heartbeat_all(1, 2)
    assert not h.broker(3).fenced
    await h.advance(999)  # 8999 ms
    assert not h.broker(3).fenced
    await h.advance(1)   # 9000 ms: broker.session.timeout.ms; checked one loop turn later
    await h.advance(FENCE_CHECK_DEFER_MS)
    assert h.broker(3).fenced
    assert not h.broker(1).fenced and not h.broker(2).fenced
    for p in led[3]:
        part = h.partition("t", p)
        assert part.leader in (1, 2) and 3 not in part.isr
    for p in range(6):
        assert 3 not in h.partition("t", p).isr


async def test_every_broker_silent_fences_them_one_by_one_and_partitions_go_offline(h):
    await h.start_brokers(1, 2)
    await h.create(("t", 2, 2))
    await h.advance(9000 + FENCE_CHECK_DEFER_MS)
    assert h.broker(1).fenced and h.broker(2).fenced
    for p in (0, 1):
        part = h.partition("t", p)
        assert part.leader == NO_LEADER and len(part.isr) == 1   # the ISR never empties


async def test_a_fenced_broker_that_comes_back_leads_its_offline_partitions(h):
    await h.start_brokers(1)
    await h.create(("t", 1, 1))
    await h.advance(9000 + FENCE_CHECK_DEFER_MS)
    assert h.partition("t", 0).leader == NO_LEADER
    h.channel.clear()
    resp = await h.heartbeat(1)   # the same incarnation, back: it gets its full state again first
    assert (resp["is_fenced"], resp["is_caught_up"]) == (True, False)
    assert h.channel.kinds(1) == ["UM*", "LISR*", "B"]
    resp = await h.heartbeat(1)   # (the RecordingChannel acknowledged it at once)
    assert resp["is_fenced"] is False
    assert h.partition("t", 0).leader == 1


async def test_topic_creation_sends_update_metadata_before_leader_and_isr(h):
    await h.start_brokers(1, 2, 3)
    h.channel.clear()
    [result] = await h.create(("t", 3, 2, {"retention.ms": "1000"}))
    assert result["error_code"] == 0 and result["num_partitions"] == 3 and result["replication_factor"] == 2
    for b in (1, 2, 3):
        kinds = h.channel.kinds(b)
        assert kinds[0] == "UM"
        um = h.channel.items(b, UpdateMetadataItem)[0]
        assert set(um.partitions) == {("t", 0), ("t", 1), ("t", 2)}
        assert um.topic_configs == {"t": {"retention.ms": "1000"}}
        assert [lb.broker_id for lb in um.live_brokers] == [1, 2, 3]
        mine = {p for p in range(3) if b in h.partition("t", p).replicas}
        if mine:
            assert kinds == ["UM", "LISR"]
            lisr = h.channel.items(b, LeaderAndIsrItem)[0]
            assert {p for _t, p in lisr.partitions} == mine
            assert all(s.is_new for s in lisr.partitions.values())
            assert set(lisr.leaders) == {h.partition("t", p).leader for p in mine}
        else:
            assert kinds == ["UM"]


async def test_responses_wait_for_the_fsync(h, monkeypatch, metadata_store):
    """Answered only once durable: after an fsync of the local log, or after ZooKeeper
    acknowledged the write (ZooKeeper acknowledges once a quorum has it on disk)."""
    await h.start_brokers(1)
    events = []
    if metadata_store == "local":
        import os
        real = os.fsync

        def counting(fd):
            events.append("durable")
            return real(fd)

        monkeypatch.setattr(fileio, "fsync", counting)
    else:
        real_written = h.store._written

        def written(future, last):
            if last is not None:
                events.append("durable")
            return real_written(future, last)

        monkeypatch.setattr(h.store, "_written", written)
    future = h.controller.create_topics(create_topics(("t", 1, 1)), 7)
    future.add_done_callback(lambda f: events.append("answered"))
    assert not future.done()
    await future
    assert "durable" in events and events.index("durable") < events.index("answered"), events
    assert h.store.durable_end_offset == h.store.end_offset


async def test_controlled_shutdown_through_heartbeats(h):
    await h.start_brokers(1, 2, 3)
    await h.create(("t", 6, 3))
    led_by_2 = [p for p in range(6) if h.partition("t", p).leader == 2]
    h.channel.idle = False
    resp = await h.heartbeat(2, want_shut_down=True)
    assert resp["should_shut_down"] is False
    reg = h.broker(2)
    assert reg.in_controlled_shutdown and not reg.fenced
    for p in range(6):
        part = h.partition("t", p)
        assert part.leader != 2 and 2 not in part.isr and 2 in part.replicas
    for p in led_by_2:
        assert h.partition("t", p).leader in (1, 3)
    # Not while requests to it are still queued ...
    resp = await h.heartbeat(2, want_shut_down=True)
    assert resp["should_shut_down"] is False
    # ... then yes, and it is fenced at once (no need to wait for its session to lapse).
    h.channel.idle = True
    resp = await h.heartbeat(2, want_shut_down=True)
    assert resp["should_shut_down"] is True and h.broker(2).fenced


async def test_controlled_shutdown_api(h):
    await h.start_brokers(1, 2)
    await h.create(("t", 4, 2))
    resp = await h.controller.controlled_shutdown(request(ApiKey.CONTROLLED_SHUTDOWN, 3, broker_id=1,
                                                          broker_epoch=h.epochs[1]), 3)
    assert resp == {"error_code": 0, "remaining_partitions": []}
    assert all(h.partition("t", p).leader == 2 for p in range(4))
    resp = await h.controller.controlled_shutdown(request(ApiKey.CONTROLLED_SHUTDOWN, 3, broker_id=1,
                                                          broker_epoch=h.epochs[1] - 1), 3)
    assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    resp = await h.controller.controlled_shutdown(request(ApiKey.CONTROLLED_SHUTDOWN, 3, broker_id=7), 3)
    assert resp["error_code"] == ErrorCode.BROKER_NOT_AVAILABLE


async def test_auto_rebalance_after_the_check_interval(tmp_path):
    h = await Harness(tmp_path, leader_imbalance_check_interval_ms=60_000).start()
    try:
        await h.start_brokers(1, 2)
        await h.create(("t", -1, -1, {}, {0: [1, 2], 1: [2, 1]}))
        assert [h.partition("t", p).leader for p in (0, 1)] == [1, 2]
        await h.controller.register_broker(registration(1, incarnation=uuid.uuid4()))  # broker 1 restarted
        h.epochs[1] = h.broker(1).epoch
        assert h.partition("t", 0).leader == 2
        await h.heartbeat(1)   # unfenced; back in the ISR only after the leader's AlterPartition:
        part = h.partition("t", 0)
        alter = request(ApiKey.ALTER_PARTITION, 3, broker_id=2, broker_epoch=h.epochs[2], topics=[{
            "topic_id": h.controller.replication.topic("t").topic_id, "partitions": [{
                "partition_index": 0, "leader_epoch": part.leader_epoch, "partition_epoch": part.partition_epoch,
                "new_isr_with_epochs": [{"broker_id": 2, "broker_epoch": h.epochs[2]},
                                        {"broker_id": 1, "broker_epoch": h.epochs[1]}]}]}])
        assert (await h.controller.alter_partition(alter, 3))["topics"][0]["partitions"][0]["error_code"] == 0
        for _ in range(29):
            await h.advance(2000)
            await h.heartbeat_all(1, 2)
        assert h.partition("t", 0).leader == 2   # 58 s: not yet
        await h.advance(2000)
        await h.heartbeat_all(1, 2)
        assert h.partition("t", 0).leader == 1   # 60 s: leader.imbalance.check.interval
    finally:
        await h.stop()


async def test_no_auto_rebalance_when_disabled(tmp_path):
    h = await Harness(tmp_path, leader_imbalance_check_interval_ms=1000, auto_leader_rebalance_enable=False).start()
    try:
        await h.start_brokers(1, 2)
        await h.create(("t", -1, -1, {}, {0: [1, 2]}))
        await h.controller.register_broker(registration(1, incarnation=uuid.uuid4()))
        h.epochs[1] = h.broker(1).epoch
        await h.heartbeat(1)
        await h.advance(3000)
        assert h.partition("t", 0).leader == 2
    finally:
        await h.stop()


@pytest.mark.parametrize("unclean", [False, True])
async def test_unclean_leader_election(tmp_path, unclean, caplog):
    h = await Harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2)
        configs = {"unclean.leader.election.enable": "true"} if unclean else {}
        await h.create(("t", -1, -1, configs, {0: [1, 2]}))
        # Broker 2 falls out of the ISR (the leader shrinks it), then broker 1 dies.
        part = h.partition("t", 0)
        topic_id = h.controller.replication.topic("t").topic_id
        await h.controller.alter_partition(request(ApiKey.ALTER_PARTITION, 3, broker_id=1, broker_epoch=h.epochs[1],
                                                   topics=[{"topic_id": topic_id, "partitions": [{
                                                       "partition_index": 0, "leader_epoch": part.leader_epoch,
                                                       "partition_epoch": part.partition_epoch,
                                                       "new_isr_with_epochs": [{"broker_id": 1}]}]}]), 3)
        assert h.partition("t", 0).isr == (1,)
        for _ in range(5):
            await h.advance(2000)
            await h.heartbeat_all(2)
        assert h.broker(1).fenced
        part = h.partition("t", 0)
        if unclean:
            assert (part.leader, part.isr, part.leader_recovery_state) == (2, (2,), RECOVERING)
            assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "unclean" in r.getMessage()]
        else:
            assert (part.leader, part.isr) == (NO_LEADER, (1,))
    finally:
        await h.stop()


async def test_delete_topic_stops_and_deletes_replicas(h):
    await h.start_brokers(1, 2)
    await h.create(("t", 2, 2, {"retention.ms": "5"}))
    h.channel.clear()
    resp = await h.controller.delete_topics(request(ApiKey.DELETE_TOPICS, 6, topics=[{"name": "t"}]), 6)
    assert resp["responses"][0]["error_code"] == 0
    assert h.controller.replication.topic("t") is None and h.controller.configs.topic_configs("t") == {}
    for b in (1, 2):
        assert h.channel.kinds(b) == ["UM", "SR"]
        um = h.channel.items(b, UpdateMetadataItem)[0]
        assert {s.leader for s in um.partitions.values()} == {LEADER_DURING_DELETE}
        sr = h.channel.items(b, StopReplicaItem)[0]
        assert sr.partitions == {("t", 0): (LEADER_DURING_DELETE, True), ("t", 1): (LEADER_DURING_DELETE, True)}


async def test_every_request_to_brokers_is_captured_in_the_controller_epoch(tmp_path):
    h = await Harness(tmp_path).start()
    first_epoch = h.controller.epoch
    await h.start_brokers(1)
    await h.stop()
    h2 = await Harness(tmp_path).start()
    try:
        assert h2.controller.epoch == first_epoch + 1 and h2.channel.controller_epoch == first_epoch + 1
        # A restarted controller sends every registered broker its full state.
        assert h2.channel.kinds(1) == ["UM*", "LISR*", "B"]
    finally:
        await h2.stop()


async def run_some_operations(h):
    await h.start_brokers(1, 2, 3)
    await h.create(("a", 3, 2, {"retention.ms": "1000"}), ("b", 2, 3))
    await h.controller.incremental_alter_configs(request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, resources=[{
        "resource_type": 2, "resource_name": "b", "configs": [
            {"name": "segment.bytes", "config_operation": 0, "value": "100000"}]},
        {"resource_type": 4, "resource_name": "", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "5000"}]},
        {"resource_type": 4, "resource_name": "2", "configs": [
            {"name": "leader.replication.throttled.rate", "config_operation": 0, "value": "1000"}]}]))
    await h.controller.create_partitions(request(ApiKey.CREATE_PARTITIONS, 3, topics=[
        {"name": "a", "count": 5, "assignments": None}]))
    await h.controller.allocate_producer_ids(request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=1,
                                                     broker_epoch=h.epochs[1]))
    await h.heartbeat(3, want_shut_down=True)
    await h.create(("c", 1, 1))
    await h.controller.delete_topics(request(ApiKey.DELETE_TOPICS, 5, topic_names=["c"]), 5)


async def test_replay_equivalence_reload_and_snapshot_plus_tail(tmp_path):
    h = await Harness(tmp_path).start()
    await run_some_operations(h)
    live = h.controller.state_summary()
    assert live["topics"].keys() == {"a", "b"} and live["next_producer_id"] == 1000
    assert live["broker_configs"] == {"": {"log.retention.ms": "5000"}, "2": {"leader.replication.throttled.rate": "1000"}}
    await h.stop()

    # The same state from replaying the log ...
    h = await Harness(tmp_path).start()
    assert h.controller.loaded_snapshot_offset == 0
    assert h.controller.state_summary() == live
    snapshot_offset = await h.controller.snapshot_now()
    assert snapshot_offset > 0
    await h.stop()

    # ... from the snapshot (and the epoch records after it) ...
    h = await Harness(tmp_path).start()
    assert h.controller.loaded_snapshot_offset == snapshot_offset
    assert h.controller.state_summary() == live
    h.epochs = {b: r.epoch for b, r in h.controller.cluster.brokers.items()}
    await h.create(("d", 2, 2))
    await h.controller.allocate_producer_ids(request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=1,
                                                     broker_epoch=h.epochs[1]))
    after = h.controller.state_summary()
    await h.stop()

    # ... and from the snapshot plus a tail of changes.
    h = await Harness(tmp_path).start()
    try:
        assert h.controller.loaded_snapshot_offset == snapshot_offset
        assert h.controller.state_summary() == after
        assert after["next_producer_id"] == 2000 and "d" in after["topics"]
    finally:
        await h.stop()


async def test_a_failed_write_is_fatal(h, monkeypatch, metadata_store):
    """Local: a failed fsync. ZooKeeper: another controller won meanwhile (/controller_epoch
    moved on), so this one's conditional write fails. Either way the controller stops, and
    nothing of the failed operation is answered."""

    def broken(fd):
        raise OSError(5, "Input/output error")

    await h.start_brokers(1)
    if metadata_store == "local":
        monkeypatch.setattr(fileio, "fsync", broken)
        match = "fsync"
    else:
        zk = h.coordinator.zk
        data, _stat = zk.get("/controller_epoch")
        zk.set("/controller_epoch", str(int(data) + 1).encode())  # as a new winner would
        match = "conditional metadata write failed"
    with pytest.raises(Exception, match=match):
        await h.controller.create_topics(create_topics(("t", 1, 1)), 7)
    assert h.fatal and not h.controller.active
    monkeypatch.undo()
    if metadata_store == "zookeeper":
        # Nothing of it reached ZooKeeper: the log holds only what was written before.
        loaded = await h.coordinator.new_store(h.store.term).load()
        assert not any(r.type == 2 for _o, r in loaded.log_records)  # no TopicRecord


async def test_a_snapshot_is_written_after_enough_log_bytes(tmp_path, metadata_store):
    # ZooKeeper counts each znode as ZNODE_COST bytes more (bounding the log's znode count).
    h = await Harness(tmp_path, snapshot_max_bytes=800 if metadata_store == "local" else 6000).start()
    try:
        await h.start_brokers(1)
        assert h.store.snapshot_offsets() == []
        for i in range(8):
            await h.create((f"topic-{i}", 4, 1))
        await h.settle()
        for task in list(h.controller._background):
            await task
        offsets = h.store.snapshot_offsets()
        assert offsets, "no snapshot after the byte threshold"
        assert offsets[-1] <= h.store.end_offset
    finally:
        await h.stop()
    h = await Harness(tmp_path).start()
    try:
        assert h.controller.loaded_snapshot_offset == offsets[-1]
        assert {f"topic-{i}" for i in range(8)} <= set(h.controller.replication.topics_by_name)
    finally:
        await h.stop()


async def test_a_snapshot_is_written_after_the_interval_when_something_changed(tmp_path):
    # A session far longer than the test: the broker is never fenced (a fencing and the
    # unfencing at its next heartbeat are changes that call for a snapshot of their own).
    h = await Harness(tmp_path, snapshot_max_interval_ms=60_000, session_timeout_ms=3_600_000).start()

    async def background_done() -> None:  # any snapshot the timer started is on disk
        for task in list(h.controller._background):
            await task
    try:
        await h.start_brokers(1)
        await h.create(("t", 1, 1))
        await h.advance(59_000)
        await background_done()
        assert h.store.snapshot_offsets() == []
        for _ in range(6):
            await h.heartbeat_all(1)
            await h.advance(200)
        await background_done()
        assert h.store.snapshot_offsets() == [h.store.end_offset]
        first = h.store.snapshot_offsets()
        for _ in range(4):   # nothing changed since: no new snapshot at the next interval
            await h.heartbeat_all(1)
            await h.advance(20_000)
        await background_done()
        assert h.store.end_offset == first[0] and h.store.snapshot_offsets() == first
        await h.create(("u", 1, 1))   # a change: the next interval writes one
        await h.advance(60_000)
        await background_done()
        assert h.store.snapshot_offsets() == first + [h.store.end_offset] and h.store.end_offset > first[0]
    finally:
        await h.stop()


async def test_describe_configs_and_metadata_reads(h):
    await h.start_brokers(1, 2)
    await h.create(("t", 2, 2, {"retention.ms": "1000"}))
    resp = await h.controller.describe_configs(request(ApiKey.DESCRIBE_CONFIGS, 4, resources=[
        {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
        {"resource_type": 2, "resource_name": "nope", "configuration_keys": None}]))
    first, missing = resp["results"]
    values = {c["name"]: (c["value"], c["config_source"]) for c in first["configs"]}
    assert values["retention.ms"] == ("1000", 1) and values["segment.bytes"] == ("1073741824", 5)
    assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    md = await h.controller.metadata(None)
    assert md["controller_id"] == 3000 and [b["node_id"] for b in md["brokers"]] == [1, 2]
    [topic] = md["topics"]
    assert topic["name"] == "t" and len(topic["partitions"]) == 2
    md = await h.controller.metadata(["nope"])
    assert md["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_config_changes_reach_every_broker_with_the_topic(h):
    await h.start_brokers(1, 2, 3)
    await h.create(("t", 1, 1))
    h.channel.clear()
    resp = await h.controller.incremental_alter_configs(request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, resources=[
        {"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "42"}]},
        {"resource_type": 2, "resource_name": "nope", "configs": []},
        {"resource_type": 4, "resource_name": "x", "configs": []}]))
    assert [r["error_code"] for r in resp["responses"]] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                            ErrorCode.INVALID_REQUEST]
    for b in (1, 2, 3):
        [um] = h.channel.items(b, UpdateMetadataItem)
        assert um.topic_configs == {"t": {"retention.ms": "42"}} and set(um.partitions) == {("t", 0)}
        assert um.records == ()


async def test_dynamic_broker_configs_reach_every_broker_as_records(h):
    """A BROKER resource's change is ConfigRecords (type 4) in the metadata log, sent to every
    broker with the security records; a static-only key is INVALID_REQUEST and changes nothing;
    a broker's full state carries the whole set."""
    from protocol.messages.metadata_records import decode_record

    await h.start_brokers(1, 2)
    h.channel.clear()
    resp = await h.controller.incremental_alter_configs(request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, resources=[
        {"resource_type": 4, "resource_name": "", "configs": [
            {"name": "message.max.bytes", "config_operation": 0, "value": "2000"}]},
        {"resource_type": 4, "resource_name": "2", "configs": [
            {"name": "follower.replication.throttled.rate", "config_operation": 0, "value": "5000000"}]},
        {"resource_type": 4, "resource_name": "1", "configs": [
            {"name": "log.dirs", "config_operation": 0, "value": "/tmp/x"}]}]))
    assert [r["error_code"] for r in resp["responses"]] == [0, 0, ErrorCode.INVALID_REQUEST]
    assert "log.dirs" in resp["responses"][2]["error_message"]
    assert h.controller.configs.broker_configs == {"": {"message.max.bytes": "2000"},
                                                   "2": {"follower.replication.throttled.rate": "5000000"}}
    for b in (1, 2):
        [um] = h.channel.items(b, UpdateMetadataItem)
        sent = [decode_record(raw) for raw in um.records]
        assert [(r.resource_type, r.resource_name, r.name, r.value) for r in sent] == [
            (4, "", "message.max.bytes", "2000"), (4, "2", "follower.replication.throttled.rate", "5000000")]
    full = h.controller._full_update_metadata()
    assert {(r.resource_name, r.name) for r in map(decode_record, full.records) if r.type == 4 and
            r.resource_type == 4} == {("", "message.max.bytes"), ("2", "follower.replication.throttled.rate")}
    resp = await h.controller.describe_configs(request(ApiKey.DESCRIBE_CONFIGS, 4, resources=[
        {"resource_type": 4, "resource_name": "", "configuration_keys": None}]))
    assert [(c["name"], c["value"], c["config_source"]) for c in resp["results"][0]["configs"]] == [
        ("message.max.bytes", "2000", 3)]
