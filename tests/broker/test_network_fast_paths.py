"""The connection's fast paths (issue 29) against its general path, through mock transports:
one whole request per read processed inline in data_received (the general path:
_process_frames), the oldest answer of a read in progress joining the read's writes in
send_response (the general path: _flush), and a parked request looking at reading again only
at the in-flight limit (the general path: _update_reading after every park). The same random
scenario — several connections, reads of whole, partial and several frames, answers now, later,
from other connections' reads and from the read hooks, acks=0 answers, throttles, bad requests,
a full write buffer, metrics on and off — is run with the fast paths and with the general ones
patched in; every transport must see the same writes and the same pauses, in the same order,
and every connection end in the same state."""

from __future__ import annotations

import random
import struct

import pytest

from broker import network
from broker.metrics import RequestMetrics
from broker.network import KafkaConnection, RequestContext, SocketServer
from protocol.clock import MockTime
from protocol.errors import RemoteProtocolError
from protocol.framing import FrameTooLarge, NegativeFrameSize

from tests.broker.test_network import request


class RecordingTransport:
    def __init__(self, log: list, name: str) -> None:
        self.log = log
        self.name = name
        self.closed = False
        self.paused = False

    def write(self, data):
        self.log.append((self.name, "write", bytes(data)))

    def writelines(self, chunks):
        self.log.append((self.name, "writelines", b"".join(bytes(c) for c in chunks)))

    def close(self):
        self.closed = True
        self.log.append((self.name, "close"))

    def is_closing(self):
        return self.closed

    def pause_reading(self):
        assert not self.paused
        self.paused = True
        self.log.append((self.name, "pause"))

    def resume_reading(self):
        assert self.paused
        self.paused = False
        self.log.append((self.name, "resume"))

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 5555) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass


# -- the general paths (the fast paths' references) ---------------------------------------

def general_data_received(self, data):
    if self.closed:
        return
    server = self.server
    now = self.last_active_ms = server.time.monotonic_ms()
    connections = server.connections
    if self in connections:
        connections.move_to_end(self)
    meter = self._meter
    if meter is not None:
        meter.read(data)
    try:
        frames = self.framer.feed(data)
    except (FrameTooLarge, NegativeFrameSize) as exc:
        self.close(str(exc))
        return
    if self._held_frames is not None:
        self._held_frames.extend(frames)
    elif frames:
        self._process_frames(frames, now)


def general_send_response(self, response):
    if self.done:
        return
    self.response = response
    self.done = True
    self.cancel = None
    conn = self.connection
    if conn._meter is not None:
        conn._meter.ready(self)
    conn._flush()


def general_process(self, frame):
    header = network.parse_header(frame, network.REQUEST_FLEXIBLE_VERSIONS, network.RequestHeader)
    if header.__class__ is str:
        self.close(f"unreadable request header: {header}")
        return
    if header.api_key not in network.APIS:
        self.close(f"unknown api key {header.api_key}")
        return
    ctx = RequestContext(header, frame, self)
    meter = self._meter
    if meter is not None:
        meter.begin(ctx, header.api_key, header.api_version, frame)
    self._pending.append(ctx)
    try:
        self.dispatcher.handle(ctx)
    except RemoteProtocolError as exc:
        self.close(f"{exc}")
        return
    except Exception:
        self.close("internal error")
        return
    if not ctx.done:
        if meter is not None:
            meter.parked(ctx)
        self._update_reading()


# -- the scenario ----------------------------------------------------------------------------

class ScriptedApis:
    """Decides each request's fate from a seeded generator: answered now (bytes or buffers),
    parked, parked while answering parked ones (of any connection: a follower's fetch completing
    produces), no answer (acks=0), a throttle, or an unanswerable request."""

    def __init__(self, rng: random.Random, log: list) -> None:
        self.rng = rng
        self.log = log
        self.parked: list[RequestContext] = []

    def answer(self, ctx: RequestContext) -> None:
        cid = ctx.header.correlation_id
        r = self.rng.random()
        if r < 0.1:
            ctx.send_no_response()
        elif r < 0.5:
            ctx.send_response(struct.pack(">ii", 4, cid))
        else:
            ctx.send_response([struct.pack(">i", 8), struct.pack(">i", cid), b"abcd"])

    def answer_some(self, n: int) -> None:
        for _ in range(min(n, len(self.parked))):
            self.answer(self.parked.pop(self.rng.randrange(len(self.parked))))

    def handle(self, ctx: RequestContext) -> None:
        self.log.append(("handle", ctx.connection.peer, ctx.header.correlation_id))
        r = self.rng.random()
        if r < 0.35:
            self.answer(ctx)
        elif r < 0.6:
            self.parked.append(ctx)
            ctx.on_cancel(lambda: self.log.append(("cancelled", ctx.header.correlation_id)))
        elif r < 0.85:
            self.parked.append(ctx)
            self.answer_some(self.rng.randrange(1, 4))
        elif r < 0.9:
            self.answer(ctx)
            ctx.connection.throttle(self.rng.choice([5, 50]))
        elif r < 0.91:
            raise RemoteProtocolError("refused")
        elif r < 0.915:
            raise ValueError("a handler's bug")
        else:
            self.answer_some(2)
            self.answer(ctx)


def run(seed: int, metrics: bool, general: bool, monkeypatch) -> tuple[list, list]:
    if general:
        monkeypatch.setattr(KafkaConnection, "data_received", general_data_received)
        monkeypatch.setattr(KafkaConnection, "_process", general_process)
        monkeypatch.setattr(RequestContext, "send_response", general_send_response)
    rng = random.Random(seed)
    log: list = []
    time = MockTime()
    apis = ScriptedApis(rng, log)
    server = SocketServer(apis, max_request_size=1 << 20, max_inflight=rng.choice([2, 3, 500]), time=time,
                          metrics=RequestMetrics() if metrics else None, now=time.nanoseconds)

    def end_read():
        log.append(("end_read",))
        if rng.random() < 0.3:
            apis.answer_some(rng.randrange(1, 3))

    server.read_hooks = (lambda: log.append(("begin_read",)), end_read)

    class Drained:  # (SocketServer.wait_for_inflight's event, as if a shutdown waited all along)
        def set(self):
            log.append(("drained",))

    server._drained = Drained()  # type: ignore[assignment]
    def connect(i: int) -> KafkaConnection:
        conn = KafkaConnection(server, "PLAINTEXT")
        conn.connection_made(RecordingTransport(log, f"c{i}"))
        conn.peer = f"c{i}"
        return conn

    conns = [connect(i) for i in range(4)]
    closed = []
    cid = 0
    partial: dict[int, bytes] = {}
    for _ in range(300):
        i = rng.randrange(len(conns))
        conn = conns[i]
        if conn.closed:  # (a refused request closed it: the client connects again)
            closed.append(conn)
            conn = conns[i] = connect(i)
            partial.pop(i, None)
        r = rng.random()
        if r < 0.1:
            apis.answer_some(rng.randrange(1, 3))  # answered outside any read: written at once
            continue
        if r < 0.15:
            time.sleep(rng.choice([1, 10, 60]))  # throttles end
            continue
        if r < 0.18:
            (conn.pause_writing if not conn.flow.write_paused else conn.resume_writing)()
            continue
        data = partial.pop(i, b"")
        for _ in range(rng.choice([1, 1, 1, 1, 2, 3])):
            cid += 1
            bad = rng.random()
            if bad < 0.005:
                data += struct.pack(">i", 3) + b"abc"  # an unreadable header
            elif bad < 0.01:
                data += request(32000, cid)  # an api key no API has
            else:
                data += request(rng.choice([0, 1, 3, 18]), cid, b"x" * rng.randrange(0, 40))
        if rng.random() < 0.15:
            cut = rng.randrange(1, len(data))
            data, partial[i] = data[:cut], data[cut:]
        conn.data_received(data)
    state = [(c.closed, c.throttled, c.flow.read_paused, c.inflight, c.last_active_ms)
             for c in closed + conns]
    for conn in conns:
        if not conn.closed:
            conn.connection_lost(None)  # (what is still parked is cancelled: logged)
    if server.metrics is not None:
        state.append([(s.name, s.labels, s.value) for family in server.metrics.collect() for s in family.samples])
    return log, state


@pytest.mark.parametrize("metrics", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_the_fast_paths_do_what_the_general_path_does(seed, metrics, monkeypatch):
    fast = run(seed, metrics, False, monkeypatch)
    general = run(seed, metrics, True, monkeypatch)
    assert fast == general
    log = fast[0]
    assert sum(1 for e in log if e[1:2] in (("writelines",), ("write",))) > 20  # answers went out
    assert any(e[1:2] == ("pause",) for e in log)
    assert ("drained",) in log
