"""send_offsets_to_transaction (TxnOffsetCommit, KIP-98/KIP-447) with each real client:
offsets sent in a committed transaction become the group's committed offsets, those of an
aborted one never do, and while a transaction is open OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT (the offsets are pending)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTP
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer
from kafka import TopicPartition as KpTP
from kafka.structs import OffsetAndMetadata

from protocol.api_keys import ApiKey
from protocol.client import KafkaClient
from protocol.errors import ErrorCode

from .helpers import create_topic

pytestmark = pytest.mark.timeout(180)


def fetch_offsets(broker, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    """(offset, error) of ``topic``-0 for ``group``, by OffsetFetch v7 to the (only) broker."""
    async def fetch() -> tuple[int, int]:
        async with KafkaClient(broker.bootstrap, client_id="test-fetch") as client:
            conn = await client.any_connection()
            resp = await conn.request(ApiKey.OFFSET_FETCH, {"group_id": group, "require_stable": require_stable,
                                                            "topics": [{"name": topic, "partition_indexes": [0]}]}, 7)
            assert resp.error_code == 0, resp
            (p,) = resp.topics[0].partitions
            return p.committed_offset, p.error_code
    return broker.run(fetch())


class Confluent:
    def __init__(self, bootstrap: str, tid: str, group: str) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        self.p.init_transactions(30)

    def run(self, topic: str, out: str, offset: int, commit: bool | None) -> None:
        self.p.begin_transaction()
        self.p.produce(out, value=b"x")
        self.p.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], self.c.consumer_group_metadata(), 30)
        if commit is True:
            self.p.commit_transaction(30)
        elif commit is False:
            self.p.abort_transaction(30)
        else:
            self.p.flush(30)

    def close(self) -> None:
        self.c.close()


class KafkaPython:
    def __init__(self, bootstrap: str, tid: str, group: str) -> None:
        self.p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        self.group = group
        self.p.init_transactions()

    def run(self, topic: str, out: str, offset: int, commit: bool | None) -> None:
        self.p.begin_transaction()
        self.p.send(out, value=b"x")
        self.p.send_offsets_to_transaction({KpTP(topic, 0): OffsetAndMetadata(offset, "", -1)}, self.group)
        if commit is True:
            self.p.commit_transaction()
        elif commit is False:
            self.p.abort_transaction()
        else:
            self.p.flush(30)

    def close(self) -> None:
        self.p.close(0)


class Aio:
    def __init__(self, bootstrap: str, tid: str, group: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.group = group
        async def start() -> AIOKafkaProducer:
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
            await p.start()
            return p
        self.p = self.loop.run_until_complete(start())

    def run(self, topic: str, out: str, offset: int, commit: bool | None) -> None:
        async def go() -> None:
            await self.p.begin_transaction()
            await (await self.p.send(out, value=b"x"))
            await self.p.send_offsets_to_transaction({AioTP(topic, 0): offset}, self.group)
            if commit is True:
                await self.p.commit_transaction()
            elif commit is False:
                await self.p.abort_transaction()
        self.loop.run_until_complete(go())

    def close(self) -> None:
        self.loop.run_until_complete(self.p.stop())
        self.loop.close()


CLIENTS = {"confluent": Confluent, "kafka-python": KafkaPython, "aiokafka": Aio}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_send_offsets_to_transaction(threaded_broker, client):
    topic, out, group = f"in-{client}", f"out-{client}", f"group-{client}"
    create_topic(threaded_broker, topic)
    create_topic(threaded_broker, out)
    producer = CLIENTS[client](threaded_broker.bootstrap, f"tid-{client}", group)
    try:
        producer.run(topic, out, 5, commit=True)
        assert fetch_offsets(threaded_broker, group, topic, True) == (5, 0)
        producer.run(topic, out, 9, commit=False)
        assert fetch_offsets(threaded_broker, group, topic, True) == (5, 0)
        producer.run(topic, out, 12, commit=None)          # left open: the offset is pending
        assert fetch_offsets(threaded_broker, group, topic, True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
        assert fetch_offsets(threaded_broker, group, topic, False) == (5, 0)
    finally:
        producer.close()
