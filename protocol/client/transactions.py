"""``TransactionAdmin``: what Kafka's Admin offers about transactions (KIP-664), for
``kbroker transactions``: ListTransactions (every broker: each lists the transactional ids it
coordinates), DescribeTransactions (the id's coordinator, found with FindCoordinator key type 1),
DescribeProducers (the partition's leader, or a given replica) and abortTransaction (a
WriteTxnMarkers ABORT sent to the partition's leader, which needs CLUSTER_ACTION or ALTER on the
cluster)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Iterable

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

from .clock import sleep
from .cluster import KafkaClient
from .connection import BrokerConnection, wire_error
from .metadata import TopicPartition

_RETRY_COORDINATOR = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                      ErrorCode.NOT_COORDINATOR}


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


@dataclass(frozen=True)
class TransactionDescription:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction open
    partitions: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no transaction open on the partition


class TransactionAdmin:
    def __init__(self, client: KafkaClient) -> None:
        self.client = client

    async def list_transactions(self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                                duration_ms: int = -1) -> list[TransactionListing]:
        """ListTransactions on every broker (each answers for the partitions of
        __transaction_state it leads); ``duration_ms`` ≥ 0 keeps those open longer than that."""
        await self.client.refresh_metadata([])
        brokers = sorted(self.client.cluster.brokers)

        async def ask(node: int) -> list[TransactionListing]:
            conn = await self.client.connection(node)
            body = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                    "duration_filter": duration_ms}
            version = conn.version_for(ApiKey.LIST_TRANSACTIONS, min_v=1 if duration_ms >= 0 else None)
            r = await conn.request(ApiKey.LIST_TRANSACTIONS, body, version)
            if r.error_code:
                raise wire_error(r.error_code, f"ListTransactions on broker {node}")
            return [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state, node)
                    for t in r.transaction_states]

        results = await asyncio.gather(*(ask(n) for n in brokers))
        return [listing for per_broker in results for listing in per_broker]

    async def coordinator(self, transactional_id: str, timeout_ms: int = 30000) -> tuple[int, BrokerConnection]:
        """(node id, connection) of the transactional id's coordinator."""
        client = self.client
        deadline = client.time.monotonic_ms() + timeout_ms
        while True:
            conn = await client.any_connection()
            version = conn.version_for(ApiKey.FIND_COORDINATOR, max_v=3)
            r = await conn.request(ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": 1}, version)
            if r.error_code == ErrorCode.NONE:
                return r.node_id, await client.connection(r.node_id)
            if r.error_code not in _RETRY_COORDINATOR or client.time.monotonic_ms() > deadline:
                raise wire_error(r.error_code, f"FindCoordinator for transactional id {transactional_id!r}",
                                 r.error_message)
            await sleep(client.time, 100)

    async def describe_transaction(self, transactional_id: str, timeout_ms: int = 30000) -> TransactionDescription:
        """DescribeTransactions at the id's coordinator (TRANSACTIONAL_ID_NOT_FOUND raised as
        its KafkaError)."""
        client = self.client
        deadline = client.time.monotonic_ms() + timeout_ms
        while True:
            node, conn = await self.coordinator(transactional_id, timeout_ms)
            r = await conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]})
            [s] = r.transaction_states
            if s.error_code in _RETRY_COORDINATOR and client.time.monotonic_ms() < deadline:
                await sleep(client.time, 100)
                continue
            if s.error_code:
                raise wire_error(s.error_code, f"DescribeTransactions {transactional_id!r}")
            partitions = [TopicPartition(t.topic, p) for t in s.topics for p in t.partitions]
            return TransactionDescription(node, s.transactional_id, s.producer_id, s.producer_epoch,
                                          s.transaction_state, s.transaction_timeout_ms, s.transaction_start_time_ms,
                                          sorted(partitions))

    async def describe_producers(self, partitions: Iterable[TopicPartition], broker_id: int | None = None
                                 ) -> dict[TopicPartition, list[ProducerState] | KafkaError]:
        """DescribeProducers: per partition its active producers (or the error it got), asked
        of each partition's leader, or of ``broker_id``."""
        pending = [TopicPartition(*tp) for tp in partitions]
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            node = broker_id if broker_id is not None else await self.client.leader_for(tp.topic, tp.partition)
            by_node.setdefault(node, []).append(tp)
        out: dict[TopicPartition, list[ProducerState] | KafkaError] = {}

        async def ask(node: int, tps: list[TopicPartition]) -> None:
            conn = await self.client.connection(node)
            topics: dict[str, list[int]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(tp.partition)
            r = await conn.request(ApiKey.DESCRIBE_PRODUCERS, {
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
            for t in r.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        out[tp] = wire_error(p.error_code, f"DescribeProducers {tp.topic}-{tp.partition}",
                                             p.error_message)
                    else:
                        out[tp] = [ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                                                 s.coordinator_epoch, s.current_txn_start_offset)
                                   for s in p.active_producers]

        await asyncio.gather(*(ask(n, tps) for n, tps in by_node.items()))
        return out

    async def abort_transaction(self, partition: TopicPartition, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int) -> None:
        """Kafka's Admin.abortTransaction: an ABORT marker for the producer's transaction on the
        partition, written by its leader (WriteTxnMarkers; CLUSTER_ACTION or ALTER on the
        cluster)."""
        tp = TopicPartition(*partition)

        async def attempt() -> None:
            conn = await self.client.leader_connection(tp.topic, tp.partition)
            r = await conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
                "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}]}]})
            for m in r.markers:
                for t in m.topics:
                    for p in t.partitions:
                        if p.error_code:
                            raise wire_error(p.error_code, f"WriteTxnMarkers {tp.topic}-{tp.partition}")

        await self.client.with_retries(attempt, [tp.topic])
