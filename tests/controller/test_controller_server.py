"""ControllerServer in this process (real sockets): its configuration checks, meta.properties,
and a failed fsync ending ``serve`` with exit status 1."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import ConfigError, KafkaConfig
from controller.launcher import free_port, port_open
from controller.server import ControllerServer, check_controller_config, serve
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection

from .recording_broker import RecordingBroker

REPO = Path(__file__).resolve().parents[2]


def props(tmp_path, port, **extra):
    return {"process.roles": "controller", "node.id": "7", "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER", "metadata.log.dir": str(tmp_path / "meta"), **extra}


@pytest.mark.parametrize("change,fragment", [
    ({"process.roles": "broker"}, "does not include controller"),
    ({"controller.listener.names": ""}, "controller.listener.names"),
    ({"controller.listener.names": "OTHER"}, "OTHER not in listeners"),
    ({"node.id": "-1"}, "node.id"),
])
def test_configuration_checks(tmp_path, change, fragment):
    with pytest.raises(ConfigError, match=fragment):
        check_controller_config(KafkaConfig({**props(tmp_path, 9093), **change}))


def test_the_process_exits_2_on_a_bad_configuration(tmp_path):
    result = subprocess.run([sys.executable, "-m", "controller", "--override", "process.roles=broker"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "does not include controller" in result.stderr


async def test_meta_properties_keeps_the_cluster_id_and_refuses_another_node(tmp_path):
    port = free_port()
    server = ControllerServer(KafkaConfig(props(tmp_path, port)))
    await server.startup()
    cluster_id = server.cluster_id
    await server.shutdown()
    again = ControllerServer(KafkaConfig(props(tmp_path, port)))
    await again.startup()
    assert again.cluster_id == cluster_id
    await again.shutdown()
    other = ControllerServer(KafkaConfig(props(tmp_path, port, **{"node.id": "8"})))
    with pytest.raises(ConfigError, match="belongs to node 7"):
        await other.startup()


async def test_a_failed_fsync_stops_the_controller_with_status_1(tmp_path, monkeypatch):
    port = free_port()
    task = asyncio.get_running_loop().create_task(serve(KafkaConfig(props(tmp_path, port))))
    broker = await RecordingBroker(1).start()
    try:
        async with asyncio.timeout(30):
            while not port_open(port):
                await asyncio.sleep(0.02)
        conn = BrokerConnection("127.0.0.1", port)
        await conn.connect()
        cluster_id = (await conn.request(ApiKey.METADATA, {"topics": None})).cluster_id

        def broken(fd):
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fsync", broken)
        await broker.connect("127.0.0.1", port)
        with pytest.raises(Exception):
            await broker.register(cluster_id)   # never answered: the connection closes
        async with asyncio.timeout(30):
            assert await task == 1
    finally:
        monkeypatch.undo()
        await broker.close()
        if not task.done():
            task.cancel()
