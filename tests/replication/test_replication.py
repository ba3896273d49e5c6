"""Replication acceptance: three broker processes on 127.0.0.1; the test is the controller."""

from __future__ import annotations

import asyncio
import signal

import pytest
from aiokafka import AIOKafkaProducer

from protocol.errors import ErrorCode
from protocol.records import Record, build_batch, iter_batch_headers

from .cluster import Cluster, PartitionAssignment, log_bytes

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
async def cluster(broker_process, request):
    overrides = getattr(request, "param", {})
    c = Cluster(broker_process, **{"min_insync_replicas": 2, **overrides}).start()
    yield c
    await c.close()


def rep(leader=1, epoch=0, isr=(1, 2, 3), replicas=(1, 2, 3), topic="rep", partition=0, **kw):
    return PartitionAssignment(topic, partition, leader, epoch, list(isr), list(replicas), **kw)


async def produce_raw(cluster, broker_id, topic, values, acks=-1, timeout_ms=5000):
    """One Produce request with one batch; returns (error, base_offset)."""
    batch = build_batch([Record(value=v, timestamp=1_700_000_000_000 + i) for i, v in enumerate(values)])
    conn = await cluster.conn(broker_id)
    [(_t, [(_p, error, base, _lat, _lso)])] = await conn.produce(acks, timeout_ms, [(topic, [(0, batch)])])
    return error, base


async def test_rf3_acks_all_100k_records_identical_logs_and_no_read_above_hw(cluster):
    a = rep()
    await cluster.assign([a])
    n = 100_000
    bootstrap = cluster.processes[1].bootstrap
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=16384)
    await producer.start()
    violations: list[tuple[int, int]] = []
    seen_offsets = 0
    done = asyncio.Event()

    async def watch_consumer_view():
        nonlocal seen_offsets
        offset = 0
        while not done.is_set():
            pd = await cluster.fetch_as_consumer(1, "rep", 0, offset)
            assert pd.error_code == 0, pd.error_code
            for _pos, h in iter_batch_headers(pd.records or b""):
                if h.last_offset >= pd.high_watermark:
                    violations.append((h.last_offset, pd.high_watermark))
                offset = h.next_offset
            seen_offsets = offset

    watcher = asyncio.create_task(watch_consumer_view())
    try:
        futures = [await producer.send("rep", value=f"v{i}".encode()) for i in range(n)]
        results = await asyncio.gather(*futures)
    finally:
        await producer.stop()
        done.set()
        await watcher
    assert sorted(r.offset for r in results) == list(range(n))
    assert violations == []
    assert seen_offsets > 0
    assert await cluster.wait_replicas_caught_up("rep", 0, [1, 2, 3]) == n
    leader_bytes = log_bytes(cluster.processes[1], "rep", 0)
    assert log_bytes(cluster.processes[2], "rep", 0) == leader_bytes
    assert log_bytes(cluster.processes[3], "rep", 0) == leader_bytes


@pytest.mark.parametrize("cluster", [{"replica_lag_time_max_ms": 1500}], indirect=True)
async def test_isr_shrinks_and_grows_back_around_stopped_followers(cluster):
    await cluster.assign([rep()])
    assert (await produce_raw(cluster, 1, "rep", [b"a"] * 10))[0] == ErrorCode.NONE
    await cluster.wait_replicas_caught_up("rep", 0, [1, 2, 3])
    b3 = cluster.processes[3]
    b3.signal(signal.SIGSTOP)
    try:
        # A stopped follower that has everything is not lagging (Kafka's isCaughtUp); new data
        # that it does not fetch makes it lag.
        assert (await produce_raw(cluster, 1, "rep", [b"b"] * 10, acks=1))[0] == ErrorCode.NONE
        await cluster.wait_for(lambda: _isr_is(cluster, [1, 2]), 20, "ISR to drop broker 3")
        error, base = await produce_raw(cluster, 1, "rep", [b"c"] * 10)
        assert (error, base) == (ErrorCode.NONE, 20)  # acks=all goes on with ISR [1, 2]
        b2 = cluster.processes[2]
        b2.signal(signal.SIGSTOP)
        try:
            assert (await produce_raw(cluster, 1, "rep", [b"d"] * 5, acks=1))[0] == ErrorCode.NONE
            await cluster.wait_for(lambda: _isr_is(cluster, [1]), 20, "ISR to drop broker 2")
            error, _ = await produce_raw(cluster, 1, "rep", [b"e"] * 10)
            assert error == ErrorCode.NOT_ENOUGH_REPLICAS  # min.insync.replicas=2
        finally:
            b2.signal(signal.SIGCONT)
    finally:
        b3.signal(signal.SIGCONT)
    await cluster.wait_for(lambda: _isr_is(cluster, [1, 2, 3]), 30, "followers to rejoin the ISR")
    assert await cluster.wait_replicas_caught_up("rep", 0, [1, 2, 3]) == 35
    error, base = await produce_raw(cluster, 1, "rep", [b"f"] * 10)
    assert (error, base) == (ErrorCode.NONE, 35)


async def _isr_is(cluster, expected):
    return await cluster.isr(1, "rep", 0) == expected


async def test_leadership_moves_and_the_old_leader_truncates_its_divergent_tail(cluster):
    await cluster.assign([rep()])
    assert await produce_raw(cluster, 1, "rep", [b"committed"] * 100) == (ErrorCode.NONE, 0)
    await cluster.wait_replicas_caught_up("rep", 0, [1, 2, 3])
    # The followers stop replicating; the old leader takes acks=1 writes nobody else has.
    for b in (2, 3):
        resp = await cluster.stop_replica(b, "rep", 0, leader_epoch=0)
        assert resp.error_code == 0 and resp.partition_errors[0].error_code == 0
    assert await produce_raw(cluster, 1, "rep", [b"divergent"] * 7, acks=1) == (ErrorCode.NONE, 100)
    assert await cluster.log_end_offset(1, "rep", 0) == 107
    assert await cluster.log_end_offset(2, "rep", 0) == 100
    # New leader at epoch 1: broker 2, ISR [2, 3]. The old leader is told last.
    new = rep(leader=2, epoch=1, isr=(2, 3), partition_epoch=1)
    await cluster.update_metadata([new])
    for b in (2, 3):
        assert (await cluster.leader_and_isr([new], to=[b]))[b].error_code == 0
    assert await produce_raw(cluster, 2, "rep", [b"after"] * 20) == (ErrorCode.NONE, 100)
    assert (await cluster.leader_and_isr([new], to=[1]))[1].error_code == 0
    assert await cluster.wait_replicas_caught_up("rep", 0, [1, 2, 3]) == 120
    logs = [log_bytes(cluster.processes[b], "rep", 0) for b in (1, 2, 3)]
    assert logs[0] == logs[1] == logs[2]
    values = [h for _p, h in iter_batch_headers(logs[0])]
    assert [(h.base_offset, h.records_count, h.partition_leader_epoch) for h in values] == [(0, 100, 0), (100, 20, 1)]
    assert b"divergent" not in logs[0]


async def test_stale_controller_epoch_and_stale_leader_epoch_change_nothing(cluster):
    await cluster.assign([rep(epoch=3)])
    cluster.controller_epoch = 5
    await cluster.update_metadata([rep(epoch=3)])
    # An older controller tries to move leadership: rejected as a whole.
    stale = await cluster.leader_and_isr([rep(leader=2, epoch=9)], to=[1, 2], controller_epoch=4)
    assert all(r.error_code == ErrorCode.STALE_CONTROLLER_EPOCH for r in stale.values())
    # The current controller with a leader epoch that is not newer: that partition is skipped.
    same = await cluster.leader_and_isr([rep(leader=2, epoch=3)], to=[1, 2])
    for r in same.values():
        assert r.error_code == 0
        assert r.topics[0].partition_errors[0].error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    # Nothing changed: broker 1 still leads at epoch 3 and broker 2 still follows it.
    assert await produce_raw(cluster, 1, "rep", [b"x"] * 3) == (ErrorCode.NONE, 0)
    assert (await produce_raw(cluster, 2, "rep", [b"x"]))[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert await cluster.wait_replicas_caught_up("rep", 0, [1, 2, 3]) == 3
    stale_md = await cluster.update_metadata([rep(leader=2, epoch=9)], to=[1])
    assert stale_md == [0]  # same controller epoch is accepted...
    cluster.controller_epoch = 2
    assert await cluster.update_metadata([rep(leader=3, epoch=10)], to=[1]) == [ErrorCode.STALE_CONTROLLER_EPOCH]


async def test_acks_all_times_out_while_the_isr_lists_a_stopped_follower(cluster):
    await cluster.assign([rep()])
    assert (await produce_raw(cluster, 1, "rep", [b"a"]))[0] == ErrorCode.NONE
    b3 = cluster.processes[3]
    b3.signal(signal.SIGSTOP)
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        error, _ = await produce_raw(cluster, 1, "rep", [b"b"] * 5, timeout_ms=1500)
        elapsed = loop.time() - start
        assert error == ErrorCode.REQUEST_TIMED_OUT
        assert 1.4 <= elapsed < 10, elapsed
        assert await cluster.isr(1, "rep", 0) == [1, 2, 3]  # 30 s lag time: nobody left the ISR yet
    finally:
        b3.signal(signal.SIGCONT)


async def test_a_restarted_broker_serves_again_only_after_leader_and_isr(cluster):
    a = rep()
    await cluster.assign([a])
    assert (await produce_raw(cluster, 1, "rep", [b"a"] * 50))[0] == ErrorCode.NONE
    await cluster.wait_replicas_caught_up("rep", 0, [1, 2, 3])
    b1 = cluster.processes[1]
    assert b1.stop() == 0
    cluster.drop_conn(1)
    b1.start()
    error, _ = await produce_raw(cluster, 1, "rep", [b"b"])
    assert error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    await cluster.update_metadata([a], to=[1])
    cluster.controller_epoch = 2
    b = rep(epoch=1, partition_epoch=1)
    await cluster.assign([b])
    assert await produce_raw(cluster, 1, "rep", [b"c"] * 5) == (ErrorCode.NONE, 50)
    assert await cluster.wait_replicas_caught_up("rep", 0, [1, 2, 3]) == 55
