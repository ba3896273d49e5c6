"""Follower replication: ReplicaFetcherManager and one ReplicaFetcher coroutine per leader.

A fetcher fetches every partition it follows from its source broker in one Fetch request
(replica_id = this broker's id), appends what comes back with ``append_as_follower`` and
takes the leader's high watermark. Partitions come and go (``add_partitions`` /
``remove_partitions``) without restarting the coroutine; a response for a partition whose
fetch state changed meanwhile (removed, or re-added for a new leader epoch) is ignored.

Truncation on becoming a follower is by leader epoch (KIP-101/KIP-279), not by high
watermark: the follower asks its leader (OffsetsForLeaderEpoch) for the end offset of its
own latest epoch, and truncates to the point where the two logs diverge — possibly over
several rounds, when the leader's answer names an older epoch than the one asked for.

A follower without any leader epoch (an empty log, or a lost or damaged leader-epoch
checkpoint) truncates to its high watermark instead, as Kafka does, as soon as it is added:
that needs nothing from the leader, which may be unreachable.

Errors: NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH, FENCED_LEADER_EPOCH and the like back
the partition off for replica.fetch.backoff.ms (a newer LeaderAndIsr will re-add it);
OFFSET_OUT_OF_RANGE resets the fetch position from the leader's offsets; a lost
connection backs the whole fetcher off and reconnects. Backoffs are timers on the injected
clock. Connections go through ``protocol.client`` (the one client), on the injected network.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING, Any, Callable, Coroutine

from protocol.api_keys import ApiKey
from protocol.client import DEFAULT_NETWORK, BrokerConnection, KafkaConnectionError, Network, sleep
from protocol.clock import Time
from protocol.errors import ErrorCode, KafkaError
from protocol.fast_codecs import FetchPartition, FetchRequest, FetchResponse, decode_fetch_response, encode_fetch_request
from protocol.fetch_session import MAX_EPOCH, FetchRequestData, FetchSessionHandler
from protocol.records import HEADER_SIZE, LOG_OVERHEAD, iter_batch_headers

from .partition import partition_names

if TYPE_CHECKING:
    from .config import KafkaConfig
    from .metadata_cache import MetadataCache
    from storage import Log

    from .partition import Partition
    from .replication_quota import ReplicationQuotaManager

log = logging.getLogger("kbroker.fetcher")

_FIRST_BATCH_OFFSETS = struct.Struct(">q")   # a batch header's base offset (byte 0)
_LAST_OFFSET_DELTA = struct.Struct(">i")     # and its last offset delta (byte 23)
_BATCH_LENGTH = struct.Struct(">i")          # its batch length (byte 8)
# The steady state's Fetch v11 (ReplicaFetcher._fetch): the request's correlation id and session
# epoch (int32), its one partition's fetch offset (int64); the response body's head (throttle,
# error, session id, topic count) and, after the topic name, its one partition's (partition
# count, then partition, error, high watermark, last stable offset, log start offset, aborted
# transactions count, preferred replica, records size), as protocol/fast_codecs.py lays them out:
# what a response must start with (after its throttle time) to be read in place.
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SESSION_ANSWER = struct.Struct(">hii")  # (after the throttle time) error, session id, topic count
_PARTITION_ANSWER = struct.Struct(">hqqqiii")  # (after its index) error ... records size

# Test-only switches that re-introduce replication bugs the simulator must find (sim/bugs.py
# turns them on for a run; never set otherwise); read only on rare paths (a log start that
# moved, a follower without leader epochs).
BUG_LOG_START_BEFORE_HW = False  # the leader's log start applied before its high watermark
BUG_NO_TRUNCATION_WITHOUT_EPOCHS = False  # no truncation to the HW when the epoch cache is empty

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class PartitionFetchState:
    """Where a followed partition stands: truncating (asking the leader where the logs
    diverge) or fetching; and until when it is backed off."""

    __slots__ = ("partition", "leader_epoch", "truncating", "delayed_until_ms", "lag")

    def __init__(self, partition: "Partition", leader_epoch: int) -> None:
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.truncating = True
        self.delayed_until_ms = 0.0
        self.lag = -1  # the leader's HW minus our LEO at the last fetch (-1: not fetched yet)

    def __repr__(self) -> str:
        return (f"PartitionFetchState({self.partition.topic}-{self.partition.partition}, epoch={self.leader_epoch}, "
                f"{'truncating' if self.truncating else 'fetching'})")


# (_start_steady's markers: the session epoch's and the fetch offset's places in its requests)
_EPOCH_MARK, _OFFSET_MARK = 0x4B42524B, 0x4B42524B45525321


class _SteadyFetch:
    """The Fetch requests of a fetcher's steady state (``ReplicaFetcher._fetch``), encoded once:
    one partition in an incremental fetch session, for one connection and one fetch state. Each
    next request differs only in its correlation id, session epoch and fetch offset, patched into
    ``one`` (the partition's fetch offset moved: it is sent) or ``empty`` (it did not: no
    partition is sent), both encoded by ``encode_fetch_request`` itself. ``sent`` is the
    session's entry for the partition (``partitions``, the session's dict, holds it alone):
    this path keeps it at the offset last sent, as FetchSessionHandler.build does."""

    __slots__ = ("conn", "api_versions", "state", "log_start", "partitions", "sent", "version", "one", "empty",
                 "epoch_at", "offset_at", "frame", "no_answer", "answer", "answer_end")

    def __init__(self, conn: BrokerConnection, state: PartitionFetchState, log_start: int,
                 partitions: dict[tuple[str, int], FetchPartition], version: int, session_id: int, one: bytearray,
                 empty: bytearray) -> None:
        self.conn = conn
        self.api_versions = conn.api_versions
        self.state = state
        self.log_start = log_start
        self.partitions = partitions
        (self.sent,) = partitions.values()
        self.version = version
        key = state.partition.key
        topic = key[0].encode()
        # A response body starts with the throttle time, then (from byte 8 of the frame) no error,
        # this session, and either no topic or this partition alone; its fields from answer_end.
        self.no_answer = _SESSION_ANSWER.pack(0, session_id, 0)
        self.answer = _SESSION_ANSWER.pack(0, session_id, 1) + _I16.pack(len(topic)) + topic + \
            _I32.pack(1) + _I32.pack(key[1])
        self.answer_end = 8 + len(self.answer)
        self.one = one
        self.empty = empty
        # Fetch v11's tail: the session epoch, the topic count, no forgotten topics, an empty
        # rack id; the partition's fetch offset, log start offset and max bytes before those last two.
        self.epoch_at = len(empty) - 14
        self.offset_at = len(one) - 26
        self.frame = one

    def fits(self) -> bool:
        """The markers ``_start_steady`` encoded are where the patches go (the layout above)."""
        return (_I32.unpack_from(self.one, self.epoch_at)[0] == _EPOCH_MARK
                and _I32.unpack_from(self.empty, self.epoch_at)[0] == _EPOCH_MARK
                and _I64.unpack_from(self.one, self.offset_at)[0] == _OFFSET_MARK)

    def encode(self, correlation_id: int) -> tuple[bytes]:
        frame = self.frame
        _I32.pack_into(frame, 8, correlation_id)
        return (bytes(frame),)


class ReplicaFetcher:
    def __init__(self, manager: "ReplicaFetcherManager", source_id: int, host: str, port: int) -> None:
        self.manager = manager
        self.source_id = source_id
        self.host = host
        self.port = port
        self.partitions: dict[tuple[str, int], PartitionFetchState] = {}
        self._wakeup = asyncio.Event()
        self._conn: BrokerConnection | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._throttled_until_ms = 0.0  # every ready partition held back by the follower quota until then
        self.session = FetchSessionHandler(source_id)  # KIP-227, with the source broker
        self._steady: _SteadyFetch | None = None

    def __repr__(self) -> str:
        return f"ReplicaFetcher(source={self.source_id} at {self.host}:{self.port}, {len(self.partitions)} partitions)"

    # -- membership ------------------------------------------------------------------------
    def add_partitions(self, states: dict[tuple[str, int], PartitionFetchState]) -> None:
        for key, state in states.items():
            self._truncate_without_epochs(key, state)
        self.partitions.update(states)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.source_id}")
            self._task.add_done_callback(self._on_done)

    def remove_partitions(self, keys) -> None:
        for key in keys:
            self.partitions.pop(key, None)
        steady = self._steady
        if steady is not None and steady.state.partition.key not in self.partitions:
            self._steady = None  # (its state, partition and log are not kept alive)

    def _on_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None and not self._stopping:
            log.error("replica fetcher for broker %d died: %r; restarting it", self.source_id, task.exception())
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.source_id}")
            self._task.add_done_callback(self._on_done)

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self._conn is not None:
            self._conn.close()

    # -- the loop --------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff_ms = self.manager.backoff_ms
        time = self.manager.time
        while not self._stopping:
            try:
                conn = self._conn
                if conn is None or not conn.connected:  # (_connection's test: no coroutine per fetch)
                    conn = await self._connection()
                for s in self.partitions.values():  # (any(), without a generator per fetch)
                    if s.truncating:
                        await self._truncate(conn)
                        break
                if not await self._fetch(conn):
                    await self._idle()
            except (KafkaConnectionError, OSError, asyncio.TimeoutError) as exc:
                log.warning("fetcher from broker %d at %s:%d: %s; retrying in %d ms", self.source_id, self.host,
                            self.port, exc, self.manager.backoff_ms)
                self._drop_connection()
                await sleep(time, backoff_ms)
            except KafkaError as exc:
                log.warning("fetcher from broker %d: %s; retrying in %d ms", self.source_id, exc,
                            self.manager.backoff_ms)
                self._drop_connection()
                await sleep(time, backoff_ms)

    async def _idle(self) -> None:
        """Nothing to fetch now: wait for a partition to be added or a backoff to end (a timer
        on the injected clock)."""
        self._wakeup.clear()
        now = self.manager.time.monotonic_ms()
        delays = [s.delayed_until_ms - now for s in self.partitions.values() if s.delayed_until_ms > now]
        if self._throttled_until_ms > now:
            delays.append(self._throttled_until_ms - now)
        timer = self.manager.time.schedule(min(delays), self._wakeup.set) if delays else None
        try:
            await self._wakeup.wait()
        finally:
            if timer is not None:
                timer.cancel()

    async def _connection(self) -> BrokerConnection:
        if self._conn is None or not self._conn.connected:
            conn = BrokerConnection(self.host, self.port, client_id=f"broker-{self.manager.broker_id}-fetcher",
                                    network=self.manager.network, time=self.manager.time,
                                    request_timeout_ms=self.manager.socket_timeout_ms)
            await conn.connect()
            self._conn = conn
        return self._conn

    def _drop_connection(self) -> None:
        self._steady = None  # (encoded for that connection)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _ready(self) -> dict[tuple[str, int], PartitionFetchState]:
        now = self.manager.time.monotonic_ms()
        return {k: s for k, s in self.partitions.items() if s.delayed_until_ms <= now}

    def _back_off(self, key: tuple[str, int], state: PartitionFetchState, why: str) -> None:
        log.info("fetch of %s-%d from broker %d backs off: %s", key[0], key[1], self.source_id, why)
        state.delayed_until_ms = self.manager.time.monotonic_ms() + self.manager.backoff_ms

    # -- truncation (KIP-101) --------------------------------------------------------------
    async def _truncate(self, conn: BrokerConnection) -> None:
        pending = {k: s for k, s in self._ready().items() if s.truncating}
        if not pending:
            return
        asks = {}
        for key, state in pending.items():
            epoch = state.partition.log.leader_epoch_cache.latest_epoch()
            if epoch is None:
                if BUG_NO_TRUNCATION_WITHOUT_EPOCHS:
                    state.truncating = False
                    continue
                # No epoch history (an empty log, or a leader-epoch checkpoint lost or damaged):
                # nothing tells where the logs diverge, so keep only what is known committed, the
                # high watermark (Kafka's truncateToHighWatermark for partitions without epochs).
                self._truncate_to_high_watermark(key, state)
                continue
            asks[key] = epoch
        if not asks:
            return
        by_topic: dict[str, list] = {}
        for (topic, p), epoch in asks.items():
            by_topic.setdefault(topic, []).append(
                {"partition": p, "current_leader_epoch": pending[(topic, p)].leader_epoch, "leader_epoch": epoch})
        response = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": self.manager.broker_id,
            "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()]})
        for t in response.topics:
            for r in t.partitions:
                key = (t.topic, r.partition)
                state = self.partitions.get(key)
                if state is None or state is not pending.get(key):
                    continue  # removed or replaced while we asked
                if r.error_code:
                    self._back_off(key, state, f"OffsetsForLeaderEpoch: {ErrorCode(r.error_code).name}")
                    continue
                self._apply_truncation(key, state, r.leader_epoch, r.end_offset)

    def _truncate_without_epochs(self, key, state: PartitionFetchState) -> None:
        """A partition added without any leader epoch truncates to its high watermark at once,
        here: that needs nothing from the leader (Kafka's maybeTruncate runs truncateToHighWatermark
        without a request). Waiting for a connection left the tail above the HW in place while the
        leader was unreachable (dead, or cut off); a crash meanwhile then rebuilt leader epochs
        for that tail from its batches (recovery), and epoch truncation against a leader that
        knows no older epochs kept it: two ISR members holding different records at the same
        offsets (simulator seed 2771)."""
        log_ = state.partition.log
        if BUG_NO_TRUNCATION_WITHOUT_EPOCHS or log_ is None or log_.leader_epoch_cache.latest_epoch() is not None:
            return
        try:
            self._truncate_to_high_watermark(key, state)
        except OSError as exc:  # (a failing disk: the loop's truncation round tries again)
            state.truncating = True
            log.warning("%s-%d: truncating to the high watermark failed: %s; retrying before fetching", key[0], key[1],
                        exc)

    def _truncate_to_high_watermark(self, key, state: PartitionFetchState) -> None:
        log_ = state.partition.log
        hw = log_.high_watermark
        if hw < log_.log_end_offset:
            log.info("%s-%d: no leader epochs known; truncating from %d to the high watermark %d", key[0], key[1],
                     log_.log_end_offset, hw)
            self._truncate_log(log_, hw)
        state.truncating = False

    def _apply_truncation(self, key, state: PartitionFetchState, leader_epoch: int, leader_end_offset: int) -> None:
        """Kafka's AbstractFetcherThread.getOffsetTruncationState, then truncate."""
        log_ = state.partition.log
        leo = log_.log_end_offset
        if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
            # The leader knows no epoch at or below ours: fall back to the high watermark.
            target, done = log_.high_watermark, True
        elif leader_epoch == UNDEFINED_EPOCH:
            target, done = min(leader_end_offset, leo), True
        else:
            follower_epoch, follower_end = log_.leader_epoch_cache.end_offset_for(leader_epoch, leo)
            if follower_epoch == UNDEFINED_EPOCH:
                target, done = min(leader_end_offset, leo), True
            elif follower_epoch != leader_epoch:
                target, done = follower_end, False  # another round, from our next-older epoch
            else:
                target, done = min(leader_end_offset, follower_end), True
        if target < leo:
            log.info("%s-%d: truncating from %d to %d (leader epoch %d ends at %d on broker %d)", key[0], key[1],
                     leo, target, leader_epoch, leader_end_offset, self.source_id)
            self._truncate_log(log_, target)
        else:
            # Nothing to cut, but an epoch starting at our log end (one this broker led without
            # appending) conflicts with the leader's history: it goes, as Kafka's truncateTo drops
            # it; else the next round would ask about that same epoch again, for ever.
            log_.leader_epoch_cache.truncate_from_end(leo)
        state.truncating = not done

    def _truncate_log(self, log_: Log, offset: int) -> None:
        below_recovery_point = offset < log_.recovery_point
        log_.truncate_to(offset)
        if below_recovery_point and self.manager.on_truncated_below_recovery_point is not None:
            self.manager.on_truncated_below_recovery_point(log_)

    # -- fetching --------------------------------------------------------------------------
    # The steady state of a follower of one partition (issue 29), written out beside the general
    # way below, the reference (tests/broker/test_fetcher_lean.py holds the two alike; False
    # sends every fetch the general way).
    lean = True

    def _fetch(self, conn: BrokerConnection) -> Coroutine[Any, Any, bool]:
        """One Fetch for every ready, non-truncating partition; awaited, False if there was none.

        In an incremental fetch session (KIP-227, protocol/fetch_session.py) the request names
        only the partitions whose fetch position changed, and the leader answers only those
        with something new: an idle partition costs no request or response bytes.

        The steady state, one partition fetched in an incremental session (not truncating, not
        backed off, no follower quota throttling anything), goes without the general way's
        objects (``_fetch_steady``); else ``_fetch_any``. (A function giving the coroutine of
        either: no coroutine of its own.)"""
        if self.lean and len(self.partitions) == 1 and self.session.epoch > 0:
            ((key, state),) = self.partitions.items()
            m = self.manager
            if not state.truncating and (state.delayed_until_ms <= 0.0
                                         or state.delayed_until_ms <= m.time.monotonic_ms()):
                quota = getattr(m, "follower_quota", None)
                if quota is None or not quota.throttled:
                    steady = self._steady
                    log_ = state.partition.log
                    if steady is None or steady.state is not state or steady.conn is not conn \
                            or steady.partitions is not self.session.session_partitions \
                            or steady.api_versions is not conn.api_versions or steady.log_start != log_.log_start_offset:
                        steady = self._start_steady(conn, key, state, log_)
                    if steady is not None:
                        return self._fetch_steady(conn, steady, key, state)
        return self._fetch_any(conn)

    async def _fetch_any(self, conn: BrokerConnection) -> bool:
        """``_fetch`` of any partitions in any session state: the reference of ``_fetch_steady``."""
        m = self.manager
        now = m.time.monotonic_ms()  # (_ready's, without its dict)
        ready = {k: s for k, s in self.partitions.items() if s.delayed_until_ms <= now and not s.truncating}
        if not ready:
            return False
        quota = getattr(m, "follower_quota", None)
        if quota is not None and quota.throttled:
            # KIP-73 (Kafka's ReplicaFetcherThread.shouldFollowerThrottle): a throttled partition
            # this replica has not caught up on is left out while the follower quota is exceeded
            held = [k for k, s in ready.items() if s.lag != 0 and quota.is_throttled(*k)]
            if held and quota.is_quota_exceeded():
                quota.throttled_fetches += len(held)
                for k in held:
                    del ready[k]
                if not ready:
                    # back when the rate is within the quota again (at most replica.fetch.backoff.ms)
                    wait = min(m.backoff_ms, max(1, quota.throttle_time_ms()))
                    self._throttled_until_ms = m.time.monotonic_ms() + wait
                    return False
        # a partition left out (held back, backing off) leaves the session as Kafka's builder does
        wanted = {}
        max_bytes = m.fetch_max_bytes
        for key, state in ready.items():
            log_ = state.partition.log
            wanted[key] = FetchPartition(key[1], state.leader_epoch, log_.log_end_offset, log_.log_start_offset,
                                         max_bytes)
        session = self.session
        data = session.build(wanted)
        request = FetchRequest(11, m.broker_id, m.fetch_wait_max_ms, m.fetch_min_bytes, m.fetch_response_max_bytes,
                               0, data.session_id, data.epoch, data.to_send, data.to_forget, "")
        try:
            # eager: the response is processed, and the next Fetch (which tells the leader our new
            # log end: its HW and the acks=all produces waiting on it move) sent, in the loop turn
            # that reads it, ahead of that turn's other reads (protocol/client/eager.py)
            response = await conn.fetch(request, eager=True)
        except BaseException:
            session.handle_error()
            raise
        return self._handle_response(response, data, ready)

    def _handle_response(self, response: FetchResponse, data: FetchRequestData,
                         ready: dict[tuple[str, int], PartitionFetchState]) -> bool:
        session = self.session
        if not session.handle_response(response, data):
            if response.error_code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
                return True  # the next fetch is a full one, at once
            if response.error_code:
                raise KafkaError(f"Fetch from broker {self.source_id}: {ErrorCode(response.error_code).name}")
            return True
        unused = False
        for topic, parts in response.responses:
            for pd in parts:
                key = (topic, pd.partition)
                state = self.partitions.get(key)
                if state is None or state is not ready.get(key):
                    # Removed, or replaced (a LeaderAndIsr of a new leader epoch) while we asked.
                    # The leader's session took this answer as delivered: its high watermark
                    # and log start are not sent again until they change, and a replaced
                    # partition that truncates before the next Fetch stays in the session. On a
                    # quiet partition its HW never came (simulator seed 2301).
                    unused = unused or state is not None
                    continue
                self._process_partition(key, state, pd)
        if unused:
            session.resend_all()
        return True

    def _start_steady(self, conn: BrokerConnection, key: tuple[str, int], state: PartitionFetchState,
                      log_: Log) -> _SteadyFetch | None:
        """Encode the steady state's requests (``_SteadyFetch``) when the session is in it: it
        holds this one partition alone, as last sent with the partition's leader epoch, log start
        and max bytes of now, and the connection speaks Fetch v11. None when it does not (the
        general way fetches then, and moves the session on; it does for a connection that is not a
        BrokerConnection, as tests script a leader). The session epoch and fetch offset are encoded
        as markers and found where _SteadyFetch patches them, or None: a layout the offsets do not
        fit (a rack id, forgotten topics) is fetched the general way, never patched wrongly."""
        if not isinstance(conn, BrokerConnection):
            return None
        try:
            version = conn.fetch_version()
        except KafkaError:  # (no Fetch in common: the general way raises it, after its session's bookkeeping)
            return None
        m = self.manager
        session = self.session
        sent = session.session_partitions.get(key)
        log_start = log_.log_start_offset
        max_bytes = m.fetch_max_bytes
        if sent is None or len(session.session_partitions) != 1 or sent.partition != key[1] \
                or sent.current_leader_epoch != state.leader_epoch or sent.log_start_offset != log_start \
                or sent.partition_max_bytes != max_bytes or version != 11:
            return None
        request = FetchRequest(11, m.broker_id, m.fetch_wait_max_ms, m.fetch_min_bytes, m.fetch_response_max_bytes,
                               0, session.session_id, _EPOCH_MARK,
                               [(key[0], [FetchPartition(key[1], state.leader_epoch, _OFFSET_MARK, log_start,
                                                         max_bytes)])], [], "")
        one = bytearray(encode_fetch_request(version, 0, conn.client_id, request))
        request.topics = []
        empty = bytearray(encode_fetch_request(version, 0, conn.client_id, request))
        fp = FetchPartition(key[1], state.leader_epoch, sent.fetch_offset, log_start, max_bytes)
        steady = _SteadyFetch(conn, state, log_start, {key: fp}, version, session.session_id, one, empty)
        if not steady.fits():
            self._steady = None
            return None
        # the session's entry, this path's own (a new, equal one)
        session.session_partitions = steady.partitions
        self._steady = steady
        return steady

    async def _fetch_steady(self, conn: BrokerConnection, steady: _SteadyFetch, key: tuple[str, int],
                            state: PartitionFetchState) -> bool:
        """``_fetch``'s steady state (see there): the general way's request, byte for byte, and
        what it does with a response; a response of any other shape goes to ``_handle_response``."""
        session = self.session
        epoch = session.epoch
        leo = state.partition.log.log_end_offset
        sent = steady.sent
        if sent.fetch_offset != leo:  # (FetchSessionHandler.build's to_send: the partition, or nothing)
            sent.fetch_offset = leo
            frame = steady.frame = steady.one
            _I64.pack_into(frame, steady.offset_at, leo)
            sends_partition = True
        else:
            frame = steady.frame = steady.empty
            sends_partition = False
        _I32.pack_into(frame, steady.epoch_at, epoch)
        try:
            raw = await conn.send_fetch(steady.encode, self.manager.fetch_wait_max_ms)  # (eager, as the general way's)
        except BaseException:
            session.handle_error()
            raise
        # The body: no error, our session, and no partition, or ours alone without error or aborted
        # transactions (the session epoch moves on as FetchSessionHandler.handle_response moves it:
        # the epoch is above 0 here, next_epoch(epoch) is epoch + 1 but after MAX_EPOCH).
        pos = steady.answer_end
        if len(raw) >= pos + 38 and raw.startswith(steady.answer, 8):
            error, hw, _lso, log_start, naborted, _preferred, size = _PARTITION_ANSWER.unpack_from(raw, pos)
            pos += 38
            # (size -1: null records, which _take takes as it takes none, an empty view here)
            if not error and naborted == -1 and -1 <= size and pos + size <= len(raw):
                session.epoch = epoch + 1 if epoch < MAX_EPOCH else 1
                current = self.partitions.get(key)
                if current is state:
                    self._take(key, state, memoryview(raw)[pos:pos + size], hw, log_start)
                elif current is not None:  # replaced while we asked (the general way's comment)
                    session.resend_all()
                return True
        elif raw.startswith(steady.no_answer, 8):
            session.epoch = epoch + 1 if epoch < MAX_EPOCH else 1
            return True
        try:
            response = decode_fetch_response(steady.version, memoryview(raw), 4)
        except BaseException:  # (the general way's decoding is in its ``conn.fetch``)
            session.handle_error()
            raise
        to_send = [(key[0], [FetchPartition(key[1], state.leader_epoch, leo, steady.log_start, sent.partition_max_bytes)])]
        return self._handle_response(response, FetchRequestData(
            session.session_id, epoch, to_send if sends_partition else [], [], False), {key: state})

    def _process_partition(self, key, state: PartitionFetchState, pd) -> None:
        error = pd.error_code
        if not error:
            self._take(key, state, pd.records, pd.high_watermark, pd.log_start_offset)
        elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._handle_out_of_range(key, state, pd)
        else:
            self._back_off(key, state, ErrorCode(error).name)

    def _take(self, key, state: PartitionFetchState, fetched, hw: int, log_start: int) -> None:
        """A partition's answer without an error: its records (a buffer, or None), the leader's
        high watermark and log start offset."""
        log_ = state.partition.log
        if fetched is not None and len(fetched):
            n = len(fetched)
            if n >= HEADER_SIZE and _BATCH_LENGTH.unpack_from(fetched, 8)[0] + LOG_OVERHEAD == n:
                records = fetched  # one whole batch: _whole_batches's first test, inline
            else:
                records = _whole_batches(fetched)
                if not len(records):
                    # not one whole batch (KIP-74: a leader answers its first batch whole,
                    # whatever the size asked): the same fetch would get the same for ever
                    self._back_off(key, state, f"the leader's answer at offset {log_.log_end_offset} holds "
                                               f"{n} bytes and no whole batch")
                    return
            try:
                if log_.log_end_offset == log_.log_start_offset:  # (_maybe_start_at_first_batch's first test)
                    self._maybe_start_at_first_batch(key, log_, records)
                log_.append_as_follower(records)
            except KafkaError as exc:
                self._back_off(key, state, f"append failed: {exc}")
                return
            topic_stats = self.manager.topic_stats
            if topic_stats is not None:
                topic_stats.topic(key[0]).replication_bytes_in += len(fetched)
            quota = getattr(self.manager, "follower_quota", None)
            if quota is not None and quota.is_throttled(*key):  # in sync or not (Kafka's rule)
                quota.record(len(fetched))
        # The HW first (clamped to our LEO), then the log start: the leader's log start is at
        # most its HW, so at most our new HW, but may be above our old one (Kafka's order).
        if BUG_LOG_START_BEFORE_HW and log_start > log_.log_start_offset:
            log_.maybe_increment_log_start_offset(log_start)
        log_.update_high_watermark(hw)
        if log_start > log_.log_start_offset:
            log_.maybe_increment_log_start_offset(log_start)
        lag = hw - log_.log_end_offset
        state.lag = lag if lag > 0 else 0  # Kafka's FetcherLagMetrics ConsumerLag

    @staticmethod
    def _maybe_start_at_first_batch(key, log_: Log, records) -> None:
        """An empty log (LEO = log start) whose fetch offset falls inside the leader's first
        batch: the leader's log start is inside that batch (DeleteRecords, or retention, to an
        offset in the middle of a batch) and the read returns it whole. The log starts over at
        the batch's base offset and takes it (Kafka's Partition.appendRecordsToFollowerOrFutureReplica
        on UnexpectedAppendOffsetException); the log start then moves up to the leader's with
        the answer's log start offset. Else each fetch met the same batch for ever."""
        leo = log_.log_end_offset
        if leo != log_.log_start_offset or len(records) < 61:
            return
        base = _FIRST_BATCH_OFFSETS.unpack_from(records, 0)[0]
        last_delta = _LAST_OFFSET_DELTA.unpack_from(records, 23)[0]
        if base < leo <= base + last_delta:
            log.info("%s-%d: the leader's first batch %d-%d holds our log end %d; starting over at %d", key[0], key[1],
                     base, base + last_delta, leo, base)
            log_.truncate_fully_and_start_at(base)

    def _handle_out_of_range(self, key, state: PartitionFetchState, pd) -> None:
        """Our LEO is outside the leader's log: start over at the leader's log start if we
        are behind it; without leader epochs, cut back to the leader's high watermark if we
        are ahead of it (Kafka's fetchOffsetAndTruncate cuts to the leader's log end: the
        answer carries its HW, which is at most that, and all of it committed); else re-run
        epoch truncation."""
        log_ = state.partition.log
        leo = log_.log_end_offset
        if 0 <= pd.log_start_offset and leo < pd.log_start_offset:
            log.info("%s-%d: our log end %d is below the leader's log start %d; starting over there",
                     key[0], key[1], leo, pd.log_start_offset)
            log_.truncate_fully_and_start_at(pd.log_start_offset)
        elif 0 <= pd.high_watermark < leo and log_.leader_epoch_cache.latest_epoch() is None:
            # (Epoch truncation would cut to our own HW, which may be above the leader's log end:
            # the same fetch would be out of range again, for ever.)
            log.info("%s-%d: no leader epochs known and our log end %d is out of the leader's range; truncating "
                     "to the leader's high watermark %d", key[0], key[1], leo, pd.high_watermark)
            if pd.high_watermark < log_.log_start_offset:
                log_.truncate_fully_and_start_at(pd.high_watermark)
            else:
                self._truncate_log(log_, pd.high_watermark)
            state.truncating = False
        else:
            state.truncating = True


def _whole_batches(records):
    """The complete batches of a fetched blob: a size-limited response may end in a partial one."""
    n = len(records)
    if n >= HEADER_SIZE and _BATCH_LENGTH.unpack_from(records, 8)[0] + LOG_OVERHEAD == n:
        return records  # one whole batch (a fetch at low load): what the loop below keeps, all of it
    end = 0
    for pos, header in iter_batch_headers(records):
        end = pos + header.size
    return records[:end]


class ReplicaFetcherManager:
    """One ReplicaFetcher per source broker (Kafka's num.replica.fetchers = 1).

    Built before the ReplicaManager (which is handed it): it needs only this broker's id,
    the clock, the metadata cache (to find a leader's endpoint on ``listener_name``), the
    replica.fetch.* / replica.socket.timeout.ms settings and the network to connect over."""

    def __init__(self, *, broker_id: int, time: Time, metadata_cache: "MetadataCache", config: "KafkaConfig",
                 network: Network = DEFAULT_NETWORK, listener_name: str = "PLAINTEXT") -> None:
        self.broker_id = broker_id
        self.time = time
        self.metadata_cache = metadata_cache
        self.network = network
        self.listener_name = listener_name
        self.fetch_wait_max_ms = config["replica.fetch.wait.max.ms"]
        self.fetch_min_bytes = config["replica.fetch.min.bytes"]
        self.fetch_max_bytes = config["replica.fetch.max.bytes"]
        self.fetch_response_max_bytes = config["replica.fetch.response.max.bytes"]
        self.backoff_ms = config["replica.fetch.backoff.ms"]
        self.socket_timeout_ms = config["replica.socket.timeout.ms"]
        self.topic_stats = None  # BrokerTopicStats, for ReplicationBytesIn (set by the server when metrics are on)
        # KIP-73: the follower replication quota (broker/replication_quota.py; set by the server)
        self.follower_quota: "ReplicationQuotaManager | None" = None
        # Called after a truncation below a log's recovery point (the server sets the LogManager's
        # checkpoint_recovery_points_after_truncation): the lowered recovery point is written at once.
        self.on_truncated_below_recovery_point: Callable[[Log], None] | None = None
        self.fetchers: dict[tuple[int, str, int], ReplicaFetcher] = {}

    def add_fetcher_for_partitions(self, partitions: list["Partition"]) -> None:
        grouped: dict[tuple[int, str, int], dict] = {}
        offline = []
        for p in partitions:
            if p.leader_id < 0:
                offline.append(p.key)
                continue
            endpoint = self.metadata_cache.broker_endpoint(p.leader_id, self.listener_name)
            if endpoint is None:
                log.warning("%s-%d: no endpoint known for leader %d; not fetching", p.topic, p.partition, p.leader_id)
                continue
            source = (p.leader_id, endpoint.host, endpoint.port)
            grouped.setdefault(source, {})[p.key] = PartitionFetchState(p, p.leader_epoch)
        for source, states in grouped.items():
            for other, fetcher in self.fetchers.items():
                if other != source:
                    fetcher.remove_partitions(states)
            fetcher = self.fetchers.get(source)
            if fetcher is None:
                fetcher = self.fetchers[source] = ReplicaFetcher(self, *source)
            fetcher.add_partitions(states)
            log.info("fetching %d partition(s) from broker %d: %s", len(states), source[0],
                     partition_names(sorted(states)))
        if offline:  # (the LeaderAndIsr's line counts them)
            log.debug("%d partition(s) have no leader (offline), nothing to fetch until one is elected: %s",
                      len(offline), partition_names(offline))
        self._stop_idle()

    def remove_fetcher_for_partitions(self, keys) -> None:
        keys = list(keys)
        for fetcher in self.fetchers.values():
            fetcher.remove_partitions(keys)
        self._stop_idle()

    def _stop_idle(self) -> None:
        """A fetcher left with no partitions holds a connection for nothing: stop it."""
        for source, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                del self.fetchers[source]
                asyncio.get_running_loop().create_task(fetcher.stop())

    async def shutdown(self) -> None:
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
