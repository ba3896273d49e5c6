#!/usr/bin/env python3
"""Where a replicated produce's latency tail goes (issue 29): replication_bench's closed loop at
about half load (3 brokers, RF=3, acks=all, min.insync.replicas=2, 2 connections x depth 4, the
end-to-end probe's ~1,000 single-record produces/s beside it unless ``--no-probe``), each broker
run by bench/_diag_broker.py, which records over the measured window (after kafka_load's
warm-up second), per broker:

* the cyclic collector's pauses: collections per second by generation, ms of pause per
  second, the median and longest pause;
* the event loop's lag: how late a 5 ms sleep wakes (p50/p99/max, wake-ups > 1 ms late per
  s), and of that lateness the share its thread spent waiting for a core (schedstat): the
  rest is the loop busy with other callbacks;
* each thread's CPU and run-queue wait (ms per s): the loop's, the flush executor's;
* every log append's pwrite: p50/p99/max, ms per s in it, of which waiting for a core, how
  many took over 1 ms, and when the ones over 5 ms came (s into the window).

A step ``open@RATE`` runs the open loop instead (bench/paced_load.py, as replication_bench's step 2:
RATE produce requests/s on a fixed schedule over 4 connections, latency from each request's
scheduled time; the probe runs beside it too unless ``--no-probe``, and its requests are not in
the CPU per request; the recorders' window starts ~1 s in, about where paced_load's own does,
and ends after its drain): its requests over 5 ms are grouped into episodes (overlapping delays),
and the 12 worst are printed beside what each broker's recorders saw over them (the loop's
latest wake-up and the run-queue wait in it, collections, pwrites over 1 ms), so a tail is
matched to what coincides with it: one broker's loop late while it waited for a core (the run
queue), every broker's late at once with little run-queue wait (their loops busy, or the VM slow
on every core: replication_bench's steadiness check), a collection, a pwrite stall.

Options: ``--perf-sched S`` runs ``perf sched record`` on all cores for S seconds of the window
and gives each broker's scheduling delay per wake-up (``perf sched timehist``: runnable ->
running) p50/p99/max and its sum per s (perf's own cost slows the run: compare its figures with
each other, not with a run without it); ``--trace S`` gives ``perf trace -s``'s system call
summary of the brokers for S seconds (also costly); ``--data-root DIR`` puts the brokers' logs
there (/dev/shm: tmpfs, to set the file system's part of pwrite apart); ``--slice-us N`` asks
the kernel (EEVDF, Linux 6.12+: sched_setattr's sched_runtime) for an N µs slice for each
broker's main thread; ``--before PATH`` runs another checkout's brokers the same way after
this one's, round by round. The load's own p50/p99 (kafka_load.py), CPU µs per request and
run-queue wait per broker come with each run.

    python bench/replication_tail.py [--before PATH] [--rounds 1] [--duration 8] [--steps 2x4]  (e.g. --steps 4x8,2x4,open@4000)
                                     [--broker-config KEY=VALUE] [--after-config KEY=VALUE]  (as replication_bench.py)
                                     [--perf-sched S] [--trace S] [--data-root DIR] [--slice-us N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from controller.launcher import BrokerProcess, free_port  # noqa: E402
from replication_bench import (EndToEndProbe, add_config_options, assign_rf3,  # noqa: E402
                               broker_overrides, cpu_seconds, load, paced, run_queue_wait_seconds, OPEN_CONNECTIONS)

DIAG = Path(__file__).resolve().parent / "_diag_broker.py"


def pct(values: list, q: float):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def sched_delays(data: Path, pids: dict[str, set[int]]) -> dict[str, list[float]]:
    """perf sched timehist's 'sch delay' (ms) of every wake-up of each named group of pids."""
    out = subprocess.run(["perf", "sched", "timehist", "-i", str(data)], capture_output=True, text=True,
                         timeout=600)
    delays: dict[str, list[float]] = {name: [] for name in pids}
    for line in out.stdout.splitlines():
        parts = line.split()
        # time cpu task[tid/pid] wait sch-delay run
        if len(parts) < 6 or "[" not in parts[2]:
            continue
        name = parts[2]
        ids = name.rsplit("[", 1)[1].rstrip("]").split("/")
        try:
            tid = int(ids[0])
            pid = int(ids[1]) if len(ids) > 1 else tid
            delay = float(parts[4])
        except ValueError:
            continue
        for group, members in pids.items():
            if pid in members or tid in members:
                delays[group].append(delay)
    return delays


def set_slice(tid: int, slice_ns: int) -> None:
    """sched_setattr(2) of SCHED_OTHER with sched_runtime = the EEVDF slice wanted (Linux 6.12+)."""
    import ctypes
    attr = struct.pack("IIQiIQQQII", 56, 0, 0, 0, 0, slice_ns, 0, 0, 0, 0)  # struct sched_attr, 56 bytes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(314, tid, ctypes.create_string_buffer(attr, len(attr)), 0) != 0:  # SYS_sched_setattr, x86-64
        raise OSError(ctypes.get_errno(), f"sched_setattr({tid})")


def stall_timeline(slow: dict, diags: dict[int, dict], gap_s: float = 0.002) -> list[dict]:
    """An open-loop step's requests over 5 ms grouped into episodes (a request joins the current
    one if it was scheduled before, or within ``gap_s`` after, the latest answer of those in it:
    overlapping delays, whatever the rate), the 12 worst each beside what each broker's recorders
    saw over it (from its first scheduled send to its last answer): the event loop's latest
    wake-up and of that lateness the time its thread waited for a core, the collections (count,
    ms, and those over 1 ms), the pwrites over 1 ms. Times are s into the load's window (every
    clock here is CLOCK_MONOTONIC)."""
    t0 = slow["window"][0]
    episodes: list[list] = []  # [first scheduled, last answer, worst latency, requests, worst lateness]
    for scheduled, latency, late in sorted(slow["slow"]):
        if episodes and scheduled <= episodes[-1][1] + gap_s:
            e = episodes[-1]
            e[1] = max(e[1], scheduled + latency)
            e[2] = max(e[2], latency)
            e[3] += 1
            e[4] = max(e[4], late)
        else:
            episodes.append([scheduled, scheduled + latency, latency, 1, late])
    out = []
    for start, end, worst, n, late in sorted(episodes, key=lambda e: -e[2])[:12]:
        lo, hi = int(start * 1e9), int(end * 1e9)
        seen = {}

        def over(s0: int, dur: int) -> bool:  # [s0, s0 + dur] meets the episode's span
            return s0 <= hi and s0 + dur >= lo
        for i, d in diags.items():
            lags = [(t, lag, rq) for t, lag, rq in d["lag"] if over(t - lag, lag)]
            worst_lag = max(lags, key=lambda x: x[1], default=None)
            gcs = [(g, dur) for g, s0, dur in d["gc"] if over(s0, dur)]
            seen[i] = {
                "lag_max_ms": round(worst_lag[1] / 1e6, 1) if worst_lag else 0,
                # (schedstat's wait over the whole sleep: at most the lateness counts)
                "lag_runq_ms": round(max(0, min(worst_lag[1], worst_lag[2])) / 1e6, 1) if worst_lag else 0,
                "gc_n": len(gcs), "gc_ms": round(sum(dur for _, dur in gcs) / 1e6, 1),
                "gc_over_1ms": [(g, round(dur / 1e6, 1)) for g, dur in gcs if dur > 1e6],
                "pwrite_ms": [round(dur / 1e6, 1) for s0, dur, _ in d["pwrites"] if dur > 1e6 and over(s0, dur)],
            }
        out.append({"at_s": round(start - t0, 3), "span_ms": round((end - start) * 1e3, 1), "requests": n,
                    "worst_ms": round(worst * 1e3, 1), "late_ms": round(late * 1e3, 1), "brokers": seen})
    return sorted(out, key=lambda e: e["at_s"])


def one_round(args, repo: Path, name: str) -> dict:
    root = Path(tempfile.mkdtemp(prefix="kbroker-rtail-", dir=args.data_root))
    procs = {i: BrokerProcess(root / f"data{i}", port=free_port(), broker_id=i, repo=repo,
                              prefix=[sys.executable, str(DIAG)], overrides=broker_overrides(args, name))
             for i in (1, 2, 3)}
    diag_out = {i: root / f"diag{i}.json" for i in procs}
    try:
        for i, p in procs.items():
            os.environ["KBROKER_DIAG_OUT"] = str(diag_out[i])
            p.start()
        os.environ.pop("KBROKER_DIAG_OUT", None)
        brokers = {i: ("127.0.0.1", p.port) for i, p in procs.items()}
        asyncio.run(assign_rf3(brokers))
        if args.slice_us:
            for p in procs.values():
                set_slice(p.pid, int(args.slice_us * 1000))
        all_bootstrap = ",".join(p.bootstrap for p in procs.values())
        results = {}
        for step, (c, d) in enumerate(args.steps):
            cpu0 = {i: cpu_seconds(p.pid) for i, p in procs.items()}
            rq0 = {i: run_queue_wait_seconds(p.pid) for i, p in procs.items()}
            res: dict = {}
            perf_data = root / f"perf{step}.data"

            def measure() -> None:
                time.sleep(1.0)  # kafka_load's warm-up second
                for p in procs.values():
                    p.signal(signal.SIGUSR1)
                if args.trace:
                    # perf trace's summary: each system call's count and time (min/avg/max) per process
                    time.sleep(max(0.0, (args.duration - args.trace) / 2))
                    out = subprocess.run(["perf", "trace", "-s", "-p", ",".join(str(p.pid) for p in procs.values()),
                                          "--", "sleep", str(args.trace)], capture_output=True, text=True, timeout=120)
                    res["trace"] = [line for line in (out.stdout + out.stderr).splitlines()
                                    if any(w in line for w in ("pwrite", "write", "read", "epoll", "events", "("))]
                if args.perf_sched:
                    time.sleep(max(0.0, (args.duration - args.perf_sched) / 2))
                    subprocess.run(["perf", "sched", "record", "-a", "-o", str(perf_data), "--", "sleep",
                                    str(args.perf_sched)], capture_output=True, timeout=120)
            probe_ctx = EndToEndProbe(all_bootstrap, step) if args.probe else None
            t = threading.Thread(target=measure)
            if probe_ctx:
                probe_ctx.__enter__()
            try:
                t.start()
                if c == "open":  # open loop at d requests/s (replication_bench's step 2)
                    res.update(paced(procs[1].bootstrap, procs[1].pid, args.duration, d, OPEN_CONNECTIONS,
                                     root / f"slow{step}.json"))
                else:
                    res.update(load(procs[1].bootstrap, procs[1].pid, args.duration, c, d))
                t.join()
                for p in procs.values():
                    p.signal(signal.SIGUSR2)
            finally:
                if probe_ctx:
                    probe_ctx.__exit__(None, None, None)
            window = args.duration
            res["cpu_us_per_request_per_broker"] = {
                i: round((cpu_seconds(p.pid) - cpu0[i]) / max(1, res["requests"]) * 1e6, 1) for i, p in procs.items()}
            res["runq_wait_ms_per_s"] = {i: round((run_queue_wait_seconds(p.pid) - rq0[i]) / (window + 1) * 1e3)
                                         for i, p in procs.items()}
            time.sleep(0.5)
            per_broker = {}
            diags = {i: json.loads(diag_out[i].read_text()) for i in procs}  # (read once: the timeline's too)
            for i in procs:
                d_ = diags[i]
                gcs = d_["gc"]
                lags = [lag / 1e6 for _, lag, _ in d_["lag"]]
                late = [(lag / 1e6, rq / 1e6) for _, lag, rq in d_["lag"] if lag > 1e6]
                span = (max(x[0] for x in d_["lag"]) - min(x[0] for x in d_["lag"])) / 1e9 if d_["lag"] else window
                pw = d_["pwrites"]
                per_broker[i] = {
                    "pwrite_per_s": round(len(pw) / span), "pwrite_p50_us": round((pct([x[1] for x in pw], 0.5) or 0) / 1e3),
                    "pwrite_p99_us": round((pct([x[1] for x in pw], 0.99) or 0) / 1e3),
                    "pwrite_max_ms": round(max((x[1] for x in pw), default=0) / 1e6, 2),
                    "pwrite_ms_per_s": round(sum(x[1] for x in pw) / 1e6 / span, 1),
                    # of the pwrite time: waiting for a core (preempted in it), the rest in the kernel's write
                    "pwrite_runq_ms_per_s": round(sum(x[2] for x in pw) / 1e6 / span, 1),
                    "pwrite_over_1ms_per_s": round(sum(1 for x in pw if x[1] > 1e6) / span, 2),
                    # the pwrites over 5 ms: when (s into the window) and how long (ms)
                    "pwrite_stalls": [(round((x[0] - pw[0][0]) / 1e9, 2), round(x[1] / 1e6, 1)) for x in pw if x[1] > 5e6][:20],
                    "gc_per_s": {g: round(sum(1 for x in gcs if x[0] == g) / span, 1) for g in (0, 1, 2)},
                    "gc_ms_per_s": round(sum(x[2] for x in gcs) / 1e6 / span, 2),
                    "gc_max_ms": {g: round(max((x[2] for x in gcs if x[0] == g), default=0) / 1e6, 2) for g in (0, 1, 2)},
                    "gc_p50_ms": {g: round((pct([x[2] for x in gcs if x[0] == g], 0.5) or 0) / 1e6, 3) for g in (0, 1, 2)},
                    "lag_p50_ms": round(pct(lags, 0.5) or 0, 3), "lag_p99_ms": round(pct(lags, 0.99) or 0, 2),
                    "lag_max_ms": round(max(lags, default=0), 2),
                    "lag_over_1ms_per_s": round(len(late) / span, 1),
                    # of the wake-ups > 1 ms late: the share of their lateness spent waiting for a core
                    "late_runq_share": round(sum(min(rq, lag) for lag, rq in late) / max(1e-9, sum(lag for lag, _ in late)), 2),
                    "threads_cpu_ms_per_s": {k: round(v[0] / 1e6 / span) for k, v in d_["threads"].items() if v[0] > 1e6},
                    "threads_runq_ms_per_s": {k: round(v[1] / 1e6 / span) for k, v in d_["threads"].items() if v[1] > 1e6},
                    "gc_threshold": d_["gc_threshold"],
                }
            res["brokers"] = per_broker
            if c == "open":
                res["stalls"] = stall_timeline(json.loads((root / f"slow{step}.json").read_text()), diags)
            if probe_ctx:
                res.update(probe_ctx.summary())
            if args.perf_sched and perf_data.exists():
                groups = {f"broker{i}": {p.pid} for i, p in procs.items()}
                delays = sched_delays(perf_data, groups)
                res["sched_delay"] = {
                    g: {"wakeups_per_s": round(len(v) / args.perf_sched), "p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99),
                        "max_ms": max(v, default=None), "ms_per_s": round(sum(v) / args.perf_sched, 1)}
                    for g, v in delays.items()}
            results[f"open@{d:g}" if c == "open" else f"{c}x{d}"] = res
        return results
    finally:
        for p in procs.values():
            p.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--before", type=Path)
    ap.add_argument("--perf-sched", type=float, default=0.0, metavar="S")
    ap.add_argument("--no-probe", dest="probe", action="store_false")
    ap.add_argument("--steps", default="2x4")
    ap.add_argument("--slice-us", type=float, default=0.0,
                    help="sched_setattr each broker's main thread to this EEVDF slice (µs; 0: the default)")
    ap.add_argument("--data-root", default=None, help="where the brokers' data directories go (default: the temp dir)")
    ap.add_argument("--trace", type=float, default=0.0, metavar="S", help="perf trace -s for S seconds of the window")
    add_config_options(ap)
    args = ap.parse_args()
    args.steps = [("open", float(s[5:])) if s.startswith("open@") else tuple(int(v) for v in s.split("x"))
                  for s in (s.strip() for s in args.steps.split(","))]
    trees = {"after": REPO} if args.before is None else {"before": args.before.resolve(), "after": REPO}
    for r in range(args.rounds):
        for name, repo in trees.items():
            for step, res in one_round(args, repo, name).items():
                keep = {k: res.get(k) for k in ("records_per_s", "p50_ms", "p99_ms", "cpu_us_per_request_per_broker",
                                                "runq_wait_ms_per_s", "ack_p99_ms", "e2e_p99_ms")}
                print(f"round {r + 1} {name} {step}: {json.dumps(keep)}", flush=True)
                for i, b in res["brokers"].items():
                    print(f"  broker {i}: {json.dumps(b)}", flush=True)
                for line in res.get("trace") or []:
                    print(f"  trace: {line}", flush=True)
                for e in res.get("stalls") or []:
                    print(f"  stall: {json.dumps(e)}", flush=True)
                for g, s in (res.get("sched_delay") or {}).items():
                    print(f"  sched {g}: {json.dumps(s)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
