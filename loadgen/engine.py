"""What one replay task does, without Spark: replay one recorded connection's Produce frames
(``replay_producer``), or consume the replayed topics and time records end to end
(``consume``). loadgen/replay.py runs these as Spark tasks; they return plain, mergeable
statistics (loadgen/hist.py).

Producer task, in two phases:

1. Prepare (before the clock starts): decode each recorded Produce frame, map topic names, look
   up partition leaders, give each recorded idempotent producer id a fresh one
   (InitProducerId) and renumber its sequences per partition, then encode one request per
   leader with the batches rewritten (producer id, epoch, base sequence, CRC). Transactional
   frames are skipped (counted as ``skipped_frames``).
2. Send: per leader, one connection and one task that writes the prepared frames at the recorded
   inter-arrival times divided by ``speed`` (or back to back with ``speed=None``), at most
   ``depth`` requests in flight. Per request the send loop only stamps the correlation id and,
   when end-to-end latency is measured, each batch's base/max timestamp and CRC — no per-record
   Python work. A lost connection counts its in-flight requests as NETWORK_EXCEPTION, then the
   task finds the partition's new leader and goes on.

Statistics: per 10 s window (of the job's wall clock) records/bytes/requests/errors and a latency
histogram; per broker; per API; error counts by Kafka error code.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable

from crc32c import crc32c

from protocol.api_keys import ApiKey
from protocol.client import KafkaClient, KafkaConnectionError
from protocol.errors import ErrorCode, KafkaError
from protocol.fast_codecs import (FETCH_VERSIONS, PRODUCE_VERSIONS, FetchPartition, FetchRequest, decode_produce_request,
                                  decode_produce_response, encode_produce_request, parse_request_header)
from protocol.framing import Framer
from protocol.records import iter_batch_headers

from . import hist

log = logging.getLogger("kbroker.loadgen")

_I32 = struct.Struct(">i")
_TS = struct.Struct(">qq")          # baseTimestamp, maxTimestamp at 27
_PID = struct.Struct(">qhi")        # producerId, producerEpoch, baseSequence at 43
_U32 = struct.Struct(">I")
NETWORK_EXCEPTION = int(ErrorCode.NETWORK_EXCEPTION)
REQUEST_TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)


@dataclass
class Params:
    bootstrap: str
    speed: float | None = None          # None: as fast as ``depth`` allows
    acks: int | None = None             # None: as recorded
    depth: int = 5
    topic_map: dict[str, str] = field(default_factory=dict)
    duration_s: float | None = None     # stop sending after this long
    window_s: float = 10.0
    job_start: float = 0.0              # wall clock (time.time()) the windows count from
    stamp_timestamps: bool = True       # restamp batches at send (end-to-end latency)
    client_id: str = "kbroker-loadgen"
    timeout_ms: int = 30000
    raw: bool = False                   # a sink that only frames (bench: frame_server.py): no Kafka
                                        # handshake, every frame to the bootstrap address, any reply
                                        # with the right correlation id is the acknowledgement


def new_stats() -> dict[str, Any]:
    return {"windows": {}, "brokers": {}, "apis": {}, "errors": {}, "totals": {
        "requests": 0, "records": 0, "bytes": 0, "records_acked": 0, "errors": 0, "skipped_frames": 0,
        "tasks": 0, "consumed": 0, "consumed_bytes": 0}, "publish": {}, "e2e": {}, "delay": {}}


def _window(p: Params, wall: float) -> int:
    return max(0, int((wall - p.job_start) // p.window_s))


def _win(stats: dict[str, Any], w: int) -> dict[str, Any]:
    win = stats["windows"].get(w)
    if win is None:
        win = stats["windows"][w] = {"published": 0, "published_bytes": 0, "requests": 0, "errors": 0,
                                     "consumed": 0, "consumed_bytes": 0, "publish": {}, "e2e": {}, "delay": {}}
    return win


@dataclass
class Prepared:
    """One request ready to go: the whole frame (size prefix included, correlation id 0)."""
    due_us: int                     # when to send, from the task's start (before dividing by speed)
    frame: bytearray
    records: int
    batches: list[tuple[int, int, int]]   # (offset in frame, batch size, max - base timestamp)
    partitions: list[tuple[str, int]]


def _rewrite_batches(records: bytes | bytearray | memoryview, pid_map: dict[int, tuple[int, int]],
                     sequences: dict[tuple[int, str, int], int], topic: str, partition: int
                     ) -> tuple[bytearray, int, list[tuple[int, int, int]]] | None:
    """The partition's batches with fresh producer ids and sequences; None if transactional."""
    buf = bytearray(records)
    n = 0
    spans = []
    for pos, h in iter_batch_headers(buf):
        if h.is_transactional or h.is_control:
            return None
        n += h.records_count
        spans.append((pos, h.size, max(0, h.max_timestamp - h.base_timestamp)))
        if h.producer_id >= 0 and h.producer_id in pid_map:
            pid, epoch = pid_map[h.producer_id]
            key = (pid, topic, partition)
            seq = sequences.get(key, 0)
            _PID.pack_into(buf, pos + 43, pid, epoch, seq)
            sequences[key] = (seq + h.records_count) & 0x7FFFFFFF
            _U32.pack_into(buf, pos + 17, crc32c(memoryview(buf)[pos + 21:pos + h.size]))
    return buf, n, spans


def decode_frames(rows: Iterable[tuple[int, int, bytes]], topic_map: dict[str, str]):
    """(send_time_us, version, acks, timeout, [(topic, [(partition, records)])]) of recorded
    Produce frames we can replay (v3-v8, not transactional); and the number skipped."""
    out, skipped = [], 0
    for send_us, version, frame in rows:
        if not PRODUCE_VERSIONS[0] <= version <= PRODUCE_VERSIONS[1]:
            skipped += 1
            continue
        try:
            header = parse_request_header(frame, False)
            req = decode_produce_request(version, memoryview(frame), header.size)
        except Exception:
            skipped += 1
            continue
        if req.transactional_id is not None:
            skipped += 1
            continue
        topics = [(topic_map.get(t, t), [(p, r) for p, r in parts if r is not None]) for t, parts in req.topics]
        out.append((send_us, version, req.acks, req.timeout_ms, topics))
    return out, skipped


def frame_summary(version: int, frame: bytes) -> list[tuple[tuple[str, int], int]]:
    """[((topic, partition), records)] of a recorded Produce frame, from batch headers only."""
    if not PRODUCE_VERSIONS[0] <= version <= PRODUCE_VERSIONS[1]:
        return []
    try:
        header = parse_request_header(frame, False)
        req = decode_produce_request(version, memoryview(frame), header.size)
    except Exception:
        return []
    if req.transactional_id is not None:
        return []
    out = []
    for topic, parts in req.topics:
        for partition, records in parts:
            if records is not None:
                out.append(((topic, partition), sum(h.records_count for _pos, h in iter_batch_headers(records))))
    return out


class _Conn(asyncio.Protocol):
    """One pipelined connection for prepared frames: FIFO of (correlation id, sent at, request)."""

    def __init__(self) -> None:
        self.framer = Framer(1 << 30)
        self.inflight: collections.deque[tuple[int, int, Prepared, float]] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.on_response: Any = None
        self.lost = asyncio.get_running_loop().create_future()
        self.space = asyncio.Event()
        self.space.set()
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        for frame in self.framer.feed(data):
            self.on_response(self, frame)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)
        self.space.set()
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()


class ProducerTask:
    def __init__(self, params: Params, rows: list[tuple[int, int, bytes]], copy: int) -> None:
        self.p = params
        self.rows = sorted(rows, key=lambda r: r[0])
        self.copy = copy
        self.stats = new_stats()
        self.stats["totals"]["tasks"] = 1
        self.client: KafkaClient | None = None

    def _error(self, code: int, n: int = 1, node: int | None = None) -> None:
        s = self.stats
        s["errors"][code] = s["errors"].get(code, 0) + n
        s["totals"]["errors"] += n
        _win(s, _window(self.p, time.time()))["errors"] += n
        if node is not None:
            self._broker(node)["errors"] += n

    def _broker(self, node: int) -> dict[str, Any]:
        b = self.stats["brokers"].get(node)
        if b is None:
            b = self.stats["brokers"][node] = {"requests": 0, "records": 0, "bytes": 0, "errors": 0, "publish": {}}
        return b

    async def prepare(self) -> dict[int, list[Prepared]]:
        frames, skipped = decode_frames(self.rows, self.p.topic_map)
        self.stats["totals"]["skipped_frames"] += skipped
        if self.p.raw:
            return self._prepare_raw(frames)
        client = self.client = KafkaClient(self.p.bootstrap, client_id=f"{self.p.client_id}-{self.copy}")
        await client.__aenter__()
        topics = sorted({t for *_x, ts in frames for t, _ in ts})
        if topics:
            await client.refresh_metadata(topics)
        # Fresh producer ids for the recorded idempotent ones.
        pids = set()
        for *_x, ts in frames:
            for _t, parts in ts:
                for _p, records in parts:
                    for _pos, h in iter_batch_headers(records):
                        if h.producer_id >= 0 and not h.is_transactional:
                            pids.add(h.producer_id)
        pid_map = {old: await client.init_producer_id() for old in sorted(pids)}
        sequences: dict[tuple[int, str, int], int] = {}
        plan: dict[int, list[Prepared]] = collections.defaultdict(list)
        start_us = frames[0][0] if frames else 0
        for send_us, version, acks, timeout_ms, ts in frames:
            by_leader: dict[int, list[tuple[str, list[tuple[int, bytearray]]]]] = collections.defaultdict(list)
            spans_of: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
            counts = 0
            for topic, parts in ts:
                for partition, records in parts:
                    rewritten = _rewrite_batches(records, pid_map, sequences, topic, partition)
                    if rewritten is None:
                        self.stats["totals"]["skipped_frames"] += 1
                        continue
                    buf, n, spans = rewritten
                    counts += n
                    leader = client.cluster.leader(topic, partition)
                    group = by_leader[leader]
                    if not group or group[-1][0] != topic:
                        group.append((topic, []))
                    group[-1][1].append((partition, buf))
                    spans_of[(topic, partition)] = spans
            for leader, group in by_leader.items():
                chunks = encode_produce_request(version, 0, f"{self.p.client_id}-{self.copy}",
                                                acks if self.p.acks is None else self.p.acks, timeout_ms, group)
                frame = bytearray(b"".join(bytes(c) for c in chunks))
                # Where each batch sits in the frame: after its partition's header, in order.
                batches, records = [], 0
                pos = 0
                view = bytes(frame)
                for topic, parts in group:
                    for partition, buf in parts:
                        at = view.find(buf, pos)
                        for bpos, size, span in spans_of[(topic, partition)]:
                            batches.append((at + bpos, size, span))
                        records += sum(h.records_count for _q, h in iter_batch_headers(buf))
                        pos = at + len(buf)
                plan[leader].append(Prepared(send_us - start_us, frame, records, batches,
                                             [(t, p) for t, parts in group for p, _ in parts]))
        return plan

    def _prepare_raw(self, frames: list[Any]) -> dict[int, list[Prepared]]:
        plan: list[Prepared] = []
        start_us = frames[0][0] if frames else 0
        for send_us, version, acks, timeout_ms, ts in frames:
            chunks = encode_produce_request(version, 0, self.p.client_id, acks if self.p.acks is None else self.p.acks,
                                            timeout_ms, ts)
            records = sum(h.records_count for _t, parts in ts for _p, r in parts for _q, h in iter_batch_headers(r))
            plan.append(Prepared(send_us - start_us, bytearray(b"".join(bytes(c) for c in chunks)), records, [],
                                 [(t, p) for t, parts in ts for p, _ in parts]))
        return {-1: plan}

    async def run(self, ready: Callable[[], Awaitable[None]] | None = None) -> dict[str, Any]:
        """Prepare the frames, then send them at the recorded pace. ``ready``: awaited once
        prepared (or failed to), so that the connections of one task start sending together."""
        try:
            try:
                plan = await self.prepare()
            finally:
                if ready is not None:
                    await ready()
            t0 = time.monotonic()
            self.stats["totals"]["send_start_min"] = time.time()
            cpu0 = time.process_time()
            await asyncio.gather(*(self._send_all(leader, items, t0) for leader, items in plan.items()))
            self.stats["totals"]["send_end_max"] = time.time()
            self.stats["totals"]["send_cpu_s"] = time.process_time() - cpu0
        except KafkaError as exc:
            log.warning("replay task %d: %s", self.copy, exc)
            self._error(getattr(exc, "error_code", -1) or -1)
        finally:
            if self.client is not None:
                await self.client.close()
        return self.stats

    def _on_response(self, node: int):
        stats, p = self.stats, self.p
        broker = self._broker(node)
        api = stats["apis"].setdefault("Produce", {"requests": 0, "records": 0, "errors": 0, "publish": {}})

        def handle(conn: _Conn, frame: bytearray) -> None:
            now = time.monotonic_ns()
            if not conn.inflight:
                return
            corr, sent_ns, item, _due = conn.inflight.popleft()
            conn.space.set()
            (got,) = _I32.unpack_from(frame, 0)
            latency_us = (now - sent_ns) // 1000
            win = _win(stats, _window(p, time.time()))
            errors = 0
            if got != corr:
                errors = 1
                self._error(int(ErrorCode.CORRUPT_MESSAGE), node=node)
            elif not p.raw:
                try:
                    for _topic, parts in decode_produce_response(item_version(item), frame, 4):
                        for part in parts:
                            if part[1]:
                                errors += 1
                                self._error(part[1], node=node)
                except KafkaError:
                    errors += 1
                    self._error(int(ErrorCode.CORRUPT_MESSAGE), node=node)
            if not errors:
                stats["totals"]["records_acked"] += item.records
            hist.record(win["publish"], latency_us)
            hist.record(stats["publish"], latency_us)
            hist.record(broker["publish"], latency_us)
            hist.record(api["publish"], latency_us)
            api["requests"] += 1
            api["records"] += item.records
            api["errors"] += errors

        return handle

    async def _connect(self, node: int) -> _Conn:
        if self.p.raw:
            host, _, port = self.p.bootstrap.split(",")[0].rpartition(":")
            address = (host, int(port))
        else:
            assert self.client is not None
            broker = self.client.cluster.brokers[node]
            address = (broker.host, broker.port)
        loop = asyncio.get_running_loop()
        _t, conn = await loop.create_connection(_Conn, *address)
        assert isinstance(conn, _Conn)
        conn.on_response = self._on_response(node)
        return conn

    async def _send_all(self, node: int, items: list[Prepared], t0: float) -> None:
        p, stats = self.p, self.stats
        speed = p.speed
        corr = 0
        i = 0
        deadline = None if p.duration_s is None else t0 + p.duration_s
        conn: _Conn | None = None
        attempts = 0
        while i < len(items):
            if conn is None or conn.lost.done():
                if conn is not None:
                    await self._fail_inflight(conn, node)
                    if p.raw:
                        self._error(NETWORK_EXCEPTION, len(items) - i, node)
                        return
                    node = await self._new_leader(items[i], node)
                try:
                    conn = await self._connect(node)
                    attempts = 0
                except (OSError, KafkaError, KeyError):
                    attempts += 1
                    if attempts > 60 or (deadline is not None and time.monotonic() > deadline):
                        self._error(NETWORK_EXCEPTION, len(items) - i, node)
                        return
                    await asyncio.sleep(0.5)
                    node = await self._new_leader(items[i], node)
                    continue
            item = items[i]
            if speed is not None:
                due = t0 + item.due_us / 1e6 / speed
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                late_us = int(max(0.0, time.monotonic() - due) * 1e6)
                hist.record(stats["delay"], late_us)
                hist.record(_win(stats, _window(p, time.time()))["delay"], late_us)
            if deadline is not None and time.monotonic() > deadline:
                return
            while len(conn.inflight) >= p.depth and not conn.lost.done():
                conn.space.clear()
                await self._wait_in_flight(conn, conn.space, node)
            if not conn.writable.is_set() and not conn.lost.done():
                await self._wait_in_flight(conn, conn.writable, node)
            if conn.lost.done():
                continue
            frame = item.frame
            corr += 1
            _I32.pack_into(frame, 8, corr)
            if p.stamp_timestamps and item.batches:
                now_ms = int(time.time() * 1000)
                for pos, size, span in item.batches:
                    _TS.pack_into(frame, pos + 27, now_ms, now_ms + span)
                    _U32.pack_into(frame, pos + 17, crc32c(memoryview(frame)[pos + 21:pos + size]))
            expects = _acks_of(frame) != 0
            if expects:
                conn.inflight.append((corr, time.monotonic_ns(), item, 0.0))
            assert conn.transport is not None
            conn.transport.write(frame)
            win = _win(stats, _window(p, time.time()))
            win["published"] += item.records
            win["published_bytes"] += len(frame)
            win["requests"] += 1
            stats["totals"]["requests"] += 1
            stats["totals"]["records"] += item.records
            stats["totals"]["bytes"] += len(frame)
            b = self._broker(node)
            b["requests"] += 1
            b["records"] += item.records
            b["bytes"] += len(frame)
            if not expects:
                stats["totals"]["records_acked"] += item.records
            i += 1
        if conn is not None:
            # The last responses (bounded: the request timeout).
            end = time.monotonic() + p.timeout_ms / 1000 + 5
            while conn.inflight and not conn.lost.done() and time.monotonic() < end:
                conn.space.clear()
                try:
                    await asyncio.wait_for(conn.space.wait(), max(0.01, end - time.monotonic()))
                except TimeoutError:
                    break
            if conn.inflight:
                code = NETWORK_EXCEPTION if conn.lost.done() else REQUEST_TIMED_OUT
                self._error(code, len(conn.inflight), node)
                conn.inflight.clear()
            if conn.transport is not None:
                conn.transport.close()

    async def _wait_in_flight(self, conn: _Conn, event: asyncio.Event, node: int) -> None:
        """Wait for ``event`` (room in the window, or a writable socket), but no longer than the
        oldest request in flight may wait for its answer (``timeout_ms``, Kafka's
        request.timeout.ms). Past that the connection is given up, as a Kafka client gives it up:
        its requests in flight count as REQUEST_TIMED_OUT, and it is closed (the sender connects
        again). Without it, a broker that stops answering (stopped, hung, a peer gone with its
        connection left open) would hold the replay forever: the window never frees."""
        if event.is_set():
            return
        if not conn.inflight:
            await event.wait()
            return
        left = conn.inflight[0][1] / 1e9 + self.p.timeout_ms / 1000 - time.monotonic()
        try:
            await asyncio.wait_for(event.wait(), max(0.0, left))
        except TimeoutError:
            if conn.lost.done():
                return
            self._error(REQUEST_TIMED_OUT, len(conn.inflight), node)
            conn.inflight.clear()
            conn.lost.set_result(TimeoutError(f"no answer in {self.p.timeout_ms} ms"))
            if conn.transport is not None:
                conn.transport.abort()

    async def _fail_inflight(self, conn: _Conn, node: int) -> None:
        if conn.inflight:
            self._error(NETWORK_EXCEPTION, len(conn.inflight), node)
            conn.inflight.clear()

    async def _new_leader(self, item: Prepared, old: int) -> int:
        assert self.client is not None
        topic, partition = item.partitions[0]
        try:
            await self.client.refresh_metadata([t for t, _ in item.partitions])
            leader = self.client.cluster.leader(topic, partition)
            return leader if leader >= 0 else old
        except KafkaError:
            return old


def _acks_of(frame: bytearray) -> int:
    # size(4) api_key(2) version(2) corr(4) client id(2 + n) transactional id(2 + n) acks(2)
    (n,) = struct.unpack_from(">h", frame, 12)
    pos = 14 + max(n, 0)
    (t,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + max(t, 0)
    (acks,) = struct.unpack_from(">h", frame, pos)
    return int(acks)


def item_version(item: Prepared) -> int:
    return int(struct.unpack_from(">h", item.frame, 6)[0])


# ---------------------------------------------------------------------------------------------
# consumer task

# How long the consumer waits at a hole in a partition's offsets before it steps over it: far
# longer than tansu takes to store a batch once it has raised the high watermark (take_batches).
HOLE_WAIT_S = 2.0


async def consume(params: Params, start_offsets: dict[tuple[str, int], int], expected: int,
                  idle_s: float = 15.0, max_s: float = 600.0, producing: Callable[[], bool] | None = None,
                  hole_wait_s: float = HOLE_WAIT_S) -> dict[str, Any]:
    """Fetch ``start_offsets``' partitions from there until ``expected`` records arrived (or
    nothing arrived for ``idle_s``); end-to-end latency = arrival - the batch's base timestamp
    (stamped when the replay sent it), per batch, weighted by its records. ``producing``: true
    while producers on this event loop still send; idle time only counts once it is false (a
    loop busy with them is no sign that nothing more will come). ``hole_wait_s``: how long a
    partition waits at a hole in its offsets before stepping over it (``take_batches``)."""
    stats = new_stats()
    p = params
    offsets = dict(start_offsets)
    holes: dict[tuple[str, int], float] = {}  # partitions waiting at a hole in the offsets: since when
    got = 0
    async with KafkaClient(p.bootstrap, client_id=f"{p.client_id}-consumer") as client:
        await client.refresh_metadata(sorted({t for t, _ in offsets}))
        started = last = time.monotonic()
        while got < expected and time.monotonic() - last < idle_s and time.monotonic() - started < max_s:
            if holes:  # the batch may be stored in a moment: fetch again soon, but not in a tight loop
                await asyncio.sleep(0.01)
            by_leader: dict[int, list[tuple[str, int]]] = collections.defaultdict(list)
            for tp in offsets:
                by_leader[client.cluster.leader(*tp)].append(tp)
            results = await asyncio.gather(*(_fetch_once(client, node, tps, offsets, holes, hole_wait_s)
                                             for node, tps in by_leader.items() if node >= 0), return_exceptions=True)
            if producing is not None and producing():
                last = time.monotonic()
            for r in results:
                if isinstance(r, BaseException):
                    try:
                        await client.refresh_metadata(sorted({t for t, _ in offsets}))
                    except KafkaError:
                        pass
                    await asyncio.sleep(0.2)
                    continue
                now_ms = time.time() * 1000
                win = _win(stats, _window(p, time.time()))
                for base_ts, n, size in r:
                    if n <= 0:
                        continue
                    got += n
                    last = time.monotonic()
                    e2e_us = max(0, int((now_ms - base_ts) * 1000))
                    hist.record(win["e2e"], e2e_us, n)
                    hist.record(stats["e2e"], e2e_us, n)
                    win["consumed"] += n
                    win["consumed_bytes"] += size
    stats["totals"]["consumed"] = got
    stats["totals"]["consumed_bytes"] = sum(w["consumed_bytes"] for w in stats["windows"].values())
    return stats


def take_batches(records: bytes | bytearray | memoryview, position: int, hole_since: float | None, now: float,
                 hole_wait_s: float = HOLE_WAIT_S) -> tuple[list[tuple[int, int, int]], int, float | None]:
    """What a consumer at ``position`` takes from one partition's Fetch answer: [(base timestamp,
    records, bytes)] of the batches it counts, its new position, and since when it has waited at
    a hole in the offsets (None: it is not at one). ``now``: the caller's monotonic clock.

    Batches that end below the position are passed over (a broker answers from the batch that
    holds the fetch offset); one that holds it counts from it on; a control batch moves the
    position and counts no records.

    A batch that starts above the position leaves a hole. Kafka's own logs have holes only where
    compaction removed records, and its clients step over them: the Java consumer and librdkafka
    (rdkafka_msgset_reader.c) drop what lies below the fetch position and move it past each batch.
    tansu 0.6.0 makes holes that fill a moment later: its produce (tansu-storage/src/dynostore.rs,
    the memory:// engine shared/tools/tansu.sh runs) raises the partition's high watermark, then stores
    the batch; a Fetch between the two lists the batches stored below the high watermark, so its
    answer lacks that batch and holds the ones after it (seen: a Fetch at 1318 answered 1319(3)
    1322(1) 1324(2) ..., high watermark 1330; the batch at 1323 was in the log afterwards). A
    consumer that steps over such a hole never reads the batch: the 4799 of 4800 records of
    tests/loadgen/test_spark_masters.py's tansu replay under CPU load (a Java or librdkafka
    consumer would lose it too). tansu's author describes this race (a slow producer's batch at 0,
    a fast one's at 100 stored first: a fetch sees 100 first) in a comment on nisshi-io/nisshi#713
    (nisshi: tansu's later name), saying the fetch service now checks what it returns for a gap in
    the offsets; tansu 0.6.0's fetch service (tansu-storage/src/service/fetch.rs) does not. So the
    consumer takes the batches up to a hole and fetches again from it, and steps over a hole only
    once it has lasted ``hole_wait_s`` (compaction's kind).
    """
    out = []
    for _pos, h in iter_batch_headers(records):
        if h.next_offset <= position:
            continue
        if h.base_offset > position:
            if hole_since is None:
                hole_since = now
            if now - hole_since < hole_wait_s:
                break
            log.warning("consumer: offsets %d-%d are missing: stepped over after %.1f s", position,
                        h.base_offset - 1, now - hole_since)
        if h.is_control:
            n = 0
        elif h.base_offset >= position:
            n = h.records_count
        else:
            n = min(h.records_count, h.next_offset - position)
        out.append((h.base_timestamp, n, h.size))
        position = h.next_offset
        hole_since = None
    return out, position, hole_since


async def _fetch_once(client: KafkaClient, node: int, tps: list[tuple[str, int]], offsets: dict[tuple[str, int], int],
                      holes: dict[tuple[str, int], float], hole_wait_s: float) -> list[tuple[int, int, int]]:
    """One Fetch of ``tps`` from ``node``: the batches counted; moves ``offsets`` (the positions)
    and ``holes`` (the partitions waiting at a hole: since when, take_batches)."""
    conn = await client.connection(node)
    version = conn.version_for(ApiKey.FETCH, max_v=FETCH_VERSIONS[1])
    topics: dict[str, list[FetchPartition]] = collections.defaultdict(list)
    for t, part in tps:
        topics[t].append(FetchPartition(part, -1, offsets[(t, part)], -1, 1 << 20))
    request = FetchRequest(version, -1, 200, 1, 16 << 20, 0, 0, -1, list(topics.items()), [], "")
    response = await conn.fetch(request, version)
    now = time.monotonic()
    out = []
    for topic, parts in response.responses:
        for data in parts:
            if data.error_code or data.records is None:
                if data.error_code:
                    client.cluster.topics.pop(topic, None)
                    raise KafkaConnectionError(f"fetch {topic}-{data.partition}: error {data.error_code}")
                continue
            tp = (topic, data.partition)
            taken, offsets[tp], since = take_batches(data.records, offsets[tp], holes.get(tp), now, hole_wait_s)
            out += taken
            if since is None:
                holes.pop(tp, None)
            else:
                holes[tp] = since
    return out


def run_producer(params: Params, rows: list[tuple[int, int, bytes]], copy: int) -> dict[str, Any]:
    return _run(ProducerTask(params, rows, copy).run())


# Spark's BarrierTaskContext.barrier() and allGather() wait for the coordinator's answer in 1 s
# sleeps (BarrierTaskContext.runBarrier: Thread.sleep(1000) until the future completed), so the
# tasks of one barrier leave it up to a second apart: a replay's tasks started sending ~0.98 s
# apart in half the rounds of bench/loadgen_bench.py part 4, its paced x1/x5/x20 at 0.95 of the
# asked rate. ``common_start`` waits for the last of those ticks instead.
BARRIER_TICK_S = 1.0
# beyond the tick: the coordinator's answer (an RPC), the JVM's to the Python worker (a socket)
START_MARGIN_S = 0.25


def common_start(all_gather: Callable[[str], list[str]], now: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> float:
    """A barrier (run_many's ``barrier``) after which every task of the stage starts at once:
    each task gives its wall-clock time on arriving (``all_gather``: Spark's
    ``BarrierTaskContext.allGather``, every task's message in partition order), and all sleep
    until the latest arrival plus Spark's release tick and a margin: the same instant for
    every task, which every one has left the barrier by unless a delay (the RPC, a loaded
    machine) passed the margin: then a task starts as it is released, as without this, and
    says how late. Across machines the instant is within the clocks' offset, and the wait at
    most what it can be on one clock (a task released after the latest arrival). Returns
    that instant."""
    arrivals = [float(message) for message in all_gather(repr(now()))]
    start = max(arrivals) + BARRIER_TICK_S + START_MARGIN_S
    wait = start - now()
    if wait > 0:
        sleep(min(wait, BARRIER_TICK_S + START_MARGIN_S))
    else:
        log.warning("left Spark's barrier %.3f s after the tasks' common start: this task starts late", -wait)
    return start


def run_many(params: Params, producers: list[tuple[list[tuple[int, int, bytes]], int]],
             consumers: list[tuple[dict[tuple[str, int], int], int, float]],
             barrier: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Every recorded connection (``producers``: (rows, copy)) and consumer (``consumers``:
    (start offsets, expected records, idle seconds)) of one Spark task at once, on one event
    loop: the recorded concurrency, not one connection after another. Returns their statistics;
    ``send_cpu_s`` is the process's CPU from the common start of sending, counted once (on the
    first). ``barrier``: a blocking call that returns once every task of the replay is ready
    (``common_start`` over Spark's ``BarrierTaskContext.allGather``), called once, in a thread, when this task's
    connections have all prepared (at once by a task without producers): the tasks then start
    sending together, as this task's connections do."""
    async def main() -> list[dict[str, Any]]:
        cpu0 = [time.process_time()]
        # Every connection prepares its frames first, then all start sending at once: one that
        # began while the others still prepared (on the same loop) would pace against a late start.
        # The same holds between tasks, whose preparation (shuffle read, decoding) can differ by
        # seconds: a task starting late stretches the replay's send phase (the barrier).
        arrived, everyone = [0], asyncio.Event()

        async def all_tasks_ready() -> None:
            if barrier is not None:
                await asyncio.get_running_loop().run_in_executor(None, barrier)

        async def ready() -> None:
            arrived[0] += 1
            if arrived[0] == len(producers):
                await all_tasks_ready()
                cpu0[0] = time.process_time()  # the send phase starts: CPU from here, as one connection's
                everyone.set()
            await everyone.wait()
        sending = [len(producers)]

        async def produce(rows: list[tuple[int, int, bytes]], copy: int) -> dict[str, Any]:
            try:
                return await ProducerTask(params, rows, copy).run(ready)
            finally:
                sending[0] -= 1

        coros = [produce(rows, copy) for rows, copy in producers]
        # The consumers' idle time counts once this task's producers are done: on a loaded
        # machine they can hold the shared loop longer than the idle timeout.
        coros += [consume(params, offsets, expected, idle, producing=lambda: sending[0] > 0)
                  for offsets, expected, idle in consumers]
        if not producers:  # every task of a barrier stage calls the barrier, the same number of times
            coros.append(all_tasks_ready())
        results = [r for r in await asyncio.gather(*coros) if r is not None]
        for stats in results:
            stats["totals"].pop("send_cpu_s", None)
        if results:
            totals = results[0]["totals"]
            totals["send_cpu_s"] = time.process_time() - cpu0[0]
            # Per Spark task (merged as maxima): when its connections started sending (tasks that
            # start apart stretch the job's send phase), and its send phase's CPU and wall time
            # (one event loop: CPU/wall near 1 means this task's loop saturates).
            starts = [s["totals"]["send_start_min"] for s in results if "send_start_min" in s["totals"]]
            ends = [s["totals"]["send_end_max"] for s in results if "send_end_max" in s["totals"]]
            if starts and ends:
                totals["task_start_max"] = min(starts)
                totals["task_send_s_max"] = max(ends) - min(starts)
            totals["task_cpu_s_max"] = totals["send_cpu_s"]
        return results
    return _run(main())  # type: ignore[return-value]


def run_consumer(params: Params, start_offsets: dict[tuple[str, int], int], expected: int, idle_s: float = 15.0
                 ) -> dict[str, Any]:
    return _run(consume(params, start_offsets, expected, idle_s))


def _run(coro: Any) -> dict[str, Any]:
    try:
        import uvloop
        return uvloop.run(coro)  # type: ignore[no-any-return]
    except ImportError:  # pragma: no cover - uvloop is a dependency of kbroker
        return asyncio.run(coro)  # type: ignore[no-any-return]

