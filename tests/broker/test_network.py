"""KafkaConnection driven through a mock transport (uvicorn style): ordering, flow control,
bad frames. No sockets, no event loop needed."""

from __future__ import annotations

import struct

import asyncio

import pytest

from broker.metrics import RequestMetrics
from broker.network import FlowControl, KafkaConnection, SocketServer
from protocol.clock import MockTime
from protocol.errors import RemoteProtocolError
from protocol.fast_codecs import encode_request_header


class MockTransport:
    def __init__(self):
        self.written = []
        self.closed = False
        self.paused = False

    def write(self, data):
        self.written.append(bytes(data))

    def writelines(self, chunks):
        self.written.append(b"".join(bytes(c) for c in chunks))

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed

    def pause_reading(self):
        assert not self.paused, "pause_reading on a paused transport"
        self.paused = True

    def resume_reading(self):
        assert self.paused, "resume_reading on a reading transport"
        self.paused = False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 5555) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass


class FakeApis:
    """Holds contexts; the test decides when and how each is answered."""

    def __init__(self):
        self.contexts = []

    def handle(self, ctx):
        if ctx.header.api_key == 47:  # a key the protocol knows and this dispatcher does not serve
            raise RemoteProtocolError("api key 47 is not served here")
        self.contexts.append(ctx)


def request(api_key, correlation_id, body=b"", version=0):
    raw = encode_request_header(api_key, version, correlation_id, "t", False) + body
    return struct.pack(">i", len(raw)) + raw


def make(max_inflight=10, max_request_size=1 << 20, server=None):
    apis = FakeApis() if server is None else server.dispatcher
    if server is None:
        server = SocketServer(apis, max_request_size=max_request_size, max_inflight=max_inflight)
    conn = KafkaConnection(server, "PLAINTEXT")
    transport = MockTransport()
    conn.connection_made(transport)
    return conn, apis, transport


def test_responses_leave_in_request_order():
    conn, apis, transport = make()
    conn.data_received(request(3, 1) + request(3, 2) + request(3, 3))
    assert [c.header.correlation_id for c in apis.contexts] == [1, 2, 3]
    apis.contexts[2].send_response(b"third")
    apis.contexts[1].send_response(b"second")
    assert transport.written == []  # the first is still pending
    apis.contexts[0].send_response([b"fi", b"rst"])
    assert transport.written == [b"first", b"second", b"third"]


def test_no_response_frees_the_slot_without_writing():
    conn, apis, transport = make()
    conn.data_received(request(0, 1) + request(3, 2))
    apis.contexts[1].send_response(b"metadata")
    assert transport.written == []
    apis.contexts[0].send_no_response()  # acks=0 produce
    assert transport.written == [b"metadata"]
    assert conn.inflight == 0


def test_frames_split_across_reads():
    conn, apis, transport = make()
    data = request(3, 1, b"x" * 100) + request(3, 2)
    for i in range(len(data)):
        conn.data_received(data[i:i + 1])
    assert [c.header.correlation_id for c in apis.contexts] == [1, 2]
    assert bytes(apis.contexts[0].frame[apis.contexts[0].body_offset:]) == b"x" * 100


def test_reading_pauses_at_the_inflight_limit_and_resumes():
    conn, apis, transport = make(max_inflight=2)
    conn.data_received(request(3, 1))
    assert not transport.paused
    conn.data_received(request(3, 2))
    assert transport.paused
    apis.contexts[0].send_response(b"a")
    assert not transport.paused


def test_write_backpressure_pauses_reading():
    conn, apis, transport = make()
    conn.data_received(request(3, 1))
    conn.pause_writing()
    assert transport.paused
    conn.resume_writing()
    assert not transport.paused


def test_oversized_frame_closes_without_allocating(caplog):
    conn, apis, transport = make(max_request_size=1000)
    conn.data_received(struct.pack(">i", 2**31 - 1))
    assert transport.closed
    assert apis.contexts == []
    assert "exceeds the 1000-byte limit" in caplog.text


def test_unreadable_header_closes_only_this_connection(caplog):
    conn, apis, transport = make()
    conn.data_received(struct.pack(">i", 3) + b"\x00\x03\x00")
    assert transport.closed
    assert "unreadable request header" in caplog.text
    other, apis2, transport2 = make()
    other.data_received(request(3, 1))
    assert len(apis2.contexts) == 1 and not transport2.closed


def test_handler_protocol_error_closes_with_one_line(caplog):
    conn, apis, transport = make()
    conn.data_received(request(47, 5))
    assert transport.closed
    assert len([r for r in caplog.records if r.name == "kbroker.network"]) == 1
    assert "api key 47 is not served here" in caplog.text


INT16_EDGES = (-32768, -129, -65, -64, -2, -1, 63, 64, 32767)  # 0-62 have their own slots


@pytest.mark.parametrize("version", INT16_EDGES)
@pytest.mark.parametrize("api_key", [18, 3])  # ApiVersions (answered UNSUPPORTED_VERSION v0), Metadata (closed)
def test_any_int16_version_reaches_the_dispatcher_and_counts_as_other(caplog, api_key, version):
    """Issue 24 §4: a version below -64 raised IndexError out of data_received (uvloop's "Fatal
    error on transport"), and -1 counted as the highest version. The version's answer is the
    dispatcher's (tests/compat/test_bad_input.py drives it against a real broker)."""
    metrics = RequestMetrics()
    conn, apis, transport = make(server=SocketServer(FakeApis(), max_request_size=1 << 20, max_inflight=10,
                                                     metrics=metrics, now=MockTime().nanoseconds))
    conn.data_received(request(api_key, 7, version=version) + request(api_key, 8))
    assert [(c.header.api_version, c.header.correlation_id) for c in apis.contexts] == [(version, 7), (0, 8)]
    assert not transport.closed and "Traceback" not in caplog.text
    versions = metrics.api(api_key).versions
    assert (versions[0], versions[-1], sum(versions)) == (1, 1, 2)  # the last slot is "other"


@pytest.mark.parametrize("api_key", [-32768, -100, -1, 99, 200, 1000, 32767])
def test_an_unknown_api_key_closes_before_any_bookkeeping(caplog, api_key):
    """Kafka's ApiKeys.forId fails in the header: the connection closes with one line, nothing
    is dispatched, nothing counted (a key of -100 raised IndexError in RequestMetrics.api)."""
    from protocol.messages import APIS

    assert api_key not in APIS
    metrics = RequestMetrics()
    conn, apis, transport = make(server=SocketServer(FakeApis(), max_request_size=1 << 20, max_inflight=10,
                                                     metrics=metrics, now=MockTime().nanoseconds))
    keys_before = len(metrics.by_key)
    conn.data_received(request(api_key, 5))
    assert transport.closed and apis.contexts == [] and transport.written == []
    assert [r.getMessage() for r in caplog.records if r.name == "kbroker.network"] == [
        f"closing connection from 127.0.0.1:5555: unknown api key {api_key} (correlation_id=5)"]
    assert len(metrics.by_key) == keys_before
    assert not any(any(s.versions) or s.total.count or s.errors for s in metrics.by_key if s is not None)


def test_late_response_after_close_is_dropped():
    conn, apis, transport = make()
    conn.data_received(request(1, 1))
    ctx = apis.contexts[0]
    conn.connection_lost(None)
    ctx.send_response(b"late")
    assert transport.written == []


def test_write_backpressure_and_the_inflight_limit_pause_reading_once():
    conn, apis, transport = make(max_inflight=1)
    conn.data_received(request(3, 1))
    assert transport.paused
    conn.pause_writing()  # a second reason to pause: the transport is not paused twice
    apis.contexts[0].send_response(b"a")
    assert transport.paused  # still paused: the write buffer is full
    conn.resume_writing()
    assert not transport.paused


def test_flow_control_is_idempotent():
    transport = MockTransport()
    flow = FlowControl(transport)
    flow.pause_reading()
    flow.pause_reading()
    assert transport.paused and flow.read_paused
    flow.resume_reading()
    flow.resume_reading()
    assert not transport.paused and not flow.read_paused


async def test_drain_waits_for_resume_writing():
    flow = FlowControl(MockTransport())
    await asyncio.wait_for(flow.drain(), 1)  # writable: returns at once
    flow.pause_writing()
    flow.pause_writing()
    waiter = asyncio.ensure_future(flow.drain())
    for _ in range(3):
        await asyncio.sleep(0)
    assert not waiter.done()
    flow.resume_writing()
    await asyncio.wait_for(waiter, 1)
    assert not flow.write_paused


async def _spin(task, rounds=5):
    """A few loop iterations, no wall-clock time: a woken waiter finishes within them."""
    for _ in range(rounds):
        if task.done():
            return
        await asyncio.sleep(0)


async def test_wait_for_inflight_ends_when_the_last_response_is_sent():
    conn, apis, transport = make()
    server = conn.server
    other, _, other_transport = make(server=server)
    assert await server.wait_for_inflight(60)  # nothing in flight
    conn.data_received(request(3, 1))
    other.data_received(request(3, 2))
    waiter = asyncio.ensure_future(server.wait_for_inflight(60))
    await _spin(waiter)
    assert not waiter.done()
    apis.contexts[0].send_response(b"one")
    await _spin(waiter)
    assert not waiter.done()  # the other connection still has one in flight
    apis.contexts[1].send_no_response()
    await _spin(waiter)
    assert waiter.done() and waiter.result() is True


async def test_wait_for_inflight_ends_when_a_busy_connection_closes():
    conn, apis, transport = make()
    conn.data_received(request(3, 1))
    waiter = asyncio.ensure_future(conn.server.wait_for_inflight(60))
    await _spin(waiter)
    assert not waiter.done()
    conn.close("test")
    await _spin(waiter)
    assert waiter.done() and waiter.result() is True


async def test_wait_for_inflight_times_out():
    conn, apis, transport = make()
    conn.data_received(request(3, 1))
    assert await conn.server.wait_for_inflight(0.01) is False


class ThrottlingApis(FakeApis):
    """Answers each request at once; the first earns a throttle of ``ms`` (a client quota)."""

    def __init__(self, ms):
        super().__init__()
        self.ms = ms

    def handle(self, ctx):
        self.contexts.append(ctx)
        ctx.send_response(b"answer%d" % ctx.header.correlation_id)
        if len(self.contexts) == 1:
            ctx.connection.throttle(self.ms)


def test_a_throttle_mutes_the_connection_until_its_timer_fires():
    """KIP-219: the throttled request is answered at once; then nothing is read or processed —
    not even a request already read behind it — until the throttle time has passed."""
    time = MockTime()
    server = SocketServer(ThrottlingApis(100), max_request_size=1 << 20, max_inflight=10, time=time)
    conn, apis, transport = make(server=server)
    conn.data_received(request(18, 1) + request(18, 2))
    assert [c.header.correlation_id for c in apis.contexts] == [1]
    assert transport.written == [b"answer1"]
    assert transport.paused and conn.throttled
    conn.data_received(request(18, 3))  # arrives anyway (in flight when reading paused): waits too
    time.sleep(99)
    assert [c.header.correlation_id for c in apis.contexts] == [1]
    assert transport.paused
    time.sleep(1)
    assert [c.header.correlation_id for c in apis.contexts] == [1, 2, 3]
    assert b"".join(transport.written) == b"answer1answer2answer3"
    assert not transport.paused and not conn.throttled


def test_a_longer_throttle_extends_the_mute_and_a_shorter_one_does_not_shorten_it():
    time = MockTime()
    server = SocketServer(FakeApis(), max_request_size=1 << 20, max_inflight=10, time=time)
    conn, apis, transport = make(server=server)
    conn.throttle(100)
    time.sleep(50)
    conn.throttle(10)  # 60 from the start: inside the first mute
    time.sleep(20)
    assert transport.paused
    conn.throttle(200)  # 270 from the start
    time.sleep(199)
    assert transport.paused
    time.sleep(1)
    assert not transport.paused


def test_closing_a_muted_connection_drops_its_timer_and_held_requests():
    time = MockTime()
    server = SocketServer(ThrottlingApis(100), max_request_size=1 << 20, max_inflight=10, time=time)
    conn, apis, transport = make(server=server)
    conn.data_received(request(18, 1) + request(18, 2))
    conn.close("bye")
    assert time.pending_timers() == 0
    time.sleep(200)
    assert [c.header.correlation_id for c in apis.contexts] == [1]


class AnsweringApis(FakeApis):
    """Answers a request with api key 1 (a follower's Fetch, say) by completing every request
    held so far on other connections (the acks=all produces its high watermark move completes),
    then itself."""

    def handle(self, ctx):
        if ctx.header.api_key != 1:
            return super().handle(ctx)
        for held in self.contexts:
            held.send_response(f"produce-{held.header.correlation_id}".encode())
        self.contexts.clear()
        ctx.send_response(b"fetch")


def test_answers_completed_by_another_connections_read_leave_in_one_write_per_connection():
    # A follower's fetch that moves the high watermark answers several acks=all produces on
    # each producer's connection: each connection gets one writev once the fetch's read is
    # processed, not one write per answer (issue 29: a write syscall per produce on the leader).
    server = SocketServer(AnsweringApis(), max_request_size=1 << 20, max_inflight=10)
    producer_a, apis, written_a = make(server=server)
    producer_b, _, written_b = make(server=server)
    follower, _, written_f = make(server=server)
    producer_a.data_received(request(0, 1) + request(0, 2))
    producer_b.data_received(request(0, 7))
    producer_a.data_received(request(0, 3))
    assert written_a.written == [] and written_b.written == []
    follower.data_received(request(1, 99))
    assert written_a.written == [b"produce-1produce-2produce-3"]
    assert written_b.written == [b"produce-7"]
    assert written_f.written == [b"fetch"]
    assert server.corked is None
    # outside any read (a timer: a DelayedProduce expiring) an answer is written at once
    producer_b.data_received(request(0, 8))
    apis.contexts[0].send_response(b"late")
    assert written_b.written == [b"produce-7", b"late"]


def test_a_connection_closed_while_corked_writes_its_earlier_answers_first():
    server = SocketServer(AnsweringApis(), max_request_size=1 << 20, max_inflight=10)
    producer, apis, written = make(server=server)
    follower, _, _ = make(server=server)
    producer.data_received(request(0, 1))

    class Closing(AnsweringApis):
        def handle(self, ctx):
            super().handle(ctx)
            producer.close("acks=0 produce failed")
    follower.dispatcher = Closing()
    follower.dispatcher.contexts = apis.contexts
    follower.data_received(request(1, 5))
    assert written.written == [b"produce-1"] and written.closed


# -- TLS: whole records per write ------------------------------------------------------------

RECORD = 16384


def records_of(writes, record=RECORD):
    """TLS records the loop's TLS makes of ``writes``: one SSLObject.write each, 16 KiB a record."""
    return sum(-(-len(w) // record) for w in writes)


@pytest.mark.parametrize("sizes", [
    [60],  # one produce answer
    [60] * 40,  # answers of pipelined produces read at once
    [78, 1 << 20, 0],  # a fetch answer: headers, the partition's records, an empty tail
    [78, 1 << 20, 30, 500_000, 12],  # two partitions
    [RECORD], [RECORD - 1, 1], [RECORD + 1], [3 * RECORD, 5, RECORD - 5],
    [70, 200_000, 70, 70, 300_000],
])
def test_tls_writes_fill_whole_records_and_keep_the_bytes(sizes):
    from broker.network import tls_writes

    buffers = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    writes = tls_writes(buffers)
    assert b"".join(bytes(w) for w in writes) == b"".join(buffers)
    total = sum(sizes)
    assert records_of(writes) == -(-total // RECORD)  # as few records as the bytes need
    assert all(len(w) % RECORD == 0 for w in writes[:-1])  # only the last record of all is short
    assert all(len(w) for w in writes)


def test_tls_writes_slice_a_big_buffer_without_copying_it():
    from broker.network import tls_writes

    data = bytearray(b"r" * (1 << 20))
    writes = tls_writes([b"h" * 78, data, b"t" * 20])
    joined = [w for w in writes if not (isinstance(w, memoryview) and w.obj is data)]
    # the only copies: the header topped up to a record with the data's head, and the data's
    # last 78 bytes (past its whole records) with the trailer
    assert [len(w) for w in joined] == [RECORD, 78 + 20]
    assert [len(w) for w in writes if isinstance(w, memoryview) and w.obj is data] == [(1 << 20) - RECORD]
    assert tls_writes([data])[0] is data  # a buffer of whole records goes as it is


class MockTlsTransport(MockTransport):
    """Keeps the buffers of each write: the loop's TLS makes records of each on its own."""

    def __init__(self):
        super().__init__()
        self.buffers = []

    def get_extra_info(self, name, default=None):
        return object() if name == "ssl_object" else super().get_extra_info(name, default)

    def write(self, data):
        self.buffers.append([bytes(data)])
        super().write(data)

    def writelines(self, chunks):
        chunks = list(chunks)
        self.buffers.append([bytes(c) for c in chunks])
        super().writelines(chunks)


def test_a_tls_connection_writes_pipelined_answers_in_one_record():
    server = SocketServer(FakeApis(), max_request_size=1 << 20, max_inflight=10)
    conn = KafkaConnection(server, "SSL")
    transport = MockTlsTransport()
    conn.connection_made(transport)
    apis = server.dispatcher

    class Answering:
        def handle(self, ctx):
            apis.contexts.append(ctx)
            ctx.send_response([b"size", f"answer-{ctx.header.correlation_id}".encode()])
    conn.dispatcher = Answering()
    conn.data_received(b"".join(request(0, i) for i in range(5)))
    assert transport.buffers == [[b"".join(b"sizeanswer-%d" % i for i in range(5))]]  # ten buffers, one record
    # an answer outside a read (a purgatory's completion) goes the same way
    conn.dispatcher = apis
    conn.data_received(request(1, 9))
    apis.contexts[-1].send_response([b"h" * 10, bytes(3 * RECORD)])
    assert [len(b) for b in transport.buffers[1]] == [RECORD, 2 * RECORD, 10]
    assert transport.written[1] == b"h" * 10 + bytes(3 * RECORD)
    # plaintext: the buffers as they are, one writev
    plain, plain_apis, plain_transport = make()
    plain.data_received(request(1, 1))
    plain_apis.contexts[-1].send_response([b"h" * 10, bytes(3 * RECORD)])
    assert plain_transport.written == [b"h" * 10 + bytes(3 * RECORD)]
