"""kill -9 after leader changes: a restarted replica finds the leader epoch cache it had, and
truncation by leader epoch (KIP-101/279) still makes the replicas agree.

The cache's file is rewritten on every change without an fsync and fsynced with the log's
flush (storage/epoch_cache.py); a process killed with -9 leaves the page cache, so the
restarted process must read back the entries it had, those of batches below the recovery
point too, which recovery does not re-read. Only an entry starting at the LEO (a leader
that appended nothing yet) is dropped on loading, as Kafka's loader does; the replica
assigns it again when it leads.

Two replicas of one partition: A lives in a child process, killed -9 now and then and
started again on the same directory (an unclean shutdown: recovery from the recovery point);
B is a Log in this process. Leadership moves between them at ever higher epochs. The new
leader records its epoch at its LEO (what ``Partition.make_leader`` does) and appends zero
or more batches; the follower first truncates as the fetcher does (OffsetsForLeaderEpoch
rounds, ``broker/fetcher.py`` ``_apply_truncation``), must then hold a prefix of the
leader's log, and copies some of the leader's batches. A keeps only part of what it led
unreplicated now and then, so a later leader's log diverges from it and it must truncate.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from storage_helpers import check_consistent, follower_batch, open_log

from storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

REPO = Path(__file__).resolve().parents[2]
SEGMENT_BYTES = 1024  # several segments, so recovery starts from a segment in the middle

CHILD = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from protocol.clock import MockTime
from storage import LogConfig, LogManager

manager = LogManager([Path(sys.argv[2])], LogConfig(segment_bytes=int(sys.argv[3])), time=MockTime())
manager.startup()
log = manager.get_or_create_log("epochs", 0)
cache = log.leader_epoch_cache


def state(word):
    print(word, json.dumps([log.log_end_offset, cache.entries()]), flush=True)


state("ready")
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "lead":  # Partition.make_leader at a new leader epoch
        cache.assign(int(args[0]), log.log_end_offset)
    elif cmd == "append":
        log.append_as_follower(bytes.fromhex(args[0]))
    elif cmd == "truncate":  # as the fetcher does (broker/fetcher.py _truncate_log)
        below_recovery_point = int(args[0]) < log.recovery_point
        log.truncate_to(int(args[0]))
        if below_recovery_point:
            manager.checkpoint_recovery_points_after_truncation(log)
    elif cmd == "flush":
        log.flush()
        manager.checkpoint_recovery_points()
    state("ok")
"""


class Batch(tuple):
    """(base offset, record count, leader epoch); the bytes are rebuilt from them."""

    @property
    def end(self) -> int:
        return self[0] + self[1]

    def data(self) -> bytes:
        return follower_batch(self[0], self[1], epoch=self[2])


class ChildReplica:
    """Replica A: a child process owning the log, driven over its stdin."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.batches: list[Batch] = []
        self.kills = 0
        self.state = self._start()

    def _start(self) -> list:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO), str(self.dir), str(SEGMENT_BYTES)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self._read("ready")

    def _read(self, expected: str) -> list:
        line = self.proc.stdout.readline()
        word, _, rest = line.partition(" ")
        assert word == expected, f"child said {line!r}"
        return json.loads(rest)

    def _do(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        self.state = self._read("ok")

    def kill_and_restart(self) -> None:
        before = self.state
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        assert self.proc.returncode == -signal.SIGKILL
        self.kills += 1
        after = self._start()
        # Loading drops an entry that starts at the LEO (Kafka's truncateFromEnd(nextOffset)):
        # a leader that appended nothing in its epoch, which assigns it again when it leads.
        leo, entries = before
        expected = [leo, [e for e in entries if e[1] < leo]]
        assert after == expected, f"after kill -9: (LEO, epoch entries) {after}, before {before}"
        self.state = after

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)

    def leo(self) -> int:
        return self.state[0]

    def entries(self) -> list:
        return [tuple(e) for e in self.state[1]]

    def lead(self, epoch: int) -> None:
        self._do(f"lead {epoch}")

    def append(self, batch: Batch) -> None:
        self._do(f"append {batch.data().hex()}")
        self.batches.append(batch)

    def truncate(self, offset: int) -> None:
        self._do(f"truncate {offset}")
        self.batches = [b for b in self.batches if b.end <= offset]

    def flush(self) -> None:
        self._do("flush")

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """The cache's answer, computed from the entries the child reported (as ``end_offset_for``)."""
        entries = self.entries()
        if not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == entries[-1][0]:
            return epoch, self.leo()
        floor = None
        for e, start in entries:
            if e > epoch:
                return (epoch if floor is None else floor), start
            floor = e
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


class LocalReplica:
    """Replica B: a Log in this process (never killed)."""

    def __init__(self, data_dir: Path) -> None:
        self.log = open_log(data_dir / "epochs-0", segment_bytes=SEGMENT_BYTES)
        self.batches: list[Batch] = []

    def leo(self) -> int:
        return self.log.log_end_offset

    def entries(self) -> list:
        return [tuple(e) for e in self.log.leader_epoch_cache.entries()]

    def lead(self, epoch: int) -> None:
        self.log.leader_epoch_cache.assign(epoch, self.leo())

    def append(self, batch: Batch) -> None:
        self.log.append_as_follower(batch.data())
        self.batches.append(batch)

    def truncate(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.batches = [b for b in self.batches if b.end <= offset]

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.log.leader_epoch_cache.end_offset_for(epoch)


def truncate_by_leader_epoch(follower, leader) -> None:
    """The fetcher's rounds of OffsetsForLeaderEpoch (broker/fetcher.py ``_apply_truncation``)."""
    for _ in range(100):
        entries = follower.entries()
        if not entries:
            assert follower.leo() == 0, "a replica with data lost its whole epoch history"
            return
        leader_epoch, leader_end = leader.end_offset_for(entries[-1][0])
        leo = follower.leo()
        # (the leader has the newest epoch: it knows every epoch the follower has)
        assert leader_end != UNDEFINED_EPOCH_OFFSET, (follower.entries()[-3:], leader.entries()[-3:])
        if leader_epoch == UNDEFINED_EPOCH:
            target, done = min(leader_end, leo), True
        else:
            follower_epoch, follower_end = follower.end_offset_for(leader_epoch)
            if follower_epoch == UNDEFINED_EPOCH:
                target, done = min(leader_end, leo), True
            elif follower_epoch != leader_epoch:
                target, done = follower_end, False
            else:
                target, done = min(leader_end, follower_end), True
        if target < leo:
            follower.truncate(target)
        if done:
            return
    raise AssertionError("truncation did not converge")


def test_sigkill_after_leader_changes_keeps_the_epoch_cache_and_truncation_converges(tmp_path):
    seed = int(os.environ.get("EPOCH_CRASH_SEED") or int.from_bytes(os.urandom(2), "big"))
    try:
        run_scenario(tmp_path, seed)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} (EPOCH_CRASH_SEED={seed} repeats it): {exc}") from exc


def run_scenario(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    a = ChildReplica(tmp_path / "a")
    b = LocalReplica(tmp_path / "b")
    try:
        def maybe_kill() -> None:
            if rng.random() < 0.08:
                a.kill_and_restart()
                if leader is a:  # the controller's LeaderAndIsr makes the restarted broker lead again
                    a.lead(epoch)

        leader, follower = b, a
        for epoch in range(40):
            if epoch and rng.random() < 0.5:
                leader, follower = follower, leader
            leader.lead(epoch)
            maybe_kill()
            for _ in range(rng.choice((0, 0, 1, 2, 3))):
                leader.append(Batch((leader.leo(), rng.randint(1, 6), epoch)))
                maybe_kill()
            if rng.random() < 0.2:
                a.flush()  # the recovery point moves: recovery no longer sees the older batches
                maybe_kill()
            truncate_by_leader_epoch(follower, leader)
            maybe_kill()
            assert follower.leo() == (follower.batches[-1].end if follower.batches else 0)
            assert follower.batches == leader.batches[:len(follower.batches)], (
                f"epoch {epoch}: the follower's log diverges from the leader's after truncation")
            # The follower copies some of what the leader has (all of it, or leaves a tail behind).
            missing = [batch for batch in leader.batches if batch.end > follower.leo()]
            for batch in missing[:rng.randint(0, len(missing))] if rng.random() < 0.5 else missing:
                follower.append(batch)
            maybe_kill()
        # In the end B leads a last epoch and A follows it completely: same batches, same epochs.
        leader, follower = b, a
        b.lead(40)
        truncate_by_leader_epoch(follower, leader)
        for batch in leader.batches[len(follower.batches):]:
            follower.append(batch)
        a.kill_and_restart()
        assert a.batches == b.batches and a.leo() == b.leo()
        assert [e for e in a.entries() if e[1] < a.leo()] == [e for e in b.entries() if e[1] < b.leo()]
        assert a.kills >= 3, f"only {a.kills} kills"
    finally:
        a.proc.kill()
        a.proc.wait()
    check_consistent(b.log)
