#!/usr/bin/env python3
"""The load generator's numbers (issue 14). Prints medians, ranges and ratios; asserts nothing.

1. replay vs kafka_load.py: the same workload (100-byte records, ~16 KiB batches, 3 partitions,
   one connection, 5 requests in flight, acks=1) against the same kbroker broker, alternating
   rounds. Replay throughput is records / the send phase of the Spark task (frames prepared before
   it); Spark's own overhead — session start-up, and the job's wall time beyond the send phase —
   is reported separately.
2. loadgen alone (engine.py in this process, no Spark) against frame_server.py, a sink that only
   frames: records per CPU-second of the load generator, against the records per broker
   CPU-second kafka_load.py measured on one kbroker broker in part 1 (goal: ≥ 3x).
3. replay x1, x5, x20 against three brokers (LocalCluster), acks=all, RF=3, speed max:
   throughput and publish p99 against the scale; the curve goes into a report
   (OUT/scale/report.html, scale.png).
4. the user's replay: an OMB-style recording (2 producers, --recorded-rate records/s, 20 s,
   1 KiB records) at its recorded pace, --scale 1, 5, 20 on local[2], against frame_server.py:
   the publish rate as a fraction of scale x the recorded rate (goal >= 0.9 up to the machine's
   limit), and of min(that, the limit): the same replay unpaced, measured in the same round
   (records/s, MB/s, the CPU of the replay tasks, frame_server, the JVM and the machine).

    python bench/loadgen_bench.py [--rounds 3] [--duration 5] [--out bench-loadgen] [--parts 1,2,3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SHARED = REPO.parent / "shared" if (REPO.parent / "shared").is_dir() else Path("/work/shared")
KAFKA_LOAD = SHARED / "bench" / "kafka_load.py"
FRAME_SERVER = SHARED / "bench" / "frame_server.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"median {statistics.median(values):,.0f} (range {min(values):,.0f} .. {max(values):,.0f}, n={len(values)})"


def spread2(values: list[float]) -> str:
    """The median and range of ratios, two decimals."""
    if not values:
        return "n/a"
    return f"median {statistics.median(values):.2f} (range {min(values):.2f} .. {max(values):.2f})"


def synth(directory: Path, records: int, partitions: int = 3, producers: int = 1, name: str = "bench") -> Path:
    from loadgen.synth import synthesize

    workload = directory / f"{name}.yaml"
    workload.write_text(f"name: {name}\ntopics: 1\npartitionsPerTopic: {partitions}\nmessageSize: 100\n"
                        f"producersPerTopic: {producers}\nproducerRate: 0\nbatchSize: 16384\nacks: 1\n")
    synthesize(workload, directory / name, max_records=records, topic_prefix=name)
    return directory / name


def spark_session(master: str = "local[2]"):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from loadgen.replay import configured

    t0 = time.monotonic()
    spark = configured(SparkSession.builder.master(master).appName("loadgen-bench")
                       .config("spark.ui.enabled", "false")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, time.monotonic() - t0


def replay_once(spark, recording: Path, bootstrap: str, topic_to: str, extra: list[str]) -> dict:
    from loadgen import replay

    args = replay.parse_args(["--recording", str(recording), "--bootstrap", bootstrap, "--speed", "max",
                              "--topic-map", f"{recording.name}-0000={topic_to}", "--no-progress", *extra])
    t0 = time.monotonic()
    raw = replay.run_replay(spark, args)
    raw["run"]["job_wall_s"] = time.monotonic() - t0
    return raw


def part1(args, work: Path) -> dict:
    from controller.launcher import BrokerProcess

    print("== 1. replay (Spark, local[2]) vs kafka_load.py, one kbroker broker, acks=1, depth 5", flush=True)
    broker = BrokerProcess(work / "broker1").start()
    spark, startup = spark_session()
    print(f"Spark session start-up: {startup:.1f} s", flush=True)
    peer, ours, overhead, per_cpu = [], [], [], []
    try:
        for r in range(args.rounds):
            topic = f"peer-{r}"
            out = subprocess.run([sys.executable, str(KAFKA_LOAD), "--bootstrap", broker.bootstrap, "--topic", topic,
                                  "--partitions", "3", "--record-size", "100", "--batch-bytes", "16384", "--acks", "1",
                                  "--connections", "1", "--depth", "5", "--duration", str(args.duration),
                                  "--warmup", "0.5", "--server-pid", str(broker.pid), "--uvloop"],
                                 capture_output=True, timeout=300)
            peer_result = json.loads(out.stdout.decode().strip().splitlines()[-1])
            peer.append(peer_result["records_per_s"])
            if peer_result.get("records_per_server_cpu_s"):
                per_cpu.append(peer_result["records_per_server_cpu_s"])
            # The same number of records kafka_load.py sent in its window, replayed back to back.
            recording = synth(work, max(10_000, int(peer_result["records_per_s"] * args.duration)), name=f"rec{r}")
            raw = replay_once(spark, recording, broker.bootstrap, f"ours-{r}",
                              ["--depth", "5", "--acks", "1", "--consumers", "0", "--no-report"])
            send = raw["run"]["send_elapsed_s"]
            ours.append(raw["totals"]["records"] / max(send, 1e-9))
            overhead.append(raw["run"]["job_wall_s"] - send)
            print(f"  round {r}: kafka_load {peer[-1]:,.0f} rec/s, replay {ours[-1]:,.0f} rec/s "
                  f"(send {send:.2f} s of a {raw['run']['job_wall_s']:.1f} s job, errors {raw['totals']['errors']})",
                  flush=True)
    finally:
        spark.stop()
        broker.kill()
    ratio = statistics.median(ours) / statistics.median(peer)
    ratios = [o / p for o, p in zip(ours, peer)]
    print(f"kafka_load.py records/s: {spread(peer)}")
    print(f"replay records/s:       {spread(ours)}")
    print(f"ratio replay/kafka_load: {ratio:.2f} (per-round {min(ratios):.2f} .. {max(ratios):.2f}; goal >= 0.9)")
    print(f"Spark overhead per replay job beyond the send phase: {spread(overhead)} s; session start-up {startup:.1f} s")
    return {"peer": peer, "ours": ours, "ratio": ratio, "overhead_s": overhead, "startup_s": startup,
            "broker_records_per_cpu_s": statistics.median(per_cpu) if per_cpu else None}


def part2(args, work: Path, broker_per_cpu: float | None) -> dict:
    from loadgen import engine
    from loadgen.recording import read_all

    print("== 2. loadgen alone (engine.py, no Spark) against frame_server.py", flush=True)
    recording = synth(work, 200_000, name="sink")  # sent 10 times over: 2,000,000 records per round
    rows = [(r["send_time_us"], r["api_version"], r["frame"]) for r in read_all(recording).to_pylist()] * 10
    from tests.support import free_port, port_open, wait_until

    results = []
    for r in range(args.rounds):
        port = free_port()
        server = subprocess.Popen([sys.executable, str(FRAME_SERVER), "--port", str(port), "--uvloop",
                                   "--duration", "120"], stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: port_open(port), 30)
            params = engine.Params(bootstrap=f"127.0.0.1:{port}", depth=8, raw=True, stamp_timestamps=False,
                                   job_start=time.time())
            stats = engine.run_producer(params, rows, 0)
            totals = stats["totals"]
            cpu = totals["send_cpu_s"]  # the send phase only: frames were prepared before it
            wall = totals["send_end_max"] - totals["send_start_min"]
            results.append((totals["records_acked"] / max(cpu, 1e-9), totals["records_acked"] / max(wall, 1e-9)))
            print(f"  round {r}: {results[-1][0]:,.0f} records per CPU-second, {results[-1][1]:,.0f} records/s wall "
                  f"(errors {totals['errors']})", flush=True)
        finally:
            server.kill()
            server.wait()
    per_cpu = [a for a, _ in results]
    print(f"loadgen records per CPU-second: {spread(per_cpu)}")
    if broker_per_cpu:
        print(f"one kbroker broker takes {broker_per_cpu:,.0f} records per CPU-second (kafka_load.py, part 1): "
              f"ratio {statistics.median(per_cpu) / broker_per_cpu:.1f}x (goal >= 3x)")
    return {"per_cpu": per_cpu, "wall": [b for _, b in results]}


def part3(args, work: Path, out: Path) -> dict:
    from controller.launcher import LocalCluster
    from loadgen import report

    print("== 3. replay x1, x5, x20 against three brokers, acks=all, RF=3, speed max, local[2]", flush=True)
    cluster = LocalCluster(work / "cluster", 3).start()
    spark, _startup = spark_session()
    recording = synth(work, 20_000, producers=2, name="scale")
    points = []
    try:
        for scale in (1, 5, 20):
            raw = replay_once(spark, recording, cluster.bootstrap, f"scale-{scale}",
                              ["--scale", str(scale), "--acks", "all", "--replication-factor", "3", "--consumers", "0"])
            result = report.build_result(raw)
            rate = raw["totals"]["records"] / max(raw["run"]["send_elapsed_s"], 1e-9)
            points.append((scale, rate, result["aggregatedPublishLatency99pct"]))
            print(f"  x{scale}: {raw['totals']['records']:,} records, {rate:,.0f} records/s over the send phase, "
                  f"publish p99 {points[-1][2]:.1f} ms, errors {raw['totals']['errors']}", flush=True)
            last = raw
    finally:
        spark.stop()
        cluster.kill()
    png = report.scale_plot(points)
    written = report.write(last, out / "scale", extra_plots={"scale": png})
    print(f"report with the scale curve: {written['html']}")
    return {"points": points}


def process_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds of this process's descendants, by pid: (kind, seconds); kind is "python" for
    Spark's Python workers (pyspark.daemon and its forks), "jvm" for the rest of Spark."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out: dict[int, tuple[str, float]] = {}
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            exe = Path(cmd.split(" ", 1)[0]).name  # the JVM's class path names pyspark too: go by the program
            out[pid] = ("jvm" if exe == "java" else "python" if "pyspark" in cmd else "other", cpu_seconds(pid))
        except (OSError, IndexError, ValueError):
            continue
    return out


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine (/proc/stat), all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))


REPLAY_BOUND_S = 300.0  # part 4: how much longer than its recording one replay (a Spark job) may take


def frame_server_seconds(rounds: int, scales: list[int], recording_s: float) -> float:
    """How long part 4's frame_server lives: every round replays every scale twice (paced,
    then unpaced), each replay taking up to the recording's length plus REPLAY_BOUND_S; a
    fixed duration stopped the sink part way through a long run (3 rounds x 3 scales)."""
    return 60.0 + rounds * len(scales) * 2 * (recording_s + REPLAY_BOUND_S)


def part4(args, work: Path) -> dict:
    """The user's replay (issue 29): an OMB-style recording (2 producers, RATE records/s, 20 s),
    replayed at its recorded pace with --scale 1, 5, 20 on local[2] against frame_server.py (a
    sink that is not the bottleneck): the publish rate against scale x the recorded rate, and
    against the machine's limit, measured in the same run: the same recording, the same scale
    (tasks, slots, connections) and the same frame_server, replayed unpaced (--speed max)."""
    from loadgen.synth import synthesize
    from tests.support import free_port, port_open, wait_until

    rate, seconds = args.recorded_rate, 20
    print(f"== 4. replay of a {seconds} s recording (2 producers, {rate:,} records/s) at its recorded pace, "
          "x1, x5, x20 on local[2], against frame_server.py; the limit: the same replay unpaced", flush=True)
    workload = work / "omb.yaml"
    workload.write_text(f"name: omb\ntopics: 1\npartitionsPerTopic: 4\nmessageSize: 1024\nproducersPerTopic: 2\n"
                        f"producerRate: {rate}\nbatchSize: 16384\nacks: 1\n")
    recording = work / "omb"
    synthesize(workload, recording, duration_s=seconds, topic_prefix="omb")
    port = free_port()
    points = []
    server: subprocess.Popen | None = None

    samples: list[tuple[float, float, float, float]] = []  # (time.time(), machine busy, total, frame_server CPU)
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.1):
            try:
                samples.append((time.time(), *machine_busy(), cpu_seconds(server.pid)))
            except OSError:
                return

    def over(t0: float, t1: float) -> tuple[float, float]:
        """Cores used by the machine (all processes) and by frame_server between two wall times."""
        # the samples bracketing the interval (every 0.1 s): the last before it, the first after it
        before = [s for s in samples if s[0] <= t0]
        after = [s for s in samples if s[0] >= t1]
        if not before or not after:
            return 0.0, 0.0
        a, b = before[-1], after[0]
        cores = os.cpu_count() or 1
        return (b[1] - a[1]) / max(b[2] - a[2], 1e-9) * cores, (b[3] - a[3]) / max(b[0] - a[0], 1e-9)

    def once(scale: int, speed: str) -> dict:
        before = process_cpu()
        load = os.getloadavg()[0]
        raw = replay_once(spark, recording, f"127.0.0.1:{port}", "omb",
                          ["--scale", str(scale), "--speed", speed, "--raw", "--consumers", "0", "--no-report"])
        after = process_cpu()
        t, run = raw["totals"], raw["run"]
        send = run["send_elapsed_s"]
        job = raw["run"]["job_wall_s"]
        jvm = sum(c - before.get(pid, (k, 0.0))[1] for pid, (k, c) in after.items() if k == "jvm")
        time.sleep(0.2)  # one more sample after the send phase
        machine, served = over(t.get("send_start_min", 0.0), t.get("send_end_max", 0.0))
        from loadgen import hist
        late = raw["hists"].get("delay") or {}
        return {"scale": scale, "speed": speed, "records": t["records"], "errors": t["errors"], "send_s": send,
                "rate": t["records"] / max(send, 1e-9), "mb_s": t["bytes"] / max(send, 1e-9) / 1e6,
                "tasks": run["tasks"], "slots": run["slots"], "job_s": job, "load": load,
                # CPU in cores (CPU seconds / wall seconds) over the send phase: the busiest replay
                # task's own event loop, all replay tasks together, frame_server, and the whole
                # machine (every process, other users' too); the JVM over the whole job
                "task_loop": t.get("task_cpu_s_max", 0.0) / max(t.get("task_send_s_max", send), 1e-9),
                "workers": t.get("send_cpu_s", 0.0) / max(send, 1e-9), "server": served,
                "jvm": jvm / max(job, 1e-9), "machine": machine,
                "late_p50_ms": (hist.percentile(late, 0.5) or 0) / 1000, "late_p99_ms": (hist.percentile(late, 0.99) or 0) / 1000,
                "start_skew": t.get("task_start_max", t.get("send_start_min", 0)) - t.get("send_start_min", 0)}

    def saturates(m: dict) -> str:
        found = [name for name, used, cap in (("a replay task's event loop", m["task_loop"], 1.0),
                                               ("frame_server (one event loop)", m["server"], 1.0),
                                               ("the machine's 2 cores", m["machine"], os.cpu_count() or 2))
                 if used >= 0.85 * cap]
        return ", ".join(found) or "nothing near 100 % (latency-bound: depth x round trip)"

    sampler = threading.Thread(target=sample, daemon=True)
    spark, _startup = spark_session()
    try:
        # (it stops by itself, a bound on a run left behind, after every replay had its time)
        server = subprocess.Popen([sys.executable, str(FRAME_SERVER), "--port", str(port), "--uvloop", "--duration",
                                   str(frame_server_seconds(args.rounds, args.scales, seconds))],
                                  stderr=subprocess.DEVNULL)
        wait_until(lambda: port_open(port), 30)
        sampler.start()
        for r, scale in ((r, scale) for r in range(args.rounds) for scale in args.scales):
            want = rate * scale
            paced = once(scale, "1")
            limit = once(scale, "max")
            cap = min(want, limit["rate"])
            points.append({"round": r, "scale": scale, "asked": want, "paced": paced, "limit": limit})
            print(f"  round {r} x{scale}: {paced['records']:,} records in {paced['send_s']:.1f} s: "
                  f"{paced['rate']:,.0f} records/s = "
                  f"{paced['rate'] / want:.2f} of the asked {want:,}, {paced['rate'] / cap:.2f} of min(asked, limit) "
                  f"(tasks {paced['tasks']} on {paced['slots']} slots, task start skew {paced['start_skew']:.2f} s, "
                  f"errors {paced['errors']}, load {paced['load']:.1f}; frames sent late by p50 {paced['late_p50_ms']:.1f} ms, "
                  f"p99 {paced['late_p99_ms']:.1f} ms)", flush=True)
            print(f"       CPU paced: busiest task loop {paced['task_loop']:.2f}, replay tasks {paced['workers']:.2f}, "
                  f"frame_server {paced['server']:.2f}, JVM {paced['jvm']:.2f}, machine {paced['machine']:.2f} cores",
                  flush=True)
            print(f"    limit x{scale} (same replay, --speed max): {limit['rate']:,.0f} records/s, {limit['mb_s']:,.0f} MB/s "
                  f"({limit['records']:,} records in {limit['send_s']:.1f} s, start skew {limit['start_skew']:.2f} s, "
                  f"errors {limit['errors']}, load {limit['load']:.1f}); CPU: busiest task loop {limit['task_loop']:.2f}, "
                  f"replay tasks {limit['workers']:.2f}, frame_server {limit['server']:.2f}, JVM {limit['jvm']:.2f}, "
                  f"machine {limit['machine']:.2f} cores; saturated: {saturates(limit)}", flush=True)
        for scale in args.scales:
            runs = [pt for pt in points if pt["scale"] == scale]
            asked = rate * scale
            print(f"x{scale} over {len(runs)} round(s): paced {spread([pt['paced']['rate'] for pt in runs])} records/s; "
                  f"of the asked {asked:,}: {spread2([pt['paced']['rate'] / asked for pt in runs])}; "
                  f"of min(asked, limit): {spread2([pt['paced']['rate'] / min(asked, pt['limit']['rate']) for pt in runs])}; "
                  f"limit {spread([pt['limit']['rate'] for pt in runs])} records/s, "
                  f"{spread([pt['limit']['mb_s'] for pt in runs])} MB/s", flush=True)
    finally:
        sampling.set()
        if server is not None:
            server.kill()
            server.wait()
        spark.stop()
    return {"points": points}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=5.0, help="kafka_load.py's measured seconds per round")
    p.add_argument("--out", default="bench-loadgen")
    p.add_argument("--parts", default="1,2,3,4")
    p.add_argument("--recorded-rate", type=int, default=5000, help="part 4: the recording's records/s (default 5000)")
    p.add_argument("--scales", type=lambda v: [int(x) for x in v.split(",")], default=[1, 5, 20],
                   help="part 4: the scales replayed (default 1,5,20)")
    args = p.parse_args()
    parts = {int(x) for x in args.parts.split(",")}
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="loadgen-bench-"))
    print(f"load average at start: {os.getloadavg()}", flush=True)
    summary: dict = {}
    try:
        if 1 in parts:
            summary["replay_vs_kafka_load"] = part1(args, work)
        if 2 in parts:
            summary["sink"] = part2(args, work, (summary.get("replay_vs_kafka_load") or {}).get("broker_records_per_cpu_s"))
        if 3 in parts:
            summary["scale"] = part3(args, work, out)
        if 4 in parts:
            summary["recorded_pace"] = part4(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    sys.exit(main())
