"""``kbroker cluster up|status|down``: a controller and N brokers on this machine, as
background processes that outlive the command.

    kbroker cluster up [-n 3] [--dir ./cluster] [--base-port 9092] [--broker-config K=V] [--controller-config K=V]
    kbroker cluster status [--dir ./cluster]
    kbroker cluster down [--dir ./cluster] [--purge]

``up`` starts the processes (``controller.launcher.LocalCluster``: a controller-only process
and ``process.roles=broker`` processes registered with it), each with its data dir and log
file under DIR, writes DIR/cluster.json (ids, ports, pids) so that ``status`` and ``down``
find them, waits until every broker is registered and unfenced, and prints the bootstrap
list. Run on a cluster whose processes (some or all) are not running, it starts those again
with their data: ``up`` after ``down`` (or after a crash) brings the same cluster back.
``down`` stops the brokers with SIGTERM (controlled shutdown: the controller moves their
leaderships first), then the controller. ``status`` shows the processes, which brokers the
controller counts as live, and the under-replicated and offline partitions.

These start and stop servers, so they are server-side commands like ``serve`` (they import
controller/launcher.py); ``cluster elect-leaders`` is a client command (``cli.elect_leaders``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
from pathlib import Path

import uvloop
from rich.console import Console
from rich.table import Table

from cli.common import UsageError, error_name
from controller.launcher import LocalCluster, live_brokers, port_open
from protocol.client import KafkaClient
from protocol.client.metadata import ClusterMetadata

DEFAULT_DIR = "cluster"
DEFAULT_BASE_PORT = 9092


def _load(directory: Path) -> LocalCluster | None:
    try:
        return LocalCluster.load(directory)
    except FileNotFoundError:
        return None


def _props(pairs: list[tuple[str, str]]) -> dict[str, str]:
    return dict(pairs)


def up(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    cluster = _load(directory)
    if cluster is None:
        n = 3 if args.brokers is None else args.brokers
        if n < 1:
            raise UsageError("-n: at least one broker")
        base_port = DEFAULT_BASE_PORT if args.base_port is None else args.base_port
        cluster = LocalCluster(directory, n, base_port=base_port or None,
                               broker_props=_props(args.broker_config),
                               controller_props=_props(args.controller_config))
    else:
        if args.brokers is not None and args.brokers != len(cluster.brokers):
            raise UsageError(f"{directory} holds a cluster of {len(cluster.brokers)} brokers; "
                             f"`kbroker cluster down --dir {args.dir} --purge` removes it")
        if args.base_port is not None or args.broker_config or args.controller_config:
            raise UsageError(f"{directory} holds a cluster already: its ports and configs stay as they were "
                             f"(`kbroker cluster down --dir {args.dir} --purge` removes it)")
    waiting = [p for p in cluster.processes if not p.running]
    busy = [p.port for p in waiting if port_open(p.port)]
    if busy:
        print(f"kbroker: port {', '.join(map(str, busy))} already in use", file=sys.stderr)
        return 1
    err = Console(stderr=True)
    if not waiting:
        err.print(f"the cluster in {directory} is running already")
    try:
        started = cluster.launch(args.timeout, detach=True)
    finally:
        cluster.save_state()  # whatever started, status and down find it
    for p in started:
        err.print(f"started {_role(cluster, p)} {p.broker_id} on {p.bootstrap} (pid {p.pid}, log {p.output})")
    try:
        cluster.wait_ready(args.timeout)
    except (TimeoutError, RuntimeError) as exc:
        cluster.save_state()
        print(f"kbroker: the cluster did not come up: {exc}", file=sys.stderr)
        print(f"kbroker: `kbroker cluster down --dir {args.dir}` stops what runs", file=sys.stderr)
        return 1
    cluster.save_state()
    err.print(f"{len(cluster.brokers)} brokers live, controller {cluster.controller.broker_id} on "
              f"{cluster.controller.address}")
    print(cluster.bootstrap)
    return 0


def _role(cluster: LocalCluster, p) -> str:
    return "controller" if p is cluster.controller else "broker"


def down(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    cluster = _load(directory)
    if cluster is None:
        if args.purge and directory.exists():
            raise UsageError(f"{directory} holds no cluster (no {LocalCluster.STATE_FILE}); not removing it")
        print(f"kbroker: no cluster in {directory}", file=sys.stderr)
        return 1
    err = Console(stderr=True)
    # SIGTERM every broker at once (each moves its leaderships away through the controller),
    # then the controller once they are gone.
    brokers = [b for b in cluster.brokers.values() if b.running]
    for b in brokers:
        b.signal(signal.SIGTERM)
    failed = False
    for p in [*brokers, *([cluster.controller] if cluster.controller.running else [])]:
        try:
            p.stop(args.timeout)
        except Exception:  # noqa: BLE001 - a process that does not stop in time is killed
            err.print(f"{_role(cluster, p)} {p.broker_id} (pid {p.pid}) did not stop in {args.timeout}s: killing it")
            p.kill()
            failed = True
        err.print(f"stopped {_role(cluster, p)} {p.broker_id} (pid {p.pid})")
    cluster.save_state()
    if args.purge:
        shutil.rmtree(directory)
        err.print(f"removed {directory}")
    return 1 if failed else 0


def status(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    cluster = _load(directory)
    if cluster is None:
        print(f"kbroker: no cluster in {directory}", file=sys.stderr)
        return 1
    out = Console()
    controller = cluster.controller
    live = live_brokers(controller.port) if controller.running else set()
    processes = Table("role", "id", "address", "pid", "process", "state", title=f"Cluster in {directory}")
    for p in cluster.processes:
        running = p.running
        if p is controller:
            state = "listening" if running and port_open(p.port) else "-"
        else:
            state = "live" if p.broker_id in live else ("fenced or unregistered" if running else "-")
        processes.add_row(_role(cluster, p), str(p.broker_id), p.bootstrap, str(p.pid or "-"),
                          "running" if running else "stopped", state)
    out.print(processes)
    out.print(f"logs: {directory}/<role>-<id>-<port>.out", soft_wrap=True)
    healthy = all(p.running for p in cluster.processes) and live == set(cluster.brokers)
    running = [b.bootstrap for b in cluster.brokers.values() if b.running]
    if not running:
        out.print("no broker running")
        return 1
    try:
        md = uvloop.run(_metadata(",".join(running), args.timeout))
    except (OSError, TimeoutError, asyncio.TimeoutError) as exc:
        out.print(f"no metadata from the brokers: {exc}")
        return 1
    out.print(f"bootstrap: {cluster.bootstrap}")
    out.print(f"controller: {controller.broker_id} on {controller.address}; brokers clients see: "
              f"{', '.join(str(i) for i in sorted(md.brokers)) or 'none'} (controller id in Metadata: {md.controller_id})")
    partitions = [p for t in md.topics.values() for p in t.partitions.values()]
    offline = [p for p in partitions if p.leader < 0]
    under = [p for p in partitions if p.leader >= 0 and len(p.isr) < len(p.replicas)]
    out.print(f"{len(md.topics)} topics, {len(partitions)} partitions: "
              f"{len(under)} under-replicated, {len(offline)} offline")
    if under or offline:
        table = Table("topic", "partition", "leader", "replicas", "isr", "offline", "state",
                      title="Partitions needing attention")
        for p in sorted(offline + under, key=lambda p: (p.topic, p.partition)):
            table.add_row(p.topic, str(p.partition), "none" if p.leader < 0 else str(p.leader),
                          ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
                          ",".join(map(str, p.offline_replicas)),
                          ("offline" if p.leader < 0 else "under-replicated")
                          + (f" ({error_name(p.error_code)})" if p.error_code else ""))
        out.print(table)
    return 0 if healthy and not offline else 1


async def _metadata(bootstrap: str, timeout_s: float) -> ClusterMetadata:
    async with KafkaClient(bootstrap, client_id="kbroker-cluster-status") as client:
        return await asyncio.wait_for(client.refresh_metadata(), timeout_s)
