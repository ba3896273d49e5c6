"""Incremental fetch sessions (KIP-227), the server side: Kafka's FetchSession.scala.

A fetcher (a follower, or a consumer whose client supports sessions: the Java client,
kafka-python 2.1+) that sends a *full* fetch with session epoch 0 is given a session id; its
next fetches are *incremental*: they carry the session id and the next epoch, name only the
partitions whose fetch parameters changed (offset, log start, max bytes, leader epoch) or that
it adds, and list the partitions it drops (``forgotten_topics``). The broker keeps the rest
(``CachedPartition``), reads every partition of the session, and answers only those with
something new: records, a moved high watermark or log start offset, or an error. An idle
partition then costs neither request nor response bytes, nor their encoding and decoding.

Kafka's rules:

* session id 0 is "no session"; epoch 0 asks for a new one (a full fetch), epoch -1 (FINAL)
  is a full fetch that wants none (librdkafka, aiokafka and older clients: they send 0 / -1,
  or a version below 7 without the fields at all) — answered without a session, as before;
* a full fetch naming a session id closes that session first;
* an incremental fetch whose session is unknown (evicted, or this broker restarted) is
  answered FETCH_SESSION_ID_NOT_FOUND, one whose epoch is not the session's next
  INVALID_FETCH_SESSION_EPOCH; both with no partitions and session id 0, and nothing changes;
* an incremental fetch that leaves the session empty closes it (answered sessionless);
* epochs go 1, 2, ... 2^31-1, then 1 again;
* the cache holds ``max.incremental.fetch.session.cache.slots`` (1000) sessions. When it is
  full a new session may evict one that is stale (unused for 120 s, Kafka's
  MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS), else the least valuable evictable one, when
  the new one is worth more: followers' sessions (privileged) over consumers', then more
  partitions over fewer; a session younger than 120 s is evictable only by a privileged
  one, and a privileged one only once it is 120 s old. Otherwise the fetch is answered
  without a session.
* partitions answered in an incremental response go to the back of the session's order, so
  that a response cut by its size limit does not starve the ones behind.

The cache is on the event loop (no locks); eviction scans the sessions, which happens only
when the cache is full and a new session is asked for.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode
# session ids and epochs are the protocol's: the follower's handler uses the same
from protocol.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, MAX_EPOCH, next_epoch
from protocol.fast_codecs import FetchPartition, FetchPartitionData, FetchRequest

if TYPE_CHECKING:
    from protocol.clock import Time

log = logging.getLogger("kbroker.fetch_session")

_NONE = ErrorCode.NONE  # (read once: a member read through the enum class is a slow lookup)

_FULL_EPOCHS = frozenset({INITIAL_EPOCH, FINAL_EPOCH})

EVICTION_MS = 120_000  # Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS

TopicPartition = tuple[str, int]


class CachedPartition:
    """A partition of a session: the fetch parameters last sent, and the high watermark and
    log start offset last answered (-1: never, or an error: the next answer includes it)."""

    __slots__ = ("topic", "fetch", "high_watermark", "log_start_offset")

    def __init__(self, topic: str, fetch: FetchPartition, high_watermark: int = -1, log_start_offset: int = -1) -> None:
        self.topic = topic
        self.fetch = fetch
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset

    def must_respond(self, pd: FetchPartitionData, update: bool) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData."""
        respond = False
        records = pd.records
        if records is not None and len(records) > 0:
            respond = True
        if self.high_watermark != pd.high_watermark:
            respond = True
            if update:
                self.high_watermark = pd.high_watermark
        if self.log_start_offset != pd.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = pd.log_start_offset
        if pd.preferred_read_replica >= 0:
            respond = True
        if pd.error_code:
            respond = True
            if update:
                self.high_watermark = -1  # re-sent once the error is gone
        return respond


class FetchSession:
    __slots__ = ("id", "privileged", "partitions", "creation_ms", "last_used_ms", "epoch")

    def __init__(self, session_id: int, privileged: bool, partitions: dict[TopicPartition, CachedPartition],
                 now_ms: float, epoch: int) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions  # in the order they are read and answered
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = epoch

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={len(self.partitions)}, "
                f"epoch={self.epoch})")

    def update(self, topics: list[tuple[str, list[FetchPartition]]],
               forgotten: list[tuple[str, list[int]]]) -> tuple[int, int, int]:
        """An incremental request's partitions (added, or their parameters replaced) and
        forgotten ones (removed); returns (added, updated, removed)."""
        added = updated = removed = 0
        partitions = self.partitions
        for topic, parts in topics:
            for fp in parts:
                cached = partitions.get((topic, fp.partition))
                if cached is None:
                    partitions[(topic, fp.partition)] = CachedPartition(topic, fp)
                    added += 1
                else:
                    cached.fetch = fp
                    updated += 1
        for topic, indexes in forgotten:
            for index in indexes:
                if partitions.pop((topic, index), None) is not None:
                    removed += 1
        return added, updated, removed

    def fetch_topics(self) -> list[tuple[str, list[FetchPartition]]]:
        """Every partition of the session, as a request's topics (consecutive partitions of a
        topic grouped, in the session's order)."""
        partitions = self.partitions
        if len(partitions) == 1:  # (a follower of one partition: every fetch)
            for cached in partitions.values():
                return [(cached.topic, [cached.fetch])]
        out: list[tuple[str, list[FetchPartition]]] = []
        last = None
        for cached in partitions.values():
            if cached.topic != last:
                last = cached.topic
                out.append((last, []))
            out[-1][1].append(cached.fetch)
        return out

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, len(self.partitions), self.id)


class FetchSessionCache:
    def __init__(self, max_entries: int, time: "Time", eviction_ms: int = EVICTION_MS) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.time = time
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0  # Kafka's IncrementalFetchSessionEvictionsPerSec, as a count
        self._random = random.Random()

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def total_partitions(self) -> int:
        """Kafka's NumIncrementalFetchPartitionsCached."""
        return sum(len(s.partitions) for s in self.sessions.values())

    def new_session_id(self) -> int:
        while True:
            session_id = self._random.randint(1, MAX_EPOCH - 1)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(self, privileged: bool, partitions: dict[TopicPartition, CachedPartition]) -> int:
        """A new session of ``partitions`` if there is room (or room can be made); its id, or
        INVALID_SESSION_ID."""
        now = self.time.milliseconds()
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now):
            log.debug("no fetch session created for privileged=%s, %d partitions: the cache is full",
                      privileged, len(partitions))
            return INVALID_SESSION_ID
        session = FetchSession(self.new_session_id(), privileged, partitions, now, next_epoch(INITIAL_EPOCH))
        self.sessions[session.id] = session
        log.debug("created %r", session)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now: float) -> bool:
        """Kafka's FetchSessionCache.tryEvict (see the module docstring)."""
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stalest.last_used_ms > self.eviction_ms:
            self.remove(stalest.id)
            self.evictions += 1
            return True
        grown = [s for s in self.sessions.values() if now - s.creation_ms > self.eviction_ms]
        # evictable by a privileged session: any unprivileged one, and privileged ones once grown
        candidates = ([s for s in self.sessions.values() if not s.privileged or now - s.creation_ms > self.eviction_ms]
                      if privileged else grown)
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < victim.evictable_key():
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession) -> None:
        session.last_used_ms = self.time.milliseconds()


class FetchContext:
    """What one Fetch reads and how it is answered (Kafka's FetchContext and its kinds):
    ``error`` set: a session error, nothing read; ``session`` set: incremental; else full
    (``created`` when it may create a session) or sessionless."""

    __slots__ = ("cache", "error", "session", "request_epoch", "topics", "privileged", "create")
    lean = True  # response's one-partition case (False: the general loop, tests/broker/test_fetch_fast_path.py)

    def __init__(self, cache: FetchSessionCache, topics: list[tuple[str, list[FetchPartition]]],
                 error: int = ErrorCode.NONE, session: FetchSession | None = None, request_epoch: int = 0,
                 privileged: bool = False, create: bool = False) -> None:
        self.cache = cache
        self.error = error
        self.session = session
        self.request_epoch = request_epoch
        self.topics = topics  # the partitions to read: the request's, or the whole session's
        self.privileged = privileged
        self.create = create

    def response(self, results: list, update: bool = True) -> tuple[list, int, int]:
        """(results to send, session id, top-level error) for the partitions read, ``results``
        [(topic, [FetchPartitionData])] in ``topics``' order. ``update=False``: what would be
        sent, the session left as it is (the response's size for a quota)."""
        if self.error:
            return [], INVALID_SESSION_ID, self.error
        session = self.session
        if session is None:
            if not self.create or not update:
                return results, INVALID_SESSION_ID, ErrorCode.NONE
            partitions = {}
            by_key = {(t, fp.partition): fp for t, parts in self.topics for fp in parts}
            for topic, parts in results:
                for pd in parts:
                    fp = by_key[(topic, pd.partition)]
                    hw = -1 if pd.error_code else pd.high_watermark
                    partitions[(topic, pd.partition)] = CachedPartition(topic, fp, hw, pd.log_start_offset)
            return results, self.cache.maybe_create_session(self.privileged, partitions), ErrorCode.NONE
        request_epoch = self.request_epoch  # (next_epoch's common case inline: an incremental fetch's epoch >= 1)
        if (session.epoch != (request_epoch + 1 if 0 < request_epoch < MAX_EPOCH else next_epoch(request_epoch))
                or self.cache.sessions.get(session.id) is not session):
            # another fetch of this session was answered meanwhile (a duplicate): Kafka's check
            log.info("incremental fetch session %d expected epoch %d, but got %d: possible duplicate request",
                     session.id, next_epoch(self.request_epoch), session.epoch)
            return [], session.id, ErrorCode.INVALID_FETCH_SESSION_EPOCH
        partitions = session.partitions
        if len(results) == 1 and self.lean:
            topic, parts = results[0]
            if len(parts) == 1:
                # one partition read (a follower of a single partition, issue 29): the loop below
                pd = parts[0]
                cached = partitions.get((topic, pd.partition))
                if cached is None:
                    return results, session.id, _NONE
                # cached.must_respond(pd, update), inline (its reference: a change there is made here too)
                respond = False
                records = pd.records
                if records is not None and len(records) > 0:
                    respond = True
                hw = pd.high_watermark
                if cached.high_watermark != hw:
                    respond = True
                    if update:
                        cached.high_watermark = hw
                log_start = pd.log_start_offset
                if cached.log_start_offset != log_start:
                    respond = True
                    if update:
                        cached.log_start_offset = log_start
                if pd.preferred_read_replica >= 0:
                    respond = True
                if pd.error_code:
                    respond = True
                    if update:
                        cached.high_watermark = -1  # re-sent once the error is gone
                if respond:
                    if update and len(partitions) > 1:
                        key = (topic, pd.partition)
                        partitions[key] = partitions.pop(key)  # answered: to the back
                    return results, session.id, _NONE
                return [], session.id, _NONE
        get = partitions.get
        out = []
        moved = []
        for topic, parts in results:
            kept = []
            for pd in parts:
                key = (topic, pd.partition)
                cached = get(key)
                if cached is None or cached.must_respond(pd, update):
                    kept.append(pd)
                    if update and cached is not None:
                        moved.append(key)
            if kept:
                out.append((topic, kept))
        if len(partitions) > 1:  # (one partition is at the back already)
            for key in moved:  # answered: to the back of the session's order
                partitions[key] = partitions.pop(key)
        return out, session.id, ErrorCode.NONE

    def throttled(self) -> tuple[int, int]:
        """(session id, error) of the empty answer a throttled fetch gets (Kafka's
        getThrottledResponse): a full fetch creates no session."""
        session = self.session
        if self.error or session is None:
            return INVALID_SESSION_ID, self.error
        if session.epoch != next_epoch(self.request_epoch):
            return session.id, ErrorCode.INVALID_FETCH_SESSION_EPOCH
        return session.id, ErrorCode.NONE


class FetchManager:
    """Kafka's FetchManager: the context of each Fetch."""

    lean = True  # new_context's one-partition case (False: the general path, tests/broker/test_fetch_fast_path.py)

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(self, request: FetchRequest, from_follower: bool) -> FetchContext:
        cache = self.cache
        session_id, epoch = request.session_id, request.session_epoch
        if epoch in _FULL_EPOCHS:  # a full fetch
            if session_id != INVALID_SESSION_ID and cache.remove(session_id) is not None:
                log.debug("full fetch closed fetch session %d", session_id)
            return FetchContext(cache, request.topics, privileged=from_follower,
                                create=epoch == INITIAL_EPOCH and request.version >= 7)
        session = cache.sessions.get(session_id)  # (FetchSessionCache.get without its call)
        if session is None:
            log.debug("fetch session %d not found", session_id)
            return FetchContext(cache, [], error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            log.debug("fetch session %d: expected epoch %d, got %d", session_id, session.epoch, epoch)
            return FetchContext(cache, [], error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        topics = request.topics
        if len(topics) == 1 and len(session.partitions) == 1 and not request.forgotten_topics and self.lean:
            topic, parts = topics[0]
            if len(parts) == 1:
                fp = parts[0]
                cached = session.partitions.get((topic, fp.partition))
                if cached is not None:
                    # A session of one partition that the request names (a follower of a single
                    # partition: its every fetch, at its new offset, issue 29): what update,
                    # fetch_topics and the lines below do, the request's topics being the session's.
                    cached.fetch = fp
                    session.last_used_ms = cache.time.milliseconds()  # (touch, without its call)
                    # next_epoch, without its call: epoch is the session's, >= 1
                    session.epoch = epoch + 1 if epoch < MAX_EPOCH else 1
                    return FetchContext(cache, topics, _NONE, session, epoch)
        session.update(topics, request.forgotten_topics)
        if not session.partitions:
            log.debug("fetch session %d closed: no partitions left", session_id)
            cache.remove(session_id)
            return FetchContext(cache, request.topics)
        cache.touch(session)
        session.epoch = next_epoch(session.epoch)
        # (positional: a call with keywords costs the interpreter a dict, per follower fetch)
        return FetchContext(cache, session.fetch_topics(), ErrorCode.NONE, session, epoch)
