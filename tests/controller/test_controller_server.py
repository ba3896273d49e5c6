"""ControllerServer in this process (real sockets): its configuration checks, meta.properties,
and a failed fsync ending ``serve`` with exit status 1."""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import ConfigError, KafkaConfig
from controller.launcher import free_port, port_open
from controller.server import ControllerServer, check_controller_config, serve
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from protocol.errors import ErrorCode
from protocol.fast_codecs import encode_request_header
from protocol.messages import APIS
from storage import fileio

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

        monkeypatch.setattr(fileio, "fsync", broken)
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


async def test_negative_versions_and_unknown_keys_on_the_controller_listener(tmp_path, caplog):
    """Issue 24 §4 on the controller's listener (the same SocketServer, with request metrics of
    its own when serve() runs it): ApiVersions of a version it does not speak is answered
    UNSUPPORTED_VERSION in a v0 body; any other API at a negative version, or an unknown key,
    closes the connection with one line; nothing escapes as a traceback."""
    port = free_port()
    task = asyncio.get_running_loop().create_task(serve(KafkaConfig(props(tmp_path, port))))
    try:
        async with asyncio.timeout(30):
            while not port_open(port):
                await asyncio.sleep(0.02)

        async def exchange(api_key: int, version: int) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                raw = encode_request_header(api_key, version, 9, "bad-client", False)
                writer.write(struct.pack(">i", len(raw)) + raw)
                async with asyncio.timeout(10):
                    return await reader.read(1 << 16)  # b"": closed without an answer
            finally:
                writer.close()

        for version in (-1, -65, -32768):
            answer = await exchange(ApiKey.API_VERSIONS, version)
            body = APIS[ApiKey.API_VERSIONS].response.parse(0, answer, 8)
            assert struct.unpack_from(">i", answer, 4)[0] == 9 and body.error_code == ErrorCode.UNSUPPORTED_VERSION
            assert await exchange(ApiKey.BROKER_HEARTBEAT, version) == b""
        for key in (-100, -1, 1000):
            assert await exchange(key, 0) == b""
        conn = BrokerConnection("127.0.0.1", port)
        await conn.connect()  # the controller still serves
        assert (await conn.request(ApiKey.METADATA, {"topics": None})).cluster_id
        conn.close()
        closes = [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
        assert len(closes) == 6, closes
        assert [r.getMessage() for r in caplog.records if r.exc_info or "Fatal error" in r.getMessage()] == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
