"""The log cleaner's threads (Kafka's ``LogCleaner`` with ``log.cleaner.threads`` CleanerThreads).

Compaction reads and rewrites whole segments: on the event loop a big pass would hold every
produce and fetch behind it. So a pass (storage/log_cleaner.py ``CleanTask``) is split: the
event loop picks the filthiest log and takes views of its cleanable segments
(``LogCleaner.begin_clean``), a cleaner thread writes the ``.cleaned`` segments from those
views (``CleanTask.run``, touching no Log state), and the event loop swaps them in
(``complete_clean``), dropping the pass if the log changed meanwhile. At most
``log.cleaner.threads`` passes run at once, never two on one log (Kafka's LogCleanerManager
``inProgress``). A finished pass looks for more work at once; with none, the next look is
``log.cleaner.backoff.ms`` later (the broker's periodic task). Each completed pass writes
the log dirs' ``cleaner-offset-checkpoint``. Shutdown aborts the running passes (their
``.cleaned`` files are removed; a crash leaves them to the next load) and waits for the threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Callable

from storage import Log
from storage.log_cleaner import CleanAborted, CleanTask, LogCleaner

log = logging.getLogger("kbroker.cleaner")


def _run(task: CleanTask) -> BaseException | None:
    """On a cleaner thread: the pass, its failure returned (not raised: a pass ended by shutdown
    leaves no future whose exception nobody retrieves)."""
    try:
        task.run()
    except Exception as exc:
        return exc
    return None


class CleanerThreads:
    """Not thread-safe: called on the event loop (only ``CleanTask.run`` goes to the threads)."""

    def __init__(self, cleaner: LogCleaner, threads: int, on_cleaned: Callable[[], None]) -> None:
        """``on_cleaned``: after each pass swapped in (the broker checkpoints the cleaner offsets)."""
        self.cleaner = cleaner
        self.threads = max(1, threads)
        self.on_cleaned = on_cleaned
        self._executor = concurrent.futures.ThreadPoolExecutor(self.threads, thread_name_prefix="kbroker-cleaner")
        self._running: dict[Log, CleanTask] = {}
        self._closed = False
        self.failures = 0
        # Given to each pass: called on the cleaner thread after each group it wrote (tests pause here).
        self.on_group_cleaned: Callable[[CleanTask, int], None] | None = None

    def resize(self, threads: int) -> None:
        """log.cleaner.threads changed (a dynamic broker config): passes start on a pool of the
        new size from now on; the old pool finishes the passes it runs, then its threads end."""
        threads = max(1, threads)
        if threads == self.threads or self._closed:
            return
        old, self.threads = self._executor, threads
        self._executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="kbroker-cleaner")
        old.shutdown(wait=False)
        log.info("log cleaner: %d thread(s)", threads)
        self.maybe_clean()

    @property
    def running(self) -> list[CleanTask]:
        return list(self._running.values())

    def maybe_clean(self) -> None:
        """Start passes on the filthiest logs while a thread is free (the periodic task's work)."""
        while not self._closed and len(self._running) < self.threads:
            target = self.cleaner.grab_filthiest_log(busy=self._running)
            if target is None:
                return
            task = self.cleaner.begin_clean(target)
            if task is None:
                return
            task.on_group_cleaned = self.on_group_cleaned
            self._running[target] = task
            future = asyncio.get_running_loop().run_in_executor(self._executor, _run, task)
            future.add_done_callback(lambda f, task=task: self._finished(task, f))

    def _finished(self, task: CleanTask, future: asyncio.Future) -> None:
        self._running.pop(task.log, None)
        if future.cancelled() or self._closed:
            task.discard()
            return
        error = future.result()
        if error is not None:  # run removed its files
            if not isinstance(error, CleanAborted):
                self.failures += 1
                log.error("%s-%d: cleaning failed: %s: %s", task.log.topic, task.log.partition,
                          type(error).__name__, error)
            return
        try:
            stats = self.cleaner.complete_clean(task)
        except Exception:
            self.failures += 1
            log.exception("%s-%d: swapping the cleaned segments in failed", task.log.topic, task.log.partition)
            return
        if stats is not None:
            self.on_cleaned()
        self.maybe_clean()  # more work? (Kafka's cleaner backs off only when there is none)

    def shutdown(self) -> None:
        """Abort the running passes and wait for the threads (each stops at its next batch)."""
        self._closed = True
        for task in self._running.values():
            task.abort()
        self._executor.shutdown(wait=True)
        for task in self._running.values():
            task.discard()
        self._running.clear()
