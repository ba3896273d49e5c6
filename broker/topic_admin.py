"""Topic administration as KafkaApis sees it: the ``TopicAdmin`` protocol.

Creating and deleting topics (CreateTopics, DeleteTopics, a Metadata request's
auto-creation) changes the cluster's metadata, which is the controller's business, not the
broker's. KafkaApis hands these requests to a ``TopicAdmin``: in embedded mode the
single-node controller inside this process (``broker.embedded_controller``); in external
mode, where a controller process drives the broker with LeaderAndIsr and UpdateMetadata,
``NotController``, which refuses them. Results go to a callback because a controller in
another process answers later; the embedded one calls back before it returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Protocol

from protocol.errors import ErrorCode

# (error code, error message) for one topic of a request.
TopicResult = tuple[int, str | None]
TopicResultsCallback = Callable[[list[TopicResult]], None]

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def validate_topic_name(name: str) -> str | None:
    """Kafka's Topic.validate: the reason a name is illegal, or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name is longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL_TOPIC.match(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


@dataclass
class NewTopic:
    """One topic of a CreateTopics request: either a partition count and replication factor
    (-1: the broker's num.partitions / default.replication.factor) or explicit assignments."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


class TopicAdmin(Protocol):
    def create_topics(self, topics: list[NewTopic], validate_only: bool, callback: TopicResultsCallback) -> None:
        """Create the topics, each on its own; ``callback`` gets one result per topic, in order."""

    def delete_topics(self, names: list[str], callback: TopicResultsCallback) -> None:
        """Delete the topics, each on its own; ``callback`` gets one result per name, in order."""

    def maybe_auto_create_topic(self, name: str, allow: bool) -> int:
        """A Metadata request names a topic this broker does not know: NONE if it exists now
        (created), else the error code for the topic's slot in the response."""


class NotController:
    """External mode: topics are created and deleted by the controller process."""

    def create_topics(self, topics: list[NewTopic], validate_only: bool, callback: TopicResultsCallback) -> None:
        callback([(ErrorCode.NOT_CONTROLLER, "topics are created by the controller") for _ in topics])

    def delete_topics(self, names: list[str], callback: TopicResultsCallback) -> None:
        callback([(ErrorCode.NOT_CONTROLLER, "topics are deleted by the controller") for _ in names])

    def maybe_auto_create_topic(self, name: str, allow: bool) -> int:
        if validate_topic_name(name) is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
