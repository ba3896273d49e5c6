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
* Bad input never reaches other connections: a frame that cannot be parsed closes only
  this connection, with one log line.
* Metrics (when the server has ``RequestMetrics``): each request's slot carries the clock
  readings of its phases (read, start, handler returned, response ready, handed to the
  socket) and its API's stats, bound once; the stats are updated when the slot leaves the
  deque. Per listener: connections accepted and closed, bytes in and out.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from typing import Any, Protocol

from protocol.errors import RemoteProtocolError
from protocol.framing import FrameTooLarge, Framer, NegativeFrameSize
from protocol.fast_codecs import RequestHeader, parse_request_header
from protocol.messages import request_is_flexible

from .metrics import MAX_VERSION, ListenerStats, RequestMetrics

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


class _Slot:
    __slots__ = ("header", "done", "response", "stats", "t_read", "t_start", "t_local", "t_ready", "size")

    def __init__(self, header: RequestHeader) -> None:
        self.header = header
        self.done = False
        self.response: Any = None  # bytes, or a list of buffers for writelines
        self.stats = None  # the API's ApiStats when metrics are on
        self.t_local = 0
        self.t_ready = 0


class RequestContext:
    """What a handler gets: the header, the frame (a writable bytearray) and a way to answer."""

    __slots__ = ("header", "frame", "connection", "_slot")

    def __init__(self, header: RequestHeader, frame: bytearray, connection: "KafkaConnection", slot: _Slot) -> None:
        self.header = header
        self.frame = frame
        self.connection = connection
        self._slot = slot

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

    def send_response(self, response) -> None:
        """Answer with a whole frame: bytes, or a list of buffers (size prefix included)."""
        slot = self._slot
        if slot.done:
            return
        slot.response = response
        slot.done = True
        if slot.stats is not None:
            slot.t_ready = t = self.connection._now()
            if not slot.t_local:
                slot.t_local = t  # answered while its handler ran: no remote time
            self.connection._flush(t)
            return
        self.connection._flush()

    def send_no_response(self) -> None:
        slot = self._slot
        if slot.done:
            return
        slot.done = True
        if slot.stats is not None:
            slot.t_ready = t = self.connection._now()
            if not slot.t_local:
                slot.t_local = t
            self.connection._flush(t)
            return
        self.connection._flush()

    def close_connection(self, reason: str) -> None:
        self._slot.done = True
        self.connection.close(reason)


class KafkaConnection(asyncio.Protocol):
    def __init__(self, server: "SocketServer", listener_name: str) -> None:
        self.server = server
        self.dispatcher = server.dispatcher
        self.listener_name = listener_name
        self.framer = Framer(server.max_request_size)
        self.transport: asyncio.Transport | None = None
        self.flow: FlowControl | None = None
        self.peer = "?"
        self._pending: collections.deque[_Slot] = collections.deque()
        self._max_inflight = server.max_inflight
        self._eof = False
        self._out: list | None = None
        self.closed = False
        self.requests = 0
        self.metrics: RequestMetrics | None = server.metrics
        self._now = server.now
        self._t_read = 0
        self._t_cursor = 0
        self._paused_at = 0  # when reading paused (flow control), for the paused-time metric
        lstats = server.listener_stats.get(listener_name)
        if lstats is None and server.metrics is not None:  # a listener start() did not open (tests)
            lstats = server.listener_stats[listener_name] = ListenerStats(listener_name)
        self.lstats: ListenerStats | None = lstats

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.flow = FlowControl(transport)
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
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        # Keep the socket's write buffer from ballooning: pause at 4 MiB, resume at 1 MiB.
        transport.set_write_buffer_limits(high=4 << 20, low=1 << 20)
        self.server.connections.add(self)
        if self.lstats is not None:
            self.lstats.accepted += 1

    def connection_lost(self, exc) -> None:
        if self.framer.buffered and not self.closed:
            log.warning("connection from %s closed in the middle of a request (%d bytes of a frame dropped)",
                        self.peer, self.framer.buffered)
        self.closed = True
        self.server.connections.discard(self)
        self._pending.clear()
        if self.lstats is not None:
            self.lstats.closed += 1
            if self.flow is not None and self.flow.read_paused:
                self.lstats.read_paused_ns += self._now() - self._paused_at
        self.server.connection_idle()

    def data_received(self, data: bytes) -> None:
        if self.metrics is not None:
            self._t_read = self._t_cursor = self._now()
            self.lstats.bytes_in += len(data)
        try:
            frames = self.framer.feed(data)
        except (FrameTooLarge, NegativeFrameSize) as exc:
            self.close(str(exc))
            return
        # Responses that are ready while this read is processed leave in one writev.
        self._out = out = []
        try:
            for frame in frames:
                if self.closed:
                    return
                self._process(frame)
        finally:
            self._out = None
            if out and not self.closed:
                self.transport.writelines(out)
                self._update_reading()

    def eof_received(self):
        # The client half-closed: answer what is in flight, then close (returning False closes now).
        if self._pending:
            self._eof = True
            return True
        return False

    def pause_writing(self) -> None:
        self.flow.pause_writing()
        self._update_reading()

    def resume_writing(self) -> None:
        self.flow.resume_writing()
        self._update_reading()

    # -- requests ------------------------------------------------------------------------
    def _process(self, frame: bytearray) -> None:
        try:
            header = parse_request_header(frame, flexible_for=request_is_flexible)
        except RemoteProtocolError as exc:
            self.close(f"unreadable request header: {exc}")
            return
        self.requests += 1
        slot = _Slot(header)
        metrics = self.metrics
        if metrics is not None:
            stats = slot.stats = metrics.api(header.api_key)
            stats.versions[min(header.api_version, MAX_VERSION - 1)] += 1
            slot.t_read = self._t_read
            slot.t_start = self._t_cursor  # when the request before it in this read was done with
            slot.size = len(frame) + 4
        self._pending.append(slot)
        ctx = RequestContext(header, frame, self, slot)
        try:
            self.dispatcher.handle(ctx)
        except RemoteProtocolError as exc:
            self.close(f"api_key={header.api_key} v{header.api_version} correlation_id={header.correlation_id}: {exc}")
            return
        except Exception:
            log.exception("unexpected error handling api_key=%d v%d from %s; closing the connection",
                          header.api_key, header.api_version, self.peer)
            self.close("internal error")
            return
        if metrics is not None:
            if slot.t_ready:  # answered while its handler ran: that reading is when it was done
                self._t_cursor = slot.t_ready
            else:
                self._t_cursor = t = self._now()
                if not slot.t_local:
                    slot.t_local = t  # parked (a purgatory) or answered later
        if not slot.done:
            self._update_reading()

    def _flush(self, now: int = 0) -> None:
        """``now``: the clock reading of the response that triggered the flush (metrics)."""
        pending = self._pending
        out = self._out
        wrote = False
        while pending and pending[0].done:
            slot = pending.popleft()
            response = slot.response
            if slot.stats is not None:
                self._record(slot, response, now or self._now())
            if response is None or self.closed:
                continue
            if out is not None:  # inside data_received: written once the whole read is processed
                if isinstance(response, list):
                    out.extend(response)
                else:
                    out.append(response)
            elif isinstance(response, list):
                self.transport.writelines(response)
                wrote = True
            else:
                self.transport.write(response)
                wrote = True
        if wrote or (self.flow is not None and self.flow.read_paused):
            self._update_reading()
        if not pending:
            if self._eof and not self.closed:
                self.close()
            self.server.connection_idle()

    def _record(self, slot: _Slot, response, now: int) -> None:
        if response is None:
            size = 0
        elif isinstance(response, list):
            size = sum(map(len, response))
        else:
            size = len(response)
        slot.stats.done(slot.t_read, slot.t_start, slot.t_local, slot.t_ready, now, slot.size, size)
        self.lstats.bytes_out += size

    def _update_reading(self) -> None:
        flow = self.flow
        if self.closed or flow is None:
            return
        if flow.write_paused or len(self._pending) >= self._max_inflight:
            if not flow.read_paused and self.metrics is not None:
                self._paused_at = self._now()
            flow.pause_reading()
        else:
            if flow.read_paused and self.metrics is not None:
                self.lstats.read_paused_ns += self._now() - self._paused_at
            flow.resume_reading()

    def close(self, reason: str | None = None) -> None:
        if self.closed:
            return
        if reason:
            log.warning("closing connection from %s: %s", self.peer, reason)
        self.closed = True
        self._pending.clear()
        if self.transport is not None:
            self.transport.close()
        self.server.connection_idle()

    @property
    def inflight(self) -> int:
        return len(self._pending)


class SocketServer:
    """The listeners. Knows every connection it accepted (for shutdown and metrics)."""

    def __init__(self, dispatcher: RequestDispatcher, *, max_request_size: int, max_inflight: int,
                 send_buffer: int = -1, receive_buffer: int = -1, metrics: RequestMetrics | None = None,
                 now: Any = None) -> None:
        """``metrics``: per-API stats to keep (None: none); ``now``: the injected clock's
        nanoseconds, which the request phases are measured with."""
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.now = now
        self.listener_stats: dict[str, ListenerStats] = {}
        self.max_request_size = max_request_size
        self.max_inflight = max_inflight
        self.send_buffer = send_buffer
        self.receive_buffer = receive_buffer
        self.connections: set[KafkaConnection] = set()
        self.servers: list[tuple[str, asyncio.AbstractServer]] = []
        self._drained: asyncio.Event | None = None  # set while someone waits for in-flight requests

    async def start(self, listener_name: str, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        if self.metrics is not None:
            self.listener_stats.setdefault(listener_name, ListenerStats(listener_name))
        server = await loop.create_server(lambda: KafkaConnection(self, listener_name), host or None, port,
                                          reuse_address=True, backlog=1024)
        self.servers.append((listener_name, server))
        return server.sockets[0].getsockname()[1]

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
        for conn in list(self.connections):
            conn.close()
        for _name, server in self.servers:
            server.close()
