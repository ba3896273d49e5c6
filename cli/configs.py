"""``kbroker configs describe|set|delete``: configs of a topic, a broker or the cluster-wide
broker defaults, as kafka-configs.sh manages them (DescribeConfigs; IncrementalAlterConfigs
through any broker, which forwards it to the controller).

    kbroker configs describe --topic T | --broker N | --broker-defaults [--all]
    kbroker configs set      --topic T | --broker N | --broker-defaults KEY=VALUE ...
    kbroker configs delete   --topic T | --broker N | --broker-defaults KEY ...

``describe`` shows each key's value and its source, named as Kafka names them
(DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, ...); without ``--all`` only the
keys set somewhere (not DEFAULT_CONFIG), as kafka-configs.sh lists a resource's own configs.
A broker's configs are asked of (and changed through) that broker. Broker configs set here are
dynamic broker configs (KIP-226): kept by the controller, applied by the brokers without a
restart; a key that only takes effect at start is refused with INVALID_REQUEST, as Kafka does."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.common import UsageError
from protocol.client import KafkaClient

TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
# DescribeConfigs' ConfigSource, Kafka's names (DescribeConfigsResponse.ConfigSource)
SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}


def _resource(args: argparse.Namespace) -> tuple[int, str, int | None, str]:
    """(resource type, name, node to ask, what to call it)."""
    given = [x for x in (args.topic is not None, args.broker is not None, args.broker_defaults) if x]
    if len(given) != 1:
        raise UsageError("give exactly one of --topic T, --broker N, --broker-defaults")
    if args.topic is not None:
        return TOPIC, args.topic, None, f"topic {args.topic}"
    if args.broker is not None:
        return BROKER, str(args.broker), args.broker, f"broker {args.broker}"
    return BROKER, "", None, "the brokers' defaults"


async def describe(client: KafkaClient, args: argparse.Namespace) -> int:
    resource_type, name, node, what = _resource(args)
    entries = await client.describe_resource_configs(resource_type, name, node)
    table = Table("key", "value", "source", title=f"Configs of {what}")
    for key, value, source, _read_only, sensitive in sorted(entries):
        if source == 5 and not args.all:
            continue
        shown = "(sensitive)" if sensitive else ("null" if value is None else value)
        table.add_row(escape(key), escape(shown), SOURCES.get(source, str(source)))
    Console().print(table)
    return 0


async def set_configs(client: KafkaClient, args: argparse.Namespace) -> int:
    resource_type, name, node, what = _resource(args)
    await client.incremental_alter_configs(resource_type, name, [(k, SET, v) for k, v in args.pairs], node)
    print(f"Completed updating config for {what}.")
    return 0


async def delete_configs(client: KafkaClient, args: argparse.Namespace) -> int:
    resource_type, name, node, what = _resource(args)
    await client.incremental_alter_configs(resource_type, name, [(k, DELETE, None) for k in args.keys], node)
    print(f"Completed updating config for {what}.")
    return 0
