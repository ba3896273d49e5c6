"""SocketServer's metrics on a MockTime through a mock transport (as tests/broker/test_network.py
drives it): the phases of a request as RequestMetrics splits them, sizes, connections, bytes
and time paused by flow control; and none of it when metrics are off."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from broker.metrics import RequestMetrics
from broker.network import KafkaConnection, SocketServer
from protocol.clock import MockTime
from tests.broker.test_network import FakeApis, MockTransport, request

MS = 1_000_000


def make(max_inflight=10):
    time = MockTime()
    metrics = RequestMetrics()
    server = SocketServer(FakeApis(), max_request_size=1 << 20, max_inflight=max_inflight, metrics=metrics,
                          now=time.nanoseconds)
    conn = KafkaConnection(server, "PLAINTEXT")
    transport = MockTransport()
    conn.connection_made(transport)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    registry.register(server)
    return time, conn, server.dispatcher, transport, registry


def v(registry, name, **labels):
    return registry.get_sample_value(name, labels)


def test_a_parked_request_spends_remote_time_and_one_behind_it_waits_to_be_sent():
    time, conn, apis, transport, registry = make()
    conn.data_received(request(3, 1) + request(3, 2, b"x" * 200))  # two Metadata requests in one read
    assert len(apis.contexts) == 2
    time.sleep(500)  # the first is answered 500 ms later (as if parked in a purgatory) ...
    apis.contexts[1].send_response(b"\x00\x00\x00\x04abcd")  # ... the second at once: it waits for the first
    time.sleep(500)
    apis.contexts[0].send_response(b"\x00\x00\x00\x02ab")
    assert transport.written == [b"\x00\x00\x00\x02ab", b"\x00\x00\x00\x04abcd"]
    assert v(registry, "kafka_network_requestmetrics_requests_total", request="Metadata", version="0") == 2
    assert v(registry, "kafka_network_requestmetrics_totaltime_seconds_count", request="Metadata") == 2
    assert v(registry, "kafka_network_requestmetrics_totaltime_seconds_sum", request="Metadata") == 2.0
    assert v(registry, "kafka_network_requestmetrics_remotetime_seconds_sum", request="Metadata") == 1.5
    assert v(registry, "kafka_network_requestmetrics_responsesendtime_seconds_sum", request="Metadata") == 0.5
    assert v(registry, "kafka_network_requestmetrics_localtime_seconds_sum", request="Metadata") == 0
    assert v(registry, "kafka_network_requestmetrics_responsebytes_total", request="Metadata") == 14
    assert v(registry, "kafka_network_requestmetrics_requestbytes_sum", request="Metadata") == \
        len(request(3, 1)) + len(request(3, 2, b"x" * 200))
    assert v(registry, "kafka_server_socket_server_metrics_incoming_byte_total", listener="PLAINTEXT") == \
        len(request(3, 1)) + len(request(3, 2, b"x" * 200))
    assert v(registry, "kafka_server_socket_server_metrics_outgoing_byte_total", listener="PLAINTEXT") == 14
    assert v(registry, "kafka_server_socket_server_metrics_connections", listener="PLAINTEXT") == 1
    assert v(registry, "kafka_server_socket_server_metrics_connection_creation_total", listener="PLAINTEXT") == 1


def test_time_paused_by_flow_control_is_counted():
    time, conn, apis, transport, registry = make(max_inflight=1)
    conn.data_received(request(3, 1))
    assert transport.paused
    time.sleep(250)
    apis.contexts[0].send_response(b"\x00\x00\x00\x00")
    assert not transport.paused
    assert v(registry, "kbroker_network_read_paused_seconds_total", listener="PLAINTEXT") == 0.25
    conn.data_received(request(3, 2))
    time.sleep(100)
    conn.connection_lost(None)  # closed while paused: counted up to the close
    assert v(registry, "kbroker_network_read_paused_seconds_total", listener="PLAINTEXT") == 0.35
    assert v(registry, "kafka_server_socket_server_metrics_connection_close_total", listener="PLAINTEXT") == 1


def test_metrics_off_keeps_no_clock_readings():
    server = SocketServer(FakeApis(), max_request_size=1 << 20, max_inflight=10)
    conn = KafkaConnection(server, "PLAINTEXT")
    conn.connection_made(MockTransport())
    conn.data_received(request(3, 1))
    ctx = server.dispatcher.contexts[0]
    assert ctx._slot.stats is None
    ctx.send_response(b"\x00\x00\x00\x00")
    assert list(server.collect())[0].samples == []


_SCENARIO = """
import sys
if sys.argv[1] == "python":  # as an install without a compiler: no broker._request_stats
    sys.modules["broker._request_stats"] = None
from prometheus_client import generate_latest
from broker import metrics
from tests.metrics.test_network_metrics import make, request
assert (metrics.SlotTimes is metrics.PySlotTimes) == (sys.argv[1] == "python")
time, conn, apis, transport, registry = make()
conn.data_received(request(3, 1) + request(3, 2, b"x" * 200) + request(18, 3, version=70))
time.sleep(500)
apis.contexts[1].send_response([b"\\x00\\x00\\x00\\x04", b"abcd"])
time.sleep(3)
apis.contexts[0].send_response(b"\\x00\\x00\\x00\\x02ab")
conn.data_received(request(3, 4))
time.sleep(1)
apis.contexts[3].send_no_response()
sys.stdout.write(generate_latest(registry).decode())
"""


def test_without_the_c_helper_the_scrape_is_the_same():
    """An install without a compiler runs the references (broker/metrics.py PyRequestStats,
    PySlotTimes, PyCounter): a connection's requests give the same page, series for series."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pages = {side: subprocess.run([sys.executable, "-c", _SCENARIO, side], cwd=root, capture_output=True, text=True,
                                  check=True).stdout for side in ("c", "python")}
    assert "kafka_network_requestmetrics_requests_total" in pages["c"]
    assert 'kafka_network_requestmetrics_requests_total{request="ApiVersions",version="other"} 1.0' in pages["c"]
    assert pages["c"] == pages["python"]


def test_an_answer_whose_metrics_fail_is_still_written_and_logged_once(caplog):
    """RequestStats.finish raising (here a slot without its request) once left the answer
    unwritten: its slot was already popped. It is written; the failure is logged once and
    counted."""
    import logging
    time, conn, apis, transport, registry = make()
    conn.data_received(request(3, 1) + request(3, 2))
    for ctx in apis.contexts:
        ctx._slot.request = None
    with caplog.at_level(logging.ERROR, logger="kbroker.network"):
        apis.contexts[0].send_response(b"\x00\x00\x00\x02ab")
        apis.contexts[1].send_response(b"\x00\x00\x00\x02cd")
    assert transport.written == [b"\x00\x00\x00\x02ab", b"\x00\x00\x00\x02cd"]
    assert conn.server.request_stats_failures == 2
    assert [r.getMessage() for r in caplog.records if r.name == "kbroker.network"] == [
        "recording a request's metrics failed (logged once; the answer is still written)"]
    conn.data_received(request(3, 3))  # the connection goes on
    apis.contexts[2].send_response(b"\x00\x00\x00\x02ef")
    assert transport.written[-1] == b"\x00\x00\x00\x02ef"
