"""``kbroker transactions list | describe | describe-producers | find-hanging | abort``: what
kafka-transactions.sh (Kafka's TransactionsCommand) shows and does, through
``protocol.client.transactions.TransactionAdmin``. Its tables have the same columns, printed as
Kafka's ToolsUtils.prettyPrintTable does (left-aligned, padded, one header line); errors exit 1
with Kafka's messages.

find-hanging (KIP-664): the open transactions of the partitions searched (DescribeProducers)
whose last write is older than --max-transaction-timeout minutes, less those the coordinator
still expects to finish: a producer id no coordinator lists, or whose transactional id's current
transaction does not include the partition, is hanging. abort writes an ABORT marker for such a
transaction through the partition leader (WriteTxnMarkers; needs CLUSTER_ACTION or ALTER on the
cluster), identified by its start offset or by producer id, epoch and coordinator epoch."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

from protocol.client import KafkaClient, TopicPartition
from protocol.client.transactions import ProducerState, TransactionAdmin
from protocol.errors import ErrorCode, KafkaError


def pretty_print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns as wide as their widest cell, separated by a tab (Kafka's prettyPrintTable)."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [list(headers)] + [list(r) for r in rows]:
        print("\t".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def _now_ms() -> int:
    return int(time.time() * 1000)  # the CLI's wall clock, as the Java tool's Time.SYSTEM


async def list_transactions(client: KafkaClient, args: argparse.Namespace) -> int:
    duration = args.duration_filter if args.duration_filter is not None else -1
    listings = await TransactionAdmin(client).list_transactions(duration_ms=duration)
    pretty_print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                       [[t.transactional_id, str(t.coordinator), str(t.producer_id), t.state] for t in listings])
    return 0


async def describe(client: KafkaClient, args: argparse.Namespace) -> int:
    try:
        d = await TransactionAdmin(client).describe_transaction(args.transactional_id)
    except KafkaError as exc:
        return _fail(f"Failed to describe transaction state of transactional-id `{args.transactional_id}`: {exc}")
    if d.start_time_ms >= 0:
        start, duration = str(d.start_time_ms), str(_now_ms() - d.start_time_ms)
    else:
        start = duration = "None"
    pretty_print_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                        "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                        "TopicPartitions"],
                       [[str(d.coordinator), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
                         str(d.timeout_ms), start, duration, ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions)]])
    return 0


async def describe_producers(client: KafkaClient, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    result = (await TransactionAdmin(client).describe_producers([tp], args.broker_id)).get(tp)
    if isinstance(result, KafkaError) or result is None:
        where = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
        return _fail(f"Failed to describe producers for partition {tp.topic}-{tp.partition} on {where}: {result}")
    pretty_print_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                        "CurrentTransactionStartOffset"],
                       [[str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch), str(p.last_sequence),
                         str(p.last_timestamp),
                         str(p.current_txn_start_offset) if p.current_txn_start_offset >= 0 else "None"]
                        for p in result])
    return 0


async def abort(client: KafkaClient, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    admin = TransactionAdmin(client)
    if args.start_offset is None and args.producer_id is None:
        return _fail("The transaction to abort must be identified either with --start-offset (for brokers on 3.0 "
                     "or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)")
    if args.start_offset is None:
        if args.producer_epoch is None:
            return _fail("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            return _fail("Missing required argument --coordinator-epoch")
        # a transaction that hung before its producer id's first marker has coordinator epoch -1
        # in DescribeProducers: 0 is at most any coordinator's epoch (as the Java tool does)
        spec = (args.producer_id, args.producer_epoch, max(0, args.coordinator_epoch))
    else:
        result = (await admin.describe_producers([tp])).get(tp)
        if isinstance(result, KafkaError) or result is None:
            return _fail(f"Failed to validate producer state for partition {tp.topic}-{tp.partition}: {result}")
        found = [p for p in result if p.current_txn_start_offset >= 0 and p.current_txn_start_offset == args.start_offset]
        if not found:
            return _fail(f"Could not find any open transactions starting at offset {args.start_offset} on partition "
                         f"{tp.topic}-{tp.partition}")
        p = found[0]
        spec = (p.producer_id, p.producer_epoch, max(0, p.coordinator_epoch))
    try:
        await admin.abort_transaction(tp, *spec)
    except KafkaError as exc:
        return _fail(f"Failed to abort transaction (topicPartition={tp.topic}-{tp.partition}, producerId={spec[0]}, "
                     f"producerEpoch={spec[1]}, coordinatorEpoch={spec[2]}): {exc}")
    return 0


async def find_hanging(client: KafkaClient, args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        return _fail("The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search")
    if args.partition is not None and args.topic is None:
        return _fail("The --partition argument requires --topic to be provided")
    max_timeout_ms = args.max_transaction_timeout * 60_000
    admin = TransactionAdmin(client)
    partitions = await _partitions_to_search(client, args)
    if isinstance(partitions, str):
        return _fail(partitions)
    candidates: list[tuple[TopicPartition, ProducerState]] = []
    now = _now_ms()
    if partitions:
        found = await admin.describe_producers(partitions, args.broker_id)
        for tp, producers in found.items():
            if isinstance(producers, KafkaError):
                return _fail(f"Failed to describe producers for {len(partitions)} partitions on broker "
                             f"{args.broker_id}: {producers}")
            candidates.extend((tp, p) for p in producers
                              if p.current_txn_start_offset >= 0 and now - p.last_timestamp > max_timeout_ms)
    hanging: list[tuple[TopicPartition, ProducerState]] = []
    if candidates:
        producer_ids = {p.producer_id for _tp, p in candidates}
        listings = await admin.list_transactions(producer_ids=producer_ids)
        ids = {t.producer_id: t.transactional_id for t in listings if t.producer_id in producer_ids}
        descriptions = {}
        for transactional_id in set(ids.values()):
            try:
                descriptions[transactional_id] = await admin.describe_transaction(transactional_id)
            except KafkaError as exc:
                if exc.error_code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    return _fail(f"Failed to describe {len(set(ids.values()))} transactions: {exc}")
        for tp, p in candidates:
            transactional_id = ids.get(p.producer_id)
            description = descriptions.get(transactional_id) if transactional_id is not None else None
            # the coordinator lists the partitions it will still write a marker to: those are not hanging
            if description is None or tp not in description.partitions:
                hanging.append((tp, p))
    pretty_print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)"],
                       [[tp.topic, str(tp.partition), str(p.producer_id), str(p.producer_epoch),
                         str(p.coordinator_epoch), str(p.current_txn_start_offset), str(p.last_timestamp),
                         str((now - p.last_timestamp) // 60_000)] for tp, p in hanging])
    return 0


async def _partitions_to_search(client: KafkaClient, args: argparse.Namespace) -> list[TopicPartition] | str:
    """The partitions find-hanging looks at (those with a replica on --broker-id), or the error."""
    if args.topic is not None and args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    cluster = await client.refresh_metadata([args.topic] if args.topic is not None else None)
    topics = [args.topic] if args.topic is not None else sorted(cluster.topics)
    out = []
    for name in topics:
        topic = cluster.topics.get(name)
        if topic is None or topic.error_code:
            return f"Failed to describe 1 topics: {name}: UNKNOWN_TOPIC_OR_PARTITION"
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition):
            if args.broker_id is None or args.broker_id in p.replicas:
                out.append(TopicPartition(name, p.partition))
    return out


def _fail(message: str) -> int:
    """Kafka's printErrorAndExit: the message on stderr, exit 1."""
    print(message, file=sys.stderr)
    return 1
