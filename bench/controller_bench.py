#!/usr/bin/env python3
"""The controller's numbers: a controller process and three broker processes on this machine
(``controller.launcher.LocalCluster``). Prints medians and spread; never asserts.

1. failover: kill -9 of a partition's leader (RF=3, min.insync.replicas=2) -> the first
   acks=all produce acknowledged by the new leader (the client polls a survivor's Metadata
   every 20 ms and produces to whoever it names). The old broker restarts and rejoins the
   ISR between kills. Once with the Kafka defaults (broker.session.timeout.ms 9000,
   heartbeats every 2000 ms) and once with a 2000 ms session (heartbeats every 500 ms).
2. create: CreateTopics of 1,000 partitions RF=3 -> every partition's leader answers
   ListOffsets (each broker asked for the partitions it leads), per round a new topic.
3. restart: a controller holding N partitions (default 10,000, RF=3) is kill -9'd and
   started again -> every broker has acknowledged its full state (the controller's
   "has its full state" line for each); and the metadata log's bytes per partition.
4. throughput: RF=3 acks=all produce (shared/bench/kafka_load.py, 4 partitions, 100-byte
   records, 148 per batch) through the controller-managed cluster and through three
   brokers driven by the static controller (controller/static.py), alternating which goes first:
   each side's median and range, the ratio of the medians and the range of per-round ratios.

    python bench/controller_bench.py [--only failover,create,restart,throughput] [--kills 10]
                                     [--rounds 3] [--restart-partitions 10000] [--duration 5]
                                     [--restart-session-timeout-ms 9000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.launcher import BrokerProcess, LocalCluster, free_port  # noqa: E402
from controller.static import PartitionAssignment, StaticController  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.client import BrokerConnection  # noqa: E402
from protocol.errors import ErrorCode  # noqa: E402
from protocol.records import Record, build_batch  # noqa: E402

LOAD = REPO.parent / "shared" / "bench" / "kafka_load.py"


def spread(values: list[float], unit: str = "", fmt: str = ".2f") -> str:
    if not values:
        return "no samples"
    return (f"median {statistics.median(values):{fmt}}{unit}, range {min(values):{fmt}}-{max(values):{fmt}}{unit}, "
            f"n={len(values)}")


async def request(host_port: tuple[str, int], api_key: int, body: dict, version: int | None = None):
    conn = BrokerConnection(*host_port, client_id="controller-bench", request_timeout_ms=180000)
    await conn.connect()
    try:
        return await conn.request(api_key, body, version)
    finally:
        conn.close()


async def partitions(port: int, topics: list[str]) -> dict[tuple[str, int], object]:
    md = await request(("127.0.0.1", port), ApiKey.METADATA,
                       {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False}, 8)
    return {(t.name, p.partition_index): p for t in md.topics for p in t.partitions}


async def create_topic(port: int, name: str, count: int, rf: int = 3, configs: dict | None = None) -> None:
    resp = await request(("127.0.0.1", port), ApiKey.CREATE_TOPICS, {"topics": [{
        "name": name, "num_partitions": count, "replication_factor": rf, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}], "timeout_ms": 170000})
    error = resp.topics[0].error_code
    if error == ErrorCode.REQUEST_TIMED_OUT:  # created; the broker's metadata lags (the caller waits for it)
        print(f"    CreateTopics {name}: {resp.topics[0].error_message}", flush=True)
    elif error:
        raise RuntimeError(f"CreateTopics {name}: {resp.topics[0]}")


async def produce_one(port: int, topic: str, partition: int) -> int:
    try:
        conn = BrokerConnection("127.0.0.1", port, client_id="controller-bench", request_timeout_ms=5000)
        await conn.connect()
    except Exception:  # noqa: BLE001 - a broker not there yet
        return -1
    try:
        batch = build_batch([Record(value=b"x", timestamp=1)])
        [(_t, [(_p, error, _b, _l, _s)])] = await conn.produce(-1, 3000, [(topic, [(partition, batch)])])
        return error
    except Exception:  # noqa: BLE001
        return -1
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------
# 1. failover

async def failover_round(cluster: LocalCluster, kills: int, session_ms: int) -> list[float]:
    port = cluster.brokers[1].port
    await create_topic(port, "fo", 1, 3, {"min.insync.replicas": "2"})
    times = []
    for _ in range(kills):
        await wait_until(lambda: in_sync(cluster, "fo"), 60)
        any_port = next(b.port for b in cluster.brokers.values() if b.running)
        old = (await partitions(any_port, ["fo"]))[("fo", 0)].leader_id
        victim = cluster.brokers[old]
        survivor = next(b for i, b in cluster.brokers.items() if i != old)
        assert await produce_one(victim.port, "fo", 0) == ErrorCode.NONE
        victim.signal(signal.SIGKILL)
        t0 = time.monotonic()
        victim.proc.wait(10)
        while True:
            if time.monotonic() - t0 > session_ms / 1000 + 30:
                raise TimeoutError("no new leader")
            leader = (await partitions(survivor.port, ["fo"]))[("fo", 0)].leader_id
            if leader not in (-1, old) and await produce_one(cluster.brokers[leader].port, "fo", 0) == ErrorCode.NONE:
                times.append(time.monotonic() - t0)
                break
            await asyncio.sleep(0.02)
        print(f"    kill {len(times)}: broker {old} -> {leader} acknowledged after {times[-1]:.2f} s", flush=True)
        victim.start(60)
    return times


async def in_sync(cluster: LocalCluster, topic: str) -> bool:
    try:
        parts = await partitions(cluster.brokers[1].port, [topic])
    except Exception:  # noqa: BLE001
        return False
    return bool(parts) and all(p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
                               for p in parts.values())


async def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.05)


def bench_failover(args) -> None:
    for session_ms, heartbeat_ms in ((9000, 2000), (2000, 500)):
        root = Path(tempfile.mkdtemp(prefix="kbroker-cbench-"))
        cluster = LocalCluster(root, 3, broker_props={"broker.heartbeat.interval.ms": heartbeat_ms,
                                                      "replica.fetch.backoff.ms": 200},
                               controller_props={"broker.session.timeout.ms": session_ms})
        try:
            cluster.start()
            print(f"  failover, broker.session.timeout.ms={session_ms} (heartbeats every {heartbeat_ms} ms):",
                  flush=True)
            times = asyncio.run(failover_round(cluster, args.kills, session_ms))
            print(f"  => kill -9 to first acks=all ack on the new leader: {spread(times, ' s')} "
                  f"(goal <= session + 1 s = {session_ms / 1000 + 1:.0f} s)", flush=True)
        finally:
            cluster.kill()
            shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# 2. create

async def leaders_serve(cluster: LocalCluster, topic: str, count: int) -> bool:
    parts = await partitions(cluster.brokers[1].port, [topic])
    if len(parts) != count or any(p.leader_id < 0 for p in parts.values()):
        return False
    by_leader: dict[int, list[int]] = {}
    for (_t, i), p in parts.items():
        by_leader.setdefault(p.leader_id, []).append(i)
    for leader, ids in by_leader.items():
        resp = await request(("127.0.0.1", cluster.brokers[leader].port), ApiKey.LIST_OFFSETS, {
            "replica_id": -1, "topics": [{"name": topic, "partitions": [
                {"partition_index": i, "timestamp": -1} for i in ids]}]}, 1)
        if any(p.error_code for t in resp.topics for p in t.partitions):
            return False
    return True


def bench_create(args) -> None:
    root = Path(tempfile.mkdtemp(prefix="kbroker-cbench-"))
    cluster = LocalCluster(root, 3)
    try:
        cluster.start()
        times: list[float] = []
        for r in range(args.rounds):
            topic = f"create-{r}"
            cluster.wait_live(timeout_s=300)  # a broker fenced by the round before is back
            fenced_before = cluster.controller.log_text().count("sent no heartbeat")

            async def run() -> float:
                t0 = time.monotonic()
                await create_topic(cluster.brokers[1].port, topic, 1000)
                await wait_until(lambda: leaders_serve(cluster, topic, 1000), 300)
                return time.monotonic() - t0
            times.append(asyncio.run(run()))
            fenced = cluster.controller.log_text().count("sent no heartbeat") - fenced_before
            print(f"    round {r + 1}: 1,000 partitions RF=3 served after {times[-1]:.2f} s "
                  f"({fenced} broker(s) fenced meanwhile for missed heartbeats)", flush=True)
        print(f"  => create 1,000 partitions RF=3 until every leader serves: {spread(times, ' s')} (goal <= 5 s)",
              flush=True)
    finally:
        cluster.kill()
        keep_or_remove(root)


# ---------------------------------------------------------------------------------------------
# 3. restart

def metadata_log_bytes(metadata_dir: Path) -> tuple[int, int]:
    logs = sum(f.stat().st_size for f in metadata_dir.rglob("*.log"))
    snaps = sum(f.stat().st_size for f in metadata_dir.rglob("*.snapshot"))
    return logs, snaps


def bench_restart(args) -> None:
    root = Path(tempfile.mkdtemp(prefix="kbroker-cbench-"))
    session_ms = args.restart_session_timeout_ms
    cluster = LocalCluster(root, 3, broker_props={"broker.heartbeat.interval.ms": 500},
                           controller_props={"broker.session.timeout.ms": session_ms})
    total = args.restart_partitions
    print(f"    broker.session.timeout.ms={session_ms}", flush=True)
    try:
        cluster.start()
        t0 = time.monotonic()
        per_topic = 1000
        topics: list[str] = []

        async def all_led() -> bool:
            parts = await partitions(cluster.brokers[1].port, topics)
            want = min(total, len(topics) * per_topic)
            return len(parts) == want and all(p.leader_id >= 0 for p in parts.values())
        for i in range(0, total, per_topic):
            # One topic of 1,000 at a time, each led and every broker live before the next
            # (a broker busy creating logs may miss heartbeats and be fenced for a while).
            cluster.wait_live(timeout_s=300)
            fenced = cluster.controller.log_text().count("sent no heartbeat")
            if fenced:
                print(f"    {fenced} broker fencing(s) for missed heartbeats so far ({i:,} partitions)", flush=True)
            topics.append(f"big-{i // per_topic}")
            asyncio.run(create_topic(cluster.brokers[1].port, topics[-1], min(per_topic, total - i)))
            asyncio.run(wait_until(all_led, 900))
        print(f"    {total:,} partitions RF=3 created and led after {time.monotonic() - t0:.1f} s", flush=True)
        logs, snaps = metadata_log_bytes(cluster.controller.metadata_dir)
        print(f"  => metadata log: {logs:,} bytes of log + {snaps:,} bytes of snapshot for {total:,} partitions "
              f"({logs / total:.0f} log bytes per partition, replica assignment and registration records included)",
              flush=True)
        times = []
        for r in range(args.rounds):
            offset = len(cluster.controller.log_text())  # what the new process writes comes after
            cluster.controller.signal(signal.SIGKILL)
            cluster.controller.proc.wait(10)
            t0 = time.monotonic()
            cluster.controller.launch()
            deadline = t0 + 300
            while True:
                since_restart = cluster.controller.log_text()[offset:].partition("claimed controller epoch")[2]
                done = {int(b) for b in re.findall(r"broker (\d+) \(epoch \d+\) has its full state", since_restart)}
                if {1, 2, 3} <= done:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"full state not acknowledged by every broker: {sorted(done)}")
                time.sleep(0.02)
            times.append(time.monotonic() - t0)
            print(f"    round {r + 1}: controller restart (process start included) to full state on 3 brokers "
                  f"{times[-1]:.2f} s", flush=True)
            cluster.wait_live(timeout_s=120)
        print(f"  => controller restart with {total:,} partitions to full state on every broker: "
              f"{spread(times, ' s')} (goal <= 10 s)", flush=True)
    finally:
        cluster.kill()
        keep_or_remove(root)


def keep_or_remove(root: Path) -> None:
    """KBROKER_BENCH_KEEP=1 keeps the cluster's directory (the processes' logs) for a look."""
    if os.environ.get("KBROKER_BENCH_KEEP"):
        print(f"  (kept {root}: processes' logs)")
    else:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# 4. throughput

TOPIC = "tbench"
PARTITIONS = 4


def load(bootstrap: str, duration: float) -> float:
    cmd = [sys.executable, str(LOAD), "--mode", "produce", "--bootstrap", bootstrap, "--topic", TOPIC,
           "--no-create", "--partitions", str(PARTITIONS), "--connections", "4", "--depth", "8",
           "--acks", "-1", "--record-size", "100", "--records-per-batch", "148", "--duration", str(duration),
           "--uvloop"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * 6 + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"kafka_load.py failed:\n{out.stdout}\n{out.stderr}")
    result = json.loads(lines[-1])
    if result.get("errors"):
        raise RuntimeError(f"kafka_load.py saw errors: {result}")
    return float(result["records_per_s"])


def managed_round(duration: float) -> float:
    root = Path(tempfile.mkdtemp(prefix="kbroker-cbench-"))
    cluster = LocalCluster(root, 3, broker_props={"log.retention.check.interval.ms": 3600000})
    try:
        cluster.start()
        asyncio.run(create_topic(cluster.brokers[1].port, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"}))
        asyncio.run(wait_until(lambda: in_sync(cluster, TOPIC), 60))
        return load(cluster.brokers[1].bootstrap, duration)
    finally:
        cluster.kill()
        shutil.rmtree(root, ignore_errors=True)


def static_round(duration: float) -> float:
    root = Path(tempfile.mkdtemp(prefix="kbroker-cbench-"))
    procs = {i: BrokerProcess(root / f"data{i}", port=free_port(), broker_id=i, overrides={
        "process.roles": "broker", "min.insync.replicas": 2, "log.retention.check.interval.ms": 3600000})
        for i in (1, 2, 3)}
    try:
        for p in procs.values():
            p.start()
        brokers = {i: ("127.0.0.1", p.port) for i, p in procs.items()}
        assignments = [PartitionAssignment(TOPIC, p, leader=1 + p % 3, leader_epoch=0,
                                           isr=[1 + (p + k) % 3 for k in range(3)],
                                           replicas=[1 + (p + k) % 3 for k in range(3)]) for p in range(PARTITIONS)]

        async def assign() -> None:
            ctrl = StaticController(brokers)
            try:
                await ctrl.assign(assignments)
            finally:
                await ctrl.close()
        asyncio.run(assign())
        return load(procs[1].bootstrap, duration)
    finally:
        for p in procs.values():
            p.kill()
        shutil.rmtree(root, ignore_errors=True)


def bench_throughput(args) -> None:
    managed, static = [], []
    for r in range(args.rounds):  # alternating which side goes first: A B, B A, ...
        if r % 2 == 0:
            static.append(static_round(args.duration))
            managed.append(managed_round(args.duration))
        else:
            managed.append(managed_round(args.duration))
            static.append(static_round(args.duration))
        print(f"    round {r + 1}: static {static[-1]:,.0f} rec/s, controller-managed {managed[-1]:,.0f} rec/s "
              f"(ratio {managed[-1] / static[-1]:.2f})", flush=True)
    ratios = [m / s for m, s in zip(managed, static)]
    print(f"  => RF=3 acks=all produce, 4 partitions, 100-byte records: static {spread(static, ' rec/s', ',.0f')}; "
          f"controller-managed {spread(managed, ' rec/s', ',.0f')}; ratio of medians "
          f"{statistics.median(managed) / statistics.median(static):.2f}, per-round ratios "
          f"{min(ratios):.2f}-{max(ratios):.2f} (goal >= 0.95)", flush=True)


SECTIONS = {"failover": bench_failover, "create": bench_create, "restart": bench_restart,
            "throughput": bench_throughput}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections (default: all)")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--restart-partitions", type=int, default=10_000)
    ap.add_argument("--restart-session-timeout-ms", type=int, default=9000,
                    help="the restart section's broker.session.timeout.ms (Kafka's 9000 by default; a saturated "
                         "machine creating 10,000 partitions may answer heartbeats late and fence brokers)")
    ap.add_argument("--duration", type=float, default=5.0)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for name in args.only.split(","):
        print(f"{name}:", flush=True)
        SECTIONS[name](args)
    print(f"load average at end: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
