"""``kbroker quotas set|describe``: client quotas as kafka-configs.sh manages them for
``--entity-type users|clients`` (AlterClientQuotas, DescribeClientQuotas, KIP-546).

    kbroker quotas set --client-id slow --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    kbroker quotas set --user alice --client-defaults --add-config request_percentage=50
    kbroker quotas set --user-defaults --delete-config producer_byte_rate
    kbroker quotas describe [--user alice | --user-defaults] [--client-id C | --client-defaults]

An entity is a user, a client id, or both; ``--user-defaults`` / ``--client-defaults`` name the
default entity of that type. ``describe`` without an entity lists every entity with a quota;
with ``--user`` only, that user's entities (with any client id or none), as kafka-configs.sh.
The keys: producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage (% of one thread).
kbroker refuses controller_mutation_rate and ip entities (KIP-599/612: not enforced here).
"""

from __future__ import annotations

import argparse

from cli.common import UsageError
from protocol.client import KafkaClient

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def entity_of(args: argparse.Namespace, required: bool) -> dict[str, str | None]:
    """{entity type: name, None for the default} from --user/--user-defaults/--client-id/--client-defaults."""
    entity: dict[str, str | None] = {}
    if args.user is not None and args.user_defaults:
        raise UsageError("--user and --user-defaults name two entities: give one")
    if args.client_id is not None and args.client_defaults:
        raise UsageError("--client-id and --client-defaults name two entities: give one")
    if args.user is not None or args.user_defaults:
        entity["user"] = args.user
    if args.client_id is not None or args.client_defaults:
        entity["client-id"] = args.client_id
    if required and not entity:
        raise UsageError("name the entity: --user U | --user-defaults and/or --client-id C | --client-defaults")
    return entity


def parse_add_config(text: str) -> dict[str, float]:
    """``producer_byte_rate=1048576,request_percentage=50``: the values as numbers (the
    controller decides what it accepts: INVALID_REQUEST for an unknown key or a value <= 0)."""
    out: dict[str, float] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--add-config {item!r}: expected key=number") from None
        if not sep:
            raise UsageError(f"--add-config {item!r}: expected key=number")
    return out


def describe_entity(entity: dict[str, str | None]) -> str:
    """kafka-configs.sh's wording: user-principal 'alice', client-id 'x', <default> for defaults."""
    names = {"user": "user-principal", "client-id": "client-id"}
    return ", ".join(f"{names.get(t, t)} '{'<default>' if n is None else n}'" for t, n in sorted(entity.items(),
                                                                                         key=lambda kv: kv[0] != "user"))


async def set_quotas(client: KafkaClient, args: argparse.Namespace) -> int:
    entity = entity_of(args, required=True)
    ops: dict[str, float | None] = parse_add_config(args.add_config or "")
    for key in (k.strip() for k in (args.delete_config or "").split(",")):
        if key:
            if key in ops:
                raise UsageError(f"{key} is both added and deleted")
            ops[key] = None
    if not ops:
        raise UsageError("set: --add-config and/or --delete-config is required")
    [error] = await client.alter_client_quotas([(entity, ops)])
    if error is not None:
        raise error
    print(f"Completed updating config for {describe_entity(entity)}.")
    return 0


async def describe_quotas(client: KafkaClient, args: argparse.Namespace) -> int:
    entity = entity_of(args, required=False)
    components = [(t, MATCH_DEFAULT if n is None else MATCH_EXACT, n) for t, n in entity.items()]
    found = await client.describe_client_quotas(components, strict=False)
    for ent, values in sorted(found, key=lambda e: sorted((t, n or "") for t, n in e[0].items())):
        described = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        print(f"Quota configs for {describe_entity(ent)} are {described}")
    return 0
