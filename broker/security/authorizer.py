"""Authorization: Kafka's ACL model and its StandardAuthorizer (KIP-801), with a result cache.

The model, with Kafka's names and wire codes (AclBinding, ResourcePattern, AccessControlEntry):

* a binding (``StandardAcl``) names a resource pattern — resource type (TOPIC 2, GROUP 3,
  CLUSTER 4, TRANSACTIONAL_ID 5, DELEGATION_TOKEN 6, USER 7), a name and a pattern type
  (LITERAL 3, PREFIXED 4; a LITERAL ``*`` matches every name) — and an entry: a principal
  (``User:alice``, or ``User:*`` for everyone), a host (an address, or ``*``), an operation
  (ALL 2, READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
  DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12, CREATE_TOKENS 13,
  DESCRIBE_TOKENS 14) and a permission (DENY 2, ALLOW 3);
* a filter (``AclBindingFilter``: DescribeAcls, DeleteAcls) may also say ANY (1) for a type,
  operation or permission, null for a name, principal or host, and MATCH (2) for the
  pattern type: every binding that would apply to a resource of that name.

A check (``StandardAuthorizer.authorize``) follows StandardAuthorizerData: super users
(``super.users``, semicolon-separated principals) are allowed everything; otherwise the
bindings that apply to the resource are those on its literal name, on any prefix of it
(PREFIXED) and the literal wildcard. Any of them that matches the principal (or ``User:*``),
the host (or ``*``) and the operation is a match: a matching DENY wins, else a matching ALLOW
allows. ALLOW bindings imply operations (READ, WRITE, DELETE and ALTER imply DESCRIBE;
ALTER_CONFIGS implies DESCRIBE_CONFIGS); a DENY matches only its own operation or ALL. With
bindings on the resource but none matching, the answer is DENY; with none at all it is
``allow.everyone.if.no.acl.found`` (default false).

Answers are cached per (principal, host, operation, resource type, name): a produce request
then costs a dictionary lookup per topic, whatever the number of bindings. Any change of the
bindings clears the cache; so does its growing past ``CACHE_MAX_ENTRIES`` (a client naming
endless resources cannot make it grow without bound).

Denials of checks a request asked for explicitly are logged one line each on the
``kbroker.authorizer`` logger (Kafka's ``kafka.authorizer.logger``), with the principal, the
host, the operation, the resource and the rule that decided, and counted per operation
(``AuthorizerMetrics``). Checks that only filter what is shown (Metadata of all topics,
ListGroups) or work out authorized operations log nothing.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple

from protocol.acl import CLUSTER_NAME as CLUSTER_NAME  # re-exported: the call sites' name
from protocol.acl import (SUPPORTED_OPERATIONS, WILDCARD, AclOperation, AclPermissionType, PatternType, ResourceType,
                          operation_name)

from .principal import KafkaPrincipal

if TYPE_CHECKING:
    from ..network import RequestContext

audit = logging.getLogger("kbroker.authorizer")

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
KBROKER_AUTHORIZER = "kbroker.security.StandardAuthorizer"
# Kafka's ZooKeeper-era class: accepted as an alias (same semantics, same configuration keys).
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
AUTHORIZER_CLASS_NAMES = frozenset({STANDARD_AUTHORIZER, KBROKER_AUTHORIZER, ACL_AUTHORIZER})

WILDCARD_PRINCIPAL = "User:*"
CACHE_MAX_ENTRIES = 100_000


# The name the call sites use (broker/apis.py: Operation.WRITE).
Operation = AclOperation

# How Kafka writes resource types in its logs and tools (SecurityUtils.resourceTypeName).
RESOURCE_TYPE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
                       ResourceType.TRANSACTIONAL_ID: "TransactionalId",
                       ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User",
                       ResourceType.ANY: "Any", ResourceType.UNKNOWN: "Unknown"}


# Implied operations, for ALLOW bindings only (StandardAuthorizerData.findResult).
IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                              AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

def _enum(cls: type[enum.IntEnum], code: int) -> Any:
    """Kafka's fromCode: an unknown code is UNKNOWN."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


class StandardAcl(NamedTuple):
    """One ACL binding (Kafka's StandardAcl): resource pattern and entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def of(cls, resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
           operation: int, permission_type: int) -> "StandardAcl":
        return cls(_enum(ResourceType, resource_type), resource_name, _enum(PatternType, pattern_type), principal,
                   host, _enum(AclOperation, operation), _enum(AclPermissionType, permission_type))

    @classmethod
    def from_record(cls, record: Any) -> "StandardAcl":
        """From an AccessControlEntryRecord (its fields: resource_type, resource_name, ...)."""
        return cls.of(record.resource_type, record.resource_name, record.pattern_type, record.principal, record.host,
                      record.operation, record.permission_type)

    def __str__(self) -> str:
        resource = resource_text(self.resource_type, self.pattern_type, self.resource_name)
        return (f"(principal={self.principal}, host={self.host}, op={self.operation.name}, "
                f"permission={self.permission_type.name}, resource={resource})")


def resource_text(resource_type: int, pattern_type: int, name: str) -> str:
    """``Topic:LITERAL:orders``, as Kafka's authorizer log writes a resource pattern."""
    return f"{RESOURCE_TYPE_NAMES.get(_enum(ResourceType, resource_type), 'Unknown')}:" \
           f"{_enum(PatternType, pattern_type).name}:{name}"


class AclBindingFilter(NamedTuple):
    """A filter of bindings (Kafka's AclBindingFilter): None matches any name, principal or
    host; ANY any type, operation or permission; pattern type ANY any pattern with exactly
    this name, MATCH every binding that applies to a resource of this name."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
           host: str | None, operation: int, permission_type: int) -> "AclBindingFilter":
        return cls(_enum(ResourceType, resource_type), resource_name, _enum(PatternType, pattern_type), principal,
                   host, _enum(AclOperation, operation), _enum(AclPermissionType, permission_type))

    def is_unknown(self) -> bool:
        return (self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
                or self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN)

    def matches(self, acl: StandardAcl) -> bool:
        return self.pattern_matches(acl) and self.entry_matches(acl)

    def pattern_matches(self, acl: StandardAcl) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if pt == PatternType.ANY or pt == acl.pattern_type:
            return name == acl.resource_name
        # MATCH: the bindings that would apply to a resource called ``name``
        if acl.pattern_type == PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        if acl.pattern_type == PatternType.PREFIXED:
            return name.startswith(acl.resource_name)
        return False

    def entry_matches(self, acl: StandardAcl) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type


ANY_FILTER = AclBindingFilter()


def parse_super_users(value: str | None) -> frozenset[KafkaPrincipal]:
    """``super.users``: principals separated by semicolons (``User:admin;User:broker``);
    each must be ``<type>:<name>`` (Kafka's parseKafkaPrincipal)."""
    out = set()
    for part in (value or "").split(";"):
        part = part.strip()
        if part:
            kind, sep, name = part.partition(":")
            if not sep or not kind or not name:
                raise ValueError(f"super.users: {part!r} is not a principal (<type>:<name>, e.g. User:admin)")
            out.add(KafkaPrincipal(kind, name))
    return frozenset(out)


class AclIndex:
    """The bindings by id, and indexed for checks: (type, name) -> bindings, separately for
    LITERAL and PREFIXED names, plus the prefix lengths in use per type (a check looks up
    only prefixes of those lengths)."""

    __slots__ = ("by_id", "_literal", "_prefixed", "_prefix_lengths", "_bindings")

    def __init__(self) -> None:
        self.by_id: dict[Any, StandardAcl] = {}
        self._literal: dict[tuple[int, str], list[StandardAcl]] = {}
        self._prefixed: dict[tuple[int, str], list[StandardAcl]] = {}
        self._prefix_lengths: dict[int, dict[int, int]] = {}  # type -> length -> bindings of that length
        self._bindings: dict[StandardAcl, int] = {}  # binding -> how many ids hold it

    def __len__(self) -> int:
        return len(self.by_id)

    def add(self, acl_id: Any, acl: StandardAcl) -> None:
        if acl_id in self.by_id:
            self.remove(acl_id)
        self.by_id[acl_id] = acl
        self._bindings[acl] = self._bindings.get(acl, 0) + 1
        key = (acl.resource_type, acl.resource_name)
        if acl.pattern_type == PatternType.PREFIXED:
            self._prefixed.setdefault(key, []).append(acl)
            lengths = self._prefix_lengths.setdefault(acl.resource_type, {})
            lengths[len(acl.resource_name)] = lengths.get(len(acl.resource_name), 0) + 1
        else:
            self._literal.setdefault(key, []).append(acl)

    def remove(self, acl_id: Any) -> StandardAcl | None:
        acl = self.by_id.pop(acl_id, None)
        if acl is None:
            return None
        left = self._bindings[acl] - 1
        if left:
            self._bindings[acl] = left
        else:
            del self._bindings[acl]
        key = (acl.resource_type, acl.resource_name)
        table = self._prefixed if acl.pattern_type == PatternType.PREFIXED else self._literal
        entries = table[key]
        entries.remove(acl)
        if not entries:
            del table[key]
        if acl.pattern_type == PatternType.PREFIXED:
            lengths = self._prefix_lengths[acl.resource_type]
            n = len(acl.resource_name)
            lengths[n] -= 1
            if not lengths[n]:
                del lengths[n]
        return acl

    def clear(self) -> None:
        self.by_id.clear()
        self._literal.clear()
        self._prefixed.clear()
        self._prefix_lengths.clear()
        self._bindings.clear()

    def contains(self, acl: StandardAcl) -> bool:
        return acl in self._bindings

    def applicable(self, resource_type: int, name: str) -> list[StandardAcl]:
        """The bindings on a resource: its literal name, its prefixes, the literal wildcard."""
        found = list(self._literal.get((resource_type, name), ()))
        for n in self._prefix_lengths.get(resource_type, ()):
            if n <= len(name):
                found += self._prefixed.get((resource_type, name[:n]), ())
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        return found

    def matching(self, acl_filter: AclBindingFilter) -> list[StandardAcl]:
        return [acl for acl in self.by_id.values() if acl_filter.matches(acl)]

    def matching_ids(self, acl_filter: AclBindingFilter) -> list[tuple[Any, StandardAcl]]:
        return [(i, acl) for i, acl in self.by_id.items() if acl_filter.matches(acl)]


def acl_result(acl: StandardAcl, principal: str, host: str, operation: int) -> AclPermissionType | None:
    """What ``acl`` says about this check, None if it does not match (StandardAuthorizerData.findResult)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    op = acl.operation
    if op != AclOperation.ALL:
        if acl.permission_type == AclPermissionType.ALLOW:
            if operation == AclOperation.DESCRIBE:
                if op not in IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if op not in IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != operation:
                return None
        elif op != operation:
            return None
    return acl.permission_type


class AuthorizerMetrics:
    """Denials per operation and the bindings loaded, scraped as
    ``kafka_server_authorizer_metrics_authorization_denied_total{operation}`` (Kafka's
    authorizer-metrics authorization-denied-rate-per-minute, as a counter) and
    ``kafka_server_authorizer_metrics_acls_total_count``. One per process: a combined
    broker and controller counts in the same series."""

    def __init__(self) -> None:
        self.denied: dict[str, int] = {}
        self.authorizers: list["StandardAuthorizer"] = []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        denied = CounterMetricFamily("kafka_server_authorizer_metrics_authorization_denied",
                                     "Authorization checks denied (requested explicitly), by operation",
                                     labels=["operation"])
        for op, n in sorted(self.denied.items()):
            denied.add_metric([op], n)
        yield denied
        if self.authorizers:
            yield GaugeMetricFamily("kafka_server_authorizer_metrics_acls_total_count",
                                    "ACL bindings loaded (the largest of this process's authorizers)",
                                    value=max(len(a.acls_index) for a in self.authorizers))


class StandardAuthorizer:
    """The authorizer of a broker or a controller: bindings replayed from the controller's
    metadata (``add_acl`` / ``remove_acl`` / ``load``), checks answered from them."""

    def __init__(self, super_users: Iterable[KafkaPrincipal] = (), allow_everyone_if_no_acl_found: bool = False,
                 metrics: AuthorizerMetrics | None = None, node_id: int = -1) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self.acls_index = AclIndex()
        self.metrics = metrics if metrics is not None else AuthorizerMetrics()
        self.metrics.authorizers.append(self)
        self.node_id = node_id
        # (principal, host, operation, resource type, name) -> True, or the rule that denied
        self._cache: dict[tuple, Any] = {}
        # Bumped whenever the bindings change: a decision remembered elsewhere (a connection's
        # allowed topics, broker/network.py) holds while the generation it was made in does.
        self.generation = 0

    @classmethod
    def from_config(cls, config: Any, metrics: AuthorizerMetrics | None = None) -> "StandardAuthorizer | None":
        """The authorizer ``authorizer.class.name`` asks for; None when it is empty (allow all)."""
        name = config["authorizer.class.name"]
        if not name:
            return None
        node_id = config.get("node.id")
        return cls(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"], metrics,
                   node_id if node_id is not None else -1)

    # -- the bindings ----------------------------------------------------------------------
    def add_acl(self, acl_id: Any, acl: StandardAcl) -> None:
        self.acls_index.add(acl_id, acl)
        self._invalidate()

    def remove_acl(self, acl_id: Any) -> StandardAcl | None:
        acl = self.acls_index.remove(acl_id)
        self._invalidate()
        return acl

    def load(self, acls: dict[Any, StandardAcl]) -> None:
        """Replace every binding (a full state)."""
        self.acls_index.clear()
        for acl_id, acl in acls.items():
            self.acls_index.add(acl_id, acl)
        self._invalidate()

    def _invalidate(self) -> None:
        self._cache.clear()
        self.generation += 1

    def acls(self, acl_filter: AclBindingFilter = ANY_FILTER) -> list[StandardAcl]:
        return self.acls_index.matching(acl_filter)

    def acl_count(self) -> int:
        return len(self.acls_index)

    # -- checks ----------------------------------------------------------------------------
    def authorize(self, ctx: "RequestContext", operation: int, resource_type: int, name: str,
                  log_if_denied: bool = True) -> bool:
        """Whether the request's principal may do ``operation`` on the resource."""
        principal, host = ctx.principal, ctx.client_host
        if self._cache.get((principal, host, operation, resource_type, name)) is True:
            return True  # the hot path (a produce request's topic): one dictionary lookup
        return self.check(principal, host, operation, resource_type, name, ctx if log_if_denied else None)

    def check(self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int, name: str,
              ctx: "RequestContext | None" = None, audit_denial: bool = True) -> bool:
        key = (principal, host, operation, resource_type, name)
        result = self._cache.get(key)
        if result is None:
            result = self._decide(principal, host, operation, resource_type, name)
            if len(self._cache) >= CACHE_MAX_ENTRIES:
                self._cache.clear()
            self._cache[key] = result
        if result is True:
            return True
        if ctx is not None and audit_denial:
            self._denied(principal, host, operation, resource_type, name, ctx, result)
        return False

    def _decide(self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int, name: str) -> Any:
        """True, or a description of the rule that denies (StandardAuthorizerData.authorize)."""
        if principal in self.super_users:
            return True
        who = f"{principal.principal_type}:{principal.name}"
        allow = None
        applicable = self.acls_index.applicable(resource_type, name)
        for acl in applicable:
            result = acl_result(acl, who, host, operation)
            if result == AclPermissionType.DENY:
                return f"MatchingAcl(acl={acl})"
            if result == AclPermissionType.ALLOW:
                allow = acl
        if allow is not None:
            return True
        if applicable:
            return "DefaultDeny"  # bindings on the resource, none for this principal, host and operation
        return True if self.allow_if_no_acl else "DefaultDeny"

    def _denied(self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int, name: str,
                ctx: "RequestContext", rule: Any) -> None:
        op = operation_name(operation)
        self.metrics.denied[op] = self.metrics.denied.get(op, 0) + 1
        try:
            from protocol.messages import APIS
            request = APIS[ctx.header.api_key].name
        except (KeyError, AttributeError):
            request = "?"
        audit.info("Principal = %s is Denied operation = %s from host = %s on resource = %s for request = %s "
                   "based on rule %s", principal, op, host, resource_text(resource_type, PatternType.LITERAL, name),
                   request, rule)

    def authorize_by_resource_type(self, ctx: "RequestContext", operation: int, resource_type: int) -> bool:
        """Whether the principal may do ``operation`` on at least one resource of the type
        (Kafka's Authorizer.authorizeByResourceType, KIP-679: InitProducerId's WRITE on any
        topic): an ALLOW for it (its own operation or ALL) that no DENY dominates — a DENY on
        the same literal name, or on a PREFIXED name that is a prefix of the allowed one; a
        literal wildcard DENY denies everything, a literal wildcard ALLOW allows."""
        principal, host = ctx.principal, ctx.client_host
        if self.check(principal, host, operation, resource_type, "hardcode", ctx, audit_denial=False):
            return True
        who = f"{principal.principal_type}:{principal.name}"
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        wildcard_allow = False
        for acl in self.acls_index.by_id.values():
            if acl.resource_type != resource_type:
                continue
            if acl.host != host and acl.host != WILDCARD:
                continue
            if acl.principal != who and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != operation and acl.operation != AclOperation.ALL:
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literal.add(acl.resource_name)
                elif acl.pattern_type == PatternType.PREFIXED:
                    deny_prefixed.add(acl.resource_name)
            elif acl.permission_type == AclPermissionType.ALLOW:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    wildcard_allow = True
                elif acl.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
                    allow.append((acl.pattern_type, acl.resource_name))
        if wildcard_allow:
            return True
        for pattern_type, name in allow:
            if pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                continue
            return True
        return False

    def authorized_operations(self, ctx: "RequestContext", resource_type: int, name: str) -> int:
        """The 32-bit field of the operations the principal may do on the resource (Kafka's
        AuthHelper.authorizedOperations: Metadata's and DescribeGroups' authorized operations)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.check(ctx.principal, ctx.client_host, op, resource_type, name):  # (no ctx: never logged)
                bits |= 1 << op
        return bits


def supported_operations_bits(resource_type: int) -> int:
    """The authorized-operations field when no authorizer is configured: every supported operation."""
    bits = 0
    for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
        bits |= 1 << op
    return bits


ERROR_MESSAGES = {
    29: "Topic authorization failed.",
    30: "Group authorization failed.",
    31: "Cluster authorization failed.",
    53: "Transactional Id authorization failed.",
    54: "Security features are disabled.",
}
