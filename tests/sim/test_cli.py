"""sim/cli.py's seed range on several processes: a worker that dies (the interpreter crashed)
ends the run with its seeds reported lost, instead of waiting for their results forever
(multiprocessing.Pool's behaviour, which hung a 300-seed run when its workers crashed)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from sim.cli import _unordered


def _square_or_die(job):
    seed, _options = job
    if seed == 5:
        os._exit(70)  # as a segfault would: no exception, no result
    return seed * seed


def test_results_come_back_for_every_job():
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))
    lost: list[int] = []
    try:
        out = sorted(_unordered(pool, 2, _square_or_die, [(s, None) for s in range(1, 5)], lost))
    finally:
        pool.shutdown(cancel_futures=True)
    assert out == [1, 4, 9, 16] and lost == []


def test_a_dead_worker_ends_the_run_with_the_seeds_not_done_reported_lost():
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))
    lost: list[int] = []
    jobs = [(s, None) for s in range(1, 21)]
    try:
        out = list(_unordered(pool, 2, _square_or_die, jobs, lost))
    finally:
        pool.shutdown(cancel_futures=True)
    assert 5 in lost
    assert sorted([round(x ** 0.5) for x in out] + lost) == list(range(1, 21))  # each seed done or lost, once


class _PoolBrokenAtSubmit:
    """A pool whose worker died between two waits: the jobs done so far have their results,
    and the next submit finds the pool broken (ProcessPoolExecutor.submit raises
    BrokenProcessPool once its management thread has marked it so, which can happen before
    the futures still pending are failed)."""

    def __init__(self, broken_from: int) -> None:
        self.broken_from = broken_from

    def submit(self, fn, job):
        if job[0] >= self.broken_from:
            raise BrokenProcessPool("a child process terminated abruptly")
        future: Future = Future()
        future.set_result(fn(job))
        return future


def test_a_pool_found_broken_at_submit_ends_the_run_with_the_seeds_not_done_reported_lost():
    lost: list[int] = []
    out = list(_unordered(_PoolBrokenAtSubmit(4), 2, lambda job: job[0] * job[0],
                          [(s, None) for s in range(1, 9)], lost))
    assert out == [1, 4, 9] and lost == [4, 5, 6, 7, 8]
