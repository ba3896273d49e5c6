"""Committed offsets (OffsetCommit, OffsetFetch, OffsetDelete), group deletion, ListGroups,
DescribeGroups and offset expiry."""

from __future__ import annotations

import pytest

from broker.coordinator import GroupCoordinatorConfig
from protocol.messages import consumer_offsets as co

from .harness import Cluster, E, assignment, subscription


def errors(reply) -> dict:
    return {(t["name"], p["partition_index"]): p["error_code"] for t in reply["topics"] for p in t["partitions"]}


def fetched(reply) -> dict:
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["committed_leader_epoch"], p["metadata"],
                                                p["error_code"]) for t in reply["topics"] for p in t["partitions"]}


def records(c, group="g"):
    """The records of ``group`` in its __consumer_offsets partition."""
    return [r for r in c.log.partitions[c.coordinator.partition_for(group)] if co.read_message_key(r[0]).group == group]


# ---------------------------------------------------------------------------
# commit and fetch

def test_member_commit_and_fetch_with_leader_epoch_and_metadata() -> None:
    c = Cluster()
    (mid,) = c.stable_group(1)
    reply = c.commit(offsets={("t", 0): (10, "meta"), ("t", 1): (20, None), ("u", 0): 5}, generation=1, member_id=mid,
                     leader_epoch=3)
    assert errors(reply) == {("t", 0): 0, ("t", 1): 0, ("u", 0): 0}
    got = fetched(c.fetch(partitions=[("t", 0), ("t", 1), ("u", 0), ("u", 9)]))
    assert got == {("t", 0): (10, 3, "meta", 0), ("t", 1): (20, 3, "", 0), ("u", 0): (5, 3, "", 0),
                   ("u", 9): (-1, -1, "", 0)}


def test_the_commit_records_in_the_log() -> None:
    c = Cluster()
    now = c.time.milliseconds()
    c.commit(offsets={("t", 0): (10, "m")}, leader_epoch=4)
    key, value = records(c)[-1]
    assert co.read_message_key(key) == co.OffsetKey("g", "t", 0)
    v = co.read_offset_commit_value(value)
    assert (v.version, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp) == (3, 10, 4, "m", now)


def test_offset_commit_v2_retention_writes_an_expire_timestamp() -> None:
    c = Cluster()
    now = c.time.milliseconds()
    c.commit(offsets={("t", 0): 10}, version=2, retention=5000)
    v = co.read_offset_commit_value(records(c)[-1][1])
    assert (v.version, v.offset, v.expire_timestamp) == (1, 10, now + 5000)


def test_a_simple_commit_creates_a_group_without_members() -> None:
    c = Cluster()
    assert errors(c.commit(group="simple", offsets={("t", 0): 1})) == {("t", 0): 0}
    g = c.group("simple")
    assert str(g.state) == "Empty" and g.protocol_type is None and g.generation_id == 0
    assert c.list_groups()["groups"] == [{"group_id": "simple", "protocol_type": "", "group_state": "Empty",
                                          "group_type": ""}]
    assert c.committed("simple") == {("t", 0): 1}


def test_fetch_all_offsets_when_topics_is_null() -> None:
    c = Cluster()
    c.commit(offsets={("t", 1): 1, ("t", 0): 2, ("a", 0): 3})
    assert fetched(c.fetch(partitions=None)) == {("t", 1): (1, -1, "", 0), ("t", 0): (2, -1, "", 0),
                                                 ("a", 0): (3, -1, "", 0)}
    assert c.fetch(group="none", partitions=None)["topics"] == []


def test_a_commit_is_answered_and_visible_only_once_appended() -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 1})
    c.log.hold = True
    reply = c.commit(offsets={("t", 0): 2})
    assert not reply.done
    assert c.committed(partitions=[("t", 0)]) == {("t", 0): 1}
    unstable = c.fetch(partitions=[("t", 0)], version=7, require_stable=True)
    assert fetched(unstable)[("t", 0)] == (-1, -1, "", E.UNSTABLE_OFFSET_COMMIT)
    c.log.release()
    assert errors(reply) == {("t", 0): 0}
    assert c.committed(partitions=[("t", 0)]) == {("t", 0): 2}


@pytest.mark.parametrize("append_error,expected", [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.MESSAGE_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
    (E.RECORD_LIST_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
    (E.INVALID_FETCH_SIZE, E.INVALID_COMMIT_OFFSET_SIZE),
    (E.NETWORK_EXCEPTION, E.COORDINATOR_LOAD_IN_PROGRESS),
    (E.REQUEST_TIMED_OUT, E.REQUEST_TIMED_OUT),
])
def test_append_errors_of_a_commit(append_error, expected) -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 1})
    c.log.error = append_error
    assert errors(c.commit(offsets={("t", 0): 2, ("t", 1): 2})) == {("t", 0): expected, ("t", 1): expected}
    c.log.error = E.NONE
    assert c.committed(partitions=[("t", 0), ("t", 1)]) == {("t", 0): 1, ("t", 1): -1}
    assert not c.group("g").pending_offset_commits


@pytest.mark.parametrize("append_error,expected", [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.REQUEST_TIMED_OUT, E.REBALANCE_IN_PROGRESS),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.CORRUPT_MESSAGE, E.CORRUPT_MESSAGE),
])
def test_append_errors_of_the_group_metadata(append_error, expected) -> None:
    c = Cluster()
    mid = c.join_new()
    join = c.join(member_id=mid)
    c.sleep(3000)
    assert join.done
    c.log.error = append_error
    assert c.sync(member_id=mid, assignments={mid: b"A"}).error == expected


def test_offset_metadata_too_large_counts_utf16_units_as_java_does() -> None:
    c = Cluster(GroupCoordinatorConfig(offsets_topic_num_partitions=4, offset_metadata_max_bytes=10))
    smiles = "\U0001F600" * 6               # 6 characters in Python, 12 UTF-16 units in Java
    reply = c.commit(offsets={("t", 0): (1, "x" * 10), ("t", 1): (1, "x" * 11), ("t", 2): (1, smiles)})
    assert errors(reply) == {("t", 0): 0, ("t", 1): E.OFFSET_METADATA_TOO_LARGE, ("t", 2): E.OFFSET_METADATA_TOO_LARGE}
    assert c.committed(partitions=[("t", 0), ("t", 1)]) == {("t", 0): 1, ("t", 1): -1}
    appended = len(c.log.appends)
    assert errors(c.commit(offsets={("t", 1): (1, "y" * 11)})) == {("t", 1): E.OFFSET_METADATA_TOO_LARGE}
    assert len(c.log.appends) == appended    # nothing to write


def test_the_default_metadata_limit_is_4096() -> None:
    c = Cluster()
    reply = c.commit(offsets={("t", 0): (1, "x" * 4096), ("t", 1): (1, "x" * 4097)})
    assert errors(reply) == {("t", 0): 0, ("t", 1): E.OFFSET_METADATA_TOO_LARGE}


def test_commits_for_partitions_that_do_not_exist() -> None:
    c = Cluster(partition_exists=lambda topic, partition: topic == "t" and partition < 2)
    reply = c.commit(offsets={("t", 0): 1, ("t", 5): 1, ("nope", 0): 1})
    assert errors(reply) == {("t", 0): 0, ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert c.committed(partitions=[("t", 5)]) == {("t", 5): -1}
    only_unknown = c.commit(offsets={("nope", 1): 1})
    assert errors(only_unknown) == {("nope", 1): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_offset_fetch_v1_reports_group_errors_in_every_partition() -> None:
    c = Cluster(owned=[])
    reply = c.fetch(partitions=[("t", 0), ("t", 1)], version=1)
    assert fetched(reply) == {("t", 0): (-1, -1, "", E.NOT_COORDINATOR), ("t", 1): (-1, -1, "", E.NOT_COORDINATOR)}
    v2 = c.fetch(partitions=[("t", 0)], version=2)
    assert v2.error == E.NOT_COORDINATOR and v2["topics"] == []


def test_offset_fetch_v8_groups() -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 4})
    reply = c.fetch(partitions=[("t", 0)], version=8)
    (group,) = reply["groups"]
    assert group["group_id"] == "g" and group["error_code"] == 0
    assert group["topics"][0]["partitions"][0]["committed_offset"] == 4
    assert c.fetch(group="", partitions=None, version=8)["groups"][0]["topics"] == []


# ---------------------------------------------------------------------------
# OffsetDelete

def test_offset_delete_in_an_empty_group() -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 1, ("t", 1): 2})
    reply = c.offset_delete(partitions=[("t", 0), ("x", 0)])
    assert reply.error == 0 and errors(reply) == {("t", 0): 0, ("x", 0): 0}
    assert c.committed(partitions=None) == {("t", 1): 2}
    assert records(c)[-1] == (co.offset_commit_key("g", "t", 0), None)     # a tombstone


def test_deleting_the_last_offset_of_a_simple_group_removes_the_group() -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 1})
    c.offset_delete(partitions=[("t", 0)])
    assert c.group("g") is None
    assert c.offset_delete(partitions=[("t", 0)]).error == E.GROUP_ID_NOT_FOUND


def test_offset_delete_of_subscribed_topics_is_refused() -> None:
    c = Cluster()
    (mid,) = c.stable_group(1, topics=("t",))
    c.commit(offsets={("t", 0): 1, ("u", 0): 1}, generation=1, member_id=mid)
    reply = c.offset_delete(partitions=[("t", 0), ("u", 0)])
    assert reply.error == 0 and errors(reply) == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): 0}
    assert c.committed(partitions=None) == {("t", 0): 1}


def test_offset_delete_errors() -> None:
    c = Cluster(partition_exists=lambda topic, partition: topic != "gone")
    assert c.offset_delete(group="nope", partitions=[("t", 0)]).error == E.GROUP_ID_NOT_FOUND
    ids = [c.join_new() for _ in range(1)]
    j = c.join(member_id=ids[0], protocol_type="connect")
    c.sleep(3000)
    c.sync(member_id=j["member_id"], assignments={j["member_id"]: b""})
    assert c.offset_delete(partitions=[("t", 0)]).error == E.NON_EMPTY_GROUP      # not a consumer group
    c.commit(group="s", offsets={("t", 0): 1})
    reply = c.offset_delete(group="s", partitions=[("gone", 0), ("t", 0)])
    assert errors(reply) == {("gone", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("t", 0): 0}


# ---------------------------------------------------------------------------
# DeleteGroups

def test_delete_groups() -> None:
    c = Cluster()
    c.stable_group(1, group="busy")
    (mid,) = c.stable_group(1, group="done")
    c.commit(group="done", offsets={("t", 0): 1, ("t", 1): 1}, generation=1, member_id=mid)
    c.leave(group="done", member_id=mid)
    c.commit(group="simple", offsets={("t", 0): 1})
    reply = c.delete_groups("busy", "done", "simple", "nope", "done")
    assert {r["group_id"]: r["error_code"] for r in reply["results"]} == {
        "busy": E.NON_EMPTY_GROUP, "done": 0, "simple": 0, "nope": E.GROUP_ID_NOT_FOUND}
    assert len(reply["results"]) == 4
    assert c.group("done") is None and c.group("simple") is None and c.group("busy") is not None
    tail = records(c, "done")[-3:]
    assert set(tail) == {(co.offset_commit_key("done", "t", 0), None), (co.offset_commit_key("done", "t", 1), None),
                         (co.group_metadata_key("done"), None)}
    # a group that only stored offsets never had metadata in the log: no metadata tombstone
    assert (co.group_metadata_key("simple"), None) not in records(c, "simple")
    assert c.describe("done")["groups"][0]["group_state"] == "Dead"
    assert c.delete_groups("done")["results"][0]["error_code"] == E.GROUP_ID_NOT_FOUND


# ---------------------------------------------------------------------------
# ListGroups and DescribeGroups

def test_list_groups_with_state_and_type_filters() -> None:
    c = Cluster()
    c.stable_group(1, group="stable")
    c.commit(group="simple", offsets={("t", 0): 1})
    c.join(group="joining", member_id=c.join_new(group="joining"))
    everything = {g["group_id"]: g["group_state"] for g in c.list_groups()["groups"]}
    assert everything == {"stable": "Stable", "simple": "Empty", "joining": "PreparingRebalance"}
    assert [g["group_id"] for g in c.list_groups(states=["stable", "EMPTY"])["groups"]] == ["stable", "simple"]
    assert c.list_groups(states=["Dead"])["groups"] == []
    v0 = c.list_groups(version=0)["groups"]
    assert sorted(g["group_id"] for g in v0) == ["joining", "simple", "stable"]
    assert len(c.list_groups(version=5, types=["Classic"])["groups"]) == 3
    assert c.list_groups(version=5, types=["consumer"])["groups"] == []
    assert {g["group_type"] for g in c.list_groups(version=5)["groups"]} == {"classic"}


def test_describe_groups() -> None:
    c = Cluster()
    leader, follower = c.stable_group(2, topics=("t",))
    (g,) = c.describe("g")["groups"]
    assert (g["error_code"], g["group_state"], g["protocol_type"], g["protocol_data"]) == (0, "Stable", "consumer", "range")
    members = {m["member_id"]: m for m in g["members"]}
    assert members[leader]["member_metadata"] == subscription("t")
    assert members[leader]["member_assignment"] == assignment(t=[0])
    assert members[follower]["client_host"] == "/127.0.0.1" and members[follower]["client_id"] == "client"
    assert g["authorized_operations"] == -(1 << 31)
    c.join(member_id=leader)                  # rebalancing: no metadata, no assignments, no protocol
    (g,) = c.describe("g")["groups"]
    assert g["group_state"] == "PreparingRebalance" and g["protocol_data"] == ""
    assert {m["member_metadata"] for m in g["members"]} == {b""}
    (missing,) = c.describe("missing")["groups"]
    assert (missing["error_code"], missing["group_state"], missing["members"]) == (0, "Dead", [])
    ops = c.describe("g", version=3, include_ops=True)["groups"][0]["authorized_operations"]
    assert ops == (1 << 3) | (1 << 6) | (1 << 8)      # READ, DELETE, DESCRIBE


# ---------------------------------------------------------------------------
# expiry

RETENTION_CONFIG = GroupCoordinatorConfig(offsets_topic_num_partitions=4, offsets_retention_ms=60_000,
                                          offsets_retention_check_interval_ms=10_000)


def test_offsets_of_an_empty_group_expire_after_the_retention_and_the_group_goes() -> None:
    c = Cluster(RETENTION_CONFIG, expiration=True)
    (mid,) = c.stable_group(1)
    c.commit(offsets={("t", 0): 5}, generation=1, member_id=mid)
    for _ in range(20):
        c.sleep(5000)
        assert c.heartbeat(generation=1, member_id=mid).error == 0
    assert c.committed(partitions=[("t", 0)]) == {("t", 0): 5}      # 100 s later: it has members
    c.leave(member_id=mid)                     # Empty from now: 60 s of retention
    c.sleep(50_000)
    assert c.committed(partitions=[("t", 0)]) == {("t", 0): 5}
    c.sleep(20_000)                            # the next check after 60 s
    assert c.group("g") is None
    assert c.fetch(partitions=[("t", 0)])["topics"][0]["partitions"][0]["committed_offset"] == -1
    tail = records(c)[-2:]
    assert set(tail) == {(co.offset_commit_key("g", "t", 0), None), (co.group_metadata_key("g"), None)}


def test_offsets_of_a_simple_group_expire_retention_after_their_commit() -> None:
    c = Cluster(RETENTION_CONFIG, expiration=True)
    c.commit(offsets={("t", 0): 1})
    c.sleep(30_000)
    c.commit(offsets={("t", 1): 1})
    c.sleep(35_000)                            # t=65 s: the first has expired, the second not yet
    assert c.committed(partitions=None) == {("t", 1): 1}
    c.sleep(30_000)
    assert c.group("g") is None


def test_offsets_of_topics_a_stable_group_no_longer_subscribes_to_expire() -> None:
    c = Cluster(RETENTION_CONFIG, expiration=True)
    (mid,) = c.stable_group(1, topics=("t",))
    c.commit(offsets={("t", 0): 1, ("old", 0): 1}, generation=1, member_id=mid)
    for _ in range(20):
        c.sleep(5000)
        c.heartbeat(generation=1, member_id=mid)
    assert c.committed(partitions=None) == {("t", 0): 1}


def test_deleted_partitions_lose_their_offsets() -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 1, ("u", 0): 2})
    c.coordinator.on_partitions_deleted([("t", 0)])
    assert c.committed(partitions=None) == {("u", 0): 2}
    assert records(c)[-1] == (co.offset_commit_key("g", "t", 0), None)


def test_the_default_configuration_is_kafkas() -> None:
    config = GroupCoordinatorConfig.from_values({})
    assert config == GroupCoordinatorConfig()
    assert (config.offsets_retention_ms, config.group_initial_rebalance_delay_ms, config.group_min_session_timeout_ms,
            config.group_max_session_timeout_ms, config.offset_metadata_max_bytes,
            config.offsets_topic_num_partitions) == (10080 * 60_000, 3000, 6000, 1800000, 4096, 50)
    config = GroupCoordinatorConfig.from_values({"offsets.retention.minutes": "2", "group.max.size": 5})
    assert config.offsets_retention_ms == 120_000 and config.group_max_size == 5
