"""The reassignment workload (sim/workload_reassign.py): the actor moves and cancels under the
simulator, the checks hold on main, and each check reports its rule broken."""

from __future__ import annotations

import types

import pytest

import controller.partition_change as partition_change
import controller.replication_control as replication_control
import sim.workload_reassign as workload_reassign
from protocol.errors import ErrorCode
from sim.runner import Options, Simulation, run_seed

SEED = 1  # (no faults: moves completed, one cancelled in flight, one cancelled after its move completed)
OPTIONS = Options(reassign=True, faults=False)


def _problems(result) -> list[str]:
    return [f"{v.check}: {v.detail}" for v in result.violations]


def test_the_actor_moves_and_cancels_and_the_checks_pass():
    result = run_seed(SEED, OPTIONS)
    assert result.ok, _problems(result) + result.tail[-20:]
    stats = result.stats["reassign"]
    assert stats["moves-accepted"] >= 3
    assert stats["reverted"] >= 1  # a cancel that found its move in flight
    assert stats["cancels"] > stats["reverted"]  # and one answered NO_REASSIGNMENT_IN_PROGRESS: it had completed
    assert stats["seen-done"] >= 1  # moves seen in flight, then finished
    assert stats["verified"] >= 3  # partitions checked against where their moves put them, read from there


def _plan(seed: int, **options) -> workload_reassign.ReassignPlan:
    stub = types.SimpleNamespace(seed=seed, options=Options(**options))
    stub.rng_for = lambda name: Simulation.rng_for(stub, name)  # type: ignore[arg-type]
    return workload_reassign.plan(stub)


def test_the_seed_picks_the_workload_from_its_own_prng_and_runs_four_brokers(tmp_path):
    picked = [s for s in range(1, 41) if _plan(s).enabled]
    assert 10 <= len(picked) <= 30
    assert _plan(picked[0]).brokers == 4 and _plan(picked[0], reassign=False).brokers == 3
    other = next(s for s in range(1, 41) if s not in picked)
    assert _plan(other).brokers == 3 and _plan(other, reassign=True).brokers == 4
    sim = Simulation(picked[0], root=tmp_path)
    try:
        assert sim.reassign.enabled and len(sim.cluster.brokers) == 4
    finally:
        sim.loop.close()


def test_a_wrong_end_of_a_move_is_reported(monkeypatch):
    monkeypatch.setattr(workload_reassign, "WRONG_EXPECTATION", True)
    result = run_seed(SEED, OPTIONS)
    assert "reassignment" in {v.check for v in result.violations}, _problems(result)


def test_a_cancel_that_does_not_revert_is_reported(monkeypatch):
    """The controller answers a cancel NONE but lets the move go on: the partition ends on the
    target, not where the move started."""
    def cancel_without_revert(self, info, pid, part, records):
        if not part.is_reassigning:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
        return ErrorCode.NONE, None
    monkeypatch.setattr(replication_control.ReplicationControlManager, "_cancel_reassignment", cancel_without_revert)
    result = run_seed(SEED, OPTIONS)
    found = [v for v in result.violations if v.check == "reassignment"]
    assert found and "ends on replicas" in found[0].detail, _problems(result)


def test_a_move_that_never_completes_is_reported(monkeypatch):
    """The controller never completes a move (its adding replicas all in the ISR): still moving
    when the liveness phase ends."""
    monkeypatch.setattr(partition_change, "completed_reassignment", lambda *args, **kwargs: None)
    result = run_seed(SEED, OPTIONS)
    found = [v for v in result.violations if v.check == "liveness"]
    assert found and "still being reassigned" in found[0].detail, _problems(result)


@pytest.mark.parametrize("seed", [SEED])
def test_the_workload_replays_bit_for_bit(seed):
    options = Options(reassign=True)
    assert run_seed(seed, options).trace_hash == run_seed(seed, options).trace_hash
