"""LogCleaner: compaction of ``cleanup.policy=compact`` logs (Kafka's LogCleaner, one pass at a time).

A compacted log keeps, for every key, at least its newest record: ``__consumer_offsets``
(one offset record per group and partition, one metadata record per group) does not grow
without bound, and neither does any other topic created with ``cleanup.policy=compact``.

One pass over a log (``clean``):

1. The cleanable range: the non-active segments below the high watermark (Kafka's
   "first uncleanable offset"), stopping at the first segment with records younger than
   ``min.compaction.lag.ms``. The log's ``first_dirty_offset`` splits it into a clean head
   (compacted before) and the dirty rest.
2. The offset map: the newest offset of every key in the cleanable range.
3. Segments are grouped (consecutive, at most ``segment.bytes`` together) and each group is
   rewritten into one ``<base>.log.cleaned``: a record survives if it is the newest of its
   key in the map (records without a key, and control batches, are kept); a tombstone (null
   value) also goes once it sits in the clean head and its batch is older than
   ``delete.retention.ms``, so consumers that read the head had time to see it. A batch whose
   records all survive is copied as it is; one that lost some is re-encoded with the same
   base offset, last offset delta, timestamps, producer fields and compression; one that lost
   all is dropped, except the group's last batch, kept empty (as Kafka's format allows) so the
   cleaned segment ends where the group ended. Offsets never change: a compacted log has gaps.
4. The swap (``Log.replace_segments``), crash-safe as Kafka's: ``.cleaned`` → ``.swap`` (a
   restart completes a ``.swap`` and deletes a ``.cleaned``), old segments deleted, ``.swap`` →
   ``.log``, indexes rebuilt.

``clean_once`` picks the dirtiest compacted log whose dirty ratio (dirty bytes / cleanable
bytes) reaches its ``min.cleanable.dirty.ratio`` and cleans it; the broker calls it on the
injected clock every ``log.cleaner.backoff.ms``. Synchronous, like all of storage/: it runs
on the broker's event loop, one log per call.

Differences from Kafka, kept small: the clean/dirty split is not checkpointed
(``cleaner-offset-checkpoint``), so a restarted broker compacts each log once more; the
delete horizon uses the batch's max timestamp (Kafka: the segment file's modification time,
or KIP-534's horizon written into the batch); the offset map is a dict, not a bounded
dedupe buffer; an idempotent producer's batch that loses all its records goes too (Kafka keeps
an empty batch for its sequence state).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from crc32c import crc32c

from protocol.clock import Time
from protocol.compression import Compression, compress
from protocol.records import (ATTRIBUTES_OFFSET, CODEC_MASK, CRC_OFFSET, HEADER, HEADER_SIZE, LOG_APPEND_TIME, LOG_OVERHEAD,
                              BatchHeader, Record, batch_body, decode_records, encode_record, iter_batch_headers)

from .log import Log
from .segment import CLEANED_SUFFIX, LOG_SUFFIX, LogSegment, file_name

log = logging.getLogger("kbroker.storage.cleaner")

_U32 = struct.Struct(">I")
INT32_MAX = 2**31 - 1


@dataclass
class CleanerStats:
    topic: str
    partition: int
    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_dropped: int = 0
    end_offset: int = 0
    duration_ms: int = 0

    def summary(self) -> str:
        return (f"{self.topic}-{self.partition}: cleaned up to offset {self.end_offset}: {self.segments_before} "
                f"segments ({self.bytes_before} bytes, {self.records_read} records) -> {self.segments_after} "
                f"({self.bytes_after} bytes, {self.records_kept} records; {self.tombstones_dropped} tombstones "
                f"dropped) in {self.duration_ms} ms")


def cleanable_segments(log_: Log, now_ms: int) -> list[LogSegment]:
    """The non-active segments wholly below the high watermark, up to the first one holding
    records younger than min.compaction.lag.ms."""
    segments = log_.segments
    out = []
    lag = log_.config.min_compaction_lag_ms
    for segment, following in zip(segments, segments[1:]):
        if following.base_offset > log_.high_watermark:
            break
        if lag > 0 and now_ms - segment.largest_timestamp < lag:
            break
        out.append(segment)
    return out


def dirty_ratio(log_: Log, now_ms: int) -> tuple[float, int]:
    """(dirty bytes / cleanable bytes, dirty bytes) of a log."""
    segments = cleanable_segments(log_, now_ms)
    if not segments:
        return 0.0, 0
    total = sum(s.size for s in segments)
    bases = [s.base_offset for s in log_.segments]
    dirty = 0
    for segment in segments:
        next_base = bases[bases.index(segment.base_offset) + 1]
        if next_base > log_.first_dirty_offset:
            dirty += segment.size
    return (dirty / total if total else 0.0), dirty


class LogCleaner:
    def __init__(self, time: Time, logs: Callable[[], Mapping[tuple[str, int], Log]]) -> None:
        """``logs``: the logs to look at (LogManager.all_logs)."""
        self.time = time
        self.logs = logs
        self.passes = 0

    def clean_once(self) -> CleanerStats | None:
        """Clean the dirtiest compacted log that needs it; None when none does."""
        now = self.time.milliseconds()
        best: tuple[float, Log] | None = None
        for log_ in self.logs().values():
            if not log_.config.compact:
                continue
            ratio, dirty = dirty_ratio(log_, now)
            if dirty and ratio >= log_.config.min_cleanable_dirty_ratio and (best is None or ratio > best[0]):
                best = (ratio, log_)
        if best is None:
            return None
        return self.clean(best[1])

    def clean(self, log_: Log) -> CleanerStats | None:
        """One compaction pass over ``log_`` (see the module docstring); None if nothing is cleanable."""
        started = self.time.monotonic_ms()
        now = self.time.milliseconds()
        segments = cleanable_segments(log_, now)
        if not segments:
            return None
        bases = [s.base_offset for s in log_.segments]
        end_offset = bases[bases.index(segments[-1].base_offset) + 1]
        stats = CleanerStats(log_.topic, log_.partition, segments_before=len(segments),
                             bytes_before=sum(s.size for s in segments), end_offset=end_offset)
        latest = self._build_offset_map(segments)
        first_dirty = log_.first_dirty_offset
        horizon = now - log_.config.delete_retention_ms
        for group in self._group(segments, log_.config.segment_bytes, bases):
            cleaned = self._clean_group(log_, group, latest, first_dirty, horizon, stats)
            new_segment = log_.replace_segments(group, cleaned)
            stats.segments_after += 1
            stats.bytes_after += new_segment.size
        log_.first_dirty_offset = max(log_.first_dirty_offset, end_offset)
        stats.duration_ms = int(self.time.monotonic_ms() - started)
        self.passes += 1
        log.info("%s", stats.summary())
        return stats

    # -- the pass ----------------------------------------------------------------------------

    @staticmethod
    def _build_offset_map(segments: list[LogSegment]) -> dict[bytes, int]:
        latest: dict[bytes, int] = {}
        for segment in segments:
            buf = segment.records.buffer(segment.size)
            for pos, header in iter_batch_headers(buf, 0, segment.size):
                if header.is_control:
                    continue
                for record in decode_records(header, batch_body(buf, pos, header)):
                    if record.key is not None:
                        latest[record.key] = record.offset
            del buf
        return latest

    @staticmethod
    def _group(segments: list[LogSegment], max_bytes: int, bases: list[int]) -> list[list[LogSegment]]:
        """Consecutive segments, each group at most ``max_bytes`` (before cleaning) and spanning
        less than 2^31 offsets (the offset index stores offsets relative to the base)."""
        groups: list[list[LogSegment]] = []
        for segment in segments:
            if groups:
                group = groups[-1]
                size = sum(s.size for s in group) + segment.size
                next_base = bases[bases.index(segment.base_offset) + 1]
                if size <= max_bytes and next_base - 1 - group[0].base_offset <= INT32_MAX:
                    group.append(segment)
                    continue
            groups.append([segment])
        return groups

    def _clean_group(self, log_: Log, group: list[LogSegment], latest: dict[bytes, int], first_dirty: int,
                     horizon: int, stats: CleanerStats) -> Path:
        path = log_.dir / (file_name(group[0].base_offset, LOG_SUFFIX) + CLEANED_SUFFIX)
        bases = [s.base_offset for s in log_.segments]
        last_segment = group[-1]
        with open(path, "wb") as out:
            for segment in group:
                next_base = bases[bases.index(segment.base_offset) + 1]
                in_clean_head = next_base <= first_dirty
                buf = segment.records.buffer(segment.size)
                last_pos = -1
                if segment is last_segment:
                    for last_pos, _h in iter_batch_headers(buf, 0, segment.size):
                        pass
                for pos, header in iter_batch_headers(buf, 0, segment.size):
                    if header.is_control:
                        out.write(buf[pos:pos + header.size])
                        continue
                    records = decode_records(header, batch_body(buf, pos, header))
                    # tombstones go only from the clean head, once their batch is past the horizon
                    drop_tombstones = in_clean_head and header.max_timestamp < horizon
                    kept = []
                    for r in records:
                        if r.key is not None and latest.get(r.key, r.offset) > r.offset:
                            continue
                        if r.value is None and r.key is not None and drop_tombstones:
                            stats.tombstones_dropped += 1
                            continue
                        kept.append(r)
                    stats.records_read += len(records)
                    stats.records_kept += len(kept)
                    if len(kept) == len(records):
                        out.write(buf[pos:pos + header.size])
                    elif kept or pos == last_pos:
                        # the group's last batch stays, if need be empty, so the cleaned segment
                        # ends where the group ended (a restart completing a .swap relies on it)
                        out.write(rebuild_batch(header, kept))
                del buf
            out.flush()
            os.fsync(out.fileno())
        return path


def rebuild_batch(header: BatchHeader, records: list[Record]) -> bytes:
    """A batch holding only ``records`` of the batch ``header`` describes: same base offset,
    last offset delta (so the batch still ends where it ended), timestamps, producer fields,
    attributes and compression; a new CRC."""
    log_append = header.timestamp_type == LOG_APPEND_TIME
    attributes = header.attributes if records else header.attributes & ~CODEC_MASK  # an empty batch: no codec
    body = b"".join(encode_record(r.offset - header.base_offset, 0 if log_append else r.timestamp - header.base_timestamp,
                                  r.key, r.value, r.headers) for r in records)
    codec = header.compression
    if codec != Compression.NONE and records:
        body = compress(codec, body)
    size = HEADER_SIZE + len(body)
    buf = bytearray(size)
    HEADER.pack_into(buf, 0, header.base_offset, size - LOG_OVERHEAD, header.partition_leader_epoch, 2, 0,
                     attributes, header.last_offset_delta, header.base_timestamp, header.max_timestamp,
                     header.producer_id, header.producer_epoch, header.base_sequence, len(records))
    buf[HEADER_SIZE:] = body
    _U32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)
