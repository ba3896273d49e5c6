"""GroupCoordinatorAdapter's version handling: what each API version carries in and out, and
that every body it answers with encodes, for every version of every group API's schema."""

from __future__ import annotations

import pytest

from broker.coordinator import error_response
from protocol.api_keys import ApiKey
from protocol.messages import APIS, consumer_offsets as co

from tests.protocol.kafka_values import plain

from .harness import Cluster, E, Reply


@pytest.mark.parametrize("version", range(0, 10))
def test_join_group_every_version(version) -> None:
    c = Cluster()
    reply = c.join(version=version, session=7000, rebalance=45000)
    if version >= 4:
        assert reply.error == E.MEMBER_ID_REQUIRED
        reply = c.join(member_id=reply["member_id"], version=version, session=7000, rebalance=45000)
    c.sleep(3000)
    assert reply.error == 0 and reply["protocol_name"] == "range"
    member = c.group("g").get(reply["member_id"])
    # v0 has no rebalance timeout: the session timeout stands in
    assert member.rebalance_timeout_ms == (7000 if version == 0 else 45000)
    if version >= 7:
        assert reply["protocol_type"] == "consumer"


@pytest.mark.parametrize("version,expected", [(0, ""), (6, ""), (7, None), (9, None)])
def test_join_group_error_protocol_name_is_null_only_from_v7(version, expected) -> None:
    c = Cluster()
    reply = c.join(session=1, version=version)
    assert reply.error == E.INVALID_SESSION_TIMEOUT and reply["protocol_name"] == expected


@pytest.mark.parametrize("version", range(0, 6))
def test_sync_heartbeat_leave_every_version(version) -> None:
    c = Cluster()
    (mid,) = c.stable_group(1)
    sync = c.sync(member_id=mid, version=version, protocol_type="consumer", protocol_name="range")
    assert sync.error == 0 and sync["assignment"]
    if version >= 5:
        assert (sync["protocol_type"], sync["protocol_name"]) == ("consumer", "range")
    if version <= 4:
        assert c.heartbeat(member_id=mid, version=version).error == 0
    leave = c.leave(member_id=mid, version=version)
    assert leave.error == 0 and c.group("g").size == 0


@pytest.mark.parametrize("version", [0, 1, 2])
def test_leave_group_before_v3_has_one_error(version) -> None:
    c = Cluster()
    c.stable_group(1)
    assert c.leave(member_id="ghost", version=version).body == {"throttle_time_ms": 0, "error_code": E.UNKNOWN_MEMBER_ID,
                                                                "members": []}
    other = Cluster(owned=[])
    assert other.leave(member_id="x", version=version).error == E.NOT_COORDINATOR


@pytest.mark.parametrize("version", range(2, 10))   # v10 names topics by id (KIP-848): not for classic groups
def test_offset_commit_every_version(version) -> None:
    c = Cluster()
    reply = c.commit(offsets={("t", 0): 3}, version=version, leader_epoch=2)
    assert reply["topics"][0]["partitions"][0]["error_code"] == 0
    value = co.read_offset_commit_value(c.log.partitions[c.coordinator.partition_for("g")][-1][1])
    assert (value.version, value.commit_timestamp, value.expire_timestamp) == (3, c.time.milliseconds(), -1)
    epoch = c.fetch(partitions=[("t", 0)], version=5)["topics"][0]["partitions"][0]["committed_leader_epoch"]
    assert epoch == (2 if version >= 6 else -1)


@pytest.mark.parametrize("version", range(1, 9))
def test_offset_fetch_every_version(version) -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 3}, leader_epoch=4)
    reply = c.fetch(partitions=[("t", 0)], version=version)
    topics = reply["groups"][0]["topics"] if version >= 8 else reply["topics"]
    p = topics[0]["partitions"][0]
    assert p["committed_offset"] == 3 and p["committed_leader_epoch"] == (4 if version >= 5 else -1)


@pytest.mark.parametrize("version", range(0, 6))
def test_list_and_describe_every_version(version) -> None:
    c = Cluster()
    c.stable_group(1)
    assert [g["group_id"] for g in c.list_groups(version=version)["groups"]] == ["g"]
    assert c.describe("g", version=version)["groups"][0]["group_state"] == "Stable"


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_groups_every_version(version) -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 1})
    assert c.delete_groups("g", version=version)["results"] == [{"group_id": "g", "error_code": 0}]


def find(c, version, request, locate) -> Reply:
    api = APIS[ApiKey.FIND_COORDINATOR]
    req = api.request.parse(version, api.request.build(version, request))
    reply = Reply(api, version)
    c.coordinator.find_coordinator(req, version, locate, reply)
    return reply


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_v0_to_v3(version) -> None:
    c = Cluster(start=False)
    asked = []

    def locate(partition):
        asked.append(partition)
        return 0, 7, "broker7", 9093

    reply = find(c, version, {"key": "my-group", "key_type": 0}, locate)
    assert asked == [c.coordinator.partition_for("my-group")]
    assert (reply.error, reply["node_id"], reply["host"], reply["port"]) == (0, 7, "broker7", 9093)
    missing = find(c, version, {"key": "g"}, lambda p: (E.COORDINATOR_NOT_AVAILABLE, -1, "", -1))
    assert (missing.error, missing["node_id"], missing["host"], missing["port"]) == (E.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
    if version >= 1:
        assert find(c, version, {"key": "txn", "key_type": 1}, locate).error == E.INVALID_REQUEST


def test_find_coordinator_v4_batches_keys() -> None:
    c = Cluster(start=False)
    assert c.coordinator.partition_for("a") != c.coordinator.partition_for("b")
    leaders = {c.coordinator.partition_for("a"): (0, 1, "h1", 1), c.coordinator.partition_for("b"): (0, 2, "h2", 2)}
    reply = find(c, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]}, lambda p: leaders[p])
    assert [(x["key"], x["node_id"], x["host"], x["port"], x["error_code"]) for x in reply["coordinators"]] == [
        ("a", 1, "h1", 1, 0), ("b", 2, "h2", 2, 0)]


GROUP_APIS = [ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
              ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS,
              ApiKey.OFFSET_DELETE]
SAMPLE = {
    "group_id": "g", "groups": ["a", "b"], "groups_names": ["a", "a", "b"], "key": "g", "coordinator_keys": ["a", "b"],
    "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1},
                                            {"partition_index": 1, "committed_offset": 1}],
                "partition_indexes": [0, 1]}],
}


def all_errors(body) -> list:
    """Every error code in a response body, wherever it sits."""
    found = []
    if isinstance(body, dict):
        for k, v in body.items():
            if k == "error_code":
                found.append(v)
            else:
                found += all_errors(v)
    elif isinstance(body, list):
        for x in body:
            found += all_errors(x)
    return found


@pytest.mark.parametrize("key", GROUP_APIS, ids=lambda k: ApiKey(k).name)
def test_error_response_of_every_group_api_and_version(key) -> None:
    api = APIS[key]
    for version in range(api.request.min_version, api.request.max_version + 1):
        sample = dict(SAMPLE)
        if key == ApiKey.OFFSET_FETCH and version >= 8:
            sample["groups"] = [{"group_id": "a", "topics": None}, {"group_id": "b", "topics": []}]
        request = api.request.parse(version, api.request.build(version, sample))
        body = error_response(key, request, version, E.GROUP_AUTHORIZATION_FAILED)
        parsed = plain(api.response.parse(version, api.response.build(version, body)))
        errors = all_errors(body)
        assert errors and set(errors) == {E.GROUP_AUTHORIZATION_FAILED}, (key, version, body)
        assert E.GROUP_AUTHORIZATION_FAILED in all_errors(parsed)


def test_error_response_shapes() -> None:
    def body(key, version, request):
        api = APIS[key]
        return error_response(key, api.request.parse(version, api.request.build(version, request)), version,
                              E.GROUP_AUTHORIZATION_FAILED)

    commit = body(ApiKey.OFFSET_COMMIT, 7, {"group_id": "g", "topics": SAMPLE["topics"]})
    assert [p["partition_index"] for p in commit["topics"][0]["partitions"]] == [0, 1]
    assert len(body(ApiKey.OFFSET_FETCH, 1, {"group_id": "g", "topics": SAMPLE["topics"]})["topics"][0]["partitions"]) == 2
    assert body(ApiKey.OFFSET_FETCH, 5, {"group_id": "g", "topics": None}) == {"error_code": 30, "topics": []}
    assert [g["group_id"] for g in body(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["a", "b"]})["groups"]] == ["a", "b"]
    assert body(ApiKey.JOIN_GROUP, 7, {"group_id": "g"})["protocol_name"] is None
    with pytest.raises(ValueError):
        error_response(ApiKey.PRODUCE, None, 7, 30)


def test_offsets_topic_configs() -> None:
    c = Cluster(start=False)
    assert c.coordinator.offsets_topic_configs() == {"cleanup.policy": "compact", "segment.bytes": "104857600",
                                                     "compression.type": "producer"}
