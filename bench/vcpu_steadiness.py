#!/usr/bin/env python3
"""How steady this machine's cores are, with nothing of ours running: one bare Python loop per
core, each timing fixed chunks of work (~1 ms), for a few seconds.

Prints, per core, the median chunk time, and the share of 100 ms windows in which a core's
chunks ran at least 1.4x slower than its own median (``slow``), and the windows in which every
core was slow at once (``all slow``: the machine slowed down as a whole, e.g. the host running
something else on the same physical cores: a VM's steal time does not show it here).

Why a replication bench cares (issue 29): its closed-loop p99 at half load is made of
cluster-wide stalls, 20-40 ms episodes in which every partition's latency rises together while
the brokers' CPU stays the same and their throughput halves; this loop, alone on an idle machine,
showed the same windows (1.4-2.8x slower, on both cores at once, 1-7 windows in 8 s). A round
measured while the machine has many of them has a worse tail whatever the broker does:
``replication_bench.py`` runs this before each round and prints it beside the round.

    python bench/vcpu_steadiness.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time

WINDOW_S = 0.1
SLOW = 1.4  # a window is slow when its median chunk took at least this many times the core's median


def _chunk() -> int:
    s = 0
    for i in range(20_000):
        s += i
    return s


def _loop(seconds: float, out) -> None:
    t0 = time.perf_counter()
    rows = []
    while True:
        a = time.perf_counter()
        if a - t0 >= seconds:
            break
        _chunk()
        rows.append((a - t0, time.perf_counter() - a))
    out.send(rows)
    out.close()


def measure(seconds: float = 3.0, cores: int | None = None) -> dict:
    """Runs one loop per core (default: os.cpu_count()) for ``seconds``; returns the figures."""
    cores = cores or os.cpu_count() or 1
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for _ in range(cores):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_loop, args=(seconds, send))
        p.start()
        pipes.append(recv)
        procs.append(p)
    results = [r.recv() for r in pipes]
    for p in procs:
        p.join()
    windows = int(seconds / WINDOW_S)
    slow_sets = []
    medians = []
    for rows in results:
        median = statistics.median(d for _, d in rows)
        medians.append(median)
        by_window: dict[int, list[float]] = {}
        for at, d in rows:
            by_window.setdefault(int(at / WINDOW_S), []).append(d)
        slow_sets.append({w: statistics.median(ds) / median for w, ds in by_window.items()
                          if w < windows and statistics.median(ds) >= SLOW * median})
    all_slow = set.intersection(*(set(s) for s in slow_sets)) if slow_sets else set()
    worst = max((max(s.values()) for s in slow_sets if s), default=1.0)
    return {
        "seconds": seconds,
        "cores": cores,
        "chunk_median_ms": [round(m * 1e3, 3) for m in medians],
        "slow_window_share": [round(len(s) / windows, 3) for s in slow_sets],
        "all_slow_window_share": round(len(all_slow) / windows, 3),
        "worst_window_slowdown": round(worst, 2),
    }


def line(m: dict) -> str:
    return (f"machine steadiness ({m['seconds']:.0f} s, a bare loop per core): 100 ms windows >= {SLOW}x slower "
            f"{'/'.join(f'{s:.0%}' for s in m['slow_window_share'])} per core, {m['all_slow_window_share']:.0%} on all "
            f"cores at once, worst {m['worst_window_slowdown']}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json", action="store_true", help="one JSON line instead of the sentence")
    args = ap.parse_args()
    m = measure(args.seconds)
    print(json.dumps(m) if args.json else line(m))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
