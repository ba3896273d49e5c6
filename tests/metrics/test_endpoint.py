"""The metrics endpoint over real HTTP: /metrics in Prometheus' text format, /health 503 while
starting or shutting down and 200 while serving, in a combined node, a broker process and a
controller process; metrics.enabled=false serves nothing; a port of 0 is logged."""

from __future__ import annotations

import asyncio
import logging
import re
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.config import ConfigError, KafkaConfig
from broker.metrics_endpoint import ProcessMetrics, parse_metrics_listener
from controller.kafka_raft_server import KafkaRaftServer
from controller.launcher import BrokerProcess, ControllerProcess, free_port
from protocol.client import SYSTEM_TIME


def http_get(port: int, path: str, method: str = "GET") -> tuple[int, str, bytes]:
    """A blocking HTTP request (run it in a thread from async tests): (status, content type, body)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


async def aget(port: int, path: str, method: str = "GET") -> tuple[int, str, bytes]:
    return await asyncio.to_thread(http_get, port, path, method)


def names(body: bytes) -> set[str]:
    return {s.name for f in text_string_to_metric_families(body.decode()) for s in f.samples}


def test_parse_metrics_listener():
    assert parse_metrics_listener("http://0.0.0.0:9404") == ("0.0.0.0", 9404)
    assert parse_metrics_listener("http://:0") == ("", 0)
    assert parse_metrics_listener("127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert parse_metrics_listener("http://127.0.0.1:9404/metrics") == ("127.0.0.1", 9404)
    for bad in ("https://h:1", "http://h", "http://h:x", "http://h:1/other"):
        with pytest.raises(ConfigError, match="metrics.listener"):
            parse_metrics_listener(bad)


async def test_health_is_503_until_serving_and_again_while_stopping():
    pm = ProcessMetrics(KafkaConfig({"metrics.listener": "http://127.0.0.1:0"}), SYSTEM_TIME)
    await pm.start()
    try:
        port = pm.port
        assert port
        assert (await aget(port, "/health"))[0] == 503
        pm.serving()
        status, _ctype, body = await aget(port, "/health")
        assert status == 200 and body == b"serving\n"
        status, ctype, body = await aget(port, "/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                "kbroker_event_loop_lag_seconds_count"} <= names(body)
        assert (await aget(port, "/metrics", "HEAD"))[2] == b""
        assert (await aget(port, "/nothing"))[0] == 404
        assert (await aget(port, "/metrics", "POST"))[0] == 405
        pm.stopping()
        assert (await aget(port, "/health"))[0] == 503
    finally:
        await pm.close()


async def test_a_garbage_request_gets_400_and_the_endpoint_keeps_serving():
    pm = ProcessMetrics(KafkaConfig({"metrics.listener": "http://127.0.0.1:0"}), SYSTEM_TIME)
    await pm.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", pm.port)
        writer.write(b"garbage\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 400")
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", pm.port)
        writer.write(b"GET /metr")  # half a request, then the client goes away
        writer.close()
        assert (await aget(pm.port, "/metrics"))[0] == 200
    finally:
        await pm.close()


async def test_a_combined_node_serves_metrics_on_its_event_loop_and_logs_the_port(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="kbroker.metrics")
    node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
                                        "metrics.listener": "http://127.0.0.1:0"}))
    await node.startup()
    try:
        port = node.metrics.port
        assert f"metrics on http://127.0.0.1:{port}/metrics" in caplog.text
        status, _ctype, body = await aget(port, "/health")
        assert status == 200
        status, _ctype, body = await aget(port, "/metrics")
        assert status == 200 and "process_cpu_seconds_total" in names(body)
    finally:
        await node.shutdown()
    with pytest.raises(OSError):  # closed with the node
        http_get(port, "/health")


async def test_metrics_disabled_serves_nothing(tmp_path):
    port = free_port()
    node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
                                        "metrics.enabled": "false", "metrics.listener": f"http://127.0.0.1:{port}"}))
    await node.startup()
    try:
        assert node.metrics.port is None
        with pytest.raises(OSError):
            await aget(port, "/metrics")
    finally:
        await node.shutdown()


async def test_a_listener_in_use_is_a_config_error(tmp_path):
    pm = ProcessMetrics(KafkaConfig({"metrics.listener": "http://127.0.0.1:0"}), SYSTEM_TIME)
    await pm.start()
    try:
        node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
                                            "metrics.listener": f"http://127.0.0.1:{pm.port}"}))
        with pytest.raises(ConfigError, match="metrics.listener: cannot listen"):
            await node.startup()
        await node.shutdown()
    finally:
        await pm.close()


def test_broker_and_controller_processes_serve_metrics_and_health(tmp_path):
    controller = ControllerProcess(tmp_path / "c", overrides={"metrics.listener": f"http://127.0.0.1:{free_port()}"})
    controller.start()
    broker = None
    try:
        cport = int(re.search(r":(\d+)$", controller.overrides["metrics.listener"]).group(1))
        assert http_get(cport, "/health")[0] == 200
        assert "process_cpu_seconds_total" in names(http_get(cport, "/metrics")[2])
        bport = free_port()
        broker = BrokerProcess(tmp_path / "b", broker_id=1, overrides={
            "process.roles": "broker", "node.id": 1, "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": controller.address, "metrics.listener": f"http://127.0.0.1:{bport}"})
        broker.start()
        assert http_get(bport, "/health")[0] == 200
        assert "process_cpu_seconds_total" in names(http_get(bport, "/metrics")[2])
    finally:
        if broker is not None:
            broker.stop()
        controller.stop()
