"""sim/checks.py's instrumentation: which changes mark a partition for checking."""

from __future__ import annotations

import weakref

from protocol.clock import MockTime
from protocol.records import Record, build_batch
from sim.checks import Checker
from storage.log import Log, LogConfig


class _Partition:
    """What the high watermark hook reads of the Partition that last took a log on."""

    def __init__(self, log: Log, is_leader: bool) -> None:
        self.log = log
        self.is_leader = is_leader


def test_a_followers_high_watermark_moves_are_not_checked_a_leaders_are(tmp_path):
    """Every fetch answer moves a follower's HW, which no check reads: such a move marks
    nothing. A leader's move, a log never seen under make_leader/make_follower, and a log its
    partition no longer holds are marked."""
    log = Log.open(tmp_path / "t-0", LogConfig(), time=MockTime())
    log.append_as_leader(build_batch([Record(timestamp=0, key=None, value=b"v")] * 10), 0)
    checker = Checker(sim=None)
    checker.install()
    try:
        def moved_to(hw: int) -> bool:
            checker.dirty.clear()
            log.update_high_watermark(hw)
            assert log.high_watermark == hw
            return ("t", 0) in checker.dirty

        assert moved_to(1)  # never seen: counts as a leader's
        follower = _Partition(log, is_leader=False)
        log._sim_partition = weakref.ref(follower)
        assert not moved_to(2)
        follower.is_leader = True  # (what make_leader makes it)
        assert moved_to(3)
        follower.is_leader = False
        assert not moved_to(4)
        assert not moved_to(4)  # (unmoved: nothing either way)
        follower.log = None  # the partition let the log go (a deletion, a replica moved away)
        assert moved_to(5)
        del follower  # gone: the log counts as a leader's again
        assert moved_to(6)
    finally:
        checker.uninstall()
        log.close()
