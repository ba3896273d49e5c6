"""Topic administration as KafkaApis sees it: the ``TopicAdmin`` protocol.

Creating and deleting topics (CreateTopics, DeleteTopics, a Metadata request's
auto-creation, the group coordinator's __consumer_offsets) changes the cluster's metadata,
which is the controller's business, not the broker's. KafkaApis hands these requests to a
``TopicAdmin``: ``broker.forwarding.ControllerTopicAdmin``, which asks the active controller
(a remote one, or the one of a combined broker,controller process, over its listener all
the same); or, on a broker without a controller (driven by a static controller),
``NotController``, which refuses them. Results go to a callback because the controller
answers later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from protocol.errors import ErrorCode

from .config import validate_topic_name

# (error code, error message) for one topic of a request.
TopicResult = tuple[int, str | None]
TopicResultsCallback = Callable[[list[TopicResult]], None]

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
    def create_topics(self, topics: list[NewTopic], validate_only: bool, callback: TopicResultsCallback,
                      timeout_ms: int = 30000) -> None:
        """Create the topics, each on its own; ``callback`` gets one result per topic, in order,
        once this broker's metadata shows them (up to ``timeout_ms``; 0: as soon as decided)."""

    def delete_topics(self, names: list[str], callback: TopicResultsCallback, timeout_ms: int = 30000) -> None:
        """Delete the topics, each on its own; ``callback`` gets one result per name, in order."""

    def maybe_auto_create_topic(self, name: str, allow: bool) -> int:
        """A Metadata request names a topic this broker does not know: the error code for the
        topic's slot in the response (LEADER_NOT_AVAILABLE while it is being created)."""


class NotController:
    """A broker without a controller to ask: topics are whatever its static controller sends."""

    def create_topics(self, topics: list[NewTopic], validate_only: bool, callback: TopicResultsCallback,
                      timeout_ms: int = 30000) -> None:
        callback([(ErrorCode.NOT_CONTROLLER, "topics are created by the controller") for _ in topics])

    def delete_topics(self, names: list[str], callback: TopicResultsCallback, timeout_ms: int = 30000) -> None:
        callback([(ErrorCode.NOT_CONTROLLER, "topics are deleted by the controller") for _ in names])

    def maybe_auto_create_topic(self, name: str, allow: bool) -> int:
        if validate_topic_name(name) is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
