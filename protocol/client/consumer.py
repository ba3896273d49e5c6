"""The consumer: ``Consumer`` fetches manually assigned partitions from their leaders."""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import TYPE_CHECKING, Iterable, NamedTuple, cast

from .. import fast_codecs
from ..api_keys import ApiKey
from ..errors import CorruptRecordError, ErrorCode, KafkaError, OffsetOutOfRangeError, error_for
from ..records import batch_body, compute_crc, decode_records, iter_batch_headers
from .clock import sleep
from .cluster import KafkaClient
from .connection import KafkaConnectionError, wire_error
from .metadata import PartitionMetadata, TopicPartition

if TYPE_CHECKING:
    from ..fast_codecs import Records

log = logging.getLogger("kbroker.client")


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


class Consumer:
    """Reads manually assigned partitions (no consumer group).

    ``assign`` the partitions, optionally ``seek``, then ``await getmany(timeout_ms)`` or
    ``async for record in consumer``. Seeks to the beginning, the end or a timestamp are
    resolved lazily (ListOffsets) at the next fetch or ``position`` call; a partition with no
    position starts per ``auto_offset_reset`` ("earliest", "latest" or "none": raise).

    Each round sends one Fetch per leader covering its partitions. Records below the
    position inside the first batch are skipped, a truncated trailing batch is dropped (the
    next fetch starts at it), control batches and (with isolation_level 1) aborted
    transactions are skipped. Leader changes trigger a metadata refresh; OFFSET_OUT_OF_RANGE
    resets the position per ``auto_offset_reset``.
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
        self._resets: dict[TopicPartition, int] = {}  # pending seeks by timestamp (-2 earliest, -1 latest)
        self._buffer: collections.deque[ConsumerRecord] = collections.deque()
        self._refresh_needed = False
        # Positions reset per auto_offset_reset after OFFSET_OUT_OF_RANGE, per partition: the
        # position may move back then (a new leader's log start below the old one's), as in Kafka.
        self.out_of_range_resets: collections.Counter[TopicPartition] = collections.Counter()

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Consume exactly these (topic, partition)s from now on."""
        self._positions = {TopicPartition(*tp): None for tp in partitions}
        self._resets.clear()
        self._buffer.clear()

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        tp = self._assigned(tp)
        self._resets.pop(tp, None)
        self._positions[tp] = offset
        self._drop_buffered(tp)

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
        found = await self._client.offsets_for_times(resets, self._isolation_level)
        beyond = [tp for tp, result in found.items() if result is None]  # no record that late: the end
        if beyond:
            found.update(await self._client.offsets_for_times(dict.fromkeys(beyond, _LATEST), self._isolation_level))
        for tp, timestamp in resets.items():
            if self._resets.get(tp) == timestamp:  # not seeked elsewhere meanwhile
                del self._resets[tp]
                # Only the first query answers None (no record that late); the second asked for the end.
                self._positions[tp] = cast(tuple[int, int], found[tp])[0]

    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The records fetched within ``timeout_ms`` (at most one round once any arrive)."""
        if self._buffer:
            out: dict[TopicPartition, list[ConsumerRecord]] = collections.defaultdict(list)
            while self._buffer:
                r = self._buffer.popleft()
                out[TopicPartition(r.topic, r.partition)].append(r)
            return dict(out)
        deadline = self._time.monotonic_ms() + timeout_ms
        while True:
            await self._update_positions()
            remaining = max(0.0, deadline - self._time.monotonic_ms())
            records = await self._fetch(int(min(self._max_wait_ms, remaining)))
            if records or self._time.monotonic_ms() >= deadline:
                return records

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._buffer:
            for records in (await self.getmany(self._max_wait_ms)).values():
                self._buffer.extend(records)
        return self._buffer.popleft()

    async def _fetch(self, max_wait_ms: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        if self._refresh_needed:
            self._refresh_needed = False
            try:
                await self._client.refresh_metadata(sorted({tp.topic for tp in self._positions}))
            except KafkaConnectionError as exc:
                log.warning("consumer metadata refresh failed: %s", exc)
        by_leader: dict[int, dict[TopicPartition, int]] = collections.defaultdict(dict)
        for tp, position in self._positions.items():
            leader = self._client.cluster.leader(*tp)
            if leader < 0:
                self._refresh_needed = True
            elif position is not None:
                by_leader[leader][tp] = position
        if by_leader:
            results = await asyncio.gather(*(self._fetch_from(node, offsets, max_wait_ms)
                                             for node, offsets in by_leader.items()))
        else:
            results = []
        if self._refresh_needed and max_wait_ms:  # some leader is unknown or failed: do not hammer
            await sleep(self._time, min(self._retry_backoff_ms, max_wait_ms))
        return {tp: records for result in results for tp, records in result.items()}

    async def _fetch_from(self, node: int, offsets: dict[TopicPartition, int], max_wait_ms: int
                          ) -> dict[TopicPartition, list[ConsumerRecord]]:
        by_topic: dict[str, list[fast_codecs.FetchPartition]] = collections.defaultdict(list)
        for tp, offset in offsets.items():
            # Known: _fetch found the partition's leader in the cluster metadata.
            epoch = cast(PartitionMetadata, self._client.cluster.partition(*tp)).leader_epoch
            by_topic[tp.topic].append(fast_codecs.FetchPartition(
                tp.partition, epoch, offset, -1, self._max_partition_fetch_bytes))
        try:
            conn = await self._client.connection(node)
            version = conn.version_for(ApiKey.FETCH, max_v=fast_codecs.FETCH_VERSIONS[1])
            request = fast_codecs.FetchRequest(version, -1, max_wait_ms, self._min_bytes, self._max_bytes,
                                           self._isolation_level, 0, -1, list(by_topic.items()), [], "")
            response = await conn.fetch(request, version)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.info("fetch from broker %d failed: %s", node, exc)
            self._refresh_needed = True
            return {}
        if response.error_code:
            raise wire_error(response.error_code, f"fetch from broker {node}")
        out = {}
        for topic, partitions in response.responses:
            for data in partitions:
                tp = TopicPartition(topic, data.partition)
                if tp not in offsets or self._positions.get(tp) != offsets[tp]:
                    continue  # seeked or unassigned while the fetch was out
                records = self._partition_records(tp, data, offsets[tp])
                if records:
                    out[tp] = records
        return out

    def _partition_records(self, tp: TopicPartition, data: fast_codecs.FetchPartitionData,
                           offset: int) -> list[ConsumerRecord]:
        error = data.error_code
        if error == ErrorCode.OFFSET_OUT_OF_RANGE and self._auto_offset_reset != "none":
            log.info("%s-%d: offset %d out of range, resetting to %s", tp.topic, tp.partition, offset,
                     self._auto_offset_reset)
            self._positions[tp] = None
            self.out_of_range_resets[tp] += 1
            return []
        if error and error_for(error).invalid_metadata:
            self._refresh_needed = True
            return []
        if error:
            raise wire_error(error, f"fetch {tp.topic}-{tp.partition} at offset {offset}")
        return self._decode(tp, data.records, offset, data.aborted_transactions)

    def _decode(self, tp: TopicPartition, buf: Records | None, offset: int,
                aborted: list[tuple[int, int]] | None) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        position = offset
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
        return out
