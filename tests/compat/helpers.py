"""Helpers of the compat suites: read what the broker stored, straight from its files."""

from __future__ import annotations

from pathlib import Path

from protocol.client import KafkaClient
from protocol.records import BatchHeader, check_batch, iter_batch_headers


def stored_batches(log_dir: Path, topic: str, partition: int) -> list[BatchHeader]:
    """Every batch in the partition's .log files, in offset order, each CRC-checked."""
    out = []
    for path in sorted((Path(log_dir) / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        for pos, header in iter_batch_headers(data):
            check_batch(data, pos, pos + header.size)
            out.append(header)
    return out


def create_topic(broker, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    """Create a topic on a ThreadedBroker the way an admin client does: CreateTopics to the
    broker, which forwards it to its controller and answers once its metadata shows the topic."""
    async def create() -> None:
        async with KafkaClient(broker.bootstrap, client_id="test-admin") as client:
            await client.create_topics([(name, partitions, -1, configs)])
    broker.run(create())

N_RECORDS = 10_000
BASE_TS = 1_700_000_000_000


def sample_records(n: int = N_RECORDS, tag: str = "") -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]], int]]:
    """(key, value, headers, timestamp) rows with distinct keys, values, headers and timestamps."""
    return [(None if i % 97 == 0 else f"key-{i % 13}".encode(),
             f"{tag}value-{i}-".encode() + bytes([i % 251]) * (i % 40),
             [("h", str(i).encode()), ("n", b"")] if i % 3 else [],
             BASE_TS + i * 10)
            for i in range(n)]


def assert_same_records(expected, got) -> None:
    """got: (key, value, headers, timestamp) rows in consumption order."""
    assert len(got) == len(expected)
    for i, (e, g) in enumerate(zip(expected, got)):
        assert g == e, f"record {i}: expected {e!r}, got {g!r}"


def consume_to_end(bootstrap: str, topic: str, group: str, **config) -> list[bytes]:
    """Partition 0 of ``topic`` read by confluent-kafka from offset 0 (or, where retention took
    it, from the log start: ``auto.offset.reset`` in ``config``) to its end-of-partition event."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "enable.partition.eof": True, **config})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while True:
            m = c.poll(10)
            assert m is not None, "no end-of-partition event within 10 s"
            if m.error():
                assert m.error().code() == -191, m.error()  # _PARTITION_EOF
                return out
            out.append(m.value())
    finally:
        c.close()
