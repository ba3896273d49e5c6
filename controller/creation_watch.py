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


# A watch's key: (topic id, its first new partition): 0 for a new topic, the topic's old
# partition count for a CreatePartitions.
Key = tuple[uuid.UUID, int]


@dataclass
class _Watch:
    key: Key
    name: str
    awaiting: set[tuple[int, int]]  # (broker id, partition)
    timer: TimerHandle | None = None
    failure: str | None = None
    waiters: list[asyncio.Future] = field(default_factory=list)

    @property
    def what(self) -> str:
        return "topic" if self.key[1] == 0 else "new partitions"


class CreationWatch:
    def __init__(self, time: Time, rollback: Callable[[Key, str, str], None]) -> None:
        """``rollback(key, topic name, reason)``: take the topic (or its new partitions) back;
        the controller calls ``rolled_back(key)`` once that is committed and the brokers have heard."""
        self.time = time
        self.rollback = rollback
        self._watches: dict[Key, _Watch] = {}
        self._by_topic: dict[uuid.UUID, list[_Watch]] = {}

    def watch(self, key: Key, name: str, replicas: dict[int, list[int]], answering: Callable[[int], bool]) -> None:
        """New partitions (all of a new topic's): ``replicas`` by partition; ``answering(broker)``:
        whether that broker is expected to answer its LeaderAndIsr soon (registered and unfenced)."""
        awaiting = {(b, pid) for pid, rs in replicas.items() for b in rs if answering(b)}
        if not awaiting or key in self._watches:
            return
        w = _Watch(key, name, awaiting)
        w.timer = self.time.schedule(WATCH_MS, lambda: self._settle(w, (ErrorCode.NONE, None)))
        self._watches[key] = w
        self._by_topic.setdefault(key[0], []).append(w)

    def outcome(self, key: Key) -> asyncio.Future:
        """Resolved with the watch's ``Outcome`` (at once when there is none)."""
        future = asyncio.get_running_loop().create_future()
        w = self._watches.get(key)
        if w is None:
            future.set_result((ErrorCode.NONE, None))
        else:
            w.waiters.append(future)
        return future

    def answered(self, broker_id: int, results: list[tuple[uuid.UUID, int, int]]) -> None:
        """A broker's LeaderAndIsr answer: (topic id, partition, error code) per partition."""
        for topic_id, pid, code in results:
            watches = self._by_topic.get(topic_id)
            if not watches:
                continue
            for w in list(watches):
                if w.failure is not None or (broker_id, pid) not in w.awaiting:
                    continue
                if code in FAILED:
                    first = w.key[1]
                    self._failed(w, f"broker {broker_id} could not create the replica {w.name}-{pid} "
                                    f"({ErrorCode(code).name}); " + ("the topic was not created" if first == 0 else
                                                                     f"partitions from {first} on were not added"))
                    continue
                if code != ErrorCode.NONE:
                    continue
                w.awaiting.discard((broker_id, pid))
                if not w.awaiting:
                    self._settle(w, (ErrorCode.NONE, None))

    def broker_gone(self, broker_id: int) -> None:
        """The broker was fenced or unregistered: no answer is waited for from it any more (its
        replicas are created when it comes back and gets its full state)."""
        for w in list(self._watches.values()):
            if w.failure is None:
                w.awaiting = {(b, pid) for b, pid in w.awaiting if b != broker_id}
                if not w.awaiting:
                    self._settle(w, (ErrorCode.NONE, None))

    def _failed(self, w: _Watch, failure: str) -> None:
        w.failure = failure
        log.error("creating %s of %s failed: %s; taking them back", w.what, w.name, failure)
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        self.rollback(w.key, w.name, failure)

    def failure(self, key: Key) -> str | None:
        """Why the watched partitions are being taken back (None: they are not, or not watched)."""
        w = self._watches.get(key)
        return None if w is None else w.failure

    def rolled_back(self, key: Key) -> None:
        w = self._watches.get(key)
        if w is not None:
            self._settle(w, (ErrorCode.KAFKA_STORAGE_ERROR, w.failure))

    def _settle(self, w: _Watch, outcome: Outcome) -> None:
        if self._watches.get(w.key) is not w:
            return
        del self._watches[w.key]
        watches = self._by_topic.get(w.key[0], [])
        if w in watches:
            watches.remove(w)
        if not watches:
            self._by_topic.pop(w.key[0], None)
        if w.timer is not None:
            w.timer.cancel()
        for future in w.waiters:
            if not future.done():
                future.set_result(outcome)

    def close(self) -> None:
        for w in list(self._watches.values()):
            self._settle(w, (ErrorCode.NONE, None))
