"""Join / sync / heartbeat / leave flows of the classic group protocol on a MockTime: one to three
members, KIP-394 member ids, the initial rebalance delay, rebalances on join, leave, session
expiry, rebalance and sync timeouts."""

from __future__ import annotations

from broker.coordinator import GroupCoordinatorConfig
from broker.coordinator.group_metadata import NEW_MEMBER_JOIN_TIMEOUT_MS
from protocol.messages import consumer_offsets as co

from .harness import Cluster, E, assignment, subscription


def state(c, group="g") -> str:
    return str(c.group(group).state)


def test_one_member_join_sync_heartbeat() -> None:
    c = Cluster()
    first = c.join(member_id="")
    assert first.error == E.MEMBER_ID_REQUIRED and first["member_id"].startswith("client-")
    mid = first["member_id"]
    join = c.join(member_id=mid, protocols=(("range", subscription("t")),))
    assert not join.done and state(c) == "PreparingRebalance"
    c.sleep(2999)
    assert not join.done                      # group.initial.rebalance.delay.ms
    c.sleep(1)
    assert join.error == 0
    assert (join["generation_id"], join["leader"], join["member_id"], join["protocol_name"]) == (1, mid, mid, "range")
    assert join["members"] == [{"member_id": mid, "group_instance_id": None, "metadata": subscription("t")}]
    assert state(c) == "CompletingRebalance"
    sync = c.sync(generation=1, member_id=mid, assignments={mid: assignment(t=[0, 1])})
    assert sync.error == 0 and sync["assignment"] == assignment(t=[0, 1])
    assert state(c) == "Stable"
    assert c.heartbeat(generation=1, member_id=mid).error == 0


def test_before_v4_the_first_join_gets_its_member_id_with_the_generation() -> None:
    c = Cluster()
    join = c.join(version=3)
    c.sleep(3000)
    assert join.error == 0 and join["member_id"].startswith("client-") and join["leader"] == join["member_id"]


def test_three_members_the_leader_gets_everyones_metadata() -> None:
    c = Cluster()
    ids = [c.join_new() for _ in range(3)]
    joins = [c.join(member_id=m, protocols=(("range", subscription(f"t{i}")),)) for i, m in enumerate(ids)]
    c.sleep_until(lambda: all(j.done for j in joins))
    leader = joins[0]["leader"]
    assert {j["leader"] for j in joins} == {leader} and {j["generation_id"] for j in joins} == {1}
    for m, j in zip(ids, joins):
        if m == leader:
            assert sorted((x["member_id"], x["metadata"]) for x in j["members"]) == sorted(
                (x, subscription(f"t{i}")) for i, x in enumerate(ids))
        else:
            assert j["members"] == []


def test_followers_sync_waits_for_the_leaders_assignment() -> None:
    c = Cluster()
    ids = [c.join_new() for _ in range(3)]
    joins = [c.join(member_id=m) for m in ids]
    c.sleep_until(lambda: all(j.done for j in joins))
    leader = joins[0]["leader"]
    followers = [m for m in ids if m != leader]
    parked = [c.sync(generation=1, member_id=m) for m in followers]
    assert not any(p.done for p in parked) and state(c) == "CompletingRebalance"
    # the leader leaves the last follower out: it gets an empty assignment
    lead = c.sync(generation=1, member_id=leader, assignments={leader: b"L", followers[0]: b"F0"})
    assert lead.error == 0 and lead["assignment"] == b"L"
    assert (parked[0].error, parked[0]["assignment"]) == (0, b"F0")
    assert (parked[1].error, parked[1]["assignment"]) == (0, b"")
    assert state(c) == "Stable"


def test_sync_is_answered_only_once_the_group_metadata_is_durable() -> None:
    c = Cluster()
    mid = c.join_new()
    join = c.join(member_id=mid)
    c.sleep(3000)
    assert join.done
    c.log.hold = True
    sync = c.sync(generation=1, member_id=mid, assignments={mid: b"A"})
    assert not sync.done and state(c) == "CompletingRebalance"
    (partition, records), = c.log.appends[-1:]
    assert partition == c.coordinator.partition_for("g") and records[0][0] == co.group_metadata_key("g")
    c.log.release()
    assert sync.error == 0 and state(c) == "Stable"
    stored = co.read_group_metadata_value(records[0][1])
    assert (stored.generation, stored.leader, stored.members[0].assignment) == (1, mid, b"A")


def test_a_failed_group_metadata_write_fails_the_sync_and_rebalances() -> None:
    c = Cluster()
    ids = [c.join_new() for _ in range(2)]
    joins = [c.join(member_id=m) for m in ids]
    c.sleep_until(lambda: all(j.done for j in joins))
    leader = joins[0]["leader"]
    follower = next(m for m in ids if m != leader)
    parked = c.sync(generation=1, member_id=follower)
    c.log.hold = True
    lead = c.sync(generation=1, member_id=leader, assignments={leader: b"L", follower: b"F"})
    c.log.release(error=E.NOT_LEADER_OR_FOLLOWER)
    assert lead.error == E.NOT_COORDINATOR and parked.error == E.NOT_COORDINATOR
    assert lead["assignment"] == b"" and state(c) == "PreparingRebalance"


def test_a_join_during_completing_rebalance_starts_a_new_rebalance() -> None:
    c = Cluster()
    ids = [c.join_new() for _ in range(2)]
    joins = [c.join(member_id=m) for m in ids]
    c.sleep_until(lambda: all(j.done for j in joins))
    leader = joins[0]["leader"]
    follower = next(m for m in ids if m != leader)
    parked = c.sync(generation=1, member_id=follower)
    newcomer = c.join_new()
    assert state(c) == "CompletingRebalance"           # a KIP-394 id alone changes nothing
    new_join = c.join(member_id=newcomer)
    assert state(c) == "PreparingRebalance"
    assert parked.error == E.REBALANCE_IN_PROGRESS     # parked SyncGroups must rejoin
    rejoins = [c.join(member_id=m) for m in ids]
    assert all(j.error == 0 and j["generation_id"] == 2 for j in rejoins + [new_join])
    assert len(next(j for j in rejoins + [new_join] if j["members"])["members"]) == 3


def test_rejoin_with_same_metadata_during_completing_rebalance_gets_the_current_generation() -> None:
    c = Cluster()
    ids = [c.join_new() for _ in range(2)]
    joins = [c.join(member_id=m) for m in ids]
    c.sleep_until(lambda: all(j.done for j in joins))
    leader = joins[0]["leader"]
    again = c.join(member_id=leader)
    assert again.error == 0 and again["generation_id"] == 1 and len(again["members"]) == 2
    assert state(c) == "CompletingRebalance"
    follower = next(m for m in ids if m != leader)
    changed = c.join(member_id=follower, protocols=(("range", b"other"),))
    assert not changed.done and state(c) == "PreparingRebalance"


def test_in_stable_a_follower_rejoin_is_answered_but_a_leader_rejoin_rebalances() -> None:
    c = Cluster()
    leader, follower = c.stable_group(2)
    again = c.join(member_id=follower, protocols=(("range", subscription("t")),))
    assert again.error == 0 and again["generation_id"] == 1 and again["members"] == [] and state(c) == "Stable"
    lead = c.join(member_id=leader, protocols=(("range", subscription("t")),))
    assert not lead.done and state(c) == "PreparingRebalance"
    assert c.heartbeat(generation=1, member_id=follower).error == E.REBALANCE_IN_PROGRESS
    fj = c.join(member_id=follower, protocols=(("range", subscription("t")),))
    assert lead.error == 0 and fj.error == 0 and lead["generation_id"] == fj["generation_id"] == 2


def test_a_commit_during_preparing_rebalance_is_taken() -> None:
    c = Cluster()
    leader, follower = c.stable_group(2)
    c.join(member_id=leader, protocols=(("range", b"x"),))
    assert state(c) == "PreparingRebalance"
    assert c.commit(offsets={("t", 0): 7}, generation=1, member_id=follower)["topics"][0]["partitions"][0]["error_code"] == 0
    assert c.committed(partitions=[("t", 0)]) == {("t", 0): 7}


def test_leave_rebalances_and_the_remaining_member_carries_on() -> None:
    c = Cluster()
    leader, follower = c.stable_group(2)
    leave = c.leave(member_id=follower)
    assert leave.error == 0 and leave["members"] == [{"member_id": follower, "group_instance_id": None, "error_code": 0}]
    assert state(c) == "PreparingRebalance"
    assert c.heartbeat(generation=1, member_id=leader).error == E.REBALANCE_IN_PROGRESS
    rejoin = c.join(member_id=leader)
    assert rejoin.error == 0 and rejoin["generation_id"] == 2 and rejoin["leader"] == leader
    assert [m["member_id"] for m in rejoin["members"]] == [leader]
    assert c.heartbeat(generation=1, member_id=follower).error == E.UNKNOWN_MEMBER_ID


def test_leader_leaving_hands_leadership_to_a_remaining_member() -> None:
    c = Cluster()
    leader, a, b = c.stable_group(3)
    c.leave(member_id=leader)
    joins = [c.join(member_id=m) for m in (a, b)]
    assert all(j.error == 0 for j in joins) and joins[0]["leader"] in (a, b)
    assert sum(1 for j in joins if j["members"]) == 1


def test_the_last_member_leaving_empties_the_group_and_stores_it() -> None:
    c = Cluster()
    (mid,) = c.stable_group(1)
    assert c.leave(member_id=mid).error == 0
    g = c.group("g")
    assert (str(g.state), g.generation_id, g.protocol_name, g.leader_id) == ("Empty", 2, None, None)
    key, value = c.log.partitions[c.coordinator.partition_for("g")][-1]
    stored = co.read_group_metadata_value(value)
    assert key == co.group_metadata_key("g") and stored.generation == 2 and stored.members == []
    assert c.describe("g")["groups"][0]["group_state"] == "Empty"


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    c = Cluster()
    leader, follower = c.stable_group(2, session=10000)
    for _ in range(3):
        c.sleep(3000)
        assert c.heartbeat(generation=1, member_id=leader).error == 0
    c.sleep(900)
    assert c.group("g").has(follower)                 # 9900 ms of silence
    c.sleep(100)
    assert not c.group("g").has(follower) and state(c) == "PreparingRebalance"
    assert c.heartbeat(generation=1, member_id=leader).error == E.REBALANCE_IN_PROGRESS
    rejoin = c.join(member_id=leader)
    assert rejoin.error == 0 and rejoin["generation_id"] == 2 and len(rejoin["members"]) == 1


def test_session_expiry_of_the_only_member_empties_the_group() -> None:
    c = Cluster()
    c.stable_group(1, session=6000)
    c.sleep(6000)
    assert state(c) == "Empty" and c.group("g").generation_id == 2


def test_the_session_timer_restarts_when_the_assignment_arrives() -> None:
    """A follower waiting in SyncGroup satisfies its heartbeat; its expiry meanwhile is ignored, so
    the session timeout starts again when the assignment is handed out."""
    c = Cluster()
    ids = [c.join_new() for _ in range(2)]
    joins = [c.join(member_id=m) for m in ids]
    c.sleep_until(lambda: all(j.done for j in joins))
    leader = joins[0]["leader"]
    follower = next(m for m in ids if m != leader)
    parked = c.sync(generation=1, member_id=follower)
    for _ in range(4):                         # 12 s: past the follower's session timeout
        c.sleep(3000)
        assert c.heartbeat(generation=1, member_id=leader).error == 0
    assert c.group("g").has(follower)
    c.sync(generation=1, member_id=leader, assignments={leader: b"L", follower: b"F"})
    assert parked["assignment"] == b"F"
    for _ in range(3):
        c.sleep(3000)
        assert c.heartbeat(generation=1, member_id=leader).error == 0
    c.sleep(900)
    assert c.group("g").has(follower)
    c.sleep(100)                               # 10 s after the assignment
    assert not c.group("g").has(follower)


def test_a_heartbeat_resets_the_session_timer() -> None:
    c = Cluster()
    (mid,) = c.stable_group(1, session=6000)
    for _ in range(10):
        c.sleep(5900)
        assert c.heartbeat(generation=1, member_id=mid).error == 0
    assert state(c) == "Stable"


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() -> None:
    c = Cluster()
    leader, follower = c.stable_group(2, session=10000, rebalance=20000)
    join = c.join(member_id=follower, protocols=(("range", subscription("t2")),), rebalance=20000)
    assert state(c) == "PreparingRebalance"
    waited = 0
    while not join.done:
        c.sleep(2000)
        waited += 2000
        if not join.done:
            assert c.heartbeat(generation=1, member_id=leader).error == E.REBALANCE_IN_PROGRESS
    assert waited == 20000
    assert join.error == 0 and join["leader"] == follower and join["generation_id"] == 2
    assert not c.group("g").has(leader)


def test_a_parked_new_member_is_dropped_after_the_new_member_join_timeout() -> None:
    config = GroupCoordinatorConfig(offsets_topic_num_partitions=4)
    c = Cluster(config)
    (old,) = c.stable_group(1, session=10000, rebalance=NEW_MEMBER_JOIN_TIMEOUT_MS * 2)
    newcomer = c.join_new(rebalance=NEW_MEMBER_JOIN_TIMEOUT_MS * 2)
    parked = c.join(member_id=newcomer, rebalance=NEW_MEMBER_JOIN_TIMEOUT_MS * 2)
    assert state(c) == "PreparingRebalance"
    elapsed = 0
    while not parked.done:                    # the old member heartbeats but never rejoins
        c.sleep(5000)
        elapsed += 5000
        c.heartbeat(generation=1, member_id=old)
    assert elapsed == NEW_MEMBER_JOIN_TIMEOUT_MS
    assert parked.error == E.UNKNOWN_MEMBER_ID and not c.group("g").has(newcomer)


def test_a_kip394_pending_member_holds_the_rebalance_until_it_joins() -> None:
    c = Cluster()
    (leader,) = c.stable_group(1)
    pending = c.join_new()
    lead = c.join(member_id=leader)           # the leader's rejoin rebalances, but an id is outstanding
    assert not lead.done
    joined = c.join(member_id=pending)
    assert lead.error == joined.error == 0 and lead["generation_id"] == 2 and len(lead["members"]) == 2


def test_a_pending_member_id_is_forgotten_after_the_session_timeout() -> None:
    c = Cluster()
    pending = c.join_new(session=8000)
    c.sleep(7999)
    assert c.group("g").is_pending_member(pending)
    c.sleep(1)
    assert not c.group("g").is_pending_member(pending)
    assert c.join(member_id=pending, session=8000).error == E.UNKNOWN_MEMBER_ID


def test_a_pending_member_may_leave() -> None:
    c = Cluster()
    pending = c.join_new()
    assert c.leave(member_id=pending)["members"][0]["error_code"] == 0
    assert not c.group("g").is_pending_member(pending)


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    c = Cluster()
    ids = [c.join_new(rebalance=20000) for _ in range(2)]
    joins = [c.join(member_id=m, rebalance=20000) for m in ids]
    c.sleep_until(lambda: all(j.done for j in joins), step=1000)
    leader = joins[0]["leader"]
    silent = next(m for m in ids if m != leader)
    assert c.sync(generation=1, member_id=leader, assignments={leader: b"L", silent: b"S"}).error == 0
    assert state(c) == "Stable"
    for _ in range(6):                        # both heartbeat; one never sends SyncGroup
        c.sleep(3000)
        assert c.heartbeat(generation=1, member_id=leader).error == 0
        assert c.heartbeat(generation=1, member_id=silent).error == 0
    c.sleep(2000)                             # 20 s after the generation formed
    assert not c.group("g").has(silent) and state(c) == "PreparingRebalance"


def test_initial_delay_extends_while_members_keep_arriving() -> None:
    c = Cluster()
    a = c.join(member_id=c.join_new())        # t=0: the initial delay starts (3000 ms)
    c.sleep(2000)
    b = c.join(member_id=c.join_new())        # t=2000: extends once more at t=3000
    c.sleep(3000)
    cc = c.join(member_id=c.join_new())       # t=5000: extends again at t=6000
    c.sleep(3999)
    assert not a.done
    c.sleep(1)                                # t=9000
    assert a.error == b.error == cc.error == 0 and a["generation_id"] == 1
    assert len(next(j for j in (a, b, cc) if j["members"])["members"]) == 3


def test_initial_delay_never_goes_past_the_rebalance_timeout() -> None:
    c = Cluster()
    joins = [c.join(member_id=c.join_new(rebalance=5000), rebalance=5000)]   # remaining = 5000 - 3000
    c.sleep(1000)
    joins.append(c.join(member_id=c.join_new(rebalance=5000), rebalance=5000))
    c.sleep(3000)
    joins.append(c.join(member_id=c.join_new(rebalance=5000), rebalance=5000))   # t=4000: too late to extend
    c.sleep(999)
    assert not any(j.done for j in joins)
    c.sleep(1)                                # t=5000
    assert all(j.error == 0 for j in joins)


def test_zero_initial_delay() -> None:
    c = Cluster(GroupCoordinatorConfig(offsets_topic_num_partitions=4, group_initial_rebalance_delay_ms=0))
    join = c.join(member_id=c.join_new())
    c.sleep(0)
    assert join.error == 0


def test_a_leader_that_does_not_rejoin_is_replaced_by_a_member_that_did() -> None:
    c = Cluster()
    pending = c.join_new()
    static = c.join(instance="s1", protocols=(("range", b"s"),))    # the static member joins first: the leader
    dyn = c.join(member_id=pending, protocols=(("range", b"d"),))
    c.sleep_until(lambda: static.done and dyn.done)
    sid, did = static["member_id"], dyn["member_id"]
    assert static["leader"] == sid
    c.sync(generation=1, member_id=sid, instance="s1", assignments={sid: b"S", did: b"D"})
    c.sync(generation=1, member_id=did)
    changed = c.join(member_id=did, protocols=(("range", b"d2"),))
    while not changed.done:                   # the static leader heartbeats but does not rejoin
        c.sleep(2000)
        c.heartbeat(generation=1, member_id=sid, instance="s1")
    assert changed["leader"] == did and changed["generation_id"] == 2
    assert c.group("g").has(sid)              # static members are not removed for not rejoining


def test_when_no_member_rejoins_the_rebalance_waits_again() -> None:
    c = Cluster()
    s = c.join(instance="s1", rebalance=10000)
    c.sleep(3000)
    sid = s["member_id"]
    c.sync(generation=1, member_id=sid, instance="s1", assignments={sid: b"S"})
    dyn = c.join_new(rebalance=10000)
    parked = c.join(member_id=dyn, rebalance=10000)
    assert state(c) == "PreparingRebalance"
    c.leave(member_id=dyn)
    assert parked.error == E.UNKNOWN_MEMBER_ID
    for _ in range(8):                        # 16 s: past the rebalance timeout, and nobody rejoined
        c.sleep(2000)
        assert c.heartbeat(generation=1, member_id=sid, instance="s1").error == E.REBALANCE_IN_PROGRESS
    assert state(c) == "PreparingRebalance" and c.group("g").generation_id == 1
    rejoin = c.join(member_id=sid, instance="s1", rebalance=10000)
    assert rejoin.error == 0 and rejoin["generation_id"] == 2
