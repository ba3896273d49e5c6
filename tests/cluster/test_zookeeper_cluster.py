"""Standby controllers on ZooKeeper, as real processes: ZooKeeper (Debian's package), three
controllers (controller.metadata.store=zookeeper) and three brokers, driven by confluent-kafka.

The active controller is kill -9ed or SIGSTOPped under an acks=all idempotent load; ZooKeeper
itself is restarted, or loses one node of three. Sessions are short (ZooKeeper 3000 ms,
brokers 3000 ms, heartbeats every 500 ms) so that takeovers happen within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import zlib
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from controller.launcher import LocalCluster, ZooKeeperEnsemble, metadata
from controller.metadata_store import decode_batches
from controller.zookeeper_store import LOG_PATH
from tests import support

from .helpers import NumberedProducer, partitions_of

pytestmark = pytest.mark.timeout(300)

ZK_SESSION_MS = 3000
SESSION_MS = 3000
HEARTBEAT_MS = 500
PARTITIONS = 3


def make_cluster(directory, connect: str) -> LocalCluster:
    return LocalCluster(directory, 3, controllers=3, zookeeper=connect,
                        broker_props={"broker.heartbeat.interval.ms": HEARTBEAT_MS, "replica.fetch.backoff.ms": 200,
                                      "replica.lag.time.max.ms": 10000},
                        controller_props={"broker.session.timeout.ms": SESSION_MS, "default.replication.factor": 3,
                                          "zookeeper.session.timeout.ms": ZK_SESSION_MS})


@pytest.fixture
def zk_cluster(tmp_path, zookeeper_connect):
    c = make_cluster(tmp_path, zookeeper_connect)
    try:
        c.start()
        yield c
    finally:
        c.kill()


def wait_until(predicate, timeout_s: float, what: str):
    return support.wait_until(predicate, timeout_s, 0.05, what)


def create_topic(cluster: LocalCluster, name: str, partitions: int = PARTITIONS, rf: int = 3) -> None:
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in client.create_topics([NewTopic(name, partitions, rf, config={"min.insync.replicas": "2"})]).values():
        f.result(timeout=30)


def leaders(cluster: LocalCluster, port: int, topic: str) -> dict[int, int]:
    return {i: p.leader_id for i, p in asyncio.run(partitions_of(port, topic)).items()}


class Load(NumberedProducer):
    """The idempotent acks=all producer of tests/cluster/helpers over the partitions of
    ``topic``, started and stopped by hand; ``verify`` reads every partition back."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic, PARTITIONS, max_records=300_000, message_timeout_ms=120000, poll_s=0.001)

    def start(self) -> "Load":
        self.thread.start()
        return self

    def wait_more(self, n: int, timeout_s: float = 60) -> None:
        start = self.count
        wait_until(lambda: self.count >= start + n, timeout_s, f"{n} more acknowledged records")

    def stop(self) -> None:
        self.__exit__(None, None, None)
        assert not self.thread.is_alive()
        assert self.unflushed == 0 and self.errors == [], self.errors[:5]

    def verify(self) -> None:
        """Every acknowledged record is in the log exactly once, in order, on every partition."""
        for p, acked in self.acked.items():
            assert acked == sorted(acked) and len(set(acked)) == len(acked), f"partition {p}: out of order or duplicated"
            got = consume(self.bootstrap, self.topic, p, len(acked))
            got_set = set(got)
            assert len(got) == len(got_set), f"partition {p}: duplicates in the log"
            missing = [v for v in acked if v not in got_set]
            assert not missing, f"partition {p}: {len(missing)} acknowledged records lost, e.g. {missing[:5]}"
            assert [v for v in got if v in set(acked)] == acked


def consume(bootstrap: str, topic: str, partition: int, at_least: int, timeout_s: float = 60) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[int] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < at_least and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    out.append(int(msg.value()))
        # Anything after what was acknowledged (unacknowledged retries may have landed too).
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                out.append(int(msg.value()))
    finally:
        consumer.close()
    return out


def produce_and_consume_one(cluster: LocalCluster, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 30000})
    errors = []
    producer.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(40) == 0 and errors == [None], errors
    got = consume(cluster.bootstrap, topic, 0, 1)
    assert int(value) in got


@contextlib.contextmanager
def zookeeper_client(connect: str) -> Iterator[KazooClient]:
    zk = KazooClient(hosts=connect)
    zk.start(timeout=15)
    try:
        yield zk
    finally:
        zk.stop()


def log_epochs(connect: str) -> dict[str, int]:
    """Each metadata log entry in ZooKeeper and the controller epoch that wrote it."""
    with zookeeper_client(connect) as zk:
        out = {}
        names = sorted(zk.get_children(LOG_PATH))
        by_base: dict[str, list[str]] = {}
        for n in names:
            by_base.setdefault(n.split("-")[0], []).append(n)
        for base, parts in by_base.items():
            data = zlib.decompress(b"".join(zk.get(f"{LOG_PATH}/{n}")[0] for n in sorted(parts)))
            items, _ = decode_batches(data, what=base)
            out[base] = items[0][1]
        return out


STALE_CONTROLLER_EPOCH = 11


def zombie_update_metadata(port: int, controller_id: int, epoch: int) -> int:
    """An UpdateMetadata in ``epoch`` listing no live broker; the broker's error code."""
    from protocol.api_keys import ApiKey
    from protocol.client import BrokerConnection

    async def send():
        conn = BrokerConnection("127.0.0.1", port, client_id="zombie")
        await conn.connect()
        try:
            resp = await conn.request(ApiKey.UPDATE_METADATA, {
                "controller_id": controller_id, "controller_epoch": epoch, "broker_epoch": -1, "type": 1,
                "topic_states": [], "live_brokers": []}, version=8)
            return resp.error_code
        finally:
            conn.close()
    return asyncio.run(send())


def controller_epoch(connect: str) -> int:
    with zookeeper_client(connect) as zk:
        return int(zk.get("/controller_epoch")[0])


def test_kill_9_of_the_active_controller_under_load(zk_cluster, zookeeper_connect):
    cluster = zk_cluster
    create_topic(cluster, "zkload")
    load = Load(cluster.bootstrap, "zkload").start()
    try:
        load.wait_more(300)
        old = cluster.wait_active_controller()
        epoch_before = controller_epoch(zookeeper_connect)
        old.kill()  # kill -9
        killed_at = time.monotonic()
        new = cluster.wait_active_controller(30, not_this=old)
        took = time.monotonic() - killed_at
        print(f"controller {new.node_id} active {took:.2f}s after the kill -9 of {old.node_id}")
        assert took <= (ZK_SESSION_MS + 2000) / 1000, took
        assert controller_epoch(zookeeper_connect) == epoch_before + 1
        load.wait_more(300)

        # Leadership changes keep working: kill a broker; its partitions get new leaders.
        survivor_port = cluster.brokers[1].port
        before = wait_until(lambda: (ls := leaders(cluster, survivor_port, "zkload")) and all(
            v >= 0 for v in ls.values()) and ls, 20, "leaders")
        victim = next(b for b in (3, 2) if b in before.values())
        cluster.brokers[victim].kill()
        led = [p for p, b in before.items() if b == victim]
        wait_until(lambda: all(leaders(cluster, survivor_port, "zkload")[p] not in (-1, victim) for p in led),
                   (SESSION_MS + 2000) / 1000 + 10, f"new leaders for broker {victim}'s partitions {led}")
        load.wait_more(300)

        # A topic created now works (on the two brokers left).
        create_topic(cluster, "after-failover", 1, rf=2)
        produce_and_consume_one(cluster, "after-failover", b"4242")

        # The killed controller comes back as a standby naming the new one.
        old.start()
        wait_until(lambda: metadata(old.port).controller_id == new.node_id, 20, "the old controller to be a standby")
        assert cluster.active_controller() is new

        cluster.brokers[victim].start()
        cluster.wait_live(timeout_s=60)
        load.wait_more(300)
    finally:
        load.stop()
    load.verify()


def test_sigstop_of_the_active_controller_past_its_session(zk_cluster, zookeeper_connect):
    cluster = zk_cluster
    create_topic(cluster, "zkpause")
    load = Load(cluster.bootstrap, "zkpause").start()
    old = cluster.wait_active_controller()
    try:
        load.wait_more(300)
        old_epoch = controller_epoch(zookeeper_connect)
        old.signal(signal.SIGSTOP)
        new = cluster.wait_active_controller((ZK_SESSION_MS + 2000) / 1000 + 10, not_this=old)
        new_epoch = controller_epoch(zookeeper_connect)
        assert new_epoch == old_epoch + 1
        # Let the brokers' sessions on the paused controller's clock run out too: when it wakes,
        # it would fence every broker, if it could write.
        time.sleep((SESSION_MS + 1000) / 1000)
        entries_at_takeover = log_epochs(zookeeper_connect)
        old.signal(signal.SIGCONT)
        wait_until(lambda: "steps down" in old.log_text(), 30, "the old controller to step down")
        wait_until(lambda: metadata(old.port).controller_id == new.node_id, 30, "the old controller to be a standby")
        # It wrote nothing: every entry since the takeover is the new controller's epoch.
        after = log_epochs(zookeeper_connect)
        written_since = {base: e for base, e in after.items() if base not in entries_at_takeover}
        assert all(e == new_epoch for e in written_since.values()), written_since
        assert not any(e == old_epoch and base not in entries_at_takeover for base, e in after.items())
        # The brokers stay unfenced and led as the new controller says.
        assert new.live_brokers() == {1, 2, 3}
        load.wait_more(300)
        # And they ignore the old epoch: what the paused controller would have sent (no brokers
        # alive) is refused by every broker, which goes on listing all three.
        for b in cluster.brokers.values():
            assert zombie_update_metadata(b.port, old.node_id, old_epoch) == STALE_CONTROLLER_EPOCH
            assert {x.node_id for x in metadata(b.port).brokers} == {1, 2, 3}
    finally:
        if old.running:
            old.signal(signal.SIGCONT)
        load.stop()
    load.verify()


@pytest.mark.parametrize("size", [1, 3], ids=["restart", "ensemble-loses-one"])
def test_zookeeper_restarted_or_losing_a_node(tmp_path, size):
    ensemble = ZooKeeperEnsemble(tmp_path / "zk", size).start()
    cluster = make_cluster(tmp_path / "cluster", ensemble.connect + "/kb")
    try:
        cluster.start()
        create_topic(cluster, "zkdown")
        load = Load(cluster.bootstrap, "zkdown").start()
        try:
            load.wait_more(300)
            if size == 1:
                ensemble.servers[0].kill()
                # With ZooKeeper down, produce and consume go on (only metadata changes wait).
                load.wait_more(500)
                produce_and_consume_one(cluster, "zkdown", b"900000777")  # beyond the load's numbers
                ensemble.servers[0].start()
            else:
                # Asked until one answers "leader": a loaded JVM may not answer srvr within its 1 s.
                leader = wait_until(lambda: next((s for s in ensemble.servers if _mode(s) == "leader"), None), 30,
                                    "the ZooKeeper ensemble's leader")
                leader.kill()
                load.wait_more(300)
            # The controllers reconnect; one is active; metadata changes work again, once the brokers
            # are live with it (a new active controller fences those that do not reach it within a
            # session; a topic of replication factor 3 needs all three).
            cluster.wait_active_controller(60)
            cluster.wait_live(timeout_s=60)
            create_topic(cluster, "after-zookeeper", 1)
            produce_and_consume_one(cluster, "after-zookeeper", b"99")
            load.wait_more(300)
        finally:
            load.stop()
        load.verify()
    finally:
        cluster.kill()
        ensemble.kill()


def _mode(server) -> str:
    from controller.launcher import four_letter_word
    text = four_letter_word(server.client_port)
    return text.split("Mode: ")[1].split()[0] if "Mode: " in text else ""
