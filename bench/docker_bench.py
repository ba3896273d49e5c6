#!/usr/bin/env python3
"""The container overhead: docker-compose.yml's cluster, and docker-compose.host.yml's, against
the same three brokers as local processes, same load, in the same run, in rotating order.

"compose" is docker-compose.yml (a controller and three brokers in containers on a bridge
network, clients on the host through the published EXTERNAL ports: docker-proxy / NAT);
"host" is docker-compose.host.yml (the same containers on the host's network: no proxy, no NAT);
"local" is controller/launcher.py's LocalCluster (a controller and three broker processes on
127.0.0.1) with the compose cluster's settings. All three are driven by the neutral load generator
shared/bench/kafka_load.py: 100-byte records, 148 per batch, acks=all (-1), an RF=3 topic of 3
partitions, 3 connections, depth 4, for ``--duration`` seconds, then a consume run of what was
produced (``--consume-passes`` runs of ~0.1 s each, their median); each round a new topic on
every cluster. Prints, per metric, each side's median and range over the rounds, the ratio of
the medians (compose / local and host / local) and the range of the per-round ratios; and where
the CPU goes, per 1,000 records produced and consumed: the kbroker processes (the controller's
and brokers', each container's first process read from /proc as local processes are: without
the health checks), the docker-proxy processes forwarding the compose cluster's published
ports (Docker's userland proxy: every byte a client sends or reads is copied by one), and the
load generator itself (the same process on every side: its CPU per record rising too says the
machine, not the broker, got slower). First, each cluster's idle CPU (``--idle`` seconds, no
client), the containers' cgroups beside their kbroker processes: the difference is their
HEALTHCHECK runs (runc starting a process in the container, then kbroker-healthcheck). Never
asserts. On a busy machine, the CPU share matters: with cgroup v1 every container is in Docker's
cpu cgroup (/sys/fs/cgroup/cpu/docker, cpu.shares 1024), which as a whole weighs as much as one
runnable process of the host, so the containers together get less CPU than the same four
processes running on the host; ``--local-cgroup`` (root, cgroup v1) puts the local processes
in one cgroup of their own weighted as Docker's, which leaves what the containers themselves
cost. Also: the image sizes, the time from ``docker-compose up`` to all healthy (fresh volumes,
and again after ``down`` + ``up``), warm ``make image`` times, and with ``--cold`` a cold
``make image`` (removes the kbroker images, bases and root file systems first: several minutes,
and other users of those images must not be running).

    python bench/docker_bench.py [--rounds 6] [--duration 5] [--consume-passes 3] [--local-cgroup]
                                 [--make-rounds 3] [--cold | --no-image]
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
CPU_METRICS = [("produce", "kbroker_cpu_util"), ("produce", "kbroker_cpu_us_per_krecord"),
               ("produce", "proxy_cpu_us_per_krecord"), ("produce", "client_cpu_us_per_krecord"),
               ("consume", "kbroker_cpu_us_per_krecord"), ("consume", "proxy_cpu_us_per_krecord"),
               ("consume", "client_cpu_us_per_krecord")]
CLK_TCK = os.sysconf("SC_CLK_TCK")
CPUACCT = Path("/sys/fs/cgroup/cpuacct/docker")
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
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
    """A function returning the CPU seconds of the stack's controller and brokers' containers
    (cgroup v1 cpuacct: their kbroker process and their HEALTHCHECK runs), or None where that
    accounting is not there."""
    ids = [docker("inspect", "-f", "{{.Id}}", stack.container(s)).stdout.strip() for s in ("controller", *BROKERS)]
    files = [CPUACCT / i / "cpuacct.usage" for i in ids]
    if not all(f.exists() for f in files):
        return lambda: None
    return lambda: sum(int(f.read_text()) for f in files) / 1e9


def container_pids(stack: ComposeCluster) -> list[int]:
    """The host pids of the kbroker process of the stack's controller and brokers (each
    container's first process): read as local processes are, without the health checks."""
    return [int(docker("inspect", "-f", "{{.State.Pid}}", stack.container(s)).stdout) for s in ("controller", *BROKERS)]


class SharedCgroup:
    """--local-cgroup: the local processes moved into one cgroup v1 cpu group of their own,
    weighted as Docker's (/sys/fs/cgroup/cpu/docker's cpu.shares), so that, on a busy machine,
    together they get the CPU share the containers get together; removed again at the end."""

    def __init__(self) -> None:
        self.path = CPU_CGROUP / f"kbroker-docker-bench-{os.getpid()}"
        self.path.mkdir()
        (self.path / "cpu.shares").write_text((CPU_CGROUP / "docker" / "cpu.shares").read_text())

    def add(self, pid: int) -> None:
        for task in Path(f"/proc/{pid}/task").iterdir():
            (self.path / "tasks").write_text(task.name)

    def remove(self) -> None:
        for _ in range(50):  # the killed processes leave it
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)
        print(f"left {self.path} behind (still has tasks)")


def proxy_pids(stack: ComposeCluster) -> list[int]:
    """The docker-proxy processes forwarding the stack's published broker ports (the daemon's
    userland-proxy: a client on the host reaching a published 127.0.0.1 port goes through one)."""
    ports = {str(stack.ports[f"BROKER_{i}_PORT"]) for i in (1, 2, 3)}
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"docker-proxy") and b"-host-port" in argv:
            port = argv[argv.index(b"-host-port") + 1].decode()
            if port in ports:
                pids.append(int(entry.name))
    return pids


def proxy_cpu_reader(stack: ComposeCluster):
    """A function returning the CPU seconds of the stack's docker-proxy processes."""
    read = process_cpu_reader(proxy_pids(stack))
    return read


def measured(readers: dict, run):
    """run() between two readings of every CPU reader: its result, the CPU seconds each used
    (None where not measurable) and the wall time."""
    before, started = {k: f() for k, f in readers.items()}, time.monotonic()
    result = run()
    after, wall = {k: f() for k, f in readers.items()}, time.monotonic() - started
    used = {k: (after[k] - before[k] if before[k] is not None and after[k] is not None else None) for k in readers}
    return result, used, wall


def add_cpu(result: dict, used: dict, records: int) -> None:
    for name, seconds in used.items():
        if seconds is not None and records:
            result[f"{name}_cpu_us_per_krecord"] = seconds * 1e9 / records


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
    digits = 1 if statistics.median(values) >= 10 else 3
    return (f"median {statistics.median(values):10.{digits}f}  "
            f"range {min(values):.{digits}f} .. {max(values):.{digits}f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="a multiple of 3: each side runs first, second, last")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of produce load per run")
    parser.add_argument("--consume-passes", type=int, default=3,
                        help="consume runs of each produced topic per round (a run lasts ~0.1 s): their median")
    parser.add_argument("--local-cgroup", action="store_true",
                        help="run the local processes in one cpu cgroup weighted as Docker's (cgroup v1, root)")
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
    cgroup = SharedCgroup() if args.local_cgroup else None
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
        local_pids = [c.pid for c in local.controllers] + [b.pid for b in local.brokers.values()]
        if cgroup is not None:
            for pid in local_pids:
                cgroup.add(pid)
            print(f"local processes in {cgroup.path} (cpu.shares {(cgroup.path / 'cpu.shares').read_text().strip()},"
                  f" as {CPU_CGROUP / 'docker'}): all of them together weigh as all the containers do")
        none = lambda: 0.0  # noqa: E731
        cpu = {"compose": {"kbroker": process_cpu_reader(container_pids(stack)), "proxy": proxy_cpu_reader(stack),
                           "cgroup": container_cpu_reader(stack)},
               "host": {"kbroker": process_cpu_reader(container_pids(host_stack)), "proxy": none,
                        "cgroup": container_cpu_reader(host_stack)},
               "local": {"kbroker": process_cpu_reader(local_pids), "proxy": none, "cgroup": lambda: None}}
        proxies = len(proxy_pids(stack))
        print(f"docker-proxy processes forwarding the compose cluster's broker ports: {proxies}"
              + ("" if proxies else " (none: the daemon runs with userland-proxy false, or a v2 engine)"))

        # Idle: what each cluster burns with no client. The containers' cgroups include their
        # HEALTHCHECKs (`kbroker health` every 2 s: a Python start, ~0.03 CPU-s each).
        for side, _bootstrap in sides:
            (), used, wall = measured(cpu[side], lambda: time.sleep(args.idle) or ())
            cgroup_cores = "" if used["cgroup"] is None else f", containers' cgroups {used['cgroup'] / wall:.3f}"
            print(f"idle {side:8s} CPU (cores) over {args.idle:.0f} s: kbroker processes {used['kbroker'] / wall:.3f}"
                  f"{cgroup_cores}")
        results: dict[str, list[dict]] = {"compose": [], "host": [], "local": []}

        for r in range(args.rounds):
            order = sides[r % 3:] + sides[:r % 3]  # each side first, second and last in turn
            for side, bootstrap in order:
                topic = f"bench-{side}-{r}"
                produce, used, wall = measured(cpu[side], lambda: [load("produce", bootstrap, topic, args.duration)])
                produce = produce[0]
                records = produce["records_total"]
                add_cpu(produce, used, records)
                produce["kbroker_cpu_util"] = used["kbroker"] / wall
                produce["client_cpu_us_per_krecord"] = produce["client_cpu_util"] / produce["records_per_s"] * 1e9
                passes, used, _wall = measured(cpu[side], lambda: [load("consume", bootstrap, topic, args.duration)
                                                                   for _ in range(args.consume_passes)])
                consume = {key: statistics.median(p[key] for p in passes)
                           for key in ("records_per_s", "mb_per_s", "duration_s")}
                add_cpu(consume, used, sum(p["records_total"] for p in passes))
                consume["client_cpu_us_per_krecord"] = statistics.median(
                    p["client_cpu_util"] / p["records_per_s"] * 1e9 for p in passes)
                results[side].append({"produce": produce, "consume": consume})
                print(f"round {r + 1} {side:8s} produce {produce['records_per_s']:9.0f} rec/s "
                      f"(p99 {produce['p99_ms']:.1f} ms, errors {produce['errors']}; CPU µs/1000 records: kbroker "
                      f"{produce.get('kbroker_cpu_us_per_krecord', float('nan')):.0f}, docker-proxy "
                      f"{produce.get('proxy_cpu_us_per_krecord', float('nan')):.0f}, client "
                      f"{produce['client_cpu_us_per_krecord']:.0f})  consume {consume['records_per_s']:9.0f} rec/s "
                      f"({consume['duration_s'] * 1000:.0f} ms; kbroker "
                      f"{consume.get('kbroker_cpu_us_per_krecord', float('nan')):.1f}, docker-proxy "
                      f"{consume.get('proxy_cpu_us_per_krecord', float('nan')):.1f}, client "
                      f"{consume['client_cpu_us_per_krecord']:.1f})", flush=True)
        print(f"\n{args.rounds} rounds, {args.duration:.0f} s produce each, consume the median of "
              f"{args.consume_passes} passes; load average now {os.getloadavg()}")
        for mode, metric in METRICS + [m for m in CPU_METRICS
                                        if all(m[1] in r[m[0]] for side in results.values() for r in side)]:
            b = [r[mode][metric] for r in results["local"]]
            print(f"{mode} {metric}:")
            for side in ("compose", "host", "local"):
                print(f"  {side:7s} {spread([r[mode][metric] for r in results[side]])}")
            if not statistics.median(b):
                continue  # docker-proxy's CPU: none for local processes
            for side in ("compose", "host"):
                a = [r[mode][metric] for r in results[side]]
                ratios = [x / y for x, y in zip(a, b) if y]
                print(f"  {side}/local: ratio of medians {statistics.median(a) / statistics.median(b):.2f}, "
                      f"per-round ratios {min(ratios):.2f} .. {max(ratios):.2f}")
    finally:
        local.kill()
        if cgroup is not None:
            cgroup.remove()
        stack.down(volumes=True)
        host_stack.down(volumes=True)
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
