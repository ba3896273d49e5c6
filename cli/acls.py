"""``kbroker acls add|list|remove``: ACLs as kafka-acls.sh manages them (CreateAcls,
DescribeAcls, DeleteAcls), with its options and its output.

* the resources: ``--topic T``, ``--group G``, ``--transactional-id X``, ``--delegation-token D``
  (each repeatable) and ``--cluster``, with ``--resource-pattern-type`` (literal or prefixed to
  add; any or match too to list and remove; default literal);
* the entries: ``--allow-principal`` / ``--deny-principal`` (``User:alice``, repeatable) from
  ``--allow-host`` / ``--deny-host`` (default ``*``), for each ``--operation`` (default All);
* ``--producer``: WRITE, DESCRIBE and CREATE on the topics (WRITE and DESCRIBE on the
  transactional ids; ``--idempotent``: IDEMPOTENT_WRITE on the cluster); ``--consumer``: READ and
  DESCRIBE on the topics, READ on the groups — kafka-acls.sh's expansion;
* ``list`` without resources lists every ACL (``--principal`` narrows it); ``remove`` without
  principals removes every ACL of the resources, and asks first unless ``--force``.
"""

from __future__ import annotations

import argparse
import sys

from cli.common import UsageError
from protocol.acl import (CLUSTER_NAME, SUPPORTED_OPERATIONS, WILDCARD, AclBinding, AclBindingFilter, AclOperation,
                          AclPermissionType, PatternType, ResourceType, operation_name, parse_operation)
from protocol.client import KafkaClient
from protocol.errors import KafkaError

NL = "\n"


def _pattern_type(args: argparse.Namespace, adding: bool) -> PatternType:
    name = (args.resource_pattern_type or "literal").upper()
    try:
        pattern = PatternType[name]
    except KeyError:
        raise UsageError(f"--resource-pattern-type {args.resource_pattern_type}: expected literal, prefixed, any "
                         "or match") from None
    if adding and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(f"A '--resource-pattern-type' value of '{pattern.name}' is not valid when adding acls.")
    return pattern


def _resources(args: argparse.Namespace, pattern: PatternType) -> list[tuple[ResourceType, str, PatternType]]:
    out = [(ResourceType.TOPIC, t, pattern) for t in args.topic or ()]
    out += [(ResourceType.GROUP, g, pattern) for g in args.group or ()]
    out += [(ResourceType.TRANSACTIONAL_ID, x, pattern) for x in args.transactional_id or ()]
    out += [(ResourceType.DELEGATION_TOKEN, d, pattern) for d in args.delegation_token or ()]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, pattern))
    return out


def _principals(values: list[str] | None) -> list[str]:
    out = []
    for v in values or ():
        kind, sep, name = v.strip().partition(":")
        if not sep or not kind or not name:
            raise UsageError(f"{v!r} is not a principal: expected <type>:<name>, e.g. User:alice")
        out.append(f"{kind}:{name}")
    return out


def _entries(args: argparse.Namespace, operations: list[AclOperation]) -> list[tuple[str, str, AclOperation, int]]:
    """(principal, host, operation, permission) for the allow and deny principals and hosts
    (a principal without hosts: every host)."""
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        names = _principals(principals)
        for host in ([h.strip() for h in hosts] if hosts else [WILDCARD] if names else []):
            out += [(p, host, op, permission) for p in names for op in operations]
    return out


def _operations(args: argparse.Namespace) -> list[AclOperation]:
    try:
        return [parse_operation(o) for o in (args.operation or ["All"])]
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def bindings_to_add(args: argparse.Namespace) -> dict[tuple[ResourceType, str, PatternType], list[AclBinding]]:
    """kafka-acls.sh --add: resource -> bindings (the --producer / --consumer expansions)."""
    pattern = _pattern_type(args, adding=True)
    resources = _resources(args, pattern)
    wanted: dict[tuple[ResourceType, str, PatternType], set[AclOperation]] = {}
    if args.producer or args.consumer:
        topics = [r for r in resources if r[0] == ResourceType.TOPIC]
        if not topics:
            raise UsageError("With --producer or --consumer you must specify a --topic")
        if args.producer:
            for r in topics:
                wanted.setdefault(r, set()).update({AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE})
            for r in resources:
                if r[0] == ResourceType.TRANSACTIONAL_ID:
                    wanted.setdefault(r, set()).update({AclOperation.WRITE, AclOperation.DESCRIBE})
            if args.idempotent:
                wanted.setdefault((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL), set()).add(
                    AclOperation.IDEMPOTENT_WRITE)
        if args.consumer:
            groups = [r for r in resources if r[0] == ResourceType.GROUP]
            if not groups:
                raise UsageError("With --consumer you must specify a --group")
            for r in topics:
                wanted.setdefault(r, set()).update({AclOperation.READ, AclOperation.DESCRIBE})
            for r in groups:
                wanted.setdefault(r, set()).add(AclOperation.READ)
    else:
        if not resources:
            raise UsageError("You must specify one of: --topic, --cluster, --group, --transactional-id, "
                             "--delegation-token when adding acls")
        operations = _operations(args)
        for r in resources:
            wanted[r] = set(operations)
    out: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for resource, operations in wanted.items():
        valid = set(SUPPORTED_OPERATIONS[resource[0]]) | {AclOperation.ALL}
        if not operations <= valid:
            raise UsageError(f"ResourceType {resource[0].name} only supports operations "
                             f"{', '.join(operation_name(o) for o in sorted(valid))}")
        entries = _entries(args, sorted(operations))
        if not entries:
            raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
        out[resource] = [AclBinding(resource[0], resource[1], resource[2], p, h, op, perm) for p, h, op, perm in entries]
    return out


def pattern_text(resource_type: int, name: str, pattern_type: int) -> str:
    """Kafka's ResourcePattern.toString."""
    return f"ResourcePattern(resourceType={ResourceType(resource_type).name}, name={name}, " \
           f"patternType={PatternType(pattern_type).name})"


def entry_text(b: AclBinding) -> str:
    """Kafka's AccessControlEntry.toString."""
    return f"(principal={b.principal}, host={b.host}, operation={AclOperation(b.operation).name}, " \
           f"permissionType={AclPermissionType(b.permission_type).name})"


def _print_by_resource(heading: str, bindings: list[AclBinding]) -> None:
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in bindings:
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    for (rtype, name, pattern), entries in sorted(grouped.items()):
        lines = NL.join("\t" + entry_text(b) for b in sorted(entries))
        print(f"{heading} `{pattern_text(rtype, name, pattern)}`: {NL} {lines} {NL}")


async def add(client: KafkaClient, args: argparse.Namespace) -> int:
    to_add = bindings_to_add(args)
    failed = 0
    for resource, bindings in to_add.items():
        print(f"Adding ACLs for resource `{pattern_text(*resource)}`: {NL} "
              f"{NL.join(chr(9) + entry_text(b) for b in bindings)} {NL}")
        for binding, error in zip(bindings, await client.create_acls(bindings)):
            if error is not None:
                failed += 1
                print(f"Error while adding ACLs: {entry_text(binding)}: {error}", file=sys.stderr)
    await _list_resources(client, [(r[0], r[1], r[2]) for r in to_add], None)
    return 1 if failed else 0


def _filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    pattern = _pattern_type(args, adding=False)
    resources = _resources(args, pattern)
    principal = _principals([args.principal])[0] if getattr(args, "principal", None) else None
    if not resources:
        return [AclBindingFilter(principal=principal)]
    return [AclBindingFilter(t, n, p, principal) for t, n, p in resources]


async def _list_resources(client: KafkaClient, resources, principal: str | None) -> None:
    filters = [AclBindingFilter(t, n, p, principal) for t, n, p in resources] or [AclBindingFilter(principal=principal)]
    found: dict[AclBinding, None] = {}
    for f in filters:
        found.update(dict.fromkeys(await client.describe_acls(f)))
    _print_by_resource("Current ACLs for resource", list(found))


async def list_acls(client: KafkaClient, args: argparse.Namespace) -> int:
    found: dict[AclBinding, None] = {}
    for f in _filters(args):
        found.update(dict.fromkeys(await client.describe_acls(f)))
    _print_by_resource("Current ACLs for resource", list(found))
    return 0


def _confirm(question: str) -> bool:
    print(question)
    try:
        answer = input()
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


async def remove(client: KafkaClient, args: argparse.Namespace) -> int:
    pattern = _pattern_type(args, adding=False)
    resources = _resources(args, pattern)
    if not resources:
        raise UsageError("You must specify one of: --topic, --cluster, --group, --transactional-id, "
                         "--delegation-token when removing acls")
    entries = _entries(args, _operations(args)) if (args.allow_principal or args.deny_principal) else []
    for rtype, name, ptype in resources:
        where = f"resource filter `{pattern_text(rtype, name, ptype)}`"
        if entries:
            filters = [AclBindingFilter(rtype, name, ptype, p, h, op, perm) for p, h, op, perm in entries]
            question = (f"Are you sure you want to remove ACLs: {NL} "
                        f"{NL.join(chr(9) + entry_text(AclBinding(rtype, name, ptype, *e)) for e in entries)} {NL} "
                        f"from {where}? (y/n)")
        else:
            filters = [AclBindingFilter(rtype, name, ptype)]
            question = f"Are you sure you want to delete all ACLs for {where}? (y/n)"
        if not args.force and not _confirm(question):
            continue
        removed = await client.delete_acls(filters)
        if not any(removed):
            print(f"No ACLs matched {where}.", file=sys.stderr)
    try:
        await _list_resources(client, resources, None)
    except KafkaError:
        pass
    return 0
