"""KIP-345 static membership: a member with a group.instance.id that restarts takes its old place
(new member id, same assignment, no rebalance while the protocol stays the same); the old member
id is fenced with FENCED_INSTANCE_ID."""

from __future__ import annotations

from protocol.messages import consumer_offsets as co

from .harness import Cluster, E, subscription

PROTOCOLS = (("range", subscription("t")),)


def stable_static(c: Cluster):
    """Static s1 (the leader) and dynamic d, Stable at generation 1."""
    s = c.join(instance="s1", protocols=PROTOCOLS)
    d = c.join(member_id=c.join_new(), protocols=PROTOCOLS)
    c.sleep_until(lambda: s.done and d.done)
    sid, did = s["member_id"], d["member_id"]
    assert s["leader"] == sid and sid.startswith("s1-")
    assert c.sync(generation=1, member_id=sid, instance="s1", assignments={sid: b"S", did: b"D"}).error == 0
    assert c.sync(generation=1, member_id=did).error == 0
    return sid, did


def test_a_static_member_gets_no_member_id_required() -> None:
    c = Cluster()
    join = c.join(instance="i1", version=5)
    c.sleep(3000)
    assert join.error == 0 and join["member_id"].startswith("i1-")


def test_a_restarted_static_member_replaces_its_old_id_without_a_rebalance() -> None:
    c = Cluster()
    sid, did = stable_static(c)
    c.log.hold = True
    rejoin = c.join(instance="s1", protocols=PROTOCOLS)            # restarted: no member id
    assert not rejoin.done                                          # the new member id is being persisted
    c.log.release()
    new_id = rejoin["member_id"]
    assert rejoin.error == 0 and new_id != sid and new_id.startswith("s1-")
    # same generation; the old leader id, so the restarted leader does not run an assignment
    assert rejoin["generation_id"] == 1 and rejoin["leader"] == sid and rejoin["members"] == []
    assert str(c.group("g").state) == "Stable" and c.group("g").leader_id == new_id
    stored = co.read_group_metadata_value(c.log.partitions[c.coordinator.partition_for("g")][-1][1])
    assert sorted(m.member_id for m in stored.members) == sorted([new_id, did])
    # the old id is fenced everywhere; the new one carries on with the old assignment
    assert c.heartbeat(generation=1, member_id=sid, instance="s1").error == E.FENCED_INSTANCE_ID
    assert c.sync(generation=1, member_id=sid, instance="s1").error == E.FENCED_INSTANCE_ID
    commit = c.commit(offsets={("t", 0): 1}, generation=1, member_id=sid, instance="s1")
    assert commit["topics"][0]["partitions"][0]["error_code"] == E.FENCED_INSTANCE_ID
    assert c.heartbeat(generation=1, member_id=new_id, instance="s1").error == 0
    sync = c.sync(generation=1, member_id=new_id, instance="s1")
    assert sync.error == 0 and sync["assignment"] == b"S"


def test_a_failed_write_of_the_new_static_member_id_restores_the_old_one() -> None:
    c = Cluster()
    sid, _ = stable_static(c)
    c.log.hold = True
    rejoin = c.join(instance="s1", protocols=PROTOCOLS)
    c.log.release(error=E.NOT_ENOUGH_REPLICAS)
    assert rejoin.error == E.COORDINATOR_NOT_AVAILABLE and rejoin["member_id"] == ""
    assert c.group("g").current_static_member_id("s1") == sid
    assert c.heartbeat(generation=1, member_id=sid, instance="s1").error == 0


def test_from_join_group_v9_a_restarted_static_leader_is_told_to_skip_the_assignment() -> None:
    c = Cluster()
    stable_static(c)
    rejoin = c.join(instance="s1", protocols=PROTOCOLS, version=9)
    assert rejoin.error == 0 and rejoin["skip_assignment"] is True
    assert rejoin["leader"] == rejoin["member_id"] and len(rejoin["members"]) == 2


def test_a_static_member_rejoining_with_another_protocol_rebalances() -> None:
    c = Cluster()
    s = c.join(instance="s1", protocols=PROTOCOLS)
    c.sleep(3000)
    sid = s["member_id"]
    c.sync(generation=1, member_id=sid, instance="s1", assignments={sid: b"S"})
    # it now prefers roundrobin, which would be selected: the generation must change
    rejoin = c.join(instance="s1", protocols=(("roundrobin", b"x"),) + PROTOCOLS)
    assert rejoin.error == 0 and rejoin["generation_id"] == 2 and rejoin["protocol_name"] == "roundrobin"
    assert rejoin["leader"] == rejoin["member_id"] != sid


def test_a_static_member_rejoining_during_completing_rebalance_rebalances() -> None:
    c = Cluster()
    s = c.join(instance="s1", protocols=PROTOCOLS)
    d = c.join(member_id=c.join_new(), protocols=PROTOCOLS)
    c.sleep_until(lambda: s.done and d.done)
    assert str(c.group("g").state) == "CompletingRebalance"
    parked = c.sync(generation=1, member_id=d["member_id"])
    rejoin = c.join(instance="s1", protocols=PROTOCOLS)
    assert str(c.group("g").state) == "PreparingRebalance" and parked.error == E.REBALANCE_IN_PROGRESS
    c.join(member_id=d["member_id"], protocols=PROTOCOLS)
    assert rejoin.error == 0 and rejoin["generation_id"] == 2


def test_a_parked_join_of_the_replaced_id_is_fenced() -> None:
    c = Cluster()
    sid, did = stable_static(c)
    old_rejoin = c.join(member_id=sid, instance="s1", protocols=(("range", b"changed"),))
    assert not old_rejoin.done and str(c.group("g").state) == "PreparingRebalance"
    c.join(instance="s1", protocols=PROTOCOLS)                      # another process with the same instance id
    assert old_rejoin.error == E.FENCED_INSTANCE_ID


def test_static_member_errors() -> None:
    c = Cluster()
    sid, did = stable_static(c)
    assert c.heartbeat(generation=1, member_id=sid, instance="nope").error == E.UNKNOWN_MEMBER_ID
    assert c.heartbeat(generation=1, member_id=did, instance="s1").error == E.FENCED_INSTANCE_ID
    assert c.join(member_id="someone", instance="s1", protocols=PROTOCOLS).error == E.FENCED_INSTANCE_ID


def test_leave_by_instance_id_alone() -> None:
    c = Cluster()
    sid, did = stable_static(c)
    leave = c.leave(members=[("", "s1"), ("", "unknown")])
    assert [m["error_code"] for m in leave["members"]] == [0, E.UNKNOWN_MEMBER_ID]
    assert not c.group("g").has(sid) and str(c.group("g").state) == "PreparingRebalance"
    assert c.leave(members=[(did, "s1")])["members"][0]["error_code"] == E.UNKNOWN_MEMBER_ID
