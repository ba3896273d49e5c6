"""Producer ids for InitProducerId: handed out from blocks, never repeated.

KafkaApis asks a ``ProducerIdGenerator`` (``generate(callback)``: the callback gets an error
code and an id, now or later). Two of them:

* ``RPCProducerIdManager`` (Kafka's): blocks come from the controller (AllocateProducerIds,
  which records each block in the metadata log before answering, so no block is ever handed
  out twice, whichever broker asks). The next block is fetched when 90% of the current one
  is used (Kafka's prefetch threshold), so InitProducerId rarely waits; when it must (the
  first id after start, or a controller that does not answer), it waits up to
  ``wait_timeout_ms`` and then answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
  Every broker with a controller uses it, combined mode included.
* ``ProducerIdManager`` over ``LocalBlockSource``, for a broker with no controller to ask
  (``process.roles=broker`` without ``controller.quorum.bootstrap.servers``: a cluster a
  static controller drives, as tests and benchmarks do): a per-broker counter file, written
  atomically *before* a block is used, so a crash can skip ids but never repeat them. Ids
  of different brokers never collide because each broker's space starts at
  ``broker_id << 32``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from protocol.api_keys import ApiKey
from protocol.clock import Time, TimerHandle
from protocol.errors import ErrorCode, KafkaError
from storage.checkpoint import write_atomically

if TYPE_CHECKING:
    from .broker_lifecycle import ControllerSender

log = logging.getLogger("kbroker.producer_ids")

BLOCK_SIZE = 1000
FILE_NAME = "kbroker-producer-id-block"
PREFETCH_THRESHOLD = 0.90      # Kafka's RPCProducerIdManager.PidPrefetchThreshold
RETRY_BACKOFF_MS = 50
RETRY_BACKOFF_MAX_MS = 2000
WAIT_TIMEOUT_MS = 5000

# (error code, producer id): what InitProducerId answers with.
IdCallback = Callable[[int, int], None]


class ProducerIdGenerator(Protocol):
    def generate(self, callback: IdCallback) -> None:
        """Call ``callback(error_code, producer_id)`` once, now or later."""


class ProducerIdBlockSource(Protocol):
    def next_block(self) -> tuple[int, int]:
        """(first id, number of ids) of a block no one else will ever get."""


class LocalBlockSource:
    """Blocks from a per-broker counter kept in ``<log dir>/kbroker-producer-id-block``."""

    def __init__(self, path: Path, broker_id: int, block_size: int = BLOCK_SIZE) -> None:
        if broker_id < 0:
            raise ValueError("broker id must be known before producer ids are handed out")
        self.path = path
        self.base = broker_id << 32
        self.block_size = block_size

    def next_block(self) -> tuple[int, int]:
        start = self.base
        if self.path.exists():
            text = self.path.read_text().split()
            if len(text) != 2 or text[0] != "v1":
                raise ValueError(f"{self.path}: unreadable producer id block file")
            start = max(start, int(text[1]))
        if start + self.block_size > self.base + (1 << 32):
            raise RuntimeError("this broker's producer id space is exhausted")
        write_atomically(self.path, f"v1 {start + self.block_size}\n".encode())
        log.info("allocated producer id block [%d, %d)", start, start + self.block_size)
        return start, self.block_size


class ProducerIdManager:
    def __init__(self, source: ProducerIdBlockSource) -> None:
        self.source = source
        self._next = 0
        self._end = 0

    def generate_producer_id(self) -> int:
        if self._next >= self._end:
            start, size = self.source.next_block()
            self._next, self._end = start, start + size
        pid = self._next
        self._next += 1
        return pid

    def generate(self, callback: IdCallback) -> None:
        try:
            pid = self.generate_producer_id()
        except (OSError, RuntimeError, ValueError) as exc:
            log.error("cannot allocate a producer id: %s", exc)
            callback(ErrorCode.KAFKA_STORAGE_ERROR, -1)
            return
        callback(ErrorCode.NONE, pid)


class RPCProducerIdManager:
    """Producer id blocks from the controller (AllocateProducerIds), prefetched."""

    def __init__(self, *, broker_id: int, time: Time, channel: "ControllerSender", broker_epoch: Callable[[], int],
                 wait_timeout_ms: int = WAIT_TIMEOUT_MS, retry_backoff_ms: int = RETRY_BACKOFF_MS) -> None:
        self.broker_id = broker_id
        self.time = time
        self.channel = channel
        self.broker_epoch = broker_epoch
        self.wait_timeout_ms = wait_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._next = 0
        self._end = 0
        self._prefetch_at = 0
        self._next_block: tuple[int, int] | None = None
        self._requesting = False
        self._waiters: list[tuple[IdCallback, TimerHandle]] = []
        self._retry_timer: TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._backoff_ms = retry_backoff_ms
        self.blocks_received = 0

    def generate(self, callback: IdCallback) -> None:
        if self._next >= self._end and self._next_block is not None:
            self._use(self._next_block)
            self._next_block = None
        if self._next < self._end and not self._waiters:
            pid = self._next
            self._next += 1
            if self._next >= self._prefetch_at:
                self.maybe_request_next_block()
            callback(ErrorCode.NONE, pid)
            return
        timer = self.time.schedule(self.wait_timeout_ms, lambda: self._expire(callback))
        self._waiters.append((callback, timer))
        self.maybe_request_next_block()

    def _use(self, block: tuple[int, int]) -> None:
        start, length = block
        self._next, self._end = start, start + length
        self._prefetch_at = start + max(1, int(length * PREFETCH_THRESHOLD))

    def _expire(self, callback: IdCallback) -> None:
        for i, (cb, _timer) in enumerate(self._waiters):
            if cb is callback:
                del self._waiters[i]
                log.warning("no producer id block from the controller within %d ms", self.wait_timeout_ms)
                callback(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
                return

    def maybe_request_next_block(self) -> None:
        """Ask the controller for a block, unless one is on its way or already waiting."""
        if self._closed or self._requesting or self._next_block is not None or self._retry_timer is not None:
            return
        self._requesting = True
        self._task = asyncio.get_running_loop().create_task(self._request(), name="allocate-producer-ids")

    async def _request(self) -> None:
        block = None
        try:
            response = await self.channel.send(ApiKey.ALLOCATE_PRODUCER_IDS, {
                "broker_id": self.broker_id, "broker_epoch": self.broker_epoch()})
            if response.error_code:
                log.info("AllocateProducerIds answered %s; retrying", ErrorCode(response.error_code).name)
            elif response.producer_id_len <= 0 or response.producer_id_start < 0:
                log.warning("AllocateProducerIds gave an empty block; retrying")
            else:
                block = (response.producer_id_start, response.producer_id_len)
        except asyncio.CancelledError:
            self._requesting = False
            raise
        except (KafkaError, OSError) as exc:
            log.info("AllocateProducerIds got no answer (%s); retrying", exc)
        self._requesting = False
        if block is None:
            self._retry_after_backoff()
            return
        self.blocks_received += 1
        self._backoff_ms = self.retry_backoff_ms
        log.info("producer id block [%d, %d) from the controller", block[0], block[0] + block[1])
        self._next_block = block
        self._serve_waiters()

    def _serve_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for callback, timer in waiters:
            timer.cancel()
            self.generate(callback)

    def _retry_after_backoff(self) -> None:
        if self._closed:
            return

        def fire() -> None:
            self._retry_timer = None
            if self._waiters or self._next >= self._prefetch_at:
                self.maybe_request_next_block()

        self._retry_timer = self.time.schedule(self._backoff_ms, fire)
        self._backoff_ms = min(self._backoff_ms * 2, RETRY_BACKOFF_MAX_MS)

    def close(self) -> None:
        self._closed = True
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        for callback, timer in self._waiters:
            timer.cancel()
            callback(ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
        self._waiters = []
