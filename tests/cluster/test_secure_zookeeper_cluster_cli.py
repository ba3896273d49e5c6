"""``kbroker cluster up --secure --zookeeper`` (issue 25 §4): the secure cluster with standby
controllers on a ZooKeeper of its own that takes SASL (DIGEST-MD5) sessions only. The
controllers' identity comes from a 0600 properties file, never their command line; every znode
they make is theirs alone (zookeeper.set.acl); a stranger gets no session at all. kill -9 of the
active controller: a standby takes over, and the admin still creates topics and round-trips
records with kcat over SASL_SSL; ``down --purge`` stops and removes everything."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import SessionClosedRequireSaslError

from controller.launcher import LocalCluster, pid_alive, zookeeper_available
from controller.zookeeper_store import CONTROLLER_EPOCH_PATH

from .test_cluster_cli import FAST, kbroker, wait_until

pytestmark = [pytest.mark.timeout(420),
              pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper is not installed")]


def kill_all(directory: Path) -> None:
    if not (directory / "cluster.json").exists():
        return
    s = json.loads((directory / "cluster.json").read_text())
    zk = s.get("zookeeper_server") or {}
    for p in [*s["controllers"], *s["brokers"]]:
        if pid_alive(p["pid"], p["data_dir"]):
            os.kill(p["pid"], signal.SIGKILL)
    if zk.get("pid"):
        try:
            with open(f"/proc/{zk['pid']}/cmdline", "rb") as f:
                if str(directory).encode() in f.read():
                    os.kill(zk["pid"], signal.SIGKILL)
        except OSError:
            pass


def test_secure_cluster_with_standby_controllers_on_a_sasl_zookeeper(tmp_path):
    directory = tmp_path / "cluster"
    try:
        up = kbroker("cluster", "up", "--secure", "--zookeeper", "--controllers", "2", "-n", "2", "--dir",
                     str(directory), "--base-port", "0", *FAST, "--controller-config", "zookeeper.session.timeout.ms=3000",
                     timeout=300)
        assert up.returncode == 0, up.stderr
        s = json.loads((directory / "cluster.json").read_text())
        assert s["secure"] and s["zookeeper"] == "start" and len(s["controllers"]) == 2
        secrets = directory / "secrets"
        password = (secrets / "zookeeper.password").read_text().strip()
        for name in ("zookeeper.password", "controller-zookeeper.properties"):
            assert stat.S_IMODE(os.stat(secrets / name).st_mode) == 0o600, name
        assert stat.S_IMODE(os.stat(directory / "zookeeper" / "conf" / "jaas.conf").st_mode) == 0o600
        for c in s["controllers"]:  # the password is in the file the controllers read, not on their command line
            with open(f"/proc/{c['pid']}/cmdline", "rb") as f:
                cmdline = f.read()
            assert password.encode() not in cmdline and b"controller-zookeeper.properties" in cmdline
        zk = f"127.0.0.1:{s['zookeeper_server']['port']}"
        # a stranger gets no session; the controllers' identity finds its znodes, with ACLs of its own
        stranger = KazooClient(hosts=zk)
        stranger.start(10)
        try:
            with pytest.raises(SessionClosedRequireSaslError):
                stranger.get_children("/")
        finally:
            stranger.stop()
        owner = KazooClient(hosts=zk, sasl_options={"mechanism": "DIGEST-MD5", "username": "kbroker",
                                                    "password": password})
        owner.start(10)
        try:
            acls, _ = owner.get_acls(f"/kbroker{CONTROLLER_EPOCH_PATH}")
            assert [(a.id.scheme, a.id.id) for a in acls] == [("sasl", "kbroker")]
        finally:
            owner.stop()
        # the active controller killed: the standby takes over
        cluster = LocalCluster.load(directory)  # asks the controllers over TLS, as the admin certificate
        active = cluster.wait_active_controller(30)
        os.kill(active.pid, signal.SIGKILL)
        standby = wait_until(lambda: cluster.active_controller(), 60, "the standby controller active")
        assert standby is not active
        first = up.stdout.strip().split(",")[0]
        created = kbroker("topics", "create", "-b", first, "--command-config", str(directory / "client.properties"),
                          "-t", "after-failover", "--replication-factor", "2")
        assert created.returncode == 0, created.stderr
        conf = str(directory / "client-librdkafka.properties")
        data = "".join(f"r{i}\n" for i in range(20))
        produced = subprocess.run(["kcat", "-F", conf, "-P", "-t", "after-failover", "-X", "acks=all"], input=data,
                                  text=True, capture_output=True, timeout=60)
        assert produced.returncode == 0, produced.stderr
        read = subprocess.run(["kcat", "-F", conf, "-C", "-t", "after-failover", "-e", "-q"], text=True,
                              capture_output=True, timeout=60)
        assert sorted(read.stdout.splitlines()) == sorted(data.splitlines()), read.stderr
        down = kbroker("cluster", "down", "--dir", str(directory), "--purge", timeout=180)
        assert down.returncode == 0, down.stderr
        assert not directory.exists()
    finally:
        kill_all(directory)
