"""The consumer: ``Consumer`` fetches manually assigned partitions from their leaders."""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import TYPE_CHECKING, Any, Coroutine, Iterable, NamedTuple, TypeVar, cast

from .. import fast_codecs
from ..api_keys import ApiKey
from ..errors import (CorruptRecordError, ErrorCode, KafkaError, OffsetOutOfRangeError, UnsupportedVersionError,
                      error_for)
from ..records import batch_body, compute_crc, decode_records, iter_batch_headers
from .clock import yield_now
from .cluster import KafkaClient
from .connection import wire_error
from .metadata import TopicPartition

if TYPE_CHECKING:
    from ..fast_codecs import Records

log = logging.getLogger("kbroker.client")

T = TypeVar("T")


def _harvest(task: asyncio.Task[Any] | None) -> tuple[bool, BaseException | None]:
    """A poll's look at a slot holding at most one background task (a metadata refresh, a
    positions reset): (whether its task is still running, the failure of a done one: None when
    it succeeded or was cancelled, or the slot is empty). Emptying the slot of a done task is
    the caller's."""
    if task is None:
        return False, None
    if not task.done():
        return True, None
    return False, None if task.cancelled() else task.exception()


class ConsumerRecord(NamedTuple):
    """A record as the consumer returns it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


_EARLIEST, _LATEST = -2, -1


class LogTruncationError(OffsetOutOfRangeError):
    """Kafka's LogTruncationException (KIP-320): the leader's log diverged from the records
    consumed and ``auto_offset_reset`` is "none". ``divergent_offsets``: per partition, (the
    position, the first offset known to diverge or None when the leader knows nothing of the
    epoch consumed); seek to resume."""

    def __init__(self, divergent_offsets: dict[TopicPartition, tuple[int, int | None]]) -> None:
        self.divergent_offsets = divergent_offsets
        super().__init__("log truncation detected: " + ", ".join(
            f"{tp.topic}-{tp.partition} at offset {position} (diverges at {'?' if end is None else end})"
            for tp, (position, end) in sorted(divergent_offsets.items())))


class Consumer:
    """Reads manually assigned partitions (no consumer group).

    ``assign`` the partitions, optionally ``seek``, then ``await getmany(timeout_ms)`` or
    ``async for record in consumer``. Seeks to the beginning, the end or a timestamp are
    resolved lazily (ListOffsets) at the next fetch or ``position`` call; a partition with no
    position starts per ``auto_offset_reset`` ("earliest", "latest" or "none": raise).

    Fetches are per node, as Kafka's Fetcher sends them: at most one Fetch in flight to each
    leader, covering its fetchable partitions, kept in flight across polls. A poll hands out
    what the fetches that completed returned and sends new fetches to the nodes with none in
    flight; it waits (up to its timeout) only while nothing has completed, so one slow or
    silently dead leader holds back only its own partitions. A partition's position moves only
    with the records handed out; an answer for a partition whose position changed while it was
    in flight (seek, assign, reset) is dropped. Records below the
    position inside the first batch are skipped, a truncated trailing batch is dropped (the
    next fetch starts at it), control batches and (with isolation_level 1) aborted
    transactions are skipped. Leader changes trigger a metadata refresh; OFFSET_OUT_OF_RANGE
    resets the position per ``auto_offset_reset``.

    KIP-320, as Kafka's consumer: Fetch and ListOffsets carry the current leader epoch
    (FENCED_LEADER_EPOCH and UNKNOWN_LEADER_EPOCH refresh the metadata); each position keeps
    the leader epoch of the record before it, and when the metadata names a new leader epoch
    the position is validated (OffsetsForLeaderEpoch) before it is fetched again: if the new
    leader's log diverged below it, it moves back to the divergence point (logged, counted in
    ``truncation_resets``) or, with auto_offset_reset "none", ``LogTruncationError`` is raised.
    """

    def __init__(self, client: KafkaClient, *, isolation_level: int = 0, max_wait_ms: int = 500,
                 min_bytes: int = 1, max_bytes: int = 52428800, max_partition_fetch_bytes: int = 1048576,
                 check_crcs: bool = True, auto_offset_reset: str = "earliest", retry_backoff_ms: int = 100) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}")
        self._client = client
        self._time = client.time
        self._isolation_level = isolation_level
        self._max_wait_ms = max_wait_ms
        self._min_bytes = min_bytes
        self._max_bytes = max_bytes
        self._max_partition_fetch_bytes = max_partition_fetch_bytes
        self._check_crcs = check_crcs
        self._auto_offset_reset = auto_offset_reset
        self._retry_backoff_ms = retry_backoff_ms
        self._positions: dict[TopicPartition, int | None] = {}
        # KIP-320, as Kafka's SubscriptionState.FetchPosition: the leader epoch of the record
        # before each position (None: unknown, e.g. after a seek to an offset), and the leader
        # epoch the position is known to be valid under (the metadata's when it was set or
        # last validated; the current_leader_epoch of its Fetch requests).
        self._epochs: dict[TopicPartition, int | None] = {}
        self._leader_epochs: dict[TopicPartition, int] = {}
        # Positions awaiting validation after a leader change (OffsetsForLeaderEpoch with their
        # epoch): not fetched meanwhile; the value is when it may next be asked.
        self._validating: dict[TopicPartition, float] = {}
        # The OffsetsForLeaderEpoch in flight to each node: the (position, epoch, leader epoch)
        # it asked about per partition, and its task.
        self._validations: dict[int, tuple[dict[TopicPartition, tuple[int, int, int]], asyncio.Task[Any]]] = {}
        self._resets: dict[TopicPartition, int] = {}  # pending seeks by timestamp (-2 earliest, -1 latest)
        self._buffer: collections.deque[ConsumerRecord] = collections.deque()
        self._refresh_needed = False
        self._refresh: asyncio.Task[object] | None = None  # a metadata refresh in flight
        self._refreshed_at: float | None = None  # when the last refresh was started
        self._resetting: asyncio.Task[None] | None = None  # ListOffsets for positions to reset, in flight
        # The Fetch in flight to each node: the positions it asked for and its task.
        self._inflight: dict[int, tuple[dict[TopicPartition, tuple[int, int]], asyncio.Task[fast_codecs.FetchResponse]]] = {}
        self._node_backoff: dict[int, float] = {}  # node -> no fetch to it before this (after a failure)
        # A partition answered with an error that calls for new metadata is not fetched again
        # before this (its leader would answer the same at once).
        self._partition_backoff: dict[TopicPartition, float] = {}
        self._wakeup: asyncio.Future[None] | None = None  # what a waiting poll awaits
        # Raised by the next poll (records came first), with the (partition, position) it is about
        # (None: the whole response): dropped if that position changed meanwhile (seek, assign).
        self._pending_error: tuple[BaseException, tuple[TopicPartition, int] | None] | None = None
        self._handling: tuple[TopicPartition, int] | None = None  # the partition a response is being read for
        # Positions reset per auto_offset_reset after OFFSET_OUT_OF_RANGE, per partition: the
        # position may move back then (a new leader's log start below the old one's), as in Kafka.
        self.out_of_range_resets: collections.Counter[TopicPartition] = collections.Counter()
        # Positions moved back to where the leader's log diverged from the records consumed
        # (KIP-320 validation with a reset policy), per partition.
        self.truncation_resets: collections.Counter[TopicPartition] = collections.Counter()

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Consume exactly these (topic, partition)s from now on."""
        self._positions = {TopicPartition(*tp): None for tp in partitions}
        self._epochs.clear()
        self._leader_epochs.clear()
        self._validating.clear()
        self._resets.clear()
        self._buffer.clear()
        self._pending_error = None
        self._partition_backoff.clear()

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def seek(self, tp: tuple[str, int], offset: int, leader_epoch: int | None = None) -> None:
        """Consume ``tp`` from ``offset``. With ``leader_epoch`` (the epoch of the record
        before it, as a committed offset carries it) the position is validated first
        (OffsetsForLeaderEpoch, KIP-320), as Kafka's seek(tp, OffsetAndMetadata)."""
        tp = self._assigned(tp)
        self._resets.pop(tp, None)
        self._set_position(tp, offset, leader_epoch)
        if leader_epoch is not None and leader_epoch >= 0:
            self._validating[tp] = 0.0
        self._drop_buffered(tp)

    def _set_position(self, tp: TopicPartition, offset: int | None, epoch: int | None) -> None:
        """A new position, valid under the leader epoch the metadata knows now."""
        self._positions[tp] = offset
        self._epochs[tp] = epoch if epoch is not None and epoch >= 0 else None
        meta = self._client.cluster.partition(*tp)
        self._leader_epochs[tp] = -1 if meta is None else meta.leader_epoch
        self._validating.pop(tp, None)

    def seek_to_beginning(self, *tps: tuple[str, int]) -> None:
        """Seek these partitions (all assigned ones if none given) to their earliest offset."""
        for tp in tps or list(self._positions):
            self._seek_to_timestamp(tp, _EARLIEST)

    def seek_to_end(self, *tps: tuple[str, int]) -> None:
        """Seek these partitions (all assigned ones if none given) to their end."""
        for tp in tps or list(self._positions):
            self._seek_to_timestamp(tp, _LATEST)

    def seek_to_timestamp(self, tp: tuple[str, int], timestamp_ms: int) -> None:
        """Seek to the first record with a timestamp >= ``timestamp_ms`` (the end if none)."""
        if timestamp_ms < 0:
            raise ValueError(f"timestamp must be >= 0, not {timestamp_ms}")
        self._seek_to_timestamp(tp, timestamp_ms)

    def _seek_to_timestamp(self, tp: tuple[str, int], timestamp: int) -> None:
        tp = self._assigned(tp)
        self._resets[tp] = timestamp
        self._drop_buffered(tp)

    async def position(self, tp: tuple[str, int]) -> int:
        """The offset of the next record to be returned for ``tp``."""
        tp = self._assigned(tp)
        await self._update_positions()
        return cast(int, self._positions[tp])  # _update_positions resolved every missing position

    def _assigned(self, tp: tuple[str, int]) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._positions:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned")
        return tp

    def _drop_buffered(self, tp: TopicPartition) -> None:
        self._buffer = collections.deque(r for r in self._buffer if (r.topic, r.partition) != tp)

    async def _update_positions(self) -> None:
        for tp, position in self._positions.items():
            if position is None and tp not in self._resets:
                if self._auto_offset_reset == "none":
                    raise OffsetOutOfRangeError(f"{tp.topic}-{tp.partition} has no position and auto_offset_reset is none")
                self._resets[tp] = _EARLIEST if self._auto_offset_reset == "earliest" else _LATEST
        if not self._resets:
            return
        resets = dict(self._resets)
        epochs: dict[TopicPartition, int] = {}
        found = await self._client.offsets_for_times(resets, self._isolation_level, leader_epochs=epochs)
        beyond = [tp for tp, result in found.items() if result is None]  # no record that late: the end
        if beyond:
            found.update(await self._client.offsets_for_times(dict.fromkeys(beyond, _LATEST), self._isolation_level,
                                                              leader_epochs=epochs))
        for tp, timestamp in resets.items():
            if self._resets.get(tp) == timestamp:  # not seeked elsewhere meanwhile
                del self._resets[tp]
                # Only the first query answers None (no record that late); the second asked for the end.
                self._set_position(tp, cast(tuple[int, int], found[tp])[0], epochs.get(tp))

    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The records of the fetches that completed, waiting up to ``timeout_ms`` while none
        has (Kafka's ``poll``: fetches stay in flight across calls)."""
        if self._buffer:
            out: dict[TopicPartition, list[ConsumerRecord]] = collections.defaultdict(list)
            while self._buffer:
                r = self._buffer.popleft()
                out[TopicPartition(r.topic, r.partition)].append(r)
            return dict(out)
        deadline = self._time.monotonic_ms() + timeout_ms
        waited = False
        while True:
            self._raise_pending()
            self._maybe_reset_positions()
            self._maybe_refresh_metadata()
            self._collect_validations()
            self._maybe_validate_positions()
            records = self._collect_fetches()
            self._send_validations()
            self._send_fetches()  # (also when returning: the next poll's records are on their way)
            # A partition without a leader asked for a refresh just now: start it (else this poll
            # would wait for nothing that wakes it).
            self._maybe_refresh_metadata()
            if records:
                return records
            self._raise_pending()
            remaining = deadline - self._time.monotonic_ms()
            if remaining <= 0:
                if waited:
                    return {}
                # Await once even with no time left, as Kafka's poll(0) polls the network once:
                # a loop of getmany(0) must let the fetches it started run.
                await yield_now()
            else:
                await self._wait(remaining)
            waited = True

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._buffer:
            for records in (await self.getmany(self._max_wait_ms)).values():
                self._buffer.extend(records)
        return self._buffer.popleft()

    def close(self) -> None:
        """Cancel the fetches, resets and refresh in flight (the consumer may be used again)."""
        for _offsets, task in self._inflight.values():
            task.cancel()
        self._inflight.clear()
        for _asked, validation in self._validations.values():
            validation.cancel()
        self._validations.clear()
        if self._refresh is not None:
            if not self._refresh.done():
                self._refresh_needed = True  # (its result is lost: the next poll asks again)
            self._refresh.cancel()
        if self._resetting is not None:
            self._resetting.cancel()
        self._refresh = self._resetting = None
        # Positions awaiting validation stay so, asked again at once by the next poll.
        self._validating = dict.fromkeys(self._validating, 0.0)
        self._pending_error = None
        self._node_backoff.clear()
        self._partition_backoff.clear()

    # -- what a poll starts and collects -------------------------------------------------------

    def _raise_pending(self) -> None:
        pending, self._pending_error = self._pending_error, None
        if pending is None:
            return
        error, about = pending
        if about is not None and self._positions.get(about[0]) != about[1]:
            return  # seeked, reset or unassigned since: that position's error is moot
        raise error

    def _background(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        task.add_done_callback(self._on_done)
        return task

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved: the poll that collects it raises or logs it
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _wait(self, ms: float) -> None:
        """Until something in flight completes, a node's backoff ends, or ``ms`` passed."""
        now = self._time.monotonic_ms()
        wake_at = now + ms
        for backoff in (self._node_backoff, self._partition_backoff):
            if backoff:
                wake_at = min(wake_at, min(backoff.values()))
        later = [at for at in self._validating.values() if at > now]  # (due ones wait for a task or metadata)
        if later:
            wake_at = min(wake_at, min(later))
        if self._refresh_needed and self._refresh is None and self._refreshed_at is not None:
            wake_at = min(wake_at, self._refreshed_at + self._retry_backoff_ms)
        self._wakeup = asyncio.get_running_loop().create_future()
        handle = self._time.schedule(max(0.0, wake_at - now), self._wake)
        try:
            await self._wakeup
        finally:
            handle.cancel()
            self._wakeup = None

    def _maybe_reset_positions(self) -> None:
        """Start ListOffsets for the positions to reset (none in flight); raise its failure."""
        running, failure = _harvest(self._resetting)
        if running:
            return
        self._resetting = None
        if failure is not None:
            raise failure
        if self._resets or any(position is None for position in self._positions.values()):
            self._resetting = self._background(self._update_positions())

    def _maybe_refresh_metadata(self) -> None:
        running, failure = _harvest(self._refresh)
        if running:
            return
        self._refresh = None
        if failure is not None:
            log.warning("consumer metadata refresh failed: %s", failure)
            self._refresh_needed = True
        now = self._time.monotonic_ms()
        if self._refresh_needed and (self._refreshed_at is None or now >= self._refreshed_at + self._retry_backoff_ms):
            self._refresh_needed = False
            self._refreshed_at = now
            self._refresh = self._background(
                self._client.refresh_metadata(sorted({tp.topic for tp in self._positions})))

    def _send_fetches(self) -> None:
        """A Fetch to every leader with fetchable partitions and no Fetch in flight."""
        now = self._time.monotonic_ms()
        self._node_backoff = {node: until for node, until in self._node_backoff.items() if until > now}
        self._partition_backoff = {tp: until for tp, until in self._partition_backoff.items() if until > now}
        by_leader: dict[int, dict[TopicPartition, tuple[int, int]]] = collections.defaultdict(dict)
        for tp, position in self._positions.items():
            if position is None or tp in self._partition_backoff or tp in self._validating:
                continue
            leader = self._client.cluster.leader(*tp)
            if leader < 0:
                self._refresh_needed = True
            elif leader not in self._inflight and leader not in self._node_backoff:
                by_leader[leader][tp] = (position, self._leader_epochs.get(tp, -1))
        for node, offsets in by_leader.items():
            self._inflight[node] = (offsets, self._background(self._fetch_from(node, offsets)))

    def _collect_fetches(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The records of every completed fetch (node order), positions moved past them. An
        error after some records were taken is kept for the next poll (those records are
        handed out: their positions moved)."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for node in sorted(node for node, (_o, task) in self._inflight.items() if task.done()):
            offsets, task = self._inflight.pop(node)
            try:
                if task.cancelled():
                    continue
                try:
                    response = task.result()
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    log.info("fetch from broker %d failed: %s", node, exc)
                    self._refresh_needed = True
                    self._node_backoff[node] = self._time.monotonic_ms() + self._retry_backoff_ms
                    continue
                self._handle_response(node, offsets, response, out)
            except Exception as exc:
                if not out:
                    raise
                self._pending_error = (exc, self._handling)
                break
            finally:
                self._handling = None
        return out

    # -- KIP-320: validating positions after a leader change ----------------------------------

    def _maybe_validate_positions(self) -> None:
        """Kafka's maybeValidatePositionForCurrentLeader: a position whose leader epoch is not
        the one the metadata now knows awaits validation if the epoch of its last record is
        known; otherwise it is just valid under the new epoch."""
        cluster = self._client.cluster
        for tp, position in self._positions.items():
            if position is None:
                continue
            meta = cluster.partition(*tp)
            if meta is None or cluster.leader(*tp) < 0 or meta.leader_epoch == self._leader_epochs.get(tp):
                continue
            self._leader_epochs[tp] = meta.leader_epoch
            # (one awaiting validation already is asked again under the new epoch: the old one
            # would be fenced for ever)
            if self._epochs.get(tp) is not None and meta.leader_epoch >= 0:
                self._validating[tp] = 0.0

    def _send_validations(self) -> None:
        """OffsetsForLeaderEpoch, one request per leader with none in flight, for the positions
        awaiting validation whose backoff is over."""
        now = self._time.monotonic_ms()
        by_leader: dict[int, dict[TopicPartition, tuple[int, int, int]]] = collections.defaultdict(dict)
        for tp, at in self._validating.items():
            if at > now:
                continue
            leader = self._client.cluster.leader(*tp)
            if leader < 0:
                self._refresh_needed = True
            elif leader not in self._validations:
                by_leader[leader][tp] = (cast(int, self._positions[tp]), cast(int, self._epochs[tp]),
                                         self._leader_epochs[tp])
        for node, asked in by_leader.items():
            self._validations[node] = (asked, self._background(self._offsets_for_leader_epoch(node, asked)))

    async def _offsets_for_leader_epoch(self, node: int, asked: dict[TopicPartition, tuple[int, int, int]]) -> Any:
        by_topic: dict[str, list[dict[str, int]]] = collections.defaultdict(list)
        for tp, (_offset, epoch, leader_epoch) in asked.items():
            by_topic[tp.topic].append({"partition": tp.partition, "current_leader_epoch": leader_epoch,
                                       "leader_epoch": epoch})
        conn = await self._client.connection(node)
        try:
            version = conn.version_for(ApiKey.OFFSET_FOR_LEADER_EPOCH, min_v=3, max_v=4)
        except UnsupportedVersionError:
            return None  # a broker before Kafka 2.3: the positions are not validated, as in Kafka
        return await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": -1, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}, version)

    def _collect_validations(self) -> None:
        """Kafka's maybeCompleteValidation for every answered partition whose position is still
        the one asked about: the log diverged below the position (the end offset of the epoch
        of its last record is lower) or knows nothing of that epoch: reset per
        auto_offset_reset (to the divergence point, or per the policy when unknown), or raise
        LogTruncationError without one; else the position is valid."""
        truncations: dict[TopicPartition, tuple[int, int | None]] = {}
        for node in sorted(node for node, (_a, task) in self._validations.items() if task.done()):
            asked, task = self._validations.pop(node)
            if task.cancelled():
                continue
            backoff = self._time.monotonic_ms() + self._retry_backoff_ms
            try:
                response = task.result()
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                log.info("OffsetsForLeaderEpoch to broker %d failed: %s", node, exc)
                self._refresh_needed = True
                self._node_backoff[node] = backoff
                for tp in asked:
                    if tp in self._validating:
                        self._validating[tp] = backoff
                continue
            if response is None:  # the leader has no OffsetsForLeaderEpoch v3+: valid without asking
                log.info("broker %d cannot validate positions (no OffsetsForLeaderEpoch v3+): skipping", node)
                for tp in asked:
                    if tp in self._validating and asked[tp] == (
                            self._positions.get(tp), self._epochs.get(tp), self._leader_epochs.get(tp)):
                        del self._validating[tp]
                continue
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.topic, p.partition)
                    if tp not in asked or tp not in self._validating or asked[tp] != (
                            self._positions.get(tp), self._epochs.get(tp), self._leader_epochs.get(tp)):
                        continue  # seeked, reset or unassigned meanwhile
                    position = asked[tp][0]
                    if p.error_code:
                        error = error_for(p.error_code)
                        if not error.retriable:
                            raise wire_error(p.error_code, f"OffsetsForLeaderEpoch {tp.topic}-{tp.partition}")
                        if error.invalid_metadata:  # FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER...
                            self._refresh_needed = True
                        self._validating[tp] = backoff
                    elif p.end_offset < 0 or p.leader_epoch < 0:
                        if self._auto_offset_reset == "none":
                            truncations[tp] = (position, None)
                            continue
                        log.info("%s-%d: truncation detected at offset %d (leader epoch %d unknown to the leader), "
                                 "resetting to %s", tp.topic, tp.partition, position, asked[tp][1],
                                 self._auto_offset_reset)
                        self._set_position(tp, None, None)
                        self._drop_buffered(tp)
                        self.truncation_resets[tp] += 1
                    elif p.end_offset < position:
                        if self._auto_offset_reset == "none":
                            truncations[tp] = (position, p.end_offset)
                            continue
                        log.info("%s-%d: truncation detected at offset %d, resetting to %d, the first offset known "
                                 "to diverge (leader epoch %d)", tp.topic, tp.partition, position, p.end_offset,
                                 p.leader_epoch)
                        self._set_position(tp, p.end_offset, p.leader_epoch)
                        self._drop_buffered(tp)
                        self.truncation_resets[tp] += 1
                    else:
                        del self._validating[tp]
        if truncations:
            for tp in truncations:  # asked again (and raising again) until seeked elsewhere
                self._validating[tp] = self._time.monotonic_ms() + self._retry_backoff_ms
            raise LogTruncationError(truncations)

    async def _fetch_from(self, node: int, offsets: dict[TopicPartition, tuple[int, int]]
                          ) -> fast_codecs.FetchResponse:
        by_topic: dict[str, list[fast_codecs.FetchPartition]] = collections.defaultdict(list)
        for tp, (offset, epoch) in offsets.items():
            by_topic[tp.topic].append(fast_codecs.FetchPartition(
                tp.partition, epoch, offset, -1, self._max_partition_fetch_bytes))
        conn = await self._client.connection(node)
        version = conn.version_for(ApiKey.FETCH, max_v=fast_codecs.FETCH_VERSIONS[1])
        request = fast_codecs.FetchRequest(version, -1, self._max_wait_ms, self._min_bytes, self._max_bytes,
                                           self._isolation_level, 0, -1, list(by_topic.items()), [], "")
        return await conn.fetch(request, version)

    def _handle_response(self, node: int, offsets: dict[TopicPartition, tuple[int, int]],
                         response: fast_codecs.FetchResponse, out: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        if response.error_code:
            raise wire_error(response.error_code, f"fetch from broker {node}")
        for topic, partitions in response.responses:
            for data in partitions:
                tp = TopicPartition(topic, data.partition)
                asked = offsets.get(tp)
                if (asked is None or self._positions.get(tp) != asked[0] or self._leader_epochs.get(tp) != asked[1]
                        or tp in self._validating):
                    continue  # seeked, reset, unassigned, fetched elsewhere or a new leader while the fetch was out
                self._handling = (tp, asked[0])
                records = self._partition_records(tp, data, asked[0])
                if records:
                    out.setdefault(tp, []).extend(records)

    def _partition_records(self, tp: TopicPartition, data: fast_codecs.FetchPartitionData,
                           offset: int) -> list[ConsumerRecord]:
        error = data.error_code
        if error == ErrorCode.OFFSET_OUT_OF_RANGE and self._auto_offset_reset != "none":
            log.info("%s-%d: offset %d out of range, resetting to %s", tp.topic, tp.partition, offset,
                     self._auto_offset_reset)
            self._set_position(tp, None, None)
            self.out_of_range_resets[tp] += 1
            return []
        if error and error_for(error).invalid_metadata:
            self._refresh_needed = True
            self._partition_backoff[tp] = self._time.monotonic_ms() + self._retry_backoff_ms
            return []
        if error:
            raise wire_error(error, f"fetch {tp.topic}-{tp.partition} at offset {offset}")
        return self._decode(tp, data.records, offset, data.aborted_transactions)

    def _decode(self, tp: TopicPartition, buf: Records | None, offset: int,
                aborted: list[tuple[int, int]] | None) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        position = offset
        epoch = self._epochs.get(tp)
        # read_committed: a transactional batch of a producer whose aborted transaction has
        # begun (first_offset <= the batch) is skipped, until that producer's abort marker.
        aborted = sorted(aborted or (), key=lambda a: a[1])
        next_aborted = 0
        aborting: set[int] = set()
        data = buf or b""
        for pos, header in iter_batch_headers(data):  # stops before a truncated trailing batch
            if header.next_offset <= position:
                continue
            if header.magic != 2:
                raise CorruptRecordError(f"{tp.topic}-{tp.partition}: a magic {header.magic} batch at offset "
                                         f"{header.base_offset}; only magic 2 is supported")
            if self._check_crcs and compute_crc(data, pos, header.size) != header.crc:
                raise CorruptRecordError(f"{tp.topic}-{tp.partition}: CRC mismatch in the batch at offset "
                                         f"{header.base_offset}")
            position = header.next_offset
            if header.partition_leader_epoch >= 0:
                epoch = header.partition_leader_epoch
            while next_aborted < len(aborted) and aborted[next_aborted][1] <= header.last_offset:
                aborting.add(aborted[next_aborted][0])
                next_aborted += 1
            if header.is_control:
                aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
            for r in decode_records(header, batch_body(data, pos, header)):
                if r.offset >= offset:
                    out.append(ConsumerRecord(tp.topic, tp.partition, r.offset, r.timestamp, header.timestamp_type,
                                              r.key, r.value, r.headers))
        self._positions[tp] = position
        self._epochs[tp] = epoch
        return out
