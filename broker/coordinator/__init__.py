"""The group coordinator: consumer groups (Kafka's classic protocol) and committed offsets,
kept in ``__consumer_offsets``.

* ``adapter.GroupCoordinatorAdapter``: what KafkaApis calls (one method per API) and what the
  replica manager tells about ``__consumer_offsets`` leadership;
* ``group_coordinator.GroupCoordinator``: the protocol (join, sync, heartbeat, leave, offsets);
* ``group_metadata``: a group's state, with the one transition table;
* ``group_metadata_manager``: placement, loading, storing and expiry;
* ``delayed``: the DelayedHeartbeat / DelayedJoin / InitialDelayedJoin / DelayedSync operations.
"""

from .adapter import GroupCoordinatorAdapter, error_response
from .config import CONFIG_KEYS, GroupCoordinatorConfig
from .group_metadata_manager import GROUP_METADATA_TOPIC_NAME, java_string_hashcode, partition_for

__all__ = ["CONFIG_KEYS", "GROUP_METADATA_TOPIC_NAME", "GroupCoordinatorAdapter", "GroupCoordinatorConfig",
           "error_response", "java_string_hashcode", "partition_for"]
