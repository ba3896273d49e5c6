"""The simulated network: connections between machines, in memory, on simulated time.

``SimNetwork`` serves the loop's ``create_connection`` and ``create_server`` (sim/loop.py),
so a broker's SocketServer listens and protocol.client's Network connects exactly as on a
real loop. The connecting machine is the calling process's (sim/loop.py ``PROCESS``).

What a connection does, per direction:

* bytes arrive in order, each write after a latency drawn from the seeded PRNG (at least
  the previous write's arrival: TCP keeps order), and, now and then, split in two reads;
* a blocked direction (a partition, symmetric or one-way) holds what is sent, as TCP's
  retransmissions would, and delivers it in order once healed; a connect across a
  partition hangs (SYN retransmitted at 1, 2, 4 ... s) until healed or given up;
* a slow link adds its delay to every write;
* ``close`` delivers what was written, then end-of-file; ``abort`` and a reset fault end
  both sides with ConnectionResetError;
* a process that crashes takes its listeners and connections with it: its peers see the
  connection reset (the kernel closes a killed process's sockets); a machine that lost
  power sends nothing, and a peer learns it only when it writes (reset, from the host
  that no longer knows the connection) or times out.

Reading honours ``pause_reading``: what arrives meanwhile waits. Writes never push back
(``pause_writing`` is never called): buffers are unbounded.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import itertools
from typing import Any, Callable

from .loop import PROCESS, Process, SimLoop

SPLIT_PROBABILITY = 0.05  # a write delivered as two reads
SYN_RETRIES_MAX_S = 64.0  # a connect across a partition is given up after this much backoff (TimeoutError)
ORDER_EPSILON_S = 1e-7  # what separates two arrivals on one direction of a connection


class _Direction:
    """One direction of a connection: its order of arrival and what a partition holds."""

    __slots__ = ("src", "dst", "last_arrival", "held")

    def __init__(self, src: str, dst: str) -> None:
        self.src = src
        self.dst = dst
        self.last_arrival = 0.0
        self.held: collections.deque[Any] = collections.deque()  # data (bytes) or _FIN / _RESET, held by a partition


_FIN = "fin"
_RESET = "reset"


class SimConnection:
    __slots__ = ("id", "client", "server", "closed")

    def __init__(self, conn_id: int) -> None:
        self.id = conn_id
        self.client: SimTransport | None = None
        self.server: SimTransport | None = None
        self.closed = False


class SimTransport(asyncio.Transport):
    def __init__(self, network: "SimNetwork", conn: SimConnection, process: Process | None, machine: str,
                 sockname: tuple[str, int], peername: tuple[str, int], out: _Direction) -> None:
        super().__init__()
        self._network = network
        self._conn = conn
        self.process = process
        self.machine = machine
        self._sockname = sockname
        self._peername = peername
        self._out = out  # the direction this side writes into
        self.peer: SimTransport | None = None
        self._protocol: Any = None
        self._buffered = False
        self._closing = False
        self._lost = False  # connection_lost delivered (or due)
        self._read_paused = False
        self._inbox: collections.deque[Any] = collections.deque()  # arrived while reading was paused
        self._peer_gone = False  # the machine at the other end lost power
        self._context = process.context() if process is not None else None

    # -- asyncio.Transport ---------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._peername
        if name == "sockname":
            return self._sockname
        return default

    def set_protocol(self, protocol: Any) -> None:
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)

    def get_protocol(self) -> Any:
        return self._protocol

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return not self._read_paused and not self._closing

    def pause_reading(self) -> None:
        self._read_paused = True

    def resume_reading(self) -> None:
        if self._read_paused:
            self._read_paused = False
            if self._inbox:
                self._network.loop.call_soon(self._drain_inbox, context=self._context)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def write(self, data: Any) -> None:
        if self._closing or not data:
            return
        self._network._send(self, bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        if self._closing:
            return
        data = b"".join(list_of_data)  # (bytes-like pieces, memoryviews included: one copy)
        if data:
            self._network._send(self, data)

    def write_eof(self) -> None:
        self.close()

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._network._send(self, _FIN)
        self._lose(None)

    def abort(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._network._send(self, _RESET)
        self._lose(None)

    # -- delivery (runs as the receiving process) ------------------------------------------
    def _lose(self, exc: BaseException | None) -> None:
        """connection_lost, once, on the next turn of this side's process."""
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._inbox.clear()
        self._network._forget(self)
        protocol = self._protocol
        if protocol is not None:
            self._network.loop.call_soon(protocol.connection_lost, exc, context=self._context)

    def _arrive(self, item: Any) -> None:
        if self._lost:
            return
        if self._read_paused or self._inbox:
            self._inbox.append(item)
            return
        self._deliver(item)

    def _drain_inbox(self) -> None:
        while self._inbox and not self._read_paused and not self._lost:
            self._deliver(self._inbox.popleft())

    def _deliver(self, item: Any) -> None:
        if item is _FIN:
            protocol = self._protocol
            keep_open = protocol.eof_received() if protocol is not None and hasattr(protocol, "eof_received") else None
            if not keep_open:
                self._lose(None)
            return
        if item is _RESET:
            self._lose(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"))
            return
        protocol = self._protocol
        if not self._buffered:
            protocol.data_received(item)
            return
        view = memoryview(item)
        while view:
            buf = protocol.get_buffer(len(view))
            n = min(len(buf), len(view))
            if n <= 0:
                raise RuntimeError("get_buffer returned an empty buffer")
            buf[:n] = view[:n]
            protocol.buffer_updated(n)
            view = view[n:]
            if view and (self._read_paused or self._lost):
                if not self._lost:
                    self._inbox.appendleft(bytes(view))
                return

    def __repr__(self) -> str:
        return f"<SimTransport conn {self._conn.id} {self._sockname[0]}->{self._peername[0]}>"


class SimSocket:
    def __init__(self, address: tuple[str, int]) -> None:
        self._address = address

    def getsockname(self) -> tuple[str, int]:
        return self._address


class SimServer:
    """What create_server returns: ``sockets[0].getsockname()``, ``close``."""

    def __init__(self, network: "SimNetwork", listener: "_Listener") -> None:
        self._network = network
        self._listener = listener
        self.sockets = [SimSocket((listener.host, listener.port))]

    def close(self) -> None:
        self._network._unlisten(self._listener)

    def is_serving(self) -> bool:
        return not self._listener.closed

    def get_loop(self) -> SimLoop:
        return self._network.loop

    async def wait_closed(self) -> None:
        return None

    async def start_serving(self) -> None:
        return None


class _Listener:
    __slots__ = ("host", "port", "factory", "process", "closed")

    def __init__(self, host: str, port: int, factory: Callable[[], Any], process: Process | None) -> None:
        self.host = host
        self.port = port
        self.factory = factory
        self.process = process
        self.closed = False


class SimNetwork:
    def __init__(self, loop: SimLoop, trace: Any = None) -> None:
        self.loop = loop
        self.rng = loop.rng
        self.trace = trace
        loop.network = self
        self.listeners: dict[tuple[str, int], _Listener] = {}
        self.connections: dict[int, SimConnection] = {}
        self.blocked: set[tuple[str, str]] = set()  # (from machine, to machine): what is sent is held
        self.slow: dict[tuple[str, str], float] = {}  # extra one-way delay, ms
        self.down: set[str] = set()  # machines without power: they answer nothing
        self._ids = itertools.count(1)
        self._ports: dict[str, itertools.count] = {}
        self.base_latency_ms = (0.05, 0.5)
        self.delivered = 0
        self.bytes = 0

    # -- topology faults -------------------------------------------------------------------
    def partition(self, a: str, b: str, one_way: bool = False) -> None:
        """Block a→b (and b→a unless ``one_way``)."""
        self.blocked.add((a, b))
        if not one_way:
            self.blocked.add((b, a))

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Unblock a→b and b→a (everything, without arguments); held bytes go on in order."""
        pairs = list(self.blocked) if a is None else [(a, b), (b, a)]
        for pair in pairs:
            self.blocked.discard(pair)
        for conn in list(self.connections.values()):
            for side in (conn.client, conn.server):
                if side is not None and side._out.held and (side._out.src, side._out.dst) not in self.blocked:
                    held = list(side._out.held)
                    side._out.held.clear()
                    for item in held:
                        self._schedule(side, item)

    def set_slow(self, a: str, b: str, extra_ms: float) -> None:
        if extra_ms > 0:
            self.slow[(a, b)] = extra_ms
        else:
            self.slow.pop((a, b), None)

    def reset(self, conn_id: int) -> None:
        """Both ends of a connection see it reset (the far one after a latency)."""
        conn = self.connections.get(conn_id)
        if conn is None:
            return
        for side in (conn.client, conn.server):
            if side is not None and not side._lost:
                side._closing = True
                side._lose(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer (simulated)"))
        self._event("reset", f"conn {conn_id}")

    def process_died(self, process: Process, power_loss: bool) -> None:
        """A process crashed: its listeners go; its connections' peers see a reset (from the
        kernel of a killed process), or nothing at all from a machine that lost power."""
        for key, listener in list(self.listeners.items()):
            if listener.process is process:
                listener.closed = True
                del self.listeners[key]
        for conn in list(self.connections.values()):
            for side in (conn.client, conn.server):
                if side is None or side.process is not process:
                    continue
                side._lost = side._closing = True
                side._inbox.clear()
                self._forget(side)
                peer = side.peer
                if peer is not None and not peer._lost:
                    if power_loss:
                        peer._peer_gone = True
                    else:
                        self._schedule(side, _RESET, force=True)

    # -- listening and connecting ------------------------------------------------------------
    def listen(self, factory: Callable[[], Any], host: str | None, port: int | None) -> SimServer:
        process = PROCESS.get()
        machine = process.machine if process is not None else "sim"
        if not host or host in ("0.0.0.0", "::"):
            host = machine
        if host != machine:
            raise OSError(errno.EADDRNOTAVAIL, f"{machine} cannot listen on {host}")
        if not port:
            counter = self._ports.setdefault(machine, itertools.count(40000))
            port = next(counter)
            while (host, port) in self.listeners:
                port = next(counter)
        if (host, port) in self.listeners:
            raise OSError(errno.EADDRINUSE, f"{host}:{port} is in use")
        listener = _Listener(host, port, factory, process)
        self.listeners[(host, port)] = listener
        self._event("listen", f"{host}:{port}")
        return SimServer(self, listener)

    def _unlisten(self, listener: _Listener) -> None:
        listener.closed = True
        if self.listeners.get((listener.host, listener.port)) is listener:
            del self.listeners[(listener.host, listener.port)]

    async def connect(self, factory: Callable[[], Any], host: str, port: int) -> tuple[SimTransport, Any]:
        process = PROCESS.get()
        src = process.machine if process is not None else "sim"
        loop = self.loop
        conn_id = next(self._ids)
        future: asyncio.Future[tuple[SimTransport, Any]] = loop.create_future()
        self._event("connect", f"conn {conn_id} {src}->{host}:{port}")
        backoff = [1.0]

        def attempt() -> None:
            if future.done():
                return
            if (src, host) in self.blocked or (host, src) in self.blocked or host in self.down:
                if backoff[0] > SYN_RETRIES_MAX_S:
                    future.set_exception(TimeoutError(errno.ETIMEDOUT, f"connect to {host}:{port} timed out"))
                    return
                loop.call_later(backoff[0], attempt)  # the SYN (or its answer) was lost: retransmitted
                backoff[0] *= 2
                return
            rtt = self._latency(src, host) + self._latency(host, src)
            loop.call_later(rtt, established)

        def established() -> None:
            if future.done():
                return  # given up meanwhile (the caller's timeout)
            listener = self.listeners.get((host, port))
            if listener is None or listener.closed:
                self._event("refused", f"conn {conn_id} {src}->{host}:{port}")
                future.set_exception(ConnectionRefusedError(errno.ECONNREFUSED, f"connect to {host}:{port} refused"))
                return
            if (src, host) in self.blocked or (host, src) in self.blocked:
                attempt()
                return
            self._open(conn_id, factory, process, src, listener, future)

        loop.call_soon(attempt)
        return await future

    def _open(self, conn_id: int, factory: Callable[[], Any], process: Process | None, src: str, listener: _Listener,
              future: asyncio.Future) -> None:
        conn = SimConnection(conn_id)
        dst = listener.host
        client_port = next(self._ports.setdefault(src, itertools.count(40000)))
        up, down = _Direction(src, dst), _Direction(dst, src)
        client = SimTransport(self, conn, process, src, (src, client_port), (dst, listener.port), up)
        server = SimTransport(self, conn, listener.process, dst, (dst, listener.port), (src, client_port), down)
        client.peer, server.peer = server, client
        conn.client, conn.server = client, server
        self.connections[conn_id] = conn
        self._event("accept", f"conn {conn_id} {src}:{client_port}->{dst}:{listener.port}")

        def accept() -> None:
            if server._lost:
                return
            protocol = listener.factory()
            server.set_protocol(protocol)
            protocol.connection_made(server)

        self.loop.call_soon(accept, context=server._context)
        protocol = factory()
        client.set_protocol(protocol)
        protocol.connection_made(client)
        future.set_result((client, protocol))

    # -- sending ---------------------------------------------------------------------------
    def _send(self, side: SimTransport, item: Any) -> None:
        peer = side.peer
        if peer is None:
            return
        if side._peer_gone:
            # The machine at the other end lost power: what is sent vanishes; once it is up
            # again, its kernel answers a reset (it knows no such connection).
            if side._out.dst not in self.down and not side._lost:
                self.loop.call_later(self._latency(side._out.src, side._out.dst) * 2, side._lose,
                                     ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
                                     context=side._context)
            return
        direction = side._out
        if (direction.src, direction.dst) in self.blocked or direction.held:
            direction.held.append(item)
            return
        self._schedule(side, item)

    def _schedule(self, side: SimTransport, item: Any, force: bool = False) -> None:
        peer = side.peer
        if peer is None:
            return
        direction = side._out
        loop = self.loop
        # Strictly later than what went before on this direction: timers due at the same time
        # may fire in any order (a heap is not stable), and TCP keeps bytes in order.
        arrival = loop._now + self._latency(direction.src, direction.dst)
        after = direction.last_arrival + ORDER_EPSILON_S
        if after > arrival:  # (max(), without its call)
            arrival = after
        conn_id = side._conn.id
        if isinstance(item, bytes):
            self.delivered += 1
            self.bytes += len(item)
            if len(item) > 8 and self.rng.random() < SPLIT_PROBABILITY:
                cut = self.rng.randrange(1, len(item))
                loop.call_at(arrival, self._arrive, peer, conn_id, item[:cut], context=peer._context)
                item = item[cut:]
                arrival += ORDER_EPSILON_S
        direction.last_arrival = arrival
        loop.call_at(arrival, self._arrive, peer, conn_id, item, context=peer._context)

    def _arrive(self, peer: SimTransport, conn_id: int, item: Any) -> None:
        if self.trace is not None:
            if isinstance(item, bytes):
                self.trace.data(peer.process, conn_id, item)
            else:
                self.trace.event(peer.process.key if peer.process is not None else "sim", item, f"conn {conn_id}")
        peer._arrive(item)

    def _latency(self, src: str, dst: str) -> float:
        lo, hi = self.base_latency_ms
        ms = lo + (hi - lo) * self.rng.random()  # (random.uniform's own arithmetic, without its frame)
        if self.slow:
            extra = self.slow.get((src, dst))
            if extra:
                ms += extra * self.rng.uniform(0.5, 1.5)
        return ms / 1000.0

    def _forget(self, side: SimTransport) -> None:
        conn = side._conn
        peer = side.peer
        if side._lost and (peer is None or peer._lost):
            conn.closed = True
            self.connections.pop(conn.id, None)

    def _event(self, kind: str, detail: str) -> None:
        if self.trace is not None:
            process = PROCESS.get()
            self.trace.event(process.key if process is not None else "sim", kind, detail)
