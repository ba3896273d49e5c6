#!/usr/bin/env python3
"""The container overhead: docker-compose.yml's cluster, and docker-compose.host.yml's, against
the same three brokers as local processes, same load, in the same run, in rotating order.

"compose" is docker-compose.yml (a controller and three brokers in containers on a bridge
network, clients on the host through the published EXTERNAL ports: docker-proxy / NAT);
"host" is docker-compose.host.yml (the same containers on the host's network: no proxy, no NAT);
"local" is controller/launcher.py's LocalCluster (a controller and three broker processes on
127.0.0.1) with the compose cluster's settings. Both are driven by the neutral load generator
shared/bench/kafka_load.py: 100-byte records, 148 per batch, acks=all (-1), an RF=3 topic of 3
partitions, 3 connections, depth 4, for ``--duration`` seconds, then a consume run of what was
produced; each round a new topic on both clusters. Prints, per metric, each side's median and
range over the rounds, the ratio of the medians (compose / local and host / local) and the range
of the per-round ratios; and per produce run the CPU the kbroker processes (controller and
brokers) got: cores used over the run, and CPU µs per 1,000 records. On a busy machine that
matters: with cgroup v1 every container is in Docker's cpu cgroup (/sys/fs/cgroup/cpu/docker,
cpu.shares 1024), which as a whole weighs as much as one runnable process of the host, so the
containers together get less CPU than the same processes running on the host. First, each
cluster's idle CPU (``--idle`` seconds, no client): a container's cgroup includes its
HEALTHCHECK runs. Never asserts. Also: the image sizes, the time from ``docker-compose up`` to
all healthy (fresh volumes, and again after ``down`` + ``up``), warm ``make image`` times, and
with ``--cold`` a cold ``make image`` (removes the kbroker images, bases and root file systems
first: several minutes, and other users of those images must not be running).

    python bench/docker_bench.py [--rounds 6] [--duration 5] [--make-rounds 3] [--cold | --no-image]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.launcher import LocalCluster  # noqa: E402
from tests.deploy.compose import BROKERS, HOST_FILE, ComposeCluster, docker  # noqa: E402

LOAD = REPO.parent / "shared" / "bench" / "kafka_load.py"
METRICS = [("produce", "records_per_s"), ("produce", "mb_per_s"), ("produce", "p50_ms"), ("produce", "p99_ms"),
           ("consume", "records_per_s"), ("consume", "mb_per_s")]
IMAGES = ["kbroker:latest", "kbroker-base:bookworm", "kbroker-prometheus:latest", "kbroker-zookeeper:latest"]
# Where the cluster's CPU time goes, per produce run: the kbroker processes' CPU seconds (the
# containers' cpuacct cgroups; /proc/<pid>/stat for local processes) over the run's wall time.
CPU_METRICS = [("produce", "cluster_cpu_util"), ("produce", "cluster_cpu_us_per_krecord")]
CLK_TCK = os.sysconf("SC_CLK_TCK")
CPUACCT = Path("/sys/fs/cgroup/cpuacct/docker")
# The compose cluster's broker settings (docker-compose.yml), given to the local one too.
BROKER_PROPS = {"default.replication.factor": 3, "min.insync.replicas": 2, "num.partitions": 3,
                "offsets.topic.replication.factor": 3}


def load(mode: str, bootstrap: str, topic: str, duration: float) -> dict:
    cmd = [sys.executable, str(LOAD), "--mode", mode, "--bootstrap", bootstrap.split(",")[0], "--topic", topic,
           "--uvloop"]
    if mode == "produce":
        cmd += ["--partitions", "3", "--replication", "3", "--connections", "3", "--depth", "4", "--acks", "-1",
                "--record-size", "100", "--records-per-batch", "148", "--duration", str(duration)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * 6 + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"kafka_load.py {mode} failed:\n{out.stdout}\n{out.stderr}")
    result: dict = json.loads(lines[-1])
    return result


def container_cpu_reader(stack: ComposeCluster):
    """A function returning the CPU seconds of the stack's controller and brokers (cgroup v1
    cpuacct of each container), or None where that accounting is not there."""
    ids = [docker("inspect", "-f", "{{.Id}}", stack.container(s)).stdout.strip() for s in ("controller", *BROKERS)]
    files = [CPUACCT / i / "cpuacct.usage" for i in ids]
    if not all(f.exists() for f in files):
        return lambda: None
    return lambda: sum(int(f.read_text()) for f in files) / 1e9


def process_cpu_reader(pids: list[int]):
    def read() -> float:
        total = 0
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / CLK_TCK
    return read


def timed(cmd: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
    return time.monotonic() - started


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):10.1f}  range {min(values):.1f} .. {max(values):.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="a multiple of 3: each side runs first, second, last")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of produce load per run")
    parser.add_argument("--make-rounds", type=int, default=3, help="warm `make image` runs to time")
    parser.add_argument("--cold", action="store_true", help="time a cold `make image` first (removes the images)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of each cluster's idle CPU, measured first")
    parser.add_argument("--no-image", action="store_true",
                        help="use the kbroker images as they are: no `make image` run or timing")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")

    if args.no_image:
        pass
    elif args.cold:
        for image in IMAGES + ["kbroker-prometheus-base:bookworm", "kbroker-zookeeper-base:bookworm"]:
            docker("rmi", "-f", image, check=False)
        shutil.rmtree(REPO / "build" / "docker", ignore_errors=True)
        shutil.rmtree(REPO / "build" / "wheels", ignore_errors=True)
        print(f"cold make image (debootstrap x3, wheels, docker build): {timed(['make', 'image']):.1f} s")
    else:
        timed(["make", "image"])  # built, so that the next runs are warm
    if not args.no_image:
        warm = [timed(["make", "image"]) for _ in range(args.make_rounds)]
        print(f"warm make image: {spread(warm)} s over {len(warm)} runs")
    for image in IMAGES:
        size = docker("image", "inspect", "-f", "{{.Size}}", image, check=False).stdout.strip()
        if size:
            print(f"image {image}: {int(size) / 1e6:.0f} MB")

    stack = ComposeCluster()
    host_stack = ComposeCluster(base=HOST_FILE)
    directory = Path(tempfile.mkdtemp(prefix="kbroker-docker-bench-"))
    local = LocalCluster(directory, 3, broker_props=BROKER_PROPS)
    try:
        ups = [stack.up()]
        stack.down(volumes=False)
        ups.append(stack.up())
        print(f"docker-compose up -> all healthy: fresh volumes {ups[0]:.1f} s, after down + up {ups[1]:.1f} s")
        print(f"docker-compose.host.yml up -> all healthy: {host_stack.up():.1f} s")
        started = time.monotonic()
        local.start()
        print(f"LocalCluster start -> all brokers live: {time.monotonic() - started:.1f} s")
        sides = [("compose", stack.bootstrap), ("host", host_stack.bootstrap), ("local", local.bootstrap)]
        cpu = {"compose": container_cpu_reader(stack), "host": container_cpu_reader(host_stack),
               "local": process_cpu_reader([c.pid for c in local.controllers] + [b.pid for b in local.brokers.values()])}

        # Idle: what each cluster burns with no client. The containers' cgroups include their
        # HEALTHCHECKs (`kbroker health` every 2 s, a Python start of ~0.5 CPU-s each).
        for side, _bootstrap in sides:
            before, started = cpu[side](), time.monotonic()
            time.sleep(args.idle)
            after = cpu[side]()
            if before is not None and after is not None:
                print(f"idle {side:8s} kbroker processes' CPU {(after - before) / (time.monotonic() - started):.3f} cores"
                      f" over {args.idle:.0f} s (containers: their health checks included)")
        results: dict[str, list[dict]] = {"compose": [], "host": [], "local": []}

        for r in range(args.rounds):
            order = sides[r % 3:] + sides[:r % 3]  # each side first, second and last in turn
            for side, bootstrap in order:
                topic = f"bench-{side}-{r}"
                cpu_before, started = cpu[side](), time.monotonic()
                produce = load("produce", bootstrap, topic, args.duration)
                cpu_after, wall = cpu[side](), time.monotonic() - started
                if cpu_before is not None and cpu_after is not None:
                    produce["cluster_cpu_util"] = (cpu_after - cpu_before) / wall
                    produce["cluster_cpu_us_per_krecord"] = (cpu_after - cpu_before) * 1e9 / produce["records_total"]
                consume = load("consume", bootstrap, topic, args.duration)
                results[side].append({"produce": produce, "consume": consume})
                print(f"round {r + 1} {side:8s} produce {produce['records_per_s']:9.0f} rec/s "
                      f"(p99 {produce['p99_ms']:.1f} ms, errors {produce['errors']}, kbroker processes' CPU "
                      f"{produce.get('cluster_cpu_util', float('nan')):.2f} cores)  "
                      f"consume {consume['records_per_s']:9.0f} rec/s", flush=True)
        print(f"\n{args.rounds} rounds, {args.duration:.0f} s produce each, load average now {os.getloadavg()}")
        for mode, metric in METRICS + [m for m in CPU_METRICS
                                        if all(m[1] in r[m[0]] for side in results.values() for r in side)]:
            b = [r[mode][metric] for r in results["local"]]
            print(f"{mode} {metric}:")
            for side in ("compose", "host", "local"):
                print(f"  {side:7s} {spread([r[mode][metric] for r in results[side]])}")
            for side in ("compose", "host"):
                a = [r[mode][metric] for r in results[side]]
                ratios = [x / y for x, y in zip(a, b) if y]
                print(f"  {side}/local: ratio of medians {statistics.median(a) / statistics.median(b):.2f}, "
                      f"per-round ratios {min(ratios):.2f} .. {max(ratios):.2f}")
    finally:
        local.kill()
        stack.down(volumes=True)
        host_stack.down(volumes=True)
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
