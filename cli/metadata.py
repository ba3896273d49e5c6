"""``kbroker metadata``: the cluster as a Metadata response describes it (brokers, controller,
topics and partitions); with ``--metrics HOST:PORT``, each metrics endpoint's health at a
glance (protocol.client.metrics)."""

from __future__ import annotations

import argparse
import asyncio

from rich.console import Console
from rich.table import Table

from cli.render import partitions_table
from protocol.client import KafkaClient
from protocol.client.metrics import read_endpoint, summary


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
    if getattr(args, "metrics", None):
        out.print(await health_table(args.metrics))
    return 0


async def health_table(addresses: list[str]) -> Table:
    statuses = await asyncio.gather(*(read_endpoint(a) for a in addresses))
    table = Table("endpoint", "health", "partitions", "leaders", "under-replicated", "under min ISR",
                  "active controller", "fenced brokers", "offline", "loop lag p99", title="Health (metrics endpoints)")

    def show(v: float | None) -> str:
        return "" if v is None else f"{v:g}"

    for status in statuses:
        s = summary(status)
        lag = s["event_loop_lag_p99_s"]
        table.add_row(status.address, status.health, show(s["partitions"]), show(s["leaders"]),
                      show(s["under_replicated"]), show(s["under_min_isr"]), show(s["active_controller"]),
                      show(s["fenced_brokers"]), show(s["offline_partitions"]),
                      "" if lag is None else f"≤ {lag * 1000:g} ms")
    return table
