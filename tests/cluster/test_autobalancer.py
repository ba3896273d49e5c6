"""The controller's partition autobalancer (partition.autobalancing.mode) on real processes: a
controller and broker processes, confluent-kafka's idempotent acks=all producer writing all
along, read back with its consumer.

* node_add (the default): 3 brokers with 30 partitions RF 3 (each broker a replica of every
  partition), a 4th joins: within 2 minutes the replica counts per broker (every topic's, the
  consumer's __consumer_offsets too) differ by at most one, the producer saw no error, a
  consumer reading throughout only retriable ones, and every acknowledged record is there
  once, in order; the replication throttles its moves ran under are gone once they are over
  (no throttled-replicas list on the topic, no throttled rate on any broker);
* continuous, with a 5 s availability timeout: broker 4 is kill -9'd, and once it has been
  fenced for longer than the timeout its replicas move to brokers 1-3: RF 3 restored, every
  ISR full, no acknowledged record lost."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from controller.launcher import LocalCluster
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection

from tests.cli.test_cli import kbroker

from .helpers import NumberedProducer, read_all, resolved, start_some, topic_metadata, wait_for
from .test_replication_throttle import broker_dynamic

pytestmark = pytest.mark.timeout(300)

SESSION_MS = 3000
BROKER_PROPS = {"broker.heartbeat.interval.ms": 500, "replica.fetch.backoff.ms": 200, "replica.lag.time.max.ms": 3000,
                "min.insync.replicas": 2}
TOPIC = "auto"


def controller_props(mode: str, **more) -> dict:
    return {"broker.session.timeout.ms": SESSION_MS, "partition.autobalancing.mode": mode,
            "partition.autobalancing.tick.interval.ms": 1000, **more}


async def create(cluster, partitions: int, rf: int) -> None:
    conn = BrokerConnection("127.0.0.1", cluster.brokers[1].port, client_id="test")
    await conn.connect()
    try:
        resp = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": TOPIC, "num_partitions": partitions, "replication_factor": rf, "assignments": [],
            "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 30000, "validate_only": False},
            version=4)
        assert resp.topics[0].error_code == 0, resp
    finally:
        conn.close()


async def partitions(cluster, broker_id: int = 1) -> dict[int, tuple[list[int], list[int]]]:
    _md, t = await topic_metadata(cluster.brokers[broker_id].port, TOPIC)
    return {p.partition_index: (list(p.replica_nodes), list(p.isr_nodes)) for p in t.partitions}


async def every_partition(cluster, broker_id: int = 1) -> dict[tuple[str, int], tuple[list[int], list[int]]]:
    """Every partition of every topic (the consumer's group made __consumer_offsets too)."""
    conn = BrokerConnection("127.0.0.1", cluster.brokers[broker_id].port, client_id="test")
    await conn.connect()
    try:
        md = await conn.request(ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False}, version=8)
    finally:
        conn.close()
    return {(t.name, p.partition_index): (list(p.replica_nodes), list(p.isr_nodes)) for t in md.topics
            for p in t.partitions}


async def leaders(cluster, topic: str | None = TOPIC) -> dict[tuple[str, int], tuple[int, list[int]]]:
    """(leader, replicas) of the topic's partitions (None: of every topic's)."""
    conn = BrokerConnection("127.0.0.1", cluster.brokers[1].port, client_id="test")
    await conn.connect()
    try:
        md = await conn.request(ApiKey.METADATA, {"topics": None if topic is None else [{"name": topic}],
                                                  "allow_auto_topic_creation": False}, version=8)
    finally:
        conn.close()
    return {(t.name, p.partition_index): (p.leader_id, list(p.replica_nodes)) for t in md.topics
            for p in t.partitions}


def check_every_acked_record_once_in_order(cluster, producer: NumberedProducer, n: int, broker_id: int = 1) -> None:
    assert not producer.errors, producer.errors[:5]
    assert producer.unflushed == 0
    read = read_all(cluster.brokers[broker_id].bootstrap, TOPIC, n)
    for p in range(n):
        acked = producer.acked[p]
        assert acked, f"nothing acknowledged on partition {p}"
        assert len(set(read[p])) == len(read[p]), f"duplicates in partition {p}"
        assert read[p] == sorted(read[p]), f"partition {p} out of order"
        missing = set(acked) - set(read[p])
        assert not missing, f"partition {p} lost {len(missing)} acknowledged records, e.g. {sorted(missing)[:5]}"


class ReadingConsumer:
    """confluent-kafka's consumer on a thread, assigned every partition from the beginning, reading
    while the replicas move: the errors it is handed that are not retriable, and what it read."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        self.bootstrap, self.partitions = bootstrap, partitions
        self.read: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.errors: list = []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "reader", "enable.auto.commit": False,
                             "enable.partition.eof": False})
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        deadline = time.monotonic() + 240  # bounded
        try:
            while not self.stop_flag.is_set() and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.fatal() or not (err.retriable() or err.code() in (KafkaError._TRANSPORT,
                                                                            KafkaError._ALL_BROKERS_DOWN)):
                        self.errors.append(err)
                    continue
                self.read[msg.partition()].append(int(msg.value()))
        finally:
            consumer.close()

    def __enter__(self) -> "ReadingConsumer":
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop_flag.set()
        self.thread.join(60)


async def test_node_add_a_fourth_broker_gets_its_share_within_two_minutes(tmp_path):
    n = 30
    cluster = LocalCluster(tmp_path / "c", 4, broker_props=BROKER_PROPS, controller_props=controller_props("node_add"))
    try:
        start_some(cluster, [1, 2, 3])
        await create(cluster, n, 3)
        bootstrap = cluster.brokers[1].bootstrap
        with NumberedProducer(bootstrap, TOPIC, n, max_seconds=240, poll_s=0.002) as producer, \
                ReadingConsumer(bootstrap, n) as reader:
            await wait_for(lambda: resolved(producer.count > 2000), 60, "records acknowledged before broker 4")
            assert Counter(b for r, _ in (await partitions(cluster)).values() for b in r) == {1: 30, 2: 30, 3: 30}
            joined = time.monotonic()
            cluster.brokers[4].start()

            async def even() -> bool:  # replica counts are per broker over every topic, as the balancer counts
                parts = await every_partition(cluster)
                counts = Counter(b for r, _ in parts.values() for b in r)
                return (set(counts) == {1, 2, 3, 4} and max(counts.values()) - min(counts.values()) <= 1
                        and all(len(r) == 3 and sorted(r) == sorted(isr) for r, isr in parts.values()))
            await wait_for(even, 120, "replica counts within one, every move complete")
            took = time.monotonic() - joined

            async def preferred_lead() -> bool:  # the autobalancer's elections after the moves
                return all(leader == r[0] for leader, r in (await leaders(cluster, None)).values())
            await wait_for(preferred_lead, 30, "every preferred leader leading")

            def throttles_cleared() -> bool:  # its moves ran under throttles it set, and they went with them
                topics = kbroker(bootstrap, "configs", "describe", "--topic", TOPIC).stdout.decode()
                return "throttled.replicas" not in topics and not any(
                    "throttled" in k for b in (1, 2, 3, 4) for k in broker_dynamic(bootstrap, b))
            await wait_for(lambda: resolved(throttles_cleared()), 30, "the autobalancer's throttles cleared")
            lead = Counter(leader for leader, _ in (await leaders(cluster, None)).values())
            assert max(lead.values()) - min(lead.values()) <= 1 and len(lead) == 4, lead
            count = producer.count
            await wait_for(lambda: resolved(producer.count > count + 500), 60, "records acknowledged after")
            await wait_for(lambda: resolved(sum(map(len, reader.read.values())) > count), 60, "the reader caught up")
        print(f"balanced {took:.1f} s after broker 4 started")
        # the consumer reading through the moves: no error but retriable ones, each partition in order, once
        assert not reader.errors, reader.errors[:5]
        for p, values in reader.read.items():
            assert values == sorted(set(values)), f"partition {p} read out of order or twice"
        counts = Counter(b for r, _ in (await every_partition(cluster)).values() for b in r)
        assert max(counts.values()) - min(counts.values()) <= 1, counts
        check_every_acked_record_once_in_order(cluster, producer, n)
    finally:
        cluster.kill()


async def test_continuous_restores_rf_off_a_broker_down_past_the_timeout(tmp_path):
    n, timeout_s = 12, 5
    cluster = LocalCluster(tmp_path / "c", 4, broker_props=BROKER_PROPS, controller_props=controller_props(
        # this host's own disk may be fuller than the disk limit (that rule has its unit tests): not in the way here
        "continuous", **{"partition.autobalancing.node.availability.timeout.sec": timeout_s,
                         "partition.autobalancing.max.disk.usage.percent": 100})).start()
    try:
        await create(cluster, n, 3)
        assert any(4 in r for r, _ in (await partitions(cluster)).values())
        bootstrap = cluster.brokers[1].bootstrap
        with NumberedProducer(bootstrap, TOPIC, n, max_seconds=240, poll_s=0.002) as producer:
            await wait_for(lambda: resolved(producer.count > 1000), 60, "records acknowledged before the kill")
            cluster.brokers[4].kill()
            killed = time.monotonic()
            first_move: list[float] = []

            async def restored() -> bool:
                parts = await partitions(cluster)
                if not first_move and not any(4 in r for r, _ in parts.values()):
                    first_move.append(time.monotonic() - killed)
                return all(len(r) == 3 and 4 not in r and sorted(r) == sorted(isr) for r, isr in parts.values())
            await wait_for(restored, 120, "RF 3 on brokers 1-3, every ISR full")
            took = time.monotonic() - killed
            count = producer.count
            await wait_for(lambda: resolved(producer.count > count + 500), 60, "records acknowledged after")
        print(f"RF restored {took:.1f} s after the kill (session {SESSION_MS} ms + timeout {timeout_s} s)")
        # not before the broker had been unavailable for the timeout (fenced after the session)
        assert took >= timeout_s, took
        counts = Counter(b for r, _ in (await partitions(cluster)).values() for b in r)
        assert counts == {1: 12, 2: 12, 3: 12}, counts
        check_every_acked_record_once_in_order(cluster, producer, n)
    finally:
        cluster.kill()
