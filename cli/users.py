"""``kbroker users scram set|delete|list``: SCRAM credentials as kafka-configs.sh manages them
for ``--entity-type users`` (AlterUserScramCredentials, DescribeUserScramCredentials, KIP-554).

    kbroker users scram set -u alice --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    kbroker users scram set -u alice --add-config-file alice.properties   # SCRAM-SHA-512=[password=...] lines
    kbroker users scram delete -u alice --delete-config SCRAM-SHA-512
    kbroker users scram list [-u alice]

The salt is random and the salted password is computed here: the password never leaves this
process (as with Kafka's admin client). Iterations default to 4096, kafka-configs.sh's default.
Each mechanism goes in a request of its own (see below).
"""

from __future__ import annotations

import argparse

from cli.common import UsageError
from protocol.client import KafkaClient
from protocol.client.admin import DEFAULT_SCRAM_ITERATIONS, SCRAM_MECHANISMS, ScramUpsertion
from protocol.client.security import read_client_properties
from protocol.errors import KafkaError, ResourceNotFoundError


def _split_top_level(text: str) -> list[str]:
    """``a=[x,y],b=[z]`` -> [``a=[x,y]``, ``b=[z]``]: commas inside brackets belong to the value."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if current:
        parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_add_config(text: str) -> list[tuple[str, int, str]]:
    """kafka-configs.sh's ``--add-config 'SCRAM-SHA-256=[iterations=8192,password=secret],
    SCRAM-SHA-512=[password=secret]'``: (mechanism, iterations, password) each. The password is
    the rest of its entry after ``password=`` (it may hold commas)."""
    out = []
    for item in _split_top_level(text):
        mechanism, sep, value = item.partition("=")
        mechanism = mechanism.strip().upper()
        if not sep or mechanism not in SCRAM_MECHANISMS:
            raise UsageError(f"--add-config {item!r}: expected SCRAM-SHA-256=[...] or SCRAM-SHA-512=[...]")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        iterations, password = DEFAULT_SCRAM_ITERATIONS, None
        rest = value
        while rest:
            key, sep, tail = rest.partition("=")
            key = key.strip()
            if not sep:
                raise UsageError(f"--add-config {item!r}: expected key=value in {value!r}")
            if key == "password":
                password = tail  # the rest, commas included
                break
            if key != "iterations":
                raise UsageError(f"--add-config {item!r}: unknown key {key!r} (iterations, password)")
            number, _sep, rest = tail.partition(",")
            try:
                iterations = int(number)
            except ValueError:
                raise UsageError(f"--add-config {item!r}: iterations={number!r} is not a number") from None
        if password is None:
            raise UsageError(f"--add-config {item!r}: no password")
        out.append((mechanism, iterations, password))
    if not out:
        raise UsageError("--add-config: nothing to set")
    return out


# One request per mechanism: Kafka's controller refuses two changes of one user in a request
# (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"), which
# is what kafka-configs.sh runs into with both mechanisms in one --add-config.

def add_config_text(args: argparse.Namespace) -> str:
    """--add-config and the entries of --add-config-file (a properties file: ``SCRAM-SHA-512=[...]``
    lines, as kafka-configs.sh reads it), one --add-config string."""
    items = [args.add_config] if args.add_config else []
    if args.add_config_file:
        try:
            props = read_client_properties(args.add_config_file)
        except OSError as exc:
            raise UsageError(f"--add-config-file {args.add_config_file}: {exc.strerror}") from None
        items += [f"{k}={v}" for k, v in props.items()]
    if not items:
        raise UsageError("set: --add-config or --add-config-file is required")
    return ",".join(items)


async def set_credentials(client: KafkaClient, args: argparse.Namespace) -> int:
    for mechanism, iterations, password in parse_add_config(add_config_text(args)):
        _check(args.user, await client.alter_user_scram_credentials(
            upsertions=[ScramUpsertion(args.user, mechanism, password, iterations)]))
    print(f"Completed updating config for user {args.user}.")
    return 0


async def delete_credentials(client: KafkaClient, args: argparse.Namespace) -> int:
    mechanisms = [m.strip().upper() for m in args.delete_config.split(",") if m.strip()]
    unknown = [m for m in mechanisms if m not in SCRAM_MECHANISMS]
    if unknown or not mechanisms:
        raise UsageError(f"--delete-config {args.delete_config!r}: expected SCRAM-SHA-256 and/or SCRAM-SHA-512")
    for mechanism in mechanisms:
        _check(args.user, await client.alter_user_scram_credentials(deletions=[(args.user, mechanism)]))
    print(f"Completed updating config for user {args.user}.")
    return 0


def _check(user: str, errors: dict[str, KafkaError | None]) -> None:
    error = errors.get(user)
    if error is not None:
        raise error


async def list_credentials(client: KafkaClient, args: argparse.Namespace) -> int:
    try:
        found = await client.describe_user_scram_credentials([args.user] if args.user else None)
    except ResourceNotFoundError:
        found = {}
    for user, credentials in sorted(found.items()):
        described = ", ".join(f"{m}=iterations={i}" for m, i in credentials)
        print(f"SCRAM credential configs for user-principal '{user}' are {described}")
    return 0
