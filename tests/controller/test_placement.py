"""Kafka's rack-unaware placement (AdminUtils.assignReplicasToBrokersRackUnaware)."""

from __future__ import annotations

import collections
import random

import pytest

from controller.placement import PlacementError, assign_replicas_to_brokers


def test_kafka_known_assignment_with_a_fixed_start():
    # Kafka's AdminRackAwareTest/ReplicaAssignmentTest style: brokers 0-4, start index 0.
    got = assign_replicas_to_brokers(10, 3, [0, 1, 2, 3, 4], fixed_start_index=0)
    assert got == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_broker_ids_are_sorted_and_need_not_be_contiguous():
    got = assign_replicas_to_brokers(3, 2, [30, 10, 20], fixed_start_index=0)
    assert got == {0: [10, 20], 1: [20, 30], 2: [30, 10]}


def test_start_partition_continues_the_pattern():
    whole = assign_replicas_to_brokers(8, 2, [1, 2, 3], fixed_start_index=1)
    tail = assign_replicas_to_brokers(5, 2, [1, 2, 3], fixed_start_index=1, start_partition_id=3)
    assert tail == {p: whole[p] for p in range(3, 8)}


@pytest.mark.parametrize("seed", range(20))
def test_random_placement_spreads_leaders_and_replicas(seed):
    rng = random.Random(seed)
    got = assign_replicas_to_brokers(6, 3, [1, 2, 3], rng=rng)
    leaders = collections.Counter(r[0] for r in got.values())
    assert sorted(leaders.values()) == [2, 2, 2]
    for replicas in got.values():
        assert len(set(replicas)) == 3


def test_invalid_replication_factor():
    with pytest.raises(PlacementError, match="larger than available brokers: 2"):
        assign_replicas_to_brokers(1, 3, [1, 2])
    with pytest.raises(PlacementError):
        assign_replicas_to_brokers(1, 0, [1, 2])
