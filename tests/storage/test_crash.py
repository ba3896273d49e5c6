"""kill -9 in the middle of appends: reopening yields a valid prefix (CRC-valid batches,
contiguous offsets, consistent indexes) holding everything flushed before the kill.

A child process appends in a loop through a LogManager, flushing and checkpointing now
and then and printing the flushed offset; the parent kills it with SIGKILL at a random
moment, recovers the same directory, checks it, and goes again on top of what survived.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from storage_helpers import check_consistent

from protocol.clock import MockTime
from protocol.records import iter_records
from storage import LogConfig, LogManager

REPO = Path(__file__).resolve().parents[2]
CONFIG = LogConfig(segment_bytes=256 * 1024, index_interval_bytes=1024, segment_index_bytes=16 * 1024)

CHILD = r"""
import random, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from protocol.clock import MockTime
from protocol.records import Record, build_batch
from storage import LogConfig, LogManager

config = LogConfig(segment_bytes=256 * 1024, index_interval_bytes=1024, segment_index_bytes=16 * 1024)
manager = LogManager([Path(sys.argv[2])], config, time=MockTime())
manager.startup()
log = manager.get_or_create_log("crash", 0)
rng = random.Random(int(sys.argv[3]))
print("ready", log.log_end_offset, flush=True)
n = 0
while True:
    leo = log.log_end_offset
    count = rng.randint(1, 30)
    records = [Record(timestamp=1_700_000_000_000 + leo + i, key=str(leo + i).encode(),
                      value=bytes(rng.randint(0, 2000))) for i in range(count)]
    log.append_as_leader(build_batch(records), leader_epoch=1)
    n += 1
    if n % 25 == 0:
        log.flush()
        manager.checkpoint_recovery_points()
        print("flushed", log.recovery_point, flush=True)
"""


def crash_once(data_dir: Path, seed: int, rng: random.Random) -> tuple[int, int]:
    """Run the child until a random moment, SIGKILL it; returns (LEO at start, last flushed offset)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO), str(data_dir), str(seed)],
                             stdout=subprocess.PIPE, text=True)
    ready = child.stdout.readline().split()
    assert ready and ready[0] == "ready", ready
    time.sleep(rng.uniform(0.02, 0.35))
    child.send_signal(signal.SIGKILL)
    output = child.communicate()[0]
    assert child.returncode == -signal.SIGKILL
    flushed = [int(line.split()[1]) for line in output.splitlines() if line.startswith("flushed ")]
    return int(ready[1]), (flushed[-1] if flushed else 0)


def check_recovered(data_dir: Path, start_leo: int, flushed: int) -> int:
    manager = LogManager([data_dir], CONFIG, time=MockTime())
    reports = manager.startup()
    log = manager.get_log("crash", 0)
    assert log is not None and len(reports) == 1 and not reports[0].had_clean_shutdown
    assert log.log_end_offset >= max(flushed, start_leo), (log.log_end_offset, flushed, start_leo)
    check_consistent(log)
    offset = 0
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 20)
        for record in iter_records(fetched.records):
            if record.offset >= offset:
                assert record.key == str(record.offset).encode()
                offset = record.offset + 1
    leo = log.log_end_offset
    manager.shutdown()
    return leo


def run_crashes(tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    leo = 0
    for i in range(rounds):
        try:
            start_leo, flushed = crash_once(data_dir, seed * 1000 + i, rng)
            assert start_leo == leo
            leo = check_recovered(data_dir, start_leo, flushed)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, round {i}: {exc}") from exc
    assert leo > 0


def test_sigkill_during_appends_recovers_a_valid_prefix(tmp_path):
    run_crashes(tmp_path, rounds=20, seed=int.from_bytes(os.urandom(2), "big"))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # each round re-checks the whole (growing) log: minutes, not seconds
def test_sigkill_soak(tmp_path):
    run_crashes(tmp_path, rounds=200, seed=int.from_bytes(os.urandom(2), "big"))
