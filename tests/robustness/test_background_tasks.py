"""Issue 12 §5: a background task that fails (checkpoint, retention, flush) logs, retries
with backoff on the injected clock and never dies silently."""

from __future__ import annotations

import asyncio
import errno
import logging

from broker.scheduler import PeriodicTask
from protocol.clock import MockTime


def test_a_failing_task_is_retried_with_backoff_then_resumes_its_period(caplog):
    time = MockTime()
    start = time.monotonic_ms()
    runs: list[float] = []
    failing = [3]

    def checkpoint() -> None:
        runs.append(time.monotonic_ms() - start)
        if failing[0]:
            failing[0] -= 1
            raise OSError(errno.EMFILE, "Too many open files", "replication-offset-checkpoint.tmp")

    with caplog.at_level(logging.INFO, logger="kbroker.scheduler"):
        task = PeriodicTask("highwatermark-checkpoint", 5000, checkpoint, time).start()
        time.sleep(5000 + 100 + 200 + 400 + 5000 * 2)
    # Fails at 5000, retried after 100, 200, 400 ms (succeeds), then every 5000 ms again.
    assert runs == [5000, 5100, 5300, 5700, 10700, 15700]
    records = [r for r in caplog.records if r.name == "kbroker.scheduler"]
    assert sum(1 for r in records if r.exc_info) == 1  # the traceback once
    assert sum("failed again" in r.getMessage() for r in records) == 2
    assert any("succeeded after 3 failure(s)" in r.getMessage() for r in records)
    task.cancel()
    time.sleep(20_000)
    assert len(runs) == 6


def test_backoff_is_capped_at_the_interval_and_the_task_never_stops():
    time = MockTime()
    runs = []

    def always_fails() -> None:
        runs.append(time.monotonic_ms())
        raise RuntimeError("disk gone")

    task = PeriodicTask("log-retention", 1000, always_fails, time, retry_backoff_ms=100).start()
    time.sleep(60_000)
    gaps = [b - a for a, b in zip(runs, runs[1:])]
    assert gaps[:4] == [100, 200, 400, 800]
    assert set(gaps[4:]) == {1000}  # capped, and still running after a minute of failures
    assert task.failures == len(runs)


def test_a_task_handing_its_work_to_a_thread_ends_when_the_work_does(caplog):
    """A checkpoint pass takes its snapshot on the loop and returns the future of the write on
    the flush thread (broker/server.py _write_off_loop): the pass is that future. Its failure
    is retried with backoff like a raised one, and the next pass is scheduled only once the
    write is done, so two writes of one pass never overlap."""
    time = MockTime()
    start = time.monotonic_ms()
    loop = asyncio.new_event_loop()  # the futures' done callbacks run on it
    writes: list[asyncio.Future] = []
    runs: list[float] = []

    def checkpoint() -> asyncio.Future:
        runs.append(time.monotonic_ms() - start)
        writes.append(loop.create_future())
        return writes[-1]

    def settle() -> None:
        loop.run_until_complete(asyncio.sleep(0))

    with caplog.at_level(logging.INFO, logger="kbroker.scheduler"):
        task = PeriodicTask("highwatermark-checkpoint", 5000, checkpoint, time).start()
        time.sleep(5000)
        assert runs == [5000]
        time.sleep(20_000)  # the write is still running: no second pass meanwhile
        assert runs == [5000]
        writes[0].set_exception(OSError(errno.ENOSPC, "No space left on device"))  # done at 25000: retried
        settle()
        time.sleep(100)
        assert runs == [5000, 25100]
        assert task.failures == 1
        writes[1].set_result(1)
        settle()
        time.sleep(5000)
        assert runs == [5000, 25100, 30100]
        assert task.failures == 0
    records = [r for r in caplog.records if r.name == "kbroker.scheduler"]
    assert sum(1 for r in records if r.exc_info) == 1
    assert any("succeeded after 1 failure(s)" in r.getMessage() for r in records)
    task.cancel()
    writes[2].set_result(1)  # done after the cancel: nothing more is scheduled
    settle()
    time.sleep(20_000)
    assert len(runs) == 3
    loop.close()


async def test_the_broker_writes_its_periodic_checkpoints_off_the_event_loop(tmp_path, monkeypatch):
    """Issue 26's commit latency: the high watermark checkpoint (every 5 s) fsynced its temp
    file and the log dir on the event loop, 2-30 ms under a busy disk, stalling every request
    in flight, a commit's markers among them (its p99). The broker's three periodic
    checkpoints are now taken on the loop and written on the flush thread."""
    import asyncio
    import concurrent.futures
    import threading
    import types

    from broker.config import KafkaConfig
    from broker.server import KafkaServer
    from storage import LogConfig, LogManager, OffsetCheckpointFile, fileio

    time = MockTime()
    server = KafkaServer.__new__(KafkaServer)  # the background passes only, without a broker around them
    server.config = KafkaConfig({"log.cleaner.enable": "false"})
    server.time = time
    server.log_manager = LogManager([tmp_path], LogConfig(), time=time)
    server.log_manager.startup()
    server.replica_manager = types.SimpleNamespace(maybe_shrink_isr=lambda: None)
    server.collector = None
    server._timers = {}
    server._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbroker-flush")
    server._flush_idle = asyncio.Event()
    server._flush_idle.set()
    log_ = server.log_manager.get_or_create_log("t", 0)
    log_.update_high_watermark(0)
    fsynced_on: list[str] = []
    real_fsync = fileio.fsync
    monkeypatch.setattr(fileio, "fsync", lambda fd: (fsynced_on.append(threading.current_thread().name),
                                                     real_fsync(fd))[1])
    try:
        server._schedule_background_tasks()
        time.sleep(server.config["log.flush.offset.checkpoint.interval.ms"])  # all three passes are due by then
        # the flush thread runs its work in order: once this is done, so are the writes before it
        await asyncio.get_running_loop().run_in_executor(server._executor, lambda: None)
        assert fsynced_on and all(name.startswith("kbroker-flush") for name in fsynced_on)
        for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
            assert dict(OffsetCheckpointFile(tmp_path / name).read()) == {("t", 0): 0}
    finally:
        for task in server._timers.values():
            task.cancel()
        server._executor.shutdown(wait=True)
        server.log_manager.shutdown()
