"""Instructions per iteration of a workload, counted by valgrind's callgrind: a count, not a
time, so the same whatever else the shared machine runs (two runs of the same code differ by a
few tens of instructions per iteration). A bench runs its own script as a child with a hidden
argument naming a side and an iteration count; each side runs twice, with ``low`` and ``low +
n`` iterations, and the difference over ``n`` is one iteration's cost, start-up, warm-up and
shutdown cancelled out.

A broker started in the child runs timers in the background (heartbeats, flush plans) whose
number depends on how long start-up took, which a loaded machine stretches: thousands of
instructions per iteration of noise in the difference. So the child runs its iterations through
``measured(fn, n)``, inside a C function nothing else on these paths calls, and callgrind counts
only what runs inside it (``--toggle-collect``): the iterations alone. That function is libc's
qsort, called through ctypes on a two-element array whose one comparison runs the iterations:
libc keeps its symbols where Debian's python3.11 is stripped (functools.reduce's C function, the
first choice, has no symbol there, and callgrind then counted nothing at all).

    from instructions import per_iteration, measured
    per_iteration([sys.executable, __file__, "--_child", "on"], n=300)  # the child appends the count
    measured(lambda: conn.data_received(frame), count)                  # in the child
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from typing import Callable

COLLECT_IN = "qsort*"  # libc's qsort (and the qsort_r it may call): see above
_COMPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def measured(fn: Callable[[], object], n: int) -> None:
    """Call ``fn`` ``n`` times inside the one C function callgrind counts in (see above); an
    exception ``fn`` raises is raised here (ctypes would print and drop it)."""
    failed: list[BaseException] = []
    ran = False

    def compare(_a: int, _b: int) -> int:
        nonlocal ran
        if not ran:  # two elements: one comparison, but a sort may compare again
            ran = True
            try:
                for _ in range(n):
                    fn()
            except BaseException as e:  # noqa: BLE001 - re-raised below, outside the C frames
                failed.append(e)
        return 0

    pair = (ctypes.c_int * 2)(0, 1)
    ctypes.CDLL(None).qsort(pair, 2, ctypes.sizeof(ctypes.c_int), _COMPARE(compare))
    if failed:
        raise failed[0]
    if not ran:
        raise RuntimeError("qsort never called its comparison")


def available() -> bool:
    return shutil.which("valgrind") is not None


def total(argv: list[str], timeout: float = 3600) -> int:
    """Instructions ``argv`` executes under callgrind inside ``measured`` (PYTHONHASHSEED fixed:
    dictionaries and sets then lay out alike in both runs)."""
    with tempfile.TemporaryDirectory(prefix="kbroker-callgrind-") as tmp:
        out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/callgrind.out",
                              f"--toggle-collect={COLLECT_IN}", *argv],
                             capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONHASHSEED": "0"})
    for line in out.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise RuntimeError(f"callgrind printed no total (exit {out.returncode}):\n{out.stderr[-3000:]}")


def per_iteration(argv: list[str], n: int, low: int = 200) -> float:
    """Instructions of one iteration: runs ``argv + [str(low)]`` and ``argv + [str(low + n)]``."""
    return (total([*argv, str(low + n)]) - total([*argv, str(low)])) / n
