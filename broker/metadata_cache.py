"""What this broker knows of the cluster: the live (unfenced) brokers and their endpoints,
the active controller, topics with their config overrides, and each partition's leader,
leader epoch, replicas and ISR — filled by UpdateMetadata from the controller and read by
Metadata requests. Whoever waits for the metadata to show something registers a listener;
``updated()`` (called after each UpdateMetadata) runs them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class BrokerEndpoint:
    listener_name: str
    host: str
    port: int


@dataclass
class BrokerInfo:
    broker_id: int
    endpoints: dict[str, BrokerEndpoint]
    rack: str | None = None

    def endpoint(self, listener_name: str) -> BrokerEndpoint | None:
        return self.endpoints.get(listener_name)


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    partition_epoch: int = 0


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo]
    configs: dict[str, str] = field(default_factory=dict)


class MetadataCache:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self.listeners: list[Callable[[], None]] = []

    def updated(self) -> None:
        """The metadata changed: tell the listeners."""
        for listener in list(self.listeners):
            listener()

    def contains_topic(self, topic: str) -> bool:
        return topic in self.topics

    def contains_partition(self, topic: str, partition: int) -> bool:
        info = self.topics.get(topic)
        return info is not None and partition in info.partitions

    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return None if info is None else info.partitions.get(partition)

    def broker_endpoint(self, broker_id: int, listener_name: str) -> BrokerEndpoint | None:
        """Where to reach a broker: its endpoint on the listener, else its first one; None if unknown."""
        broker = self.brokers.get(broker_id)
        if broker is None:
            return None
        return broker.endpoint(listener_name) or next(iter(broker.endpoints.values()), None)

    def alive_brokers(self) -> list[BrokerInfo]:
        return sorted(self.brokers.values(), key=lambda b: b.broker_id)

    def put_topic(self, topic: TopicInfo) -> None:
        self.topics[topic.name] = topic

    def update_partition(self, topic: str, topic_id: uuid.UUID | None, state: PartitionInfo) -> None:
        info = self.topics.get(topic)
        if info is None:
            info = TopicInfo(topic, topic_id or uuid.UUID(int=0), {})
            self.topics[topic] = info
        elif topic_id is not None and topic_id.int:
            info.topic_id = topic_id
        info.partitions[state.partition] = state

    def remove_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)

    def remove_partition(self, topic: str, partition: int) -> None:
        info = self.topics.get(topic)
        if info is not None:
            info.partitions.pop(partition, None)
            if not info.partitions:
                del self.topics[topic]
