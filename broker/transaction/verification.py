"""KIP-890 part 1: a partition leader verifies a transactional produce with the transaction
coordinator before appending it (Kafka's AddPartitionsToTxnManager and
ReplicaManager.maybeStartTransactionVerificationForPartition).

The first transactional batch of a producer's transaction on a partition (the partition's
producer state shows no transaction of that producer open) is verified: the leader asks the
coordinator of the transactional id whether the partition is in the producer's ongoing
transaction, with AddPartitionsToTxn v4+ ``verify_only`` (broker to broker, CLUSTER_ACTION) over
the inter-broker listener, or directly when this broker is that coordinator. A partition never
added (or a transaction already ended) answers INVALID_TXN_STATE and nothing is written; a
stale epoch PRODUCER_FENCED / INVALID_PRODUCER_EPOCH. Retriable failures of the verification
itself (the coordinator moving, loading, busy or unreachable) become NOT_ENOUGH_REPLICAS, which
producers retry, as Kafka answers them.

A verification guard (one object per producer and partition, Kafka's VerificationGuard) closes
the window between the answer and the append: a marker written meanwhile (the transaction
aborted by its timeout, say) drops the guard, and the append then fails with INVALID_TXN_STATE
instead of opening a transaction nobody will end (a hanging transaction).

Produce requests verifying on a partition are appended in the order they arrived
(broker/partition.py ``VerifyingProduce``), whatever order the answers come back in: Kafka
reads a connection's next request only once the last is answered, kbroker serves a producer's
pipelined requests at once, and their answers may cross (a verification that finds the
connection to the coordinator open overtakes those still waiting for it to open; a coordinator
that moved answers from elsewhere). A batch appended before an earlier one of its producer is
OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka takes for a fatal desynchronization when the
earlier ones then succeed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from ..coordinator.group_metadata_manager import partition_for

if TYPE_CHECKING:
    from ..metadata_cache import MetadataCache
    from ..partition import Partition
    from .coordinator import TransactionCoordinator
    from .markers import TxnMarkerChannel

log = logging.getLogger("kbroker.transaction.verification")

TopicPartition = tuple[str, int]
Done = Callable[[dict[TopicPartition, int]], None]

# Kafka's ReplicaManager: coordinator-side errors a producer should retry, as NOT_ENOUGH_REPLICAS.
RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.NETWORK_EXCEPTION})
VERIFY_VERSION = 4


def client_error(error: int) -> int:
    """The Produce error for a failed verification (Produce knows no PRODUCER_FENCED: a stale
    epoch is INVALID_PRODUCER_EPOCH there)."""
    if error in RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def offsets_error(error: int) -> int:
    """The TxnOffsetCommit error for a verification's answer: Kafka's AddPartitionsToTxnManager
    turns PRODUCER_FENCED into INVALID_PRODUCER_EPOCH for every request version, and
    maybeConvertOffsetCommitError a failed round trip (NETWORK_EXCEPTION) into
    COORDINATOR_LOAD_IN_PROGRESS, which clients retry without looking the coordinator up again;
    the rest (INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS, ...) as is."""
    if error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return error


class TransactionVerifier:
    def __init__(self, *, broker_id: int, metadata_cache: "MetadataCache", coordinator: "TransactionCoordinator",
                 channel: "TxnMarkerChannel", state_topic_name: str) -> None:
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.coordinator = coordinator
        self.channel = channel
        self.state_topic_name = state_topic_name
        self._tasks: dict[asyncio.Task, None] = {}  # (not a set: cancelled in a replayable order)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def verify(self, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition],
               done: Done) -> None:
        """``done({tp: error})`` once, with the coordinator's answer per partition (already
        mapped for the producer: ``client_error``)."""
        def answered(errors: dict[TopicPartition, int]) -> None:
            done({tp: client_error(errors.get(tp, ErrorCode.INVALID_TXN_STATE)) for tp in partitions})

        self._ask(transactional_id, producer_id, epoch, partitions, answered)

    def verify_offsets(self, partition: "Partition | None", transactional_id: str, producer_id: int, epoch: int,
                       done: Callable[[int], None]) -> None:
        """TxnOffsetCommit (Kafka's GroupCoordinator.handleTxnCommitOffsets): the group's
        ``__consumer_offsets`` ``partition`` (led here) must be in the producer's transaction
        (AddOffsetsToTxn) before its offsets are written; ``done(error)``, with the error as
        Kafka's TxnOffsetCommit answers it (``offsets_error``). Nothing to ask when the
        producer's transaction is already open on the partition at this epoch."""
        if partition is None or not partition.is_leader:
            return done(ErrorCode.NOT_COORDINATOR)
        if not partition.needs_verification(producer_id, epoch):
            return done(ErrorCode.NONE)
        tp = (partition.topic, partition.partition)
        guard = partition.start_verification(producer_id, -1)

        def answered(errors: dict[TopicPartition, int]) -> None:
            guard.in_flight -= 1
            error = errors.get(tp, ErrorCode.INVALID_TXN_STATE)
            if error == ErrorCode.NONE and not partition.verification_holds(producer_id, guard):
                error = ErrorCode.INVALID_TXN_STATE  # a marker ended the transaction meanwhile
            done(offsets_error(error))

        self._ask(transactional_id, producer_id, epoch, [tp], answered)

    def _ask(self, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition],
             answered: Done) -> None:
        """``answered({tp: error})`` once, with the coordinator's own errors."""
        state_partition = partition_for(transactional_id, self.coordinator.config.num_partitions)
        info = self.metadata_cache.topics.get(self.state_topic_name)
        state = info.partitions.get(state_partition) if info is not None else None
        if state is None or state.leader < 0:
            return answered({tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in partitions})
        if state.leader == self.broker_id:
            self.coordinator.handle_add_partitions(transactional_id, producer_id, epoch, partitions,
                                                   lambda error: answered({tp: error for tp in partitions}),
                                                   verify_only=True)
            return
        task = asyncio.get_running_loop().create_task(
            self._remote(state.leader, transactional_id, producer_id, epoch, partitions, answered))
        self._tasks[task] = None
        task.add_done_callback(self._tasks.pop)

    async def _remote(self, broker_id: int, transactional_id: str, producer_id: int, epoch: int,
                      partitions: list[TopicPartition], answered: Done) -> None:
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        try:
            conn = await self.channel.connection(broker_id)
            response = await conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, {"transactions": [{
                "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": epoch,
                "verify_only": True, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]},
                VERIFY_VERSION)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("verifying transactional id %r with broker %d failed: %s", transactional_id, broker_id, exc)
            return answered({tp: ErrorCode.NETWORK_EXCEPTION for tp in partitions})
        if response.error_code:
            log.error("AddPartitionsToTxn (verify) to broker %d answered %s", broker_id, response.error_code)
            # the producer must not see CLUSTER_AUTHORIZATION_FAILED: the verification did not complete
            error = (ErrorCode.INVALID_TXN_STATE if response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                     else response.error_code)
            return answered({tp: error for tp in partitions})
        errors: dict[TopicPartition, int] = {}
        for txn in response.results_by_transaction:
            for t in txn.topic_results:
                for p in t.results_by_partition:
                    errors[(t.name, p.partition_index)] = p.partition_error_code
        answered(errors)
