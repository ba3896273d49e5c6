"""``kbroker storage format|random-uuid``: Kafka's ``kafka-storage`` for kbroker's directories.

    kbroker storage random-uuid
    kbroker storage format -c controller.properties -t CLUSTER_ID \\
        [--add-scram 'SCRAM-SHA-512=[name=broker,password=broker-secret]' ...] [--ignore-formatted]

``format`` writes, before a node's first start, what Kafka's StorageTool writes: in each of
its directories (a controller's ``metadata.log.dir``; a broker's ``log.dirs``) a
``meta.properties`` naming the node and the cluster, and in ``metadata.log.dir`` the bootstrap
metadata, ``bootstrap.checkpoint`` (broker/security/bootstrap.py): metadata.version and one
UserScramCredentialRecord per ``--add-scram`` (KIP-900). The controller appends them to its
metadata log at its first start, so SCRAM credentials exist from the cluster's first second:
the inter-broker and controller listeners can run SCRAM. Format every node with the same
cluster id and the same ``--add-scram``: a broker checks logins against its own copy until the
controller's metadata arrives (kbroker's controller connects to brokers, see bootstrap.py).

A directory that holds a meta.properties is formatted already: refused, or skipped with
``--ignore-formatted``. Unlike Kafka, formatting is optional in kbroker: a node that finds no
meta.properties writes one at its first start (a controller with a new cluster id, a broker
with the controller's).

A server-side command (it reads the server configuration): like ``serve``, it imports broker/
and controller/.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import sys
import time
import uuid
from pathlib import Path

from broker.config import ConfigError, KafkaConfig, read_properties
from broker.security.bootstrap import (FormatterError, bootstrap_records, parse_scram_argument, write_bootstrap)
from cli.common import UsageError
from controller.quorum_controller import METADATA_VERSION
from storage.checkpoint import write_atomically

META_PROPERTIES = "meta.properties"
# Kafka's name of the metadata.version this controller writes (feature level 7).
METADATA_VERSION_NAME = "3.3-IV3"


def random_uuid(args: argparse.Namespace) -> int:
    """Kafka's ``kafka-storage random-uuid``: a cluster id (a random UUID, base64url, 22 characters)."""
    print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))
    return 0


def check_cluster_id(cluster_id: str) -> None:
    """Kafka's Uuid.fromString: base64url without padding, 16 bytes."""
    try:
        raw = base64.urlsafe_b64decode(cluster_id + "=" * (-len(cluster_id) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(cluster_id) != 22 or len(raw) != 16:
        raise UsageError(f"--cluster-id: {cluster_id!r} is not a cluster id (a UUID in base64url, 22 characters: "
                         "`kbroker storage random-uuid` makes one)")


def directories(config: KafkaConfig) -> list[tuple[Path, str]]:
    """(directory, what) to format: metadata.log.dir (the bootstrap metadata's; a controller's
    metadata log, a broker's first log dir unless set), then a broker's other log.dirs."""
    out: list[tuple[Path, str]] = [(config.metadata_log_dir, "metadata directory")]
    if "broker" in config.process_roles:
        out += [(d, "data directory") for d in config.log_dirs if d != config.metadata_log_dir]
    return out


def format_storage(args: argparse.Namespace) -> int:
    try:
        config = KafkaConfig.load(args.config, args.override)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    node_id = config.node_id
    if node_id is None or node_id < 0:
        raise UsageError("node.id: you must specify a valid non-negative node ID")
    check_cluster_id(args.cluster_id)
    try:
        scram = [parse_scram_argument(a) for a in args.add_scram]
    except FormatterError as exc:
        raise UsageError(f"--add-scram: {exc}") from None
    metadata_dir = config.metadata_log_dir
    todo: list[tuple[Path, str]] = []
    for directory, what in directories(config):
        meta = directory / META_PROPERTIES
        if meta.exists():
            props = read_properties(meta)
            if not args.ignore_formatted:
                print(f"kbroker: Log directory {directory} is already formatted. Use --ignore-formatted to ignore "
                      "this directory and format the others.", file=sys.stderr)
                return 1
            if props.get("cluster.id") not in (None, args.cluster_id):
                print(f"kbroker: {meta} belongs to cluster {props.get('cluster.id')}, not {args.cluster_id}",
                      file=sys.stderr)
                return 1
            continue
        todo.append((directory, what))
    if not todo:
        print("All of the log directories are already formatted.")
        return 0
    records = bootstrap_records(scram, METADATA_VERSION)
    for directory, what in todo:
        directory.mkdir(parents=True, exist_ok=True)
        extra = ""
        if directory == metadata_dir:
            write_bootstrap(directory, records, int(time.time() * 1000))
            users = sorted({r.name for r in scram})
            extra = f" (SCRAM credentials of {', '.join(users)})" if users else ""
        text = f"#kbroker meta.properties\nversion=1\nnode.id={node_id}\ncluster.id={args.cluster_id}\n"
        write_atomically(directory / META_PROPERTIES, text.encode())
        print(f"Formatting {what} {directory} with metadata.version {METADATA_VERSION_NAME}{extra}.")
    return 0
