"""Issue 12 §3: memory held by requests read but not processed is bounded for the whole
broker (Kafka's queued.max.request.bytes)."""

from __future__ import annotations

import socket
import struct
import time

from protocol.api_keys import ApiKey
from tests.support import wait_until

from .resources_support import read_frame, request_frame, rss_bytes

CONNECTIONS = 1000
FRAME = 1 << 20  # each connection declares a 1 MiB frame and sends half of it
POOL = 16 << 20


def send_some(sock: socket.socket, data: memoryview) -> memoryview:
    """Send what the socket takes now (the broker may not be reading); the rest is returned."""
    try:
        n = sock.send(data)
    except BlockingIOError:
        n = 0
    return data[n:]


def test_half_frames_on_1000_connections_keep_rss_bounded_and_a_good_client_is_served(broker_process):
    broker = broker_process(overrides={"queued.max.request.bytes": POOL, "connections.max.idle.ms": 60000}).start()
    baseline = rss_bytes(broker.pid)
    half = struct.pack(">i", FRAME) + struct.pack(">hhi", ApiKey.PRODUCE, 7, 1) + b"\x00" * (FRAME // 2)
    socks, rest = [], []
    peak = 0
    try:
        for _ in range(CONNECTIONS):
            s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            s.setblocking(False)
            socks.append(s)
            rest.append(send_some(s, memoryview(half)))
            peak = max(peak, rss_bytes(broker.pid))
        # Keep pushing for a while: whatever the broker reads, it reads now.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for i, s in enumerate(socks):
                if rest[i]:
                    rest[i] = send_some(s, rest[i])
            peak = max(peak, rss_bytes(broker.pid))
        unsent = sum(len(r) for r in rest)
        # Unbounded, the broker would hold 1,000 x 512 KiB = 500 MiB; the pool holds 16 MiB,
        # plus one frame that may overshoot it (Kafka's non-strict pool) and allocator slack.
        bound = POOL + FRAME + (32 << 20)
        assert peak - baseline < bound, (f"RSS grew by {(peak - baseline) >> 20} MiB (bound {bound >> 20} MiB; "
                                         f"{unsent >> 20} MiB still unsent by the clients)")
        assert "queued.max.request.bytes=16777216 reached" in broker.log_text()
        # A well-behaved client is served while the pool is still used up (its small request
        # takes the reserve), long before connections.max.idle.ms would free anything.
        good = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        good.sendall(request_frame(ApiKey.API_VERSIONS, 0, b"", correlation_id=77))
        assert struct.unpack_from(">i", read_frame(good), 0)[0] == 77
        good.close()
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: "request memory drained" in broker.log_text(), 20, what="the pool to drain")


def test_request_memory_pool_pauses_and_resumes_reading():
    """The pool's rules on a mock transport: a frame reserves its whole size once its size
    prefix is in; when the pool is used up, every connection without a grant stops reading
    past a size prefix (a small frame may use the reserve and is served); those with a grant
    finish their frame; reading resumes once the pool has room again."""
    from broker.network import KafkaConnection, SocketServer
    from tests.broker.test_network import FakeApis, MockTransport, request

    server = SocketServer(FakeApis(), max_request_size=8 << 20, max_inflight=10, queued_max_request_bytes=2 << 20)
    pool = server.memory_pool

    def connection():
        conn = KafkaConnection(server, "PLAINTEXT")
        transport = MockTransport()
        conn.connection_made(transport)
        return conn, transport

    a, ta = connection()
    b, tb = connection()
    c, tc = connection()
    frame = request(3, 1, b"\x00" * (1 << 20))  # a little over 1 MiB: two fill the pool
    a.data_received(frame[:1000])
    assert a.granted and pool.used == len(frame) and not pool.exhausted
    b.data_received(frame[:1000])
    assert b.granted and pool.exhausted
    assert c.memory_paused and not ta.paused and not tb.paused
    assert not tc.paused and len(c.get_buffer(-1)) == 4  # it may read a size prefix, no more
    c.data_received(frame[:4])  # a large frame: no grant, it stops reading
    assert tc.paused and not c.granted and pool.used == 2 * len(frame) + 4
    d, td = connection()  # accepted meanwhile: a small request is served from the reserve
    d.data_received(request(18, 9)[:4])
    assert d.granted and d.from_reserve and not td.paused
    d.data_received(request(18, 9)[4:])
    assert [ctx.header.correlation_id for ctx in server.dispatcher.contexts] == [9]
    assert pool.reserve_used == 0 and d.memory_paused and not td.paused
    a.data_received(frame[1000:])  # a finishes its frame: the grant is given back
    assert len(server.dispatcher.contexts) == 2 and not a.granted
    assert not pool.exhausted
    assert not tc.paused and not c.memory_paused
    b.close()
    c.close()
    assert pool.used == 0
