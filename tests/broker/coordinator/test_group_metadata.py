"""GroupMetadata / MemberMetadata on their own: the transition table (every pair of states),
protocol selection, leader succession, static member replacement, and the offset bookkeeping
(pending commits, expiry rules)."""

from __future__ import annotations

import itertools

import pytest

from broker.coordinator.group_metadata import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE,
                                               VALID_PREVIOUS_STATES, GroupMetadata, GroupState,
                                               IllegalStateTransition, JoinGroupResult, MemberMetadata,
                                               OffsetAndMetadata, SyncGroupResult)
from protocol.errors import ErrorCode

from .harness import subscription

NOW = 1_000_000

# Kafka's table (GroupMetadata.scala, each state's validPreviousStates), written out independently.
KAFKA_TABLE = {
    "Empty": {"PreparingRebalance"},
    "PreparingRebalance": {"Stable", "CompletingRebalance", "Empty"},
    "CompletingRebalance": {"PreparingRebalance"},
    "Stable": {"CompletingRebalance"},
    "Dead": {"Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead"},
}


def test_the_table_is_kafkas() -> None:
    assert {str(t): {str(s) for s in prev} for t, prev in VALID_PREVIOUS_STATES.items()} == KAFKA_TABLE


@pytest.mark.parametrize("source,target", list(itertools.product(GroupState, GroupState)),
                         ids=lambda s: str(s))
def test_every_transition(source, target) -> None:
    group = GroupMetadata("g", source, NOW)
    if str(source) in KAFKA_TABLE[str(target)]:
        group.transition_to(target, NOW + 5)
        assert group.state is target and group.current_state_timestamp == NOW + 5
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, NOW + 5)
        assert group.state is source and group.current_state_timestamp == NOW


@pytest.mark.parametrize("state", list(GroupState), ids=str)
def test_can_rebalance_exactly_from_the_states_preparing_rebalance_accepts(state) -> None:
    assert GroupMetadata("g", state, NOW).can_rebalance is (str(state) in KAFKA_TABLE["PreparingRebalance"])


def member(mid, protocols=(("range", b"r"), ("roundrobin", b"rr")), instance=None, rebalance=30000, session=10000):
    return MemberMetadata(mid, instance, "client", "/h", rebalance, session, "consumer", list(protocols))


def test_first_member_sets_protocol_type_and_leads() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    g.add(member("a"))
    g.add(member("b"))
    assert g.protocol_type == "consumer" and g.leader_id == "a" and g.size == 2


def test_leader_succession_on_removal() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    for m in "abc":
        g.add(member(m))
    g.remove("a")
    assert g.leader_id == "b"
    g.remove("c")
    assert g.leader_id == "b"
    g.remove("b")
    assert g.leader_id is None and g.size == 0


def test_protocol_selection_by_vote_among_protocols_all_support() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    g.add(member("a", (("roundrobin", b""), ("range", b""))))
    g.add(member("b", (("range", b""), ("roundrobin", b""), ("sticky", b""))))
    g.add(member("c", (("range", b""), ("sticky", b""))))
    # only range is common to all three
    assert g.select_protocol() == "range"
    g.remove("c")
    # a votes roundrobin, b votes range: a tie, the first to reach the top count wins
    assert g.select_protocol() in ("roundrobin", "range")
    g.add(member("d", (("roundrobin", b""),)))
    assert g.select_protocol() == "roundrobin"
    # a protocol most members prefer is out if one member does not support it
    h = GroupMetadata("h", EMPTY, NOW)
    h.add(member("a", (("sticky", b""), ("range", b""))))
    h.add(member("b", (("sticky", b""), ("range", b""))))
    h.add(member("c", (("range", b""),)))
    assert h.select_protocol() == "range"


def test_the_protocol_with_most_votes_wins() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    g.add(member("a", (("roundrobin", b""), ("range", b""))))
    g.add(member("b", (("range", b""), ("roundrobin", b""))))
    g.add(member("c", (("range", b""), ("roundrobin", b""))))
    assert g.select_protocol() == "range"


def test_supports_protocols() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    assert not g.supports_protocols("", {"range"})          # an empty group needs a protocol type
    assert not g.supports_protocols("consumer", set())       # and at least one protocol
    assert g.supports_protocols("consumer", {"range"})
    g.add(member("a", (("range", b""),)))
    g.transition_to(PREPARING_REBALANCE, NOW)
    assert g.supports_protocols("consumer", {"range", "x"})
    assert not g.supports_protocols("consumer", {"roundrobin"})
    assert not g.supports_protocols("connect", {"range"})


def test_member_matches_and_heartbeat_satisfaction() -> None:
    m = member("a")
    assert m.matches([("range", b"r"), ("roundrobin", b"rr")])
    assert not m.matches([("roundrobin", b"rr"), ("range", b"r")])  # order matters
    assert not m.matches([("range", b"X"), ("roundrobin", b"rr")])
    assert not m.has_satisfied_heartbeat
    m.awaiting_sync_callback = lambda r: None
    assert m.has_satisfied_heartbeat          # members in a rebalance satisfy it
    m.is_new = True
    assert not m.has_satisfied_heartbeat      # but a new member does not
    m.heartbeat_satisfied = True
    assert m.has_satisfied_heartbeat


def test_all_members_joined_counts_awaiting_members_and_pending_ids() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    g.add(member("a"), callback=lambda r: None)
    assert g.has_all_members_joined
    g.add_pending_member("p")
    assert not g.has_all_members_joined
    g.remove("p")
    g.add(member("b"))
    assert not g.has_all_members_joined and g.num_members_awaiting_join == 1
    g.update_member(g.get("b"), [("range", b"")], 1, 2, lambda r: None)
    assert g.has_all_members_joined and g.num_members_awaiting_join == 2
    answered = []
    g.get("a").awaiting_join_callback = answered.append
    g.maybe_invoke_join_callback(g.get("a"), JoinGroupResult("a", 0))
    g.maybe_invoke_join_callback(g.get("a"), JoinGroupResult("a", 0))   # once only
    assert g.num_members_awaiting_join == 1 and answered == [JoinGroupResult("a", 0)]


def test_replace_static_member_fences_the_old_id() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    joins, syncs = [], []
    old = member("old", instance="i1")
    g.add(old, callback=joins.append)
    old.awaiting_sync_callback = syncs.append
    new = g.replace_static_member("i1", "old", "new")
    assert new is old and new.member_id == "new"
    assert joins == [JoinGroupResult("old", ErrorCode.FENCED_INSTANCE_ID)]
    assert syncs == [SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID)]
    assert g.leader_id == "new" and g.current_static_member_id("i1") == "new" and not g.has("old")
    assert g.is_static_member_fenced("i1", "old") and not g.is_static_member_fenced("i1", "new")


def test_generated_member_ids_are_client_id_or_instance_id_dash_uuid() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    a, b = g.generate_member_id("cli", None), g.generate_member_id("cli", "inst")
    assert a.startswith("cli-") and len(a) == 4 + 36 and b.startswith("inst-") and a != g.generate_member_id("cli", None)


def test_subscribed_topics_of_a_consumer_group() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    g.add(member("a", (("range", subscription("x", "y")),)), callback=lambda r: None)
    g.add(member("b", (("range", subscription("z")),)), callback=lambda r: None)
    assert g.compute_subscribed_topics() is None          # no protocol chosen yet
    g.transition_to(PREPARING_REBALANCE, NOW)
    g.init_next_generation(NOW)
    assert g.state is COMPLETING_REBALANCE and g.generation_id == 1 and g.protocol_name == "range"
    assert g.subscribed_topics == {"x", "y", "z"}
    assert g.is_subscribed_to_topic("x") and not g.is_subscribed_to_topic("q")
    g.get("a").supported_protocols = [("range", b"\x00")]  # unreadable: unknown, so "subscribed" to all
    assert g.compute_subscribed_topics() is None
    g.subscribed_topics = None
    assert g.is_subscribed_to_topic("q")


def test_next_generation_of_a_group_without_members_is_empty() -> None:
    g = GroupMetadata("g", PREPARING_REBALANCE, NOW)
    g.protocol_type = "consumer"
    g.generation_id = 4
    g.init_next_generation(NOW + 1)
    assert (g.state, g.generation_id, g.protocol_name, g.subscribed_topics) == (EMPTY, 5, None, set())


def om(offset, commit_ts, expire=None):
    return OffsetAndMetadata(offset, None, "", commit_ts, expire)


def test_pending_commits_complete_in_order_and_failures_roll_back() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    tp = ("t", 0)
    first, second = om(1, NOW), om(2, NOW)
    g.prepare_offset_commit({tp: first})
    g.prepare_offset_commit({tp: second})
    assert g.has_pending_offset_commits_for(tp)
    g.on_offset_commit_append(tp, first)
    assert g.offset(tp) == first and g.has_pending_offset_commits_for(tp)
    g.on_offset_commit_append(tp, second)
    assert g.offset(tp) == second and not g.has_pending_offset_commits_for(tp)
    g.prepare_offset_commit({tp: om(3, NOW)})
    g.fail_pending_offset_write(tp, om(3, NOW))
    assert g.offset(tp) == second and not g.has_pending_offset_commits_for(tp)
    # a commit whose partition was deleted meanwhile does not come back
    g.prepare_offset_commit({tp: om(4, NOW)})
    g.remove_offsets([tp])
    g.on_offset_commit_append(tp, om(4, NOW))
    assert g.offset(tp) is None


RETENTION = 1000


def test_empty_group_offsets_expire_retention_after_it_became_empty() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    g.protocol_type = "consumer"
    g.initialize_offsets({("t", 0): om(1, NOW - 10 * RETENTION)})
    assert g.remove_expired_offsets(NOW + RETENTION - 1, RETENTION) == {}     # counted from the state change
    assert g.remove_expired_offsets(NOW + RETENTION, RETENTION) == {("t", 0): om(1, NOW - 10 * RETENTION)}
    assert not g.has_offsets


def test_simple_group_offsets_expire_retention_after_their_commit() -> None:
    g = GroupMetadata("g", EMPTY, NOW)      # protocol type None: never used group management
    g.initialize_offsets({("t", 0): om(1, NOW), ("t", 1): om(1, NOW + 500)})
    assert set(g.remove_expired_offsets(NOW + RETENTION, RETENTION)) == {("t", 0)}
    g.prepare_offset_commit({("t", 1): om(2, NOW)})
    assert g.remove_expired_offsets(NOW + 10 * RETENTION, RETENTION) == {}    # pending: kept


def test_stable_consumer_group_expires_only_unsubscribed_topics() -> None:
    g = GroupMetadata("g", STABLE, NOW)
    g.protocol_type = "consumer"
    g.subscribed_topics = {"t"}
    g.initialize_offsets({("t", 0): om(1, NOW), ("old", 0): om(1, NOW)})
    assert set(g.remove_expired_offsets(NOW + RETENTION, RETENTION)) == {("old", 0)}


def test_rebalancing_groups_expire_nothing_and_explicit_expire_timestamps_win() -> None:
    g = GroupMetadata("g", PREPARING_REBALANCE, NOW)
    g.protocol_type = "consumer"
    g.initialize_offsets({("t", 0): om(1, 0)})
    assert g.remove_expired_offsets(NOW * 10, RETENTION) == {}
    s = GroupMetadata("s", EMPTY, NOW)
    s.initialize_offsets({("t", 0): om(1, NOW, expire=NOW + 5)})
    assert s.remove_expired_offsets(NOW + 4, 0) == {}
    assert set(s.remove_expired_offsets(NOW + 5, 10**9)) == {("t", 0)}


def test_summary_has_metadata_only_when_stable() -> None:
    g = GroupMetadata("g", EMPTY, NOW)
    g.add(member("a"))
    state, ptype, protocol, members = g.summary()
    assert (state, ptype, protocol) == ("Empty", "consumer", "") and members[0].metadata == b""
    g.state, g.protocol_name = STABLE, "roundrobin"
    g.get("a").assignment = b"A"
    state, _, protocol, members = g.summary()
    assert (state, protocol, members[0].metadata, members[0].assignment) == ("Stable", "roundrobin", b"rr", b"A")
    with pytest.raises(RuntimeError):
        GroupMetadata("d", DEAD, NOW).current_member_metadata()
