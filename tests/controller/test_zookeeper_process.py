"""ZooKeeper as a real process (Debian's package) and the controller's ZooKeeper keys."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from broker.config import ConfigError, KafkaConfig
from controller.launcher import ZooKeeperEnsemble, four_letter_word
from controller.zk_connect import parse_zookeeper_connect

pytestmark = pytest.mark.timeout(120)


def test_zookeeper_keys_have_kafkas_defaults():
    config = KafkaConfig.load(None, [])
    assert config["controller.metadata.store"] == "local"
    assert config["zookeeper.session.timeout.ms"] == 18000
    assert config["zookeeper.connect"] is None
    config = KafkaConfig.load(None, ["controller.metadata.store=zookeeper", "zookeeper.connect=a:2181,b:2182/kb",
                                     "zookeeper.session.timeout.ms=4000"])
    assert config["controller.metadata.store"] == "zookeeper" and config["zookeeper.session.timeout.ms"] == 4000
    with pytest.raises(ConfigError, match="controller.metadata.store"):
        KafkaConfig.load(None, ["controller.metadata.store=etcd"])


@pytest.mark.parametrize("value, expected", [
    ("127.0.0.1:2181", ("127.0.0.1:2181", "")),
    ("a:1,b:2", ("a:1,b:2", "")),
    ("a:1, b:2/kafka/one", ("a:1,b:2", "/kafka/one")),
    ("a:1/", ("a:1", "")),
])
def test_zookeeper_connect_parses(value, expected):
    assert parse_zookeeper_connect(value) == expected


@pytest.mark.parametrize("value", [None, "", "a", "a:x", ":2181", "a:70000", "a:1//x"])
def test_bad_zookeeper_connect_names_the_key(value):
    with pytest.raises(ConfigError, match="zookeeper.connect"):
        parse_zookeeper_connect(value)


def test_standalone_zookeeper_serves_and_restarts_with_its_data(tmp_path):
    ensemble = ZooKeeperEnsemble(tmp_path, 1).start()
    try:
        assert "Mode: standalone" in four_letter_word(ensemble.servers[0].client_port)
        zk = KazooClient(hosts=ensemble.connect)
        zk.start(timeout=15)
        zk.create("/kept", b"value")
        zk.stop()
        ensemble.stop()
        ensemble.start()
        zk = KazooClient(hosts=ensemble.connect)
        zk.start(timeout=15)
        assert zk.get("/kept")[0] == b"value"
        zk.stop()
    finally:
        ensemble.kill()


def test_three_node_ensemble_keeps_serving_without_one_node(tmp_path):
    ensemble = ZooKeeperEnsemble(tmp_path, 3).start()
    try:
        modes = sorted(four_letter_word(s.client_port).split("Mode: ")[1].split()[0] for s in ensemble.servers)
        assert modes == ["follower", "follower", "leader"]
        leader = next(s for s in ensemble.servers if "Mode: leader" in four_letter_word(s.client_port))
        zk = KazooClient(hosts=ensemble.connect)
        zk.start(timeout=15)
        zk.create("/before", b"1")
        leader.kill()
        # The two left elect a leader; the request is retried (on another server) until then.
        KazooRetry(max_tries=-1, deadline=30, max_delay=0.5)(zk.create, "/after", b"2")
        assert zk.get("/before")[0] == b"1" and zk.get("/after")[0] == b"2"
        zk.stop()
    finally:
        ensemble.kill()
