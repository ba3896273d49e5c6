"""sim/cli.py's seed range on several processes: a worker that dies (the interpreter crashed)
ends the run with its seeds reported lost, instead of waiting for their results forever
(multiprocessing.Pool's behaviour, which hung a 300-seed run when its workers crashed)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

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
