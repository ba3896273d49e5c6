"""Instructions per ``Log.read`` (the fetch path's offset lookup: LogSegment.translate_offset),
counted by callgrind (bench/instructions.py), in this tree and in a peer tree (another checkout,
e.g. main's), same workload: a log of 2,000 one-record batches (~90 B each: the index holds an
entry every index.interval.bytes, 4,096 by default, so a lookup scans up to ~45 batches), read at
offsets spread over it, as a follower or consumer reads near its position.

    python bench/read_instructions.py [--peer /path/to/main-checkout] [-n 2000]

Prints instructions per read for each tree (a count, not a time: the same whatever else the
machine runs; two runs of the same code differ by a few instructions per read).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "bench"))

BATCHES = 2000


def child(reads: int) -> None:
    from protocol.clock import MockTime
    from protocol.records import Record, build_batch
    from storage import Log, LogConfig

    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "t-0", LogConfig(), time=MockTime())
        for i in range(BATCHES):
            log.append_as_leader(build_batch([Record(timestamp=1_700_000_000_000 + i, key=b"k", value=b"v" * 20)]), 0)
        log.update_high_watermark(log.log_end_offset)
        for i in range(reads):
            log.read((i * 7919) % BATCHES, 1 << 20, max_offset=log.high_watermark)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer")
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--_child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child is not None:
        child(args._child)
        return
    from instructions import available, per_iteration
    if not available():
        sys.exit("valgrind is not installed")
    trees = [("this", HERE)] + ([("peer", Path(args.peer).resolve())] if args.peer else [])
    for name, tree in trees:
        os.environ["PYTHONPATH"] = str(tree)
        os.chdir(tree)
        count = per_iteration([sys.executable, str(HERE / "bench" / "read_instructions.py"), "--_child"], n=args.n,
                              low=200)
        print(f"{name} ({tree}): {count:,.0f} instructions per read", flush=True)


if __name__ == "__main__":
    main()
