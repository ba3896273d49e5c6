"""The producer: the Java client's partitioners, and ``Producer``, which batches records per
partition (RecordBatch v2) and sends one Produce request per leader.

Linger, backoff and delivery timeouts are scheduled on the client's injected clock.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import struct
from typing import Callable, Iterable, NamedTuple

from ..clock import TimerHandle
from ..compression import Compression
from ..errors import ErrorCode, KafkaError, RequestTimedOutError, UnknownTopicOrPartitionError
from ..records import Record, build_batch, increment_sequence
from .cluster import KafkaClient
from .connection import wire_error
from .metadata import TopicPartition

log = logging.getLogger("kbroker.client")


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``Utils.murmur2`` of the Java client), as an unsigned 32-bit int."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h = ((h ^ tail[0]) * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The Java client's keyed partitioning: ``toPositive(murmur2(key)) % numPartitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written."""

    topic: str
    partition: int
    offset: int  # -1 when unknown (acks=0, or a duplicate the broker had already written)
    timestamp: int


_BATCH_OVERHEAD = 61  # the RecordBatch header
_RECORD_OVERHEAD = 12  # length, attributes, deltas and lengths: a generous estimate


def _record_size(r: Record) -> int:
    size = _RECORD_OVERHEAD + len(r.key or b"") + len(r.value or b"")
    for k, v in r.headers:
        size += 4 + len(k) + len(v or b"")
    return size


class _Batch:
    """The records of one partition that travel (and are retried) as one RecordBatch."""

    __slots__ = ("tp", "records", "futures", "size", "created_ms", "attempts", "retry_at_ms", "payload",
                 "producer_id", "base_sequence", "done")

    def __init__(self, tp: TopicPartition, created_ms: float) -> None:
        self.tp = tp
        self.records: list[Record] = []
        self.futures: list[asyncio.Future[RecordMetadata]] = []
        self.size = _BATCH_OVERHEAD
        self.created_ms = created_ms
        self.attempts = 0
        self.retry_at_ms = 0.0
        self.payload: bytes | None = None  # built at the first send, kept for retries
        self.producer_id = -1
        self.base_sequence = -1
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # resolves when settled

    def succeed(self, base_offset: int, log_append_time: int) -> None:
        for i, (record, future) in enumerate(zip(self.records, self.futures)):
            if not future.done():
                future.set_result(RecordMetadata(
                    self.tp.topic, self.tp.partition, base_offset + i if base_offset >= 0 else -1,
                    log_append_time if log_append_time >= 0 else record.timestamp))
        self.done.set_result(None)

    def fail(self, exc: BaseException) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(exc)
        self.done.set_result(None)


class Producer:
    """Sends records in batches, aiokafka/Java style.

    ``await send(...)`` queues a record and returns a future that resolves to its
    ``RecordMetadata`` once the broker acknowledged it (at once with offset -1 for acks=0).
    A background task closes batches when full (``batch_size``) or after ``linger_ms``, and
    sends one Produce request per leader holding one batch per partition, at most
    ``max_in_flight`` requests per connection.

    Ordering per partition survives retries: without idempotence, a partition has one batch
    in flight at a time (when retries are on). With ``enable_idempotence`` the producer asks
    for a producer id once and stamps it, the epoch and per-partition sequence numbers into
    each batch; a retried batch keeps its sequence, so the broker can drop a duplicate, and
    up to ``max_in_flight`` (<= 5) batches per partition may be in flight. A batch that fails
    after being stamped (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, expiry, ...)
    leaves a hole in its partition's sequence: its records fail, and the producer takes a new
    producer id before sending more rather than let later batches be rejected or reordered.
    """

    def __init__(self, client: KafkaClient, *, acks: int | str = 1, compression: str | int = "none",
                 linger_ms: float = 5, batch_size: int = 16384, max_in_flight: int = 5,
                 partitioner: str | Callable[[bytes, int], int] = "murmur2", enable_idempotence: bool = False,
                 request_timeout_ms: int = 30000, delivery_timeout_ms: int = 120000, retries: int = 2**31 - 1,
                 retry_backoff_ms: int = 100, buffer_memory: int = 32 * 1024 * 1024) -> None:
        acks = -1 if acks == "all" else int(acks)
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be 0, 1 or -1 (all), not {acks}")
        if enable_idempotence and (acks != -1 or max_in_flight > 5 or retries < 1):
            raise ValueError("an idempotent producer needs acks=-1 (all), retries > 0 and max_in_flight <= 5")
        if partitioner == "murmur2":
            partitioner = murmur2_partition
        elif not callable(partitioner):
            raise ValueError(f"partitioner must be 'murmur2' or a callable, not {partitioner!r}")
        self._client = client
        self._time = client.time
        self._acks = acks
        self._compression = Compression.parse(compression)
        self._linger_ms = linger_ms
        self._batch_size = batch_size
        self._max_in_flight = max_in_flight
        self._partitioner = partitioner
        self._idempotent = enable_idempotence
        self._request_timeout_ms = request_timeout_ms
        self._delivery_timeout_ms = delivery_timeout_ms
        self._retries = retries
        self._retry_backoff_ms = retry_backoff_ms
        self._buffer_memory = buffer_memory
        self._max_in_flight_per_partition = max_in_flight if enable_idempotence or retries == 0 else 1
        self._queues: dict[TopicPartition, collections.deque[_Batch]] = {}
        self._unsettled: dict[_Batch, None] = {}
        self._inflight_partition: collections.Counter[TopicPartition] = collections.Counter()
        self._inflight_node: collections.Counter[int] = collections.Counter()
        self._buffered = 0
        self._sticky: dict[str, list[int]] = {}  # topic -> [partition, bytes sent to it]
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_sequence: dict[TopicPartition, int] = {}
        self._need_producer_id = enable_idempotence
        self._refresh_needed = False
        self._next_refresh_ms = 0.0
        self._flushing = 0
        self._closed = False
        self._wakeup = asyncio.Event()
        # The timer that wakes the sender next (its earliest linger end or retry backoff), and
        # when, on the monotonic clock: a new batch that only its linger can make ready moves
        # it earlier instead of waking the sender now to compute the same deadline.
        self._timer: TimerHandle | None = None
        self._timer_at_ms = 0.0
        self._space = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._requests: dict[asyncio.Task[None], None] = {}

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None,
                   headers: Iterable[tuple[str, bytes | None]] = (), partition: int | None = None,
                   timestamp_ms: int | None = None) -> asyncio.Future[RecordMetadata]:
        """Queue one record; returns the future of its RecordMetadata. Waits while more than
        ``buffer_memory`` bytes are queued."""
        self._ensure_running()
        while self._buffered >= self._buffer_memory:
            self._space.clear()
            await self._space.wait()
        partitions = await self._client.partitions_for(topic, allow_auto_create=True)
        record = Record(timestamp=self._time.milliseconds() if timestamp_ms is None else timestamp_ms,
                        key=key, value=value, headers=list(headers))
        size = _record_size(record)
        if partition is None:
            partition = self._choose_partition(topic, key, len(partitions), size)
        elif partition not in partitions:
            raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition}")
        future = asyncio.get_running_loop().create_future()
        self._append(TopicPartition(topic, partition), record, size, future)
        return future

    async def flush(self) -> None:
        """Send everything queued now, without waiting for linger, and wait until it settled."""
        waiting = [b.done for b in self._unsettled]
        if not waiting:
            return
        self._flushing += 1
        self._wakeup.set()
        try:
            await asyncio.wait(waiting)
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        """Flush, then stop the sender."""
        await self.flush()
        self._closed = True
        if self._sender is not None:
            self._sender.cancel()
            try:
                await self._sender
            except asyncio.CancelledError:
                pass

    def _ensure_running(self) -> None:
        if self._closed:
            raise RuntimeError("the producer is closed")
        if self._sender is None:
            self._sender = asyncio.ensure_future(self._run())
        elif self._sender.done():
            raise RuntimeError("the producer's sender task failed") from self._sender.exception()

    def _choose_partition(self, topic: str, key: bytes | None, count: int, size: int) -> int:
        """Keyed records by the partitioner; the others stick to one partition until a batch's
        worth of bytes went there, then move to the next (KIP-794's uniform sticky partitioner)."""
        if key is not None:
            return self._partitioner(key, count)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky[0] >= count:
            sticky = self._sticky[topic] = [random.randrange(count), 0]
        elif sticky[1] >= self._batch_size:
            sticky[:] = [(sticky[0] + 1) % count, 0]
        sticky[1] += size
        return sticky[0]

    def _append(self, tp: TopicPartition, record: Record, size: int, future: asyncio.Future[RecordMetadata]) -> None:
        queue = self._queues.setdefault(tp, collections.deque())
        if queue and queue[-1].payload is None and queue[-1].size + size <= self._batch_size:
            batch = queue[-1]
        else:
            batch = _Batch(tp, self._time.monotonic_ms())
            queue.append(batch)
            self._unsettled[batch] = None
            if (len(queue) > 1 or self._linger_ms <= 0 or self._flushing or self._need_producer_id
                    or self._refresh_needed):
                self._wakeup.set()  # a batch behind another (that one is ready now), or work for _prepare
            else:
                # Ready at its linger end, not before (unless full, below): the sender's timer
                # wakes it then (Java's sender, woken now, would only compute that deadline).
                self._wake_by(batch.created_ms + self._linger_ms)
        batch.records.append(record)
        batch.futures.append(future)
        batch.size += size
        self._buffered += size
        if batch.size >= self._batch_size:
            self._wakeup.set()

    def _wake_by(self, at_ms: float) -> None:
        """The sender's timer fires at ``at_ms`` at the latest."""
        if self._timer is not None:
            if self._timer_at_ms <= at_ms:
                return
            self._timer.cancel()
        self._timer = self._time.schedule(at_ms - self._time.monotonic_ms(), self._wakeup.set)
        self._timer_at_ms = at_ms

    # -- the sender task -------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                self._wakeup.clear()
                await self._prepare()
                now = self._time.monotonic_ms()
                wait_ms = self._drain(now)
                if self._timer is not None:  # (set by _append while _prepare waited: _drain saw its batch)
                    self._timer.cancel()
                    self._timer = None
                if wait_ms is not None:
                    self._timer = self._time.schedule(wait_ms, self._wakeup.set)
                    self._timer_at_ms = now + wait_ms
                try:
                    await self._wakeup.wait()
                finally:
                    if self._timer is not None:
                        self._timer.cancel()
                        self._timer = None
        except Exception as exc:
            log.exception("producer sender failed")
            for batch in list(self._unsettled):
                self._settle(batch)
                batch.fail(exc)
            raise

    async def _prepare(self) -> None:
        """Refresh metadata when a leader is unknown; get a producer id when one is needed."""
        now = self._time.monotonic_ms()
        if self._refresh_needed and now >= self._next_refresh_ms:
            self._refresh_needed = False
            self._next_refresh_ms = now + self._retry_backoff_ms
            try:
                await self._client.refresh_metadata(sorted({tp.topic for tp in self._queues}))
            except KafkaError as exc:
                log.warning("producer metadata refresh failed: %s", exc)
                self._refresh_needed = True
        if self._need_producer_id and not self._in_flight() and any(self._queues.values()):
            try:
                self._producer_id, self._producer_epoch = await self._client.init_producer_id()
            except KafkaError as exc:
                log.warning("cannot get a producer id: %s", exc)
                for queue in self._queues.values():
                    while queue:
                        self._fail(queue.popleft(), exc)
                return
            log.info("producer id %d, epoch %d", self._producer_id, self._producer_epoch)
            self._next_sequence.clear()
            self._need_producer_id = False
            # Batches sent under the previous producer id and waiting for a retry: whether they
            # were written is unknown, and under the new id the broker could not tell a resend
            # from a new batch (it would write them twice). They fail, as Java's producer fails
            # a batch whose producer id is gone (TransactionManager.canRetry).
            for tp, queue in self._queues.items():
                stale = [b for b in queue if b.producer_id >= 0]
                if stale:
                    self._queues[tp] = collections.deque(b for b in queue if b.producer_id < 0)
                    for batch in stale:
                        self._fail(batch, RequestTimedOutError(
                            f"{tp.topic}-{tp.partition}: sent under producer id {batch.producer_id}, which was "
                            f"given up; not sent again (it may have been written)"))

    def _in_flight(self) -> bool:
        """Whether a Produce request is still running. A request leaves ``_requests`` in its
        finally; one cancelled before it began never ran that, and is dropped here."""
        for task in [t for t in self._requests if t.done()]:
            del self._requests[task]
        return bool(self._requests)

    def _drain(self, now: float) -> float | None:
        """Send every ready batch it may; return how long until the next one may be ready."""
        wait_ms: float | None = None
        by_node: dict[int, list[_Batch]] = collections.defaultdict(list)
        for tp, queue in self._queues.items():
            while queue and now - queue[0].created_ms >= self._delivery_timeout_ms:
                self._fail(queue.popleft(), RequestTimedOutError(
                    f"{tp.topic}-{tp.partition}: not delivered within {self._delivery_timeout_ms} ms"))
            if not queue or self._need_producer_id or self._inflight_partition[tp] >= self._max_in_flight_per_partition:
                continue
            batch = queue[0]
            linger_end = batch.created_ms + self._linger_ms
            if batch.retry_at_ms > now:
                wait_ms = _earliest(wait_ms, batch.retry_at_ms - now)
                continue
            if not (len(queue) > 1 or batch.size >= self._batch_size or self._flushing or now >= linger_end):
                wait_ms = _earliest(wait_ms, linger_end - now)
                continue
            leader = self._client.cluster.leader(*tp)
            if leader < 0:
                self._refresh_needed = True
                wait_ms = _earliest(wait_ms, self._retry_backoff_ms)
            elif self._inflight_node[leader] < self._max_in_flight:
                by_node[leader].append(queue.popleft())
        for node, batches in by_node.items():
            self._dispatch(node, batches)
        return wait_ms

    def _dispatch(self, node: int, batches: list[_Batch]) -> None:
        for batch in batches:
            if self._idempotent and batch.producer_id != self._producer_id:
                batch.producer_id = self._producer_id
                batch.base_sequence = self._next_sequence.get(batch.tp, 0)
                self._next_sequence[batch.tp] = increment_sequence(batch.base_sequence, len(batch.records))
                batch.payload = None
            if batch.payload is None:
                batch.payload = build_batch(
                    batch.records, compression=self._compression, producer_id=batch.producer_id,
                    producer_epoch=self._producer_epoch if self._idempotent else -1,
                    base_sequence=batch.base_sequence)
            batch.attempts += 1
            self._inflight_partition[batch.tp] += 1
        self._inflight_node[node] += 1
        task = asyncio.ensure_future(self._send_request(node, batches))
        self._requests[task] = None  # (until its finally: a done callback would cost a loop turn per request)

    async def _send_request(self, node: int, batches: list[_Batch]) -> None:
        try:
            by_topic: dict[str, list[tuple[int, bytes | None]]] = collections.defaultdict(list)
            for batch in batches:
                by_topic[batch.tp.topic].append((batch.tp.partition, batch.payload))
            conn = await self._client.connection(node)
            response = await conn.produce(self._acks, self._request_timeout_ms, list(by_topic.items()))
        except Exception as exc:
            for batch in batches:
                self._retry_or_fail(batch, exc)
        else:
            results = {} if response is None else {(topic, p[0]): p[1:4] for topic, parts in response for p in parts}
            error: int
            for batch in batches:
                if response is None:  # acks=0: written is all we will ever know
                    error, base_offset, log_append_time = ErrorCode.NONE, -1, -1
                else:
                    error, base_offset, log_append_time = results.get(batch.tp, (ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1))
                if error in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):  # a duplicate was written before
                    self._settle(batch)
                    batch.succeed(base_offset if error == ErrorCode.NONE else -1, log_append_time)
                else:
                    self._retry_or_fail(batch, wire_error(error, f"produce to {batch.tp.topic}-{batch.tp.partition}"))
        finally:
            self._requests.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self._inflight_node[node] -= 1
            for batch in batches:
                self._inflight_partition[batch.tp] -= 1
            # The sender has work only if a batch waits (one this request's end lets go, or a
            # retry queued above): with none, the next batch's _append wakes it.
            for queue in self._queues.values():
                if queue:
                    self._wakeup.set()
                    break

    def _retry_or_fail(self, batch: _Batch, exc: Exception) -> None:
        now = self._time.monotonic_ms()
        if not (isinstance(exc, KafkaError) and exc.retriable and batch.attempts <= self._retries
                and now - batch.created_ms < self._delivery_timeout_ms):
            self._fail(batch, exc)
            return
        log.debug("retrying %s-%d after %r", batch.tp.topic, batch.tp.partition, exc)
        if exc.invalid_metadata:
            self._refresh_needed = True
        batch.retry_at_ms = now + self._retry_backoff_ms
        # Back in front of the batches never sent, after the retried ones with lower sequences.
        queue = self._queues[batch.tp]
        i = 0
        while i < len(queue) and 0 <= queue[i].base_sequence < batch.base_sequence:
            i += 1
        queue.insert(i, batch)

    def _fail(self, batch: _Batch, exc: BaseException) -> None:
        if self._idempotent and batch.producer_id == self._producer_id >= 0:
            self._need_producer_id = True  # a hole in the partition's sequence: start afresh
        self._settle(batch)
        batch.fail(exc)

    def _settle(self, batch: _Batch) -> None:
        self._unsettled.pop(batch, None)
        self._buffered -= batch.size - _BATCH_OVERHEAD
        self._space.set()


def _earliest(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)
