"""Issue 12 §5: a background task that fails (checkpoint, retention, flush) logs, retries
with backoff on the injected clock and never dies silently."""

from __future__ import annotations

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
