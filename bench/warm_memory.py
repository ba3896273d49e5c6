#!/usr/bin/env python3
"""Touch most of the machine's free memory once, before benchmarking a freshly booted VM.

On the VMs this project is measured on, the first touch of a guest page costs a host page fault
(measured: about 10-14 µs a page the first time, 2.2 µs after, also in a later process once the
memory was freed). A broker writing ~2.5 GB of page cache per produce round pays that on its first
rounds: broker_bench read 47.7 µs of CPU per request in the first minutes after boot against 20.0
an hour later. This maps anonymous memory, writes a byte per page and exits; where the kernel
keeps the pages backed after they are freed, later page cache and heap allocations start warm.
Where it reports free pages to the host (free page reporting: /sys/module/page_reporting's
reported_kib grows), the host takes freed memory back within seconds, and only what stays in use
keeps warm: on such a VM (2026-12-01) the first ~6 GiB touched cost ~3 µs a page and the rest ~9,
however often this ran before (bench/replication_bench.py prints what each round lost so).

    python bench/warm_memory.py [--gib N]   # default: free memory less 2 GiB

It prints the time per page, so a second run shows whether the machine was already warm (a few µs).
It takes about 10 s per GiB on a cold VM, at the lowest CPU priority.
"""

from __future__ import annotations

import argparse
import mmap
import os
import time

PAGE = mmap.PAGESIZE


def free_gib() -> int:
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) for line in f}
    return max(0, info["MemAvailable"] // (1024 * 1024) - 2)


def touch(gib: int) -> float:
    """Write one byte in each page of ``gib`` GiB; seconds per page. Every GiB stays mapped until
    the end: a GiB freed before the next is mapped would hand the same pages back."""
    maps = []
    one = b"\1"
    start = time.perf_counter()
    for _ in range(gib):
        m = mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        for off in range(0, 1 << 30, PAGE):
            m[off:off + 1] = one
        maps.append(m)
    seconds = time.perf_counter() - start
    for m in maps:
        m.close()
    return seconds / max(1, gib * ((1 << 30) // PAGE))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=int, default=None, help="GiB to touch (default: available less 2 GiB)")
    args = ap.parse_args()
    gib = free_gib() if args.gib is None else args.gib
    os.nice(19)
    per_page = touch(gib)
    print(f"touched {gib} GiB: {per_page * 1e6:.2f} µs a page (a warm VM: ~2-3 µs, Python's loop included)")


if __name__ == "__main__":
    main()
