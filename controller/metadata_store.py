"""Where the controller's metadata records live: one small interface, and the local store.

``MetadataStore`` is what QuorumController needs from durable storage:

* ``load()``: the newest valid snapshot's records, the log records after it, the last
  controller epoch written, and the end offset (the offset the next record will get).
* ``claim_epoch()``: the controller epoch this process acts in: one more than any epoch in
  the store, made durable (a NoOpRecord batch written in that epoch) before it returns.
* ``append(records, epoch)``: write one batch, atomically, in that epoch; returns the offset
  of its last record. The batch is written but not yet durable.
* ``wait_durable(offset)``: a future that resolves once every record up to ``offset`` is
  durable (group commit: one fsync covers every batch appended before it started). A failed
  fsync fails it with the error; the controller must then stop (its state is ahead of disk).
  A flush that cannot even start for lack of descriptors (EMFILE, ENFILE) is no failed
  fsync: it is tried again with backoff, the records staying pending meanwhile.
* ``snapshot(records, offset, epoch)``: store records that recreate the whole state as of
  ``offset`` (every record below it), so that loading need not replay the log before it.
* ``bytes_written``: bytes of log after the loaded snapshot plus every batch appended since
  (the controller snapshots after metadata.log.max.record.bytes.between.snapshots of them).

``LocalMetadataStore`` keeps the log as a ``storage.Log`` in
``<metadata.log.dir>/__cluster_metadata-0`` (segments, indexes, recovery that cuts a torn
tail: the storage layer's). Each batch is a RecordBatch v2 whose records' values are
metadata records in Kafka's ApiMessageAndVersion framing and whose partition leader epoch
is the controller epoch that wrote it. Snapshots are ``<20-digit offset>.snapshot`` files in
``<metadata.log.dir>`` itself (not in the log directory, whose ``.snapshot`` files are the
storage layer's producer-state snapshots), holding batches of the same encoding, written
atomically. The two newest snapshots are kept, and segments wholly below the older one are
deleted, so a damaged newest snapshot still leaves the older one plus the log.

fsync runs on the store's own executor thread; everything else on the caller's (event loop)
thread. Not thread-safe otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import fcntl
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

from protocol.clock import Time, TimerHandle
from protocol.errors import KafkaError
from protocol.messages.metadata_records import (ApiMessageAndVersion, MetadataRecordError, MetadataRecordType,
                                                decode_record, encode_record, make_record)
from protocol.records import Record, batch_body, build_batch, check_batch, decode_records, iter_batch_headers
from storage import Log, LogConfig, fileio
from storage.checkpoint import write_atomically

log = logging.getLogger("kbroker.controller.store")

METADATA_TOPIC = "__cluster_metadata"
LOG_DIR_NAME = f"{METADATA_TOPIC}-0"
SNAPSHOT_SUFFIX = ".snapshot"
# The directory's lock file: not the broker's ``.lock``, so that one process running both a
# broker and a controller can lock the same directory twice (flock locks conflict per open file).
LOCK_FILE = ".metadata.lock"
SNAPSHOTS_KEPT = 2
# Records per batch in a snapshot file (a snapshot is not one atomic batch: the file is).
SNAPSHOT_BATCH_RECORDS = 2000
# A flush that cannot get descriptors (the process or the system is out of them) is tried
# again after this, doubling up to the maximum; a failed fsync itself stays fatal.
FLUSH_RETRY_MS = 10
FLUSH_RETRY_MAX_MS = 1000
OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})
INT32_MAX = 2**31 - 1


class MetadataStoreError(Exception):
    """The store cannot be used: damaged beyond recovery, locked by another process, or a
    failed write or fsync (after which nothing it says is trustworthy)."""


@dataclass
class LoadedMetadata:
    snapshot_records: list[ApiMessageAndVersion] = field(default_factory=list)
    snapshot_offset: int = 0        # the snapshot holds every record below this offset (0: no snapshot)
    log_records: list[tuple[int, ApiMessageAndVersion]] = field(default_factory=list)  # (offset, record)
    last_epoch: int = -1            # the newest controller epoch in the store (-1: none)
    end_offset: int = 0             # the offset the next record gets


class MetadataStore(Protocol):
    async def load(self) -> LoadedMetadata: ...

    async def claim_epoch(self) -> int: ...

    def append(self, records: Sequence[ApiMessageAndVersion], epoch: int) -> int: ...

    def wait_durable(self, offset: int) -> asyncio.Future: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def durable_end_offset(self) -> int: ...

    async def snapshot(self, records: Sequence[ApiMessageAndVersion], offset: int, epoch: int) -> None: ...

    @property
    def bytes_written(self) -> int: ...

    def close(self) -> None: ...


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_batches(records: Sequence[ApiMessageAndVersion], epoch: int, now_ms: int,
                   per_batch: int | None = None) -> bytes:
    """RecordBatch v2 bytes holding ``records`` (offsets from 0), in batches of ``per_batch``."""
    per_batch = per_batch or max(1, len(records))
    out, offset = [], 0
    for i in range(0, len(records), per_batch):
        chunk = records[i:i + per_batch]
        out.append(build_batch([Record(value=encode_record(r), timestamp=now_ms) for r in chunk], base_offset=offset,
                               partition_leader_epoch=epoch))
        offset += len(chunk)
    return b"".join(out)


def decode_batches(data, *, what: str) -> tuple[list[tuple[int, int, ApiMessageAndVersion]], int]:
    """Every (offset, epoch, record) in ``data``, which must be whole valid batches; and the
    byte length consumed. Raises MetadataStoreError naming ``what``."""
    out = []
    pos = 0
    size = len(data)
    try:
        while pos < size:
            header = check_batch(data, pos, size)
            for rec in decode_records(header, batch_body(data, pos, header)):
                out.append((rec.offset, header.partition_leader_epoch, decode_record(rec.value)))
            pos += header.size
    except (KafkaError, ValueError, MetadataRecordError) as exc:
        raise MetadataStoreError(f"{what}: bad batch at byte {pos}: {exc}") from None
    return out, pos


class LocalMetadataStore:
    """The metadata log on local disk (see the module docstring)."""

    def __init__(self, directory: Path, time: Time, *, segment_bytes: int = 1 << 30, segment_ms: int = 7 * 86_400_000,
                 lock_name: str | None = LOCK_FILE) -> None:
        self.directory = Path(directory)
        self.log_dir = self.directory / LOG_DIR_NAME
        self.time = time
        self._log_config = LogConfig(segment_bytes=segment_bytes, segment_ms=segment_ms, retention_bytes=-1,
                                     retention_ms=-1, max_message_bytes=min(segment_bytes, INT32_MAX))
        self._lock_fd: int | None = None
        self._lock_name = lock_name
        self._log: Log | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbroker-metadata-fsync")
        self._durable_end = 0
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._flushing = False
        self._failure: BaseException | None = None
        self._flush_retry: TimerHandle | None = None  # a flush waiting for descriptors
        self._flush_retry_ms = FLUSH_RETRY_MS
        self._last_epoch = -1
        self._bytes_written = 0

    # -- opening -------------------------------------------------------------------------

    def acquire_lock(self) -> None:
        """Lock the directory for this process (flock; released when the process dies)."""
        if self._lock_fd is not None or self._lock_name is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = fileio.open(self.directory / self._lock_name, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fileio.close(fd)
            raise MetadataStoreError(f"{self.directory} is in use by another process ({self._lock_name} is held)") from None
        self._lock_fd = fd

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        found = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = path.name[:-len(SNAPSHOT_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                found.append(int(stem))
        return sorted(found)

    def _read_snapshot(self, offset: int) -> tuple[list[ApiMessageAndVersion], int]:
        path = self.directory / snapshot_file_name(offset)
        data = path.read_bytes()
        items, used = decode_batches(data, what=path.name)
        if not items:
            raise MetadataStoreError(f"{path.name}: no records")
        epochs = {epoch for _o, epoch, _r in items}
        return [r for _o, _e, r in items], max(epochs)

    async def load(self) -> LoadedMetadata:
        """Open the log (recovering a torn tail), read the newest valid snapshot and the log after it."""
        self.acquire_lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        for stray in self.directory.glob(f"*{SNAPSHOT_SUFFIX}.tmp"):
            stray.unlink(missing_ok=True)
        loaded = LoadedMetadata()
        snapshot_epoch = -1
        for offset in reversed(self.snapshot_offsets()):
            try:
                loaded.snapshot_records, snapshot_epoch = self._read_snapshot(offset)
            except (OSError, MetadataStoreError) as exc:
                log.warning("ignoring metadata snapshot %s: %s", snapshot_file_name(offset), exc)
                continue
            loaded.snapshot_offset = offset
            break
        self._log = Log.open(self.log_dir, self._log_config, time=self.time, recovery_point=loaded.snapshot_offset,
                             had_clean_shutdown=False)
        mlog = self._log
        report = mlog.recovery_report
        if report is not None and report.bytes_truncated:
            log.warning("metadata log: recovery cut %d bytes of a torn or damaged tail; log end offset %d",
                        report.bytes_truncated, mlog.log_end_offset)
        if mlog.log_end_offset < loaded.snapshot_offset:
            # The snapshot is newer than the log (the log lost its tail, or was removed): the
            # log continues where the snapshot ends, so offsets stay unique.
            log.warning("metadata log ends at %d, before the snapshot at %d: restarting the log there",
                        mlog.log_end_offset, loaded.snapshot_offset)
            mlog.truncate_fully_and_start_at(loaded.snapshot_offset)
        if mlog.log_start_offset > loaded.snapshot_offset:
            raise MetadataStoreError(f"the metadata log starts at offset {mlog.log_start_offset} but no valid snapshot "
                                     f"covers the records before it")
        last_epoch = max(snapshot_epoch, mlog.leader_epoch_cache.latest_epoch() or -1)
        position = loaded.snapshot_offset
        while position < mlog.log_end_offset:
            info = mlog.read(position, max_bytes=1 << 24)
            data = info.records
            if not len(data):
                raise MetadataStoreError(f"metadata log: nothing readable at offset {position} "
                                         f"(log end {mlog.log_end_offset})")
            for pos, header in iter_batch_headers(data):
                batch = bytes(data[pos:pos + header.size])
                self._bytes_written += header.size
                items, _ = decode_batches(batch, what=f"metadata log batch at offset {header.base_offset}")
                for offset, epoch, record in items:
                    if offset >= position:
                        loaded.log_records.append((offset, record))
                    last_epoch = max(last_epoch, epoch)
                position = header.next_offset
        loaded.last_epoch = last_epoch
        loaded.end_offset = mlog.log_end_offset
        self._last_epoch = last_epoch
        # What recovery left is on disk; make sure of it before anyone is told it is durable.
        mlog.flush()
        self._durable_end = mlog.log_end_offset
        mlog.update_high_watermark(self._durable_end)
        return loaded

    # -- writing -------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def durable_end_offset(self) -> int:
        """Every record below this offset is durable."""
        return self._durable_end

    @property
    def last_epoch(self) -> int:
        return self._last_epoch

    @property
    def bytes_written(self) -> int:
        return self._bytes_written

    def size_in_bytes(self) -> int:
        """The metadata log's segments on disk (a metric)."""
        return self._log.size_in_bytes() if self._log is not None else 0

    async def claim_epoch(self) -> int:
        epoch = self._last_epoch + 1
        offset = self.append([make_record(MetadataRecordType.NO_OP)], epoch)
        await self.wait_durable(offset)
        log.info("claimed controller epoch %d (metadata log offset %d)", epoch, offset)
        return epoch

    def append(self, records: Sequence[ApiMessageAndVersion], epoch: int) -> int:
        if self._failure is not None:
            raise MetadataStoreError(f"the metadata store failed earlier: {self._failure}")
        if not records:
            raise ValueError("append needs at least one record")
        if epoch < self._last_epoch:
            raise ValueError(f"epoch {epoch} is older than {self._last_epoch}, already in the log")
        batch = encode_batches(records, epoch, self.time.milliseconds())
        try:
            info = self._log.append_as_leader(bytearray(batch), leader_epoch=epoch)
        except KafkaError as exc:
            self._failure = exc
            raise MetadataStoreError(f"metadata log append failed: {exc}") from exc
        self._last_epoch = epoch
        self._bytes_written += len(batch)
        return info.last_offset

    def wait_durable(self, offset: int) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        if self._log is None:
            future.set_exception(MetadataStoreError("metadata store closed"))
        elif self._failure is not None:
            future.set_exception(MetadataStoreError(f"metadata log fsync failed: {self._failure}"))
        elif offset < self._durable_end:
            future.set_result(offset)
        else:
            self._waiters.append((offset, future))
            self._maybe_flush()
        return future

    def _maybe_flush(self) -> None:
        if self._flushing or self._flush_retry is not None or not self._waiters or self._failure is not None:
            return
        try:
            plan = self._log.begin_flush()
        except KafkaError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno in OUT_OF_DESCRIPTORS:
                # Nothing failed to reach the disk: the descriptors to fsync with could not be
                # had. Try again soon (the records stay pending; nobody is told they are durable).
                self._retry_flush_later(exc)
                return
            self._fail(exc)
            return
        if self._flush_retry_ms != FLUSH_RETRY_MS:
            log.info("metadata log flush prepared again")
            self._flush_retry_ms = FLUSH_RETRY_MS
        if plan is None:
            self._complete_waiters()
            return
        self._flushing = True
        future = asyncio.get_running_loop().run_in_executor(self._executor, plan.run)
        future.add_done_callback(lambda f: self._flush_done(plan, f))

    def _retry_flush_later(self, exc: BaseException) -> None:
        delay = self._flush_retry_ms
        level = logging.WARNING if delay == FLUSH_RETRY_MS else logging.DEBUG
        log.log(level, "metadata log flush postponed: %s; retrying in %d ms", exc, delay)
        self._flush_retry_ms = min(delay * 2, FLUSH_RETRY_MAX_MS)

        def retry() -> None:
            self._flush_retry = None
            self._maybe_flush()
        self._flush_retry = self.time.schedule(delay, retry)

    def _flush_done(self, plan, future: asyncio.Future) -> None:
        self._flushing = False
        if self._log is None:  # closed meanwhile: close() failed the waiters
            return
        exc = future.exception()
        if exc is not None:
            self._fail(exc)
            return
        self._log.complete_flush(plan)
        self._durable_end = max(self._durable_end, self._log.recovery_point)
        self._log.update_high_watermark(self._durable_end)
        self._complete_waiters()
        self._maybe_flush()

    def _complete_waiters(self) -> None:
        durable = self._durable_end
        still = []
        for offset, future in self._waiters:
            if offset < durable:
                if not future.done():
                    future.set_result(offset)
            else:
                still.append((offset, future))
        self._waiters = still

    def _fail(self, exc: BaseException) -> None:
        log.error("metadata log fsync failed: %s", exc)
        self._failure = exc
        waiters, self._waiters = self._waiters, []
        for _offset, future in waiters:
            if not future.done():
                future.set_exception(MetadataStoreError(f"metadata log fsync failed: {exc}"))

    # -- snapshots -----------------------------------------------------------------------

    async def snapshot(self, records: Sequence[ApiMessageAndVersion], offset: int, epoch: int) -> None:
        if offset > self._durable_end:
            raise ValueError(f"snapshot at {offset} is beyond the durable end {self._durable_end}")
        if not records:
            raise ValueError("a snapshot needs at least one record")
        data = encode_batches(records, epoch, self.time.milliseconds(), SNAPSHOT_BATCH_RECORDS)
        path = self.directory / snapshot_file_name(offset)
        await asyncio.get_running_loop().run_in_executor(self._executor, write_atomically, path, data)
        kept = self.snapshot_offsets()
        for old in kept[:-SNAPSHOTS_KEPT]:
            (self.directory / snapshot_file_name(old)).unlink(missing_ok=True)
        kept = kept[-SNAPSHOTS_KEPT:]
        # Segments wholly below the oldest snapshot kept are needed by no load.
        floor = kept[0]
        mlog = self._log
        if floor > mlog.log_start_offset and floor <= mlog.high_watermark:
            mlog.maybe_increment_log_start_offset(floor)
            mlog.delete_old_segments()
        log.info("metadata snapshot at offset %d (%d records, %d bytes); log starts at %d", offset, len(records),
                 len(data), mlog.log_start_offset)

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close the log, then release the directory lock. Idempotent, and each
        descriptor is given up before it is closed: a close that fails (the log's flush or
        close, or close(2) itself: Linux frees the descriptor even then) is never repeated by
        a second call, which would close whatever file has reused that number since. The lock
        is released even when closing the log fails."""
        if self._flush_retry is not None:
            self._flush_retry.cancel()
            self._flush_retry = None
        mlog, self._log = self._log, None
        lock_fd, self._lock_fd = self._lock_fd, None
        waiters, self._waiters = self._waiters, []
        for _offset, future in waiters:
            if not future.done():
                future.set_exception(MetadataStoreError("metadata store closed"))
        try:
            if mlog is not None:
                try:
                    if self._failure is None:
                        mlog.flush()
                finally:
                    mlog.close(snapshot=False)
        finally:
            self._executor.shutdown(wait=True)
            if lock_fd is not None:
                try:
                    fcntl.flock(lock_fd, fcntl.LOCK_UN)
                finally:
                    fileio.close(lock_fd)
