"""sim/loop.py: simulated time, one FIFO queue per process, a seeded choice between them."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from protocol.client import sleep
from sim.loop import BUSY_STEPS, PROCESS, Process, SimLoop, SimTime, SimulationStuck


def run(loop: SimLoop, coro):
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_an_hour_of_timers_takes_no_real_time():
    loop = SimLoop(random.Random(1))
    sim_time = SimTime(loop)
    woke = []

    async def main():
        await asyncio.sleep(3600)
        woke.append(loop.time())
        await sleep(sim_time, 1500)  # the injected clock's sleep, on the loop
        woke.append(sim_time.monotonic_ms())

    started = time.monotonic()
    run(loop, main())
    assert time.monotonic() - started < 1.0
    assert 3600 <= woke[0] < 3600.001
    assert 3601500 <= woke[1] < 3601501


def _interleaving(seed: int) -> list[str]:
    loop = SimLoop(random.Random(seed))
    order: list[str] = []
    for name in ("a", "b", "c"):
        process = Process(name, name, 1)
        for i in range(20):
            loop.call_soon(order.append, f"{name}{i}", context=process.context())

    async def main():
        while len(order) < 60:
            await asyncio.sleep(0.001)
    run(loop, main())
    return order


def test_each_process_keeps_its_order_and_the_seed_picks_the_interleaving():
    order = _interleaving(1)
    for name in "abc":
        mine = [x for x in order if x[0] == name]
        assert mine == [f"{name}{i}" for i in range(20)]  # asyncio's FIFO within a process
    assert order == _interleaving(1)  # the same seed, the same interleaving
    assert any(_interleaving(seed) != order for seed in range(2, 6))  # another seed, another one
    assert order != sorted(order, key=lambda x: (x[0], int(x[1:])))  # interleaved, not one after the other


def test_a_killed_process_never_runs_again():
    loop = SimLoop(random.Random(3))
    process = Process("p", "m", 1)
    ran = []

    async def tick():
        while True:
            ran.append(loop.time())
            await asyncio.sleep(1)

    async def main():
        loop.create_task(tick(), context=process.context())
        loop.call_later(10.5, ran.append, "late", context=process.context())
        await asyncio.sleep(3.5)
        loop.kill(process)
        await asyncio.sleep(20)

    run(loop, main())
    assert "late" not in ran and len(ran) == 4 and ran[-1] < 3.5


def test_executor_work_runs_inline_as_the_calling_process_later():
    loop = SimLoop(random.Random(4))
    process = Process("p", "m", 1)

    async def work():
        return await loop.run_in_executor(None, lambda: (loop.time(), asyncio.current_task() is None))

    async def main():
        before = loop.time()
        when, _ = await loop.create_task(work(), context=process.context())
        assert when > before
        return when

    assert run(loop, main()) > 0


def test_a_loop_that_never_waits_is_a_livelock():
    loop = SimLoop(random.Random(5))
    loop.step_seconds = 0.0

    async def spin():
        while True:
            await asyncio.sleep(0)

    with pytest.raises(SimulationStuck, match="livelock"):
        run(loop, spin())
    assert BUSY_STEPS >= 100_000


def test_a_paused_process_waits_and_keeps_its_order():
    loop = SimLoop(random.Random(6))
    paused = Process("slow", "m", 1)
    other = Process("fast", "n", 1)
    seen = []
    loop.pause(paused, 2.0)
    for i in range(3):
        loop.call_soon(seen.append, ("slow", i, loop.time()), context=paused.context())
    loop.call_soon(lambda: seen.append(("fast", 0, loop.time())), context=other.context())

    async def main():
        await asyncio.sleep(5)
    run(loop, main())
    assert [s[:2] for s in seen] == [("fast", 0), ("slow", 0), ("slow", 1), ("slow", 2)]


def test_a_killed_process_runs_no_clean_up_code_before_the_run_is_over():
    """A killed process's task, referenced by nothing but its own cycle (a future that only a
    dropped timer would have set), is finalized by the collector; closing its coroutine runs
    its finally blocks. A kill -9 runs none: the loop keeps the task until discard_all."""
    import gc
    loop = SimLoop(random.Random(1))
    process = Process("broker-1", "broker-1", 1)
    cleaned_up = []

    async def server():
        try:
            await loop.create_future()
        finally:
            cleaned_up.append(PROCESS.get())

    async def main():
        loop.create_task(server(), context=process.context())
        await asyncio.sleep(0.01)
        loop.kill(process)
        gc.collect()
        await asyncio.sleep(0.01)
        gc.collect()

    try:
        loop.run_until_complete(main())
        assert cleaned_up == []
        loop.discard_all()
        gc.collect()
        assert len(cleaned_up) == 1  # (after the run: Simulation._finalize)
    finally:
        loop.close()


@pytest.mark.parametrize("after_s", [0.0002, 0.0008])
def test_a_controller_killed_during_its_start_runs_nothing_after_and_closes_no_descriptor(after_s, monkeypatch):
    """Killed 0.2 ms into its start, the controller's startup coroutine was finalized after
    the run (its ``except BaseException`` closing the metadata store: "closing the metadata log
    failed: [Errno 9] Bad file descriptor" on stderr, a close(2) of a number the disk's crash
    had closed); killed 0.8 ms in, it was finalized during the run, as whatever process ran,
    and the dead incarnation's failure was reported as the new one's (a node-starts
    violation). Now nothing runs before the run is over, and then the store's clean-up is
    refused every descriptor (EBADF) without a system call."""
    from controller.metadata_store import LocalMetadataStore
    from sim.runner import Options, Simulation
    real_close = LocalMetadataStore.close
    closes: list[tuple[object, str]] = []

    def close(store):
        try:
            real_close(store)
        except OSError as exc:
            closes.append((PROCESS.get(), str(exc)))
            raise
        closes.append((PROCESS.get(), "ok"))
    monkeypatch.setattr(LocalMetadataStore, "close", close)

    class KilledDuringStart(Simulation):
        async def _main(self):
            node = self.cluster.controller
            node.start()
            await asyncio.sleep(after_s)
            assert not node.ready
            node.crash(power_loss=False)
            node.start()
            assert await self.wait_for(lambda: node.ready, 30)
            self.closes_during_run = list(closes)

    sim = KilledDuringStart(1, Options())
    result = sim.run()
    assert result.violations == []
    assert sim.closes_during_run == []  # (the live incarnation's store is not closed: the run ends with it up)
    for process, outcome in closes:  # finalized after the run, with every descriptor closed before
        assert process is None and "not open" in outcome, closes  # ("ok": it reached a descriptor)


def test_a_killed_task_finalized_after_the_run_finds_the_disk_sealed(monkeypatch):
    """A killed process's task whose wake-up was queued when it died is held only by the loop
    (queues, graveyard): it is finalized when the run drops them, and its clean-up (``finally``)
    runs then. The simulated disk is closed and sealed before that: the clean-up's open by
    path (an index persisted on close) is refused, never reaching a live incarnation's file."""
    import os

    from sim.runner import Options, Simulation
    from storage import fileio
    outcomes: list[str] = []

    class KilledWithAWakeUpQueued(Simulation):
        async def _main(self):
            ghost = Process("ghost", "ghost", 1)
            woken = asyncio.get_running_loop().create_future()
            path = os.path.join(str(self.root), "ghost", "cleanup")

            async def holds_a_file():
                try:
                    await woken
                finally:
                    try:
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        fd = fileio.open(path, os.O_CREAT | os.O_RDWR)
                    except OSError as exc:
                        outcomes.append(str(exc))
                    else:
                        fileio.close(fd)
                        outcomes.append("opened")
            asyncio.get_running_loop().create_task(holds_a_file(), context=ghost.context())
            await asyncio.sleep(0.001)
            woken.set_result(None)  # its wake-up queued ...
            asyncio.get_running_loop().kill(ghost)  # ... and the process killed before it runs
            await asyncio.sleep(0.001)
            assert outcomes == []  # nothing of a dead process runs during the run

    result = KilledWithAWakeUpQueued(1, Options()).run()
    assert result.violations == []
    assert len(outcomes) == 1 and "sealed" in outcomes[0], outcomes


def test_cancelled_timers_are_dropped_together_and_the_others_come_due_in_order():
    """Most of a run's timers are cancelled (request timeouts): once they are most of the heap,
    and more than a few, they leave it together (a smaller heap is cheaper to push and pop);
    the others still come due by time, and in the order they were scheduled at the same time."""
    loop = SimLoop(random.Random(3))
    fired: list[tuple[float, int]] = []
    scheduled = [((i % 7) * 0.5, i) for i in range(600)]  # (many due at the same time)
    handles = [loop.call_at(when, fired.append, (when, i)) for when, i in scheduled]
    for i, handle in enumerate(handles):
        if i % 3:
            handle.cancel()
    # Dropped at the 301st cancel (all but that one: a handle is marked cancelled after the loop
    # hears of it); the 99 since are below half of what is left.
    assert len(loop._timers) == 300

    async def main():
        await asyncio.sleep(10)
    run(loop, main())
    assert fired == sorted(key for key in scheduled if key[1] % 3 == 0)
