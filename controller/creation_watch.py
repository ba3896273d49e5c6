"""Topic creation is all-or-nothing: a new topic whose replicas cannot all be created is
taken back.

The controller commits a new topic's records, then the brokers create its logs when
LeaderAndIsr reaches them. A broker that cannot (out of descriptors or disk space, an
unwritable log dir) answers that partition KAFKA_STORAGE_ERROR. Kafka (KRaft) would mark the
broker's log dir offline, and with a single log dir halt the broker, leaving the topic in
the metadata with offline replicas: the client was answered as soon as the records were
committed. kbroker takes the topic back instead, since nothing was ever written to it: the
controller removes it (RemoveTopicRecord, StopReplica with delete to every replica, which
removes whatever logs did get created), and the CreateTopics answer, which waits for the
replicas' LeaderAndIsr answers up to the request's ``timeout_ms``, is KAFKA_STORAGE_ERROR
with a message naming the broker and partition. A retry, or another topic, then starts from
nothing. A partition that fails later (a leader moving to a broker that cannot create the
log) is Kafka's case: that replica stays offline, the topic stays.

``CreationWatch`` holds, per new topic, the (broker, partition) LeaderAndIsr answers still
expected, for up to ``WATCH_MS`` on the injected clock (a broker that never answers — down,
unreachable — ends the watch without a verdict; the controller's channel keeps retrying).
Watches live in the active controller's memory only: a failover forgets them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Callable

from protocol.clock import Time, TimerHandle
from protocol.errors import ErrorCode

log = logging.getLogger("kbroker.controller")

WATCH_MS = 60_000
# LeaderAndIsr answers that mean the replica was not created (a broker that could not apply the
# request at all answers UNKNOWN_SERVER_ERROR for the whole of it). Others (a stale broker
# epoch: a full state follows) leave the watch waiting.
FAILED = frozenset({ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_SERVER_ERROR})

# (error code, error message): (NONE, None) when every replica was created, or the watch
# ended without a verdict; KAFKA_STORAGE_ERROR once the topic was taken back.
Outcome = tuple[int, str | None]


@dataclass
class _Watch:
    topic_id: uuid.UUID
    name: str
    awaiting: set[tuple[int, int]]  # (broker id, partition)
    timer: TimerHandle | None = None
    failure: str | None = None
    waiters: list[asyncio.Future] = field(default_factory=list)


class CreationWatch:
    def __init__(self, time: Time, rollback: Callable[[uuid.UUID, str, str], None]) -> None:
        """``rollback(topic id, name, reason)``: take the topic back; the controller calls
        ``rolled_back`` once that is committed and the brokers have heard."""
        self.time = time
        self.rollback = rollback
        self._watches: dict[uuid.UUID, _Watch] = {}

    def watch(self, topic_id: uuid.UUID, name: str, replicas: dict[int, list[int]],
              answering: Callable[[int], bool]) -> None:
        """A new topic: ``replicas`` by partition; ``answering(broker)``: whether that broker
        is expected to answer its LeaderAndIsr soon (registered and unfenced)."""
        awaiting = {(b, pid) for pid, rs in replicas.items() for b in rs if answering(b)}
        w = _Watch(topic_id, name, awaiting)
        if not awaiting:
            return
        w.timer = self.time.schedule(WATCH_MS, lambda: self._settle(w, (ErrorCode.NONE, None)))
        self._watches[topic_id] = w

    def outcome(self, topic_id: uuid.UUID) -> asyncio.Future:
        """Resolved with the topic's ``Outcome`` (at once when it is not watched)."""
        future = asyncio.get_running_loop().create_future()
        w = self._watches.get(topic_id)
        if w is None:
            future.set_result((ErrorCode.NONE, None))
        else:
            w.waiters.append(future)
        return future

    def answered(self, broker_id: int, results: list[tuple[uuid.UUID, int, int]]) -> None:
        """A broker's LeaderAndIsr answer: (topic id, partition, error code) per partition."""
        for topic_id, pid, code in results:
            w = self._watches.get(topic_id)
            if w is None or w.failure is not None:
                continue
            if code in FAILED:
                w.failure = (f"broker {broker_id} could not create the replica {w.name}-{pid} "
                             f"({ErrorCode(code).name}); the topic was not created")
                log.error("creating topic %s failed: %s; taking the topic back", w.name, w.failure)
                if w.timer is not None:
                    w.timer.cancel()
                    w.timer = None
                self.rollback(w.topic_id, w.name, w.failure)
                continue
            if code != ErrorCode.NONE:
                continue
            w.awaiting.discard((broker_id, pid))
            if not w.awaiting:
                self._settle(w, (ErrorCode.NONE, None))

    def failure(self, topic_id: uuid.UUID) -> str | None:
        """Why the topic is being taken back (None: it is not, or not watched)."""
        w = self._watches.get(topic_id)
        return None if w is None else w.failure

    def rolled_back(self, topic_id: uuid.UUID) -> None:
        w = self._watches.get(topic_id)
        if w is not None:
            self._settle(w, (ErrorCode.KAFKA_STORAGE_ERROR, w.failure))

    def _settle(self, w: _Watch, outcome: Outcome) -> None:
        if self._watches.get(w.topic_id) is not w:
            return
        del self._watches[w.topic_id]
        if w.timer is not None:
            w.timer.cancel()
        for future in w.waiters:
            if not future.done():
                future.set_result(outcome)

    def close(self) -> None:
        for w in list(self._watches.values()):
            self._settle(w, (ErrorCode.NONE, None))
