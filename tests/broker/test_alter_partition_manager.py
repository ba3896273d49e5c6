"""AlterPartitionManager on MockTime against a scripted controller: proposals batched into one
request, one request in flight, each partition's answer handed to its handler, retriable
answers and unanswered requests sent again after a backoff, refused ones dropped; and the
whole path with a real Partition (a shrink takes effect only when the controller commits it)."""

from __future__ import annotations

import uuid

import pytest

from broker.alter_partition_manager import AlterPartitionManager
from broker.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache
from broker.partition import LeaderAndIsrState
from broker.replica_manager import FetchParams
from protocol.api_keys import ApiKey
from protocol.client import KafkaConnectionError
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.fast_codecs import FetchPartition
from storage import LogConfig

from .controller_fakes import ScriptedController, settle

from tests.broker.replica_manager_support import replica_manager

TOPIC_IDS = {"a": uuid.UUID(int=1), "b": uuid.UUID(int=2)}


class FakePartition:
    """What the manager reads of a Partition, and a handler that records the answers."""

    def __init__(self, topic: str, partition: int, retry: bool = False) -> None:
        self.topic, self.partition = topic, partition
        self.key = (topic, partition)
        self.leader_epoch, self.partition_epoch = 3, 8
        self.retry = retry
        self.results: list = []

    def on_result(self, result) -> bool:
        self.results.append(result)
        return self.retry


@pytest.fixture
def time():
    return MockTime()


@pytest.fixture
def controller():
    return ScriptedController()


@pytest.fixture
def manager(time, controller):
    m = AlterPartitionManager(broker_id=1, time=time, channel=controller, broker_epoch=lambda: 11,
                              topic_id_of=TOPIC_IDS.get)
    yield m
    m.close()


def submit(manager, p: FakePartition, isr=(1, 2)) -> None:
    manager.submit(p, list(isr), p.on_result)


def answer_all(sent, error=ErrorCode.NONE, top_error=ErrorCode.NONE, version=2) -> None:
    """Answer every partition of a request: committed (the proposed ISR, partition epoch + 1) or ``error``."""
    topics = []
    for t in sent.body["topics"]:
        parts = []
        for p in t["partitions"]:
            parts.append({"partition_index": p["partition_index"], "error_code": error, "leader_id": 1,
                          "leader_epoch": p["leader_epoch"], "isr": p["new_isr"],
                          "partition_epoch": p["partition_epoch"] + 1})
        topics.append({"topic_name": t["topic_name"], "topic_id": t["topic_id"], "partitions": parts})
    sent.answer({"error_code": top_error, "topics": [] if top_error else topics}, version)


def proposed(sent) -> list[tuple[str, int, list[int]]]:
    return sorted((t["topic_name"], p["partition_index"], p["new_isr"]) for t in sent.body["topics"]
                  for p in t["partitions"])


async def test_one_request_in_flight_and_the_rest_batched_into_the_next(manager, controller):
    a0, a1, b0 = FakePartition("a", 0), FakePartition("a", 1), FakePartition("b", 0)
    submit(manager, a0)
    await settle()
    first = controller.only_pending()
    assert first.api_key == ApiKey.ALTER_PARTITION and first.max_version == 2
    assert (first.body["broker_id"], first.body["broker_epoch"]) == (1, 11)
    assert first.body["topics"][0]["topic_id"] == TOPIC_IDS["a"]
    p = first.body["topics"][0]["partitions"][0]
    assert (p["leader_epoch"], p["partition_epoch"], p["new_isr"]) == (3, 8, [1, 2])
    submit(manager, a1, (1,))
    submit(manager, b0, (1, 3))
    await settle()
    assert controller.pending == [first]  # the others wait for the answer
    answer_all(first)
    await settle()
    assert [r.isr for r in a0.results] == [[1, 2]] and a0.results[0].partition_epoch == 9
    second = controller.only_pending()
    assert proposed(second) == [("a", 1, [1]), ("b", 0, [1, 3])]  # one request for both
    answer_all(second, ErrorCode.FENCED_LEADER_EPOCH)
    await settle()
    assert [r.error for r in a1.results + b0.results] == [ErrorCode.FENCED_LEADER_EPOCH] * 2
    assert manager.requests_sent == 2


async def test_a_newer_proposal_replaces_an_unsent_one(manager, controller):
    a0, a1 = FakePartition("a", 0), FakePartition("a", 1)
    submit(manager, a0)
    await settle()
    submit(manager, a1, (1, 2))
    submit(manager, a1, (1,))
    answer_all(controller.only_pending())
    await settle()
    assert proposed(controller.only_pending()) == [("a", 1, [1])]


async def test_refused_proposals_are_dropped_retriable_ones_sent_again_after_a_backoff(manager, controller, time):
    fenced, retriable = FakePartition("a", 0), FakePartition("a", 1, retry=True)
    submit(manager, FakePartition("b", 0))
    await settle()
    submit(manager, fenced)
    submit(manager, retriable)
    answer_all(controller.only_pending())
    await settle()
    sent = controller.only_pending()
    assert proposed(sent) == [("a", 0, [1, 2]), ("a", 1, [1, 2])]
    sent.answer({"error_code": 0, "topics": [{"topic_name": "a", "topic_id": TOPIC_IDS["a"], "partitions": [
        {"partition_index": 0, "error_code": ErrorCode.FENCED_LEADER_EPOCH},
        {"partition_index": 1, "error_code": ErrorCode.NOT_CONTROLLER}]}]}, 2)
    await settle()
    assert controller.pending == []
    time.sleep(49)
    await settle()
    assert controller.pending == []
    time.sleep(1)
    await settle()
    again = controller.only_pending()
    assert proposed(again) == [("a", 1, [1, 2])]  # the fenced one is gone: the leader waits for LeaderAndIsr
    retriable.retry = False
    answer_all(again)
    await settle()
    time.sleep(10_000)
    await settle()
    assert controller.pending == [] and len(fenced.results) == 1 and len(retriable.results) == 2


async def test_unanswered_requests_are_sent_again_with_a_growing_backoff(manager, controller, time):
    a0 = FakePartition("a", 0)
    submit(manager, a0)
    await settle()
    controller.only_pending().fail(KafkaConnectionError("no controller"))
    await settle()
    time.sleep(50)
    await settle()
    second = controller.only_pending()
    answer_all(second, top_error=ErrorCode.STALE_BROKER_EPOCH)  # not registered yet: the whole request again
    await settle()
    time.sleep(99)
    await settle()
    assert controller.pending == []
    time.sleep(1)
    await settle()
    answer_all(controller.only_pending())
    await settle()
    assert [r.error for r in a0.results] == [ErrorCode.NONE] and a0.results[0].isr == [1, 2]
    submit(manager, FakePartition("a", 1))  # an answered request resets the backoff: sent at once
    await settle()
    assert len(controller.pending) == 1


async def test_a_topic_without_a_known_id_goes_by_name(manager, controller):
    submit(manager, FakePartition("unknown", 0))
    await settle()
    sent = controller.only_pending()
    assert sent.max_version == 1 and sent.body["topics"][0]["topic_name"] == "unknown"
    answer_all(sent, version=1)


# -- with a real Partition ---------------------------------------------------------------------

@pytest.fixture
def rm(tmp_path, time, manager):
    cache = MetadataCache(1)
    for b in (1, 2, 3):
        cache.brokers[b] = BrokerInfo(b, {"PLAINTEXT": BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + b)})
    with replica_manager(tmp_path, time, LogConfig(min_insync_replicas=1), lag_ms=1000, metadata_cache=cache,
                         alter_partition=manager) as rm:
        yield rm


async def test_a_shrink_takes_effect_when_the_controller_commits_it(rm, controller, time):
    rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("a", 0, 1, 1, 5, [1, 2, 3], 4, [1, 2, 3])])
    partition = rm.get_partition("a", 0)
    out = []
    rm.fetch_messages(FetchParams(2, 0, 1, 1 << 20, 0), [("a", [FetchPartition(0, -1, 0, 0, 1 << 20)])], out.append)
    time.sleep(1001)
    rm.maybe_shrink_isr()  # broker 3 never fetched (broker 2 fetched everything there is: caught up)
    await settle()
    sent = controller.only_pending()
    [p] = sent.body["topics"][0]["partitions"]
    assert (p["leader_epoch"], p["partition_epoch"], p["new_isr"]) == (5, 4, [1, 2])
    assert partition.isr == {1, 2, 3}  # nothing changes before the answer
    answer_all(sent)
    await settle()
    assert partition.isr == {1, 2} and partition.partition_epoch == 5
