"""Storage benchmarks: prints numbers, never asserts.

  append    16 KiB batches through Log.append_as_leader, as MB/s and as a ratio to a plain
            os.write loop of the same bytes on the same disk in the same run (goal >= 0.8);
            writing through a mapping of a pre-extended file is measured alongside (the
            reason FileRecords appends with pwrite).
  read      sequential Log.read of 1 MiB from the page cache (goal >= 1 GB/s), as views
            and with the bytes copied once (what sending them costs at least).
  lookup    Log.read at random offsets in logs of 1,000 and 10,000 segments: p50/p99
            (goal p99 <= 100 us, flat when the log grows x10).
  recovery  Log.open after a kill -9 with a flushed log of 1 GB (10 GB with --big) in 64 MiB
            segments and an unflushed tail: time follows the tail, not the log (a scan
            from offset 0 is shown for contrast).

Every figure is the median of --runs runs (>= 5 unless --quick); the append variants are
interleaved run by run. Data goes to a temporary directory under --dir (default: the
system temp dir) and is deleted at the end.

    python bench/storage_bench.py [--quick] [--big] [--runs N] [--dir PATH] [--only SECTION...]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol.client import SYSTEM_TIME  # noqa: E402
from protocol.records import Record, build_batch, iter_batch_headers  # noqa: E402
from storage import Log, LogConfig  # noqa: E402

MB = 1 << 20
RESULTS: list[tuple[str, str, str]] = []  # (section, measure, value)


def report(section: str, measure: str, value: str) -> None:
    RESULTS.append((section, measure, value))
    print(f"  {measure:<46} {value}", flush=True)


def batch_of(size: int) -> bytes:
    """One uncompressed batch of about ``size`` bytes (16 records of random bytes)."""
    per_record = max(1, (size - 61) // 16 - 8)
    return build_batch([Record(timestamp=SYSTEM_TIME.milliseconds(), value=os.urandom(per_record))
                        for _ in range(16)])


def fresh_dir(root: Path, name: str) -> Path:
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


# -- append --------------------------------------------------------------------------------

def append_log(root: Path, data: bytes, total: int) -> float:
    log = Log.open(fresh_dir(root, "append-0"), LogConfig(), time=SYSTEM_TIME)
    buf = bytearray(data)
    n = total // len(data)
    start = time.perf_counter()
    for _ in range(n):
        log.append_as_leader(buf, 0)
    elapsed = time.perf_counter() - start
    log.close()
    shutil.rmtree(root / "append-0")
    return n * len(data) / elapsed


def append_os_write(root: Path, data: bytes, total: int) -> float:
    path = fresh_dir(root, "plain") / "plain.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = total // len(data)
    start = time.perf_counter()
    for _ in range(n):
        os.write(fd, data)
    elapsed = time.perf_counter() - start
    os.close(fd)
    shutil.rmtree(path.parent)
    return n * len(data) / elapsed


def append_mmap(root: Path, data: bytes, total: int) -> float:
    import mmap
    path = fresh_dir(root, "mapped") / "mapped.log"
    n = total // len(data)
    size = len(data)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    os.ftruncate(fd, n * size)
    m = mmap.mmap(fd, n * size)
    for i in range(n):
        m[i * size:(i + 1) * size] = data
    elapsed = time.perf_counter() - start
    m.close()
    os.close(fd)
    shutil.rmtree(path.parent)
    return n * size / elapsed


def bench_append(root: Path, total: int, runs: int) -> None:
    print(f"append: 16 KiB batches, {total // MB} MB per run, {runs} interleaved runs", flush=True)
    data = batch_of(16 * 1024)
    variants = {"Log.append_as_leader": append_log, "os.write loop": append_os_write,
                "write through a mapping": append_mmap}
    speeds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, fn in variants.items():
            gc.collect()
            speeds[name].append(fn(root, data, total))
    med = {name: statistics.median(v) for name, v in speeds.items()}
    for name, value in med.items():
        report("append", f"{name} MB/s", f"{value / MB:8.0f}")
    report("append", "ratio Log / os.write (goal >= 0.8)", f"{med['Log.append_as_leader'] / med['os.write loop']:8.2f}")
    report("append", "ratio mapping / os.write", f"{med['write through a mapping'] / med['os.write loop']:8.2f}")


# -- read ----------------------------------------------------------------------------------

def build_log(path: Path, size: int, batch_size: int = 16 * 1024, **config) -> Log:
    log = Log.open(path, LogConfig(**config), time=SYSTEM_TIME)
    buf = bytearray(batch_of(batch_size))
    for _ in range(size // len(buf)):
        log.append_as_leader(buf, 0)
    return log


def read_all(log: Log, copy: bool) -> int:
    offset, total, end = log.log_start_offset, 0, log.log_end_offset
    while offset < end:
        view = log.read(offset, MB).records
        if copy:
            bytes(view)
        total += len(view)
        last = None
        for _pos, last in iter_batch_headers(view):
            pass
        offset = last.next_offset
        del view
    return total


def bench_read(root: Path, size: int, runs: int) -> None:
    print(f"read: {size // MB} MB log, 1 MiB reads from the page cache, {runs} runs", flush=True)
    log = build_log(fresh_dir(root, "read-0"), size)
    read_all(log, False)  # warm the mappings
    for copy, label in ((False, "Log.read views GB/s (goal >= 1)"), (True, "Log.read + one copy of the bytes GB/s")):
        speeds = []
        for _ in range(runs):
            start = time.perf_counter()
            n = read_all(log, copy)
            speeds.append(n / (time.perf_counter() - start))
        report("read", label, f"{statistics.median(speeds) / 1e9:8.2f}")
    log.close()
    shutil.rmtree(root / "read-0")


# -- lookup --------------------------------------------------------------------------------

def bench_lookup(root: Path, segment_counts: list[int], lookups: int, runs: int) -> None:
    batch_size, per_segment = 1024, 8
    print(f"lookup: random Log.read(offset, 1) in logs of {segment_counts} segments "
          f"({per_segment} 1 KiB batches each), {lookups} lookups x {runs} runs", flush=True)
    p99s = {}
    for count in segment_counts:
        path = fresh_dir(root, f"lookup{count}-0")
        build_start = time.perf_counter()
        log = build_log(path, count * per_segment * batch_size, batch_size=batch_size,
                        segment_bytes=per_segment * (batch_size + 100), index_interval_bytes=2048)
        build_s = time.perf_counter() - build_start
        rng = random.Random(count)
        p50, p99 = [], []
        for _ in range(runs):
            samples = []
            for _ in range(lookups):
                offset = rng.randrange(log.log_end_offset)
                start = time.perf_counter_ns()
                log.read(offset, 1)
                samples.append(time.perf_counter_ns() - start)
            samples.sort()
            p50.append(samples[len(samples) // 2] / 1000)
            p99.append(samples[int(len(samples) * 0.99)] / 1000)
        p99s[count] = statistics.median(p99)
        report("lookup", f"{log.num_segments} segments (built in {build_s:.0f} s) p50 us",
               f"{statistics.median(p50):8.1f}")
        report("lookup", f"{log.num_segments} segments p99 us (goal <= 100)", f"{p99s[count]:8.1f}")
        log.close()
        shutil.rmtree(path)
    if len(p99s) == 2:
        small, big = sorted(p99s)
        report("lookup", f"p99 ratio {big} / {small} segments (flat ~ 1)", f"{p99s[big] / p99s[small]:8.2f}")


# -- recovery ------------------------------------------------------------------------------

def bench_recovery(root: Path, sizes: list[int], tails: list[int], runs: int) -> None:
    print(f"recovery after kill -9: logs of {[s // MB for s in sizes]} MB, unflushed tails of "
          f"{[t // MB for t in tails]} MB, {runs} runs", flush=True)
    for size in sizes:
        need = size + max(tails) + 64 * MB
        free = shutil.disk_usage(root).free
        if need * 1.1 > free:
            print(f"  skipping the {size // MB} MB log: it needs {need // MB} MB, {free // MB} MB are free", flush=True)
            report("recovery", f"{size // MB} MB log", "skipped (disk)")
            continue
        path = fresh_dir(root, f"recover{size // MB}-0")
        # 64 MiB segments: recovery starts at the segment holding the recovery point (as in
        # Kafka), so the segment size bounds how much flushed data is re-read.
        config = LogConfig(segment_bytes=64 * MB)
        log = build_log(path, size, segment_bytes=config.segment_bytes)
        log.flush()
        flushed_leo, flushed_rp = log.log_end_offset, log.recovery_point
        log.close()
        for tail in tails:
            log = Log.open(path, config, time=SYSTEM_TIME, recovery_point=flushed_rp, had_clean_shutdown=False)
            log.truncate_to(flushed_leo)
            buf = bytearray(batch_of(16 * 1024))
            for _ in range(tail // len(buf)):
                log.append_as_leader(buf, 0)
            del log  # no close: the files are as a kill -9 leaves them (the page cache keeps the data)
            gc.collect()
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                recovered = Log.open(path, config, time=SYSTEM_TIME, recovery_point=flushed_rp,
                                     had_clean_shutdown=False)
                times.append(time.perf_counter() - start)
                del recovered
                gc.collect()
            report("recovery", f"{size // MB} MB log, {tail // MB} MB unflushed: s", f"{statistics.median(times):8.3f}")
        start = time.perf_counter()
        Log.open(path, config, time=SYSTEM_TIME, recovery_point=0, had_clean_shutdown=False).close()
        report("recovery", f"{size // MB} MB log, scanned from offset 0: s", f"{time.perf_counter() - start:8.3f}")
        shutil.rmtree(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 runs: a smoke run")
    parser.add_argument("--big", action="store_true", help="also recover a 10 GB log")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--only", nargs="*", choices=["append", "read", "lookup", "recovery"])
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    sections = set(args.only or ["append", "read", "lookup", "recovery"])
    root = Path(tempfile.mkdtemp(prefix="kbroker-storage-bench-", dir=args.dir))
    print(f"data in {root}; {shutil.disk_usage(root).free // MB} MB free", flush=True)
    try:
        if "append" in sections:
            bench_append(root, 32 * MB if args.quick else 256 * MB, runs)
        if "read" in sections:
            bench_read(root, 64 * MB if args.quick else 512 * MB, runs)
        if "lookup" in sections:
            bench_lookup(root, [100, 1000] if args.quick else [1000, 10000], 2000 if args.quick else 20000, runs)
        if "recovery" in sections:
            sizes = [64 * MB] if args.quick else [1024 * MB] + ([10240 * MB] if args.big else [])
            tails = [4 * MB, 16 * MB] if args.quick else [16 * MB, 128 * MB]
            bench_recovery(root, sizes, tails, runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    width = max(len(m) for _, m, _ in RESULTS)
    print("\nsection   " + "measure".ljust(width) + "   median")
    for section, measure, value in RESULTS:
        print(f"{section:<9} {measure.ljust(width)} {value}")


if __name__ == "__main__":
    main()
