"""What the transaction tests on a 3-broker cluster share: the cluster, coordinators and leaders
asked of live brokers, last stable offsets, and a read_committed reader that stops at the LSO."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError
from confluent_kafka import TopicPartition as ConsumerTP
from confluent_kafka.admin import AdminClient, NewTopic

from controller.launcher import LocalCluster
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection, KafkaClient

BROKER_PROPS = {"broker.heartbeat.interval.ms": 500, "replica.fetch.backoff.ms": 200,
                "offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3,
                "group.initial.rebalance.delay.ms": 0,
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}


def start_cluster(directory: Path, session_ms: int = 3000, **broker_props) -> LocalCluster:
    c = LocalCluster(directory, 3, broker_props={**BROKER_PROPS, **broker_props},
                     controller_props={"broker.session.timeout.ms": session_ms, "default.replication.factor": 3})
    try:
        c.start()
    except BaseException:
        c.kill()
        raise
    return c


def live_bootstrap(cluster, exclude: set[int] = frozenset()) -> str:
    return ",".join(b.bootstrap for i, b in cluster.brokers.items() if i not in exclude and b.running)


def create_topic(cluster, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 3)], operation_timeout=30).values():
        f.result(30)


async def _ask_live(cluster, api_key: int, body: dict, version: int, exclude: set[int]):
    for node_id, broker in cluster.brokers.items():
        if node_id in exclude or not broker.running:
            continue
        conn = BrokerConnection("127.0.0.1", broker.port, client_id="test")
        try:
            await conn.connect()
            return await conn.request(api_key, body, version)
        except Exception:  # a broker going away meanwhile: the next one
            continue
        finally:
            conn.close()
    return None


def find_coordinator(cluster, key: str, key_type: int, exclude: set[int] = frozenset(), timeout_s: float = 60) -> int:
    """The node id FindCoordinator names (key type 0 a group, 1 a transactional id), asked of a
    live broker, other than ``exclude``."""
    async def ask() -> int:
        deadline = time.monotonic() + timeout_s
        while True:
            r = await _ask_live(cluster, ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type}, 2, exclude)
            if r is not None and r.error_code == 0 and r.node_id not in exclude:
                return r.node_id
            assert time.monotonic() < deadline, f"no coordinator found for {key!r}"
            await asyncio.sleep(0.1)
    return asyncio.run(ask())


def leaders(cluster, topic: str, exclude: set[int] = frozenset(), timeout_s: float = 60) -> dict[int, int]:
    """partition -> leader, once every partition has a live leader not in ``exclude``."""
    async def ask() -> dict[int, int]:
        deadline = time.monotonic() + timeout_s
        while True:
            md = await _ask_live(cluster, ApiKey.METADATA, {"topics": [{"name": topic}],
                                                            "allow_auto_topic_creation": False}, 8, exclude)
            if md is not None:
                [t] = md.topics
                found = {p.partition_index: p.leader_id for p in t.partitions}
                if found and all(v >= 0 and v not in exclude for v in found.values()):
                    return found
            assert time.monotonic() < deadline, f"no live leaders for {topic}"
            await asyncio.sleep(0.1)
    return asyncio.run(ask())


def isr(cluster, topic: str, partition: int) -> list[int]:
    async def ask() -> list[int]:
        md = await _ask_live(cluster, ApiKey.METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
                             8, set())
        [t] = md.topics
        return next(list(p.isr_nodes) for p in t.partitions if p.partition_index == partition)
    return asyncio.run(ask())


def offsets(bootstrap: str, topic: str, partitions: int, isolation_level: int) -> dict[int, int]:
    """ListOffsets latest: the high watermark (0) or the last stable offset (1) per partition."""
    async def ask() -> dict[int, int]:
        async with KafkaClient(bootstrap) as client:
            found = await client.offsets_for_times({(topic, p): -1 for p in range(partitions)}, isolation_level)
            return {tp.partition: v[0] for tp, v in found.items()}
    return asyncio.run(ask())


def read_committed(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60) -> dict[int, list[bytes]]:
    """Per partition the values a read_committed consumer gets from the beginning to the end it
    reports (the last stable offset: librdkafka's partition EOF)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        consumer.assign([ConsumerTP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read_committed of {topic}: only {sorted(at_end)} reached their end"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            out[msg.partition()].append(msg.value())
        return out
    finally:
        consumer.close()
