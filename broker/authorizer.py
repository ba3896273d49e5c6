"""The authorization step every request passes through (Kafka's Authorizer interface).

Allow-all until the security work (SASL, ACLs) fills it in; the call sites already name the
operation and resource the way Kafka's ACLs do, so only this class has to change.
"""

from __future__ import annotations

import enum
from typing import Any


class Operation(enum.Enum):
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    DESCRIBE = "Describe"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    CLUSTER_ACTION = "ClusterAction"
    IDEMPOTENT_WRITE = "IdempotentWrite"


class ResourceType(enum.IntEnum):
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class AllowAllAuthorizer:
    def authorize(self, ctx: Any, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return True
