"""Partition reassignment (KIP-455) in the controller: the ReplicationControlManager's decisions
(start, completion by AlterPartition, cancel, Kafka's answers to bad input), and what the
QuorumController tells brokers and keeps across a restart."""

from __future__ import annotations

import uuid

import pytest

from controller.channel_manager import LeaderAndIsrItem, StopReplicaItem
from controller.partition_change import NO_LEADER_CHANGE, PartitionRegistration
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode as E
from protocol.messages.metadata_records import MetadataRecordType as T

from .helpers import Harness, request
from .test_replication_control import World, alter


def reassign(w, moves, version=1, allow_rf_change=True):
    """``moves``: {(topic, partition): replicas or None}. Returns (records, {(t, p): (code, message)})."""
    topics: dict[str, list] = {}
    for (t, p), replicas in moves.items():
        topics.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    fields = {"timeout_ms": 1000, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    if version >= 1:
        fields["allow_replication_factor_change"] = allow_rf_change
    req = request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, **fields)
    result = w.repl.alter_partition_reassignments(req.topics, allow_rf_change if version >= 1 else True)
    out = {(t["name"], p["partition_index"]): (p["error_code"], p["error_message"])
           for t in result.response["responses"] for p in t["partitions"]}
    return result.records, out


def state(part: PartitionRegistration):
    return list(part.replicas), list(part.isr), part.leader, list(part.adding), list(part.removing)


@pytest.fixture
def w():
    world = World(brokers=(1, 2, 3, 4))
    world.create(("t", -1, -1, {}, {0: [1, 2, 3], 1: [1, 2, 3]}))
    return world


def test_a_move_grows_the_replicas_then_the_last_catch_up_completes_it_and_elects_a_new_leader(w):
    before = w.part()
    records, out = reassign(w, {("t", 0): [2, 3, 4]})
    assert out == {("t", 0): (E.NONE, None)}
    w.apply(records)
    moving = w.part()
    # target followed by the replica leaving; the ISR and the leader as they were
    assert state(moving) == ([2, 3, 4, 1], [1, 2, 3], 1, [4], [1])
    assert (moving.leader_epoch, moving.partition_epoch) == (before.leader_epoch, before.partition_epoch + 1)
    # The leader adds 4 once it caught up: that one change completes the move; 1 leaves, 2 leads.
    result = alter(w, isr=(1, 2, 3, 4))
    assert result.response["topics"][0]["partitions"][0]["error_code"] == E.NEW_LEADER_ELECTED
    w.apply(result.records)
    done = w.part()
    assert state(done) == ([2, 3, 4], [2, 3, 4], 2, [], [])
    assert done.leader_epoch == moving.leader_epoch + 1


def test_a_leader_that_stays_gets_a_new_epoch_when_a_replica_leaves(w):
    w.apply(reassign(w, {("t", 0): [1, 2, 4]})[0])
    epoch = w.part().leader_epoch
    result = alter(w, isr=(1, 2, 3, 4))
    p = result.response["topics"][0]["partitions"][0]
    assert p["error_code"] == E.NONE and p["leader_id"] == 1 and p["leader_epoch"] == epoch + 1
    assert result.records[0].leader == 1  # named although it stays: the epoch bump fences broker 3
    w.apply(result.records)
    assert state(w.part()) == ([1, 2, 4], [1, 2, 4], 1, [], [])


def test_adding_one_of_two_new_replicas_does_not_complete():
    w = World(brokers=(1, 2, 3, 4, 5))
    w.create(("t", -1, -1, {}, {0: [1, 2, 3]}))
    w.apply(reassign(w, {("t", 0): [1, 4, 5]})[0])
    assert state(w.part()) == ([1, 4, 5, 2, 3], [1, 2, 3], 1, [4, 5], [2, 3])
    w.apply(alter(w, isr=(1, 2, 3, 4)).records)
    assert state(w.part()) == ([1, 4, 5, 2, 3], [1, 2, 3, 4], 1, [4, 5], [2, 3])
    epoch = w.part().leader_epoch
    w.apply(alter(w, isr=(1, 2, 3, 4, 5)).records)
    assert state(w.part()) == ([1, 4, 5], [1, 4, 5], 1, [], [])
    assert w.part().leader_epoch == epoch + 1


def test_growing_the_replicas_completes_when_the_new_one_joins_without_a_new_leader_epoch(w):
    w.apply(reassign(w, {("t", 1): [1, 2, 3, 4]})[0])
    assert state(w.part(pid=1)) == ([1, 2, 3, 4], [1, 2, 3], 1, [4], [])
    result = alter(w, pid=1, isr=(1, 2, 3, 4))
    assert result.records[0].leader == NO_LEADER_CHANGE  # nobody left: no new leader epoch
    w.apply(result.records)
    assert state(w.part(pid=1)) == ([1, 2, 3, 4], [1, 2, 3, 4], 1, [], [])


def test_removing_only_completes_at_once_when_the_isr_allows(w):
    records, out = reassign(w, {("t", 0): [1, 2]})
    assert out[("t", 0)][0] == E.NONE
    w.apply(records)
    assert state(w.part()) == ([1, 2], [1, 2], 1, [], [])


def test_removing_waits_for_a_target_replica_outside_the_isr(w):
    w.apply(alter(w, isr=(1, 3)).records)
    w.apply(reassign(w, {("t", 0): [1, 2]})[0])
    assert state(w.part()) == ([1, 2, 3], [1, 3], 1, [], [3])
    w.apply(alter(w, isr=(1, 2, 3)).records)
    assert state(w.part()) == ([1, 2], [1, 2], 1, [], [])


def test_cancel_reverts_to_the_original_replicas(w):
    w.apply(reassign(w, {("t", 0): [2, 3, 4]})[0])
    records, out = reassign(w, {("t", 0): None})
    assert out[("t", 0)] == (E.NONE, None)
    w.apply(records)
    part = w.part()
    assert sorted(part.replicas) == [1, 2, 3] and state(part)[1:] == ([1, 2, 3], 1, [], [])


def test_cancel_after_a_new_replica_joined_the_isr_drops_it_from_the_isr_too():
    w = World(brokers=(1, 2, 3, 4, 5))
    w.create(("t", -1, -1, {}, {0: [1, 2, 3]}))
    w.apply(reassign(w, {("t", 0): [1, 4, 5]})[0])
    w.apply(alter(w, isr=(1, 2, 3, 4)).records)
    records, out = reassign(w, {("t", 0): None})
    assert out[("t", 0)][0] == E.NONE
    w.apply(records)
    assert state(w.part()) == ([1, 2, 3], [1, 2, 3], 1, [], [])


def test_cancel_without_a_reassignment_in_progress(w):
    records, out = reassign(w, {("t", 0): None})
    assert records == [] and out[("t", 0)] == (E.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")


@pytest.mark.parametrize("unclean", [False, True])
def test_cancel_whose_isr_would_be_only_added_replicas_needs_an_unclean_election(unclean):
    w = World(brokers=(1, 2, 3))
    w.create(("t", -1, -1, {"unclean.leader.election.enable": str(unclean).lower()}, {0: [1]}))
    w.apply(reassign(w, {("t", 0): [2, 3]})[0])
    w.apply(alter(w, isr=(1, 2)).records)
    w.cluster.replay(w.cluster.fence_record(1))
    w.apply(w.repl.handle_broker_fenced(1))
    assert state(w.part()) == ([2, 3, 1], [2], 2, [2, 3], [1])
    records, out = reassign(w, {("t", 0): None})
    if not unclean:
        assert records == [] and out[("t", 0)] == (E.INVALID_REPLICA_ASSIGNMENT, (
            "Unable to revert partition assignment for t:0 because it would require an unclean leader election."))
        return
    assert out[("t", 0)][0] == E.NONE
    w.apply(records)
    # back on broker 1 alone, which is fenced: offline until it returns
    assert state(w.part())[0] == [1] and w.part().adding == () and w.part().removing == ()


@pytest.mark.parametrize("replicas,code,message", [
    ([1, 2, 9], E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ([1, 2, 2], E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker 2 more than once."),
    ([], E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
])
def test_bad_targets_are_refused_and_change_nothing(w, replicas, code, message):
    before = w.part()
    records, out = reassign(w, {("t", 0): replicas})
    assert records == [] and out[("t", 0)] == (code, message)
    assert w.part() == before


def test_unknown_topic_or_partition(w):
    records, out = reassign(w, {("nope", 0): [1, 2, 3], ("t", 7): [1, 2, 3]})
    assert records == []
    assert out[("nope", 0)] == (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")
    assert out[("t", 7)] == (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:7.")


def test_a_fenced_but_registered_broker_is_accepted():
    w = World(brokers=(1, 2, 3, 4), fenced=(4,))
    w.create(("t", -1, -1, {}, {0: [1, 2, 3]}))
    records, out = reassign(w, {("t", 0): [1, 2, 4]})
    assert out[("t", 0)][0] == E.NONE
    w.apply(records)
    assert state(w.part()) == ([1, 2, 4, 3], [1, 2, 3], 1, [4], [3])


def test_bad_entries_do_not_stop_good_ones(w):
    records, out = reassign(w, {("t", 0): [1, 2, 9], ("t", 1): [2, 3, 4]})
    assert out[("t", 0)][0] == E.INVALID_REPLICA_ASSIGNMENT and out[("t", 1)][0] == E.NONE
    assert [(r.type, r.partition_id) for r in records] == [(T.PARTITION_CHANGE, 1)]


def test_replication_factor_change_refused_when_not_allowed(w):
    records, out = reassign(w, {("t", 0): [1, 2]}, allow_rf_change=False)
    assert records == [] and out[("t", 0)] == (E.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 3 to 2")
    assert reassign(w, {("t", 0): [2, 3, 4]}, allow_rf_change=False)[1][("t", 0)][0] == E.NONE
    assert reassign(w, {("t", 0): [1, 2]}, version=0)[1][("t", 0)][0] == E.NONE  # v0: always allowed


def test_a_new_target_replaces_one_in_progress(w):
    w.apply(reassign(w, {("t", 0): [2, 3, 4]})[0])
    w.apply(reassign(w, {("t", 0): [1, 2, 4]})[0])
    # computed against the replicas of the move in progress, as Kafka does: 4 is one already, so
    # it is not "adding"; the move still completes only once every target replica is in the ISR
    assert state(w.part()) == ([1, 2, 4, 3], [1, 2, 3], 1, [], [3])
    w.apply(alter(w, isr=(1, 2, 3, 4)).records)
    assert state(w.part()) == ([1, 2, 4], [1, 2, 4], 1, [], [])


def test_fencing_during_a_move_keeps_it_and_elects_from_the_isr(w):
    w.apply(reassign(w, {("t", 0): [2, 3, 4]})[0])
    w.cluster.replay(w.cluster.fence_record(1))
    w.apply(w.repl.handle_broker_fenced(1))
    assert state(w.part()) == ([2, 3, 4, 1], [2, 3], 2, [4], [1])
    w.apply(alter(w, broker=2, isr=(2, 3, 4)).records)
    assert state(w.part()) == ([2, 3, 4], [2, 3, 4], 2, [], [])


def test_list_shows_only_moving_partitions(w):
    w.create(("u", -1, -1, {}, {0: [1, 2]}))
    assert w.repl.list_partition_reassignments(None)["topics"] == []
    w.apply(reassign(w, {("t", 1): [2, 3, 4]})[0])
    everything = w.repl.list_partition_reassignments(None)
    assert everything["topics"] == [{"name": "t", "partitions": [
        {"partition_index": 1, "replicas": [2, 3, 4, 1], "adding_replicas": [4], "removing_replicas": [1]}]}]
    asked = request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=100, topics=[
        {"name": "t", "partition_indexes": [0, 1, 5]}, {"name": "nope", "partition_indexes": [0]},
        {"name": "u", "partition_indexes": [0]}])
    assert w.repl.list_partition_reassignments(asked.topics)["topics"] == everything["topics"]


def test_registration_with_a_move_round_trips_through_records():
    part = PartitionRegistration((2, 3, 4, 1), (1, 2, 3), 1, 4, 7, 0, (4,), (1,))
    topic = uuid.UUID(int=5)
    assert PartitionRegistration.from_record(part.to_record(topic, 0)) == part


# -- the QuorumController: what brokers are told, and a restart ------------------------------

def alter_request(moves):
    topics: dict[str, list] = {}
    for (t, p), replicas in moves.items():
        topics.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    return request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=1000,
                   topics=[{"name": t, "partitions": ps} for t, ps in topics.items()])


def alter_partition(h, broker, topic, pid, isr):
    part = h.partition(topic, pid)
    return request(ApiKey.ALTER_PARTITION, 3, broker_id=broker, broker_epoch=h.epochs[broker], topics=[{
        "topic_id": h.controller.replication.topic(topic).topic_id, "partitions": [{
            "partition_index": pid, "leader_epoch": part.leader_epoch, "partition_epoch": part.partition_epoch,
            "leader_recovery_state": 0, "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in isr]}]}])


async def test_brokers_hear_of_the_move_and_the_removed_replica_is_stopped_and_deleted(tmp_path):
    h = await Harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2, 3, 4)
        await h.create(("t", -1, -1, {}, {0: [1, 2, 3]}))
        h.channel.clear()
        resp = await h.controller.alter_partition_reassignments(alter_request({("t", 0): [2, 3, 4]}), 0)
        assert resp["error_code"] == 0 and resp["responses"][0]["partitions"][0]["error_code"] == 0
        # every replica, the new one included, gets the partition with adding/removing
        for b in (1, 2, 3, 4):
            lisr = h.channel.items(b, LeaderAndIsrItem)[-1]
            s = lisr.partitions[("t", 0)]
            assert (s.replicas, s.adding, s.removing, s.leader) == ((2, 3, 4, 1), (4,), (1,), 1)
        listed = await h.controller.list_partition_reassignments(
            request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=100, topics=None))
        assert listed["topics"][0]["partitions"][0]["adding_replicas"] == [4]
        h.channel.clear()
        answer = await h.controller.alter_partition(alter_partition(h, 1, "t", 0, (1, 2, 3, 4)), 3)
        assert answer["topics"][0]["partitions"][0]["error_code"] == E.NEW_LEADER_ELECTED
        assert h.channel.kinds(1) == ["UM", "SR"]
        sr = h.channel.items(1, StopReplicaItem)[0]
        assert sr.partitions == {("t", 0): (h.partition("t", 0).leader_epoch, True)}
        for b in (2, 3, 4):
            assert h.channel.kinds(b) == ["UM", "LISR"]
            assert h.channel.items(b, LeaderAndIsrItem)[0].partitions[("t", 0)].replicas == (2, 3, 4)
    finally:
        await h.stop()


async def test_a_cancel_stops_and_deletes_the_added_replica(tmp_path):
    h = await Harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2, 3, 4)
        await h.create(("t", -1, -1, {}, {0: [1, 2, 3]}))
        await h.controller.alter_partition_reassignments(alter_request({("t", 0): [2, 3, 4]}), 0)
        h.channel.clear()
        resp = await h.controller.alter_partition_reassignments(alter_request({("t", 0): None}), 0)
        assert resp["responses"][0]["partitions"][0]["error_code"] == 0
        assert h.channel.kinds(4) == ["UM", "SR"]
        assert h.channel.items(4, StopReplicaItem)[0].partitions[("t", 0)][1] is True
        assert sorted(h.partition("t", 0).replicas) == [1, 2, 3]
    finally:
        await h.stop()


async def test_a_move_in_progress_survives_a_controller_restart(tmp_path):
    h = await Harness(tmp_path).start()
    await h.start_brokers(1, 2, 3, 4)
    await h.create(("t", -1, -1, {}, {0: [1, 2, 3]}))
    await h.controller.alter_partition_reassignments(alter_request({("t", 0): [2, 3, 4]}), 0)
    moving = h.partition("t", 0)
    await h.stop()
    h = await Harness(tmp_path).start()
    try:
        assert h.partition("t", 0) == moving
        # the new controller's full state tells each replica about the move
        assert h.channel.items(4, LeaderAndIsrItem)[0].partitions[("t", 0)].adding == (4,)
        h.epochs = {b: r.epoch for b, r in h.controller.cluster.brokers.items()}
        await h.heartbeat_all(1, 2, 3, 4)
        await h.controller.alter_partition(alter_partition(h, 1, "t", 0, (1, 2, 3, 4)), 3)
        assert state(h.partition("t", 0)) == ([2, 3, 4], [2, 3, 4], 2, [], [])
    finally:
        await h.stop()


# -- UnregisterBroker (64) ---------------------------------------------------------------------

async def test_unregister_broker_drops_it_from_isrs_and_registrations_and_a_restart_keeps_that(tmp_path):
    h = await Harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2, 3)
        await h.create(("t", -1, -1, {}, {0: [1, 2, 3]}))
        unknown = await h.controller.unregister_broker(request(ApiKey.UNREGISTER_BROKER, 0, broker_id=9))
        assert unknown["error_code"] == E.BROKER_ID_NOT_REGISTERED
        done = await h.controller.unregister_broker(request(ApiKey.UNREGISTER_BROKER, 0, broker_id=3))
        assert done["error_code"] == E.NONE
        assert 3 not in h.controller.cluster.brokers
        assert 3 not in h.partition("t", 0).isr
        again = await h.controller.unregister_broker(request(ApiKey.UNREGISTER_BROKER, 0, broker_id=3))
        assert again["error_code"] == E.BROKER_ID_NOT_REGISTERED
    finally:
        await h.stop()
    h = await Harness(tmp_path).start()  # replayed from the metadata log
    try:
        assert sorted(h.controller.cluster.brokers) == [1, 2]
        assert 3 not in h.partition("t", 0).isr
    finally:
        await h.stop()
