"""AlterPartitionManager (Kafka's DefaultAlterPartitionManager): ISR proposals to the controller.

``Partition`` proposes an ISR change through ``submit`` (the ``AlterPartitionSender`` seam)
and the change takes effect only when the controller's answer comes back (KIP-497/KIP-841).
This manager batches the proposals of every partition this broker leads into one
AlterPartition request, with one request in flight: proposals submitted meanwhile wait and go
together in the next one (a newer proposal for a partition replaces an unsent older one).

Answers go back to each partition's handler (``Partition._on_alter_partition_result``), which
returns True when the error proves nothing about the outcome and the proposal should be
tried again; those, and every proposal of a request that got no answer (no controller
reachable, NOT_CONTROLLER from every address, a top-level error such as STALE_BROKER_EPOCH
before this broker registered), are sent again after a backoff on the injected clock
(50 ms, doubling up to 1 s, reset by an answered request). Proposals the controller refused
for good (fenced leader epoch, stale partition epoch, ineligible replica, unknown topic) are
dropped: the leader waits for the LeaderAndIsr that brings the new state.

Topics are named by id (AlterPartition v2, from the metadata cache, which UpdateMetadata
fills before LeaderAndIsr creates a partition); a batch with a topic whose id is unknown
goes by name (v1).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from protocol.api_keys import ApiKey
from protocol.clock import Time, TimerHandle
from protocol.errors import ErrorCode, KafkaError

from .partition import AlterPartitionResult

if TYPE_CHECKING:
    from .broker_lifecycle import ControllerSender
    from .partition import Partition

log = logging.getLogger("kbroker.alter_partition")

ZERO_UUID = uuid.UUID(int=0)
RETRY_BACKOFF_MS = 50
RETRY_BACKOFF_MAX_MS = 1000


@dataclass
class _Proposal:
    partition: "Partition"
    new_isr: list[int]
    leader_epoch: int
    partition_epoch: int
    on_result: Callable[[AlterPartitionResult], bool]

    @property
    def key(self) -> tuple[str, int]:
        return self.partition.key


class AlterPartitionManager:
    def __init__(self, *, broker_id: int, time: Time, channel: "ControllerSender", broker_epoch: Callable[[], int],
                 topic_id_of: Callable[[str], uuid.UUID | None], retry_backoff_ms: int = RETRY_BACKOFF_MS,
                 retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS) -> None:
        self.broker_id = broker_id
        self.time = time
        self.channel = channel
        self.broker_epoch = broker_epoch
        self.topic_id_of = topic_id_of
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.unsent: dict[tuple[str, int], _Proposal] = {}
        self.in_flight: dict[tuple[str, int], _Proposal] | None = None
        self.requests_sent = 0
        self._backoff_ms = retry_backoff_ms
        self._retry_timer: TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    # -- AlterPartitionSender --------------------------------------------------------------
    def submit(self, partition: "Partition", new_isr: list[int],
               on_result: Callable[[AlterPartitionResult], bool]) -> None:
        proposal = _Proposal(partition, list(new_isr), partition.leader_epoch, partition.partition_epoch, on_result)
        self.unsent[partition.key] = proposal  # replaces an unsent older proposal of the partition
        self._maybe_send()

    # -- sending ---------------------------------------------------------------------------
    def _maybe_send(self) -> None:
        if self._closed or self.in_flight is not None or not self.unsent or self._retry_timer is not None:
            return
        batch, self.unsent = self.unsent, {}
        self.in_flight = batch
        self._task = asyncio.get_running_loop().create_task(self._send(batch), name="alter-partition")

    async def _send(self, batch: dict[tuple[str, int], _Proposal]) -> None:
        retry: list[_Proposal] = []
        answered = False
        try:
            response, by_name = await self._request(batch)
            if response.error_code:
                log.warning("AlterPartition of %d partition(s) refused as a whole: %s; retrying", len(batch),
                            _error_name(response.error_code))
                retry = list(batch.values())
            else:
                answered = True
                retry = self._dispatch(batch, response, by_name)
        except asyncio.CancelledError:
            raise
        except (KafkaError, OSError) as exc:
            log.warning("AlterPartition of %d partition(s) got no answer (%s); retrying", len(batch), exc)
            retry = list(batch.values())
        except Exception:
            log.exception("AlterPartition failed")
            retry = list(batch.values())
        finally:
            self.in_flight = None
        for proposal in retry:
            self.unsent.setdefault(proposal.key, proposal)  # a newer proposal, if any, goes instead
        if retry:
            self._schedule_retry()
        else:
            if answered:
                self._backoff_ms = self.retry_backoff_ms
            self._maybe_send()

    async def _request(self, batch: dict[tuple[str, int], _Proposal]) -> tuple[Any, bool]:
        ids = {topic: self.topic_id_of(topic) for topic, _p in batch}
        by_name = any(i is None or i == ZERO_UUID for i in ids.values())
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, pid), proposal in batch.items():
            topics.setdefault(topic, []).append({
                "partition_index": pid, "leader_epoch": proposal.leader_epoch, "new_isr": proposal.new_isr,
                "leader_recovery_state": 0, "partition_epoch": proposal.partition_epoch})
        body = {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch(),
                "topics": [{"topic_name": t, "topic_id": ids[t] or ZERO_UUID, "partitions": parts}
                           for t, parts in topics.items()]}
        self.requests_sent += 1
        response = await self.channel.send(ApiKey.ALTER_PARTITION, body, max_version=1 if by_name else 2)
        return response, by_name

    def _dispatch(self, batch: dict[tuple[str, int], _Proposal], response: Any, by_name: bool) -> list[_Proposal]:
        names = {ids: topic for topic in {t for t, _p in batch} if (ids := self.topic_id_of(topic)) is not None}
        answered: set[tuple[str, int]] = set()
        retry = []
        for t in response.topics:
            topic = t.topic_name if by_name else names.get(t.topic_id, t.topic_name)
            for p in t.partitions:
                key = (topic, p.partition_index)
                proposal = batch.get(key)
                if proposal is None or key in answered:
                    continue
                answered.add(key)
                result = (AlterPartitionResult(p.error_code) if p.error_code else AlterPartitionResult(
                    ErrorCode.NONE, p.leader_id, p.leader_epoch, list(p.isr), p.partition_epoch))
                if self._deliver(proposal, result):
                    retry.append(proposal)
        for key, proposal in batch.items():
            if key not in answered:
                log.warning("AlterPartition answer left out %s-%d; retrying", *key)
                retry.append(proposal)
        return retry

    def _deliver(self, proposal: _Proposal, result: AlterPartitionResult) -> bool:
        try:
            return proposal.on_result(result)
        except Exception:
            log.exception("%s-%d: handling the AlterPartition answer failed", *proposal.key)
            return False

    def _schedule_retry(self) -> None:
        if self._closed or self._retry_timer is not None:
            return
        delay = self._backoff_ms
        self._backoff_ms = min(self._backoff_ms * 2, self.retry_backoff_max_ms)

        def fire() -> None:
            self._retry_timer = None
            self._maybe_send()

        self._retry_timer = self.time.schedule(delay, fire)

    def close(self) -> None:
        self._closed = True
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        if self._task is not None and not self._task.done():
            self._task.cancel()


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
