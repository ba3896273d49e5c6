#!/usr/bin/env python3
"""Instructions of the leader's storage work per replicated append (callgrind, bench/instructions.py):
one ~16 KiB batch (148 records of 100 bytes) appended as leader, then read at the tail by two
followers (Log.read from the offset the append started at, the bytes copied out once each, as a
socket send would read them). The part of the RF=3 acks=all leader that a fetch at the tail after
every append exercises (issue 29: a read after an append mapped the file again). A count, not a
time: the same whatever else the machine runs.

    python bench/replica_read_instructions.py [--before PATH] [-n 300]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def child(tree: str, iterations: int) -> None:
    sys.path.insert(0, tree)
    from instructions import measured

    from protocol.clock import MockTime
    from protocol.records import Record, build_batch
    from storage import Log, LogConfig

    payload = build_batch([Record(timestamp=1_700_000_000_000 + i, key=None, value=bytes([65 + i % 26]) * 100)
                           for i in range(148)])
    with tempfile.TemporaryDirectory(prefix="kbroker-rri-") as tmp:
        log = Log.open(Path(tmp) / "t-0", LogConfig(), time=MockTime())

        def one() -> None:
            start = log.log_end_offset
            log.append_as_leader(bytearray(payload), 0)
            for _follower in range(2):
                bytes(log.read(start, 1 << 20).records)
        for _ in range(50):  # warm-up: first segment files, first mapping
            one()
        measured(one, iterations)
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, metavar="PATH", help="also count the storage of this checkout")
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        child(args._child[0], int(args._child[1]))
        return 0
    from instructions import available, per_iteration
    if not available():
        print("valgrind is not installed", file=sys.stderr)
        return 2
    trees = {"after": REPO} if args.before is None else {"before": args.before.resolve(), "after": REPO}
    counts = {}
    for name, tree in trees.items():
        rev = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h"], capture_output=True, text=True)
        counts[name] = per_iteration([sys.executable, __file__, "--_child", str(tree)], args.n)
        print(f"{name:7s} {tree} ({rev.stdout.strip()}): {counts[name]:,.0f} instructions per append + 2 tail reads",
              flush=True)
    if len(counts) == 2:
        print(f"after/before {counts['after'] / counts['before']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
