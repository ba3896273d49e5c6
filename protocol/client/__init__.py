"""The asyncio Kafka client: the CLI, the replica fetchers, the controller and the load
generator all talk to brokers through it.

Modules, bottom up:

* ``clock``: ``SystemTime`` (the asyncio-backed ``protocol.clock.Time``) and ``sleep``.
* ``connection``: ``Network`` (the one place that opens TCP connections) and
  ``BrokerConnection`` (one pipelined connection to one broker).
* ``metadata``: the cluster as Metadata describes it.
* ``admin`` and ``cluster``: ``KafkaClient`` keeps the cluster view, pools one connection per
  broker, retries retriable errors with backoff, and offers the admin helpers.
* ``producer``: ``Producer`` batches records per partition and sends one Produce request per
  leader; ``consumer``: ``Consumer`` fetches manually assigned partitions from their leaders;
  ``group``: ``GroupConsumer`` consumes as a member of a consumer group (the classic protocol,
  range and roundrobin assignors), ``GroupAdmin`` lists, describes, deletes groups and sets
  their offsets.

Time is injected (``protocol.clock.Time``): request timeouts, linger, backoff and delivery
timeouts are all scheduled through it, never through ``time.time()``. Everything public is
importable from ``protocol.client`` itself.
"""

from .admin import AdminMixin, ConfigEntry
from .clock import SYSTEM_TIME, SystemTime, sleep
from .cluster import KafkaClient
from .connection import DEFAULT_NETWORK, MAX_RESPONSE_BYTES, BrokerConnection, KafkaConnectionError, Network
from .consumer import Consumer, ConsumerRecord, LogTruncationError
from .group import GroupAdmin, GroupConsumer, decode_member_assignment, range_assign, roundrobin_assign
from .metadata import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata, TopicPartition
from .producer import Producer, RecordMetadata, murmur2, murmur2_partition

__all__ = [
    "AdminMixin", "BrokerConnection", "BrokerMetadata", "ClusterMetadata", "ConfigEntry", "Consumer", "ConsumerRecord",
    "DEFAULT_NETWORK", "GroupAdmin", "GroupConsumer", "KafkaClient", "KafkaConnectionError", "LogTruncationError",
    "MAX_RESPONSE_BYTES",
    "Network", "PartitionMetadata",
    "Producer", "RecordMetadata", "SYSTEM_TIME", "SystemTime", "TopicMetadata", "TopicPartition", "murmur2",
    "murmur2_partition", "decode_member_assignment", "range_assign", "roundrobin_assign", "sleep",
]
