"""Forwarding to the controller on MockTime against a scripted controller: relaying as it came,
retrying an unreachable controller until the deadline (then REQUEST_TIMED_OUT in every slot),
answering CreateTopics / CreatePartitions / DeleteTopics once this broker's metadata shows the
result, and Metadata auto-creation."""

from __future__ import annotations

import uuid

import pytest

from broker.config import KafkaConfig
from broker.forwarding import ControllerTopicAdmin, ForwardingManager, MetadataWaiters
from broker.metadata_cache import MetadataCache, PartitionInfo
from broker.topic_admin import NewTopic
from protocol.api_keys import ApiKey
from protocol.client import KafkaConnectionError
from protocol.clock import MockTime
from protocol.errors import ErrorCode, NotControllerError
from protocol.messages import APIS

from .controller_fakes import ScriptedController, settle

BROKER_ID = 1


class Node:
    def __init__(self, timeout_ms: int = 1000) -> None:
        self.time = MockTime()
        self.controller = ScriptedController()
        self.cache = MetadataCache(BROKER_ID)
        self.waiters = MetadataWaiters(self.time)
        self.cache.listeners.append(self.waiters.metadata_updated)
        self.applied: set[tuple[str, int]] = set()  # partitions whose LeaderAndIsr this broker applied
        self.forwarding = ForwardingManager(self.controller, time=self.time, metadata_cache=self.cache,
                                            waiters=self.waiters, timeout_ms=timeout_ms,
                                            applied=lambda t, info: (t, info.partition) in self.applied)
        self.config = KafkaConfig({"num.partitions": "3", "default.replication.factor": "2"})
        self.admin = ControllerTopicAdmin(self.forwarding, self.config, self.cache)

    def show(self, topic: str, partitions: int, leader: int = BROKER_ID, replicas=(BROKER_ID, 2)) -> None:
        """UpdateMetadata arrived with the topic."""
        for p in range(partitions):
            self.cache.update_partition(topic, uuid.uuid4(), PartitionInfo(p, leader, 0, list(replicas), list(replicas)))
        self.cache.updated()

    def apply(self, topic: str, partitions: int) -> None:
        """LeaderAndIsr arrived (KafkaApis tells the listeners after it)."""
        self.applied |= {(topic, p) for p in range(partitions)}
        self.cache.updated()

    async def advance(self, ms: float, step: float = 10) -> None:
        for _ in range(int(ms / step)):
            self.time.sleep(step)
            await settle()


@pytest.fixture
def node():
    n = Node()
    yield n
    n.forwarding.close()


def forward(node: Node, api_key: int, version: int, body: dict) -> list:
    api = APIS[api_key]
    raw = api.request.build(version, body)
    answers: list = []
    node.forwarding.forward(api_key, version, raw, api.request.parse(version, raw),
                            lambda data: answers.append(api.response.parse(version, data)))
    return answers


ALTER = {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
    {"name": "retention.ms", "config_operation": 0, "value": "1"}]}], "validate_only": False}


async def test_a_request_goes_to_the_controller_as_it_came_and_its_answer_comes_back(node):
    answers = forward(node, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, ALTER)
    await settle()
    sent = node.controller.only_pending()
    assert (sent.api_key, sent.version) == (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)
    assert sent.body["raw"] == APIS[ApiKey.INCREMENTAL_ALTER_CONFIGS].request.build(1, ALTER)
    sent.answer_raw({"responses": [{"error_code": ErrorCode.INVALID_CONFIG, "error_message": "no",
                                    "resource_type": 2, "resource_name": "t"}]})
    await settle()
    assert [(r.resource_name, r.error_code, r.error_message) for r in answers[0].responses] == [
        ("t", ErrorCode.INVALID_CONFIG, "no")]


async def test_an_unreachable_controller_is_retried_until_the_deadline_then_request_timed_out(node):
    answers = forward(node, ApiKey.ELECT_LEADERS, 1, {"election_type": 0, "topic_partitions": [
        {"topic": "t", "partitions": [0, 2]}], "timeout_ms": 1000})
    await settle()
    node.controller.only_pending().fail(NotControllerError("standby"))
    await settle()
    await node.advance(40)
    assert node.controller.pending == []
    await node.advance(10)
    node.controller.only_pending().fail(KafkaConnectionError("refused"))  # retried after 50 ms, then 100 ...
    await settle()
    await node.advance(100)
    assert len(node.controller.sent) == 3 and answers == []
    node.controller.only_pending().fail(KafkaConnectionError("refused"))
    while not answers:
        for sent in node.controller.pending:
            sent.fail(KafkaConnectionError("refused"))
        await node.advance(10)
    assert node.time.monotonic_ms() - 1_000_000 <= 1000 + 10
    [response] = answers
    assert [(t.topic, [(p.partition_id, p.error_code) for p in t.partition_result])
            for t in response.replica_election_results] == [("t", [(0, ErrorCode.REQUEST_TIMED_OUT),
                                                                    (2, ErrorCode.REQUEST_TIMED_OUT)])]


async def test_create_partitions_is_answered_once_the_new_partitions_are_here(node):
    node.show("grow", 2)
    node.apply("grow", 2)
    answers = forward(node, ApiKey.CREATE_PARTITIONS, 1, {"topics": [{"name": "grow", "count": 4, "assignments": None}],
                                                          "timeout_ms": 500, "validate_only": False})
    await settle()
    node.controller.only_pending().answer_raw({"results": [{"name": "grow", "error_code": 0}]})
    await settle()
    assert answers == []
    node.show("grow", 4)
    assert answers == []  # the metadata has them, the LeaderAndIsr that makes this broker lead them not yet
    node.apply("grow", 4)
    assert [(r.name, r.error_code) for r in answers[0].results] == [("grow", 0)]


async def test_create_topics_waits_for_the_metadata_within_its_timeout(node):
    results: list = []
    node.admin.create_topics([NewTopic("new", 2, 2), NewTopic("bad", 1, 9)], False, results.append, timeout_ms=300)
    await settle()
    sent = node.controller.only_pending()
    assert sent.api_key == ApiKey.CREATE_TOPICS
    assert [(t["name"], t["num_partitions"], t["replication_factor"]) for t in sent.body["topics"]] == [
        ("new", 2, 2), ("bad", 1, 9)]
    sent.answer({"topics": [{"name": "new", "error_code": 0, "error_message": None},
                            {"name": "bad", "error_code": ErrorCode.INVALID_REPLICATION_FACTOR,
                             "error_message": "3 brokers"}]}, 4)
    await settle()
    assert results == []
    node.show("new", 1)
    node.apply("new", 1)
    assert results == []  # one of two partitions
    node.show("new", 2)
    assert results == []  # this broker is a replica: it waits for the LeaderAndIsr too
    node.apply("new", 2)
    assert results == [[(0, None), (ErrorCode.INVALID_REPLICATION_FACTOR, "3 brokers")]]
    # Metadata that never comes: REQUEST_TIMED_OUT at the deadline, as Kafka's DelayedCreatePartitions.
    node.admin.create_topics([NewTopic("slow", 1, 1)], False, results.append, timeout_ms=300)
    await settle()
    node.controller.only_pending().answer({"topics": [{"name": "slow", "error_code": 0}]}, 4)
    await settle()
    await node.advance(290)
    assert len(results) == 1
    await node.advance(20)
    assert results[1][0][0] == ErrorCode.REQUEST_TIMED_OUT


async def test_delete_topics_waits_until_the_topic_is_gone_here(node):
    node.show("gone", 1)
    results: list = []
    node.admin.delete_topics(["gone"], results.append, timeout_ms=300)
    await settle()
    node.controller.only_pending().answer({"responses": [{"name": "gone", "error_code": 0}]}, 3)
    await settle()
    assert results == []
    node.cache.remove_topic("gone")
    node.cache.updated()
    assert results == [[(0, None)]]


async def test_auto_creation_answers_leader_not_available_and_asks_the_controller_once(node):
    assert node.admin.maybe_auto_create_topic("bad name", True) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert node.admin.maybe_auto_create_topic("auto", False) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert node.admin.maybe_auto_create_topic("auto", True) == ErrorCode.LEADER_NOT_AVAILABLE
    assert node.admin.maybe_auto_create_topic("auto", True) == ErrorCode.LEADER_NOT_AVAILABLE
    await settle()
    sent = node.controller.only_pending()  # one CreateTopics, with this broker's defaults
    assert [(t["name"], t["num_partitions"], t["replication_factor"]) for t in sent.body["topics"]] == [("auto", 3, 2)]
    sent.answer({"topics": [{"name": "auto", "error_code": 0}]}, 4)
    await settle()
    assert node.admin.maybe_auto_create_topic("auto", True) == ErrorCode.LEADER_NOT_AVAILABLE
    await settle()
    assert len(node.controller.pending) == 1  # asked again: the first creation finished
