#!/usr/bin/env python3
"""The single-broker produce path in process, this tree against a peer tree, same requests.

broker_bench.py's produce workload — shared/bench/kafka_load.py's own frames: Produce v3,
one batch of 148 records of 100 B (~16 KiB) per request, acks=1, 4 partitions taken in
turn — fed to a whole broker (KafkaRaftServer: KafkaConnection, KafkaApis, ReplicaManager,
Partition, Log, the segment's pwrite) through a transport that drops the answers, 4 requests
per read. No socket, no load generator and no other process in the figure: what is left is
the broker's own work per request (its pwrite included), the part a change to the produce
path moves.

Two measures, each side in its own child process (the peer's runs its own tree's code):

* process CPU µs per request, sides alternating per round (A B, B A, ...): medians, ranges,
  the ratio of the medians and the range of per-round ratios;
* ``--instructions N``: instructions per request under callgrind (bench/instructions.py), a
  count, the same on a busy machine (the kernel's side of the pwrite is not in it).

    python bench/produce_path_bench.py [--peer /path/to/other-checkout] [--rounds 7] [-n 4000]
                                       [--instructions 1000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
LOAD = HERE.parent / "shared" / "bench" / "kafka_load.py"
PARTITIONS = 4
PER_READ = 4


def reads(count: int) -> list[bytes]:
    """``count`` reads of PER_READ Produce frames each, as kafka_load.py sends them."""
    spec = importlib.util.spec_from_file_location("kafka_load", LOAD)
    kl = importlib.util.module_from_spec(spec)
    sys.modules["kafka_load"] = kl  # its dataclasses look their module up
    spec.loader.exec_module(kl)  # type: ignore[union-attr]
    tails = []
    for p in range(PARTITIONS):
        batch, _n, _v = kl.make_batch(100, 0, 16384, 148)
        tails.append(kl.enc_nullable_string("kafka_load") + kl.produce_body(1, 30000, "bench", p, batch))
    out, corr = [], 0
    for _ in range(count):
        chunk = []
        for _ in range(PER_READ):
            corr += 1
            tail = tails[corr % PARTITIONS]
            chunk.append(kl.struct.pack(">ihhi", 2 + 2 + 4 + len(tail), 0, 3, corr) + tail)
        out.append(b"".join(chunk))
    return out


def child(tree: str, mode: str, requests: int) -> None:
    """Runs in ``tree``'s code: a broker in process, ``requests`` produce requests fed to it;
    prints the CPU µs per request (``cpu``) or runs them inside callgrind's window (``count``)."""
    sys.path.insert(0, tree)
    sys.path.insert(0, str(HERE / "bench"))
    import asyncio

    from broker.config import KafkaConfig
    from broker.network import KafkaConnection
    from controller.kafka_raft_server import KafkaRaftServer
    from protocol.client import KafkaClient

    # cpu: ``requests`` requests; count: ``requests`` reads (callgrind's iterations); 20 reads of warm-up first
    data = reads(20 + (requests if mode == "count" else max(1, requests // PER_READ)))

    async def main() -> None:
        root = Path(tempfile.mkdtemp(prefix="kbroker-produce-path-"))
        node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(root / "data"),
                                            "broker.session.timeout.ms": 3_600_000,
                                            "log.retention.check.interval.ms": 3_600_000}))
        try:
            await node.startup()
            async with KafkaClient(f"127.0.0.1:{node.bound_port()}") as client:
                await client.create_topics([("bench", PARTITIONS, 1, None)])
            from transports import NullTransport  # bench/transports.py (this script's directory)

            conn = KafkaConnection(node.broker.socket_server, "PLAINTEXT")
            conn.connection_made(NullTransport())
            for chunk in data[:20]:  # warm-up: the segments' first appends, the caches
                conn.data_received(chunk)
            feed = conn.data_received
            if mode == "count":
                import instructions as callgrind

                it = iter(data[20:])
                callgrind.measured(lambda: feed(next(it)), len(data) - 20)
            else:
                t0 = time.process_time()
                for chunk in data[20:]:
                    feed(chunk)
                cpu = time.process_time() - t0
                print(json.dumps({"cpu_us_per_request": cpu / ((len(data) - 20) * PER_READ) * 1e6}))
            end = sum(node.broker.replica_manager.get_partition("bench", p).log.log_end_offset for p in range(PARTITIONS))
            assert end == len(data) * PER_READ * 148, end  # every request was appended
            if mode == "count":
                print(json.dumps({"appended": True}))
        finally:
            await node.shutdown()
            shutil.rmtree(root, ignore_errors=True)

    asyncio.run(main())


def run_child(tree: Path, mode: str, requests: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--_child", str(tree), mode, str(requests)],
                         capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"child in {tree} failed ({out.returncode}):\n{out.stdout}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def counted(callgrind, argv: list[str]) -> int:
    """instructions.total, but a child that did not append every request (a failed run counts
    fewer instructions) is an error, not a count."""
    with tempfile.TemporaryDirectory(prefix="kbroker-callgrind-") as tmp:
        out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/callgrind.out",
                              f"--toggle-collect={callgrind.COLLECT_IN}", *argv], capture_output=True, text=True,
                             timeout=3600, env={**os.environ, "PYTHONHASHSEED": "0"})
    if out.returncode or '"appended": true' not in out.stdout:
        raise RuntimeError(f"callgrind child failed ({out.returncode}):\n{out.stdout}\n{out.stderr[-3000:]}")
    return int(next(line for line in out.stderr.splitlines() if "Collected :" in line).rsplit(":", 1)[1])


def spread(values: list[float]) -> str:
    return f"[{min(values):.4g}-{max(values):.4g}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", type=Path, help="another checkout to compare with (e.g. a worktree of main)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("-n", type=int, default=4000, help="requests per timed run")
    ap.add_argument("--instructions", type=int, default=0, metavar="N",
                    help="also count instructions per request under callgrind over N requests")
    ap.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        child(args._child[0], args._child[1], int(args._child[2]))
        return 0
    trees = {"this": HERE}
    if args.peer:
        trees["peer"] = args.peer.resolve()
    print(f"produce path in process: Produce v3, 148 records of 100 B per request, acks=1, {PARTITIONS} partitions, "
          f"{PER_READ} requests per read; {args.n} requests per run")
    for name, tree in trees.items():
        print(f"  {name}: {tree}")
    if args.instructions:
        sys.path.insert(0, str(HERE / "bench"))
        import instructions as callgrind

        if not callgrind.available():
            print("valgrind is not installed: no instruction counts")
        else:
            low = 20
            for name, tree in trees.items():
                argv = [sys.executable, __file__, "--_child", str(tree), "count"]
                counts = [counted(callgrind, [*argv, str(reads_)]) for reads_ in (low, low + args.instructions)]
                per = (counts[1] - counts[0]) / args.instructions / PER_READ
                print(f"instructions per request, {name}: {per:,.0f}", flush=True)
    if args.rounds:
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        for i in range(args.rounds):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for name in order:
                cpu[name].append(run_child(trees[name], "cpu", args.n)["cpu_us_per_request"])
            print(f"round {i + 1}: " + ", ".join(f"{name} {cpu[name][-1]:.1f} µs" for name in trees), flush=True)
        print(f"\nprocess CPU µs per request, {args.rounds} rounds:")
        for name in trees:
            print(f"  {name:5} median {statistics.median(cpu[name]):.2f} {spread(cpu[name])}")
        if args.peer:
            ratios = [a / b for a, b in zip(cpu["this"], cpu["peer"])]
            print(f"  this/peer: ratio of medians {statistics.median(cpu['this']) / statistics.median(cpu['peer']):.3f}, "
                  f"per-round {spread(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
