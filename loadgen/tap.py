"""``kbroker record``: a transparent tap proxy that records every request frame.

Clients bootstrap through ``--listen``; the tap forwards bytes both ways unchanged, except the
broker addresses in Metadata and FindCoordinator responses, which it replaces by proxy ports of
its own — one listener per upstream broker, opened the first time a response names that broker —
so that clients keep talking through the tap after bootstrap instead of going to the brokers
directly. Each client connection becomes one Parquet file of the recording (loadgen/recording.py);
the manifest is written when the tap stops.

Responses are matched to requests in order (Kafka answers a connection's requests in the order
they were sent); a Produce request with acks=0 gets no response and expects none.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import struct
import time
from pathlib import Path
from typing import Any

from protocol import fast_codecs
from protocol.api_keys import ApiKey
from protocol.messages import APIS, request_is_flexible, response_is_flexible
from protocol.records import decode_uvarint

from .recording import ConnectionWriter, summarize, write_manifest

log = logging.getLogger("kbroker.record")

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
MAX_FRAME = 1 << 30


def now_us() -> int:
    return time.monotonic_ns() // 1000


def produce_acks(frame: bytes | bytearray, header_size: int, version: int) -> int:
    """The acks field of a Produce request (any version): after the transactional id."""
    pos = header_size
    if version >= 9:  # compact nullable string: length + 1 as an unsigned varint
        n, pos = decode_uvarint(frame, pos)
        pos += max(n - 1, 0)
    else:
        (n,) = _I16.unpack_from(frame, pos)
        pos += 2 + max(n, 0)
    (acks,) = _I16.unpack_from(frame, pos)
    return int(acks)


def produce_topics(frame: bytes | bytearray, header_size: int, version: int) -> list[str]:
    if not fast_codecs.PRODUCE_VERSIONS[0] <= version <= fast_codecs.PRODUCE_VERSIONS[1]:
        return []
    request = fast_codecs.decode_produce_request(version, memoryview(frame), header_size)
    return [name for name, _parts in request.topics]


class _Row:
    __slots__ = ("data", "done")

    def __init__(self, data: dict[str, Any], done: bool) -> None:
        self.data = data
        self.done = done


class TapProxy:
    """Listens on ``listen`` and forwards to ``upstream``; records into ``out``."""

    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int], out: Path, *,
                 advertised_host: str | None = None, broker_port_base: int | None = None) -> None:
        self.listen = listen
        self.upstream = upstream
        self.out = Path(out)
        self.advertised_host = advertised_host or listen[0]
        self.broker_port_base = broker_port_base
        self._servers: list[asyncio.AbstractServer] = []
        # upstream (host, port) -> the proxy port that forwards there
        self._broker_ports: dict[tuple[str, int], int] = {}
        self._broker_ids: dict[tuple[str, int], int] = {}
        self._opening: dict[tuple[str, int], asyncio.Future[int]] = {}
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self._streams: dict[int, tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = {}
        self.connections: dict[int, dict[str, Any]] = {}
        self.api_counts: collections.Counter[int] = collections.Counter()
        self.topics: set[str] = set()
        self.first_us: int | None = None
        self.last_us: int | None = None
        self.started_wall_ms = int(time.time() * 1000)

    @property
    def port(self) -> int:
        return int(self._servers[0].sockets[0].getsockname()[1])

    @property
    def broker_ports(self) -> dict[tuple[str, int], int]:
        return dict(self._broker_ports)

    async def start(self) -> "TapProxy":
        self.out.mkdir(parents=True, exist_ok=True)
        server = await asyncio.start_server(lambda r, w: self._accept(r, w, self.upstream, -1),
                                            self.listen[0], self.listen[1], limit=MAX_FRAME)
        self._servers.append(server)
        log.info("recording %s:%d -> %s:%d into %s", self.listen[0], self.port, *self.upstream, self.out)
        return self

    async def _proxy_port(self, host: str, port: int, node_id: int) -> int:
        """The proxy port forwarding to upstream broker ``host:port``, opened on first use."""
        key = (host, port)
        if key in self._broker_ports:
            return self._broker_ports[key]
        pending = self._opening.get(key)
        if pending is not None:
            return await pending
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._opening[key] = fut
        try:
            bind = 0 if self.broker_port_base is None else self.broker_port_base + len(self._broker_ports)
            server = await asyncio.start_server(lambda r, w: self._accept(r, w, key, node_id),
                                                self.listen[0], bind, limit=MAX_FRAME)
        except BaseException as exc:
            fut.set_exception(exc)
            del self._opening[key]
            raise
        self._servers.append(server)
        proxy_port = int(server.sockets[0].getsockname()[1])
        self._broker_ports[key] = proxy_port
        self._broker_ids[key] = node_id
        fut.set_result(proxy_port)
        log.info("broker %d at %s:%d is reached through %s:%d", node_id, host, port, self.advertised_host, proxy_port)
        return proxy_port

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                upstream: tuple[str, int], broker_id: int) -> None:
        task = asyncio.ensure_future(self._serve(reader, writer, upstream, broker_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                     upstream: tuple[str, int], broker_id: int) -> None:
        cid = next(self._ids)
        try:
            up_r, up_w = await asyncio.open_connection(*upstream, limit=MAX_FRAME)
        except OSError as exc:
            log.warning("connection %d: cannot reach %s:%d: %s", cid, *upstream, exc)
            client_w.close()
            return
        writer = ConnectionWriter(self.out, cid)
        self._streams[cid] = (client_w, up_w)
        info: dict[str, Any] = {"client_id": None, "upstream": f"{upstream[0]}:{upstream[1]}",
                                "broker_id": broker_id, "requests": 0}
        self.connections[cid] = info
        order: collections.deque[_Row] = collections.deque()
        awaiting: collections.deque[_Row] = collections.deque()

        def settle() -> None:
            while order and order[0].done:
                writer.add(order.popleft().data)

        async def requests() -> None:
            while True:
                head = await client_r.readexactly(4)
                (size,) = _I32.unpack(head)
                if not 0 <= size <= MAX_FRAME:
                    raise ValueError(f"request frame size {size}")
                frame = await client_r.readexactly(size)
                t = now_us()
                header = fast_codecs.parse_request_header(frame, flexible_for=request_is_flexible)
                expects = True
                if header.api_key == ApiKey.PRODUCE:
                    try:
                        expects = produce_acks(frame, header.size, header.api_version) != 0
                        self.topics.update(produce_topics(frame, header.size, header.api_version))
                    except Exception as exc:  # a frame we cannot read is still forwarded and recorded
                        log.warning("connection %d: unreadable Produce v%d: %s", cid, header.api_version, exc)
                row = _Row({"client_id": header.client_id, "upstream": info["upstream"], "broker_id": broker_id,
                            "send_time_us": t, "api_key": header.api_key, "api_version": header.api_version,
                            "correlation_id": header.correlation_id, "frame": frame,
                            "response_time_us": None, "response_size": None}, done=not expects)
                order.append(row)
                if expects:
                    awaiting.append(row)
                info["client_id"] = info["client_id"] or header.client_id
                info["requests"] += 1
                self.api_counts[header.api_key] += 1
                self.first_us = t if self.first_us is None else self.first_us
                self.last_us = t
                up_w.write(head + frame)
                await up_w.drain()
                settle()

        async def responses() -> None:
            while True:
                head = await up_r.readexactly(4)
                (size,) = _I32.unpack(head)
                if not 0 <= size <= MAX_FRAME:
                    raise ValueError(f"response frame size {size}")
                frame = await up_r.readexactly(size)
                t = now_us()
                out = head + frame
                if awaiting:
                    row = awaiting.popleft()
                    d = row.data
                    (corr,) = _I32.unpack_from(frame, 0)
                    if corr != d["correlation_id"]:
                        log.warning("connection %d: response for correlation id %d, expected %d",
                                    cid, corr, d["correlation_id"])
                    d["response_time_us"] = t
                    d["response_size"] = size
                    row.done = True
                    if d["api_key"] in (ApiKey.METADATA, ApiKey.FIND_COORDINATOR):
                        out = await self._rewrite(d["api_key"], d["api_version"], frame, head)
                    self.last_us = max(self.last_us or t, t)
                else:
                    log.warning("connection %d: a response nobody asked for", cid)
                client_w.write(out)
                await client_w.drain()
                settle()

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(responses())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                exc = t.exception()
                if exc is not None and not isinstance(exc, (asyncio.IncompleteReadError, ConnectionError)):
                    log.warning("connection %d: %s", cid, exc)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for w in (client_w, up_w):
                w.close()
            self._streams.pop(cid, None)
            for row in order:
                writer.add(row.data)
            writer.close()

    async def _rewrite(self, api_key: int, version: int, frame: bytes, head: bytes) -> bytes:
        """The response with every broker address replaced by its proxy address."""
        try:
            pos = fast_codecs.skip_tagged_fields(frame, 4) if response_is_flexible(api_key, version) else 4
            message = APIS[api_key].response
            body = message.parse(version, frame, pos)
            if api_key == ApiKey.METADATA:
                for b in body.brokers:
                    b.port = await self._proxy_port(b.host, b.port, b.node_id)
                    b.host = self.advertised_host
            elif version < 4:
                if body.port > 0:
                    body.port = await self._proxy_port(body.host, body.port, body.node_id)
                    body.host = self.advertised_host
            else:
                for c in body.coordinators:
                    if c.port > 0:
                        c.port = await self._proxy_port(c.host, c.port, c.node_id)
                        c.host = self.advertised_host
            new = bytes(frame[:pos]) + message.build(version, body)
        except Exception as exc:
            log.warning("cannot rewrite %s v%d response (%s): forwarded unchanged, clients may bypass the tap",
                        APIS[api_key].name, version, exc)
            return head + frame
        return _I32.pack(len(new)) + new

    def manifest(self) -> dict[str, Any]:
        duration = 0.0 if self.first_us is None or self.last_us is None else (self.last_us - self.first_us) / 1e6
        return {
            "source": "tap",
            "upstream": f"{self.upstream[0]}:{self.upstream[1]}",
            "started_at_ms": self.started_wall_ms,
            "duration_s": round(duration, 6),
            "requests": sum(self.api_counts.values()),
            "requests_per_api": summarize(self.api_counts.items()),
            "topics": sorted(self.topics),
            "connections": {str(k): v for k, v in sorted(self.connections.items())},
            "brokers": {f"{h}:{p}": {"broker_id": self._broker_ids[(h, p)], "proxy_port": port}
                        for (h, p), port in sorted(self._broker_ports.items())},
        }

    async def stop(self) -> None:
        for s in self._servers:
            s.close()
        # Close the connections still open: each handler then sees end of stream and writes its rows.
        for streams in list(self._streams.values()):
            for w in streams:
                w.close()
        tasks = list(self._tasks)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=10)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for s in self._servers:
            await s.wait_closed()
        write_manifest(self.out, self.manifest())
        log.info("recorded %d requests on %d connections into %s", sum(self.api_counts.values()),
                 len(self.connections), self.out)


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)
