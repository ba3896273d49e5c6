"""Issue 28's determinism: each of 20 seeds, with every kind of fault on, run twice — in two
processes with different PYTHONHASHSEED values, so str hashing (set order) differs — gives the
same trace hash; a third run in this process gives it too. A seed's schedule does not depend on
the heap either (what else was allocated before or during the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from protocol.client.consumer import Consumer
from sim.faults import ALL_KINDS as KINDS  # (every fault type, lost-epochs included)
from sim.runner import Options, run_seed

REPO = Path(__file__).resolve().parents[2]
SEEDS = list(range(1, 21))
SCRIPT = """
import json, sys
from sim.runner import Options, run_seed
from sim.faults import ALL_KINDS as KINDS
seeds = json.loads(sys.argv[1])
print(json.dumps({s: run_seed(s, Options(fault_kinds=KINDS)).trace_hash for s in seeds}))
"""


def _hashes_in_a_process(hash_seed: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, json.dumps(SEEDS)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_twenty_seeds_with_every_fault_replay_bit_for_bit_under_two_hash_seeds():
    runs = [_hashes_in_a_process("1"), _hashes_in_a_process("4242")]
    outputs = []
    for proc in runs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        outputs.append({int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()})
    first, second = outputs
    assert first == second
    assert len(set(first.values())) == len(SEEDS)  # (each seed its own run)
    for seed in SEEDS[:3]:
        assert run_seed(seed, Options(fault_kinds=KINDS)).trace_hash == first[seed]


def test_kbroker_sim_seed_trace_prints_the_same_trace_twice_under_two_hash_seeds():
    """``kbroker sim --seed S --trace`` (here ``python -m sim``, the same entry): every printed
    event, the processes' log lines included, is the same in two processes with different
    PYTHONHASHSEED values; only the closing line's CPU seconds may differ."""
    outputs = []
    for hash_seed in ("7", "31337"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)}
        proc = subprocess.run([sys.executable, "-m", "sim", "--seed", "5", "--trace"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        lines = proc.stdout.splitlines()
        assert lines[-1].startswith("seed 5: trace ")
        outputs.append((lines[:-1], lines[-1].split(",")[0]))
    assert outputs[0] == outputs[1]
    assert len(outputs[0][0]) > 1000  # (the events were printed)


def test_seed_5541_replays_whatever_else_the_heap_holds(monkeypatch):
    """A run's schedule must not depend on where objects land in memory. Seed 5541 replayed
    differently when the protocol client's Consumer gained an attribute, under ``--trace``, or
    with a few objects allocated before the run: a broker's clean shutdown force-completed its
    waiting fetches from a set of DelayedOperations, which iterates in the order of their
    addresses, so which client got its answer first changed (broker/purgatory.py complete_all
    now goes in the order they were watched). The cyclic collector is off during a run, so what
    moves addresses is anything allocated, not collected."""
    plain = run_seed(5541).trace_hash
    original = Consumer.__init__

    def with_an_unused_attribute(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.unused = None
    monkeypatch.setattr(Consumer, "__init__", with_an_unused_attribute)
    assert run_seed(5541).trace_hash == plain
    monkeypatch.setattr(Consumer, "__init__", original)
    ballast = [object() for _ in range(10)]
    assert run_seed(5541).trace_hash == plain
    del ballast


def test_a_run_collects_only_what_came_after_the_heap_its_process_started_with():
    """The collection that ends a run (Simulation._finalize) does not scan the heap the
    process's first run found (modules, classes: most of what the collector tracks): that is
    collected once and frozen. Within a run gc.freeze does nothing (a broker's start calls it),
    so everything the run made is scanned, and its garbage collected, at its end.

    What the run made is followed by a weak reference to a cycle, not by the freeze count: the
    count also drops whenever another thread of this process frees a frozen object (the session's
    ThreadedBroker of tests/conftest.py runs beside tests/sim in one pytest process)."""
    import gc
    import weakref

    from sim.runner import Options, Simulation
    gc.unfreeze()  # (as a test of broker/heap.py leaves the heap)
    seen: list = []

    class Cycle:
        pass

    class FreezesDuringTheRun(Simulation):
        async def _main(self):
            seen.append(gc.get_freeze_count())
            cycle = Cycle()
            cycle.me = cycle  # (garbage only a collection frees)
            seen.append(weakref.ref(cycle))
            gc.freeze()  # what KafkaServer's start does

    result = FreezesDuringTheRun(1, Options()).run()
    assert result.violations == []
    frozen, made_in_the_run = seen
    assert frozen > 10_000  # the heap from before the simulation was built
    assert made_in_the_run() is None  # not frozen: collected when the run ended
    assert gc.get_freeze_count() > 10_000  # (and the old heap stays frozen for the next run)
