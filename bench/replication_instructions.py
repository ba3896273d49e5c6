#!/usr/bin/env python3
"""Instructions of one replication round trip, leader and follower apart (issue 29): what one
acks=all produce at low rate costs each broker, counted by callgrind (a count, not a time).

Three broker processes (process.roles=broker, RF=3, min.insync.replicas=2), one partition led by
broker 1; one client sends one acks=-1 produce at a time (replication_bench's batch: 148 records
of 100 bytes), the next after the answer: every produce then has its own replication round trip (the followers' parked
fetches wake, their responses, the follower appends, the next fetches move the leader's high
watermark, the DelayedProduce completes), the per-event cost of a produce at half load. One
broker runs under callgrind with collection off (``--instr-atstart=no``); after a warm-up the
harness turns it on (``callgrind_control -i on``) for ``-n`` produces, then dumps: instructions
per produce of the leader (``--side leader``: broker 1) or of one follower (``--side follower``:
broker 2). Their timers (a few per second) are in the count too: at valgrind's pace (~20-50 ms a
round trip) they add little per produce.

``--annotate N`` prints callgrind_annotate's N top functions (inclusive) of each side; callgrind
sees only the interpreter (Debian's python3.11 is stripped), so ``--opcodes`` counts the Python
bytecodes each function runs per produce instead (a trace function, bench/_profiled_broker.py:
not instructions, but where the interpreter's go), ``--profile`` runs cProfile, and
``--syscalls`` counts each system call per produce (strace -c attached for the produces).

    python bench/replication_instructions.py [--before PATH] [-n 200] [--side leader,follower] [--annotate 40]
                                             [--opcodes | --profile | --syscalls] [--records 148] [--save PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import signal
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.launcher import BrokerProcess, free_port  # noqa: E402
from controller.static import PartitionAssignment, StaticController  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.records import Record, build_batch  # noqa: E402

TOPIC = "rinstr"
WARMUP = 60


RECORDS = 148  # per produce: replication_bench's batch (148 records of 100 bytes, ~16 KiB)


async def produce(ctrl: StaticController, n: int, start: int) -> None:
    conn = await ctrl.conn(1)
    for i in range(start, start + n):
        batch = build_batch([Record(timestamp=1_700_000_000_000 + i, key=None, value=bytes([65 + (i + j) % 26]) * 100)
                             for j in range(RECORDS)])
        r = await conn.request(ApiKey.PRODUCE, {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                                                "topic_data": [{"name": TOPIC, "partition_data": [
                                                    {"index": 0, "records": batch}]}]}, 8)
        error = r.responses[0].partition_responses[0].error_code
        if error:
            raise RuntimeError(f"produce {i}: error {error}")


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True, timeout=300)


def count(repo: Path, side: str, n: int, annotate: int, profile: bool = False, syscalls: bool = False,
          save: str = "") -> float:
    root = Path(tempfile.mkdtemp(prefix="kbroker-rinstr-"))
    measured = 1 if side == "leader" else 2
    out = root / "callgrind.out"
    prefix = {measured: ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}.%p"]}
    if profile or syscalls:
        prefix = {}
    if profile:
        prefix = {measured: [sys.executable, str(Path(__file__).resolve().parent / "_profiled_broker.py")]}
        os.environ["KBROKER_PROFILE_OUT"] = str(root / "profile.out")
    procs = {i: BrokerProcess(root / f"data{i}", port=free_port(), broker_id=i, repo=repo,
                              prefix=prefix.get(i), overrides={
                                  "process.roles": "broker", "min.insync.replicas": 2,
                                  "log.retention.check.interval.ms": 3600000}) for i in (1, 2, 3)}
    env_seed = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"
    try:
        for p in procs.values():
            p.start(timeout_s=300)
        brokers = {i: ("127.0.0.1", p.port) for i, p in procs.items()}

        async def run() -> None:
            ctrl = StaticController(brokers)
            try:
                await ctrl.assign([PartitionAssignment(TOPIC, 0, leader=1, leader_epoch=0, isr=[1, 2, 3],
                                                       replicas=[1, 2, 3])])
                await asyncio.sleep(1.0)  # (a harness, not broker logic) the followers' fetchers start
                await produce(ctrl, WARMUP, 0)
                if syscalls:
                    trace = subprocess.Popen(["strace", "-c", "-f", "-o", str(root / "strace.out"), "-p",
                                              str(procs[measured].pid)], stderr=subprocess.DEVNULL)
                    await asyncio.sleep(1.0)  # (a harness) attached
                    await produce(ctrl, n, WARMUP)
                    trace.send_signal(signal.SIGINT)
                    trace.wait(60)
                    print(f"--- {side}: system calls per produce (strace -c -f over {n} produces)")
                    for line in (root / "strace.out").read_text().splitlines()[2:]:
                        f = line.split()
                        if len(f) >= 5 and f[3].isdigit():
                            print(f"{int(f[3]) / n:8.2f}  {f[-1]}")
                    return
                if profile:
                    os.kill(procs[measured].pid, signal.SIGUSR1)
                    await asyncio.sleep(0.2)  # (a harness) the signal handled before the first produce
                    await produce(ctrl, n, WARMUP)
                    os.kill(procs[measured].pid, signal.SIGUSR2)
                    for _ in range(100):
                        await asyncio.sleep(0.1)
                        if (root / "profile.out").exists():
                            break
                    await asyncio.sleep(0.5)
                    return
                control(procs[measured].pid, "-i", "on")
                await produce(ctrl, n, WARMUP)
                control(procs[measured].pid, "-i", "off")
                control(procs[measured].pid, "-d")
            finally:
                await ctrl.close()
        asyncio.run(run())
        if syscalls:
            return 0.0
        if profile and os.environ.get("KBROKER_PROFILE_MODE") == "opcodes":
            rows = json.loads((root / "profile.out").read_text())
            total_ops = sum(r[3] for r in rows)
            print(f"--- {side}: Python bytecodes per produce: {total_ops / n:,.0f}; top {annotate or 40} functions (own)")
            for file, line, name, ops in rows[:annotate or 40]:
                print(f"{ops / n:8.1f}  {Path(file).relative_to(repo) if file.startswith(str(repo)) else file}:{line} {name}")
            return 0.0
        if profile:
            stats = pstats.Stats(str(root / "profile.out"))
            print(f"--- {side}: cProfile over {n} produces (calls and times are totals)")
            stats.sort_stats("tottime").print_stats(annotate or 40)
            stats.sort_stats("cumulative").print_stats(annotate or 40)
            return 0.0
        dumps = sorted(root.glob("callgrind.out*"), key=lambda p: p.stat().st_mtime)
        dump = dumps[-1]
        if save:
            shutil.copy(dump, f"{save}.{side}")
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(dump)], capture_output=True,
                              text=True, timeout=300).stdout
        total = None
        for line in text.splitlines():
            if "PROGRAM TOTALS" in line:
                total = int(line.split()[0].replace(",", ""))
                break
        if total is None:
            raise RuntimeError(f"no totals in {dump}:\n{text[:2000]}")
        if annotate:
            lines = [line for line in text.splitlines() if line.strip()]
            start = next(i for i, line in enumerate(lines) if "file:function" in line)
            print(f"--- {side}: top {annotate} inclusive (instructions per produce)")
            for line in lines[start + 1:start + 1 + annotate]:
                ir, _, rest = line.strip().partition(" ")
                try:
                    per = int(ir.replace(",", "")) / n
                except ValueError:
                    continue
                print(f"{per:12,.0f}  {rest.strip()[:150]}")
        return total / n
    finally:
        if env_seed is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = env_seed
        for p in procs.values():
            p.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, metavar="PATH", help="also count the brokers of this checkout")
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--side", default="leader,follower")
    ap.add_argument("--annotate", type=int, default=0)
    ap.add_argument("--profile", action="store_true",
                    help="cProfile instead of callgrind (bench/_profiled_broker.py): the Python functions")
    ap.add_argument("--syscalls", action="store_true", help="strace -c on the broker instead of callgrind")
    ap.add_argument("--records", type=int, default=RECORDS, help="records per produce (100 bytes each)")
    ap.add_argument("--save", metavar="PATH", default="", help="keep each side's callgrind dump as PATH.SIDE")
    ap.add_argument("--opcodes", action="store_true",
                    help="with --profile: bytecodes run per function (a trace function) instead of cProfile")
    args = ap.parse_args()
    globals()["RECORDS"] = args.records
    if args.opcodes:
        args.profile = True
        os.environ["KBROKER_PROFILE_MODE"] = "opcodes"
    if shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        return 2
    trees = {"after": REPO} if args.before is None else {"before": args.before.resolve(), "after": REPO}
    counts: dict[tuple[str, str], float] = {}
    for side in args.side.split(","):
        for name, tree in trees.items():
            rev = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h"], capture_output=True, text=True)
            t0 = time.monotonic()
            counts[name, side] = count(tree, side, args.n, args.annotate, args.profile, args.syscalls,
                                       args.save)
            if args.profile or args.syscalls:
                continue  # printed their own figures: no instruction count
            print(f"{side:8s} {name:7s} {tree} ({rev.stdout.strip()}): {counts[name, side]:,.0f} instructions per "
                  f"acks=all produce ({time.monotonic() - t0:.0f} s)", flush=True)
        if len(trees) == 2 and not (args.profile or args.syscalls):
            print(f"{side:8s} after/before {counts['after', side] / counts['before', side]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
