"""PartitionChangeBuilder: every rule of the controller's election and ISR logic as a row."""

from __future__ import annotations

import uuid

import pytest

from controller.partition_change import (NO_LEADER, RECOVERED, RECOVERING, Election, PartitionChangeBuilder,
                                         PartitionRegistration, initial_registration)
from protocol.messages.metadata_records import MetadataRecordType, make_record

TOPIC = uuid.UUID(int=7)
NO_CHANGE = None


def part(replicas, isr, leader, recovery=RECOVERED, leader_epoch=5, partition_epoch=9):
    return PartitionRegistration(tuple(replicas), tuple(isr), leader, leader_epoch, partition_epoch, recovery)


# (rule, partition, target ISR (None: unchanged), election, brokers that may lead, expected record fields)
ROWS = [
    ("nothing to do", part([1, 2, 3], [1, 2, 3], 1), None, Election.ONLINE, {1, 2, 3}, NO_CHANGE),
    ("leader fenced: first ISR replica in replica order leads, ISR loses it",
     part([1, 2, 3], [1, 2, 3], 1), [2, 3], Election.ONLINE, {2, 3}, {"leader": 2, "isr": [2, 3]}),
    ("replica order, not ISR order, picks the new leader",
     part([1, 3, 2], [1, 2, 3], 1), [2, 3], Election.ONLINE, {2, 3}, {"leader": 3, "isr": [2, 3]}),
    ("leader shutting down: may not lead, leaves the ISR",
     part([1, 2, 3], [1, 2, 3], 1), [2, 3], Election.ONLINE, {2, 3}, {"leader": 2, "isr": [2, 3]}),
    ("a new leader must be live: a fenced ISR member is skipped",
     part([1, 2, 3], [1, 2, 3], 1), [2, 3], Election.ONLINE, {3}, {"leader": 3, "isr": [2, 3]}),
    ("follower fenced: only the ISR shrinks",
     part([1, 2, 3], [1, 2, 3], 1), [1, 3], Election.ONLINE, {1, 3}, {"isr": [1, 3]}),
    ("last ISR member fenced: ISR stays [it], partition offline",
     part([1, 2, 3], [1], 1), [], Election.ONLINE, {2, 3}, {"leader": NO_LEADER}),
    ("no live ISR member, unclean off: stays offline",
     part([1, 2, 3], [1], NO_LEADER), None, Election.ONLINE, {2, 3}, NO_CHANGE),
    ("no live ISR member, unclean on: first live replica leads alone, recovering",
     part([1, 2, 3], [1], NO_LEADER), None, Election.UNCLEAN, {2, 3},
     {"leader": 2, "isr": [2], "leader_recovery_state": RECOVERING}),
    ("unclean on while the leader's last ISR member is fenced",
     part([1, 2, 3], [1], 1), [], Election.UNCLEAN, {3}, {"leader": 3, "isr": [3], "leader_recovery_state": RECOVERING}),
    ("unclean on but an ISR member is live: a clean election",
     part([1, 2, 3], [1, 3], NO_LEADER), None, Election.UNCLEAN, {2, 3}, {"leader": 3}),
    ("unclean on, no replica live at all: still offline",
     part([1, 2, 3], [1], NO_LEADER), None, Election.UNCLEAN, set(), NO_CHANGE),
    ("offline partition whose ISR member is back leads again",
     part([1, 2, 3], [2], NO_LEADER), None, Election.ONLINE, {1, 2, 3}, {"leader": 2}),
    ("preferred election moves leadership to replicas[0]",
     part([1, 2, 3], [1, 2, 3], 2), None, Election.PREFERRED, {1, 2, 3}, {"leader": 1}),
    ("preferred replica out of the ISR: no change",
     part([1, 2, 3], [2, 3], 2), None, Election.PREFERRED, {1, 2, 3}, NO_CHANGE),
    ("preferred replica not live: no change",
     part([1, 2, 3], [1, 2, 3], 2), None, Election.PREFERRED, {2, 3}, NO_CHANGE),
    ("preferred election of an offline partition elects from the ISR",
     part([1, 2, 3], [2, 3], NO_LEADER), None, Election.PREFERRED, {2, 3}, {"leader": 2}),
    ("preferred election never elects uncleanly",
     part([1, 2, 3], [1], NO_LEADER), None, Election.PREFERRED, {2, 3}, NO_CHANGE),
    ("AlterPartition expands the ISR",
     part([1, 2, 3], [1, 2], 1), [1, 2, 3], Election.ONLINE, {1, 2, 3}, {"isr": [1, 2, 3]}),
    ("AlterPartition shrinks the ISR",
     part([1, 2, 3], [1, 2, 3], 1), [1], Election.ONLINE, {1, 2, 3}, {"isr": [1]}),
    ("the same ISR is no change",
     part([1, 2, 3], [1, 2], 1), [1, 2], Election.ONLINE, {1, 2, 3}, NO_CHANGE),
]


@pytest.mark.parametrize("rule,partition,target_isr,election,may_lead,expected", ROWS, ids=[r[0] for r in ROWS])
def test_rule(rule, partition, target_isr, election, may_lead, expected):
    builder = PartitionChangeBuilder(partition, TOPIC, 4, may_lead.__contains__, election)
    if target_isr is not None:
        builder.set_target_isr(target_isr)
    record = builder.build()
    if expected is NO_CHANGE:
        assert record is None
        return
    assert record == make_record(MetadataRecordType.PARTITION_CHANGE, partition_id=4, topic_id=TOPIC, **expected)
    assert builder.unclean is (expected.get("leader_recovery_state") == RECOVERING)


def test_leader_recovery_completes_through_the_target_state():
    partition = part([1, 2, 3], [1], 1, recovery=RECOVERING)
    record = PartitionChangeBuilder(partition, TOPIC, 0, {1, 2}.__contains__).set_target_isr([1, 2]) \
        .set_target_leader_recovery_state(RECOVERED).build()
    assert (record.isr, record.leader, record.leader_recovery_state) == ([1, 2], -2, RECOVERED)


@pytest.mark.parametrize("replicas,may_lead,leader,isr", [
    ([1, 2, 3], {1, 2, 3}, 1, (1, 2, 3)),
    ([3, 1, 2], {1, 2, 3}, 3, (3, 1, 2)),
    ([1, 2, 3], {2, 3}, 2, (2, 3)),
])
def test_creation_prefers_the_first_live_replica_and_the_isr_is_the_live_replicas(replicas, may_lead, leader, isr):
    registration = initial_registration(replicas, may_lead.__contains__)
    assert (registration.leader, registration.isr, registration.leader_epoch, registration.partition_epoch) == (
        leader, isr, 0, 0)
    assert registration.replicas == tuple(replicas)


def test_creation_with_no_live_replica_is_refused():
    assert initial_registration([1, 2], set().__contains__) is None


def test_merge_bumps_leader_epoch_on_leader_changes_and_partition_epoch_on_every_change():
    p = part([1, 2, 3], [1, 2, 3], 1, leader_epoch=5, partition_epoch=9)
    isr_only = p.merge(make_record(MetadataRecordType.PARTITION_CHANGE, topic_id=TOPIC, isr=[1, 2]))
    assert (isr_only.leader, isr_only.leader_epoch, isr_only.partition_epoch, isr_only.isr) == (1, 5, 10, (1, 2))
    new_leader = isr_only.merge(make_record(MetadataRecordType.PARTITION_CHANGE, topic_id=TOPIC, leader=2))
    assert (new_leader.leader, new_leader.leader_epoch, new_leader.partition_epoch) == (2, 6, 11)
    offline = new_leader.merge(make_record(MetadataRecordType.PARTITION_CHANGE, topic_id=TOPIC, leader=-1))
    assert (offline.leader, offline.leader_epoch, offline.partition_epoch) == (-1, 7, 12)
    recovering = offline.merge(make_record(MetadataRecordType.PARTITION_CHANGE, topic_id=TOPIC, leader=3, isr=[3],
                                           leader_recovery_state=RECOVERING))
    assert (recovering.isr, recovering.leader_recovery_state) == ((3,), RECOVERING)


def test_registration_round_trips_through_a_partition_record():
    p = part([1, 2], [2], 2, recovery=RECOVERING, leader_epoch=3, partition_epoch=4)
    assert PartitionRegistration.from_record(p.to_record(TOPIC, 1)) == p
