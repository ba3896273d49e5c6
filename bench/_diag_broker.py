"""Runs ``python -m ...`` (the rest of the command line) with two cheap recorders toggled by
signals, for bench/replication_tail.py: SIGUSR1 starts them (and clears what they had),
SIGUSR2 writes what they saw as JSON to $KBROKER_DIAG_OUT.

* the cyclic collector's pauses (``gc.callbacks``): each collection's generation, start
  (monotonic ns) and duration;
* the event loop's lag: a task sleeping 5 ms at a time (``asyncio.sleep``) records how late
  each wake-up came (the loop busy with other callbacks, or the process waiting for a core),
  with its monotonic ns and how long the loop's thread waited for a core meanwhile
  (/proc/self/task/TID/schedstat): 200 extra wake-ups a second, cheap beside a broker's
  thousands;
* each thread's CPU and run-queue wait over the window (the flush thread beside the loop's);
* every log append's ``pwrite`` (storage.fileio.pwrite, swapped): its duration and the
  calling thread's run-queue wait meanwhile (a stall in the kernel, or waiting for a core).

    python bench/_diag_broker.py [PYTHON] -m broker serve ...   (PYTHON: ignored, a launcher's prefix)
"""

import asyncio
import gc
import json
import os
import signal
import threading
import time

import uvloop
from _wrapper import checkout_first, run_module_from_argv  # (bench/, the script's directory, is on sys.path)

checkout_first()  # (before anything of the project is imported)

PERIOD_S = 0.005
recording = False
gc_pauses: list[tuple[int, int, int]] = []  # (generation, start ns, duration ns)
lags: list[tuple[int, int, int]] = []  # (wake-up ns, lateness ns, ns waiting for a core meanwhile)
_gc_start = 0


def _gc(phase: str, info: dict) -> None:
    global _gc_start
    if phase == "start":
        _gc_start = time.monotonic_ns()
    elif recording:
        gc_pauses.append((info["generation"], _gc_start, time.monotonic_ns() - _gc_start))


def _run_queue_ns(fd: int) -> int:
    """This thread's time runnable but not running so far (schedstat's second field)."""
    return int(os.pread(fd, 200, 0).split()[1])


async def _lag() -> None:
    fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
    try:
        while True:
            due = time.monotonic_ns() + int(PERIOD_S * 1e9)
            waited = _run_queue_ns(fd)
            await asyncio.sleep(PERIOD_S)
            now = time.monotonic_ns()
            if recording:
                lags.append((now, now - due, _run_queue_ns(fd) - waited))
    finally:
        os.close(fd)


def _threads() -> dict[str, list[int]]:
    """Per thread (name [tid]): [CPU ns, run-queue wait ns] so far."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait = f.read().split()[:2]
        except OSError:
            continue
        out[f"{name} [{tid}]"] = [int(run), int(wait)]
    return out


threads_at_start: dict[str, list[int]] = {}


pwrites: list[tuple[int, int, int]] = []  # (start ns, duration ns, run-queue wait ns meanwhile)


def _install_pwrite() -> None:
    from storage import fileio
    real = fileio.pwrite
    fds: dict[int, int] = {}

    def pwrite(fd, data, position):
        if not recording:
            return real(fd, data, position)
        tid = threading.get_native_id()
        sfd = fds.get(tid)
        if sfd is None:
            sfd = fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
        waited = _run_queue_ns(sfd)
        start = time.monotonic_ns()
        try:
            return real(fd, data, position)
        finally:
            pwrites.append((start, time.monotonic_ns() - start, _run_queue_ns(sfd) - waited))
    fileio.pwrite = pwrite


def _start(*_) -> None:
    global recording, threads_at_start
    threads_at_start = _threads()
    gc_pauses.clear()
    lags.clear()
    pwrites.clear()
    recording = True


def _stop(*_) -> None:
    global recording
    recording = False
    with open(os.environ["KBROKER_DIAG_OUT"], "w") as f:
        now = _threads()
        threads = {k: [v[0] - threads_at_start.get(k, [0, 0])[0], v[1] - threads_at_start.get(k, [0, 0])[1]]
                   for k, v in now.items()}
        json.dump({"pwrites": pwrites, "threads": threads, "gc": gc_pauses, "lag": lags, "gc_threshold": gc.get_threshold(),
                   "gc_counts": gc.get_count(), "gc_stats": gc.get_stats()}, f)


_run = uvloop.run


def _wrapped_run(main, **kw):
    async def with_lag():
        task = asyncio.ensure_future(_lag())
        try:
            return await main
        finally:
            task.cancel()
    return _run(with_lag(), **kw)


uvloop.run = _wrapped_run
_install_pwrite()
gc.callbacks.append(_gc)
signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
run_module_from_argv()
