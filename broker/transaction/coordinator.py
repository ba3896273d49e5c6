"""The transaction coordinator (Kafka's TransactionCoordinator, TransactionStateManager,
TransactionMetadata), beside the group coordinator and built the same way.

Theory of operation. A transactional id lives in partition ``abs(hashCode(id)) %
transaction.state.log.num.partitions`` of ``__transaction_state``; the leader of that
partition is its coordinator, and the partition's leader epoch is the coordinator epoch the
markers carry. Everything that changes a transaction's state is in this file:

* ``TransactionMetadata`` holds one id's producer id and epoch, timeout, state, partitions and
  times. A change is *prepared* (``pending``: the target ``TxnTransit``), written to the log
  through the injected ``append`` (an acks=all replicated append) and *applied* only once the
  append is acknowledged; a failed append drops the pending change. While one is pending,
  another request for the id answers CONCURRENT_TRANSACTIONS (the client retries).
* The states and what moves them (Kafka's)::

      Empty / CompleteCommit / CompleteAbort --AddPartitions--> Ongoing --EndTxn--> PrepareCommit | PrepareAbort
      PrepareCommit --markers acknowledged--> CompleteCommit;  PrepareAbort --> CompleteAbort
      Ongoing --InitProducerId or the timeout--> (PrepareEpochFence: epoch bumped in memory) --> PrepareAbort
      Empty / Complete* --InitProducerId--> Empty (epoch bumped)
      Empty / Complete* idle for transactional.id.expiration.ms --> Dead (a tombstone)

* ``markers`` (the injected ``TxnMarkerSender``) writes COMMIT/ABORT markers to every partition
  of the transaction and calls back once all are acknowledged; the coordinator then writes
  the Complete state. Markers are retried until acknowledged (leader changes included).
* ``on_election`` loads a partition (the last value per id wins, tombstones remove) and
  finishes what was in flight: PrepareCommit/PrepareAbort resend their markers.
  ``on_resignation`` drops the partition's ids.

Time is injected (protocol.clock): the timeout and expiration passes are timers on it.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from protocol.clock import Time, TimerHandle
from protocol.errors import ErrorCode
from protocol.messages.transactions import (TxnLogValue, read_transaction_log_key, read_transaction_log_value,
                                            transaction_log_key, transaction_log_value)

from ..coordinator.group_metadata_manager import partition_for
from ..metrics import FastHistogram

if TYPE_CHECKING:
    from ..producer_ids import ProducerIdGenerator

log = logging.getLogger("kbroker.transaction")

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
INT16_MAX = 32767
Record = tuple[bytes, "bytes | None"]
AppendFn = Callable[[int, list, Callable[[int], None]], None]
ReadFn = Callable[[int, Callable[["Iterable[Record] | None"], None]], None]
Respond = Callable[..., None]


END_TXN_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
                           0.3, 0.5, 1.0, 2.5, 5.0, 10.0)


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids (as written in TransactionLogValue.TransactionStatus)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """The name ListTransactions / DescribeTransactions use (Kafka's stateName)."""
        return _DISPLAY[self]


_DISPLAY = {TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
            TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
            TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
            TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
STATE_BY_NAME = {v: k for k, v in _DISPLAY.items()}
_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
_PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass
class TransactionConfig:
    num_partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 100 * 1024 * 1024
    max_timeout_ms: int = 900000
    abort_timed_out_interval_ms: int = 10000
    id_expiration_ms: int = 7 * 24 * 3600 * 1000
    remove_expired_interval_ms: int = 3600 * 1000
    append_timeout_ms: int = 5000

    @classmethod
    def from_values(cls, values: dict) -> "TransactionConfig":
        def get(key: str, default: int) -> int:
            v = values.get(key)
            return default if v is None else int(v)
        return cls(get("transaction.state.log.num.partitions", 50),
                   get("transaction.state.log.replication.factor", 3),
                   get("transaction.state.log.min.isr", 2),
                   get("transaction.state.log.segment.bytes", 100 * 1024 * 1024),
                   get("transaction.max.timeout.ms", 900000),
                   get("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000),
                   get("transactional.id.expiration.ms", 7 * 24 * 3600 * 1000),
                   get("transaction.remove.expired.transaction.cleanup.interval.ms", 3600 * 1000))


@dataclass
class TxnTransit:
    """A state change being written (Kafka's TxnTransitMetadata)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    update_ms: int


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = -1
    producer_epoch: int = -1
    last_producer_epoch: int = -1
    timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    pending: TxnTransit | None = None
    # The epoch bumped in memory to fence an ongoing transaction (PrepareEpochFence).
    fencing: bool = False

    def transit(self, *, state: TxnState, now_ms: int, producer_id: int | None = None, epoch: int | None = None,
                last_epoch: int | None = None, last_producer_id: int | None = None, timeout_ms: int | None = None,
                partitions: Iterable[tuple[str, int]] | None = None, start_ms: int | None = None) -> TxnTransit:
        t = TxnTransit(self.producer_id if producer_id is None else producer_id,
                       self.last_producer_id if last_producer_id is None else last_producer_id,
                       self.producer_epoch if epoch is None else epoch,
                       self.last_producer_epoch if last_epoch is None else last_epoch,
                       self.timeout_ms if timeout_ms is None else timeout_ms, state,
                       frozenset(self.partitions if partitions is None else partitions),
                       self.start_ms if start_ms is None else start_ms, now_ms)
        self.pending = t
        return t

    def complete(self, t: TxnTransit) -> None:
        self.producer_id, self.last_producer_id = t.producer_id, t.last_producer_id
        self.producer_epoch, self.last_producer_epoch = t.producer_epoch, t.last_producer_epoch
        self.timeout_ms, self.state = t.timeout_ms, t.state
        self.partitions = set(t.partitions)
        self.start_ms, self.update_ms = t.start_ms, t.update_ms
        self.pending = None

    def log_value(self, t: TxnTransit) -> TxnLogValue:
        parts = () if t.state in (TxnState.EMPTY, *_COMPLETE) else tuple(sorted(t.partitions))
        return TxnLogValue(t.producer_id, t.producer_epoch, t.timeout_ms, int(t.state), parts, t.update_ms,
                           t.start_ms)


def append_error(error: int) -> int:
    """A failed __transaction_state append, as the client's error (Kafka's mapping)."""
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.UNKNOWN_SERVER_ERROR


class TxnMarkerSender:
    """What the coordinator needs to write markers (broker/transaction/markers.py)."""

    def send(self, transactional_id: str, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
             partitions: frozenset[tuple[str, int]], done: Callable[[], None]) -> None:
        raise NotImplementedError


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, time: Time, append: AppendFn, read_partition: ReadFn,
                 producer_ids: "ProducerIdGenerator", markers: TxnMarkerSender) -> None:
        self.config = config
        self.time = time
        self.append = append
        self.read_partition = read_partition
        self.producer_ids = producer_ids
        self.markers = markers
        self.txns: dict[str, TransactionMetadata] = {}
        self.owned: dict[int, int] = {}  # partition -> coordinator epoch (leader epoch)
        self.loading: set[int] = set()
        self._timers: list[TimerHandle] = []
        self.stats = {"commits": 0, "aborts": 0, "marker_latency_ms": []}  # (metrics: broker/metrics.py)
        # EndTxn received -> every marker of its transaction acknowledged (seconds): the issue's
        # commit latency, cumulative (a histogram, so a window of it is the difference of two scrapes)
        self.end_txn_latency = FastHistogram(END_TXN_LATENCY_BUCKETS)
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------
    def startup(self) -> None:
        self._every(self.config.abort_timed_out_interval_ms, self.abort_timed_out_transactions)
        self._every(self.config.remove_expired_interval_ms, self.remove_expired_transactional_ids)

    def _every(self, interval_ms: int, fn: Callable[[], None]) -> None:
        def run() -> None:
            if self._closed:
                return
            try:
                fn()
            except Exception:
                log.exception("transaction coordinator pass %s failed", fn.__name__)
            self._timers.append(self.time.schedule(interval_ms, run))
        self._timers.append(self.time.schedule(interval_ms, run))

    def shutdown(self) -> None:
        self._closed = True
        for t in self._timers:
            t.cancel()
        self._timers.clear()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def topic_configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact", "segment.bytes": str(self.config.segment_bytes),
                "min.insync.replicas": str(self.config.min_isr), "unclean.leader.election.enable": "false",
                "compression.type": "uncompressed"}

    # -- leadership ------------------------------------------------------------------------
    def on_elected(self, partition: int, epoch: int | None = None) -> None:
        coordinator_epoch = epoch if epoch is not None else 0
        if self.owned.get(partition, -1) >= coordinator_epoch:
            # an older election, or this one again: LeaderAndIsr of an ISR change keeps the leader
            # epoch, and a reload would resend the markers of every prepared transaction
            return
        self._drop_partition(partition)
        self.owned[partition] = coordinator_epoch
        self.loading.add(partition)

        def loaded(records: Iterable[Record] | None) -> None:
            if self.owned.get(partition) != coordinator_epoch:
                return  # resigned or re-elected meanwhile
            self.loading.discard(partition)
            if records is None:
                return
            found: dict[str, TxnLogValue | None] = {}
            for key, value in records:
                try:
                    tid = read_transaction_log_key(key)
                    found[tid] = None if value is None else read_transaction_log_value(value)
                except Exception as exc:
                    log.warning("__transaction_state-%d: skipping an unreadable record: %s", partition, exc)
            resumed = 0
            for tid, v in found.items():
                if v is None or v.status == TxnState.DEAD:
                    continue
                md = TransactionMetadata(tid, v.producer_id, -1, v.producer_epoch, -1, v.timeout_ms,
                                         TxnState(v.status), set(v.partitions), v.start_ms, v.last_update_ms)
                self.txns[tid] = md
                if md.state in _PREPARE:
                    resumed += 1
                    self._send_markers(md, coordinator_epoch)
            log.info("loaded %d transactional ids of __transaction_state-%d (coordinator epoch %d); resending the "
                     "markers of %d prepared transactions", sum(1 for v in found.values() if v is not None), partition,
                     coordinator_epoch, resumed)

        self.read_partition(partition, loaded)

    def on_resigned(self, partition: int, epoch: int | None = None) -> None:
        current = self.owned.get(partition)
        if current is None or (epoch is not None and epoch < current):
            return
        self._drop_partition(partition)

    def _drop_partition(self, partition: int) -> None:
        self.owned.pop(partition, None)
        self.loading.discard(partition)
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[tid]

    def _coordinator_error(self, transactional_id: str) -> int:
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    # -- writing -----------------------------------------------------------------------------
    def _write(self, md: TransactionMetadata, t: TxnTransit, done: Callable[[int], None]) -> None:
        """Write ``t`` (pending on ``md``); apply it when acknowledged, then ``done(error)``."""
        partition = self.partition_for(md.transactional_id)
        epoch = self.owned.get(partition)
        value = transaction_log_value(md.log_value(t)) if t.state != TxnState.DEAD else None

        def written(error: int) -> None:
            if self.owned.get(partition) != epoch or self.txns.get(md.transactional_id) is not md:
                # the coordinator moved meanwhile: the new one loads what was written
                return done(ErrorCode.NOT_COORDINATOR)
            if error:
                log.warning("writing %s of transactional id %r failed: %s", t.state.display, md.transactional_id,
                            _name(error))
                if md.pending is t:
                    md.pending = None
                return done(append_error(error))
            md.complete(t)
            done(ErrorCode.NONE)

        self.append(partition, [(transaction_log_key(md.transactional_id), value)], written)

    # -- InitProducerId --------------------------------------------------------------------
    def handle_init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int,
                                respond: Callable[[int, int, int], None]) -> None:
        """``respond(error, producer id, epoch)``. ``producer_id``/``producer_epoch``: -1, or
        the client's current ones (KIP-360, v3+: bump the epoch of this very producer)."""
        if not transactional_id:
            return respond(ErrorCode.INVALID_REQUEST, -1, -1)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return respond(ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1)
        error = self._coordinator_error(transactional_id)
        if error:
            return respond(error, -1, -1)
        md = self.txns.get(transactional_id)
        if md is None:
            def allocated(error: int, pid: int) -> None:
                if error:
                    return respond(error, -1, -1)
                err = self._coordinator_error(transactional_id)
                if err:
                    return respond(err, -1, -1)
                current = self.txns.get(transactional_id)
                if current is None:
                    current = self.txns[transactional_id] = TransactionMetadata(transactional_id, pid,
                                                                                timeout_ms=timeout_ms)
                self._init_with(current, timeout_ms, producer_id, producer_epoch, respond)
            self.producer_ids.generate(allocated)
            return
        self._init_with(md, timeout_ms, producer_id, producer_epoch, respond)

    def _init_with(self, md: TransactionMetadata, timeout_ms: int, producer_id: int, producer_epoch: int,
                   respond: Callable[[int, int, int], None]) -> None:
        if md.pending is not None or md.state in _PREPARE:
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
        if producer_id >= 0:
            # KIP-360: only the current producer (or a retry of the last bump) may ask
            retry = (producer_id in (md.producer_id, md.last_producer_id) and producer_epoch == md.last_producer_epoch
                     and md.state in (TxnState.EMPTY, *_COMPLETE))
            if retry:
                return respond(ErrorCode.NONE, md.producer_id, md.producer_epoch)
            if not (producer_id == md.producer_id and producer_epoch == md.producer_epoch):
                return respond(ErrorCode.PRODUCER_FENCED, -1, -1)
        now = self.time.milliseconds()
        if md.state == TxnState.ONGOING:
            # fence the producer of the ongoing transaction and abort it; the client retries
            self._fence_and_abort(md, now)
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
        if md.state == TxnState.PREPARE_EPOCH_FENCE:
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)

        def bumped(pid: int, epoch: int, last_pid: int, last_epoch: int) -> None:
            t = md.transit(state=TxnState.EMPTY, now_ms=now, producer_id=pid, epoch=epoch, last_producer_id=last_pid,
                           last_epoch=last_epoch, timeout_ms=timeout_ms, partitions=(), start_ms=-1)
            self._write(md, t, lambda error: respond(error, pid if not error else -1, epoch if not error else -1))

        if md.producer_epoch + 1 >= INT16_MAX - 1:
            # the epoch is exhausted: a new producer id, epoch 0
            def allocated(error: int, pid: int) -> None:
                if error:
                    return respond(error, -1, -1)
                bumped(pid, 0, md.producer_id, md.producer_epoch)
            self.producer_ids.generate(allocated)
            return
        bumped(md.producer_id, md.producer_epoch + 1, -1, md.producer_epoch)

    def _fence_and_abort(self, md: TransactionMetadata, now: int) -> None:
        """Kafka's prepareFenceProducerEpoch then endTransaction(ABORT): the epoch bumped in
        memory (PrepareEpochFence), PrepareAbort written with it, then the markers."""
        epoch = md.producer_epoch + 1 if md.producer_epoch + 1 < INT16_MAX else md.producer_epoch
        md.fencing = True
        md.state = TxnState.PREPARE_EPOCH_FENCE
        t = md.transit(state=TxnState.PREPARE_ABORT, now_ms=now, epoch=epoch, last_epoch=md.producer_epoch)

        def written(error: int) -> None:
            md.fencing = False
            if error:
                md.state = TxnState.ONGOING
                return
            log.info("transactional id %r: ongoing transaction of producer %d aborted, epoch bumped to %d",
                     md.transactional_id, md.producer_id, epoch)
            self._send_markers(md, self.owned.get(self.partition_for(md.transactional_id), 0))
        self._write(md, t, written)

    # -- the producer's checks -------------------------------------------------------------
    def _check_producer(self, md: TransactionMetadata | None, producer_id: int, epoch: int) -> int:
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.NONE

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------
    def handle_add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                              partitions: list[tuple[str, int]], respond: Callable[[int], None],
                              verify_only: bool = False) -> None:
        """``respond(error)`` for every partition alike. ``verify_only`` (KIP-890, a leader
        asking): INVALID_TXN_STATE unless the partitions are in the ongoing transaction."""
        error = self._coordinator_error(transactional_id)
        if error:
            return respond(error)
        md = self.txns.get(transactional_id)
        error = self._check_producer(md, producer_id, epoch)
        if error:
            return respond(error)
        assert md is not None
        if verify_only:
            # Kafka's handleVerifyPartitionsInTransaction
            if (md.pending is not None and not md.fencing) or md.state in _PREPARE:
                return respond(ErrorCode.CONCURRENT_TRANSACTIONS)
            ok = md.state == TxnState.ONGOING and all(p in md.partitions for p in partitions)
            return respond(ErrorCode.NONE if ok else ErrorCode.INVALID_TXN_STATE)
        if md.pending is not None or md.state in (*_PREPARE, TxnState.PREPARE_EPOCH_FENCE):
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS)
        if md.state == TxnState.DEAD:
            return respond(ErrorCode.INVALID_TXN_STATE)
        if md.state == TxnState.ONGOING and all(p in md.partitions for p in partitions):
            return respond(ErrorCode.NONE)
        now = self.time.milliseconds()
        start = md.start_ms if md.state == TxnState.ONGOING else now
        t = md.transit(state=TxnState.ONGOING, now_ms=now, partitions=md.partitions | set(partitions) if
                       md.state == TxnState.ONGOING else set(partitions), start_ms=start)
        self._write(md, t, respond)

    # -- EndTxn ------------------------------------------------------------------------------
    def handle_end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                       respond: Callable[[int], None]) -> None:
        error = self._coordinator_error(transactional_id)
        if error:
            return respond(error)
        md = self.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return respond(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != epoch and not (md.fencing and md.last_producer_epoch == epoch):
            return respond(ErrorCode.PRODUCER_FENCED)
        if md.pending is not None or md.state == TxnState.PREPARE_EPOCH_FENCE:
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS)
        state = md.state
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            now = self.time.milliseconds()
            t = md.transit(state=target, now_ms=now)
            received = self.time.monotonic_ms()

            def written(error: int) -> None:
                respond(error)
                if not error:
                    self._send_markers(md, self.owned.get(self.partition_for(transactional_id), 0), received)
            return self._write(md, t, written)
        if state == TxnState.COMPLETE_COMMIT:
            return respond(ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE)
        if state == TxnState.COMPLETE_ABORT:
            return respond(ErrorCode.NONE if not commit else ErrorCode.INVALID_TXN_STATE)
        if state == TxnState.PREPARE_COMMIT:
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE)
        if state == TxnState.PREPARE_ABORT:
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS if not commit else ErrorCode.INVALID_TXN_STATE)
        return respond(ErrorCode.INVALID_TXN_STATE)  # Empty, Dead

    # -- markers -----------------------------------------------------------------------------
    def _send_markers(self, md: TransactionMetadata, coordinator_epoch: int, end_txn_at: float | None = None) -> None:
        """``end_txn_at``: when the EndTxn that prepared it arrived (monotonic ms), for the
        EndTxn -> markers acknowledged histogram; None for a coordinator's own abort or a reload."""
        commit = md.state == TxnState.PREPARE_COMMIT
        sent_at = self.time.monotonic_ms()
        producer_id, epoch = md.producer_id, md.producer_epoch

        def acknowledged() -> None:
            if self.txns.get(md.transactional_id) is not md or md.producer_id != producer_id \
                    or md.producer_epoch != epoch or md.state not in _PREPARE:
                return
            acked_at = self.time.monotonic_ms()
            latency = acked_at - sent_at
            if end_txn_at is not None:
                self.end_txn_latency.observe((acked_at - end_txn_at) / 1000.0)
            lat = self.stats["marker_latency_ms"]
            assert isinstance(lat, list)
            lat.append(latency)
            if len(lat) > 10000:
                del lat[:5000]
            target = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            t = md.transit(state=target, now_ms=self.time.milliseconds())

            def written(error: int) -> None:
                if error == ErrorCode.NONE:
                    key = "commits" if commit else "aborts"
                    self.stats[key] = int(self.stats[key]) + 1  # type: ignore[call-overload]
                elif error != ErrorCode.NOT_COORDINATOR:
                    # retried: the markers are idempotent from the client's view
                    self.time.schedule(100, acknowledged)
            self._write(md, t, written)

        self.markers.send(md.transactional_id, producer_id, epoch, commit, coordinator_epoch,
                          frozenset(md.partitions), acknowledged)

    # -- timeouts and expiration -------------------------------------------------------------
    def abort_timed_out_transactions(self) -> None:
        now = self.time.milliseconds()
        for md in list(self.txns.values()):
            if md.state == TxnState.ONGOING and md.pending is None and md.start_ms + md.timeout_ms < now:
                log.info("transactional id %r: transaction of producer %d epoch %d timed out after %d ms; aborting",
                         md.transactional_id, md.producer_id, md.producer_epoch, md.timeout_ms)
                self._fence_and_abort(md, now)

    def remove_expired_transactional_ids(self) -> None:
        now = self.time.milliseconds()
        for md in list(self.txns.values()):
            if md.pending is None and md.state in (TxnState.EMPTY, *_COMPLETE) \
                    and md.update_ms + self.config.id_expiration_ms <= now:
                t = md.transit(state=TxnState.DEAD, now_ms=now)

                def written(error: int, md: TransactionMetadata = md) -> None:
                    if not error and self.txns.get(md.transactional_id) is md:
                        del self.txns[md.transactional_id]
                self._write(md, t, written)

    # -- admin -------------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> dict:
        error = self._coordinator_error(transactional_id)
        md = self.txns.get(transactional_id) if not error else None
        if error or md is None:
            return {"error_code": error or ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "transactional_id": transactional_id,
                    "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                    "producer_id": -1, "producer_epoch": -1, "topics": []}
        topics: dict[str, list[int]] = {}
        for t, p in sorted(md.partitions):
            topics.setdefault(t, []).append(p)
        return {"error_code": ErrorCode.NONE, "transactional_id": transactional_id,
                "transaction_state": md.state.display, "transaction_timeout_ms": md.timeout_ms,
                "transaction_start_time_ms": md.start_ms, "producer_id": md.producer_id,
                "producer_epoch": md.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}

    def list_transactions(self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int,
                          pattern: str | None) -> tuple[int, list[str], list[dict]]:
        states = list(states)
        unknown = [s for s in states if s not in STATE_BY_NAME]
        wanted = {STATE_BY_NAME[s] for s in states if s in STATE_BY_NAME}
        pids = set(producer_ids)
        now = self.time.milliseconds()
        regex = re.compile(pattern) if pattern else None
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, unknown, []
        out = []
        for md in self.txns.values():
            if states and md.state not in wanted:
                continue
            if pids and md.producer_id not in pids:
                continue
            if duration_ms >= 0 and (md.state != TxnState.ONGOING or now - md.start_ms < duration_ms):
                continue
            if regex is not None and not regex.search(md.transactional_id):
                continue
            out.append({"transactional_id": md.transactional_id, "producer_id": md.producer_id,
                        "transaction_state": md.state.display})
        return ErrorCode.NONE, unknown, out


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
