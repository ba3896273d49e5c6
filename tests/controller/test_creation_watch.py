"""Topic creation is all-or-nothing (controller/creation_watch.py), on MockTime: a new topic
(or new partitions) a replica answers KAFKA_STORAGE_ERROR for is removed and answered so; a
replica failing later (the creation settled) leaves the topic alone, as in Kafka."""

from __future__ import annotations

import pytest

from controller.channel_manager import StopReplicaItem
from controller.creation_watch import WATCH_MS
from controller.quorum_controller import FENCE_CHECK_DEFER_MS
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from .helpers import Harness, create_topics, request

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path).start()
    yield harness
    await harness.stop()


def stopped(h, broker_id: int) -> dict:
    out = {}
    for item in h.channel.items(broker_id, StopReplicaItem):
        out.update(item.partitions)
    return out


async def test_a_topic_a_replica_cannot_create_is_removed_and_answered_kafka_storage_error(h):
    await h.start_brokers(1, 2)
    h.channel.leader_and_isr_errors[2] = ErrorCode.KAFKA_STORAGE_ERROR
    (result,) = await h.create(("t", 2, 2))
    assert result["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
    assert "broker 2 could not create the replica t-" in result["error_message"]
    assert h.controller.replication.topic("t") is None
    for b in (1, 2):  # every replica deletes what it did create
        assert {k for k, (_epoch, delete) in stopped(h, b).items() if delete} == {("t", 0), ("t", 1)}
    # The retry starts from nothing.
    del h.channel.leader_and_isr_errors[2]
    (again,) = await h.create(("t", 2, 2))
    assert again["error_code"] == ErrorCode.NONE
    assert h.controller.replication.topic("t") is not None


async def test_validate_only_and_a_zero_timeout_do_not_wait_but_the_failure_still_takes_the_topic_back(h):
    await h.start_brokers(1)
    h.channel.leader_and_isr_errors[1] = ErrorCode.KAFKA_STORAGE_ERROR
    req = create_topics(("t", 1, 1))
    req.timeout_ms = 0
    (result,) = (await h.controller.create_topics(req, 7))["topics"]
    assert result["error_code"] == ErrorCode.NONE  # answered once committed, as Kafka does
    await h.advance(0)
    assert h.controller.replication.topic("t") is None


async def test_a_replica_that_does_not_answer_ends_the_wait_at_the_timeout_and_the_topic_stays(h):
    await h.start_brokers(1)
    h.channel.on_leader_and_isr_answer = None  # broker 1 never answers
    req = create_topics(("t", 1, 1))
    req.timeout_ms = 5000
    answer = h.controller.create_topics(req, 7)
    await h.advance(0)  # committed: the wait starts
    await h.advance(4999)
    assert not answer.done()
    await h.advance(1)
    assert answer.done()
    (result,) = answer.result()["topics"]
    assert result["error_code"] == ErrorCode.NONE
    await h.advance(WATCH_MS)
    assert h.controller.replication.topic("t") is not None


async def test_a_storage_error_after_creation_settled_leaves_the_topic(h):
    await h.start_brokers(1, 2)
    (result,) = await h.create(("t", 2, 2))
    assert result["error_code"] == ErrorCode.NONE
    h.channel.leader_and_isr_errors[2] = ErrorCode.KAFKA_STORAGE_ERROR
    await h.advance(9000 + 100)  # sessions expire: leaderships move, LeaderAndIsr answered with errors
    assert h.controller.replication.topic("t") is not None


def grow(h, name: str, count: int):
    return h.controller.create_partitions(request(ApiKey.CREATE_PARTITIONS, 3, topics=[
        {"name": name, "count": count, "assignments": None}], timeout_ms=30000, validate_only=False))


async def test_new_partitions_a_replica_cannot_create_are_taken_back_and_the_old_ones_stay_as_they_were(h):
    await h.start_brokers(1, 2)
    (created,) = await h.create(("t", 2, 2, {"retention.ms": "1234"}))
    info = h.controller.replication.topic("t")
    topic_id, before = info.topic_id, dict(info.parts)
    h.channel.clear()
    h.channel.leader_and_isr_errors[2] = ErrorCode.KAFKA_STORAGE_ERROR
    (result,) = (await grow(h, "t", 4))["results"]
    assert result["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
    assert "partitions from 2 on were not added" in result["error_message"]
    info = h.controller.replication.topic("t")
    assert info.topic_id == topic_id and info.parts == before  # same id, same partitions, same epochs
    assert h.controller.configs.topic_configs("t") == {"retention.ms": "1234"}
    for b in (1, 2):  # only the new partitions are deleted
        assert {k for k, (_epoch, delete) in stopped(h, b).items() if delete} == {("t", 2), ("t", 3)}
    del h.channel.leader_and_isr_errors[2]
    (again,) = (await grow(h, "t", 4))["results"]
    assert again["error_code"] == ErrorCode.NONE
    assert sorted(h.controller.replication.topic("t").parts) == [0, 1, 2, 3]


async def test_a_replica_whose_broker_is_fenced_is_not_waited_for(h):
    await h.start_brokers(1)
    h.channel.on_leader_and_isr_answer = None  # broker 1 never answers: it died
    req = create_topics(("t", 1, 1))
    req.timeout_ms = 60000
    answer = h.controller.create_topics(req, 7)
    await h.advance(0)
    await h.advance(9000 + FENCE_CHECK_DEFER_MS)  # its session expires: fenced
    assert h.broker(1).fenced
    assert answer.done()  # at the fencing, not at the 60 s timeout
    (result,) = answer.result()["topics"]
    assert result["error_code"] == ErrorCode.NONE
