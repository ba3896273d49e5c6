"""``kbroker topics create|list|describe|delete``: topic administration over the protocol
(CreateTopics, Metadata, DescribeConfigs, DeleteTopics)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.common import error_name
from cli.render import partitions_table
from protocol.client import KafkaClient
from protocol.errors import TopicAlreadyExistsError, error_for

# DescribeConfigs' ConfigSource codes, named as kafka-configs.sh shows them.
CONFIG_SOURCES = {1: "topic", 2: "dynamic broker", 3: "dynamic default", 4: "static broker", 5: "default",
                  6: "dynamic broker logger", 7: "client metrics", 8: "group"}


async def create(client: KafkaClient, args: argparse.Namespace) -> int:
    try:
        await client.create_topics([(args.topic, args.partitions, args.replication_factor, dict(args.config))])
    except TopicAlreadyExistsError:
        if not args.if_not_exists:
            raise
        return 0
    print(f"Created topic {args.topic}.")
    return 0


async def list_names(client: KafkaClient, args: argparse.Namespace) -> int:
    cluster = await client.refresh_metadata()
    for name in sorted(cluster.topics):
        print(name)
    return 0


async def describe(client: KafkaClient, args: argparse.Namespace) -> int:
    topic = (await client.refresh_metadata([args.topic])).topics[args.topic]
    if topic.error_code:
        raise error_for(topic.error_code, f"{args.topic}: {error_name(topic.error_code)}")
    configs = await client.describe_configs(args.topic)
    out = Console()
    out.print(f"Topic: [bold]{topic.name}[/]  partitions: {len(topic.partitions)}  "
              f"replication factor: {len(next(iter(topic.partitions.values())).replicas)}")
    out.print(partitions_table([topic]))
    table = Table("config", "value", "source", title="Configs")
    for entry in sorted(configs, key=lambda e: e.name):
        value = "(sensitive)" if entry.sensitive else entry.value
        table.add_row(escape(entry.name), "null" if value is None else escape(value),
                      CONFIG_SOURCES.get(entry.source, str(entry.source)))
    out.print(table)
    return 0


async def delete(client: KafkaClient, args: argparse.Namespace) -> int:
    await client.delete_topics([args.topic])
    print(f"Deleted topic {args.topic}.")
    return 0


async def alter(client: KafkaClient, args: argparse.Namespace) -> int:
    """``topics alter -t T --partitions N``: CreatePartitions (the topic grows to N; fewer is
    INVALID_PARTITIONS, as Kafka answers)."""
    await client.create_partitions(args.topic, args.partitions)
    print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0
