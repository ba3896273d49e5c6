"""``kbroker cluster up|status|down``: a controller and N brokers on this machine, as
background processes that outlive the command.

    kbroker cluster up [-n 3] [--dir ./cluster] [--base-port 9092] [--broker-config K=V] [--controller-config K=V]
                       [--controllers 3 --zookeeper [host:port[/chroot]]]
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

``--controllers 3 --zookeeper`` starts a ZooKeeper server of the cluster's own (DIR/zookeeper,
on the next port) and three controllers on it (controller.metadata.store=zookeeper): one is
active, the others are standbys that take over when it dies; ``status`` names the active one.

``--secure`` starts the same cluster locked down (``LocalCluster(secure=True)``): clients on
SASL_SSL with SCRAM-SHA-256/512, brokers and the controller talking over SSL listeners that
require a client certificate, the StandardAuthorizer on with no ACL meaning no access, and an
``admin`` super user. Certificates are made with ``kbroker certs`` into DIR/secrets. The admin's
SCRAM credential is created once the brokers are live, with AlterUserScramCredentials sent over
a broker's mutual TLS listener as the ``admin`` client certificate: until then no SCRAM user
exists, so the SASL_SSL listeners let nobody in, and the mutual TLS listeners only holders of a
certificate of the cluster's CA. The admin's client configuration is written to DIR (Kafka's
properties for ``--command-config``; librdkafka's for kcat ``-F`` and confluent-kafka) and
printed with kcat's ``-X`` equivalents. With ``--zookeeper`` the cluster's own ZooKeeper takes
SASL (DIGEST-MD5) sessions only: the controllers' identity (a random password in DIR/secrets,
handed to them in a 0600 properties file) and ``zookeeper.set.acl=true`` on every znode.

These start and stop servers, so they are server-side commands like ``serve`` (they import
controller/launcher.py); ``cluster elect-leaders`` is a client command (``cli.elect_leaders``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import sys
import time
from pathlib import Path

import uvloop
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from cli.certs import make_certs
from cli.common import UsageError, error_name
from cli.reassign import moving_bytes
from controller.launcher import ADMIN_USER, ZOOKEEPER_DIGEST_MODULE, ZOOKEEPER_USER, LocalCluster, port_open
from protocol.client import BrokerConnection, KafkaClient, Network
from protocol.client.admin import DEFAULT_SCRAM_ITERATIONS, ScramUpsertion
from protocol.client.metadata import ClusterMetadata
from protocol.client.security import ClientSecurity
from protocol.errors import KafkaError, ResourceNotFoundError

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
        controllers = 1 if args.controllers is None else args.controllers
        if controllers < 1:
            raise UsageError("--controllers: at least one controller")
        if controllers > 1 and not args.zookeeper:
            raise UsageError("--controllers: more than one controller needs --zookeeper (the standbys' coordinator)")
        if (args.secure and args.zookeeper and args.zookeeper != "start"
                and "zookeeper.sasl.jaas.config" not in _props(args.controller_config)):
            raise UsageError("--secure --zookeeper CONNECT: the controllers authenticate to your ZooKeeper; give their "
                             "identity: --controller-config 'zookeeper.sasl.jaas.config=org.apache.zookeeper.server."
                             "auth.DigestLoginModule required username=\"...\" password=\"...\";' (or --zookeeper "
                             "alone: a ZooKeeper of the cluster's own, with SASL)")
        cluster = LocalCluster(directory, n, base_port=base_port or None,
                               broker_props=_props(args.broker_config),
                               controller_props=_props(args.controller_config), controllers=controllers,
                               zookeeper=args.zookeeper, secure=args.secure)
    else:
        if args.secure and not cluster.secure:
            raise UsageError(f"{directory} holds a cluster that is not secure; `kbroker cluster down --dir "
                             f"{args.dir} --purge` removes it")
        if args.brokers is not None and args.brokers != len(cluster.brokers):
            raise UsageError(f"{directory} holds a cluster of {len(cluster.brokers)} brokers; "
                             f"`kbroker cluster down --dir {args.dir} --purge` removes it")
        if (args.base_port is not None or args.broker_config or args.controller_config or args.zookeeper
                or args.controllers is not None):
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
    if cluster.secure:
        made = prepare_secrets(cluster)
        if made:
            err.print(f"made {', '.join(made)} in {cluster.secrets_dir} (kbroker certs)")
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
    if cluster.secure:
        try:
            created = uvloop.run(ensure_admin(cluster, args.timeout))
        except (KafkaError, OSError, TimeoutError, asyncio.TimeoutError) as exc:
            print(f"kbroker: the admin's SCRAM credential: {exc}", file=sys.stderr)
            print(f"kbroker: `kbroker cluster down --dir {args.dir}` stops what runs", file=sys.stderr)
            return 1
        if created:
            err.print(f"created the SCRAM credentials of {ADMIN_USER} (SCRAM-SHA-256, SCRAM-SHA-512)")
    active = cluster.active_controller() or cluster.controller
    standbys = [c for c in cluster.controllers if c is not active]
    err.print(f"{len(cluster.brokers)} brokers live, controller {active.broker_id} on {active.address}"
              + (f" (standbys {', '.join(str(c.broker_id) for c in standbys)}; ZooKeeper {cluster.zookeeper})"
                 if standbys or cluster.zookeeper else ""))
    if cluster.secure:
        err.print(client_config_text(cluster), soft_wrap=True, highlight=False, markup=False)
    print(cluster.bootstrap)
    return 0


# -- a secure cluster ---------------------------------------------------------------------------

CLIENT_PROPERTIES = "client.properties"
LIBRDKAFKA_PROPERTIES = "client-librdkafka.properties"
ADMIN_MECHANISM = "SCRAM-SHA-512"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def password_file(cluster: LocalCluster) -> Path:
    return cluster.secrets_dir / f"{ADMIN_USER}.password"


def admin_password(cluster: LocalCluster) -> str:
    return password_file(cluster).read_text().strip()


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def prepare_secrets(cluster: LocalCluster) -> list[str]:
    """What a secure cluster reads before it starts, made where missing: the CA and every
    process's and the admin's certificate (``kbroker certs``: DIR/secrets, 0700, keys 0600),
    the admin's password (random, DIR/secrets/admin.password), and the admin's client
    configuration files in DIR. Returns the names of the certificates it made."""
    processes, clients = cluster.certificate_names()
    if cluster.ca_file.exists():
        processes = [n for n in processes if not cluster.keystore(n).exists()]
        clients = [n for n in clients if not cluster.keystore(n).exists()]
    if processes or clients:
        make_certs(cluster.secrets_dir, processes, clients)
    if not password_file(cluster).exists():
        _write_private(password_file(cluster), secrets.token_urlsafe(24) + "\n")
    if cluster.zookeeper_server is not None:
        # The cluster's own ZooKeeper takes SASL sessions only: the controllers' identity, whose
        # password the controllers read from a properties file (-c), never from their command line.
        if not cluster.zookeeper_password_file.exists():
            _write_private(cluster.zookeeper_password_file, secrets.token_urlsafe(24) + "\n")
        zk_password = cluster.zookeeper_password_file.read_text().strip()
        _write_private(cluster.zookeeper_client_file, "# the controllers' SASL identity on the cluster's ZooKeeper\n"
                       f'zookeeper.sasl.jaas.config={ZOOKEEPER_DIGEST_MODULE} required username="{ZOOKEEPER_USER}" '
                       f'password="{zk_password}";\n')
    write_client_config(cluster)
    return processes + clients


def client_properties(cluster: LocalCluster) -> dict[str, str]:
    """The admin's Kafka client properties (``--command-config``; Kafka's Java clients)."""
    password = admin_password(cluster)
    return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": ADMIN_MECHANISM,
            "sasl.jaas.config": f'{SCRAM_LOGIN_MODULE} required username="{ADMIN_USER}" password="{password}";',
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(cluster.ca_file)}


def librdkafka_properties(cluster: LocalCluster) -> dict[str, str]:
    """The same in librdkafka's names (kcat ``-F``, confluent-kafka)."""
    return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": ADMIN_MECHANISM,
            "sasl.username": ADMIN_USER, "sasl.password": admin_password(cluster),
            "ssl.ca.location": str(cluster.ca_file)}


def write_client_config(cluster: LocalCluster) -> None:
    head = "# kbroker cluster up --secure: the admin super user over SASL_SSL ({})\n"
    for name, props, used_by in (
            (CLIENT_PROPERTIES, client_properties(cluster), "kbroker --command-config; Kafka's clients and tools"),
            (LIBRDKAFKA_PROPERTIES, librdkafka_properties(cluster), "librdkafka's names: kcat -F, confluent-kafka")):
        _write_private(cluster.directory / name,
                       head.format(used_by) + "".join(f"{k}={v}\n" for k, v in props.items()))


def client_config_text(cluster: LocalCluster) -> str:
    """What ``up`` prints of a secure cluster: its security, and how clients connect as admin."""
    props = librdkafka_properties(cluster)
    kcat_x = " ".join(f"-X {k}={v}" for k, v in props.items() if k != "bootstrap.servers")
    first = next(iter(cluster.brokers.values())).bootstrap
    return "\n".join([
        f"secure: clients on SASL_SSL ({', '.join(('SCRAM-SHA-256', 'SCRAM-SHA-512'))}) at {cluster.bootstrap}; "
        f"brokers and the controller on mutual TLS ({cluster.internal_bootstrap}); "
        f"ACLs on (StandardAuthorizer, no ACL: no access); super user {ADMIN_USER}",
        f"client config: {cluster.directory / CLIENT_PROPERTIES} (kbroker --command-config, Kafka's clients)",
        f"               {cluster.directory / LIBRDKAFKA_PROPERTIES} (kcat -F, confluent-kafka)",
        f"  kbroker topics list -b {first} --command-config {cluster.directory / CLIENT_PROPERTIES}",
        f"  kcat -F {cluster.directory / LIBRDKAFKA_PROPERTIES} -L",
        f"  kcat -b {cluster.bootstrap} {kcat_x} -L"])


def _admin_network(cluster: LocalCluster) -> Network:
    return Network(ClientSecurity.from_properties(cluster.admin_tls_properties()))


async def ensure_admin(cluster: LocalCluster, timeout_s: float) -> bool:
    """The admin's SCRAM credentials, created (SCRAM-SHA-256 and -512, with the password of
    DIR/secrets) if the controller has none, through AlterUserScramCredentials sent over a
    broker's mutual TLS listener as the admin certificate; then wait until the admin logs in
    with SCRAM on every broker. Whether it created them."""
    deadline = time.monotonic() + timeout_s
    password = admin_password(cluster)
    created = False
    async with KafkaClient(cluster.internal_bootstrap, client_id="kbroker-cluster-up",
                           network=_admin_network(cluster)) as client:
        try:
            await asyncio.wait_for(client.describe_user_scram_credentials([ADMIN_USER]), timeout_s)
        except ResourceNotFoundError:
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                upsert = ScramUpsertion(ADMIN_USER, mechanism, password, DEFAULT_SCRAM_ITERATIONS)
                errors = await asyncio.wait_for(client.alter_user_scram_credentials([upsert]),
                                                max(0.1, deadline - time.monotonic()))
                if errors.get(ADMIN_USER) is not None:
                    raise errors[ADMIN_USER]
            created = True
    security = ClientSecurity.from_properties(client_properties(cluster))
    for b in cluster.brokers.values():
        while True:
            conn = BrokerConnection(b.host, b.port, client_id="kbroker-cluster-up", network=Network(security),
                                    request_timeout_ms=5000)
            try:
                await conn.connect()
                break
            except (KafkaError, OSError) as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{ADMIN_USER} cannot log in on broker {b.broker_id} ({b.bootstrap}) with "
                                       f"the password of {password_file(cluster)}: {exc}") from None
                await asyncio.sleep(0.1)
            finally:
                conn.close()
    return created


def _role(cluster: LocalCluster, p) -> str:
    if p is cluster.zookeeper_server:
        return "zookeeper"
    return "controller" if p in cluster.controllers else "broker"


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
    rest = [c for c in cluster.controllers if c.running]
    if cluster.zookeeper_server is not None and cluster.zookeeper_server.running:
        rest.append(cluster.zookeeper_server)  # last: the controllers need it until they stop
    for p in [*brokers, *rest]:
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
    controller = cluster.active_controller() or cluster.controller
    live = controller.live_brokers() if controller.running else set()
    processes = Table("role", "id", "address", "pid", "process", "state", title=f"Cluster in {directory}")
    for p in cluster.processes:
        running = p.running
        if p is cluster.zookeeper_server:
            state = "serving" if running and p.serving() else "-"
        elif p in cluster.controllers:
            if not (running and port_open(p.port)):
                state = "-"
            elif len(cluster.controllers) == 1:
                state = "listening"
            else:
                state = "active" if p is controller and p.is_active() else "standby"
        else:
            state = "live" if p.broker_id in live else ("fenced or unregistered" if running else "-")
        processes.add_row(_role(cluster, p), str(p.broker_id), p.bootstrap, str(p.pid or "-"),
                          "running" if running else "stopped", state)
    out.print(processes)
    out.print(f"logs: {directory}/<role>-<id>-<port>.out", soft_wrap=True)
    healthy = all(p.running for p in cluster.processes) and live == set(cluster.brokers)
    # A secure cluster's brokers are asked on their mutual TLS listener, as the admin certificate.
    running = [f"{b.host}:{b.probe_port or b.port}" for b in cluster.brokers.values() if b.running]
    if not running:
        out.print("no broker running")
        return 1
    try:
        network = _admin_network(cluster) if cluster.secure else Network()
        md, moving, (moved, to_move) = uvloop.run(_metadata(",".join(running), args.timeout, network))
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
    if moving:
        out.print(f"{len(moving)} partition(s) being reassigned: "
                  + ", ".join(f"{tp.topic}-{tp.partition} (adding {','.join(map(str, m.adding))}; removing "
                              f"{','.join(map(str, m.removing)) or '-'})" for tp, m in sorted(moving.items())[:10])
                  + (" ..." if len(moving) > 10 else ""), soft_wrap=True)
        with Progress(TextColumn("reassignment"), BarColumn(), DownloadColumn(),
                      TextColumn("{task.fields[left]} left"), console=out) as progress:
            progress.add_task("move", total=max(to_move, 1), completed=moved, left=f"{max(to_move - moved, 0):,} B")
    return 0 if healthy and not offline else 1


async def _metadata(bootstrap: str, timeout_s: float, network: Network) -> tuple[ClusterMetadata, dict, tuple[int, int]]:
    """The metadata, the reassignments in progress and (bytes the new replicas hold, bytes
    they must hold); no reassignment figures if the controller does not answer."""
    async with KafkaClient(bootstrap, client_id="kbroker-cluster-status", network=network) as client:
        md = await asyncio.wait_for(client.refresh_metadata(), timeout_s)
        try:
            moving = await asyncio.wait_for(client.list_partition_reassignments(), timeout_s)
            progress = await asyncio.wait_for(moving_bytes(client, moving), timeout_s) if moving else (0, 0)
        except (KafkaError, OSError, TimeoutError, asyncio.TimeoutError):
            moving, progress = {}, (0, 0)
        return md, moving, progress
