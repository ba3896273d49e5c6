"""Bad input over real sockets: each case gets the Kafka error where the protocol has one,
otherwise a closed connection and one log line — and a well-behaved client on another
connection keeps producing throughout."""

from __future__ import annotations

import logging
import socket
import struct
import threading

import pytest
from confluent_kafka import Producer

from protocol.fast_codecs import encode_request_header
from protocol.messages import APIS
from protocol.records import Record, build_batch

from .helpers import create_topic, stored_batches


class Raw:
    """A bare TCP connection speaking frames."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, api_key: int, version: int, body: bytes, correlation_id: int = 1, flexible: bool = False) -> None:
        raw = encode_request_header(api_key, version, correlation_id, "bad-client", flexible) + body
        self.send(struct.pack(">i", len(raw)) + raw)

    def response(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return buf

    def closed_by_broker(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def kbroker_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("kbroker") and r.levelno >= logging.WARNING]


@pytest.fixture
def good_producer(threaded_broker):
    """A confluent-kafka producer writing 3,000 ordered records while the test misbehaves."""
    create_topic(threaded_broker, "good")
    errors, done = [], threading.Event()

    def run():
        p = Producer({"bootstrap.servers": threaded_broker.bootstrap, "linger.ms": 1, "acks": "1"})
        for i in range(3000):
            p.produce("good", value=str(i).encode(), on_delivery=lambda err, msg: err and errors.append(err))
            if i % 100 == 0:
                p.flush(10)
        p.flush(30)
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    yield
    thread.join(60)
    assert done.is_set() and errors == []
    assert sum(b.records_count for b in stored_batches(threaded_broker.server.config.log_dirs[0], "good", 0)) == 3000


def test_oversized_size_prefix_closes_without_allocating(threaded_broker, good_producer, caplog):
    raw = Raw(threaded_broker.port)
    raw.send(struct.pack(">i", 2**31 - 1))
    assert raw.closed_by_broker()
    assert any("exceeds the 104857600-byte limit" in w for w in kbroker_warnings(caplog))


def test_negative_size_and_garbage(threaded_broker, good_producer, caplog):
    raw = Raw(threaded_broker.port)
    raw.send(b"\xff" * 64)
    assert raw.closed_by_broker()
    assert any("negative frame size" in w for w in kbroker_warnings(caplog))


def test_truncated_frame_then_disconnect(threaded_broker, good_producer, caplog):
    raw = Raw(threaded_broker.port)
    raw.send(struct.pack(">i", 100) + b"\x00\x03" + b"\x00" * 20)
    raw.sock.shutdown(socket.SHUT_WR)
    assert raw.closed_by_broker()
    threaded_broker.call(lambda: None)  # let the broker's loop finish handling the close
    assert any("in the middle of a request" in w for w in kbroker_warnings(caplog))


def test_frame_too_short_for_a_header(threaded_broker, good_producer, caplog):
    raw = Raw(threaded_broker.port)
    raw.send(struct.pack(">i", 3) + b"\x00\x03\x00")
    assert raw.closed_by_broker()
    assert any("unreadable request header" in w for w in kbroker_warnings(caplog))


def test_unknown_api_key(threaded_broker, good_producer, caplog):
    raw = Raw(threaded_broker.port)
    raw.request(1000, 0, b"")
    assert raw.closed_by_broker()
    assert sum("unknown api key 1000" in w for w in kbroker_warnings(caplog)) == 1


def test_unsupported_version_of_metadata_closes(threaded_broker, good_producer, caplog):
    raw = Raw(threaded_broker.port)
    raw.request(3, 50, b"")
    assert raw.closed_by_broker()
    assert any("unsupported version 50 of Metadata" in w for w in kbroker_warnings(caplog))


def tracebacks(caplog) -> list[str]:
    """Records carrying an exception, or asyncio's "Fatal error on transport": what escaped a handler."""
    return [r.getMessage() for r in caplog.records if r.exc_info or "Fatal error" in r.getMessage()]


NEGATIVE_VERSIONS = (-1, -2, -65, -32768)


def test_negative_versions_of_api_versions_get_error_35_in_a_v0_body(threaded_broker, good_producer, caplog):
    """Issue 24 §4: a version below -64 raised IndexError in the network layer's metrics (uvloop
    logged "Fatal error on transport" and dropped the connection). Kafka answers ApiVersions of
    a version it does not speak with UNSUPPORTED_VERSION in a v0 body, on a connection that stays."""
    raw = Raw(threaded_broker.port)
    for i, version in enumerate(NEGATIVE_VERSIONS):
        raw.request(18, version, b"", correlation_id=100 + i)
        resp = raw.response()
        assert struct.unpack_from(">i", resp, 0)[0] == 100 + i
        body = APIS[18].response.parse(0, resp, 4)
        assert body.error_code == 35 and [k.api_key for k in body.api_keys] == [18]
    raw.request(18, 0, b"", correlation_id=7)
    assert APIS[18].response.parse(0, raw.response(), 4).error_code == 0
    raw.close()
    assert tracebacks(caplog) == []


@pytest.mark.parametrize("version", NEGATIVE_VERSIONS)
def test_a_negative_version_of_metadata_closes_with_one_line(threaded_broker, good_producer, caplog, version):
    """Any other API: Kafka's header parsing throws InvalidRequestException and closes the
    connection without a response; here the usual one-line close."""
    raw = Raw(threaded_broker.port)
    raw.request(3, version, b"")
    assert raw.closed_by_broker()
    threaded_broker.call(lambda: None)  # the broker's loop has logged the close
    assert [w for w in kbroker_warnings(caplog) if "closing connection" in w] == [
        f"closing connection from {raw.sock.getsockname()[0]}:{raw.sock.getsockname()[1]}: api_key=3 v{version} "
        f"correlation_id=1: unsupported version {version} of Metadata "
        f"(supported {APIS[3].min_version}-{APIS[3].max_version})"]
    assert tracebacks(caplog) == []


def test_unsupported_api_versions_version_gets_error_35_in_a_v0_body(threaded_broker, good_producer):
    raw = Raw(threaded_broker.port)
    raw.request(18, 99, b"", correlation_id=42)
    resp = raw.response()
    assert struct.unpack_from(">i", resp, 0)[0] == 42  # header v0: correlation id only
    body = APIS[18].response.parse(0, resp, 4)
    assert body.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]
    raw.request(18, 0, b"", correlation_id=43)  # the connection stays usable
    assert APIS[18].response.parse(0, raw.response(), 4).error_code == 0


def test_produce_v0_to_v2_is_answered_unsupported_version(threaded_broker, good_producer):
    raw = Raw(threaded_broker.port)
    body = APIS[0].request.build(2, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "good", "partition_data": [{"index": 0, "records": b"\x00" * 30}]}]})
    raw.request(0, 2, body, correlation_id=7)
    resp = APIS[0].response.parse(2, raw.response(), 4)
    assert resp.responses[0].partition_responses[0].error_code == 35


@pytest.mark.parametrize("api_key,version,body", [
    (3, 1, b"\x00\x00\x00\x05\x00\x01"),            # Metadata: 5 topics promised, 1 byte present
    (0, 7, b"\xff\xff\x00\x01\x00\x00\x03\xe8\x00\x00\x00\x01\x00\x04go"),  # Produce cut inside a topic name
    (1, 11, b"\x00\x00"),                           # Fetch: truncated fixed part
    (19, 3, b"\x7f\xff\xff\xff"),                   # CreateTopics: absurd array count
])
def test_body_that_does_not_decode_closes_with_one_line(threaded_broker, good_producer, caplog, api_key, version, body):
    raw = Raw(threaded_broker.port)
    raw.request(api_key, version, body)
    assert raw.closed_by_broker()
    lines = [w for w in kbroker_warnings(caplog) if "closing connection" in w]
    assert len(lines) == 1 and f"api_key={api_key} v{version}" in lines[0]


def test_corrupt_batch_gets_corrupt_message_and_the_connection_stays(threaded_broker, good_producer, caplog):
    create_topic(threaded_broker, "victim")
    batch = bytearray(build_batch([Record(value=b"hello", timestamp=1)]))
    batch[-1] ^= 0xFF  # breaks the CRC
    raw = Raw(threaded_broker.port)
    body = APIS[0].request.build(7, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "victim", "partition_data": [{"index": 0, "records": bytes(batch)}]}]})
    raw.request(0, 7, body, correlation_id=9)
    resp = APIS[0].response.parse(7, raw.response(), 4)
    assert resp.responses[0].partition_responses[0].error_code == 2  # CORRUPT_MESSAGE
    assert stored_batches(threaded_broker.server.config.log_dirs[0], "victim", 0) == []
    assert any("CORRUPT_MESSAGE" in w for w in kbroker_warnings(caplog))
    raw.request(18, 0, b"", correlation_id=10)
    assert APIS[18].response.parse(0, raw.response(), 4).error_code == 0
