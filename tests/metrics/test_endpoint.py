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


async def test_a_served_node_counts_requests_by_api_and_times_a_long_poll(tmp_path):
    """Real clients against a combined node: kcat produces (messages in, Produce requests,
    bytes on the listener), a Fetch long-poll on an empty partition spends its max wait in
    the purgatory (remote time), and promtool accepts the page."""
    import shutil
    import subprocess

    from protocol.client import KafkaClient
    from protocol.fast_codecs import FetchPartition, FetchRequest

    node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
                                        "metrics.listener": "http://127.0.0.1:0"}))
    await node.startup()
    try:
        bootstrap = f"127.0.0.1:{node.bound_port()}"
        async with KafkaClient(bootstrap) as client:
            await client.create_topics([("m", 1, 1, None)])
            lines = "".join(f"record-{i}\n" for i in range(10)).encode()
            proc = await asyncio.create_subprocess_exec("kcat", "-b", bootstrap, "-P", "-t", "m", "-p", "0",
                                                        stdin=subprocess.PIPE)
            await proc.communicate(lines)
            assert proc.returncode == 0
            conn = await client.leader_connection("m", 0)
            request = FetchRequest(11, -1, 300, 1, 1 << 20, 0, 0, -1, [("m", [FetchPartition(0, -1, 10, -1, 1 << 20)])],
                                   [], "")
            await conn.fetch(request)
        status, _ctype, body = await aget(node.metrics.port, "/metrics")
        assert status == 200
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(body.decode()) for s in f.samples}

        def v(name, **labels):
            return samples.get((name, tuple(sorted(labels.items()))), 0)

        assert v("kafka_server_brokertopicmetrics_messagesin_total", topic="m") == 10
        assert v("kafka_server_brokertopicmetrics_bytesin_total", topic="m") > 10 * len("record-0")
        produces = sum(val for (name, labels), val in samples.items()
                       if name == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in labels)
        assert produces >= 1
        assert v("kafka_network_requestmetrics_requests_total", request="Fetch", version="11") >= 1
        assert v("kafka_network_requestmetrics_remotetime_seconds_sum", request="Fetch") >= 0.25
        assert v("kafka_network_requestmetrics_totaltime_seconds_count", request="Metadata") >= 1
        assert v("kafka_server_socket_server_metrics_incoming_byte_total", listener="PLAINTEXT") > 0
        assert v("kafka_server_socket_server_metrics_connection_creation_total", listener="PLAINTEXT") >= 2
        assert v("kafka_log_log_logendoffset", topic="m", partition="0") == 10
        assert v("kafka_server_replicamanager_leadercount") >= 1
        assert shutil.which("promtool"), "make test-deps installs Debian's prometheus (promtool)"
        check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        await node.shutdown()


def test_the_controller_process_reports_brokers_partitions_and_its_event_queue(tmp_path):
    """A controller process and two brokers: the controller's page counts them, the topic's
    partitions and its events; a broker killed -9 becomes fenced once its session expires."""
    from controller.launcher import LocalCluster
    from tests.support import wait_until

    cluster = LocalCluster(tmp_path, brokers=2, metrics=True, broker_props={"broker.session.timeout.ms": 2000,
                                                                             "broker.heartbeat.interval.ms": 200})
    cluster.start()
    try:
        import subprocess
        assert subprocess.run(["kcat", "-b", cluster.bootstrap, "-L"], capture_output=True).returncode == 0
        port = cluster.controller.metrics_port

        def sample(name, **labels):
            for f in text_string_to_metric_families(http_get(port, "/metrics")[2].decode()):
                for s in f.samples:
                    if s.name == name and s.labels == labels:
                        return s.value
            return None

        assert sample("kafka_controller_kafkacontroller_activecontrollercount") == 1
        assert sample("kafka_controller_kafkacontroller_activebrokercount") == 2
        assert sample("kafka_controller_kafkacontroller_fencedbrokercount") == 0
        assert sample("kafka_controller_controllereventmanager_eventqueuetime_seconds_count") > 0
        assert sample("kafka_controller_kafkacontroller_metadatalogsize_bytes") > 0
        # a controller alone keeps its own request metrics
        assert sample("kafka_network_requestmetrics_requests_total", request="BrokerHeartbeat", version="1") > 0
        assert sample("kafka_network_requestmetrics_totaltime_seconds_count", request="BrokerRegistration") >= 2
        assert sample("kafka_server_socket_server_metrics_connections", listener="CONTROLLER") >= 2
        cluster.brokers[2].kill()
        wait_until(lambda: sample("kafka_controller_kafkacontroller_fencedbrokercount") == 1, 20,
                   what="broker 2 fenced")
        assert sample("kafka_controller_kafkacontroller_activebrokercount") == 1
        for target in cluster.metrics_targets[:2]:
            body = http_get(int(target.rsplit(":", 1)[1]), "/metrics")[2]
            check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
            assert check.returncode == 0, check.stderr
    finally:
        cluster.kill()


async def test_the_page_rendered_a_family_at_a_time_is_generate_latests_page():
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    from broker.metrics_endpoint import render

    registry = CollectorRegistry()
    Counter("c", "a counter", ["a"], registry=registry).labels("x").inc(3)
    Gauge("g", "a gauge", registry=registry).set(2)
    Histogram("h", "a histogram", registry=registry).observe(0.3)
    assert await render(registry) == generate_latest(registry)


async def test_kbroker_metadata_shows_each_endpoints_health(tmp_path):
    """The client side (protocol.client.metrics) reads a live node's endpoint, and ``kbroker
    metadata --metrics`` shows it next to an endpoint nobody listens on."""
    import os
    import sys
    from pathlib import Path

    from protocol.client.metrics import read_endpoint, summary

    node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
                                        "metrics.listener": "http://127.0.0.1:0"}))
    await node.startup()
    try:
        address = f"127.0.0.1:{node.metrics.port}"
        status = await read_endpoint(address)
        assert status.serving and status.health == "serving"
        s = summary(status)
        assert s["active_controller"] == 1 and s["fenced_brokers"] == 0 and s["under_replicated"] == 0
        assert s["partitions"] == 0 and s["event_loop_lag_p99_s"] is not None
        dead = f"127.0.0.1:{free_port()}"
        assert not (await read_endpoint(dead)).serving
        kbroker = str(Path(sys.executable).with_name("kbroker"))
        proc = await asyncio.create_subprocess_exec(
            kbroker, "metadata", "-b", f"127.0.0.1:{node.bound_port()}", "--metrics", address, "--metrics", dead,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(os.environ, COLUMNS="250"))
        out, err = await proc.communicate()
        assert proc.returncode == 0, err
        text = out.decode()
        assert re.search(rf"│ {address}\s+│ serving\s+│ 0\s+│ 0\s+│ 0\s+│ 0\s+│ 1\s+│ 0\s+│ 0\s+│ ≤ [\d.]+ ms", text), text
        assert re.search(rf"│ {dead}\s+│ unreachable", text), text
    finally:
        await node.shutdown()
