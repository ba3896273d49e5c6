"""The transaction APIs as KafkaApis serves them (Kafka's KafkaApis handlers, their
authorization included): InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit, DescribeTransactions,
ListTransactions, DescribeProducers and FindCoordinator(TRANSACTION)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import APIS

from ..coordinator.group_metadata_manager import GROUP_METADATA_TOPIC_NAME
from ..security.authorizer import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from ..apis import KafkaApis
    from ..coordinator.offsets_topic import OffsetsTopic
    from ..network import RequestContext
    from .coordinator import TransactionCoordinator

log = logging.getLogger("kbroker.transaction")


def fenced(error: int, version: int, first_version: int) -> int:
    """PRODUCER_FENCED (KIP-588) to clients that know it, else INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


class TransactionApis:
    def __init__(self, apis: "KafkaApis", coordinator: "TransactionCoordinator", state_topic: "OffsetsTopic",
                 on_markers_written: Callable[[int, bool, list[tuple[str, int]]], None] | None = None) -> None:
        self.apis = apis
        self.coordinator = coordinator
        self.state_topic = state_topic
        self.on_markers_written = on_markers_written

    def handlers(self) -> dict[int, Callable[["RequestContext"], None]]:
        return {
            ApiKey.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKey.END_TXN: self.handle_end_txn,
            ApiKey.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            ApiKey.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.handle_list_transactions,
            ApiKey.DESCRIBE_PRODUCERS: self.handle_describe_producers,
            ApiKey.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
        }

    def _write_txn_id(self, ctx: "RequestContext", transactional_id: str) -> bool:
        return self.apis.authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)

    # -- FindCoordinator(TRANSACTION) ---------------------------------------------------------
    def locate(self, key: str, listener: str) -> tuple[int, int, str, int]:
        return self.state_topic.locate(self.coordinator.partition_for(key), listener)

    # -- InitProducerId ----------------------------------------------------------------------
    def init_producer_id(self, ctx: "RequestContext", req) -> None:
        api = APIS[ApiKey.INIT_PRODUCER_ID]
        version = ctx.api_version
        tid = req.transactional_id

        def respond(error: int, producer_id: int, epoch: int) -> None:
            self.apis.send(ctx, api, {"error_code": fenced(error, version, 4), "producer_id": producer_id,
                                      "producer_epoch": epoch})

        pid, epoch = (req.producer_id, req.producer_epoch) if version >= 3 else (-1, -1)
        self.coordinator.handle_init_producer_id(tid, req.transaction_timeout_ms, pid, epoch, respond)

    # -- AddPartitionsToTxn --------------------------------------------------------------------
    def handle_add_partitions_to_txn(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.ADD_PARTITIONS_TO_TXN]
        req = self.apis.parse(ctx, api)
        version = ctx.api_version
        if version >= 4:
            return self._verify_partitions(ctx, api, req)
        tid = req.v3_and_below_transactional_id
        topics = [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]

        def respond(errors: dict[tuple[str, int], int]) -> None:
            out: dict[str, list[dict]] = {}
            for (t, p), e in errors.items():
                out.setdefault(t, []).append({"partition_index": p, "partition_error_code": fenced(e, version, 2)})
            self.apis.send(ctx, api, {"results_by_topic_v3_and_below": [
                {"name": t, "results_by_partition": rows} for t, rows in out.items()]})

        def all_with(code: int) -> dict[tuple[str, int], int]:
            return {(t, p): code for t, ps in topics for p in ps}

        if not self._write_txn_id(ctx, tid):
            return respond(all_with(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        # Kafka: unauthorized topics TOPIC_AUTHORIZATION_FAILED, unknown partitions
        # UNKNOWN_TOPIC_OR_PARTITION, and the rest OPERATION_NOT_ATTEMPTED
        allowed = self.apis.authorized_names(ctx, Operation.WRITE, ResourceType.TOPIC, (t for t, _ in topics))
        errors: dict[tuple[str, int], int] = {}
        for t, ps in topics:
            for p in ps:
                if t not in allowed:
                    errors[(t, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif not self.apis.metadata_cache.contains_partition(t, p):
                    errors[(t, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if errors:
            merged = all_with(ErrorCode.OPERATION_NOT_ATTEMPTED)
            merged.update(errors)
            return respond(merged)
        partitions = [(t, p) for t, ps in topics for p in ps]
        self.coordinator.handle_add_partitions(tid, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                                               partitions, lambda error: respond(all_with(error)))

    def _verify_partitions(self, ctx: "RequestContext", api, req) -> None:
        """v4+ (KIP-890): brokers verifying (or adding) partitions; needs CLUSTER_ACTION."""
        if not self.apis.authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return self.apis.send(ctx, api, {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                             "results_by_transaction": []})
        results: list[dict] = []
        remaining = len(req.transactions)
        if not remaining:
            return self.apis.send(ctx, api, {"error_code": 0, "results_by_transaction": []})
        for txn in req.transactions:
            topics = [(t.name, list(t.partitions)) for t in txn.topics]

            def respond(error: int, txn=txn, topics=topics) -> None:
                nonlocal remaining
                results.append({"transactional_id": txn.transactional_id, "topic_results": [
                    {"name": t, "results_by_partition": [{"partition_index": p, "partition_error_code": error}
                                                         for p in ps]} for t, ps in topics]})
                remaining -= 1
                if remaining == 0:
                    self.apis.send(ctx, api, {"error_code": 0, "results_by_transaction": results})
            self.coordinator.handle_add_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                                   [(t, p) for t, ps in topics for p in ps], respond,
                                                   verify_only=txn.verify_only)

    # -- AddOffsetsToTxn -----------------------------------------------------------------------
    def handle_add_offsets_to_txn(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.ADD_OFFSETS_TO_TXN]
        req = self.apis.parse(ctx, api)
        version = ctx.api_version

        def respond(error: int) -> None:
            self.apis.send(ctx, api, {"error_code": fenced(error, version, 2)})

        if not self._write_txn_id(ctx, req.transactional_id):
            return respond(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.apis.authorize(ctx, Operation.READ, ResourceType.GROUP, req.group_id):
            return respond(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        gc = self.apis.group_coordinator
        if gc is None:
            return respond(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        partition = (GROUP_METADATA_TOPIC_NAME, gc.partition_for(req.group_id))
        self.coordinator.handle_add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                               [partition], respond)

    # -- TxnOffsetCommit --------------------------------------------------------------------------
    def handle_txn_offset_commit(self, ctx: "RequestContext") -> None:
        """Kafka's handleTxnOffsetCommitRequest: WRITE on the transactional id, READ on the group
        (else every partition carries the error), READ on each topic (else its partitions
        TOPIC_AUTHORIZATION_FAILED); then the group coordinator keeps the offsets pending in the
        producer's transaction."""
        api = APIS[ApiKey.TXN_OFFSET_COMMIT]
        req = self.apis.parse(ctx, api)

        def respond(body: dict) -> None:
            self.apis.send(ctx, api, body)

        def all_with(code: int) -> None:
            respond({"topics": [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                                                for p in t.partitions]} for t in req.topics]})

        if not self._write_txn_id(ctx, req.transactional_id):
            return all_with(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.apis.authorize(ctx, Operation.READ, ResourceType.GROUP, req.group_id):
            return all_with(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        gc = self.apis.group_coordinator
        if gc is None:
            return all_with(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        allowed = self.apis.authorized_names(ctx, Operation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
        errors = {(t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                  for t in req.topics if t.name not in allowed for p in t.partitions}
        gc.txn_offset_commit(req, ctx.api_version, respond, errors)

    # -- EndTxn ----------------------------------------------------------------------------------
    def handle_end_txn(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.END_TXN]
        req = self.apis.parse(ctx, api)
        version = ctx.api_version

        def respond(error: int) -> None:
            self.apis.send(ctx, api, {"error_code": fenced(error, version, 2)})

        if not self._write_txn_id(ctx, req.transactional_id):
            return respond(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        self.coordinator.handle_end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed,
                                        respond)

    # -- WriteTxnMarkers -------------------------------------------------------------------------
    def handle_write_txn_markers(self, ctx: "RequestContext") -> None:
        """CLUSTER_ACTION (the coordinator), or ALTER on the cluster (an admin aborting a hanging
        transaction, kafka-transactions.sh abort)."""
        api = APIS[ApiKey.WRITE_TXN_MARKERS]
        req = self.apis.parse(ctx, api)
        markers = [(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
                    [(t.name, p) for t in m.topics for p in t.partition_indexes]) for m in req.markers]
        if not (self.apis.authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, False)
                or self.apis.authorize(ctx, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)):
            return self._markers_response(ctx, api, [(pid, [(t, p, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                                                            for t, p in tps]) for pid, _e, _c, _ce, tps in markers])

        def done(results: list) -> None:
            if self.on_markers_written is not None:
                for (pid, _e, commit, _ce, _tps), (_pid, rows) in zip(markers, results):
                    ok = [(t, p) for t, p, e in rows if e == ErrorCode.NONE and t == GROUP_METADATA_TOPIC_NAME]
                    if ok:
                        self.on_markers_written(pid, commit, ok)
            self._markers_response(ctx, api, results)

        op = self.apis.replica_manager.append_txn_markers(5000, markers, done)
        if op is not None:
            ctx.on_cancel(op.cancel)

    def _markers_response(self, ctx: "RequestContext", api, results: list) -> None:
        out = []
        for pid, rows in results:
            topics: dict[str, list[dict]] = {}
            for t, p, e in rows:
                topics.setdefault(t, []).append({"partition_index": p, "error_code": e})
            out.append({"producer_id": pid, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        self.apis.send(ctx, api, {"markers": out})

    # -- admin -------------------------------------------------------------------------------------
    def handle_describe_transactions(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.DESCRIBE_TRANSACTIONS]
        req = self.apis.parse(ctx, api)
        states = []
        for tid in req.transactional_ids:
            if not self.apis.authorize(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
                states.append({"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional_id": tid,
                               "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                               "producer_id": -1, "producer_epoch": -1, "topics": []})
                continue
            entry = self.coordinator.describe(tid)
            allowed = self.apis.authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC,
                                                 (t["topic"] for t in entry["topics"]), False)
            entry["topics"] = [t for t in entry["topics"] if t["topic"] in allowed]
            states.append(entry)
        self.apis.send(ctx, api, {"transaction_states": states})

    def handle_list_transactions(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.LIST_TRANSACTIONS]
        req = self.apis.parse(ctx, api)
        version = ctx.api_version
        error, unknown, found = self.coordinator.list_transactions(
            req.state_filters, req.producer_id_filters, req.duration_filter if version >= 1 else -1,
            req.transactional_id_pattern if version >= 2 else None)
        found = [s for s in found if self.apis.authorize(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                                         s["transactional_id"], False)]
        self.apis.send(ctx, api, {"error_code": error, "unknown_state_filters": unknown, "transaction_states": found})

    def handle_describe_producers(self, ctx: "RequestContext") -> None:
        """READ on each topic; the active producers of the partitions this broker holds a replica
        of, leader or follower (as Kafka: ``kafka-transactions.sh describe-producers --broker-id``
        and ``find-hanging --broker-id`` ask a given replica)."""
        api = APIS[ApiKey.DESCRIBE_PRODUCERS]
        req = self.apis.parse(ctx, api)
        topics = []
        for t in req.topics:
            allowed = self.apis.authorize(ctx, Operation.READ, ResourceType.TOPIC, t.name)
            parts = []
            for p in t.partition_indexes:
                row = {"partition_index": p, "error_code": 0, "error_message": None, "active_producers": []}
                if not allowed:
                    row["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                else:
                    partition = self.apis.replica_manager.get_partition(t.name, p)
                    if partition is None:
                        row["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif partition.log is None:
                        row["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    else:
                        row["active_producers"] = [
                            {"producer_id": e.producer_id, "producer_epoch": e.producer_epoch,
                             "last_sequence": e.last_seq, "last_timestamp": e.last_timestamp,
                             "coordinator_epoch": e.coordinator_epoch,
                             "current_txn_start_offset": e.current_txn_first_offset}
                            for e in partition.log.producer_state.producers.values()]
                parts.append(row)
            topics.append({"name": t.name, "partitions": parts})
        self.apis.send(ctx, api, {"topics": topics})
