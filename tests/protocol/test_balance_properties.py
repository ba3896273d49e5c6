"""protocol/balance.py's minimal-move property, checked with hypothesis over random clusters:
a balanced cluster gets no plan; a plan moves exactly as many replicas as evening the counts
needs (so every move reduces the imbalance) and leaves the counts within one; excluded brokers
are emptied; racks end up spread wherever the brokers' racks allow; no partition ever holds a
broker twice or changes its replication factor."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, assume, given, settings, strategies as st

from protocol.balance import leader_counts, plan_balance, replica_counts

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw, racks: bool | str = False, max_brokers: int = 7, max_partitions: int = 40):
    """(brokers {id: rack}, assignment {(topic, p): replicas}) with every replica on a broker listed."""
    n = draw(st.integers(2, max_brokers))
    ids = list(range(1, n + 1))
    if racks == "even":  # racks of equal size
        n_racks = draw(st.sampled_from([k for k in range(2, n + 1) if n % k == 0]))
        brokers = {b: f"r{b % n_racks}" for b in ids}
    elif racks:
        n_racks = draw(st.integers(1, n))
        brokers = {b: f"r{draw(st.integers(0, n_racks - 1))}" for b in ids}
    else:
        brokers = {b: None for b in ids}
    rf = draw(st.integers(1, min(3, n)))
    # the partitions start on a subset of the brokers (the others are new, empty)
    used = draw(st.lists(st.sampled_from(ids), min_size=rf, max_size=n, unique=True))
    partitions = draw(st.integers(1, max_partitions))
    assignment = {("t", p): draw(st.permutations(used))[:rf] for p in range(partitions)}
    return brokers, assignment


def apply(assignment, plan):
    return {k: list(plan.get(k, v)) for k, v in assignment.items()}


def moved(before, after) -> int:
    return sum(len(set(after[k]) - set(before[k])) for k in before)


def spread(counts) -> int:
    return max(counts.values()) - min(counts.values())


def fewest_moves(counts: dict[int, int]) -> int:
    """Replica moves that even ``counts`` to within one: the fullest brokers keep the extra one."""
    total, n = sum(counts.values()), len(counts)
    q, r = divmod(total, n)
    ranked = sorted(counts.values(), reverse=True)
    return sum(max(0, c - (q + 1 if i < r else q)) for i, c in enumerate(ranked))


def racks_used(brokers, replicas) -> int:
    return len({brokers[b] for b in replicas})


def well_formed(before, after) -> None:
    for k, replicas in after.items():
        assert len(replicas) == len(before[k]) and len(set(replicas)) == len(replicas)


@SETTINGS
@given(clusters())
def test_counts_end_within_one_with_the_fewest_moves(cluster):
    brokers, before = cluster
    after = apply(before, plan_balance(brokers, before))
    well_formed(before, after)
    counts_before = replica_counts(before, brokers)
    assert spread(replica_counts(after, brokers)) <= 1
    # each move takes a replica from a broker above its even share to one below it: no more
    # moves than evening the counts needs (a move that did not reduce the imbalance would be one more)
    assert moved(before, after) == fewest_moves(counts_before)


def best_leader_spread(assignment, brokers) -> int:
    """The smallest spread of preferred leaders (over the brokers holding replicas) that any
    choice of first replica gives, by trying them all (small cases only)."""
    hosting = sorted({b for r in assignment.values() for b in r})
    keys = sorted(assignment)
    best = None
    for choice in itertools.product(*(assignment[k] for k in keys)):
        lead = dict.fromkeys(hosting, 0)
        for b in choice:
            lead[b] += 1
        s = spread(lead)
        best = s if best is None else min(best, s)
    return best


@SETTINGS
@given(clusters(max_partitions=7))
def test_preferred_leaders_are_as_even_as_the_replica_sets_allow(cluster):
    brokers, before = cluster
    plan = plan_balance(brokers, before)
    after = apply(before, plan)
    hosting = sorted({b for r in after.values() for b in r})
    assert spread(leader_counts(after, hosting)) == best_leader_spread(after, brokers)


@SETTINGS
@given(clusters())
def test_leaders_only_reorder_when_the_counts_are_even(cluster):
    """With replica counts already even, the plan only reorders (no data moves)."""
    brokers, before = cluster
    assume(spread(replica_counts(before, brokers)) <= 1)
    plan = plan_balance(brokers, before)
    assert all(sorted(v) == sorted(before[k]) for k, v in plan.items())


@SETTINGS
@given(clusters(racks=True))
def test_balanced_clusters_get_no_plan(cluster):
    brokers, before = cluster
    assume(spread(replica_counts(before, brokers)) <= 1)
    n_racks = len(set(brokers.values()))
    assume(all(racks_used(brokers, r) == min(len(r), n_racks) for r in before.values()))
    hosting = list(brokers)
    assume(spread(leader_counts(before, hosting)) <= 1)
    assert plan_balance(brokers, before) == {}


@SETTINGS
@given(clusters(racks=True))
def test_a_balanced_cluster_moves_no_data_even_if_leaders_are_uneven(cluster):
    brokers, before = cluster
    assume(spread(replica_counts(before, brokers)) <= 1)
    n_racks = len(set(brokers.values()))
    assume(all(racks_used(brokers, r) == min(len(r), n_racks) for r in before.values()))
    plan = plan_balance(brokers, before)
    assert all(set(v) == set(before[k]) for k, v in plan.items())


@SETTINGS
@given(clusters(racks=True))
def test_racks_never_get_worse(cluster):
    brokers, before = cluster
    after = apply(before, plan_balance(brokers, before))
    well_formed(before, after)
    for k in before:
        assert racks_used(brokers, after[k]) >= racks_used(brokers, before[k]), (k, before[k], after[k])


@SETTINGS
@given(clusters(racks="even"))
def test_racks_spread_when_the_racks_are_of_one_size(cluster):
    """Racks of equal size can each take their share: every partition ends on as many racks as
    it has replicas (or as there are racks), and the counts still even out."""
    brokers, before = cluster
    after = apply(before, plan_balance(brokers, before))
    well_formed(before, after)
    n_racks = len(set(brokers.values()))
    for k in before:
        assert racks_used(brokers, after[k]) == min(len(after[k]), n_racks), (k, before[k], after[k])
    assert spread(replica_counts(after, brokers)) <= 1


@SETTINGS
@given(clusters(), st.data())
def test_excluded_brokers_are_emptied_and_the_rest_even(cluster, data):
    brokers, before = cluster
    rf = len(next(iter(before.values())))
    assume(len(brokers) - 1 >= rf)
    gone = data.draw(st.sampled_from(sorted(brokers)))
    after = apply(before, plan_balance(brokers, before, exclude={gone}))
    well_formed(before, after)
    counts = replica_counts(after, brokers)
    assert counts[gone] == 0
    assert spread({b: c for b, c in counts.items() if b != gone}) <= 1


@SETTINGS
@given(clusters())
def test_a_plan_applied_is_balanced(cluster):
    """Idempotent: planning again over the result moves nothing."""
    brokers, before = cluster
    after = apply(before, plan_balance(brokers, before))
    again = plan_balance(brokers, after)
    assert all(set(v) == set(after[k]) for k, v in again.items())


@st.composite
def multi_topic_clusters(draw, max_brokers: int = 7):
    """Racks of equal size (or none), and several topics, each with its own replication factor
    and its partitions on its own subset of the brokers."""
    n = draw(st.integers(2, max_brokers))
    ids = list(range(1, n + 1))
    if draw(st.booleans()):
        n_racks = draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0]))
        brokers = {b: f"r{b % n_racks}" for b in ids}
    else:
        brokers = {b: None for b in ids}
    assignment = {}
    for t in range(draw(st.integers(1, 4))):
        rf = draw(st.integers(1, min(3, n)))
        used = draw(st.lists(st.sampled_from(ids), min_size=rf, max_size=n, unique=True))
        for p in range(draw(st.integers(1, 15))):
            assignment[(f"t{t}", p)] = draw(st.permutations(used))[:rf]
    return brokers, assignment


@SETTINGS
@given(multi_topic_clusters())
def test_every_broker_ends_within_one_over_all_topics(cluster):
    """The counts are per broker over every topic together (not per topic), and even out to
    within one even where racks allow no replica straight from the fullest broker to the
    emptiest: a chain of moves through a broker between does it. Racks never get worse."""
    brokers, before = cluster
    after = apply(before, plan_balance(brokers, before))
    well_formed(before, after)
    assert spread(replica_counts(after, brokers)) <= 1, (replica_counts(before, brokers),
                                                         replica_counts(after, brokers))
    for k in before:
        assert racks_used(brokers, after[k]) >= racks_used(brokers, before[k]), (k, before[k], after[k])
