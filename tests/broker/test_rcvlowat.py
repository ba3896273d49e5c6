"""SO_RCVLOWAT while a request is incomplete (broker/network.py's KafkaConnection._update_lowat),
on real sockets (127.0.0.1) against an in-process SocketServer, on both loops, over PLAINTEXT (TLS
connections get TCP_QUICKACK alone): a request that arrives in many small TCP segments (the client's TCP_NODELAY, a pause between
writes) is answered (a low-water mark above what is still to come would leave it waiting for
ever), in a few reads instead of one per segment; a small request behind it is answered too (the
mark back at 1); a client that leaves in the middle of a request is closed and forgotten."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import sys

import pytest

from broker import network
from broker.network import KafkaConnection, SocketServer
from cli.certs import make_certs
from protocol.client.tls import server_context
from protocol.fast_codecs import encode_request_header
from tests.support import tls_handshake

pytestmark = [pytest.mark.filterwarnings("ignore:Overriding the \"event_loop_policy\" fixture is deprecated"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_RCVLOWAT is used on Linux only")]

PIECE = 1024
PIECES = 40  # a 40 KiB request, written 1 KiB at a time
ANSWER_TIMEOUT_S = 10.0  # a request left waiting by a wrong low-water mark fails the test here


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def event_loop_policy(request):
    """Both loops: the broker runs on uvloop, whose TLS is its own."""
    if request.param == "uvloop":
        import uvloop
        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()


class Apis:
    def handle(self, ctx) -> None:
        ctx.send_response(struct.pack(">ii", 4, ctx.header.correlation_id))


def request_frame(correlation_id: int, padding: int = 0) -> bytes:
    body = encode_request_header(18, 0, correlation_id, "t", False) + b"\x00" * padding
    return struct.pack(">i", len(body)) + body


@pytest.fixture
def reads(monkeypatch):
    """The reads (data_received calls) of the server's connections, by connection."""
    seen: dict[KafkaConnection, int] = {}
    original = KafkaConnection.data_received

    def counting(self, data):
        seen[self] = seen.get(self, 0) + 1
        return original(self, data)
    monkeypatch.setattr(KafkaConnection, "data_received", counting)
    return seen


class PlainClient:
    def __init__(self, raw: socket.socket) -> None:
        self.raw = raw
        self.loop = asyncio.get_running_loop()

    async def send(self, data: bytes) -> None:
        await self.loop.sock_sendall(self.raw, data)

    async def receive(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            data = await asyncio.wait_for(self.loop.sock_recv(self.raw, n - len(out)), ANSWER_TIMEOUT_S)
            assert data, "closed"
            out += data
        return bytes(out)


class TlsClient(PlainClient):
    """TLS over a raw socket and memory BIOs: each ``send`` is a TLS record of its own and one
    write of the socket (as librdkafka writes a message's value)."""

    def __init__(self, raw: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO):
        super().__init__(raw)
        self.tls, self.incoming, self.outgoing = tls, incoming, outgoing

    @classmethod
    async def connect(cls, port: int, ca: str) -> "TlsClient":
        ctx = ssl.create_default_context(cafile=ca)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
        raw = connect(port)
        self = cls(raw, tls, incoming, outgoing)
        await tls_handshake(raw, tls, incoming, outgoing, ANSWER_TIMEOUT_S)
        return self

    async def send(self, data: bytes) -> None:
        self.tls.write(data)
        await PlainClient.send(self, self.outgoing.read())

    async def receive(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            try:
                out += self.tls.read(n - len(out))
                continue
            except ssl.SSLWantReadError:
                pass
            data = await asyncio.wait_for(self.loop.sock_recv(self.raw, 65536), ANSWER_TIMEOUT_S)
            assert data, "closed"
            self.incoming.write(data)
        return bytes(out)


def connect(port: int) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    raw.setblocking(False)
    return raw


@pytest.fixture
async def listener(tmp_path):
    """(server, a coroutine making a connected client): PLAINTEXT, where the mark is used."""
    server, client = await _listener("PLAINTEXT", tmp_path)
    yield server, client
    server.close_all()


@pytest.fixture(params=["PLAINTEXT", "SSL"])
async def any_listener(request, tmp_path):
    """The same over PLAINTEXT and over TLS (TCP_QUICKACK alone there)."""
    server, client = await _listener(request.param, tmp_path)
    yield server, client
    server.close_all()


async def _listener(protocol: str, tmp_path):
    server = SocketServer(Apis(), max_request_size=1 << 20, max_inflight=10)
    if protocol == "SSL":
        keystores = make_certs(tmp_path / "certs", ["localhost"], [])
        ca = str(tmp_path / "certs" / "ca.pem")
        ctx = server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystores["localhost"])})
        port = await server.start("SSL", "127.0.0.1", 0, tls=ctx)

        async def client() -> PlainClient:
            return await TlsClient.connect(port, ca)
    else:
        port = await server.start("PLAINTEXT", "127.0.0.1", 0)

        async def client() -> PlainClient:
            return PlainClient(connect(port))
    return server, client


async def wait_until(predicate, what: str, timeout_s: float = ANSWER_TIMEOUT_S) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.01)


async def send_in_pieces(client: PlainClient, frame: bytes, pause_s: float = 0.002) -> None:
    for i in range(0, len(frame), PIECE):
        await client.send(frame[i:i + PIECE])
        await asyncio.sleep(pause_s)  # each piece its own segment (not needed for correctness)


async def test_a_request_in_small_segments_is_answered_in_a_few_reads(listener, reads):
    server, make_client = listener
    client = await make_client()
    try:
        await client.send(request_frame(1))  # connected: the server's connection exists
        assert await client.receive(8) == struct.pack(">ii", 4, 1)
        (conn,) = server.connections
        assert conn._set_lowat is not None, "SO_RCVLOWAT not set up on this connection"
        before = reads[conn]
        big = request_frame(2, padding=PIECES * PIECE - 20)
        await send_in_pieces(client, big)
        assert await client.receive(8) == struct.pack(">ii", 4, 2)
        # One read for the first piece (the size is known from then on), then the kernel wakes
        # the loop once the rest can be there.
        assert reads[conn] - before <= 5, f"{reads[conn] - before} reads for {PIECES} segments"
        assert conn._lowat == 1  # back to 1 with the request whole
        # A small request right behind it: answered at once (no mark left over from the big one)
        await client.send(request_frame(3))
        assert await client.receive(8) == struct.pack(">ii", 4, 3)
    finally:
        client.raw.close()


async def test_requests_pipelined_behind_a_partial_one_are_answered(any_listener, reads):
    """Two big requests and a small one in one stream, cut anywhere: every one answered."""
    server, make_client = any_listener
    client = await make_client()
    try:
        stream = request_frame(1, padding=30_000) + request_frame(2, padding=9_000) + request_frame(3)
        for i in range(0, len(stream), 7000):
            await client.send(stream[i:i + 7000])
            await asyncio.sleep(0.002)
        assert await client.receive(24) == b"".join(struct.pack(">ii", 4, c) for c in (1, 2, 3))
    finally:
        client.raw.close()


async def test_a_client_leaving_in_the_middle_of_a_request_is_closed(listener, caplog):
    server, make_client = listener
    client = await make_client()
    await client.send(request_frame(1))
    assert await client.receive(8) == struct.pack(">ii", 4, 1)
    (conn,) = server.connections
    big = request_frame(2, padding=100_000)
    await send_in_pieces(client, big[:20_000])
    await wait_until(lambda: conn._lowat > 1, "the low-water mark set for the rest of the request")
    client.raw.close()  # EOF wakes the loop whatever the mark
    await wait_until(lambda: not server.connections, "the connection closed and forgotten")
    assert conn.closed
    assert any("closed in the middle of a request" in r.getMessage() for r in caplog.records)


async def test_without_the_helper_the_socket_object_sets_it(listener, reads, monkeypatch):
    """The reference path (no broker/_tls_read.c): the transport's socket object's setsockopt."""
    monkeypatch.setattr(network, "_SET_RCVLOWAT", None)
    server, make_client = listener
    client = await make_client()
    try:
        await client.send(request_frame(1))
        assert await client.receive(8) == struct.pack(">ii", 4, 1)
        (conn,) = server.connections
        assert conn._set_lowat is not None
        before = reads[conn]
        await send_in_pieces(client, request_frame(2, padding=PIECES * PIECE - 20))
        assert await client.receive(8) == struct.pack(">ii", 4, 2)
        assert reads[conn] - before <= 5, f"{reads[conn] - before} reads for {PIECES} segments"
    finally:
        client.raw.close()


async def test_tls_gets_quickack_alone_by_default(tmp_path):
    """By default a TLS connection's partial request sets TCP_QUICKACK and no low-water mark: a
    Nagle client's held piece would otherwise wait for the kernel's delayed ACK (40 ms and more;
    KafkaConnection's comment says what was measured)."""
    server, make_client = await _listener("SSL", tmp_path)
    client = await make_client()
    try:
        await client.send(request_frame(1))
        assert await client.receive(8) == struct.pack(">ii", 4, 1)
        (conn,) = server.connections
        calls = []
        setter = conn._set_lowat
        assert setter is not None, "TCP_QUICKACK not set up on this connection"

        def recording(n: int, quickack: bool) -> None:
            calls.append((n, quickack))
            setter(n, quickack)
        conn._set_lowat = recording
        await send_in_pieces(client, request_frame(2, padding=PIECES * PIECE - 20))
        assert await client.receive(8) == struct.pack(">ii", 4, 2)
        assert calls and all(c == (0, True) for c in calls), calls  # quick ACKs, the mark left at 1
        assert conn._lowat == 1
    finally:
        client.raw.close()
        server.close_all()
