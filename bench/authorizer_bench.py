#!/usr/bin/env python3
"""The authorizer's cost on the produce path: 1,000 ACL bindings loaded vs no authorizer
(allow all). Numbers, never pass/fail.

1. In process: what KafkaApis pays per produce request for authorization — its
   ``authorize(ctx, WRITE, TOPIC, name)`` (one call per topic of the request), with the
   StandardAuthorizer holding 1,000 bindings (a literal ALLOW on the topic among literal,
   prefixed, wildcard, DENY and host-specific bindings of other principals and resources)
   and with no authorizer; ns per call, medians and spread over rounds.
2. The broker's whole produce path in process (KafkaConnection.data_received of a Produce
   request to the log, no sockets): CPU µs per request, no authorizer vs the 1,000 bindings,
   A B A B; every request is checked to have been written.
3. End to end: a controller and one broker, A (no authorizer) and B (StandardAuthorizer, the
   same 1,000 bindings created through CreateAcls and propagated to the broker) in turns,
   A B A B; shared/bench/kafka_load.py produces (100-byte records, 148 per batch, acks=1,
   4 partitions, 4 connections, depth 8) with ``--server-pid`` = the broker: its CPU µs per
   produce request, medians and spread, and B - A.

4. With ``--instructions N``: the in-process produce path of (2.) under callgrind, instructions
   per request for both sides (a count: the same on a busy machine), and the difference.

    python bench/authorizer_bench.py [--rounds 5] [--duration 8] [--calls 200000] [--requests 5000] [--no-e2e]
                                     [--instructions 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import instructions as callgrind  # noqa: E402  (bench/instructions.py)
from broker.security.authorizer import StandardAcl, StandardAuthorizer  # noqa: E402
from broker.security.principal import ANONYMOUS  # noqa: E402
from controller.launcher import LocalCluster  # noqa: E402
from protocol.acl import (CLUSTER_NAME, AclBinding, AclOperation as Op, AclPermissionType as P,  # noqa: E402
                          PatternType as PT, ResourceType as R)
from protocol.client import KafkaClient  # noqa: E402

LOAD = REPO.parent / "shared" / "bench" / "kafka_load.py"
TOPIC = "bench"
BINDINGS = 1000


def bindings() -> list[AclBinding]:
    """1,000 bindings: what lets User:ANONYMOUS produce to ``bench`` (and the controller reach
    the broker), and 997 others of other principals and resources, of every kind."""
    out = [AclBinding(R.TOPIC, TOPIC, PT.LITERAL, "User:ANONYMOUS", "*", Op.ALL, P.ALLOW),
           AclBinding(R.CLUSTER, CLUSTER_NAME, PT.LITERAL, "User:ANONYMOUS", "*", Op.ALL, P.ALLOW),
           AclBinding(R.GROUP, "*", PT.LITERAL, "User:ANONYMOUS", "*", Op.ALL, P.ALLOW)]
    i = 0
    while len(out) < BINDINGS:
        kind = i % 5
        if kind == 0:
            out.append(AclBinding(R.TOPIC, f"topic-{i}", PT.LITERAL, f"User:u{i}", "*", Op.WRITE, P.ALLOW))
        elif kind == 1:
            out.append(AclBinding(R.TOPIC, f"be{i}", PT.PREFIXED, f"User:u{i}", "*", Op.READ, P.ALLOW))
        elif kind == 2:
            out.append(AclBinding(R.TOPIC, f"topic-{i}", PT.LITERAL, "User:*", f"10.0.{i % 250}.1", Op.WRITE,
                                  P.DENY))
        elif kind == 3:
            out.append(AclBinding(R.GROUP, f"group-{i}", PT.LITERAL, f"User:u{i}", "*", Op.READ, P.ALLOW))
        else:
            out.append(AclBinding(R.TOPIC, "b", PT.PREFIXED, f"User:u{i}", "10.1.1.1", Op.DESCRIBE, P.ALLOW))
        i += 1
    return out


class _Ctx:
    """What KafkaApis hands the authorizer: the connection's principal and address."""

    def __init__(self) -> None:
        self.principal = ANONYMOUS
        self.client_host = "127.0.0.1"


def in_process(rounds: int, calls: int) -> None:
    from broker.apis import KafkaApis
    authorizer = StandardAuthorizer()
    for b in bindings():
        authorizer.add_acl(uuid.uuid4(), StandardAcl.of(*b))
    ctx = _Ctx()
    # KafkaApis.authorize as the produce handler calls it, unbound from a real instance.
    with_acls = type("A", (), {"authorizer": authorizer, "authorize": KafkaApis.authorize})()
    allow_all = type("A", (), {"authorizer": None, "authorize": KafkaApis.authorize})()
    assert with_acls.authorize(ctx, Op.WRITE, R.TOPIC, TOPIC)
    results: dict[str, list[float]] = {"no authorizer": [], f"{BINDINGS} bindings": []}
    for _ in range(rounds):
        for name, apis in (("no authorizer", allow_all), (f"{BINDINGS} bindings", with_acls)):
            started = time.perf_counter_ns()
            for _ in range(calls):
                apis.authorize(ctx, Op.WRITE, R.TOPIC, TOPIC)
            results[name].append((time.perf_counter_ns() - started) / calls)
    print(f"in process: KafkaApis.authorize(ctx, WRITE, TOPIC, {TOPIC!r}), ns per call, medians [min-max] over "
          f"{rounds} rounds of {calls:,} calls")
    for name, values in results.items():
        print(f"  {name:20s} {statistics.median(values):8.1f}  [{min(values):.1f}-{max(values):.1f}]")
    a, b = (statistics.median(v) for v in results.values())
    print(f"  difference per produce request of one topic: {b - a:+.1f} ns\n")
    # a cache miss (what a change of the bindings costs the first request after it)
    started = time.perf_counter_ns()
    for n in range(2000):
        authorizer._cache.clear()
        authorizer.check(ANONYMOUS, "127.0.0.1", Op.WRITE, R.TOPIC, TOPIC)
    print(f"  a check without its cached answer: {(time.perf_counter_ns() - started) / 2000 / 1000:.1f} µs\n")


class _Transport:
    """Just enough of an asyncio transport for KafkaConnection: responses are dropped."""

    def write(self, data) -> None:
        pass

    def writelines(self, chunks) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 5555) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def _frame() -> bytes:
    from protocol.fast_codecs import encode_produce_request
    from protocol.records import Record, build_batch
    batch = build_batch([Record(value=b"v" * 100, timestamp=1) for _ in range(148)])
    return b"".join(bytes(c) for c in encode_produce_request(8, 1, "bench", 1, 1000, [(TOPIC, [(0, batch)])]))


def _bindings_authorizer() -> StandardAuthorizer:
    authorizer = StandardAuthorizer()
    for b in bindings():
        authorizer.add_acl(uuid.uuid4(), StandardAcl.of(*b))
    return authorizer


def _produce_side(root: Path, authorizer):
    """One broker's produce path in process: a KafkaConnection (no socket) over KafkaApis, the
    ReplicaManager and a log of one partition led here. Returns (connection, logs, replica manager)."""
    from broker.apis import KafkaApis
    from broker.config import KafkaConfig
    from broker.config_repository import ConfigRepository
    from broker.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionInfo
    from broker.network import KafkaConnection, SocketServer
    from broker.partition import LeaderAndIsrState
    from broker.replica_manager import ReplicaManager
    from protocol.clock import MockTime
    from storage import LogManager

    config = KafkaConfig({"broker.id": "1", "log.dirs": str(root / uuid.uuid4().hex),
                          "listeners": "PLAINTEXT://127.0.0.1:9092"})
    config.log_dirs[0].mkdir(parents=True)
    cache = MetadataCache(1)
    cache.brokers[1] = BrokerInfo(1, {"PLAINTEXT": BrokerEndpoint("PLAINTEXT", "h", 9092)})
    cache.update_partition(TOPIC, uuid.uuid4(), PartitionInfo(0, 1, 0, [1], [1]))
    configs = ConfigRepository(config, 1, cache)
    logs = LogManager(config.log_dirs, configs.default_log_config(), time=MockTime(),
                      topic_config=configs.log_config_for)
    logs.startup()
    rm = ReplicaManager(broker_id=1, time=MockTime(), log_manager=logs, metadata_cache=cache,
                        log_config_for=configs.log_config_for)
    rm.become_leader_or_follower(0, 1, [LeaderAndIsrState(TOPIC, 0, 1, 1, 0, [1], 0, [1], True)])
    apis = KafkaApis(replica_manager=rm, metadata_cache=cache, topic_admin=None, config_repository=configs,
                     producer_ids=None, inter_broker_listener="PLAINTEXT", authorizer=authorizer)
    conn = KafkaConnection(SocketServer(apis, max_request_size=1 << 24, max_inflight=1000), "PLAINTEXT")
    conn.connection_made(_Transport())
    return conn, logs, rm


def produce_handler(rounds: int, requests: int) -> float:
    """The broker's whole produce path in process, no sockets: KafkaConnection.data_received of
    a Produce request (one topic, one partition, 148 records of 100 bytes, acks=1) through
    KafkaApis and the ReplicaManager to the log, with no authorizer and with 1,000 bindings
    (User:ANONYMOUS allowed by a literal binding); CPU µs per request, in short slices A B B A
    A B ... (drift on a shared machine falls on both sides alike)."""
    root = Path(tempfile.mkdtemp(prefix="kbroker-authz-handler-"))
    frame = _frame()
    make = functools.partial(_produce_side, root)

    sides = {"no authorizer": make(None), f"{BINDINGS} bindings": make(_bindings_authorizer())}
    results: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for conn, _logs, _rm in sides.values():  # warm up
            for _ in range(200):
                conn.data_received(frame)
        names = list(sides)
        for r in range(rounds):
            for name in (names if r % 2 == 0 else names[::-1]):  # A B, then B A: no side always first
                conn = sides[name][0]
                started = time.process_time_ns()
                for _ in range(requests):
                    conn.data_received(frame)
                results[name].append((time.process_time_ns() - started) / requests / 1000)
        for name, (_conn, _logs, rm) in sides.items():  # every request was written: none refused
            written = rm.get_partition(TOPIC, 0).log.log_end_offset
            assert written == (200 + rounds * requests) * 148, (name, written)
    finally:
        for _conn, logs, _rm in sides.values():
            logs.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print(f"in process: the produce path (data_received to the log), CPU µs per request, medians [min-max] over "
          f"{rounds} slices of {requests:,} requests each")
    for name, values in results.items():
        print(f"  {name:20s} {statistics.median(values):8.2f}  [{min(values):.2f}-{max(values):.2f}]")
    a, b = (statistics.median(v) for v in results.values())
    diffs = [y - x for x, y in zip(*results.values())]
    print(f"  difference: {b - a:+.2f} µs per request (median of the per-slice-pair differences "
          f"{statistics.median(diffs):+.2f}, [{min(diffs):+.2f} .. {max(diffs):+.2f}])\n")
    return a


def _child(side: str, requests: int) -> None:
    """Run one side's produce path ``requests`` times after a warm-up (the callgrind child)."""
    root = Path(tempfile.mkdtemp(prefix="kbroker-authz-count-"))
    conn, logs, _rm = _produce_side(root, _bindings_authorizer() if side == "bindings" else None)
    frame = _frame()
    if os.environ.get("AUTHZ_BENCH_NOGC"):
        import gc
        gc.disable()
    try:
        callgrind.measured(lambda: conn.data_received(frame), 200 + requests)
    finally:
        logs.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def instructions(requests: int) -> tuple[float, float] | None:
    """The produce path's instructions per request under callgrind: a count, not a time, so the
    same whatever else the machine runs. Each side runs twice, with W and W + ``requests``
    requests; the difference over ``requests`` is the cost of one request, start-up and warm-up
    cancelled out."""
    if not callgrind.available():
        print("valgrind is not installed; instruction counts skipped\n")
        return None
    low = 200
    per_request = {side: callgrind.per_iteration([sys.executable, __file__, "--_child", side], requests, low)
                   for side in ("none", "bindings")}
    none, with_acls = per_request["none"], per_request["bindings"]
    print(f"in process under callgrind: instructions per produce request (the difference of runs of "
          f"{low} and {low + requests} requests)")
    print(f"  no authorizer           {none:10,.0f}")
    print(f"  {BINDINGS} bindings           {with_acls:10,.0f}")
    print(f"  difference: {with_acls - none:+,.0f} instructions ({(with_acls - none) / none:+.2%} of the request)\n")
    return none, with_acls


def load(bootstrap: str, pid: int, duration: float) -> dict:
    cmd = [sys.executable, str(LOAD), "--mode", "produce", "--bootstrap", bootstrap, "--topic", TOPIC,
           "--server-pid", str(pid), "--uvloop", "--partitions", "4", "--connections", "4", "--depth", "8",
           "--acks", "1", "--record-size", "100", "--records-per-batch", "148", "--duration", str(duration)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * 6 + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"kafka_load.py failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


async def create_bindings(bootstrap: str) -> None:
    async with KafkaClient(bootstrap, client_id="authorizer-bench") as client:
        all_bindings = bindings()
        for start in range(0, len(all_bindings), 200):
            errors = await client.create_acls(all_bindings[start:start + 200])
            assert not any(errors), errors
        deadline = time.monotonic() + 30
        while len(await client.describe_acls()) < len(all_bindings):
            assert time.monotonic() < deadline, "the bindings did not reach the broker"
            await asyncio.sleep(0.1)


def run_cluster(secured: bool, duration: float) -> dict:
    root = Path(tempfile.mkdtemp(prefix="kbroker-authz-bench-"))
    props = {"log.retention.check.interval.ms": 3600000}
    if secured:
        # allow.everyone.if.no.acl.found only while the bindings are being created (no ACL on the
        # cluster yet); once created, every check of the run is decided by them.
        props.update({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "allow.everyone.if.no.acl.found": "true"})
    cluster = LocalCluster(root, 1, broker_props=props, controller_props=props)
    try:
        cluster.start()
        if secured:
            asyncio.run(create_bindings(cluster.bootstrap))
        broker = next(iter(cluster.brokers.values()))
        return load(cluster.bootstrap, broker.pid, duration)
    finally:
        cluster.kill()
        shutil.rmtree(root, ignore_errors=True)


def end_to_end(rounds: int, duration: float) -> None:
    if not LOAD.exists():
        print(f"the load generator is not at {LOAD}; end-to-end part skipped")
        return
    names = {False: "no authorizer", True: f"{BINDINGS} bindings"}
    results: dict[bool, list[dict]] = {False: [], True: []}
    for r in range(rounds):
        for secured in (False, True):
            res = run_cluster(secured, duration)
            results[secured].append(res)
            print(f"round {r + 1} {names[secured]:15s} {res['records_per_s']:>10,.0f} rec/s  "
                  f"cpu {res['server_cpu_us_per_request']:6.1f} µs/req  p50 {res['p50_ms']:.2f} ms  "
                  f"errors {res['errors']}", flush=True)
    print(f"\nend to end: broker CPU µs per produce request (and records/s), medians [min-max] over {rounds} rounds")
    cpu = {s: [x["server_cpu_us_per_request"] for x in v] for s, v in results.items()}
    rate = {s: [x["records_per_s"] for x in v] for s, v in results.items()}
    for s in (False, True):
        print(f"  {names[s]:20s} {statistics.median(cpu[s]):7.1f} µs  [{min(cpu[s]):.1f}-{max(cpu[s]):.1f}]   "
              f"{statistics.median(rate[s]):>10,.0f} rec/s")
    diffs = [b - a for a, b in zip(cpu[False], cpu[True])]
    print(f"  B - A: {statistics.median(cpu[True]) - statistics.median(cpu[False]):+.1f} µs per request "
          f"(per-round differences [{min(diffs):+.1f} .. {max(diffs):+.1f}])")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of produce load per end-to-end run")
    ap.add_argument("--calls", type=int, default=200_000, help="checks per in-process round")
    ap.add_argument("--requests", type=int, default=1000, help="produce requests per in-process handler slice")
    ap.add_argument("--slices", type=int, default=40, help="slices of the in-process handler part (A B B A ...)")
    ap.add_argument("--no-e2e", action="store_true", help="the in-process parts only")
    ap.add_argument("--instructions", type=int, default=0, metavar="N",
                    help="also count the produce path's instructions per request under callgrind over N requests "
                         "(a count, immune to the machine's noise; takes minutes)")
    ap.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        _child(args._child[0], int(args._child[1]))
        return 0
    counts = instructions(args.instructions) if args.instructions else None
    in_process(args.rounds, args.calls)
    per_request_us = produce_handler(args.slices, args.requests)
    if counts is not None:
        none, with_acls = counts
        print(f"the instruction difference in time: {with_acls - none:+,.0f} instructions x "
              f"{per_request_us:.2f} µs / {none:,.0f} instructions (this run's no-authorizer request) = "
              f"{(with_acls - none) * per_request_us / none:+.2f} µs per request\n")
    if not args.no_e2e:
        end_to_end(args.rounds, args.duration)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
