"""The cluster as Metadata responses describe it: brokers, topics, partitions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic."""

    topic: str
    partition: int


class BrokerMetadata(NamedTuple):
    """A broker as Metadata describes it."""

    node_id: int
    host: str
    port: int
    rack: str | None


class PartitionMetadata(NamedTuple):
    """A partition as Metadata describes it (leader -1: none)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    error_code: int


class TopicMetadata(NamedTuple):
    """A topic as Metadata describes it, with its partitions by id."""

    name: str
    error_code: int
    is_internal: bool
    partitions: dict[int, PartitionMetadata]


@dataclass
class ClusterMetadata:
    """What the Metadata responses said: brokers, controller, topics and their partitions."""

    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    topics: dict[str, TopicMetadata] = field(default_factory=dict)

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, or -1 when unknown."""
        p = self.partition(topic, partition)
        return -1 if p is None or p.leader not in self.brokers else p.leader
