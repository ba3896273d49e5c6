"""KafkaRaftServer: a process with the roles process.roles names. A combined node registers with
its own controller over the controller's listener, as a broker in another process does — so a
broker-only node pointed at the same controller joins the same cluster; a combined node without
node.id keeps the id its data says; a broker whose controller never answers listens, is not
live, and still stops at once on SIGTERM."""

from __future__ import annotations

import signal

from broker.config import KafkaConfig
from controller.kafka_raft_server import KafkaRaftServer
from controller.launcher import BrokerProcess, live_brokers, port_open
from protocol.client import KafkaClient
from tests.support import free_port, wait_until


def combined(data, **extra) -> KafkaConfig:
    return KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data), **extra})


async def test_a_combined_node_and_a_broker_registered_with_its_controller_form_one_cluster(tmp_path):
    first = KafkaRaftServer(combined(tmp_path / "a"))
    await first.startup()
    second = None
    try:
        assert first.config.node_id == 1001  # no node.id: Kafka's first generated id
        controller_port = first.controller.bound_port("CONTROLLER")
        assert first.broker.controller_servers == [("127.0.0.1", controller_port)]
        second = KafkaRaftServer(KafkaConfig({
            "process.roles": "broker", "node.id": "7", "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path / "b"), "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}"}))
        await second.startup()
        assert second.controller is None and second.broker.cluster_id == first.controller.cluster_id
        async with KafkaClient(f"127.0.0.1:{first.bound_port()}") as client:
            await client.create_topics([("two", 2, 2, None)])
            md = await client.refresh_metadata(["two"])
            assert sorted(md.brokers) == [7, 1001] and md.controller_id == 1001
            assert all(sorted(p.replicas) == [7, 1001] for p in md.topics["two"].partitions.values())
    finally:
        if second is not None:
            await second.shutdown()
        await first.shutdown()
    # Restarted without node.id: the same node, the same topic.
    again = KafkaRaftServer(combined(tmp_path / "a"))
    await again.startup()
    try:
        assert again.config.node_id == 1001
        assert again.broker.metadata_cache.contains_topic("two")
    finally:
        await again.shutdown()


async def test_a_combined_node_without_node_id_keeps_the_id_its_data_says(tmp_path):
    node = KafkaRaftServer(combined(tmp_path, **{"node.id": "42"}))
    await node.startup()
    await node.shutdown()
    again = KafkaRaftServer(combined(tmp_path))
    await again.startup()
    try:
        assert again.config.node_id == again.broker.broker_id == again.controller.node_id == 42
    finally:
        await again.shutdown()


def test_a_broker_whose_controller_never_answers_stops_on_sigterm(tmp_path):
    broker = BrokerProcess(tmp_path / "data", broker_id=5, overrides={
        "process.roles": "broker", "controller.quorum.bootstrap.servers": f"127.0.0.1:{free_port()}",
        "broker.heartbeat.interval.ms": 200})
    broker.launch()
    try:
        wait_until(lambda: port_open(broker.port), what="the broker to listen")
        assert live_brokers(broker.port) == set()  # listening, not registered: not live
        broker.signal(signal.SIGTERM)
        assert broker.proc.wait(30) == 0
    finally:
        broker.kill()
    assert "no answer from the controller" in broker.log_text()


# A combined node's controller listener on port 0 binds before the broker's listeners: once
# the kernel handed it the broker's configured port and the broker could not start (CI,
# tests/robustness/test_descriptors.py). Run in a network namespace of its own whose
# ephemeral range is two ports while the controller binds (widened afterwards for the
# broker's own connections), the broker's the upper one: Linux's bind() to port 0 takes the
# upper of two free ports here, so without the fix the controller takes it every time.
NAMESPACED_STARTS = r"""
import asyncio, subprocess, sys
from broker.config import KafkaConfig
from controller import server
from controller.kafka_raft_server import KafkaRaftServer

def ephemeral_ports(first, last):
    with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
        f.write(f"{first} {last}")

controller_startup = server.ControllerServer.startup

async def startup(self):
    ephemeral_ports(40001, 40002)
    await controller_startup(self)
    ephemeral_ports(41000, 42000)

server.ControllerServer.startup = startup
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

async def main(data):
    for attempt in range(3):
        node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:40002,CONTROLLER://127.0.0.1:0",
                                            "log.dirs": f"{data}/{attempt}"}))
        await node.startup()
        try:
            assert node.bound_port("PLAINTEXT") == 40002
            assert node.bound_port("CONTROLLER") == 40001, node.bound_port("CONTROLLER")
        finally:
            await node.shutdown()
    print("ok")

asyncio.run(main(sys.argv[1]))
"""


def test_a_combined_nodes_controller_listener_on_port_0_never_takes_the_brokers_port(tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if shutil.which("unshare") is None or shutil.which("ip") is None:
        raise AssertionError("unshare and ip (util-linux, iproute2) are needed: make test-deps installs them")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(["unshare", "-n", sys.executable, "-c", NAMESPACED_STARTS, str(tmp_path)], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout[-2000:] + done.stderr[-4000:]
