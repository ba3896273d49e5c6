"""ZooKeeperMetadataStore and the election on a real ZooKeeper server: the fence (a controller
whose term is over writes nothing), 10,000 partitions within ZooKeeper's 1 MB znode limit,
parts of an unfinished write, snapshots compacting the log."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
from kazoo.client import KazooClient

from controller import zookeeper_store as zs
from controller.zookeeper_store import (CONTROLLER_EPOCH_PATH, CONTROLLER_PATH, LOG_PATH, SNAPSHOT_DATA_PATH,
                                        SNAPSHOTS_PATH, NotActiveError, ZooKeeperCoordinator)
from protocol.clock import MockTime
from protocol.messages.metadata_records import MetadataRecordType as T, make_record

pytestmark = pytest.mark.timeout(120)

ZNODE_LIMIT = 1024 * 1024 - 1  # ZooKeeper's jute.maxbuffer default (0xfffff)


def topic_records(name: str, partitions: int, rf: int = 3):
    topic_id = uuid.uuid4()
    out = [make_record(T.TOPIC, name=name, topic_id=topic_id)]
    for p in range(partitions):
        replicas = [(p + i) % 5 + 1 for i in range(rf)]
        out.append(make_record(T.PARTITION, partition_id=p, topic_id=topic_id, replicas=replicas, isr=replicas,
                               leader=replicas[0], leader_epoch=0, partition_epoch=0))
    return out


async def coordinator(connect: str, node_id: int) -> ZooKeeperCoordinator:
    c = ZooKeeperCoordinator(connect, node_id, MockTime(), session_timeout_ms=4000)
    await c.start("cluster-id")
    return c


async def close(*coordinators):
    for c in coordinators:
        await asyncio.get_running_loop().run_in_executor(None, c.close)


@pytest.fixture
def zk(zookeeper_connect):
    """A plain kazoo client in the test's chroot (created first, as the coordinator does), to
    look at (and tamper with) the znodes."""
    hosts, _, chroot = zookeeper_connect.partition("/")
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    client.ensure_path("/" + chroot)
    client.chroot = "/" + chroot
    yield client
    client.stop()


@contextlib.asynccontextmanager
async def active(connect: str, node_id: int = 3000):
    """(coordinator, store, epoch): a controller that won the election, loaded its store and
    claimed its epoch; closed on leaving."""
    c = await coordinator(connect, node_id)
    try:
        store = c.new_store(await asyncio.wait_for(c.campaign(), 10))
        await store.load()
        yield c, store, await store.claim_epoch()
    finally:
        await close(c)


async def test_election_writes_kafkas_znodes_and_bumps_the_epoch(zookeeper_connect, zk):
    a = await coordinator(zookeeper_connect, 3000)
    b = await coordinator(zookeeper_connect, 3001)
    try:
        term = await asyncio.wait_for(a.campaign(), 10)
        import json
        body = json.loads(zk.get(CONTROLLER_PATH)[0])
        assert body["version"] == 1 and body["brokerid"] == 3000 and body["timestamp"].isdigit()
        assert zk.exists(CONTROLLER_PATH).ephemeralOwner == a.zk.client_id[0]
        assert int(zk.get(CONTROLLER_EPOCH_PATH)[0]) == term.epoch == 1
        waiting = asyncio.get_running_loop().create_task(b.campaign())
        await asyncio.sleep(0.3)
        assert not waiting.done() and b.active_controller_id == 3000   # a standby knows who leads
        await a.resign()                                                 # /controller goes: b wins
        term_b = await asyncio.wait_for(waiting, 10)
        assert term_b.epoch == 2 and json.loads(zk.get(CONTROLLER_PATH)[0])["brokerid"] == 3001
    finally:
        await close(a, b)


async def test_a_controller_whose_term_is_over_writes_nothing_even_before_it_notices(zookeeper_connect, zk):
    async with active(zookeeper_connect) as (_a, store, epoch):
        await store.wait_durable(store.append(topic_records("before", 2), epoch))
        entries = sorted(zk.get_children(LOG_PATH))
        # Another controller wins meanwhile (as after this one's session expired): it bumps the epoch.
        data, stat = zk.get(CONTROLLER_EPOCH_PATH)
        zk.set(CONTROLLER_EPOCH_PATH, str(int(data) + 1).encode(), version=stat.version)
        offset = store.append(topic_records("after", 2), epoch)   # it has not noticed: append accepts...
        with pytest.raises(NotActiveError):
            await store.wait_durable(offset)                        # ...but the write fails in ZooKeeper
        assert sorted(zk.get_children(LOG_PATH)) == entries         # nothing written
        with pytest.raises(NotActiveError):
            store.append(topic_records("later", 1), epoch)          # and it now refuses at once


async def test_an_expired_session_ends_the_term_and_a_standby_takes_over(zookeeper_connect):
    b = await coordinator(zookeeper_connect, 3001)
    ended = []
    try:
        async with active(zookeeper_connect) as (a, store, epoch):
            a.on_not_active = ended.append
            waiting = asyncio.get_running_loop().create_task(b.campaign())
            # Expire a's session, ZooKeeper's way: another client attaches to it and closes it.
            session_id, password = a.zk.client_id
            thief = KazooClient(hosts=zookeeper_connect, client_id=(session_id, password))
            thief.start(timeout=15)
            thief.stop()
            term_b = await asyncio.wait_for(waiting, 15)
            assert term_b.epoch == epoch + 1
            with pytest.raises(NotActiveError):
                await store.wait_durable(store.append(topic_records("zombie", 1), epoch))
            async with asyncio.timeout(15):
                while not ended:
                    await asyncio.sleep(0.05)
            store_b = b.new_store(term_b)
            loaded = await store_b.load()
            assert not any(getattr(r, "name", None) == "zombie" for _o, r in loaded.log_records)
    finally:
        await close(b)


async def test_ten_thousand_partitions_fit_in_znodes_and_reload(zookeeper_connect, zk):
    async with active(zookeeper_connect) as (_a, store, epoch):
        records = topic_records("big", 10_000)
        await store.wait_durable(store.append(records, epoch))
        await store.snapshot(records, store.end_offset, epoch)
        for parent in (LOG_PATH, SNAPSHOT_DATA_PATH):
            for name in zk.get_children(parent):
                assert zk.exists(f"{parent}/{name}").dataLength <= zs.PART_BYTES < ZNODE_LIMIT
    b = await coordinator(zookeeper_connect, 3001)
    try:
        store = b.new_store(await asyncio.wait_for(b.campaign(), 15))
        loaded = await store.load()
        assert loaded.snapshot_records == records and loaded.log_records == []
    finally:
        await close(b)


async def test_a_write_of_several_parts_and_an_unfinished_one(zookeeper_connect, zk, monkeypatch):
    monkeypatch.setattr(zs, "PART_BYTES", 2048)  # force several parts per entry
    async with active(zookeeper_connect) as (a, store, epoch):
        first = topic_records("one", 300)
        await store.wait_durable(store.append(first, epoch))
        second = topic_records("two", 300)
        await store.wait_durable(store.append(second, epoch))
        names = sorted(zk.get_children(LOG_PATH))
        base_two = store.end_offset - len(second)
        two_parts = [n for n in names if n.startswith(f"{base_two:020d}-")]
        assert len(two_parts) > 1
        zk.delete(f"{LOG_PATH}/{two_parts[-1]}")   # as if the writer died between two parts
        await a.resign()
        store = a.new_store(await asyncio.wait_for(a.campaign(), 10))
        loaded = await store.load()
        assert [r for _o, r in loaded.log_records][1:] == first   # after the NoOp; the unfinished one is gone
        assert not any(n.startswith(f"{base_two:020d}-") for n in zk.get_children(LOG_PATH))
        epoch = await store.claim_epoch()
        assert store.end_offset == base_two + 1                     # the log goes on where it ended


async def test_snapshots_compact_the_log_and_keep_two(zookeeper_connect, zk):
    async with active(zookeeper_connect) as (a, store, epoch):
        state = []
        offsets = []
        for i in range(3):
            for j in range(3):
                batch = topic_records(f"t{i}{j}", 2)
                state += batch
                await store.wait_durable(store.append(batch, epoch))
            await store.snapshot(state, store.end_offset, epoch)
            offsets.append(store.end_offset)
        assert sorted(int(m) for m in zk.get_children(SNAPSHOTS_PATH)) == offsets[-2:]
        assert {zs.parse_part_name(n)[0] for n in zk.get_children(SNAPSHOT_DATA_PATH)} == set(offsets[-2:])
        bases = sorted(zs.parse_part_name(n)[0] for n in zk.get_children(LOG_PATH))
        assert bases[0] >= offsets[-3] and len(bases) < 10          # entries below the older snapshot are gone
        tail = topic_records("tail", 1)
        await store.wait_durable(store.append(tail, epoch))
        await a.resign()
        store = a.new_store(await asyncio.wait_for(a.campaign(), 10))
        loaded = await store.load()
        assert loaded.snapshot_offset == offsets[-1] and loaded.snapshot_records == state
        assert [r for _o, r in loaded.log_records] == tail
