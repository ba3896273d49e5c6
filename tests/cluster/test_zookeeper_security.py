"""The standby controllers' ZooKeeper store with SASL (DIGEST-MD5) and ACLs (issue 25 §4):
controllers authenticate with zookeeper.sasl.jaas.config, and with zookeeper.set.acl=true
every znode they create is readable and writable by that identity alone (the store holds
SCRAM credentials and ACLs): another client reads nothing; a wrong password stops the
controller at start."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from controller.launcher import BrokerProcess, ControllerProcess, ZooKeeperProcess, free_port, zookeeper_available
from controller.zookeeper_store import CONTROLLER_EPOCH_PATH, LOG_PATH

pytestmark = pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper is not installed (make test-deps)")

JAAS = 'org.apache.zookeeper.server.auth.DigestLoginModule required username="kbroker" password="{}";'


def test_controllers_authenticate_to_zookeeper_and_their_znodes_are_theirs_alone(tmp_path):
    zk = ZooKeeperProcess(tmp_path / "zk", sasl_users={"kbroker": "zk-secret"}).start()
    connect = f"{zk.address}/secure"
    props = {"controller.metadata.store": "zookeeper", "zookeeper.connect": connect, "zookeeper.set.acl": "true",
             "zookeeper.sasl.jaas.config": JAAS.format("zk-secret"), "zookeeper.session.timeout.ms": "4000"}
    controller = ControllerProcess(tmp_path / "controller", free_port(), 3000, props, await_active=True)
    broker = BrokerProcess(tmp_path / "broker", free_port(), 1, {
        "process.roles": "broker", "node.id": 1, "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": controller.address})
    try:
        controller.start(60)
        broker.start(60)  # registered: the controller wrote to ZooKeeper as kbroker
        stranger = KazooClient(hosts=zk.address)
        stranger.start(10)
        try:
            for path in ("/secure", f"/secure{CONTROLLER_EPOCH_PATH}", f"/secure{LOG_PATH}"):
                with pytest.raises(NoAuthError):
                    stranger.get(path)
                with pytest.raises(NoAuthError):
                    stranger.set(path, b"x")
        finally:
            stranger.stop()
        owner = KazooClient(hosts=zk.address, sasl_options={"mechanism": "DIGEST-MD5", "username": "kbroker",
                                                            "password": "zk-secret"})
        owner.start(10)
        try:
            batches = owner.get_children(f"/secure{LOG_PATH}")
            assert batches
            for path in (f"/secure{CONTROLLER_EPOCH_PATH}", f"/secure{LOG_PATH}/{batches[0]}"):
                acls, _ = owner.get_acls(path)
                assert [(a.id.scheme, a.id.id, a.perms) for a in acls] == [("sasl", "kbroker", 31)]
        finally:
            owner.stop()
        broker.stop()
        controller.stop()
        wrong = ControllerProcess(tmp_path / "controller-2", free_port(), 3001,
                                  {**props, "zookeeper.sasl.jaas.config": JAAS.format("wrong"),
                                   "zookeeper.connection.timeout.ms": "5000"})
        wrong.launch()
        assert wrong.proc.wait(60) != 0
        assert "auth" in wrong.log_text().lower()
    finally:
        broker.kill()
        controller.kill()
        zk.stop() if hasattr(zk, "stop") else zk.kill()
