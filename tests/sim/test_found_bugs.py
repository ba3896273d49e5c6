"""Bugs the simulator found in main (issue 28), each fixed, each seed run again here.

A seed replays the scenario of the commit that fixed its bug; a later change of the scenario
(the workload, the faults, their draws) can move the bug to other seeds, so each fix also has
a test of its own next to the code (named below). Seed 13, with every fault on, replayed
differently under two PYTHONHASHSEED values (metadata refreshes listed topics in set order):
tests/sim/test_determinism.py runs it under two hash seeds."""

from __future__ import annotations

from sim.runner import Options, run_seed


def _clean(seed: int, options: Options | None = None) -> None:
    result = run_seed(seed, options)
    assert not result.violations, [f"{v.check}: {v.detail}" for v in result.violations] + result.tail[-20:]


def test_seed_1_an_idempotent_producer_resent_batches_under_a_new_producer_id():
    """Seed 1: a batch sent under a producer id, whose answer never came, was sent again under the
    next producer id (taken after another partition's batch failed) and written twice
    (protocol/client/producer.py now fails such a batch, as Java's producer does)."""
    _clean(1)


def test_seed_2_a_group_member_without_an_assignment_spun_until_its_poll_deadline():
    """Seed 2, with no simulated CPU time per callback: GroupConsumer.getmany rounded a wait of
    less than a millisecond down to 0 and slept 0 ms in a loop until the deadline passed: a busy
    wait, a livelock on a clock that only moves when something waits (the wait is rounded up)."""
    _clean(2, Options(step_seconds=0.0))
