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


def test_seed_24_a_restarted_broker_applied_the_full_state_of_its_previous_registration():
    """Seed 24: the controller, back after a crash, sent a restarted broker the full state of its
    earlier registration before the broker had registered again; not knowing its epoch yet, the
    broker applied it and led a partition at an old leader epoch with a log a power loss had
    emptied (tests/broker/test_apis.py::test_control_requests_before_the_registration_wait_for_the_broker_epoch)."""
    _clean(24)


def test_seed_98_a_deleted_topic_stayed_on_a_broker_cut_off_from_the_controller():
    """Seed 98: the StopReplica of a deleted topic never reached a broker partitioned from the
    controller, then restarted; its full state did not delete what it omitted and the log stayed
    (tests/broker/test_apis.py::test_a_full_leader_and_isr_deletes_the_partitions_it_does_not_list)."""
    _clean(98)
