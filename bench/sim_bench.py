"""The simulator's speed (issue 28): CPU seconds per 600 simulated seconds of a 3-broker cluster
under the scenario's steady workload without faults (``kbroker sim --seed S --duration 600
--no-faults``), this tree against a peer tree (another checkout, e.g. main's) in the same run,
rounds interleaved so that both see the same load; and seeds/s of a seed range.

    python bench/sim_bench.py --peer /path/to/main-checkout [--rounds 3] [--duration 600]
    python bench/sim_bench.py --seeds 300 -j 2          # seeds/s of seeds 1..300 on 2 processes

Each figure is the CPU time the child process reports for the run itself (``time.process_time``
around ``run_seed``), so start-up is left out; both trees must produce the same number of
simulated steps only if the simulated code is the same (the line says so when they differ).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
LINE = re.compile(r"seed (\d+): trace (\w+), (\d+) events, (\d+) steps, ([\d.]+) simulated s, ([\d.]+) s CPU")


def one_run(tree: Path, seed: int, duration: float) -> tuple[float, int, float]:
    """(CPU s, steps, simulated s) of one seed in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    out = subprocess.run([sys.executable, "-m", "sim", "--seed", str(seed), "--duration", str(duration), "--no-faults"],
                         cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    m = LINE.search(out.stdout)
    if m is None:
        raise RuntimeError(f"no summary line from {tree}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return float(m.group(6)), int(m.group(4)), float(m.group(5))


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def cpu_per_600(args: argparse.Namespace) -> None:
    trees = [("this", HERE)] + ([("peer", Path(args.peer).resolve())] if args.peer else [])
    results: dict[str, list[float]] = {name: [] for name, _ in trees}
    steps: dict[str, int] = {}
    for r in range(args.rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        for name, tree in order:
            cpu, n, sim_s = one_run(tree, args.seed, args.duration)
            per600 = cpu * 600.0 / args.duration
            results[name].append(per600)
            steps[name] = n
            print(f"round {r + 1} {name}: {cpu:.2f} s CPU for {sim_s:.1f} simulated s ({per600:.2f} s per 600), "
                  f"{n} steps", flush=True)
    load = os.getloadavg()[0]
    for name, values in results.items():
        print(f"{name}: CPU s per 600 simulated s: {spread(values)} over {len(values)} runs ({steps[name]} steps)")
    if args.peer:
        ratios = [p / t for t, p in zip(results["this"], results["peer"])]
        print(f"peer/this per round: {', '.join(f'{x:.2f}' for x in ratios)} (load {load:.1f})")


def seeds_per_s(args: argparse.Namespace) -> None:
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "sim", "--seeds", str(args.seeds), "--first", str(args.first),
                          "-j", str(args.jobs)], cwd=HERE, env=env, capture_output=True, text=True, timeout=7200)
    print(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-2000:])
    print(f"{time.monotonic() - started:.1f} s wall in all (load {os.getloadavg()[0]:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", help="another checkout to compare with (its C helpers built)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--seeds", type=int, help="measure seeds/s over this many seeds instead")
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args()
    if args.seeds:
        seeds_per_s(args)
    else:
        cpu_per_600(args)


if __name__ == "__main__":
    main()
