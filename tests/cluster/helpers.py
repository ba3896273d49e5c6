"""What the cluster tests share: admin clients, Metadata asked of one broker, bounded waits,
confluent-kafka's idempotent producer writing numbered records, and a consumer that reads
every partition back."""

from __future__ import annotations

import asyncio
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ConsumerTP
from confluent_kafka.admin import AdminClient

from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from tests.support import wait_until


def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def wait_futures(futures: dict, timeout_s: float = 30) -> None:
    for f in futures.values():
        f.result(timeout=timeout_s)


async def topic_metadata(port: int, topic: str):
    conn = BrokerConnection("127.0.0.1", port, client_id="test")
    await conn.connect()
    try:
        md = await conn.request(ApiKey.METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
                                version=8)
    finally:
        conn.close()
    [t] = md.topics
    return md, t


async def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.05)


class NumberedProducer:
    """confluent-kafka's idempotent producer (acks=all) on a thread, writing numbered records
    round-robin to the partitions of ``topic``; what was acknowledged, per partition, in the
    order the acknowledgements came. Bounded: it stops by itself after ``max_seconds`` or
    ``max_records``, at a few thousand records a second at most (``poll_s`` per record slows it)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, max_seconds: float = 3600, *,
                 max_records: int | None = None, message_timeout_ms: int = 300000, poll_s: float = 0.0,
                 config: dict | None = None) -> None:
        """``config``: more librdkafka settings (security.protocol, sasl.*, ssl.*, ...)."""
        self.bootstrap, self.topic, self.partitions, self.max_seconds = bootstrap, topic, partitions, max_seconds
        self.config = dict(config or {})
        self.max_records, self.message_timeout_ms, self.poll_s = max_records, message_timeout_ms, poll_s
        self.acked: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.errors: list = []
        self.stop_flag = threading.Event()
        self.unflushed = -1
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": self.message_timeout_ms, **self.config})

        def on_delivery(err, msg):
            if err is not None:
                self.errors.append(err)
            else:
                self.acked[msg.partition()].append(int(msg.value()))

        i = 0
        deadline = time.monotonic() + self.max_seconds  # bounded: stops by itself
        while not self.stop_flag.is_set() and time.monotonic() < deadline and i != self.max_records:
            producer.produce(self.topic, value=str(i).encode(), partition=i % self.partitions, on_delivery=on_delivery)
            producer.poll(self.poll_s)
            i += 1
            if i % 100 == 0:
                producer.poll(0.01)  # bounded rate: a few thousand records a second
        self.unflushed = producer.flush(120)

    def __enter__(self) -> "NumberedProducer":
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop_flag.set()
        self.thread.join(180)


def high_watermark(consumer: Consumer, topic: str, partition: int, timeout_s: float = 60) -> int:
    """The partition's high watermark, asked of its leader. librdkafka fails the query at once
    (_UNKNOWN_PARTITION) while its metadata shows the partition without a leader it knows (a
    leadership change under way), or asks a broker that just gave up the leadership
    (NOT_LEADER_FOR_PARTITION), or a new leader whose HW has not yet reached the start of its
    epoch answers OFFSET_NOT_AVAILABLE (KIP-207): asked again until a leader answers."""
    def ask() -> tuple[int] | None:
        try:
            return (consumer.get_watermark_offsets(ConsumerTP(topic, partition), timeout=30)[1],)
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError._UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                                      KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.OFFSET_NOT_AVAILABLE):
                print(f"high watermark of {topic}-{partition} not answered yet: {exc}")
                return None
            raise
    return wait_until(ask, timeout_s, 0.2, f"a leader to answer for {topic}-{partition}")[0]


def read_all(bootstrap: str, topic: str, partitions: int, config: dict | None = None) -> dict[int, list[int]]:
    """Every record of every partition, from the beginning to the high watermark, with
    confluent-kafka's Consumer (assigned partitions, no group); ``config``: more settings."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                         "enable.partition.eof": True, **(config or {})})
    try:
        ends = {p: high_watermark(consumer, topic, p) for p in range(partitions)}
        consumer.assign([ConsumerTP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        read: dict[int, list[int]] = {p: [] for p in range(partitions)}
        positions = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + 120
        while any(positions[p] < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, (positions, ends)
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            read[msg.partition()].append(int(msg.value()))
            positions[msg.partition()] = msg.offset() + 1
        return read
    finally:
        consumer.close()


async def partitions_of(port: int, topic: str):
    _md, t = await topic_metadata(port, topic)
    return {p.partition_index: p for p in t.partitions}


async def resolved(value):
    """``value`` as an awaitable (wait_for polls coroutine functions)."""
    return value


def start_some(cluster, broker_ids: list[int], timeout_s: float = 60) -> None:
    """Start the controllers and only ``broker_ids`` of ``cluster``'s brokers (the others join
    later: ``cluster.brokers[i].start()``), and wait until those are live."""
    for c in cluster.controllers:
        if not c.running:
            c.launch()
    for c in cluster.controllers:
        c.wait_ready(timeout_s)
    cluster.wait_active_controller(timeout_s)
    for i in broker_ids:
        cluster.brokers[i].launch()
    for i in broker_ids:
        cluster.brokers[i].wait_ready(timeout_s)
    cluster.wait_live(broker_ids, timeout_s)
