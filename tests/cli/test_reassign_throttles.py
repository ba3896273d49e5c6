"""What ``kbroker cluster reassign --throttle`` sets, as kafka-reassign-partitions.sh computes it
(ReassignPartitionsCommand.calculateProposedMoveMap / calculateLeaderThrottles /
calculateFollowerThrottles / calculateReassigningBrokers), on plain data."""

from __future__ import annotations

from cli.reassign import move_map, throttled_replicas
from protocol.client.cluster_admin import OngoingReassignment
from protocol.client.metadata import TopicPartition as TP


def test_leader_throttles_name_the_sources_and_follower_throttles_the_new_replicas():
    current = {TP("a", 0): [1, 2], TP("a", 1): [2, 3], TP("b", 0): [3]}
    plan = {TP("a", 0): [2, 4], TP("b", 0): [4, 5]}
    moves = move_map({}, plan, current)
    assert moves == {TP("a", 0): ([1, 2], [4]), TP("b", 0): ([3], [4, 5])}
    assert throttled_replicas(moves) == {"a": ("0:1,0:2", "0:4"), "b": ("0:3", "0:4,0:5")}


def test_moves_in_progress_count_with_their_original_replicas():
    """--additional: a partition already moving keeps the replicas it started from as sources
    (its adding replicas are destinations), so a new --throttle re-rates the running move."""
    ongoing = {TP("a", 1): OngoingReassignment(replicas=[4, 2, 3], adding=[4], removing=[3])}
    current = {TP("a", 1): [4, 2, 3], TP("a", 2): [1]}
    moves = move_map(ongoing, {TP("a", 2): [5]}, current)
    assert moves == {TP("a", 1): ([2, 3], [4]), TP("a", 2): ([1], [5])}
    assert throttled_replicas(moves) == {"a": ("1:2,1:3,2:1", "1:4,2:5")}
    # the same partition again: its sources stay the original replicas
    assert move_map(ongoing, {TP("a", 1): [5, 2]}, current)[TP("a", 1)] == ([2, 3], [5])
