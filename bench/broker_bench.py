#!/usr/bin/env python3
"""kbroker against tansu (the peer broker), same load, alternating runs: A B A B ...

Drives both brokers with the neutral load generator shared/bench/kafka_load.py — 100-byte
records, 148 per batch (~16 KiB), acks=1, 4 partitions, 4 connections, depth 8 — first a
produce run, then a consume run of what was produced, with ``--server-pid`` so the tool
reports the broker's CPU µs per request. Each round starts both brokers fresh (kbroker on a
new data dir; tansu keeps everything in memory). Prints medians over the rounds and the
kbroker / tansu ratios; never asserts.

    python bench/broker_bench.py [--rounds 5] [--duration 8]
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


def run_kbroker(args) -> dict:
    root = Path(tempfile.mkdtemp(prefix="kbroker-bench-"))
    broker = BrokerProcess(root / "data", port=free_port(), overrides={"log.retention.check.interval.ms": 3600000})
    try:
        broker.start()
        return {"produce": load("produce", broker.bootstrap, broker.pid, args),
                "consume": load("consume", broker.bootstrap, broker.pid, args)}
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
        return {"produce": load("produce", f"127.0.0.1:{port}", pid, args),
                "consume": load("consume", f"127.0.0.1:{port}", pid, args)}
    finally:
        subprocess.run([str(TANSU), "stop", str(pid)], capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of produce load per run")
    ap.add_argument("--acks", default="1")
    ap.add_argument("--no-tansu", action="store_true", help="measure kbroker only")
    args = ap.parse_args()
    if not LOAD.exists():
        print(f"the load generator is not at {LOAD}", file=sys.stderr)
        return 2
    runners = {"kbroker": run_kbroker}
    if not args.no_tansu:
        runners["tansu"] = run_tansu
    results: dict[str, list[dict]] = {name: [] for name in runners}
    for r in range(args.rounds):
        for name, fn in runners.items():
            res = fn(args)
            results[name].append(res)
            p, c = res["produce"], res["consume"]
            print(f"round {r + 1} {name:8s} produce {p['records_per_s']:>10,.0f} rec/s  p50 {p['p50_ms']:6.2f} ms  "
                  f"p99 {p['p99_ms']:6.2f} ms  cpu {p['server_cpu_us_per_request']:7.1f} µs/req  errors {p['errors']} | "
                  f"consume {c['records_per_s']:>12,.0f} rec/s  cpu {c['server_cpu_us_per_request']:8.1f} µs/req",
                  flush=True)
    print()
    print(f"medians over {args.rounds} rounds (100-byte records, 148/batch, acks={args.acks}, 4 partitions, "
          f"4 connections, depth 8)")
    header = f"{'':38s}" + "".join(f"{name:>14s}" for name in runners) + ("   kbroker/tansu" if "tansu" in runners else "")
    print(header)
    for mode, key in METRICS:
        meds = {name: statistics.median(x[mode][key] for x in res) for name, res in results.items()}
        row = f"{mode + ' ' + key:38s}" + "".join(f"{meds[n]:>14,.1f}" for n in runners)
        if "tansu" in meds and meds["tansu"]:
            row += f"   {meds['kbroker'] / meds['tansu']:12.2f}"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
