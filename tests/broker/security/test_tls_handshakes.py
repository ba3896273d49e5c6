"""A TLS listener's handshakes, on real sockets (127.0.0.1) against an in-process
SocketServer: a handshake that fails or times out is one failed authentication and one
INFO line; a client that leaves in the middle is neither; a successful handshake (mutual
TLS) logs nothing at INFO, only at DEBUG, as Kafka logs successful authentications. No
handshake is left behind, and the descriptors come back."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct

import pytest

from broker.metrics import RequestMetrics
from broker.network import SocketServer
from broker.security.principal_mapper import SslPrincipalMapper
from cli.certs import make_certs
from protocol.client.tls import server_context
from protocol.fast_codecs import encode_request_header
from tests.support import tls_handshake

TIMEOUT_S = 0.4
# Both loops run these (event_loop_policy below; the hook pytest-asyncio now prefers would
# parametrize every test of the suite).
pytestmark = pytest.mark.filterwarnings("ignore:Overriding the \"event_loop_policy\" fixture is deprecated")


class Apis:
    def __init__(self) -> None:
        self.contexts = []

    def handle(self, ctx) -> None:
        self.contexts.append(ctx)
        ctx.send_response(struct.pack(">ii", 4, ctx.header.correlation_id))


@pytest.fixture
async def tls_server(tmp_path):
    keystores = make_certs(tmp_path / "certs", ["localhost"], ["alice"])
    ca = str(tmp_path / "certs" / "ca.pem")
    ctx = server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystores["localhost"]),
                          "ssl.truststore.type": "PEM", "ssl.truststore.location": ca, "ssl.client.auth": "required"})
    server = SocketServer(Apis(), max_request_size=1 << 20, max_inflight=10, metrics=RequestMetrics(), now=lambda: 0)
    server.tls_handshake_timeout_s = TIMEOUT_S
    port = await server.start("SSL", "127.0.0.1", 0, tls=ctx, principal_mapper=SslPrincipalMapper("DEFAULT"))
    client = ssl.create_default_context(cafile=ca)
    client.load_cert_chain(str(keystores["alice"]))
    yield server, port, client, ca
    server.close_all()


def stats(server):
    s = server.listener_stats["SSL"]
    return s.auth_succeeded, s.auth_failed


def request_frame() -> bytes:
    body = encode_request_header(18, 0, 7, "t", False)
    return struct.pack(">i", len(body)) + body


async def wait_until(predicate, what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.02)


def lines(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kbroker.network" and r.levelno == level]


async def test_a_handshake_that_never_comes_times_out_as_a_failed_authentication(tls_server, caplog):
    caplog.set_level(logging.DEBUG, logger="kbroker.network")
    server, port, _client, _ca = tls_server
    raw = socket.create_connection(("127.0.0.1", port))
    raw.setblocking(False)
    await wait_until(lambda: server.handshakes, "the handshake under way")
    await wait_until(lambda: stats(server) == (0, 1), "the timeout counted as a failed authentication", 5)
    assert lines(caplog, logging.INFO) == [
        f"failed authentication of 127.0.0.1:{raw.getsockname()[1]} on listener SSL: TLS handshake not completed "
        f"within {TIMEOUT_S:g} s"]
    await wait_until(lambda: not server.handshakes, "nothing left of the handshake")
    loop = asyncio.get_running_loop()
    assert await asyncio.wait_for(loop.sock_recv(raw, 10), 5) == b""  # closed by the broker
    raw.close()


async def test_failures_count_and_leaving_does_not(tls_server, caplog):
    caplog.set_level(logging.DEBUG, logger="kbroker.network")
    server, port, client, ca = tls_server
    loop = asyncio.get_running_loop()
    # a plaintext Kafka client on the TLS port: refused, counted
    raw = socket.create_connection(("127.0.0.1", port))
    raw.setblocking(False)
    await loop.sock_sendall(raw, request_frame())
    await asyncio.wait_for(loop.sock_recv(raw, 100), 5)  # an alert, or the close
    await wait_until(lambda: stats(server) == (0, 1), "the plaintext client counted")
    raw.close()
    # a TLS client without the certificate ssl.client.auth=required asks for: counted
    without = ssl.create_default_context(cafile=ca)
    try:
        _r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=without,
                                                               server_hostname="localhost"), 5)
        w.write(request_frame())
        await asyncio.wait_for(_r.read(4), 5)  # TLS 1.3: the refusal comes after the client's Finished
        w.close()
    except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError):
        pass
    await wait_until(lambda: stats(server) == (0, 2), "the missing certificate counted")
    # a client that leaves in the middle of its handshake: a disconnection, not a failure
    raw = socket.create_connection(("127.0.0.1", port))
    raw.sendall(b"\x16\x03\x01\x00\x30" + b"\x01" * 10)  # the start of a ClientHello, then gone
    raw.close()
    await wait_until(lambda: not server.handshakes and any("left during the TLS handshake" in m
                                                           for m in lines(caplog, logging.DEBUG)), "the departure seen")
    assert stats(server) == (0, 2)
    failures = lines(caplog, logging.INFO)
    assert len(failures) == 2 and all(" on listener SSL: TLS handshake failed: " in m for m in failures), failures
    # a good one: counted as a success, logged at DEBUG only
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
    writer.write(request_frame())
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
    await reader.readexactly(size)
    assert stats(server) == (1, 2)
    assert str(server.dispatcher.contexts[-1].principal) == "User:CN=alice,OU=clients,O=kbroker"
    assert len(lines(caplog, logging.INFO)) == 2
    assert any("authenticated by its TLS certificate as User:CN=alice" in m for m in lines(caplog, logging.DEBUG))
    writer.close()


async def test_a_storm_of_stalled_handshakes_gives_its_descriptors_back(tls_server):
    server, port, _client, _ca = tls_server
    fds = None
    for n in (5, 50):  # the first round opens what the loop keeps for good (uvloop: /dev/null once)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
        failed = stats(server)[1]
        await wait_until(lambda: stats(server)[1] == failed + n, f"{n} timeouts counted", 10)
        for c in clients:
            c.close()
        if fds is None:
            await wait_until(lambda: not server.handshakes, "the first round done")
            await asyncio.sleep(0.2)
            fds = len(os.listdir("/proc/self/fd"))
    await wait_until(lambda: not server.handshakes and len(os.listdir("/proc/self/fd")) <= fds,
                     "every descriptor back", 10)


async def test_shutdown_during_handshakes_leaves_nothing(tls_server):
    server, port, _client, _ca = tls_server
    server.tls_handshake_timeout_s = 30
    fds = len(os.listdir("/proc/self/fd"))
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
    await wait_until(lambda: len(server.handshakes) == 5, "five handshakes under way")
    server.close_all()
    await wait_until(lambda: len(os.listdir("/proc/self/fd")) <= fds + 5, "the server's descriptors back", 10)
    assert not server.handshakes
    for c in clients:
        c.close()


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def event_loop_policy(request):
    """Both loops: the broker runs on uvloop, whose TLS is its own."""
    if request.param == "uvloop":
        import uvloop
        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()


class BigAnswers(Apis):
    """Answers correlation id 1 with a fetch-like frame of several buffers (headers, 200 KB of
    records, a trailer); any other with 8 bytes."""

    def handle(self, ctx) -> None:
        if ctx.header.correlation_id != 1:
            return super().handle(ctx)
        self.contexts.append(ctx)
        body = [b"h" * 70, bytes(range(256)) * 800, b"t" * 30]
        size = 4 + sum(len(b) for b in body)
        ctx.send_response([struct.pack(">ii", size, 1), *body])


async def tls12_client(port: int, ca: str, keystore: str):
    """A TLS 1.2 client over a raw socket and memory BIOs, so that the test sees the records:
    (send, receive) where receive returns the plaintext of the next ``n`` bytes and the number
    of application-data records they came in."""
    loop = asyncio.get_running_loop()
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(keystore)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # no session tickets after the handshake
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    raw = socket.create_connection(("127.0.0.1", port))
    raw.setblocking(False)
    await tls_handshake(raw, tls, incoming, outgoing, 5)
    wire = bytearray()

    async def send(data: bytes) -> None:
        tls.write(data)
        await loop.sock_sendall(raw, outgoing.read())

    async def receive(n: int) -> tuple[bytes, int]:
        plain, records = bytearray(), 0
        while len(plain) < n:
            while len(wire) < 5 or len(wire) < 5 + struct.unpack_from(">H", wire, 3)[0]:
                data = await asyncio.wait_for(loop.sock_recv(raw, 65536), 5)
                assert data, "closed"
                wire.extend(data)
            end = 5 + struct.unpack_from(">H", wire, 3)[0]
            assert wire[0] == 23, f"record type {wire[0]}"
            records += 1
            incoming.write(bytes(wire[:end]))
            del wire[:end]
            plain += tls.read(1 << 20)
        return bytes(plain), records
    return raw, send, receive


async def test_answers_leave_in_whole_tls_records(tmp_path):
    # librdkafka decrypts a record at a time: an answer's small buffers share a record, and so
    # do the answers to requests read together.
    keystores = make_certs(tmp_path / "certs", ["localhost"], ["alice"])
    ca = str(tmp_path / "certs" / "ca.pem")
    ctx = server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystores["localhost"])})
    server = SocketServer(BigAnswers(), max_request_size=1 << 20, max_inflight=10)
    port = await server.start("SSL", "127.0.0.1", 0, tls=ctx)
    raw, send, receive = await tls12_client(port, ca, str(keystores["alice"]))
    try:
        await send(request_frame())  # correlation id 7: 8 bytes back
        assert await receive(8) == (struct.pack(">ii", 4, 7), 1)
        big = request_frame().replace(struct.pack(">i", 7), struct.pack(">i", 1))
        await send(big)
        total = 8 + 70 + 256 * 800 + 30
        plain, records = await receive(total)
        assert plain == struct.pack(">ii", total - 4, 1) + b"h" * 70 + bytes(range(256)) * 800 + b"t" * 30
        # the headers (8 + 70 bytes) in one record, the data in 13, the trailer in one: 15, not 16
        assert records == 1 + -(-256 * 800 // 16384) + 1, records
        await send(request_frame() * 5)  # five requests in one record, read at once
        assert await receive(40) == (struct.pack(">ii", 4, 7) * 5, 1)
    finally:
        raw.close()
        server.close_all()
