"""Kafka's ACL vocabulary with its wire codes (AclOperation, AclPermissionType, ResourceType,
PatternType), shared by the client (kbroker acls, the admin helpers) and the broker's
authorizer, and the bindings and filters as the ACL APIs carry them.

Names as Kafka's tools write them: operations in camel case (``DescribeConfigs``), resource
types as kafka-acls.sh's ResourcePattern shows them (``TOPIC``) and as the authorizer log does
(``Topic``).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"                  # a literal name, host or User:* that matches every one


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The operations each resource type supports (Kafka's AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: dict[int, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


def operation_name(op: int) -> str:
    """Kafka's camel-case operation name: ``DescribeConfigs``, ``ClusterAction``."""
    try:
        return "".join(part.capitalize() for part in AclOperation(op).name.split("_"))
    except ValueError:
        return f"Unknown({op})"


def parse_operation(text: str) -> AclOperation:
    """``Read``, ``read``, ``DescribeConfigs``, ``DESCRIBE_CONFIGS``: the operation."""
    key = text.replace("_", "").replace("-", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key:
            return op
    raise ValueError(f"unknown operation {text!r}")


class AclBinding(NamedTuple):
    """One ACL binding as the ACL APIs carry it (codes as ints)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class AclBindingFilter(NamedTuple):
    """A filter of bindings: None matches any name, principal or host; ANY (1) any type,
    operation or permission; pattern ANY the exact name with any pattern, MATCH every binding
    that applies to a resource of that name."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = AclPermissionType.ANY
