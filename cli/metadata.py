"""``kbroker metadata``: the cluster as a Metadata response describes it (brokers, controller,
topics and partitions)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from cli.render import partitions_table
from protocol.client import KafkaClient


async def run(client: KafkaClient, args: argparse.Namespace) -> int:
    cluster = await client.refresh_metadata(args.topic or None)
    out = Console()
    out.print(f"cluster id: {cluster.cluster_id}  controller: {cluster.controller_id}")
    brokers = Table("node", "host", "port", "rack", title="Brokers")
    for b in sorted(cluster.brokers.values()):
        marker = " (controller)" if b.node_id == cluster.controller_id else ""
        brokers.add_row(f"{b.node_id}{marker}", b.host, str(b.port), b.rack or "")
    out.print(brokers)
    names = args.topic or sorted(cluster.topics)
    out.print(partitions_table(cluster.topics[name] for name in names if name in cluster.topics))
    return 0
