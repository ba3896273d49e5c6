"""LogManager: every partition log under the broker's ``log.dirs`` (Kafka's ``LogManager``).

Per log dir it keeps Kafka's files: ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint`` (high watermarks),
``cleaner-offset-checkpoint`` (where each compacted log's dirty part starts, so a restart does not
compact from the start again) and the ``.kafka_cleanshutdown`` marker, written last by a clean shutdown and removed by the
next startup. Without the marker, logs are recovered from their checkpointed recovery
points.

The periodic work (retention, delayed deletion, flush policy, checkpoints, producer id expiration)
is exposed as plain methods; the broker schedules them and runs ``FlushPlan.run`` off the event loop. Not thread-safe.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Callable

from protocol.clock import Time
from protocol.errors import KafkaStorageError

from . import fileio
from .checkpoint import CheckpointFormatError, OffsetCheckpointFile, fsync_dir, fsync_path
from .config import LogConfig
from .log import FlushPlan, Log, parse_topic_partition
from .log_loader import RecoveryReport
from .segment_budget import OpenSegmentBudget, raise_open_files_limit

log = logging.getLogger("kbroker.storage.manager")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
DELETE_SUFFIX = "-delete"
# The controller's metadata log (``<metadata.log.dir>/__cluster_metadata-0``): not a partition of this broker's.
METADATA_TOPIC = "__cluster_metadata"

TopicPartition = tuple[str, int]
# Descriptors the plans of one flush pass may hold (see flush_dirty_logs): they come out of what
# the segment budget leaves for sockets and everything else (at least 256, segment_budget.py).
FLUSH_PASS_MAX_FDS = 64
FLUSH_THREADS = 32  # threads fsyncing at shutdown (flush_all): concurrent fsyncs share journal commits


class CheckpointWrites:
    """Which snapshot each checkpoint file holds (by the order snapshots were taken), and a
    lock per file: snapshots are taken on the event loop and written there or on a thread, so
    two writers of one file never share its temp file, and an older snapshot written after a
    newer one is skipped: a recovery point lowered by a truncation
    (``checkpoint_recovery_points_after_truncation``) never comes back up by a periodic
    snapshot taken before it that was still waiting for the thread. One lock per file, not one
    for all: the loop's write of one file (after a truncation) never waits behind the thread's
    fsync of another (another log dir's, or the high watermarks')."""

    def __init__(self) -> None:
        self._guard = threading.Lock()  # guards _locks only
        self._locks: dict[Path, threading.Lock] = {}
        self.written: dict[Path, int] = {}

    def lock(self, path: Path) -> threading.Lock:
        """The lock of ``path``'s writes."""
        with self._guard:
            lock = self._locks.get(path)
            if lock is None:
                lock = self._locks[path] = threading.Lock()
            return lock


class CheckpointSnapshot:
    """Checkpoint files' contents as they were when taken; ``write()`` is thread-safe."""

    __slots__ = ("writes", "seq", "files")

    def __init__(self, writes: CheckpointWrites, seq: int, files: list[tuple[Path, dict[TopicPartition, int]]]) -> None:
        self.writes = writes
        self.seq = seq
        self.files = files

    def write(self) -> int:
        """Write each file unless a newer snapshot of it is there already; how many were written."""
        done = 0
        writes = self.writes
        for path, offsets in self.files:
            with writes.lock(path):
                if writes.written.get(path, -1) > self.seq:
                    continue
                OffsetCheckpointFile(path).write(offsets)
                writes.written[path] = self.seq
                done += 1
        return done


class LogManager:
    """Not thread-safe: call it from the broker's event-loop thread."""

    def __init__(self, log_dirs: list[Path], default_config: LogConfig, *, time: Time,
                 topic_config: Callable[[str], LogConfig] | None = None, max_open_files: int | None = None) -> None:
        """``max_open_files``: descriptors all segments may hold at most (the broker's
        ``log.open.files.max``); the open files limit bounds them too (segment_budget.py)."""
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.time = time
        self._topic_config = topic_config
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        # Partitions per log dir, kept with _log_dir_of: choosing the dir of a new partition must
        # not walk every hosted partition (a LeaderAndIsr creating 1,000 logs on a broker with
        # 10,000 would pay 10 million steps).
        self._partitions_in: dict[Path, int] = {d: 0 for d in self.log_dirs}
        self._unsynced_dirs: set[Path] = set()  # log dirs holding a new partition dir not yet fsync'd
        # Deleted partitions' directories, renamed ``-delete``, waiting file.delete.delay.ms: (when due, dir)
        self._dirs_to_delete: list[tuple[int, Path]] = []
        # Shared by every log here: what their non-active segments may keep open.
        self.segment_budget = OpenSegmentBudget.from_open_files_limit(max_open_files)
        # Checkpoint files written so far (CheckpointSnapshot: written on the loop or a thread)
        self._checkpoint_writes = CheckpointWrites()
        self._checkpoint_seq = 0

    # -- startup -------------------------------------------------------------------------

    def startup(self) -> list[RecoveryReport]:
        """Load every ``<topic>-<partition>`` directory of every log dir; one report per log.

        Finishes interrupted deletions, reads the three checkpoints, recovers logs when the
        clean-shutdown marker is absent (and removes the marker), and logs one INFO line
        per partition that needed recovery. First it raises the soft RLIMIT_NOFILE to the
        hard limit: the cache of non-active segments' files is sized from it (see
        segment_budget.py), so more segments stay open and random reads in long logs stay cheap.
        """
        limit = raise_open_files_limit()
        self.segment_budget.resize_to_open_files_limit()
        log.info("open files limit %d; up to %d descriptors for segments", limit, self.segment_budget.files.budget)
        reports = []
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            high_watermarks = self._read_checkpoint(log_dir / HIGH_WATERMARK_CHECKPOINT)
            cleaner_offsets = self._read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT)
            with os.scandir(log_dir) as entries:
                children = sorted(entry.name for entry in entries if entry.is_dir())
            configs: dict[str, LogConfig] = {}  # per topic, not per partition
            for name in children:
                child = log_dir / name
                if name.endswith(DELETE_SUFFIX):
                    fileio.rmtree(child, ignore_errors=True)
                    continue
                try:
                    tp = parse_topic_partition(name)
                except ValueError:
                    continue
                if tp[0] == METADATA_TOPIC:
                    continue  # a controller's metadata log sharing the directory (Kafka's LogManager skips it too)
                if tp in self._logs:
                    raise KafkaStorageError(f"{name} exists in both {self._log_dir_of[tp]} and {log_dir}")
                config = configs.get(tp[0])
                if config is None:
                    config = configs[tp[0]] = self._config_for(tp[0])
                loaded = Log.open(child, config, time=self.time, budget=self.segment_budget,
                                  recovery_point=recovery_points.get(tp, 0), log_start_offset=start_offsets.get(tp, 0),
                                  had_clean_shutdown=clean, names=fileio.listdir(child))
                loaded.update_high_watermark(high_watermarks.get(tp, 0))
                if tp in cleaner_offsets:
                    self._restore_first_dirty_offset(loaded, cleaner_offsets[tp])
                self._logs[tp] = loaded
                self._log_dir_of[tp] = log_dir
                self._partitions_in[log_dir] += 1
                report = loaded.recovery_report
                if report.needed_recovery:
                    log.info("recovered %s", report.summary())
                reports.append(report)
            if clean:
                fileio.unlink(marker)
                fsync_dir(log_dir)
            log.info("loaded %d logs from %s (%s shutdown)", self._partitions_in[log_dir],
                     log_dir, "clean" if clean else "unclean")
        return reports

    @staticmethod
    def _restore_first_dirty_offset(loaded: Log, checkpointed: int) -> None:
        """As Kafka's LogCleanerManager.cleanableOffsets: a checkpointed offset outside [log start
        offset, log end offset] (the log was truncated or its start moved on) is not trusted, and
        cleaning starts from the log start offset."""
        if loaded.log_start_offset <= checkpointed <= loaded.log_end_offset:
            loaded.first_dirty_offset = checkpointed
        else:
            log.warning("%s-%d: cleaner checkpoint %d is outside [%d, %d]; cleaning from the log start offset",
                        loaded.topic, loaded.partition, checkpointed, loaded.log_start_offset, loaded.log_end_offset)

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except CheckpointFormatError as exc:
            log.warning("%s; ignoring it (logs recover from offset 0)", exc)
            return {}

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_config(topic) if self._topic_config is not None else self.default_config

    # -- logs ----------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def logs_by_dir(self) -> dict[Path, dict[TopicPartition, Log]]:
        """Every log dir (each, even an empty one) with the logs it holds."""
        out: dict[Path, dict[TopicPartition, Log]] = {d: {} for d in self.log_dirs}
        for tp, log_ in self._logs.items():
            out.setdefault(self._log_dir_of[tp], {})[tp] = log_
        return out

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None, *,
                          defer_dir_sync: bool = False) -> Log:
        """The partition's log, created in the log dir holding the fewest partitions if new.
        A new partition directory is made durable by an fsync of its log dir, at once, or with
        ``defer_dir_sync`` by the caller's ``sync_created_log_dirs()`` (one fsync per log dir for
        a whole batch: a LeaderAndIsr creating 1,000 partitions pays 1, not 1,000)."""
        tp = (topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        log_dir = min(self.log_dirs, key=lambda d: self._partitions_in[d])
        partition_dir = log_dir / f"{topic}-{partition}"
        fresh = not os.path.lexists(partition_dir)
        try:
            created = Log.open(partition_dir, config or self._config_for(topic), time=self.time,
                               budget=self.segment_budget)
        except (OSError, KafkaStorageError) as exc:
            # Out of descriptors or disk space, an unwritable directory: nothing half-made stays.
            if fresh:
                self._remove_partial_dir(partition_dir)
            raise KafkaStorageError(f"cannot create the log of {topic}-{partition} in {log_dir}: {exc}") from exc
        if defer_dir_sync:
            self._unsynced_dirs.add(log_dir)
        else:
            fsync_dir(log_dir)
        self._logs[tp] = created
        self._log_dir_of[tp] = log_dir
        self._partitions_in[log_dir] += 1
        log.info("created log %s-%d in %s", topic, partition, log_dir)
        return created

    @staticmethod
    def _remove_partial_dir(partition_dir: Path) -> None:
        """Remove what a failed ``Log.open`` left of a new partition directory. Renaming needs
        no descriptor, so even out of them the directory stops being a partition at once (a
        ``-delete`` directory, which the next start removes if removing it fails now)."""
        doomed = partition_dir.with_name(f"{partition_dir.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            fileio.rename(partition_dir, doomed)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.error("cannot remove the partial log directory %s: %s", partition_dir, exc)
            return
        fileio.rmtree(doomed, ignore_errors=True)
        if os.path.lexists(doomed):
            log.warning("%s stays until the next start (removing it failed)", doomed)

    def sync_created_log_dirs(self) -> None:
        """fsync each log dir that ``get_or_create_log(defer_dir_sync=True)`` created in."""
        for log_dir in sorted(self._unsynced_dirs):
            fsync_dir(log_dir)
            self._unsynced_dirs.discard(log_dir)

    def delete_log(self, topic: str, partition: int) -> None:
        """Close the log, rename its directory to ``<name>.<uuid>-delete`` and remove that after
        the log's file.delete.delay.ms (``delete_due``; a crash in between leaves a directory the
        next startup removes), as Kafka's asynchronous log deletion."""
        tp = (topic, partition)
        removed = self._logs.pop(tp, None)
        if removed is None:
            return
        log_dir = self._log_dir_of.pop(tp)
        self._partitions_in[log_dir] -= 1
        removed.close(snapshot=False)
        doomed = removed.dir.with_name(f"{removed.dir.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        fileio.rename(removed.dir, doomed)
        fsync_dir(log_dir)
        delay = removed.config.file_delete_delay_ms
        if delay <= 0:
            fileio.rmtree(doomed, ignore_errors=True)
        else:
            self._dirs_to_delete.append((self.time.milliseconds() + delay, doomed))
        log.info("deleted log %s-%d", topic, partition)

    def delete_due(self) -> int:
        """Remove the segments (``.deleted``) and deleted partitions' directories (``-delete``)
        whose file.delete.delay.ms has passed; returns how many went."""
        now = self.time.milliseconds()
        count = sum(each.delete_due_segments(now) for each in self._logs.values())
        due = [d for when, d in self._dirs_to_delete if when <= now]
        if due:
            self._dirs_to_delete = [p for p in self._dirs_to_delete if p[0] > now]
            for doomed in due:
                fileio.rmtree(doomed, ignore_errors=True)
        return count + len(due)

    # -- periodic work -------------------------------------------------------------------

    def cleanup_logs(self) -> int:
        """Retention pass over every log; returns the number of segments deleted."""
        deleted = 0
        for (topic, partition), each in list(self._logs.items()):
            try:
                deleted += each.delete_old_segments()
            except OSError as exc:
                log.error("%s-%d: retention failed: %s", topic, partition, exc)
        return deleted

    def remove_expired_producers(self) -> int:
        """The producer.id.expiration.ms pass (Kafka runs it every
        producer.id.expiration.check.interval.ms, 10 minutes by default); returns how many
        producer ids were forgotten."""
        now = self.time.milliseconds()
        return sum(each.remove_expired_producers(now) for each in self._logs.values())

    def flush_dirty_logs(self, max_fds: int = FLUSH_PASS_MAX_FDS) -> list[FlushPlan]:
        """The flush.ms / flush.messages pass: a plan for each log the policy says to flush, the
        longest unflushed first. The broker runs ``plan.run()`` off the loop, then
        ``plan.log.complete_flush(plan)``. Each plan holds descriptors until it ran (a few per
        segment), so one pass prepares plans holding about ``max_fds`` at most (always one):
        with 10,000 partitions due at once, the rest wait for the next pass instead of
        exhausting RLIMIT_NOFILE."""
        due = [each for each in self._logs.values() if each.needs_flush_by_policy()]
        due.sort(key=lambda each: each.time_since_last_flush_ms(), reverse=True)
        plans: list[FlushPlan] = []
        held = 0
        for each in due:
            if plans and held >= max_fds:
                break
            plan = each.begin_flush()
            if plan is not None:
                plans.append(plan)
                held += plan.descriptors
        return plans

    def _write_checkpoints(self, file_name: str, value: Callable[[Log], int],
                           which: Callable[[Log], bool] = lambda each: True, dirs: list[Path] | None = None) -> None:
        self._snapshot_checkpoints(file_name, value, which, dirs).write()

    def _snapshot_checkpoints(self, file_name: str, value: Callable[[Log], int],
                              which: Callable[[Log], bool] = lambda each: True,
                              dirs: list[Path] | None = None) -> "CheckpointSnapshot":
        files = []
        for log_dir in self.log_dirs if dirs is None else dirs:
            offsets = {tp: value(each) for tp, each in self._logs.items()
                       if self._log_dir_of[tp] == log_dir and which(each)}
            files.append((log_dir / file_name, offsets))
        self._checkpoint_seq += 1
        return CheckpointSnapshot(self._checkpoint_writes, self._checkpoint_seq, files)

    def snapshot_recovery_points(self) -> "CheckpointSnapshot":
        """The periodic passes' checkpoints taken now, on the event loop, for ``write()`` on a
        thread: the write is a temp file, two fsyncs and a rename, which under a busy disk
        blocked the loop 2-30 ms every replica.high.watermark.checkpoint.interval.ms, every
        request in flight with it (Kafka writes them on its scheduler thread, not a request
        handler's)."""
        return self._snapshot_checkpoints(RECOVERY_POINT_CHECKPOINT, lambda each: each.recovery_point)

    def snapshot_log_start_offsets(self) -> "CheckpointSnapshot":
        return self._snapshot_checkpoints(LOG_START_OFFSET_CHECKPOINT, lambda each: each.log_start_offset)

    def snapshot_high_watermarks(self) -> "CheckpointSnapshot":
        return self._snapshot_checkpoints(HIGH_WATERMARK_CHECKPOINT, lambda each: each.high_watermark)

    def checkpoint_cleaner_offsets(self) -> None:
        """Each compacted log's first dirty offset (Kafka writes it after every cleaning pass)."""
        self._write_checkpoints(CLEANER_OFFSET_CHECKPOINT, lambda each: each.first_dirty_offset,
                                lambda each: each.config.compact)

    def checkpoint_recovery_points(self) -> None:
        self._write_checkpoints(RECOVERY_POINT_CHECKPOINT, lambda each: each.recovery_point)

    def checkpoint_recovery_points_after_truncation(self, truncated: Log) -> None:
        """A follower truncated ``truncated`` below its recovery point: the recovery points of
        its log dir are written now (Kafka's LogManager.truncateTo does the same), not at the
        next periodic checkpoint. Else a crash in between would find the old, higher recovery
        point, and recovery would not re-check what was appended after the truncation below it."""
        log_dir = self._log_dir_of.get((truncated.topic, truncated.partition))
        if log_dir is not None:
            self._write_checkpoints(RECOVERY_POINT_CHECKPOINT, lambda each: each.recovery_point, dirs=[log_dir])

    def checkpoint_log_start_offsets(self) -> None:
        self._write_checkpoints(LOG_START_OFFSET_CHECKPOINT, lambda each: each.log_start_offset)

    def checkpoint_high_watermarks(self) -> None:
        self._write_checkpoints(HIGH_WATERMARK_CHECKPOINT, lambda each: each.high_watermark)

    # -- shutdown ------------------------------------------------------------------------

    def flush_all(self) -> None:
        """Flush every log (synchronously): plans holding at most about the segments' descriptor
        budget at a time (``shutdown`` closed every segment's files first, so that share is free;
        at least FLUSH_PASS_MAX_FDS), their fsyncs run on FLUSH_THREADS threads (``FlushPlan.run``
        is thread-safe; the fsyncs of many files finish much sooner in parallel, the file system
        commits them together: after a kill -9 and restart with 10,000 partitions a clean
        shutdown is mostly this), a new plan prepared as soon as one finished. The first error
        is raised once the plans already prepared have run."""
        logs = list(self._logs.values())
        max_fds = max(FLUSH_PASS_MAX_FDS, self.segment_budget.files.budget)
        with fileio.thread_pool(FLUSH_THREADS, thread_name_prefix="log-flush") as pool:
            # The leader epoch files that need writing, written on the threads (begin_flush would
            # write each on this one); a failure is raised by that log's begin_flush below.
            writes = [each.leader_epoch_cache.pending_write() for each in logs if each.leader_epoch_cache.write_needed()]
            for done in [pool.submit(write.run) for write in writes if write is not None]:
                try:
                    done.result()
                except OSError:
                    pass
            pending: dict[Future[None], tuple[FlushPlan, int]] = {}  # plan, the descriptors it holds
            held, i = 0, 0
            error: BaseException | None = None
            while True:
                while i < len(logs) and error is None and (held < max_fds or not pending):
                    try:
                        plan = logs[i].begin_flush()
                    except KafkaStorageError as exc:
                        error = exc
                        break
                    finally:
                        i += 1
                    if plan is not None:
                        fds = plan.descriptors  # (before run() closes them)
                        pending[pool.submit(plan.run)] = (plan, fds)
                        held += fds
                if not pending:
                    break
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                # In the order the plans were submitted, not the set's (by address): the error
                # raised is the same from run to run (the simulator's seed 17 with every fault).
                for done in [f for f in pending if f in finished]:
                    plan, fds = pending.pop(done)
                    held -= fds
                    try:
                        done.result()
                    except OSError as exc:
                        error = error or KafkaStorageError(f"{plan.log.topic}-{plan.log.partition}: flush failed: {exc}")
                        continue
                    plan.log.complete_flush(plan)
            if error is not None:
                raise error

    def shutdown(self) -> None:
        """Flush every log, write the four checkpoints, close (trim) the logs, then write
        the clean-shutdown marker in each log dir. The segments' files are closed first: the
        flush opens what it fsyncs, and must not find every descriptor taken."""
        for each in self._logs.values():
            for segment in each.segments:
                segment.close_files()
        self.flush_all()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        self.checkpoint_cleaner_offsets()
        for each in self._logs.values():
            each.close()
        for _due, doomed in self._dirs_to_delete:
            fileio.rmtree(doomed, ignore_errors=True)
        self._dirs_to_delete = []
        for log_dir in self.log_dirs:
            fsync_path(log_dir / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT)
            fsync_dir(log_dir)
        self._logs.clear()
        self._log_dir_of.clear()
        self._partitions_in = {d: 0 for d in self.log_dirs}
        log.info("log manager shut down cleanly")
