"""ControllerChannelManager against real listeners (RecordingBroker): merging, order, the epochs
in every request, full-state barriers, and retries with backoff on the injected clock."""

from __future__ import annotations

import asyncio
import uuid

from controller.channel_manager import (ControllerChannelManager, LeaderAndIsrItem, LiveBroker, PartitionState,
                                        StopReplicaItem, UpdateMetadataItem)
from controller.launcher import free_port
from protocol.api_keys import ApiKey
from protocol.client import SYSTEM_TIME
from protocol.clock import MockTime
from protocol.messages import APIS

from .recording_broker import RecordingBroker

TOPIC_ID = uuid.UUID(int=42)


def state(pid, leader=1, epoch=0, replicas=(1, 2)):
    return PartitionState("t", TOPIC_ID, pid, leader, epoch, tuple(replicas), epoch, tuple(replicas))


def um(*pids, configs=None, epoch=0):
    return UpdateMetadataItem({("t", p): state(p, epoch=epoch) for p in pids}, {"t": configs or {}},
                              (LiveBroker(1, (("PLAINTEXT", "127.0.0.1", 9001, 0),), None),))


def lisr(*pids, epoch=0, full=False):
    return LeaderAndIsrItem({("t", p): state(p, epoch=epoch) for p in pids}, {1: ("127.0.0.1", 9001)}, full)


async def test_items_merge_keep_kind_order_and_carry_both_epochs():
    broker = await RecordingBroker(1).start()
    channel = ControllerChannelManager(3000, time=SYSTEM_TIME)
    channel.controller_epoch = 7
    try:
        channel.add_broker(1, 55, "127.0.0.1", broker.port)
        # Queued before the sender runs: consecutive items of one kind become one request.
        channel.enqueue(1, um(0, configs={"retention.ms": "1"}))
        channel.enqueue(1, um(1, epoch=0, configs={"retention.ms": "1"}))
        channel.enqueue(1, um(0, epoch=3, configs={"retention.ms": "2"}))   # each item holds the topic's whole set
        channel.enqueue(1, lisr(0, 1))
        channel.enqueue(1, lisr(1, epoch=4))
        channel.enqueue(1, StopReplicaItem({("t", 0): (-2, True)}))
        channel.enqueue(1, um(2))
        await broker.wait_for(lambda: len(broker.received) == 4, what="4 requests")
        await asyncio.sleep(0.1)
        assert [r.name for r in broker.received] == ["UPDATE_METADATA", "LEADER_AND_ISR", "STOP_REPLICA",
                                                     "UPDATE_METADATA"]
        first = broker.received[0].body
        parts = {p.partition_index: p for p in first.topic_states[0].partition_states}
        assert sorted(parts) == [0, 1] and parts[0].leader_epoch == 3     # the newer state won
        assert [(c.name, c.value) for c in first.topic_states[0].topic_configs] == [("retention.ms", "2")]
        lisr_body = broker.received[1].body
        assert {p.partition_index: p.leader_epoch for p in lisr_body.topic_states[0].partition_states} == {0: 0, 1: 4}
        assert lisr_body.live_leaders[0].broker_id == 1 and lisr_body.type == 1
        for r in broker.received:
            assert (r.body.controller_id, r.body.controller_epoch, r.body.broker_epoch) == (3000, 7, 55)
        assert broker.received[2].body.topic_states[0].partition_states[0].delete_partition is True
        assert channel.is_idle(1)
    finally:
        await channel.close()
        await broker.close()


async def test_full_state_barrier_runs_after_delivery():
    broker = await RecordingBroker(1).start()
    channel = ControllerChannelManager(3000, time=SYSTEM_TIME)
    delivered = asyncio.Event()
    try:
        channel.add_broker(1, 5, "127.0.0.1", broker.port)
        channel.enqueue_full_state(1, um(0), lisr(0, full=True), delivered.set)
        assert not delivered.is_set()
        async with asyncio.timeout(10):
            await delivered.wait()
        assert [r.name for r in broker.received] == ["UPDATE_METADATA", "LEADER_AND_ISR"]
        assert broker.received[1].body.type == 2   # FULL
    finally:
        await channel.close()
        await broker.close()


async def test_retries_with_backoff_on_the_injected_clock():
    time = MockTime()
    port = free_port()
    channel = ControllerChannelManager(3000, time=time, retry_backoff_ms=100, retry_backoff_max_ms=400)
    broker = RecordingBroker(1)
    try:
        channel.add_broker(1, 5, "127.0.0.1", port)
        channel.enqueue(1, um(0))
        for _ in range(50):          # nobody listens: the first attempt fails, then it waits on the clock
            await asyncio.sleep(0.01)
        assert time.pending_timers() == 1 and not channel.is_idle(1)
        channel.enqueue(1, um(1))    # the failed request is in flight: this one queues behind it
        await broker.start(port)
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert broker.received == []  # still waiting for the backoff to pass on the mock clock
        time.sleep(100)
        await broker.wait_for(lambda: len(broker.received) == 2, what="both requests")
        assert [len(r.body.topic_states[0].partition_states) for r in broker.received] == [1, 1]
        await broker.wait_for(lambda: channel.is_idle(1), what="the queue to drain")
    finally:
        await channel.close()
        await broker.close()


async def test_backoff_doubles_up_to_the_maximum():
    time = MockTime()
    channel = ControllerChannelManager(3000, time=time, retry_backoff_ms=100, retry_backoff_max_ms=400)
    waits = []
    real_schedule = time.schedule

    def schedule(delay, cb):
        waits.append(delay)
        return real_schedule(delay, cb)

    time.schedule = schedule
    try:
        channel.add_broker(1, 5, "127.0.0.1", free_port())
        channel.enqueue(1, um(0))
        for _ in range(5):
            for _ in range(30):
                await asyncio.sleep(0.01)
            time.sleep(1000)
        backoffs = [w for w in waits if w in (100, 200, 400)]
        assert backoffs[:5] == [100, 200, 400, 400, 400]
    finally:
        await channel.close()


async def test_a_re_registered_broker_gets_a_fresh_queue_and_unknown_brokers_nothing():
    broker = await RecordingBroker(1).start()
    channel = ControllerChannelManager(3000, time=SYSTEM_TIME)
    try:
        channel.add_broker(1, 5, "127.0.0.1", free_port())   # the old incarnation's address: unreachable
        channel.enqueue(1, um(0))
        channel.add_broker(1, 9, "127.0.0.1", broker.port)   # registered again: old items dropped
        channel.enqueue(1, um(1))
        channel.enqueue(2, um(2))                            # not registered: dropped
        await broker.wait_for(lambda: broker.received, what="a request")
        await asyncio.sleep(0.1)
        [only] = broker.received
        assert only.body.broker_epoch == 9
        assert [p.partition_index for p in only.body.topic_states[0].partition_states] == [1]
        assert channel.brokers() == [1] and channel.is_idle(2)
    finally:
        await channel.close()
        await broker.close()


async def test_versions_are_negotiated_with_the_broker():
    broker = await RecordingBroker(1).start()
    channel = ControllerChannelManager(3000, time=SYSTEM_TIME)
    try:
        channel.add_broker(1, 5, "127.0.0.1", broker.port)
        channel.enqueue(1, um(0))
        channel.enqueue(1, lisr(0))
        channel.enqueue(1, StopReplicaItem({("t", 0): (3, False)}))
        await broker.wait_for(lambda: len(broker.received) == 3, what="3 requests")
        assert {(r.api_key, r.version) for r in broker.received} == {
            (ApiKey.UPDATE_METADATA, 8), (ApiKey.LEADER_AND_ISR, 7), (ApiKey.STOP_REPLICA, 4)}
    finally:
        await channel.close()
        await broker.close()


async def test_a_full_update_metadata_shared_by_brokers_is_encoded_once_with_each_broker_s_epoch():
    """A controller taking over sends every broker the same full UpdateMetadata (every
    partition: tens of thousands of entries, seconds to encode). One item serves all brokers:
    it is encoded once and each broker's request carries that broker's epoch; the bytes are
    those of encoding it for that broker."""
    brokers = [await RecordingBroker(b).start() for b in (1, 2)]
    channel = ControllerChannelManager(3000, time=SYSTEM_TIME)
    channel.controller_epoch = 9
    full = um(0, 1, 2, configs={"retention.ms": "5"})
    full.full = True
    built = []
    real_body = channel.update_metadata_body
    channel.update_metadata_body = lambda item, epoch: (built.append(epoch), real_body(item, epoch))[1]
    try:
        for broker, epoch in zip(brokers, (41, 1 << 40)):
            channel.add_broker(broker.broker_id, epoch, "127.0.0.1", broker.port)
            channel.enqueue(broker.broker_id, full)
        for broker in brokers:
            await broker.wait_for(lambda b=broker: len(b.received) == 1, what="the full UpdateMetadata")
        assert built == [0]  # one encoding, for both
        for broker, epoch in zip(brokers, (41, 1 << 40)):
            [request] = broker.received
            assert request.body.type == 2 and request.body.broker_epoch == epoch
            assert (request.body.controller_id, request.body.controller_epoch) == (3000, 9)
            assert [p.partition_index for p in request.body.topic_states[0].partition_states] == [0, 1, 2]
        for version in (7, 8):
            assert channel._encoded_update_metadata(full, version, -1) == APIS[ApiKey.UPDATE_METADATA].request.build(
                version, real_body(full, -1))
    finally:
        await channel.close()
        for broker in brokers:
            await broker.close()


async def test_security_records_merge_in_order_and_a_full_state_supersedes_them():
    """Records of merged incremental items are all sent, in order; a full state's records
    replace the pending ones, and changes after it are sent behind them."""
    broker = await RecordingBroker(1).start()
    channel = ControllerChannelManager(3000, time=SYSTEM_TIME)
    channel.controller_epoch = 7
    try:
        channel.add_broker(1, 55, "127.0.0.1", broker.port)
        channel.enqueue(1, UpdateMetadataItem(records=(b"a",)))
        channel.enqueue(1, UpdateMetadataItem(records=(b"b", b"c")))
        channel.enqueue(1, lisr(0))
        channel.enqueue(1, UpdateMetadataItem(records=(b"d",)))
        channel.enqueue(1, UpdateMetadataItem(records=(b"all",), full=True))
        channel.enqueue(1, UpdateMetadataItem(records=(b"e",)))
        await broker.wait_for(lambda: len(broker.received) == 3, what="3 requests")
        first, _lisr, last = (r.body for r in broker.received)
        assert [r.record for r in first.metadata_records] == [b"a", b"b", b"c"] and first.type == 1
        assert [r.record for r in last.metadata_records] == [b"all", b"e"] and last.type == 2
    finally:
        await channel.close()
        await broker.close()
