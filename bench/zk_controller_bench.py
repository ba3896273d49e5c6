#!/usr/bin/env python3
"""Standby controllers on ZooKeeper: failover time, metadata write latency, load time.

1. Failover (real processes: ZooKeeper, three controllers on ZooKeeper, three brokers): kill -9
   of the active controller -> the first leader elected by the new one, i.e. the first
   CreateTopics (1 partition, RF 3, retried through a broker, which forwards it to whichever
   controller is active) whose partition has a leader in a broker's Metadata. The killed
   controller is restarted as a standby between rounds. Peer in the same run: one controller
   on its local metadata log, kill -9 and restarted at once (what a process supervisor gives a
   cluster without standbys), same measurement.
2. Metadata write latency: one batch (a PartitionChangeRecord) appended and awaited durable,
   one at a time: LocalMetadataStore (fsync) vs ZooKeeperMetadataStore (a conditional
   transaction, acknowledged once ZooKeeper has it on disk).
3. Load: a new active controller (QuorumController.start: load, replay, claim the epoch) over
   10,000 partitions (one topic, RF 3), from the log and from a snapshot: local vs ZooKeeper.

Prints medians, min-max and ratios; never asserts.

    python bench/zk_controller_bench.py [--rounds 10] [--zk-session-ms 3000] [--writes 300]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.launcher import LocalCluster, ZooKeeperEnsemble  # noqa: E402
from controller.metadata_store import LocalMetadataStore  # noqa: E402
from controller.quorum_controller import QuorumController, QuorumControllerConfig  # noqa: E402
from controller.zookeeper_store import ZooKeeperCoordinator  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.client import SYSTEM_TIME, BrokerConnection  # noqa: E402
from protocol.messages.metadata_records import MetadataRecordType as T, make_record  # noqa: E402


def summary(values: list[float], unit: str = "s") -> str:
    if not values:
        return "n/a"
    scale = 1000 if unit == "ms" else 1
    med = statistics.median(values) * scale
    return (f"median {med:.3f} {unit}, min {min(values) * scale:.3f}, max {max(values) * scale:.3f} "
            f"(n={len(values)})")


# -- 1. failover ---------------------------------------------------------------------------

async def create_and_elect(port: int, name: str, deadline: float) -> bool:
    """CreateTopics through the broker at ``port``, retried until it succeeds and the partition
    has a leader in that broker's Metadata (or ``deadline``)."""
    created = False
    while time.monotonic() < deadline:
        try:
            conn = BrokerConnection("127.0.0.1", port, client_id="zk-bench")
            await conn.connect()
            try:
                if not created:
                    resp = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
                        "name": name, "num_partitions": 1, "replication_factor": 3, "assignments": [],
                        "configs": []}], "timeout_ms": 5000}, version=4)
                    created = resp.topics[0].error_code in (0, 36)  # NONE, TOPIC_ALREADY_EXISTS
                if created:
                    md = await conn.request(ApiKey.METADATA, {"topics": [{"name": name}],
                                                              "allow_auto_topic_creation": False}, version=8)
                    parts = md.topics[0].partitions
                    if parts and parts[0].leader_id >= 0:
                        return True
            finally:
                conn.close()
        except (OSError, asyncio.TimeoutError, Exception):  # noqa: BLE001 - retried until the deadline
            pass
        await asyncio.sleep(0.02)
    return False


def failover_rounds(directory: Path, rounds: int, zk_session_ms: int, zookeeper: str | None) -> list[float]:
    props = {"broker.session.timeout.ms": 3000, "default.replication.factor": 3}
    if zookeeper:
        props["zookeeper.session.timeout.ms"] = zk_session_ms
    cluster = LocalCluster(directory, 3, controllers=3 if zookeeper else 1, zookeeper=zookeeper,
                           broker_props={"broker.heartbeat.interval.ms": 500}, controller_props=props)
    times = []
    try:
        cluster.start()
        port = cluster.brokers[1].port
        asyncio.run(create_and_elect(port, "warmup", time.monotonic() + 30))
        for i in range(rounds):
            active = cluster.wait_active_controller(60)
            active.kill()
            start = time.monotonic()
            if not zookeeper:
                active.launch()  # the supervisor's restart
            ok = asyncio.run(create_and_elect(port, f"after-{i}-{uuid.uuid4().hex[:6]}", start + 60))
            took = time.monotonic() - start
            if ok:
                times.append(took)
            print(f"  round {i + 1}: {'ok' if ok else 'TIMED OUT'} {took:.3f}s", flush=True)
            if zookeeper:
                active.start()  # back as a standby
            else:
                active.wait_ready(60)
            cluster.wait_live(timeout_s=60)
    finally:
        cluster.kill()
    return times


# -- 2. write latency ---------------------------------------------------------------------

def change_record(i: int):
    return make_record(T.PARTITION_CHANGE, partition_id=i % 100, topic_id=uuid.UUID(int=7), isr=[1, 2, 3],
                       leader=1 + i % 3)


async def write_latency(store, epoch: int, writes: int) -> list[float]:
    out = []
    for i in range(writes):
        start = time.perf_counter()
        await store.wait_durable(store.append([change_record(i)], epoch))
        out.append(time.perf_counter() - start)
    return out


async def local_store(path: Path):
    store = LocalMetadataStore(path, SYSTEM_TIME)
    await store.load()
    return store


async def zk_term(connect: str, node_id: int = 3000):
    coordinator = ZooKeeperCoordinator(connect, node_id, SYSTEM_TIME, session_timeout_ms=6000)
    await coordinator.start("bench-cluster")
    term = await asyncio.wait_for(coordinator.campaign(), 30)
    return coordinator, coordinator.new_store(term)


async def latencies(directory: Path, connect: str, writes: int) -> tuple[list[float], list[float]]:
    local = await local_store(directory / "latency-local")
    epoch = await local.claim_epoch()
    coordinator, zk = await zk_term(connect + "/latency")
    await zk.load()
    zk_epoch = await zk.claim_epoch()
    local_times, zk_times = [], []
    for _ in range(2):  # A B A B
        local_times += await write_latency(local, epoch, writes // 2)
        zk_times += await write_latency(zk, zk_epoch, writes // 2)
    local.close()
    zk.close()
    await coordinator.resign()
    coordinator.close()
    return local_times, zk_times


# -- 3. loading 10,000 partitions ---------------------------------------------------------

def big_topic(partitions: int) -> list:
    topic_id = uuid.uuid4()
    rng = random.Random(1)
    records = [make_record(T.REGISTER_BROKER, broker_id=b, incarnation_id=uuid.UUID(int=b), broker_epoch=b,
                           end_points=[{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + b,
                                        "security_protocol": 0}], rack=None, fenced=True, in_controlled_shutdown=False)
               for b in (1, 2, 3, 4, 5)]
    records.append(make_record(T.TOPIC, name="big", topic_id=topic_id))
    for p in range(partitions):
        start = rng.randrange(5)
        replicas = [(start + i) % 5 + 1 for i in range(3)]
        records.append(make_record(T.PARTITION, partition_id=p, topic_id=topic_id, replicas=replicas, isr=replicas,
                                   leader=replicas[0], leader_epoch=0, partition_epoch=0))
    return records


def config() -> QuorumControllerConfig:
    return QuorumControllerConfig(node_id=3000, cluster_id="bench-cluster", auto_leader_rebalance_enable=False,
                                  snapshot_max_interval_ms=0, snapshot_max_bytes=1 << 40)


async def timed_start(store) -> tuple[float, int]:
    controller = QuorumController(config(), store, time=SYSTEM_TIME)
    start = time.perf_counter()
    await controller.start()
    took = time.perf_counter() - start
    n = sum(len(t.parts) for t in controller.replication.topics.values())
    await controller.stop()
    return took, n


async def load_times(directory: Path, connect: str, partitions: int, rounds: int) -> dict[str, list[float]]:
    records = big_topic(partitions)
    out: dict[str, list[float]] = {"local log": [], "local snapshot": [], "zookeeper log": [],
                                   "zookeeper snapshot": []}
    # Write once per representation: as one log batch, and as a snapshot.
    for kind in ("log", "snapshot"):
        local = await local_store(directory / f"load-local-{kind}")
        epoch = await local.claim_epoch()
        await local.wait_durable(local.append(records, epoch))
        if kind == "snapshot":
            await local.snapshot(records, local.end_offset, epoch)
        local.close()
        coordinator, zk = await zk_term(f"{connect}/load-{kind}")
        await zk.load()
        zk_epoch = await zk.claim_epoch()
        await zk.wait_durable(zk.append(records, zk_epoch))
        if kind == "snapshot":
            await zk.snapshot(records, zk.end_offset, zk_epoch)
        zk.close()
        await coordinator.resign()
        coordinator.close()
    for _ in range(rounds):  # A B A B
        for kind in ("log", "snapshot"):
            local = LocalMetadataStore(directory / f"load-local-{kind}", SYSTEM_TIME)
            took, n = await timed_start(local)
            local.close()
            assert n == partitions
            out[f"local {kind}"].append(took)
            coordinator, zk = await zk_term(f"{connect}/load-{kind}")
            took, n = await timed_start(zk)
            zk.close()
            await coordinator.resign()
            coordinator.close()
            assert n == partitions
            out[f"zookeeper {kind}"].append(took)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="failovers per setup")
    parser.add_argument("--zk-session-ms", type=int, default=3000, help="zookeeper.session.timeout.ms of the controllers")
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--load-rounds", type=int, default=5)
    parser.add_argument("--skip-failover", action="store_true")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="zk-bench-", dir=REPO))
    ensemble = ZooKeeperEnsemble(directory / "zk", 1).start()
    try:
        print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
        print(f"\n== metadata write latency (append -> durable), {args.writes} writes each, A B A B")
        local_t, zk_t = asyncio.run(latencies(directory, ensemble.connect, args.writes))
        print(f"  local (fsync):      {summary(local_t, 'ms')}, p99 {sorted(local_t)[int(len(local_t) * .99)] * 1000:.3f} ms")
        print(f"  zookeeper (1 node): {summary(zk_t, 'ms')}, p99 {sorted(zk_t)[int(len(zk_t) * .99)] * 1000:.3f} ms")
        print(f"  ratio zookeeper/local (medians): {statistics.median(zk_t) / statistics.median(local_t):.2f}")

        print(f"\n== a new active controller loads {args.partitions} partitions (RF 3): "
              f"QuorumController.start, {args.load_rounds} rounds")
        loads = asyncio.run(load_times(directory, ensemble.connect, args.partitions, args.load_rounds))
        for name, values in loads.items():
            print(f"  {name:20s} {summary(values)}")
        for kind in ("log", "snapshot"):
            print(f"  ratio zookeeper/local ({kind}): "
                  f"{statistics.median(loads[f'zookeeper {kind}']) / statistics.median(loads[f'local {kind}']):.2f}")

        if not args.skip_failover:
            print(f"\n== failover: kill -9 of the active controller -> first leader elected by the next one, "
                  f"{args.rounds} rounds")
            print(f"  ZooKeeper standbys (zookeeper.session.timeout.ms={args.zk_session_ms}):")
            zk_times = failover_rounds(directory / "fo-zk", args.rounds, args.zk_session_ms,
                                       ensemble.connect + "/failover")
            print("  peer: one local controller restarted at once:")
            local_times = failover_rounds(directory / "fo-local", args.rounds, args.zk_session_ms, None)
            print(f"  zookeeper standby takeover: {summary(zk_times)}")
            print(f"  local controller restart:   {summary(local_times)}")
            if zk_times and local_times:
                print(f"  ratio (medians) standby/restart: {statistics.median(zk_times) / statistics.median(local_times):.2f}")
        print(f"\nload average at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    finally:
        ensemble.kill()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
