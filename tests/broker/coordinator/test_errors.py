"""Every error the group APIs answer, each where Kafka answers it."""

from __future__ import annotations

import pytest

from broker.coordinator import GroupCoordinatorConfig

from .harness import Cluster, E, subscription


def commit_error(reply) -> int:
    return reply["topics"][0]["partitions"][0]["error_code"]


@pytest.mark.parametrize("session", [5999, 1800001])
def test_invalid_session_timeout(session) -> None:
    c = Cluster()
    assert c.join(session=session).error == E.INVALID_SESSION_TIMEOUT
    assert c.join(session=6000).error == E.MEMBER_ID_REQUIRED
    assert c.join(session=1800000).error == E.MEMBER_ID_REQUIRED


def test_the_session_timeout_bounds_are_configurable() -> None:
    c = Cluster(GroupCoordinatorConfig(offsets_topic_num_partitions=4, group_min_session_timeout_ms=100,
                                       group_max_session_timeout_ms=200))
    assert c.join(session=99).error == E.INVALID_SESSION_TIMEOUT
    assert c.join(session=150).error == E.MEMBER_ID_REQUIRED


def test_inconsistent_group_protocol() -> None:
    c = Cluster()
    assert c.join(protocol_type="").error == E.INCONSISTENT_GROUP_PROTOCOL          # no protocol type
    assert c.join(protocols=()).error == E.INCONSISTENT_GROUP_PROTOCOL               # no protocols
    c.stable_group(1)
    assert c.join(protocol_type="connect").error == E.INCONSISTENT_GROUP_PROTOCOL    # another protocol type
    assert c.join(protocols=(("roundrobin", b""),)).error == E.INCONSISTENT_GROUP_PROTOCOL   # no common protocol
    assert c.join(protocols=(("roundrobin", b""), ("range", b""))).error == E.MEMBER_ID_REQUIRED


def test_sync_group_v5_checks_protocol_type_and_name() -> None:
    c = Cluster()
    (mid,) = c.stable_group(1)
    assert c.sync(member_id=mid, version=5, protocol_type="consumer", protocol_name="roundrobin").error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert c.sync(member_id=mid, version=5, protocol_type="connect", protocol_name="range").error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert c.sync(member_id=mid, version=5, protocol_type=None, protocol_name="range").error == \
        E.INCONSISTENT_GROUP_PROTOCOL    # mandatory from v5
    ok = c.sync(member_id=mid, version=5, protocol_type="consumer", protocol_name="range")
    assert ok.error == 0 and (ok["protocol_type"], ok["protocol_name"]) == ("consumer", "range")


def test_unknown_member_id() -> None:
    c = Cluster()
    assert c.join(member_id="ghost").error == E.UNKNOWN_MEMBER_ID          # no such group
    assert c.heartbeat(group="nope", member_id="ghost").error == E.UNKNOWN_MEMBER_ID
    assert c.sync(group="nope", member_id="ghost").error == E.UNKNOWN_MEMBER_ID
    leave = c.leave(group="nope", member_id="ghost")
    assert leave.error == 0 and leave["members"][0]["error_code"] == E.UNKNOWN_MEMBER_ID
    (mid,) = c.stable_group(1)
    assert c.join(member_id="ghost").error == E.UNKNOWN_MEMBER_ID
    assert c.heartbeat(member_id="ghost").error == E.UNKNOWN_MEMBER_ID
    assert c.sync(member_id="ghost").error == E.UNKNOWN_MEMBER_ID
    assert commit_error(c.commit(offsets={("t", 0): 1}, generation=1, member_id="ghost")) == E.UNKNOWN_MEMBER_ID
    # a "simple" commit (generation -1, no member) to a group with members
    assert commit_error(c.commit(offsets={("t", 0): 1})) == E.UNKNOWN_MEMBER_ID


def test_unknown_member_id_in_an_empty_group() -> None:
    c = Cluster()
    (mid,) = c.stable_group(1)
    c.leave(member_id=mid)
    assert str(c.group("g").state) == "Empty"
    assert c.heartbeat(generation=2, member_id=mid).error == E.UNKNOWN_MEMBER_ID
    assert c.sync(generation=2, member_id=mid).error == E.UNKNOWN_MEMBER_ID
    assert commit_error(c.commit(offsets={("t", 0): 1}, generation=2, member_id=mid)) == E.UNKNOWN_MEMBER_ID


def test_illegal_generation() -> None:
    c = Cluster()
    (mid,) = c.stable_group(1)
    assert c.heartbeat(generation=0, member_id=mid).error == E.ILLEGAL_GENERATION
    assert c.heartbeat(generation=2, member_id=mid).error == E.ILLEGAL_GENERATION
    assert c.sync(generation=7, member_id=mid).error == E.ILLEGAL_GENERATION
    assert commit_error(c.commit(offsets={("t", 0): 1}, generation=3, member_id=mid)) == E.ILLEGAL_GENERATION
    # a member commit for a group that does not exist (any more): an old generation
    assert commit_error(c.commit(group="gone", offsets={("t", 0): 1}, generation=3, member_id="m")) == \
        E.ILLEGAL_GENERATION
    assert c.group("gone") is None


def test_invalid_group_id() -> None:
    c = Cluster()
    assert c.join(group="").error == E.INVALID_GROUP_ID
    assert c.heartbeat(group="").error == E.INVALID_GROUP_ID
    assert c.sync(group="").error == E.INVALID_GROUP_ID
    assert c.leave(group="").error == E.INVALID_GROUP_ID
    # offsets, describe and delete accept "" (old clients committed with an empty group id)
    assert commit_error(c.commit(group="", offsets={("t", 0): 1})) == 0
    assert c.committed(group="") == {("t", 0): 1}
    assert c.describe("")["groups"][0]["error_code"] == 0


def test_rebalance_in_progress() -> None:
    c = Cluster()
    leader, follower = c.stable_group(2)
    c.join(member_id=leader)                   # PreparingRebalance
    assert c.heartbeat(generation=1, member_id=follower).error == E.REBALANCE_IN_PROGRESS
    assert c.sync(generation=1, member_id=follower).error == E.REBALANCE_IN_PROGRESS
    c.join(member_id=follower)                 # everyone joined: CompletingRebalance, generation 2
    assert str(c.group("g").state) == "CompletingRebalance"
    assert commit_error(c.commit(offsets={("t", 0): 1}, generation=2, member_id=follower)) == E.REBALANCE_IN_PROGRESS
    assert c.heartbeat(generation=2, member_id=follower).error == 0     # heartbeats are fine meanwhile


def test_group_max_size() -> None:
    c = Cluster(GroupCoordinatorConfig(offsets_topic_num_partitions=4, group_max_size=2))
    ids = c.stable_group(2)
    reply = c.join()                           # refused before it even gets a member id
    assert reply.error == E.GROUP_MAX_SIZE_REACHED and reply["member_id"] == ""
    assert c.group("g").size == 2
    # existing members still rejoin
    assert c.join(member_id=ids[1], protocols=(("range", subscription("t")),)).error == 0


def test_group_max_size_during_a_rebalance_counts_the_members_that_rejoined() -> None:
    c = Cluster(GroupCoordinatorConfig(offsets_topic_num_partitions=4, group_max_size=2))
    leader, follower = c.stable_group(2)
    c.join(member_id=leader)                   # PreparingRebalance; 1 of 2 rejoined
    newcomer = c.join(member_id=c.join_new())
    assert not newcomer.done                   # accepted: only one has rejoined so far
    late = c.join(member_id=follower)
    assert late.error == E.GROUP_MAX_SIZE_REACHED and not c.group("g").has(follower)


def test_coordinator_not_available_before_startup_and_after_shutdown() -> None:
    c = Cluster(start=False)
    assert c.join().error == E.COORDINATOR_NOT_AVAILABLE
    assert c.list_groups().error == E.COORDINATOR_NOT_AVAILABLE
    c = Cluster()
    mid, _ = c.stable_group(2)
    c.join_new(group="other")                  # a KIP-394 pending member, with its own expiry timer
    parked = c.join(member_id=mid)             # the leader's rejoin waits for the other member
    c.coordinator.shutdown()
    assert parked.error == E.NOT_COORDINATOR
    assert c.heartbeat(member_id=mid).error == E.COORDINATOR_NOT_AVAILABLE
    assert c.time.pending_timers() == 0


def test_not_coordinator_for_groups_of_partitions_we_do_not_lead() -> None:
    c = Cluster(owned=[])
    assert c.join().error == E.NOT_COORDINATOR
    assert c.heartbeat(member_id="m").error == E.NOT_COORDINATOR
    assert c.sync(member_id="m").error == E.NOT_COORDINATOR
    assert c.leave(member_id="m").error == E.NOT_COORDINATOR
    assert commit_error(c.commit(offsets={("t", 0): 1})) == E.NOT_COORDINATOR
    assert c.fetch(partitions=[("t", 0)]).error == E.NOT_COORDINATOR
    assert c.describe("g")["groups"][0]["error_code"] == E.NOT_COORDINATOR
    assert c.delete_groups("g")["results"][0]["error_code"] == E.NOT_COORDINATOR
    assert c.offset_delete(partitions=[("t", 0)]).error == E.NOT_COORDINATOR


def test_coordinator_load_in_progress() -> None:
    c = Cluster(owned=[])
    partition = c.coordinator.partition_for("g")
    c.log.deferred_reads = []
    c.elect(partition)                                        # the read has not come back yet
    assert c.join().error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.heartbeat(member_id="m").error == 0              # answered blindly while loading
    assert c.sync(member_id="m").error == E.REBALANCE_IN_PROGRESS   # the rebalance is lost: rejoin
    assert commit_error(c.commit(offsets={("t", 0): 1})) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.fetch(partitions=[("t", 0)]).error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.list_groups().error == E.COORDINATOR_LOAD_IN_PROGRESS
    (_, done), = c.log.deferred_reads
    done([])
    assert c.join().error == E.MEMBER_ID_REQUIRED
    assert c.list_groups().error == 0
