#!/usr/bin/env python3
"""kbroker against a peer, same load, alternating runs: A B A B ...

The peer is tansu (the peer broker), or with ``--before PATH`` kbroker itself as another
checkout has it (``git worktree add /tmp/before <commit>``): then "before" is that tree and
"after" this one, both started by this venv's Python, and tansu is not run.

Drives both brokers with the neutral load generator shared/bench/kafka_load.py — 100-byte
records, 148 per batch (~16 KiB), acks=1, 4 partitions, 4 connections, depth 8 — first a
produce run, then a consume run of what was produced (unless ``--no-consume``), with
``--server-pid`` so the tool reports the broker's CPU µs per request. Each round starts both
brokers fresh (kbroker on a new data dir; tansu keeps everything in memory). Prints, per
metric, each side's median and range over the rounds, the ratio of the medians, and the
range of the per-round ratios (each round's B over the same round's A); never asserts.

``--warmup N`` (default 1) runs N rounds of both sides first, printed as ``warm-up`` and left
out of the medians and ratios, which are over the ``--rounds`` measured rounds alone. The
machine warms up, not the broker: on a freshly booted VM (firecracker) the first touch of a
guest memory page costs a host page fault — 14 µs a page the first time, 2.4 µs (the guest's
own zeroing) every time after, on a 6 GiB anonymous mapping — and a produce round writes
~2.5 GB of page cache, 4 pages a request. The first round after a boot took 47 µs of system
time per request against 17 by the fourth (user time 16 against 12), and a second run of
fresh brokers on new data dirs minutes later started at the low figure: no broker warm-up.

    python bench/broker_bench.py [--rounds 5] [--warmup 1] [--duration 8] [--no-tansu | --before PATH]
                                 [--no-consume] [--compression-type gzip]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.launcher import BrokerProcess, free_port, port_open  # noqa: E402

SHARED = REPO.parent / "shared"
LOAD = SHARED / "bench" / "kafka_load.py"
TANSU = SHARED / "tools" / "tansu.sh"

METRICS = [("produce", "records_per_s"), ("produce", "p50_ms"), ("produce", "p99_ms"),
           ("produce", "server_cpu_us_per_request"), ("consume", "records_per_s"),
           ("consume", "server_cpu_us_per_request")]


def load(mode: str, bootstrap: str, pid: int, args, extra=()) -> dict:
    cmd = [sys.executable, str(LOAD), "--mode", mode, "--bootstrap", bootstrap, "--topic", "bench",
           "--server-pid", str(pid), "--uvloop", *extra]
    if mode == "produce":
        cmd += ["--partitions", "4", "--connections", "4", "--depth", "8", "--acks", str(args.acks),
                "--record-size", "100", "--records-per-batch", "148", "--duration", str(args.duration)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration * 6 + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"kafka_load.py {mode} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


def run_kbroker(args, repo: Path = REPO) -> dict:
    root = Path(tempfile.mkdtemp(prefix="kbroker-bench-"))
    overrides = {"log.retention.check.interval.ms": 3600000}
    if args.compression_type:  # the broker-level default every topic gets (a tree before issue 12 ignores it)
        overrides["compression.type"] = args.compression_type
    broker = BrokerProcess(root / "data", port=free_port(), overrides=overrides, repo=repo)
    try:
        broker.start()
        result = {"produce": load("produce", broker.bootstrap, broker.pid, args)}
        if not args.no_consume:
            result["consume"] = load("consume", broker.bootstrap, broker.pid, args)
        return result
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def run_tansu(args) -> dict:
    port = free_port()
    pid = int(subprocess.run([str(TANSU), "start", str(port)], capture_output=True, text=True, check=True).stdout)
    try:
        deadline = time.monotonic() + 10
        while not port_open(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        result = {"produce": load("produce", f"127.0.0.1:{port}", pid, args)}
        if not args.no_consume:
            result["consume"] = load("consume", f"127.0.0.1:{port}", pid, args)
        return result
    finally:
        subprocess.run([str(TANSU), "stop", str(pid)], capture_output=True)


def tree(repo: Path) -> str:
    """``repo`` and the commit it has checked out (with ``+`` when it has local changes)."""
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    return f"{repo} at {head.stdout.strip() or '?'}{'+' if dirty.stdout.strip() else ''}"


def fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.1f}"


def spread(values: list[float]) -> str:
    return f"[{fmt(min(values))}-{fmt(max(values))}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, metavar="N",
                    help="rounds run first and left out of the medians (a fresh VM's first page touches)")
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of produce load per run")
    ap.add_argument("--acks", default="1")
    ap.add_argument("--no-tansu", action="store_true", help="measure kbroker only")
    ap.add_argument("--before", type=Path, metavar="PATH",
                    help="compare with the kbroker of this checkout (before) instead of tansu")
    ap.add_argument("--no-consume", action="store_true", help="produce runs only")
    ap.add_argument("--compression-type", default=None, metavar="CODEC",
                    help="kbroker's broker-level compression.type (uncompressed, gzip, snappy, lz4, zstd, producer): "
                         "the load generator sends uncompressed batches, so anything but producer/uncompressed "
                         "measures the LogValidator's re-compression")
    args = ap.parse_args()
    if not LOAD.exists():
        print(f"the load generator is not at {LOAD}", file=sys.stderr)
        return 2
    if args.before is not None:
        before = args.before.resolve()
        if not (before / "broker" / "__main__.py").exists():
            print(f"{before} is not a kbroker checkout", file=sys.stderr)
            return 2
        runners = {"before": lambda a: run_kbroker(a, before), "after": run_kbroker}
        print(f"before: {tree(before)}\nafter:  {tree(REPO)}", flush=True)
    else:
        runners = {"kbroker": run_kbroker}
        if not args.no_tansu:
            runners["tansu"] = run_tansu
    names = list(runners)
    results: dict[str, list[dict]] = {name: [] for name in runners}
    for r in range(-args.warmup, args.rounds):
        for name, fn in runners.items():
            res = fn(args)
            if r >= 0:
                results[name].append(res)
            p = res["produce"]
            label = f"round {r + 1}" if r >= 0 else f"warm-up {r + args.warmup + 1}"
            line = (f"{label:9s} {name:8s} produce {p['records_per_s']:>10,.0f} rec/s  p50 {p['p50_ms']:6.2f} ms  "
                    f"p99 {p['p99_ms']:6.2f} ms  cpu {p['server_cpu_us_per_request']:7.1f} µs/req  errors {p['errors']}")
            if "consume" in res:
                c = res["consume"]
                line += f" | consume {c['records_per_s']:>12,.0f} rec/s  cpu {c['server_cpu_us_per_request']:8.1f} µs/req"
            print(line, flush=True)
    print()
    codec = f", compression.type={args.compression_type}" if args.compression_type else ""
    print(f"medians [min-max] over {args.rounds} rounds after {args.warmup} warm-up (100-byte records, 148/batch, "
          f"acks={args.acks}, 4 partitions, 4 connections, depth 8{codec})")
    pair = names if len(names) == 2 else []
    if pair and pair[0] == "kbroker":  # the ratio is kbroker over its peer
        pair = pair[::-1]
    header = f"{'':38s}" + "".join(f"{name:>32s}" for name in names)
    if pair:
        header += f"   {pair[1] + '/' + pair[0]:>14s}  per-round ratios"
    print(header)
    for mode, key in METRICS:
        if mode == "consume" and args.no_consume:
            continue
        values = {name: [x[mode][key] for x in res] for name, res in results.items()}
        meds = {name: statistics.median(v) for name, v in values.items()}
        row = f"{mode + ' ' + key:38s}" + "".join(f"{fmt(meds[n]):>11s} {spread(values[n]):>20s}" for n in names)
        if pair and meds[pair[0]]:
            base, other = pair
            ratios = [b / a for a, b in zip(values[base], values[other]) if a]
            row += f"   {meds[other] / meds[base]:14.3f}  [{min(ratios):.3f}-{max(ratios):.3f}]"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
