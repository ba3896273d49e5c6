"""Closing Python's own sources of nondeterminism for the length of a simulated run.

Inside ``sandbox(seed)``:

* the global ``random`` is seeded from the run's seed (production code draws segment roll
  jitter, client partition choices and bootstrap shuffles from it);
* ``uuid.uuid4``, ``os.urandom``, the ``secrets`` functions and ``random.Random()`` made
  without a seed draw from a PRNG seeded from the seed (cluster ids, incarnation ids, topic
  ids, member ids, deleted directories' names);
* ``time.time``/``time_ns``/``monotonic``/``monotonic_ns``/``perf_counter``/``perf_counter_ns`` read the simulated clock (log
  records too: a run's log reads in simulated time);
* the cyclic garbage collector is off (a collection runs finalizers at a moment that
  depends on memory, not on the run); the runner collects after each run (not the heap the
  process's first run found: that is frozen), and ``gc.freeze``/``gc.unfreeze`` do nothing;
* a thread started meanwhile is an error (``threading.Thread.start`` refuses), and
  storage's thread pool (storage/fileio.py ``thread_pool``) runs its work inline.

Set and dict iteration over str keys depends on PYTHONHASHSEED; production code sorts or
uses dicts (insertion-ordered) where the order is seen, and the determinism test runs each
seed under two hash seeds to keep it so. A set of objects hashed by identity iterates in the
order of their addresses, which anything allocated elsewhere moves: tasks cancelled and
operations completed in a loop are kept in dicts (tests/sim/test_determinism.py runs seed 5541
with an extra attribute on the Consumer and with ballast allocated first).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import os
import random
import secrets
import threading
import time
import uuid
from typing import Any, Iterator

from storage import file_records, fileio


class InlineExecutor(concurrent.futures.Executor):
    """An Executor that runs what it is given at once, on the caller's thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


_freeze = gc.freeze  # (the sandbox makes gc's own do nothing)


def freeze_heap() -> None:
    """Before a simulation is built (Simulation.__init__): the heap as the first one in this
    process finds it (modules, classes, functions: most of what the collector tracks), collected
    once and frozen for good, so that the collection ending each run (Simulation._finalize) scans
    only what came since: 5-13 ms a seed instead of 30-50 (a seed takes 1-2 s of CPU). Frozen
    objects are not scanned, and garbage they hold is not freed; they are the process's own,
    never a run's: during a run, production's gc.freeze/gc.unfreeze (broker/heap.py, a broker's
    start) do nothing (``sandbox``; with the collector off they would only move objects between
    generations). Again when something unfroze it (tests of broker/heap.py in the same process)."""
    if not gc.get_freeze_count():
        gc.collect()
        _freeze()


def _no_op() -> None:
    pass


def _no_threads(self: threading.Thread) -> None:
    raise RuntimeError(f"the simulator runs no threads ({self.name} was started)")


@contextlib.contextmanager
def sandbox(seed: int, clock: Any) -> Iterator[random.Random]:
    """Patch the process's sources of nondeterminism for one run; yields the PRNG that
    stands in for the operating system's randomness. ``clock``: the SimLoop."""
    rng = random.Random(f"os-{seed}")
    saved_random = random.getstate()
    random.seed(f"global-{seed}")

    def randbytes(n: int) -> bytes:
        return rng.randbytes(n)

    def token_bytes(nbytes: int | None = None) -> bytes:
        return rng.randbytes(32 if nbytes is None else nbytes)

    def token_hex(nbytes: int | None = None) -> str:
        return token_bytes(nbytes).hex()

    def token_urlsafe(nbytes: int | None = None) -> str:
        import base64
        return base64.urlsafe_b64encode(token_bytes(nbytes)).rstrip(b"=").decode("ascii")

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    def wall() -> float:
        return 1_700_000_000.0 + clock._now

    def wall_ns() -> int:
        return 1_700_000_000_000_000_000 + int(clock._now * 1e9)

    def mono() -> float:
        return clock._now

    def mono_ns() -> int:
        return int(clock._now * 1e9)

    original_seed = random.Random.seed

    def seed_random(self: random.Random, a: Any = None, version: int = 2) -> None:
        # random.Random() without a seed takes one from the OS (in C, not through os.urandom)
        original_seed(self, rng.getrandbits(64) if a is None else a, version)

    patches: list[tuple[Any, str, Any]] = [
        (random.Random, "seed", seed_random),
        (os, "urandom", randbytes), (uuid, "uuid4", uuid4), (secrets, "token_bytes", token_bytes),
        (secrets, "token_hex", token_hex), (secrets, "token_urlsafe", token_urlsafe),
        (time, "time", wall), (time, "time_ns", wall_ns), (time, "monotonic", mono), (time, "monotonic_ns", mono_ns),
        (time, "perf_counter", mono), (time, "perf_counter_ns", mono_ns),
        (threading.Thread, "start", _no_threads),
        (gc, "freeze", _no_op), (gc, "unfreeze", _no_op),
        # (a run that turned kbroker.log.writeback.bytes on finds it unavailable: no threads;
        # what it learnt ends with the run)
        (file_records, "_writeback_unavailable", False),
    ]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, value in patches:
        setattr(obj, name, value)
    previous_pool = fileio.install({"thread_pool": InlineExecutor})
    gc_was_enabled = gc.isenabled()
    # The cyclic collector is off during the run (what it frees, and when, would depend on the
    # heap before it). No collection first: garbage left from before is not run's business
    # (it stays uncollected until the run's end; a run's own is collected by
    # Simulation._finalize), and a full collection would cost tens of milliseconds per seed (measured ~20 ms, while a seed
    # takes 0.4-2 s of CPU).
    gc.disable()
    try:
        yield rng
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
        fileio.install(previous_pool)
        random.setstate(saved_random)
        if gc_was_enabled:
            gc.enable()
