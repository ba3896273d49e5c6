"""One Spark task drives many recorded connections at once (issue 29: a local[2] replay of 10
connections used to run them one after another). engine.run_many on a real 3-broker cluster:
every connection prepares, then all send together, so their send phases overlap; and the plan
says before starting when it cannot reach the recorded concurrency."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadgen import engine
from loadgen.recording import connection_ids, read_connection
from loadgen.replay import plan_text
from loadgen.synth import synthesize
from protocol.client import KafkaClient


def test_the_plan_warns_when_tasks_would_wait_for_slots():
    assert "WARNING" not in plan_text(10, 1, 2, 2, 5)
    assert "11 at most per task" not in plan_text(10, 1, 2, 2, 5) and "6 at most per task" in plan_text(10, 1, 2, 2, 5)
    warned = plan_text(10, 1, 4, 2, 5)
    assert "WARNING: 4 tasks on 2 slots" in warned and "--tasks 2" in warned


def test_one_task_sends_on_every_connection_at_once(cluster, tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text("name: conc\ntopics: 1\npartitionsPerTopic: 2\nmessageSize: 100\nproducersPerTopic: 2\n"
                        "producerRate: 2000\nbatchSize: 4096\nacks: 1\n")
    recording = tmp_path / "rec"
    synthesize(workload, recording, duration_s=1.5, topic_prefix="conc")

    async def create() -> None:
        async with KafkaClient(cluster.bootstrap, client_id="test") as client:
            await client.create_topics([("conc-0000", 2, 1, None)])
    asyncio.run(create())
    rows = [[(r["send_time_us"], r["api_version"], r["frame"]) for r in read_connection(recording, cid).to_pylist()]
            for cid in connection_ids(recording)]
    assert len(rows) == 2
    params = engine.Params(bootstrap=cluster.bootstrap, speed=1.0, depth=5, job_start=time.time())
    # scale 3: 6 connections in one task (one event loop), as one Spark task of a local[2] replay
    results = engine.run_many(params, [(r, copy) for copy in range(3) for r in rows], [])
    assert len(results) == 6
    totals = [r["totals"] for r in results]
    assert all(r["errors"] == {} for r in results), [r["errors"] for r in results]
    recorded = sum(len(r) for r in rows)
    assert sum(t["requests"] for t in totals) == 3 * recorded, totals
    # Every connection was still sending when the last one started: they ran at once, paced over
    # the recording's 1.5 s each, not one after another (which would take 6 x 1.5 s, with no overlap).
    assert max(t["send_start_min"] for t in totals) < min(t["send_end_max"] for t in totals), totals
    # The task's CPU is counted once, from the common start.
    assert sum(1 for t in totals if "send_cpu_s" in t) == 1
    # ... and so are the task's own send phase (from its connections' common start, paced over the
    # recording's 1.5 s) and CPU, which bench/loadgen_bench.py divides to see whether one task's
    # event loop saturates.
    first = totals[0]
    assert first["task_start_max"] == min(t["send_start_min"] for t in totals)
    assert first["task_send_s_max"] == max(t["send_end_max"] for t in totals) - first["task_start_max"] >= 1.4
    assert 0 < first["task_cpu_s_max"] == first["send_cpu_s"]


def test_tasks_start_sending_together_after_the_barrier(cluster, tmp_path):
    """Spark's tasks prepare their frames at different speeds (shuffle read, decoding: seconds
    apart on a loaded machine), and a task that starts late stretches the replay's send phase
    (issue 29, the replay x20 at 0.71 of the asked rate). A task meets the others at the barrier
    once its connections have prepared, and sends only after it; a task without producers
    meets them too (Spark wants every task of a barrier stage at each barrier)."""
    workload = tmp_path / "w.yaml"
    workload.write_text("name: bar\ntopics: 1\npartitionsPerTopic: 2\nmessageSize: 100\nproducersPerTopic: 2\n"
                        "producerRate: 2000\nbatchSize: 4096\nacks: 1\n")
    recording = tmp_path / "rec"
    synthesize(workload, recording, duration_s=0.5, topic_prefix="bar")

    async def create() -> None:
        async with KafkaClient(cluster.bootstrap, client_id="test") as client:
            await client.create_topics([("bar-0000", 2, 1, None)])
    asyncio.run(create())
    rows = [[(r["send_time_us"], r["api_version"], r["frame"]) for r in read_connection(recording, cid).to_pylist()]
            for cid in connection_ids(recording)]
    released: list[float] = []

    def barrier() -> None:
        time.sleep(1.0)  # the other task still prepares
        released.append(time.time())
    params = engine.Params(bootstrap=cluster.bootstrap, speed=1.0, depth=5, job_start=time.time())
    results = engine.run_many(params, [(r, 0) for r in rows], [], barrier)
    assert len(released) == 1
    assert all(r["errors"] == {} for r in results), [r["errors"] for r in results]
    assert min(r["totals"]["send_start_min"] for r in results) >= released[0]
    calls: list[int] = []
    assert engine.run_many(params, [], [], lambda: calls.append(1)) == []
    assert calls == [1]


def test_common_start_is_the_last_arrival_past_sparks_release_tick():
    """Spark's barrier releases each task at its next 1 s tick after the last one arrived (the
    replay's tasks started ~1 s apart, its paced rate 0.95 of the asked): every task waits
    for the same instant instead, the latest arrival plus that tick and a margin."""
    clock = iter([100.0, 100.5])  # arriving, then released (after the last arrival)
    gathered: list[str] = []
    slept: list[float] = []

    def all_gather(message: str) -> list[str]:
        gathered.append(message)
        return [message, "100.4"]  # the other task arrived later
    start = engine.common_start(all_gather, now=lambda: next(clock), sleep=slept.append)
    assert gathered == [repr(100.0)]
    assert start == 100.4 + engine.BARRIER_TICK_S + engine.START_MARGIN_S
    assert slept == [pytest.approx(start - 100.5)]
    # released past it (a task held up): it starts at once
    clock = iter([100.0, 102.0])
    slept.clear()
    assert engine.common_start(lambda m: [m, "100.4"], now=lambda: next(clock), sleep=slept.append) < 102.0
    assert slept == []
    # another machine's clock far ahead: never longer than the tick and the margin
    clock = iter([100.0, 100.0])
    engine.common_start(lambda m: [m, "160.0"], now=lambda: next(clock), sleep=slept.append)
    assert slept == [engine.BARRIER_TICK_S + engine.START_MARGIN_S]


def test_a_barrier_stages_tasks_agree_on_their_start(spark):
    """On Spark itself: a barrier stage of two tasks on local[2], one arriving 0.5 s after the
    other, both start at one instant, and leave together (Spark alone releases them ~0.5 s
    apart here: each at its own next 1 s tick)."""
    def task(index, _items):
        from pyspark import BarrierTaskContext

        if index == 1:
            time.sleep(0.5)
        start = engine.common_start(BarrierTaskContext.get().allGather)
        return [(index, start, time.time())]
    out = spark.sparkContext.parallelize(range(2), 2).barrier().mapPartitionsWithIndex(task).collect()
    assert sorted(i for i, _, _ in out) == [0, 1]
    assert len({start for _, start, _ in out}) == 1, out
    assert all(left >= start for _, start, left in out), out
    assert max(left for *_, left in out) - min(left for *_, left in out) < 0.3, out


def test_a_consumer_waits_while_its_task_still_produces(cluster):
    """A consumer sharing its task's event loop with producers: on a loaded machine they can
    hold the loop past the idle timeout, so idleness only counts once they are done (a replay
    against tansu, in the full suite, stopped its consumer 3 records short)."""
    from protocol.records import Record, build_batch

    topic = "idle-while-producing"

    async def main() -> dict:
        async with KafkaClient(cluster.bootstrap, client_id="test") as client:
            await client.create_topics([(topic, 1, 1, None)])
            await client.refresh_metadata([topic])
            producing = [True]
            consumer = asyncio.create_task(engine.consume(
                engine.Params(bootstrap=cluster.bootstrap), {(topic, 0): 0}, 5, idle_s=0.3,
                producing=lambda: producing[0]))
            await asyncio.sleep(1.5)  # a producer on the loop, still preparing: nothing sent yet
            conn = await client.connection(client.cluster.leader(topic, 0))
            batch = bytes(build_batch([Record(value=b"v", timestamp=int(time.time() * 1000))] * 5))
            await conn.produce(1, 5000, [(topic, [(0, batch)])])
            producing[0] = False
            return await asyncio.wait_for(consumer, 60)
    assert asyncio.run(main())["totals"]["consumed"] == 5
