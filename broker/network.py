"""The socket server: one ``asyncio.Protocol`` per connection over the sans-I/O framer.

Per connection:

* ``data_received`` feeds the ``Framer``; a size over socket.request.max.bytes closes the
  connection before anything is allocated for it.
* Each frame's header is parsed (hand-written codec) and the request handed to the
  dispatcher (``KafkaApis`` in the broker) with a ``RequestContext``. Requests are
  processed as they arrive — so appends to a partition happen in request order — and may
  finish later (a Fetch long-poll, an acks=-1 Produce).
* Responses go out strictly in request order: each request takes a slot in a deque, and
  the head of the deque is written as soon as its response is ready. A request that needs
  no response (acks=0 Produce) frees its slot without writing.
* Flow control (``FlowControl``, after uvicorn's): reading pauses while too many requests
  are in flight (queued.max.requests) or the transport's write buffer is over its
  high-water mark, and resumes when both clear.
* Memory (``RequestMemoryPool``, Kafka's queued.max.request.bytes): bytes of requests read
  but not processed are bounded for the whole broker; when the pool is used up, reading
  stops on every connection not in the middle of a granted frame until it drains.
* Connections give everything back: a client that closes (EOF) is closed at once and its
  requests still waiting (a parked long-poll) are cancelled; connections.max.idle.ms closes
  idle connections and ones stuck in the middle of a frame (Kafka's Selector LRU).
* Bad input never reaches other connections: a frame that cannot be parsed closes only
  this connection, with one log line.
* Security, per listener (broker/security/links.py starts them): a TLS listener's connection
  first does its handshake through the event loop's TLS (``loop.start_tls``, ``TlsHandshake``):
  a handshake that fails, or is not done within TLS_HANDSHAKE_TIMEOUT_S, is a failed
  authentication (counted, one line); a client that leaves in the middle is a disconnection.
  Then its ``KafkaConnection`` takes the TLS transport, and its principal comes from a client
  certificate mapped by ``ssl.principal.mapping.rules``; on a SASL listener each connection's requests pass through
  its SASL state machine first (``KafkaConnection.sasl``, broker/security/sasl_server.py). A PLAINTEXT
  connection pays one attribute check per request for all of it.
* Client quotas (KIP-219): a request that earns a throttle time is answered at once, with the
  time in the response, and then ``throttle(ms)`` mutes the connection: it reads nothing, and
  requests already read behind that one wait, until a timer on the injected clock unmutes it
  — so a client that ignores throttle_time_ms gains nothing.
* Metrics (when the server has ``RequestMetrics``): each request's slot carries the clock
  readings of its phases (read, start, handler returned, response ready, handed to the
  socket) and its API's stats, bound once; the stats are updated when the slot leaves the
  deque. Per listener: connections accepted and closed, bytes in and out.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import socket
import ssl
import sys
from typing import TYPE_CHECKING, Any, Callable, Protocol

from protocol.client import SYSTEM_TIME
from protocol.clock import Time, TimerHandle
from protocol.errors import RemoteProtocolError
from protocol.framing import FrameTooLarge, Framer, NegativeFrameSize
from protocol.fast_codecs import RequestHeader, parse_header
from protocol.messages import APIS, REQUEST_FLEXIBLE_VERSIONS

from .metrics import ListenerStats, Meter, RequestMetrics, SlotTimes
from .security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from .security.principal_mapper import SslPrincipalMapper

log = logging.getLogger("kbroker.network")


class RequestDispatcher(Protocol):
    """Whoever answers requests (KafkaApis). ``handle`` answers through the context now or
    later; raising RemoteProtocolError closes the connection (the request was unanswerable)."""

    def handle(self, ctx: "RequestContext") -> None: ...


class FlowControl:
    """One connection's flow control (uvicorn's FlowControl).

    Reading: ``pause_reading`` / ``resume_reading`` are idempotent, so every reason to pause
    can call them without tracking who paused first. Writing: the transport's
    ``pause_writing`` / ``resume_writing`` callbacks land here as ``write_paused`` and an
    event a writer can await (``drain``) until the write buffer is below its low-water mark.
    """

    __slots__ = ("_transport", "read_paused", "write_paused", "_writable")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        self._writable = asyncio.Event()
        self._writable.set()

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        if not self.write_paused:
            self.write_paused = True
            self._writable.clear()

    def resume_writing(self) -> None:
        if self.write_paused:
            self.write_paused = False
            self._writable.set()

    async def drain(self) -> None:
        """Return once the transport accepts writes again (at once if it does now)."""
        await self._writable.wait()


SMALL_REQUEST_BYTES = 64 << 10  # frames this small may use the pool's reserve when it is used up


class RequestMemoryPool:
    """Kafka's request memory pool (``queued.max.request.bytes``): bytes of requests read
    from sockets but not yet processed, across all connections.

    A connection reading a frame reserves the frame's whole size once its size prefix is in
    (Kafka's non-strict pool: granted while anything is left, so one frame may overshoot).
    When the pool is used up, every connection that holds no grant stops reading past a
    size prefix (Kafka mutes every channel not in the middle of an allocated receive); those
    with a grant keep reading, finish their frame and give it back. So that well-behaved
    clients are still served while large frames hog the pool, a frame of at most
    SMALL_REQUEST_BYTES whose prefix is in may take a grant from a small reserve
    (``reserve_limit``, an eighth of the pool) instead. Reading resumes everywhere once the
    pool has room again. A connection that never finishes its frame holds its grant until
    connections.max.idle.ms closes it. Memory held: at most the pool, one frame over it, the
    reserve, and a size prefix per connection."""

    __slots__ = ("limit", "used", "reserve_limit", "reserve_used", "exhausted", "_server")

    def __init__(self, limit: int, server: "SocketServer") -> None:
        self.limit = limit
        self.used = 0
        self.reserve_limit = max(SMALL_REQUEST_BYTES, limit // 8)
        self.reserve_used = 0
        self.exhausted = False
        self._server = server

    @property
    def available(self) -> int:
        return self.limit - self.used

    def update(self) -> None:
        if not self.exhausted and self.used >= self.limit:
            self.exhausted = True
            log.warning("queued.max.request.bytes=%d reached (%d bytes of requests read and not processed): "
                        "reading pauses until it drains", self.limit, self.used)
            for conn in self._server.connections:
                if not conn.granted:
                    conn.set_memory_paused(True)
        elif self.exhausted and self.used < self.limit:
            self.exhausted = False
            log.info("request memory drained (%d of %d bytes): reading resumes", self.used, self.limit)
            for conn in list(self._server.connections):
                conn.set_memory_paused(False)


class RequestContext(SlotTimes):
    """What a handler gets: the header, the frame (a writable bytearray) and a way to answer.

    It is also the request's slot in its connection's queue of answers (``_pending``): whether
    it is answered (``done``), its answer until written (``response``), what drops the work still
    waiting for it (``cancel``), and SlotTimes' fields (broker/metrics.py; C where built: t_read,
    t_start, t_local, t_ready, request and stats, the API's RequestStats when metrics are on),
    which the connection's Meter sets (all of them, in begin) and reads without an attribute
    access each. (One object per request, not a slot and a context: issue 29.)"""

    __slots__ = ("header", "frame", "connection", "done", "response", "cancel")

    def __init__(self, header: RequestHeader, frame: bytearray, connection: "KafkaConnection") -> None:
        self.header = header
        self.frame = frame
        self.connection = connection
        self.done = False
        self.response: Any = None  # bytes, or a list of buffers for writelines
        self.cancel: Callable[[], object] | None = None  # drops the work still waiting for this answer
        self.stats: Any = None  # the API's RequestStats when metrics are on (Meter.begin)

    @property
    def _slot(self) -> "RequestContext":
        return self  # (the slot and the context are one object)

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def body_offset(self) -> int:
        return self.header.size

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def peer(self) -> str:
        return self.connection.peer

    @property
    def listener_name(self) -> str:
        return self.connection.listener_name

    @property
    def principal(self) -> KafkaPrincipal:
        """Who sent the request: the connection's authenticated principal (User:ANONYMOUS
        on a listener without authentication)."""
        return self.connection.principal

    @property
    def client_host(self) -> str:
        """The client's address without the port (what ACLs' host field is matched with)."""
        return self.connection.client_host

    @property
    def answered(self) -> bool:
        return self.done

    def on_cancel(self, cancel: Callable[[], object]) -> None:
        """``cancel()`` runs if the connection closes before this request is answered (a parked
        Fetch long-poll or acks=-1 Produce is dropped with it, Kafka's SocketServer way)."""
        if not self.done:
            self.cancel = cancel

    def send_response(self, response) -> None:
        """Answer with a whole frame: bytes, or a list of buffers (size prefix included)."""
        if self.done:
            return
        self.done = True
        self.cancel = None  # answered: nothing left to cancel (see ``_flush``)
        conn = self.connection
        meter = conn._meter
        if meter is not None:
            # An answer while its handler ran leaves t_local 0: no remote time. The reading is
            # also where the next request of the read starts, and the flush's t_sent.
            meter.ready(self)
        # The oldest answer awaited (a closed connection awaits none: its queue is empty), while
        # a read is processed (SocketServer.corked: every answer at low and half load, issue 29),
        # joins the read's writes at once: _flush's work for it, inline. Any other: _flush.
        pending = conn._pending
        out = conn._out
        if (not pending or pending[0] is not self or response is None
                or (out is None and conn.server.corked is None)):
            self.response = response
            conn._flush()
            return
        if out is None:
            out = conn._out = []
            conn.server.corked.append(conn)  # type: ignore[union-attr]
        pending.popleft()
        if meter is not None:
            try:
                meter.finish(self, response)  # + the listener's bytes out
            except Exception:  # (as _flush: the answer still goes)
                conn.server.request_stats_failed()
        if response.__class__ is list:
            out.extend(response)
        else:
            out.append(response)
        if pending and pending[0].done:
            conn._flush()  # the answers behind it that were ready (and what _flush does after)
            return
        if conn.flow.read_paused:  # (answers are written through its transport: connection_made ran)
            conn._update_reading()
        if conn.server._drained is not None and not pending:
            conn.server.connection_idle()

    def send_no_response(self) -> None:
        if self.done:
            return
        self.done = True
        self.cancel = None
        conn = self.connection
        meter = conn._meter
        if meter is not None:
            meter.ready(self)
        conn._flush()

    def close_connection(self, reason: str) -> None:
        self.done = True
        self.connection.close(reason)


_CLOSED_FRAMER = Framer(0)  # what a closed connection holds instead of its buffer


_READ_BUFFER_SIZE = 256 << 10
_PAUSED_READ = 4

# SO_RCVLOWAT while a plaintext request is incomplete (KafkaConnection._update_lowat): the kernel
# wakes the loop for the socket only once this many more bytes are queued (or at EOF, an error,
# memory pressure or a nearly closed window: Linux's tcp_poll and tcp_data_ready), never more than
# the request still lacks, so it cannot wait for bytes that will not come. A request that arrives
# in many segments then costs a wake-up and a read per few segments instead of one per segment
# (TLS connections do not use it: see KafkaConnection). Only a frame still lacking
# LOWAT_MIN_BYTES is worth the setsockopt (and the one that puts it back to 1); at most
# LOWAT_MAX_BYTES, a read buffer's worth (Linux caps it at half the receive buffer anyway).
LOWAT_MIN_BYTES = 4096
LOWAT_MAX_BYTES = _READ_BUFFER_SIZE

# A TLS record carries at most 16 KiB of data (RFC 8446 5.1, RFC 5246 6.2.1); the loop's TLS
# makes records of each buffer it is handed on its own (an SSLObject.write each).
TLS_RECORD_BYTES = 16384


def tls_writes(buffers, record: int = TLS_RECORD_BYTES) -> list:
    """The buffers a TLS connection hands the transport for ``buffers`` (one response's, or
    those of several read together): the same bytes, with each run of small buffers (produce
    answers, a fetch answer's headers) joined into writes of at most a record, and a big buffer
    (a fetch's record data) as it is, not copied.

    Each record costs OpenSSL's work per record on the broker and on the client (librdkafka
    decrypts a record at a time): a read's 11 produce answers were 11 records, now one, 28,900
    instead of 106,100 instructions (bench/tls_records_bench.py); a 200 KB fetch answer costs
    1,414,000 instead of 1,409,000 (this function). Topping a fetch answer's headers up to a
    whole record from its record data would save one more record per answer, but the copy and
    the slicing cost more than the record (1,431,000). (Writing a big answer 64 KiB at a time, so that its head leaves while
    the rest is encrypted, cost the broker more CPU than one write: a syscall, an allocation and
    a client wake-up per part.)"""
    writes: list = []
    run: list = []
    size = 0
    for buf in buffers:
        n = len(buf)
        if n >= record or size + n > record:
            if run:
                writes.append(run[0] if len(run) == 1 else b"".join(run))
                run = []
                size = 0
            if n >= record:
                writes.append(buf)
                continue
        if n:
            run.append(buf)
            size += n
    if run:
        writes.append(run[0] if len(run) == 1 else b"".join(run))
    return writes


class KafkaConnection(asyncio.BufferedProtocol):
    # No SO_RCVLOWAT on TLS connections, TCP_QUICKACK alone (_update_lowat). A client with Nagle
    # on (librdkafka's default) that writes a request in pieces (over TLS a record a message)
    # sends a piece written while an earlier one is unacknowledged only once that one is
    # acknowledged; a mark above what is queued keeps the loop from reading, so nothing flushes
    # the kernel's delayed ACK (40 ms and more). bench/tls_produce_latency.py (confluent-kafka over
    # SASL_SSL, 15 records of 1 KiB then flush, 600 flushes), Nagle on: the mark and TCP_QUICKACK
    # p50 0.27 ms, p90 42.75, p99 44.11; TCP_QUICKACK alone p50 0.17, p90 0.20, p99 0.26. (The mark
    # halved the broker's CPU per record with one request in flight, security_bench --in-flight 1:
    # 6.92 CPU-µs against 12.41, and changed nothing with a full pipeline. It also needed the
    # mark redone on reads that bring no plaintext: a read that leaves the last record partial
    # gives the protocol nothing, and its last bytes could then sit below the mark for good.)

    def __init__(self, server: "SocketServer", listener_name: str) -> None:
        self.server = server
        self.dispatcher = server.dispatcher
        self.listener_name = listener_name
        self.framer = Framer(server.max_request_size)
        self.transport: asyncio.Transport | None = None
        self.flow: FlowControl | None = None
        self.peer = "?"
        self.client_host = "?"
        self._principal: KafkaPrincipal = ANONYMOUS
        # Topics this connection's principal was allowed to write, each with the authorizer's
        # generation when it was: KafkaApis' produce path (an allowed topic costs one lookup of a
        # string). Emptied when the principal changes.
        self.topic_writes: dict[str, int] = {}
        # SASL listeners: the authentication state machine every request passes through
        # first (broker/security/sasl_server.py); None elsewhere.
        self.sasl: Any = None  # a broker.security.sasl_server.SaslServerAuthenticator
        self._pending: collections.deque[RequestContext] = collections.deque()
        self._max_inflight = server.max_inflight
        self.last_active_ms = 0.0  # the injected clock's monotonic ms of the last read or write
        self.reserved = 0  # bytes of the request memory pool this connection holds
        self.granted = False  # ``reserved`` covers the whole frame being read (it may keep reading)
        self.from_reserve = False  # the grant is from the pool's reserve for small frames
        self.memory_paused = False
        # Client quotas (KIP-219): muted until the timer fires; frames read but not yet processed wait
        self.throttled = False
        self._throttle_timer: TimerHandle | None = None
        self._muted_until = 0.0
        self._held_frames: list | None = None
        self._out: list | None = None
        self.tls = False  # a TLS transport: its writes go through tls_writes (connection_made)
        # SO_RCVLOWAT and TCP_QUICKACK (_update_lowat): the setter of this connection's socket
        # (None: not used) and the mark it has
        self._set_lowat: Callable[[int, bool], None] | None = None
        self._lowat = 1
        self.closed = False
        self.metrics: RequestMetrics | None = server.metrics
        self._now = server.now
        self._paused_at = 0  # when reading paused (flow control), for the paused-time metric
        lstats = server.listener_stats.get(listener_name)
        if lstats is None and server.metrics is not None:  # a listener start() did not open (tests)
            lstats = server.listener_stats[listener_name] = ListenerStats(listener_name)
        self.lstats: ListenerStats | None = lstats
        # Metrics on: the connection's clock readings, its requests' stats and its listener's
        # bytes in and out, a call each per read, request start, park, answer and write
        # (broker/metrics.py Meter; C where built).
        self._meter: Any = None
        if server.metrics is not None:
            self._meter = Meter(server.metrics.request_stats, lstats.in_, lstats.out, server.now)

    # -- asyncio.Protocol ------------------------------------------------------------------
    @property
    def principal(self) -> KafkaPrincipal:
        return self._principal

    @principal.setter
    def principal(self, principal: KafkaPrincipal) -> None:
        self._principal = principal
        self.topic_writes.clear()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.flow = FlowControl(transport)
        self.tls = transport.get_extra_info("ssl_object") is not None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.server.send_buffer > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.server.send_buffer)
                if self.server.receive_buffer > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.server.receive_buffer)
            except OSError:
                pass
            if self.server.rcvlowat:
                self._lowat_setup(transport, sock)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
            self.client_host = peer[0]
        # Keep the socket's write buffer from ballooning: pause at 4 MiB, resume at 1 MiB.
        transport.set_write_buffer_limits(high=4 << 20, low=1 << 20)
        self.server.connection_opened(self)
        if self.lstats is not None:
            self.lstats.accepted += 1
        server = self.server
        if server.listener_auth or server.principal_mappers:
            self._authenticate_transport(transport)
        elif self.lstats is not None:
            self.lstats.auth_succeeded += 1  # PLAINTEXT: ready at once (Kafka counts it too)
        pool = self.server.memory_pool
        if pool is not None and pool.exhausted:
            self.set_memory_paused(True)

    def _lowat_setup(self, transport, sock) -> None:
        """The setter of SO_RCVLOWAT (plaintext) and TCP_QUICKACK (TLS) for this connection
        (_update_lowat)."""
        try:
            fd = sock.fileno()
        except (AttributeError, OSError):
            return
        if fd < 0 or getattr(sock, "type", socket.SOCK_STREAM) != socket.SOCK_STREAM:
            return
        if _SET_RCVLOWAT is not None:
            set_rcvlowat = _SET_RCVLOWAT
            self._set_lowat = lambda n, quickack: set_rcvlowat(fd, n, quickack)
        else:  # the reference: through the transport's socket object
            def set_lowat(n: int, quickack: bool) -> None:
                if n:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)
                if quickack:
                    sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)
            self._set_lowat = set_lowat

    def _update_lowat(self) -> None:
        """After a read. Plaintext: have the kernel wake the loop for this socket only once the
        partial request's remaining bytes can be queued (LOWAT_MIN_BYTES...LOWAT_MAX_BYTES), or
        at the next byte. TLS, a request still incomplete: its bytes so far are acknowledged at
        once (TCP_QUICKACK; see the class's comment). (Plaintext clients write a request whole: a
        partial one there is a read that stopped at the buffer's end or a big request in
        segments, with no piece held back for an ACK.)"""
        framer = self.framer
        want = 1
        quickack = False
        if self.tls:
            quickack = framer.buffered > 0
        else:
            missing = framer.missing
            if missing >= LOWAT_MIN_BYTES:
                want = min(missing, LOWAT_MAX_BYTES)
        if want != self._lowat or quickack:
            self._apply_lowat(want, quickack)

    def _apply_lowat(self, value: int, quickack: bool = False) -> None:
        setter = self._set_lowat
        if setter is None:
            return
        try:
            setter(value if value != self._lowat else 0, quickack)  # 0: the mark as it is
        except OSError as exc:  # not a TCP socket after all, or gone: read as before
            log.debug("SO_RCVLOWAT on the connection from %s: %s; not used", self.peer, exc)
            self._set_lowat = None
            return
        self._lowat = value

    def _authenticate_transport(self, transport) -> None:
        """A TLS client certificate's principal (ssl.principal.mapping.rules), and the SASL
        state machine on a SASL listener."""
        auth = self.server.listener_auth.get(self.listener_name)
        mapper = self.server.principal_mappers.get(self.listener_name)
        if mapper is not None and auth is None:
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der:
                from .security.principal_mapper import NoMatchingRule, distinguished_name

                try:
                    self.principal = KafkaPrincipal.user(mapper.name(distinguished_name(der)))
                except (NoMatchingRule, ValueError) as exc:
                    if self.lstats is not None:
                        self.lstats.auth_failed += 1
                    self.close(f"failed authentication on listener {self.listener_name}: {exc}")
                    return
                # Successes at DEBUG, as Kafka logs them (a health check every few seconds is not news).
                log.debug("%s authenticated by its TLS certificate as %s on listener %s", self.peer, self.principal,
                          self.listener_name)
        if auth is not None:
            self.sasl = auth.authenticator(self)
        elif self.lstats is not None:
            self.lstats.auth_succeeded += 1

    def connection_lost(self, exc) -> None:
        if self.transport is None:
            return  # a TLS handshake that never completed (TlsHandshake counts it)
        if self.framer.buffered and not self.closed:
            log.warning("connection from %s closed in the middle of a request (%d bytes of a frame dropped)",
                        self.peer, self.framer.buffered)
        self.closed = True
        if self.lstats is not None:
            self.lstats.closed += 1
            if self.flow is not None and self.flow.read_paused:
                self.lstats.read_paused_ns += self._now() - self._paused_at
        self._release()

    def _release(self) -> None:
        """Give back everything this connection holds: requests still waiting for an answer
        are cancelled (a parked long-poll leaves its purgatory now, not at its timeout)."""
        pending = self._pending
        while pending:
            slot = pending.popleft()
            cancel = slot.cancel
            if cancel is not None and not slot.done:
                slot.done = True
                slot.cancel = None
                try:
                    cancel()
                except Exception:
                    log.exception("cancelling a request of a closed connection from %s failed", self.peer)
        self.framer = _CLOSED_FRAMER
        self._held_frames = None
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        if self.sasl is not None:
            self.sasl.connection_closed()
        pool = self.server.memory_pool
        if pool is not None and self.reserved:
            self._give_back(pool)
            pool.update()
        self.server.connection_closed(self)

    # Reads land in the server's one read buffer (asyncio.BufferedProtocol): the Framer copies
    # out what it keeps, so nothing else is allocated per read. A connection that must not read
    # (the request memory pool is used up) is offered a few bytes only: uvloop starts reading
    # every new connection after connection_made, whatever it asked for.
    def get_buffer(self, sizehint: int) -> memoryview:
        if self.memory_paused:  # up to the size prefix, which decides whether it may go on
            return self.server.read_buffer[:max(1, _PAUSED_READ - self.framer.buffered)]
        if self.from_reserve:  # the rest of its small frame, nothing beyond
            return self.server.read_buffer[:max(1, self.reserved - self.framer.buffered)]
        return self.server.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.server.read_buffer[:nbytes])
        # (reads come after connection_made: a flow)
        if self.flow.read_paused and not self.closed and self.transport.is_reading():
            self.transport.pause_reading()  # paused in connection_made: uvloop has just started reading

    def data_received(self, data: bytes | memoryview) -> None:
        if self.closed:
            return  # its framer is the shared closed one
        server = self.server
        # SocketServer.touch inline; the reading is also the touch of the answers this read
        # writes (flush_corked)
        now = self.last_active_ms = server.time.monotonic_ms()
        try:
            server.connections.move_to_end(self)
        except KeyError:  # (not among them: not opened through the server, as in some tests)
            pass
        meter = self._meter
        if meter is not None:
            meter.read(data)  # t_read and the cursor; the listener's bytes in
        try:
            frames = self.framer.feed(data)
        except (FrameTooLarge, NegativeFrameSize) as exc:
            sasl = self.sasl
            if sasl is not None and not sasl.complete:  # sasl.server.max.receive.size before authentication
                sasl.fail(f"invalid receive size before authentication: {exc}")
                return
            self.close(str(exc))
            return
        if len(frames) != 1 or self.throttled or server.corked is not None:
            # (the general path first: the fast one's block is long, a jump over it costs more)
            if self._held_frames is not None:  # muted (a quota): behind the frames already waiting
                self._held_frames.extend(frames)
            elif frames:  # (none: part of a frame, nothing to process)
                self._process_frames(frames, now)
        else:
            # One whole request, outside any other read (most reads; issue 29): _process_frames'
            # work for it, inline (the general path above is its reference). (Frames are held
            # only while throttled: _unmute clears both.)
            hooks = server.read_hooks
            server.corked = []
            try:
                hooks[0]()
                # _process(frame), inline (its reference; a header it refuses goes there, to be
                # told why)
                frame = frames[0]
                header = parse_header(frame, REQUEST_FLEXIBLE_VERSIONS, RequestHeader)
                if header.__class__ is str or header.api_key not in APIS:
                    self._process(frame)
                else:
                    ctx = RequestContext(header, frame, self)
                    if meter is not None:
                        meter.begin(ctx, header.api_key, header.api_version, frame)
                    pending = self._pending
                    pending.append(ctx)
                    sasl = self.sasl
                    try:
                        if sasl is None:
                            self.dispatcher.handle(ctx)
                        else:
                            sasl.handle(ctx)
                    except RemoteProtocolError as exc:
                        self.close(f"api_key={header.api_key} v{header.api_version} "
                                   f"correlation_id={header.correlation_id}: {exc}")
                    except Exception:
                        log.exception("unexpected error handling api_key=%d v%d from %s; closing the connection",
                                      header.api_key, header.api_version, self.peer)
                        self.close("internal error")
                    else:
                        if not ctx.done:  # parked (see _process)
                            if meter is not None:
                                meter.parked(ctx)
                            if len(pending) >= self._max_inflight:
                                self._update_reading()
            finally:
                try:
                    hooks[1]()
                except Exception:
                    log.exception("unexpected error at the end of a read from %s", self.peer)
                finally:
                    corked = server.corked
                    if corked:
                        if self._out is not None and corked[0] is not self:
                            # this connection's answers leave first, as _process_frames has them
                            corked.remove(self)
                            corked.insert(0, self)
                        server.flush_corked(now)
                    else:  # (nothing to write: a read whose request parked)
                        server.corked = None
        if server.memory_pool is not None and not self.closed:
            self._account_memory(bool(frames))
        # (a read that filled the buffer with the mark at 1: the rest is queued already; the
        # framer does not gather: what it buffers is its ``partial``)
        # (the mark at 1 and nothing buffered, most reads: decided by the first two tests)
        if ((self._lowat != 1 or self.framer.partial) and self._set_lowat is not None and not self.closed
                and (self._lowat != 1 or len(data) < _READ_BUFFER_SIZE)):
            self._update_lowat()

    def _process_frames(self, frames: list, now: float) -> None:
        # Responses that are ready while this read is processed leave in one writev per
        # connection, once the read is done: this connection's, and those of other connections
        # that its requests completed (a follower's fetch moving the high watermark answers
        # acks=all produces on every producer's connection; a produce answers followers' parked
        # fetches). SocketServer.corked holds the connections with answers waiting.
        # The outer read also runs the server's read hooks (ReplicaManager.begin_read/end_read:
        # the fetches parked on the partitions its produces appended to are tried once, at its
        # end, before the answers are written, so theirs leave in the same batch). A call made
        # while a read is processed (corked already set) is part of that read: no hooks of its own.
        # ``now``: the clock's monotonic_ms when the read came (what the answers' writes touch).
        # The reading connection joins ``corked`` first, so that its answers leave first (the
        # order of the writes decides a simulated run's interleaving); another joins with its
        # first answer (_flush, send_response). data_received's one-request read joins it at
        # the end, in front, if it answered (a read whose request parked writes nothing).
        server = self.server
        outer = server.corked is None
        hooks = server.read_hooks if outer else None
        if outer:
            server.corked = []
        if self._out is None:  # (its answers leave first)
            self._out = []
            server.corked.append(self)  # type: ignore[union-attr]
        try:
            if hooks is not None:
                hooks[0]()
            for i, frame in enumerate(frames):
                if self.closed:
                    return
                if self.throttled:  # a request just earned a throttle: the rest wait for the unmute
                    self._held_frames = list(frames[i:])
                    break
                self._process(frame)
        finally:
            if outer:
                try:
                    if hooks is not None:
                        hooks[1]()
                except Exception:
                    log.exception("unexpected error at the end of a read from %s", self.peer)
                finally:
                    server.flush_corked(now)

    def throttle(self, ms: int) -> None:
        """Mute this connection for ``ms`` (a client quota's throttle time, KIP-219): no reads,
        no requests processed, until the timer fires. A longer throttle earned meanwhile
        extends it."""
        if ms <= 0 or self.closed:
            return
        now = self.server.time.monotonic_ms()
        if self._throttle_timer is not None:
            if now + ms <= self._muted_until:
                return
            self._throttle_timer.cancel()
        self.throttled = True
        self._muted_until = now + ms
        self._throttle_timer = self.server.time.schedule(ms, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._throttle_timer = None
        self.throttled = False
        if self.closed:
            return
        held, self._held_frames = self._held_frames, None
        if held:
            # reading may resume now (a parked request looks at reading only at the in-flight
            # limit: see _process); the held requests may pause it again
            self._update_reading()
            self._process_frames(held, self.server.time.monotonic_ms())
        self._update_reading()

    def _account_memory(self, completed: bool) -> None:
        """After a read: reserve (or give back) pool memory for the partial frame now buffered."""
        pool = self.server.memory_pool
        assert pool is not None
        framer = self.framer
        pending = framer.pending_frame_size
        if self.granted and not completed and pending == self.reserved:
            return  # still reading the frame it holds a grant for
        self._give_back(pool)
        if not pending:
            pass
        elif pool.used < pool.limit:
            self.reserved, self.granted = pending, True
            pool.used += pending
        elif (framer.buffered >= 4 and pending <= SMALL_REQUEST_BYTES
              and pool.reserve_used + pending <= pool.reserve_limit):
            self.reserved, self.granted, self.from_reserve = pending, True, True
            pool.reserve_used += pending
        else:
            self.reserved = framer.buffered  # no grant: what it read, and it stops reading
            pool.used += self.reserved
        pool.update()
        self.set_memory_paused(pool.exhausted and not self.granted)
        self._update_reading()  # whether a paused connection reads on depends on its prefix being in

    def _give_back(self, pool: RequestMemoryPool) -> None:
        if self.reserved:
            if self.from_reserve:
                pool.reserve_used -= self.reserved
            else:
                pool.used -= self.reserved
        self.reserved, self.granted, self.from_reserve = 0, False, False

    def set_memory_paused(self, paused: bool) -> None:
        if self.memory_paused != paused:
            self.memory_paused = paused
            self._update_reading()

    def eof_received(self):
        # The client closed its side: close ours at once (Kafka's Selector does); requests still
        # in flight are cancelled in connection_lost and their answers dropped.
        return False

    def pause_writing(self) -> None:
        self.flow.pause_writing()
        self._update_reading()

    def resume_writing(self) -> None:
        self.flow.resume_writing()
        self._update_reading()

    # -- requests ------------------------------------------------------------------------
    def _process(self, frame: bytearray) -> None:
        header = parse_header(frame, REQUEST_FLEXIBLE_VERSIONS, RequestHeader)  # or why it is unreadable
        if header.__class__ is str:
            self.close(f"unreadable request header: {header}")
            return
        if header.api_key not in APIS:
            # Kafka's ApiKeys.forId fails while parsing the header: InvalidRequestException, the
            # connection closed without a response, and nothing counted for a key no API has.
            self.close(f"unknown api key {header.api_key} (correlation_id={header.correlation_id})")
            return
        ctx = RequestContext(header, frame, self)
        meter = self._meter
        if meter is not None:
            # Any int16 arrives here: a negative version, or one past the table, counts as "other".
            # Whether the version is served is the dispatcher's to answer (ApiVersions: an
            # UNSUPPORTED_VERSION v0 response; any other API: the connection closed).
            # Every served key's stats are bound up front. begin: the version counted, and the slot
            # given its API's stats, the read's clock reading, its start (when the requests before
            # it in this read were done with) and its frame (its size, read at finish).
            meter.begin(ctx, header.api_key, header.api_version, frame)
        pending = self._pending
        pending.append(ctx)
        sasl = self.sasl
        try:
            if sasl is None:
                self.dispatcher.handle(ctx)
            else:
                sasl.handle(ctx)
        except RemoteProtocolError as exc:
            self.close(f"api_key={header.api_key} v{header.api_version} correlation_id={header.correlation_id}: {exc}")
            return
        except Exception:
            log.exception("unexpected error handling api_key=%d v%d from %s; closing the connection",
                          header.api_key, header.api_version, self.peer)
            self.close("internal error")
            return
        if not ctx.done:  # parked (a purgatory) or answered later
            if meter is not None:
                meter.parked(ctx)
            # The one reason to pause reading a parked request adds is the requests in flight.
            # Every other one pauses reading when it arises (pause_writing, throttle,
            # set_memory_paused, _account_memory after each read), and whatever lifts one looks
            # again (resume_writing, _unmute, the memory pool, an answer written while reading is
            # paused: _flush, send_response, flush_corked): below the limit, _update_reading
            # would change nothing here (a call per parked fetch and acks=all produce, issue 29).
            if len(pending) >= self._max_inflight:
                self._update_reading()

    def _flush(self) -> None:
        """Write the answers ready in request order. With metrics on, the Meter's last reading
        (the ready() of the answer that triggered the flush) is their t_sent."""
        pending = self._pending
        meter = self._meter
        out = self._out
        if out is None:
            corked = self.server.corked
            if corked is not None and pending and pending[0].done:
                # answered while another connection's read is processed: written with the
                # others when that read is done (_process_frames)
                out = self._out = []
                corked.append(self)
        wrote = False
        while pending and pending[0].done:
            slot = pending.popleft()
            # The buffers go to the transport and leave the slot: whatever still holds the
            # request's context (a completed delayed operation a purgatory drops lazily, the
            # operation's own callback) must not hold its answer, whose record slices keep the
            # segment's mapping, hence a descriptor, open (file_records.py: a mapping with
            # exports cannot close). Likewise an answered slot keeps no ``cancel``: it held the
            # delayed operation, whose callback holds the context, hence the slot (a cycle only
            # a full collection frees).
            response, slot.response = slot.response, None
            if meter is not None:
                try:
                    meter.finish(slot, response)  # + the listener's bytes out
                except Exception:  # the slot is popped: a metric must not keep its answer from the client
                    self.server.request_stats_failed()
            if response is None or self.closed:
                continue
            if out is not None:  # inside data_received: written once the whole read is processed
                if isinstance(response, list):
                    out.extend(response)
                else:
                    out.append(response)
            elif self.tls:
                self.write_out(response if isinstance(response, list) else [response])
                wrote = True
            elif isinstance(response, list):
                self.transport.writelines(response)
                wrote = True
            else:
                self.transport.write(response)
                wrote = True
        if wrote:
            self.server.touch(self)
        if wrote or (self.flow is not None and self.flow.read_paused):
            self._update_reading()
        if not pending and self.server._drained is not None:  # connection_idle, called only when someone waits
            self.server.connection_idle()

    def _update_reading(self) -> None:
        flow = self.flow
        if self.closed or flow is None:
            return
        if (flow.write_paused or self.throttled or (self.memory_paused and self.framer.buffered >= _PAUSED_READ)
                or len(self._pending) >= self._max_inflight):
            if not flow.read_paused and self.metrics is not None:
                self._paused_at = self._now()
            flow.pause_reading()
        elif flow.read_paused:  # (resume_reading is idempotent: not called when reading, most calls)
            if self.metrics is not None:
                self.lstats.read_paused_ns += self._now() - self._paused_at
            flow.resume_reading()

    def close(self, reason: str | None = None) -> None:
        if self.closed:
            return
        if reason:
            log.warning("closing connection from %s: %s", self.peer, reason)
        self.closed = True
        if self.transport is not None:
            if self._lowat != 1:  # whatever the peer still sends wakes the loop during the close
                self._apply_lowat(1)
            self._set_lowat = None
            out, self._out = self._out, None
            if out:  # answers of earlier requests, held for the end of a read: they go first
                self.write_out(out)
            self.transport.close()
        self._release()

    def write_out(self, buffers: list) -> None:
        """Hand ``buffers`` to the transport: a writev on plaintext; on TLS, whole records
        (tls_writes)."""
        self.transport.writelines(tls_writes(buffers) if self.tls else buffers)

    @property
    def inflight(self) -> int:
        return len(self._pending)


def _no_read_hook() -> None:
    pass


class SocketServer:
    """The listeners. Knows every connection it accepted (for shutdown and metrics)."""

    def __init__(self, dispatcher: RequestDispatcher, *, max_request_size: int, max_inflight: int,
                 send_buffer: int = -1, receive_buffer: int = -1, time: Time = SYSTEM_TIME,
                 connections_max_idle_ms: int = -1, queued_max_request_bytes: int = -1,
                 metrics: RequestMetrics | None = None, now: Any = None) -> None:
        """``metrics``: per-API stats to keep (None: none); ``now``: the injected clock's
        nanoseconds, which the request phases are measured with."""
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.now = now
        self.listener_stats: dict[str, ListenerStats] = {}
        self.max_request_size = max_request_size
        self.max_inflight = max_inflight
        self.send_buffer = send_buffer
        # SO_RCVLOWAT while a request is incomplete (KafkaConnection._update_lowat): Linux's TCP
        # honours it in poll and in its wake-ups; elsewhere its meaning differs, so it is not used.
        self.rcvlowat = sys.platform.startswith("linux") and hasattr(socket, "SO_RCVLOWAT")
        self.receive_buffer = receive_buffer
        self.time = time
        self.connections_max_idle_ms = connections_max_idle_ms
        # Every open connection, least recently active first (Kafka's Selector keeps this LRU
        # for connections.max.idle.ms).
        self.connections: collections.OrderedDict[KafkaConnection, None] = collections.OrderedDict()
        self.servers: list[tuple[str, Any]] = []  # asyncio servers; TlsListener for TLS listeners
        self._drained: asyncio.Event | None = None  # set while someone waits for in-flight requests
        self._idle_timer: TimerHandle | None = None
        self.idle_closed = 0
        self.request_stats_failures = 0  # RequestStats.finish raising (logged the first time)
        self.memory_pool = RequestMemoryPool(queued_max_request_bytes, self) if queued_max_request_bytes > 0 else None
        self.read_buffer = memoryview(bytearray(_READ_BUFFER_SIZE))  # every read lands here first
        # While a read is processed: the connections whose answers wait to be written when it is
        # done (KafkaConnection._process_frames); None otherwise.
        self.corked: list[KafkaConnection] | None = None
        # (begin, end): called around each outer read's requests (KafkaConnection._process_frames),
        # end before the corked answers are written, even when a request raised (none by default).
        self.read_hooks: tuple[Callable[[], None], Callable[[], None]] = (_no_read_hook, _no_read_hook)
        # Security, per listener name (start() fills them from the listener's ListenerSecurity).
        self.listener_auth: dict[str, Any] = {}  # SASL listeners: their ListenerAuthentication
        self.principal_mappers: dict[str, "SslPrincipalMapper"] = {}  # TLS listeners
        self.tls_contexts: dict[str, ssl.SSLContext] = {}
        self.handshakes: set[TlsHandshake] = set()  # TLS connections still in their handshake
        self.tls_handshake_timeout_s = TLS_HANDSHAKE_TIMEOUT_S

    def request_stats_failed(self) -> None:
        """A request's stats could not be recorded (RequestStats.finish raised): counted, and
        logged with its traceback the first time only (it would repeat for every answer)."""
        self.request_stats_failures += 1
        if self.request_stats_failures == 1:
            log.exception("recording a request's metrics failed (logged once; the answer is still written)")

    # -- connections ------------------------------------------------------------------------
    def connection_opened(self, conn: KafkaConnection) -> None:
        conn.last_active_ms = self.time.monotonic_ms()
        self.connections[conn] = None
        if self._idle_timer is None and 0 < self.connections_max_idle_ms < 2**62:
            self._schedule_idle_check()

    def connection_closed(self, conn: KafkaConnection) -> None:
        self.connections.pop(conn, None)
        self.connection_idle()

    def flush_corked(self, now: float) -> None:
        """Write what the connections in ``corked`` have waiting, one writev each (see
        KafkaConnection._process_frames), and stop corking. ``now``: the read's clock reading
        (monotonic_ms), each writing connection's touch (the writes follow the read at once)."""
        corked, self.corked = self.corked, None
        if not corked:
            return
        connections = self.connections
        for conn in corked:
            out, conn._out = conn._out, None
            if out and not conn.closed:
                conn.transport.writelines(tls_writes(out) if conn.tls else out)  # write_out, inline
                conn.last_active_ms = now  # touch, with the read's reading
                try:
                    connections.move_to_end(conn)
                except KeyError:
                    pass
                if conn.flow.read_paused:  # (it has written through its transport: connection_made ran)
                    # A write only lets a paused read resume (its answers left _pending); what
                    # pauses reading calls _update_reading itself (pause_writing, throttle, _process).
                    conn._update_reading()

    def touch(self, conn: KafkaConnection) -> None:
        """``conn`` read or wrote: it goes to the back of the idle order."""
        conn.last_active_ms = self.time.monotonic_ms()
        connections = self.connections
        if conn in connections:
            connections.move_to_end(conn)

    def _schedule_idle_check(self) -> None:
        interval = max(1.0, min(self.connections_max_idle_ms / 4, 1000.0))
        self._idle_timer = self.time.schedule(interval, self.close_idle_connections)

    def close_idle_connections(self) -> int:
        """Kafka's connections.max.idle.ms: close every connection that has neither read nor
        written for that long — idle ones and ones stuck in the middle of a frame alike. One
        waiting for its own requests' answers (a long-poll) is not idle. Runs on a timer."""
        self._idle_timer = None
        now = self.time.monotonic_ms()
        limit = self.connections_max_idle_ms
        closed = 0
        for conn in list(self.connections):
            idle_ms = now - conn.last_active_ms
            if idle_ms < limit:
                break  # the rest are more recent
            if conn.inflight and not conn.framer.buffered:
                self.touch(conn)  # waiting for the broker, not for the client
                continue
            closed += 1
            if conn.framer.buffered:
                conn.close(f"stuck in the middle of a request ({conn.framer.buffered} bytes of a frame) for "
                           f"{idle_ms:.0f} ms (connections.max.idle.ms={limit})")
            else:
                log.info("closing connection from %s: idle for %.0f ms (connections.max.idle.ms=%d)",
                         conn.peer, idle_ms, limit)
                conn.close()
        self.idle_closed += closed
        if self.connections and 0 < limit < 2**62:
            self._schedule_idle_check()
        return closed

    async def start(self, listener_name: str, host: str, port: int, tls: ssl.SSLContext | None = None,
                    principal_mapper: "SslPrincipalMapper | None" = None, authentication: Any = None,
                    avoid_ports: frozenset[int] = frozenset()) -> int:
        """Listen on ``host:port``: TLS with ``tls`` (a client certificate's principal mapped
        by ``principal_mapper``), SASL with ``authentication`` (broker/security/sasl_server.py's
        ListenerAuthentication: ``authenticator(connection)`` makes a connection's state
        machine); neither is PLAINTEXT (broker/security/links.py's start_listener).

        ``avoid_ports``: with port 0, ports the kernel must not hand out here because another
        listener of this process binds them later (a combined node's controller listener on
        port 0 took the broker's configured port once: the broker then failed to start)."""
        loop = asyncio.get_running_loop()
        if self.metrics is not None:
            self.listener_stats.setdefault(listener_name, ListenerStats(listener_name))
        factory: Callable[[], asyncio.BaseProtocol] = lambda: KafkaConnection(self, listener_name)  # noqa: E731
        server: Any
        if authentication is not None:
            self.listener_auth[listener_name] = authentication
        if tls is not None:
            self.tls_contexts[listener_name] = tls
            tls.sslobject_class = FastSSLObject
            if principal_mapper is not None:
                self.principal_mappers[listener_name] = principal_mapper

        async def listen() -> Any:
            if tls is not None:
                return TlsListener(self, listener_name, host, port)
            return await loop.create_server(factory, host or None, port, reuse_address=True, backlog=1024)

        server = await listen()
        # Held open while binding again, so the kernel cannot hand the same port back.
        held: list[Any] = []
        while port == 0 and server.sockets[0].getsockname()[1] in avoid_ports and len(held) < 16:
            held.append(server)
            server = await listen()
        for unwanted in held:
            unwanted.close()
        self.servers.append((listener_name, server))
        return server.sockets[0].getsockname()[1]

    def tls_handshake_failed(self, listener_name: str, peer: str, why: str) -> None:
        """A TLS handshake failed or timed out: a failed authentication, one line (as Kafka's
        Selector logs "Failed authentication with ... (SSL handshake failed)")."""
        stats = self.listener_stats.get(listener_name)
        if stats is not None:
            stats.auth_failed += 1
        log.info("failed authentication of %s on listener %s: TLS handshake %s", peer, listener_name, why)

    def bound_port(self, listener_name: str | None = None) -> int:
        for name, server in self.servers:
            if listener_name is None or name == listener_name:
                return server.sockets[0].getsockname()[1]
        raise KeyError(listener_name)

    def stop_accepting(self) -> None:
        for _name, server in self.servers:
            server.close()

    async def wait_for_inflight(self, timeout_s: float) -> bool:
        """Wait until no connection has a request in flight (True), or the timeout passes.

        Connections report when their last request in flight is answered (or they close);
        the wait ends on the report that leaves none busy."""
        if not any(c.inflight for c in self.connections):
            return True
        self._drained = drained = asyncio.Event()
        try:
            await asyncio.wait_for(drained.wait(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            self._drained = None

    def connection_idle(self) -> None:
        """A connection has no request in flight any more (answered, or closed)."""
        drained = self._drained
        if drained is not None and not any(c.inflight for c in self.connections):
            drained.set()

    def collect(self):
        """Kafka's socket-server-metrics, per listener (connections counted at scrape time)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        count = GaugeMetricFamily("kafka_server_socket_server_metrics_connections", "Open connections",
                                  labels=["listener"])
        open_by: dict[str, int] = {}
        for conn in self.connections:
            open_by[conn.listener_name] = open_by.get(conn.listener_name, 0) + 1
        families = [(CounterMetricFamily(f"kafka_server_socket_server_metrics_{n}", doc, labels=["listener"]), field)
                    for n, field, doc in (("connection_creation", "accepted", "Connections accepted"),
                                          ("connection_close", "closed", "Connections closed"),
                                          ("incoming_byte", "bytes_in", "Bytes read from clients"),
                                          ("outgoing_byte", "bytes_out", "Bytes of responses written"))]
        families += [(CounterMetricFamily(f"kafka_server_socket_server_metrics_{n}", doc, labels=["listener"]), field)
                     for n, field, doc in (
                         ("successful_authentication", "auth_succeeded", "Connections that authenticated (Kafka "
                          "counts every connection that became ready, PLAINTEXT ones too)"),
                         ("failed_authentication", "auth_failed", "Failed authentications: TLS handshakes and SASL "
                          "exchanges"),
                         ("successful_reauthentication", "reauth_succeeded", "SASL re-authentications (KIP-368)"))]
        paused = CounterMetricFamily("kbroker_network_read_paused_seconds", "Time connections spent with reading "
                                     "paused by flow control (requests in flight at queued.max.requests, or a full "
                                     "write buffer), summed over connections", labels=["listener"])
        for name, stats in sorted(self.listener_stats.items()):
            count.add_metric([name], open_by.get(name, 0))
            for family, field in families:
                family.add_metric([name], getattr(stats, field))
            paused.add_metric([name], stats.read_paused_ns / 1e9)
        yield count
        for family, _field in families:
            yield family
        yield paused

    def close_all(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        for handshake in list(self.handshakes):
            handshake.abort()
        for conn in list(self.connections):
            conn.close()
        for _name, server in self.servers:
            server.close()



# How long a TLS handshake may take; then the connection is closed and counted as a failed
# authentication. Kafka has no key for it (a Kafka broker leaves a stalled handshake to
# connections.max.idle.ms, ten minutes by default, and does not count it): kbroker's is fixed.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


def _tls_helper() -> Any:
    """broker/_tls_read.c, bound to the OpenSSL of the loaded ``_ssl`` module; None without the
    helper (no compiler at install) or when it cannot bind."""
    try:
        import _ssl

        from . import _tls_read
    except ImportError:
        return None
    path = getattr(_ssl, "__file__", None)
    if not path:  # _ssl built into the interpreter: dlopen("") would search the whole process
        return None
    return _tls_read if _tls_read.bind(path) else None


_TLS_HELPER = _tls_helper()
_RECORD_READER: Callable[[Any], Any] | None = _TLS_HELPER.reader_for if _TLS_HELPER is not None else None
_KEEP_BUFFERS: Callable[[Any], bool] | None = _TLS_HELPER.keep_buffers if _TLS_HELPER is not None else None


def _rcvlowat_helper() -> Callable[[int, int, bool], None] | None:
    """broker/_tls_read.c's set_rcvlowat(fd, bytes, quickack) (setsockopts without a socket object
    per call); None without the helper (KafkaConnection then calls the socket object's)."""
    try:
        from . import _tls_read
    except ImportError:
        return None
    return getattr(_tls_read, "set_rcvlowat", None)


_SET_RCVLOWAT = _rcvlowat_helper() if hasattr(socket, "SO_RCVLOWAT") else None
_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", 12)  # linux/tcp.h


class FastSSLObject(ssl.SSLObject):
    """The SSLObject of a TLS listener's connections. uvloop binds ``read``, ``write`` and
    ``pending`` once per connection and calls them for every TLS record: here they are the
    C methods themselves, without ssl.py's Python wrapper frame per call (librdkafka writes a
    TLS record per message: two per 1 KiB record produced). ``read`` is broker/_tls_read.c's
    when it loads: every whole record that fits the buffer in one call (uvloop called ``read``
    once per record, and once more to hear SSLWantReadError), OpenSSL's SSL_read_ex per record
    and nothing else; ``_ssl``'s own read answers whatever is not a record read
    (``use_record_reader`` False: always).

    Its SSL object keeps its read and write buffers (``keep_buffers``, broker/_tls_read.c):
    CPython's _ssl asks OpenSSL to free them whenever they are empty, which without read-ahead
    is after every record read and every write, a malloc and a free of about 17 KB each time;
    kept, a connection holds about 35 KB, as Kafka's SSLTransportLayer holds its buffers.
    A produce request as librdkafka sends it (31 records) cost 276,000 instructions to read
    instead of 288,800 (bench/tls_records_bench.py)."""

    use_record_reader = True
    keep_buffers = True

    @classmethod
    def _create(cls, *args: Any, **kwargs: Any) -> "FastSSLObject":
        self = super()._create(*args, **kwargs)
        sslobj = self._sslobj
        if _KEEP_BUFFERS is not None and cls.keep_buffers:
            _KEEP_BUFFERS(sslobj)
        reader = _RECORD_READER(sslobj) if _RECORD_READER is not None and cls.use_record_reader else None
        self.read = reader if reader is not None else sslobj.read  # type: ignore[method-assign]
        self.write = sslobj.write  # type: ignore[method-assign]
        self.pending = sslobj.pending  # type: ignore[method-assign]
        return self


class TlsListener:
    """A TLS listener: its own accept loop, each accepted socket handed with its handshake to
    the loop's TLS (``loop.connect_accepted_socket(ssl=...)``) in a task, ``TlsHandshake``.
    (``create_server(ssl=...)`` does the handshake out of sight: a handshake that times out
    leaves no trace there, and Kafka counts failed TLS handshakes as failed authentications.)
    Like asyncio's servers: every address ``host`` resolves to (all with None or ""), accepts
    in bursts, and on EMFILE/ENFILE (out of descriptors) stops accepting for a second."""

    ACCEPT_BURST = 100
    RETRY_MS = 1000

    def __init__(self, server: "SocketServer", listener_name: str, host: str | None, port: int) -> None:
        self.server = server
        self.listener_name = listener_name
        self.loop = asyncio.get_running_loop()
        self.sockets: list[socket.socket] = []
        self._retry: TimerHandle | None = None
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        seen = set()
        try:
            for family, type_, proto, _name, address in infos:
                if (family, address) in seen:
                    continue
                seen.add((family, address))
                sock = socket.socket(family, type_, proto)
                self.sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if port == 0 and len(self.sockets) > 1:  # one port for every address
                    address = (address[0], self.sockets[0].getsockname()[1], *address[2:])
                sock.bind(address)
                sock.listen(1024)
                sock.setblocking(False)
        except OSError:
            self.close()
            raise
        self._start_accepting()

    def _start_accepting(self) -> None:
        self._retry = None
        for sock in self.sockets:
            self.loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(self.ACCEPT_BURST):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("listener %s: cannot accept connections (%s); trying again in %d ms",
                              self.listener_name, exc, self.RETRY_MS)
                    for s in self.sockets:
                        self.loop.remove_reader(s.fileno())
                    self._retry = self.server.time.schedule(self.RETRY_MS, self._start_accepting)
                else:
                    log.warning("listener %s: accept failed: %s", self.listener_name, exc)
                return
            conn.setblocking(False)
            TlsHandshake(self.server, self.listener_name, conn, address).start()

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        for sock in self.sockets:
            if sock.fileno() >= 0:
                self.loop.remove_reader(sock.fileno())
                sock.close()


class TlsHandshake:
    """An accepted connection of a TLS listener during its handshake: a task hands the socket
    to the loop's TLS (``loop.connect_accepted_socket``) with a KafkaConnection as the
    protocol, whose connection_made comes once the handshake is done. A handshake that fails
    (a plaintext client, an untrusted or missing client certificate, no common protocol) or
    does not finish within TLS_HANDSHAKE_TIMEOUT_S is a failed authentication, counted and
    logged once; a client that leaves in the middle is only a disconnection (DEBUG), as in Kafka."""

    def __init__(self, server: "SocketServer", listener_name: str, sock: socket.socket, address: Any) -> None:
        self.server = server
        self.listener_name = listener_name
        self.sock = sock
        self.peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else "?"
        self.task: asyncio.Task | None = None
        self.handed = False  # the loop's TLS has the socket (and closes it)

    def start(self) -> None:
        self.server.handshakes.add(self)
        self.task = asyncio.get_running_loop().create_task(self._handshake())

    def abort(self) -> None:
        """Shutdown: give up the handshake, close the socket."""
        self.server.handshakes.discard(self)
        if self.task is not None:
            self.task.cancel()
        if not self.handed:
            self.sock.close()

    async def _handshake(self) -> None:
        server, listener = self.server, self.listener_name
        conn = KafkaConnection(server, listener)
        self.handed = True
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: conn, self.sock, ssl=server.tls_contexts[listener], ssl_handshake_timeout=server.tls_handshake_timeout_s)
        except ssl.SSLError as exc:
            server.tls_handshake_failed(listener, self.peer, f"failed: {exc.reason or exc}")
        except (ConnectionAbortedError, TimeoutError):  # the loop's handshake timeout
            server.tls_handshake_failed(listener, self.peer, f"not completed within {server.tls_handshake_timeout_s:g} s")
        except OSError as exc:
            log.debug("%s left during the TLS handshake on listener %s: %r", self.peer, listener, exc)
        finally:
            server.handshakes.discard(self)
