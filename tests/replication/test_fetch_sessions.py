"""KIP-227 incremental fetch sessions between real broker processes, and with a real client
that uses them (kafka-python 2.1+; aiokafka, librdkafka and kcat send session 0 / epoch -1 and
are answered without one, as test_compat's clients show).

Three brokers, one leading every partition of a busy topic and of an idle 20-partition one:
the followers hold a session each on the leader with every partition in it, and once the data
is replicated their fetches name nothing (the leader's RequestBytes for Fetch: a few dozen
bytes where a full fetch of 24 partitions is ~700); acks=all produce completes, the logs
agree, and a kafka-python consumer reads every record through its own session."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from controller.launcher import free_port

from .cluster import Cluster, PartitionAssignment, log_bytes

pytestmark = pytest.mark.timeout(240)

BUSY, IDLE = "busy", "idle"
BUSY_PARTITIONS, IDLE_PARTITIONS = 4, 20


class MetricsCluster(Cluster):
    """Cluster with a metrics endpoint on each broker."""

    def __init__(self, broker_process) -> None:
        self.metrics_ports = {i: free_port() for i in (1, 2, 3)}
        props = {"process.roles": "broker", "replica.fetch.backoff.ms": "200", "min.insync.replicas": "2"}
        self.processes = {i: broker_process(broker_id=i, overrides={
            **props, "metrics.listener": f"http://127.0.0.1:{port}"}) for i, port in self.metrics_ports.items()}
        super(Cluster, self).__init__({i: ("127.0.0.1", p.port) for i, p in self.processes.items()})

    def scrape(self, broker_id: int) -> dict[tuple[str, tuple], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_ports[broker_id]}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
async def cluster(broker_process):
    c = MetricsCluster(broker_process).start()
    yield c
    await c.close()


def fetch_bytes(samples: dict) -> tuple[float, float]:
    """(requests, bytes) of the Fetch requests this broker has read."""
    labels = (("request", "Fetch"),)
    return (samples.get(("kafka_network_requestmetrics_requestbytes_count", labels), 0.0),
            samples.get(("kafka_network_requestmetrics_requestbytes_sum", labels), 0.0))


async def test_followers_fetch_in_sessions_that_name_only_what_changed_and_a_session_client_reads_all(cluster):
    assignments = [PartitionAssignment(topic, p, 1, 0, [1, 2, 3], [1, 2, 3])
                   for topic, n in ((BUSY, BUSY_PARTITIONS), (IDLE, IDLE_PARTITIONS)) for p in range(n)]
    await cluster.assign(assignments)
    bootstrap = cluster.processes[1].bootstrap
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await producer.start()
    try:
        sent = {p: [] for p in range(BUSY_PARTITIONS)}
        for i in range(2000):
            p = i % BUSY_PARTITIONS
            value = f"record-{i}".encode()
            sent[p].append(value)
            await producer.send(BUSY, value, partition=p)
        await producer.flush()
        # acks=all: every send above came back only once both followers had the records
        last = await producer.send_and_wait(BUSY, b"last", partition=0)
        sent[0].append(b"last")
        assert last.offset == len(sent[0]) - 1
    finally:
        await producer.stop()
    for p in range(BUSY_PARTITIONS):
        await cluster.wait_replicas_caught_up(BUSY, p, [1, 2, 3])

    # both followers hold a session on the leader with all 24 partitions in it
    samples = cluster.scrape(1)
    assert samples[("kafka_server_fetchsessioncache_numincrementalfetchsessions", ())] == 2
    assert samples[("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", ())] == 2 * 24
    # idle now: each follower's fetch long-polls (replica.fetch.wait.max.ms 500) and names nothing
    before = fetch_bytes(samples)
    await asyncio.sleep(2.5)
    after = fetch_bytes(cluster.scrape(1))
    fetches = after[0] - before[0]
    assert fetches >= 4, (before, after)
    mean = (after[1] - before[1]) / fetches
    assert mean < 150, f"followers' idle fetches average {mean:.0f} bytes: not incremental"

    # a client that uses sessions (kafka-python) reads every record, in order, through its own
    def consume() -> dict[int, list[bytes]]:
        from kafka import KafkaConsumer, TopicPartition
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100,
                                 consumer_timeout_ms=5000)
        parts = [TopicPartition(BUSY, p) for p in range(BUSY_PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        got: dict[int, list[bytes]] = {p: [] for p in range(BUSY_PARTITIONS)}
        want = sum(len(v) for v in sent.values())
        try:
            for message in consumer:
                got[message.partition].append(message.value)
                if sum(len(v) for v in got.values()) == want:
                    break
        finally:
            consumer.close()
        return got
    assert await asyncio.to_thread(consume) == sent
    # its session (the consumer closed its connection; the session stays until evicted)
    assert cluster.scrape(1)[("kafka_server_fetchsessioncache_numincrementalfetchsessions", ())] == 3
    for p in range(BUSY_PARTITIONS):
        assert log_bytes(cluster.processes[1], BUSY, p) == log_bytes(cluster.processes[2], BUSY, p) \
            == log_bytes(cluster.processes[3], BUSY, p)
