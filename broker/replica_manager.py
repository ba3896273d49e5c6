"""ReplicaManager: the partitions this broker hosts, and the produce / fetch paths over them.

append_records (Kafka's appendRecords): check acks, append to each partition's leader
log, and either answer now or park a DelayedProduce until the high watermark passes the
writes (acks=-1). fetch_messages: read each partition (consumers up to the HW, followers up
to the LEO, followers' fetches moving the HW), answer now when there is enough, or park a
DelayedFetch. become_leader_or_follower applies the controller's LeaderAndIsr.

Errors for one partition go into that partition's slot and never escape a handler.
Not thread-safe: everything runs on the event loop.
"""

from __future__ import annotations

import functools
import logging
import shutil
from typing import TYPE_CHECKING, Callable, Iterable

from protocol.clock import Time
from protocol.errors import (ErrorCode, KafkaError, KafkaStorageError, NotLeaderOrFollowerError,
                             OffsetNotAvailableError,
                             UnknownTopicOrPartitionError)
from protocol.fast_codecs import FetchPartitionData
from protocol.records import iter_batch_headers

from .delayed_delete_records import DelayedDeleteRecords, DeleteRecordsPartitionStatus
from .delayed_fetch import WAKE_NEVER, DelayedFetch, FetchPurgatory
from .delayed_produce import DelayedProduce, ProducePartitionStatus, ProducePurgatory
from .fetch_params import FetchParams
from .partition import (FETCH_LOG_END, FETCH_TXN_COMMITTED, LOCAL_ALTER_PARTITION, AlterPartitionSender,
                        LeaderAndIsrState, Partition)
from .purgatory import DelayedOperationPurgatory

if TYPE_CHECKING:
    from .replication_quota import ReplicationQuotaManager, ReplicationQuotas
    from storage import LogConfig, LogManager

    from .fetcher import ReplicaFetcherManager
    from .metrics import BrokerTopicStats
    from .metadata_cache import MetadataCache, PartitionInfo

log = logging.getLogger("kbroker.replica_manager")

_VALID_ACKS = (-1, 0, 1)
# ErrorCode.NONE, read once: a member read through the enum class is a slow attribute lookup
# (EnumType defines __getattr__, Python 3.11), once per partition of every Produce.
_NONE = ErrorCode.NONE
# Append errors that mean bad input or a broken disk, worth a log line (sequence errors of
# idempotent producers and leadership changes are the client's business).
_LOGGED_APPEND_ERRORS = frozenset({ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.MESSAGE_TOO_LARGE,
                                   ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.KAFKA_STORAGE_ERROR,
                                   ErrorCode.INVALID_TIMESTAMP})
# Rejections of the records themselves: Produce v8+ carries the reason in error_message (Kafka
# fills it for its RecordValidationException, with record_errors; the other reasons are ours).
_EXPLAINED_APPEND_ERRORS = frozenset({ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE,
                                      ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                                      ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, ErrorCode.INVALID_TIMESTAMP})


# (topic, partition, leader epoch or None)
PartitionEpoch = tuple[str, int, "int | None"]
LeadershipListener = Callable[[list[PartitionEpoch], list[PartitionEpoch]], None]


_NO_RECORDS = b""  # a partition's slot read empty: no Log.read (at the LEO), or throttled (KIP-73)


def _aborted_in(log_, fetch_offset: int, records) -> list[tuple[int, int]]:
    """The aborted transactions a read_committed consumer needs for ``records`` (read from
    ``fetch_offset``): (producer id, first offset) of each that overlaps them (Kafka's
    collectAbortedTransactions, bounded by the offset after the last batch served)."""
    if not len(log_.txn_index) or not len(records):
        return []
    upper = fetch_offset
    for _pos, header in iter_batch_headers(records):
        upper = header.next_offset
    return [(t.producer_id, t.first_offset) for t in log_.collect_aborted_transactions(fetch_offset, upper)]


def is_internal_topic(topic: str) -> bool:
    return topic.startswith("__")


class ReplicaManager:
    # The fetch path's lean cases (fetch_messages' follower parked at the LEO, _read_one): False
    # takes the general path always (tests/broker/test_fetch_fast_path.py's reference).
    lean = True

    def __init__(self, *, broker_id: int, time: Time, log_manager: "LogManager", metadata_cache: "MetadataCache",
                 log_config_for: Callable[[str], "LogConfig"], replica_lag_time_max_ms: int = 30000,
                 fetcher_manager: "ReplicaFetcherManager | None" = None,
                 alter_partition: AlterPartitionSender = LOCAL_ALTER_PARTITION,
                 topic_stats: "BrokerTopicStats | None" = None) -> None:
        self.broker_id = broker_id
        self.topic_stats = topic_stats  # BrokerTopicMetrics (None: metrics off)
        # KIP-73 replication throttles (broker/replication_quota.py; None: not set up)
        self.replication_quotas: "ReplicationQuotas | None" = None
        self.isr_shrinks = 0  # committed ISR changes of partitions this broker leads (IsrShrinksPerSec)
        self.isr_expands = 0
        self.time = time
        self.log_manager = log_manager
        self.metadata_cache = metadata_cache
        self.log_config_for = log_config_for
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.alter_partition = alter_partition
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.produce_purgatory = ProducePurgatory("Produce", time)
        self.fetch_purgatory = FetchPurgatory("Fetch", time)
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords", time)
        self.controller_epoch = 0
        self.fetcher_manager = fetcher_manager  # None: nothing is followed (unit tests)
        self.on_isr_change: Callable[[Partition, list[int]], None] | None = None
        # Brokers the controller called ineligible for an ISR (INELIGIBLE_REPLICA), until the live brokers change.
        self.ineligible_replicas: set[int] = set()
        # Kafka's onLeadershipChange: told the partitions this broker became leader of and those it
        # stopped leading (became follower of, or stopped hosting), each as (topic, partition,
        # leader epoch or None), after a LeaderAndIsr / StopReplica is applied (the group
        # coordinator follows the leadership of __consumer_offsets this way).
        self.leadership_listeners: list[LeadershipListener] = []
        # While a socket read is processed (begin_read .. end_read, the SocketServer's read
        # hooks): the partitions appended to, whose parked fetches are tried once at its end
        # (a dict as an ordered set: the simulator's schedule stays deterministic). None
        # outside a read: an append tries them at once.
        self._appended: dict[tuple[str, int], None] | None = None
        # Replicas whose log could not be created (a storage error: disk full, out of descriptors),
        # with the LeaderAndIsr state that asked for them: retried by retry_failed_replicas until
        # created, replaced by a newer state, or stopped (a dict: the simulator's order stays fixed).
        self.failed_replicas: dict[tuple[str, int], LeaderAndIsrState] = {}

    # -- partitions ------------------------------------------------------------------------
    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def get_partition_or_error(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            raise self._not_hosted_error(topic, partition)
        return p

    def _not_hosted_error(self, topic: str, partition: int) -> KafkaError:
        """What to raise for a partition not in ``partitions``: NOT_LEADER_OR_FOLLOWER when the
        metadata knows it (hosted elsewhere), else UNKNOWN_TOPIC_OR_PARTITION. The hot paths
        look ``partitions`` up themselves (no call per partition) and call this when it misses."""
        if self.metadata_cache.contains_partition(topic, partition):
            return NotLeaderOrFollowerError(f"{topic}-{partition} is not hosted on broker {self.broker_id}")
        return UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")

    def _get_or_create_partition(self, topic: str, partition: int, defer_dir_sync: bool = False) -> Partition:
        key = (topic, partition)
        p = self.partitions.get(key)
        if p is None:
            p = Partition(topic, partition, local_broker_id=self.broker_id, time=self.time,
                          on_isr_change=self._isr_changed, alter_partition=self.alter_partition,
                          is_replica_isr_eligible=self._is_replica_isr_eligible,
                          replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                          on_ineligible_replica=self._replica_ineligible)
            if self.topic_stats is not None:  # bound once: the append path counts with one C call
                p.count_append = self.topic_stats.topic(topic).appends.appended
            self.partitions[key] = p
        if p.log is None:
            try:
                # A log loaded at start-up is taken as it is (its config came with it): the topic's
                # config is looked up only to create one.
                p.log = self.log_manager.get_log(topic, partition) or self.log_manager.get_or_create_log(
                    topic, partition, self.log_config_for(topic), defer_dir_sync=defer_dir_sync)
            except Exception:
                if self.partitions.get(key) is p and p.leader_epoch < 0:
                    del self.partitions[key]  # never acted on: as if the LeaderAndIsr had not come
                raise
        return p

    def _isr_changed(self, partition: Partition, new_isr: list[int]) -> None:
        """A committed ISR change: the metadata this broker serves follows, and requests waiting
        on the partition are re-checked (a smaller ISR may have moved the HW)."""
        if len(new_isr) < len(partition.previous_isr):
            self.isr_shrinks += 1
        elif len(new_isr) > len(partition.previous_isr):
            self.isr_expands += 1
        info = self.metadata_cache.partition_info(partition.topic, partition.partition)
        if info is not None:
            info.isr = list(new_isr)
            info.partition_epoch = partition.partition_epoch
        self.try_complete_delayed_requests(partition.key)
        if self.on_isr_change is not None:
            self.on_isr_change(partition, new_isr)

    def _is_replica_isr_eligible(self, broker_id: int) -> bool:
        """KIP-841: only a live broker (unfenced: the controller lists only those in
        UpdateMetadata; and not shutting down, which UpdateMetadata does not say, so a broker
        the controller answered INELIGIBLE_REPLICA for waits for the next change of the live
        brokers) may join an ISR. Before any metadata arrived, anyone may."""
        if broker_id in self.ineligible_replicas:
            return False
        brokers = self.metadata_cache.brokers
        return not brokers or broker_id in brokers

    def _replica_ineligible(self, broker_id: int) -> None:
        if broker_id not in self.ineligible_replicas:
            log.info("broker %d may not join an ISR (INELIGIBLE_REPLICA) until the live brokers change", broker_id)
            self.ineligible_replicas.add(broker_id)

    def live_brokers_changed(self) -> None:
        self.ineligible_replicas.clear()

    # -- produce ---------------------------------------------------------------------------
    def append_records(self, timeout_ms: int, required_acks: int, internal_topics_allowed: bool, topics,
                       callback: Callable[[list], None], from_coordinator: bool = False) -> DelayedProduce | None:
        """``from_coordinator``: the group coordinator's own batches (transactional offset
        commits, without sequence numbers: Kafka's AppendOrigin.COORDINATOR).
        ``topics``: [(topic, [(partition, records)])]. ``callback`` gets
        [(topic, [[partition, error, base_offset, log_append_time, log_start_offset]])] in request order.
        Returns the DelayedProduce when the answer waits (acks=-1), for the caller to cancel."""
        if required_acks not in _VALID_ACKS:
            callback([(t, [[p, ErrorCode.INVALID_REQUIRED_ACKS, -1, -1, -1] for p, _ in parts]) for t, parts in topics])
            return None
        if len(topics) == 1 and self.lean:
            topic, parts = topics[0]
            if len(parts) == 1:
                # One partition (every produce of a single-partition producer, issue 29): the loop
                # below for it, step for step (a change there is made here too: tests/broker/
                # test_apis_lean.py compares them)
                partition_index, records = parts[0]
                result, required = self._append_to_local_log(topic, partition_index, records, required_acks,
                                                             internal_topics_allowed, from_coordinator)
                results = [(topic, [result])]
                if required_acks == -1:
                    key = (topic, partition_index)
                    status = ProducePartitionStatus(key, required, result)
                    if status.acks_pending:
                        op = DelayedProduce(timeout_ms, [status], self, functools.partial(callback, results))
                        if op.try_complete():  # (try_complete_else_watch, with its watch for one partition)
                            return None
                        self.produce_purgatory.park(op, key, status)
                        return op
                callback(results)
                return None
        results = []
        statuses: list[ProducePartitionStatus] = []
        keys = []
        pending = False  # a partition's append waits for the ISR (acks=-1 and appended)
        for topic, parts in topics:
            topic_results = []
            for partition_index, records in parts:
                result, required = self._append_to_local_log(topic, partition_index, records, required_acks,
                                                             internal_topics_allowed, from_coordinator)
                topic_results.append(result)
                if required_acks == -1:
                    key = (topic, partition_index)
                    status = ProducePartitionStatus(key, required, result)
                    statuses.append(status)
                    keys.append(key)
                    if status.acks_pending:
                        pending = True
            results.append((topic, topic_results))
        if pending:
            # (a partial, not a lambda: no Python frame of its own when it completes)
            op = DelayedProduce(timeout_ms, statuses, self, functools.partial(callback, results))
            if not self.produce_purgatory.try_complete_else_watch(op, keys):
                return op
        else:
            callback(results)
        return None

    def _append_to_local_log(self, topic: str, partition_index: int, records, required_acks: int,
                             internal_topics_allowed: bool, from_coordinator: bool = False) -> tuple[list, int]:
        if not internal_topics_allowed and topic.startswith("__"):  # is_internal_topic, without the call
            return [partition_index, ErrorCode.INVALID_TOPIC_EXCEPTION, -1, -1, -1], -1
        try:
            partition = self.partitions.get((topic, partition_index))
            if partition is None:
                raise self._not_hosted_error(topic, partition_index)
            if records is None or len(records) == 0:
                return [partition_index, ErrorCode.INVALID_RECORD, -1, -1, -1], -1
            info = partition.append_records_to_leader(records, required_acks, from_coordinator)
        except KafkaError as exc:
            if exc.error_code in _LOGGED_APPEND_ERRORS:
                log.warning("produce to %s-%d rejected: %s %s", topic, partition_index, exc.error_code.name, exc)
            elif exc.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                # the producer state's view (the sequence it expected): routine for the batches
                # in flight behind one that failed, a fatal desync for librdkafka otherwise
                log.info("produce to %s-%d rejected: OUT_OF_ORDER_SEQUENCE_NUMBER %s", topic, partition_index, exc)
            if self.topic_stats is not None:
                self.topic_stats.append_failed(topic)
            if exc.error_code in _EXPLAINED_APPEND_ERRORS:  # Produce v8+ says why
                return [partition_index, exc.error_code, -1, -1, -1, getattr(exc, "record_errors", []), str(exc)], -1
            return [partition_index, exc.error_code, -1, -1, -1], -1
        except Exception:
            log.exception("unexpected error appending to %s-%d", topic, partition_index)
            if self.topic_stats is not None:
                self.topic_stats.append_failed(topic)
            return [partition_index, ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1, -1], -1
        count = partition.count_append  # BrokerTopicMetrics (None: metrics off)
        if count is not None and not info.duplicate:
            count(info.record_count, records)
        key = partition.key
        # New data: followers' (and, if the HW moved, consumers') fetches may complete now.
        if partition.maybe_increment_high_watermark():
            self.produce_purgatory.check_hw_moved(key, partition.log.high_watermark)
        appended = self._appended
        if appended is not None:
            appended[key] = None  # tried once at the end of the read (end_read)
        else:
            self.fetch_purgatory.check_appended(key, partition.log)
        return [partition_index, _NONE, info.first_offset, info.log_append_time,
                partition.log.log_start_offset], info.last_offset + 1

    def append_txn_markers(self, timeout_ms: int, markers: list, callback: Callable[[list], None]) -> DelayedProduce | None:
        """WriteTxnMarkers: ``markers`` [(producer id, epoch, commit, coordinator epoch, [(topic,
        partition)])], each marker appended as leader and waited for by the ISR (acks=all).
        ``callback`` gets [(producer id, [(topic, partition, error)])] in the same order."""
        statuses: list[ProducePartitionStatus] = []
        out = []
        for producer_id, epoch, commit, coordinator_epoch, partitions in markers:
            rows = []
            for topic, index in partitions:
                result = [index, ErrorCode.NONE, -1, -1, -1]
                required = -1
                try:
                    partition = self.get_partition_or_error(topic, index)
                    info = partition.append_end_txn_marker(producer_id, epoch, coordinator_epoch, commit)
                    required = info.last_offset + 1
                    if partition.maybe_increment_high_watermark():
                        self.produce_purgatory.check_hw_moved(partition.key, partition.log.high_watermark)
                    appended = self._appended
                    if appended is not None:
                        appended[partition.key] = None  # tried at the end of the read (end_read)
                    else:
                        self.fetch_purgatory.check_appended(partition.key, partition.log)
                except KafkaError as exc:
                    log.warning("transaction marker for producer %d on %s-%d refused: %s %s", producer_id, topic, index,
                                exc.error_code.name, exc)
                    result[1] = exc.error_code
                except Exception:
                    log.exception("unexpected error writing a transaction marker to %s-%d", topic, index)
                    result[1] = ErrorCode.UNKNOWN_SERVER_ERROR
                statuses.append(ProducePartitionStatus((topic, index), required, result))
                rows.append((topic, result))
            out.append((producer_id, rows))

        def done() -> None:
            callback([(pid, [(t, r[0], r[1]) for t, r in rows]) for pid, rows in out])

        if any(s.acks_pending for s in statuses):
            op = DelayedProduce(timeout_ms, statuses, self, done)
            if not self.produce_purgatory.try_complete_else_watch(op, [s.key for s in statuses]):
                return op
            return None
        done()
        return None

    # -- one socket read ---------------------------------------------------------------------
    def begin_read(self) -> None:
        """A socket read's requests are about to be processed (SocketServer.read_hooks): the
        fetches parked on the partitions they append to are tried once, in end_read, not at
        each append. A read holds several produces at full load; tried at the first, a
        follower's fetch was answered with that one batch and the others waited a whole fetch
        round trip. A dict left by a begin without its end is kept, never dropped: its
        partitions are still tried by the next end_read."""
        if self._appended is None:
            self._appended = {}

    def end_read(self) -> None:
        """The read's requests are processed: try the parked fetches of each partition they
        appended to, once, in the order of the first appends (their answers leave in the
        read's writev batch: this runs before SocketServer.flush_corked). Deferral stops first,
        so appends made while completing them try their fetches at once. An error on one
        partition is logged and the others are still tried."""
        appended, self._appended = self._appended, None
        if not appended:
            return
        purgatory = self.fetch_purgatory
        partitions = self.partitions
        for key in appended:
            try:
                partition = partitions.get(key)
                log_ = partition.log if partition is not None else None
                if log_ is not None:
                    purgatory.check_appended(key, log_)
                else:  # removed since: what waits on it is answered (check_and_complete tries all)
                    purgatory.check_and_complete(key)
            except Exception:
                log.exception("unexpected error completing the fetches parked on %s-%d", key[0], key[1])

    # -- fetch -----------------------------------------------------------------------------
    def fetch_messages(self, params: FetchParams, topics, callback: Callable[[list], None]) -> DelayedFetch | None:
        """``topics``: [(topic, [FetchPartition])]; ``callback`` gets [(topic, [FetchPartitionData])].
        Returns the DelayedFetch when the answer waits (a long-poll), for the caller to cancel."""
        replica_id = params.replica_id
        if replica_id >= 0 and len(topics) == 1 and params.max_wait_ms > 0 and params.min_bytes > 0 and self.lean:
            topic, parts = topics[0]
            if len(parts) == 1:
                # A follower's long-poll of one partition at the LEO of a partition led here (every
                # follower's fetch at the leader of acks=all produces once it caught up, issue 29):
                # what the general path below does for it — record the follower's position, read
                # nothing, park the fetch untried — without building the answer it would drop.
                # Everything else (an error, data to send, a KIP-73 throttle, not the leader) goes
                # the general way; nothing has changed when that is decided.
                fp = parts[0]
                key = (topic, fp.partition)
                partition = self.partitions.get(key)
                if partition is not None:
                    log_ = partition.log
                    epoch = fp.current_leader_epoch
                    quotas = self.replication_quotas
                    if (log_ is not None and fp.fetch_offset == log_.log_end_offset
                            and (epoch == -1 or epoch == partition.leader_epoch)
                            and partition.leader_id == partition.local_broker_id
                            and replica_id in partition.remote_replicas
                            and (quotas is None or not quotas.leader.throttled)):
                        # Where it parks: the fetch offset's position (DelayedFetch's), taken before
                        # the follower's position is recorded: that may move the HW and complete
                        # an acks=all produce whose callback appends to this same partition at once;
                        # that append's check (deferred to the read's end) must find this fetch
                        # parked below it, as the general path's is.
                        meta = log_.log_end_offset_metadata()
                        try:
                            # _update_follower_fetch_state, its checks made above (a change there
                            # is made here too: tests/broker/test_fetch_fast_path.py)
                            if partition.update_follower_fetch_state(replica_id, fp.fetch_offset, fp.log_start_offset,
                                                                     log_.log_end_offset):
                                self.produce_purgatory.check_hw_moved(key, log_.high_watermark)
                                self.fetch_purgatory.check_appended(key, log_)
                            if key in self.delete_records_purgatory._watchers:  # (what check_and_complete looks at first)
                                self.delete_records_purgatory.check_and_complete(key)
                        except Exception as exc:
                            self._answer_park_error(exc, key, log_, callback)
                            return None
                        # parked: the position and wake-up level DelayedFetch and FetchPurgatory.watch
                        # would work out (one partition at the LEO, reading to it, min_bytes >= 1)
                        min_bytes = params.min_bytes
                        op = DelayedFetch(params.max_wait_ms, params, topics, self, callback, [(log_, meta)])
                        self.fetch_purgatory.park(op, key, (
                            meta[0], meta[1] + min_bytes if fp.partition_max_bytes >= min_bytes else WAKE_NEVER))
                        return op
        return self._fetch_messages(params, topics, callback)

    def _fetch_messages(self, params: FetchParams, topics, callback: Callable[[list], None]) -> DelayedFetch | None:
        """fetch_messages' general path (the reference of its lean one)."""
        results = self.read_from_local_log(params, topics)
        if params.max_wait_ms <= 0 or not topics or params.min_bytes <= 0:
            callback(results)
            return None
        readable = 0
        for _topic, parts in results:
            for pd in parts:
                if pd.error_code:
                    callback(results)
                    return None
                if pd.records is not None:
                    readable += len(pd.records)
        if readable >= params.min_bytes:
            callback(results)
            return None
        op = DelayedFetch(params.max_wait_ms, params, topics, self, callback)
        keys = [(t, fp.partition) for t, parts in topics for fp in parts]
        if not readable and params.isolation == FETCH_LOG_END:
            # A follower's fetch that read nothing, without an error: each fetch offset is its
            # partition's LEO (Log.read is empty there only, and raises outside the log), or the
            # partition's data is throttled for it; DelayedFetch.try_complete would find the
            # same, so it is parked untried: at the leader of an acks=all produce, every
            # follower's next fetch (issue 29). (Recording the follower's position may have
            # completed a produce whose callback appended since: inside a socket read, where
            # every fetch is handled, that append's check waits for the read's end (end_read),
            # which finds this fetch parked at its offset and wakes it.)
            self.fetch_purgatory.watch(op, keys)
            return op
        if self.fetch_purgatory.try_complete_else_watch(op, keys):
            return None
        return op

    @staticmethod
    def _answer_park_error(exc: Exception, key: tuple[str, int], log_, callback: Callable[[list], None]) -> None:
        """fetch_messages' lean path failed recording the follower's position: answered as the
        general path answers it (the log's offsets as they are then)."""
        if isinstance(exc, KafkaError):
            code = exc.error_code
        else:
            log.exception("unexpected error reading %s-%d", key[0], key[1])
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        callback([(key[0], [FetchPartitionData(key[1], code, log_.high_watermark, log_.last_stable_offset,
                                               log_.log_start_offset, b"")])])

    def read_from_local_log(self, params: FetchParams, topics, from_purgatory: bool = False) -> list:
        """Read each partition for a fetch (``_read_partitions``; a fetch of one partition, every
        follower's of a single-partition leader, through ``_read_one``: the same, without the
        loops' set-up, issue 29)."""
        if len(topics) == 1 and self.lean:
            topic, parts = topics[0]
            if len(parts) == 1:
                return [(topic, [self._read_one(params, topic, parts[0], from_purgatory)])]
        return self._read_partitions(params, topics, from_purgatory)

    def _read_one(self, params: FetchParams, topic: str, fp, from_purgatory: bool) -> FetchPartitionData:
        """``_read_partitions``' work for one partition, step for step (its first partition: at
        least one batch, up to the smaller of the fetch's and the partition's max bytes); a
        change there is made here too (tests/broker/test_fetch_fast_path.py compares them)."""
        index = fp.partition
        hw = lso = log_start = -1
        try:
            partition = self.partitions.get((topic, index))
            if partition is None:
                raise self._not_hosted_error(topic, index)
            log_ = partition.log
            epoch = fp.current_leader_epoch
            require_leader = params.require_leader
            if (log_ is None or (epoch != -1 and epoch != partition.leader_epoch)
                    or (require_leader and partition.leader_id != partition.local_broker_id)):
                log_ = partition.local_log_with_epoch(epoch, require_leader)
            log_hw = log_.high_watermark
            log_lso = log_.last_stable_offset
            leo = log_.log_end_offset
            fetch_offset = fp.fetch_offset
            replica_id = params.replica_id
            isolation = params.isolation
            quotas = self.replication_quotas
            if (quotas is not None and replica_id >= 0 and quotas.leader.throttled
                    and self.should_leader_throttle(quotas.leader, partition, replica_id)):
                quotas.leader.throttled_fetches += 1  # KIP-73: no records
                records = _NO_RECORDS
            elif fetch_offset == leo:
                records = _NO_RECORDS
            else:
                max_offset = (None if isolation == FETCH_LOG_END else
                              (log_lso if isolation == FETCH_TXN_COMMITTED else log_hw))
                records = log_.read(fetch_offset, min(fp.partition_max_bytes, params.max_bytes), max_offset,
                                    True).records
            hw, lso, log_start = log_hw, log_lso, log_.log_start_offset
            if replica_id >= 0 and not from_purgatory:
                self._update_follower_fetch_state(partition, replica_id, fp, leo)
            if isolation == FETCH_TXN_COMMITTED:
                return FetchPartitionData(index, 0, hw, lso, log_start, records, _aborted_in(log_, fetch_offset, records))
            return FetchPartitionData(index, 0, hw, lso, log_start, records, None)
        except KafkaError as exc:
            pd = FetchPartitionData(index, exc.error_code, hw, lso, log_start, b"")
            if exc.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                p = self.partitions.get((topic, index))
                if p is not None and p.log is not None:
                    pd.high_watermark = p.log.high_watermark
                    pd.log_start_offset = p.log.log_start_offset
            return pd
        except Exception:
            log.exception("unexpected error reading %s-%d", topic, index)
            return FetchPartitionData(index, ErrorCode.UNKNOWN_SERVER_ERROR, hw, lso, log_start, b"")

    def _read_partitions(self, params: FetchParams, topics, from_purgatory: bool = False) -> list:
        """Read each partition for a fetch. A follower's fetch records its position (its fetch
        offset as its LEO, and when it was caught up) when it is received, not again when its
        long-poll completes (``from_purgatory``: Kafka's readFromPurgatory): completed up to
        replica.fetch.wait.max.ms later, or after a pause of this broker, the same request
        would count as a fetch made then, by a follower that may have crashed and restarted
        with less since (simulator seed 4422: a parked fetch of a dead incarnation expired
        when its leader woke from a pause and proposed it for the ISR)."""
        limit = params.max_bytes
        min_one = True
        out = []
        isolation = params.isolation
        committed = isolation == FETCH_TXN_COMMITTED
        to_leo = isolation == FETCH_LOG_END
        require_leader = params.require_leader
        replica_id = params.replica_id
        follower_state = replica_id >= 0 and not from_purgatory
        quotas = self.replication_quotas
        leader_quota = quotas.leader if quotas is not None and replica_id >= 0 and quotas.leader.throttled else None
        partitions_get = self.partitions.get
        for topic, parts in topics:
            topic_out = []
            for fp in parts:
                index = fp.partition
                # what the answer carries so far: an error after the read keeps the offsets read
                hw = lso = log_start = -1
                try:
                    partition = partitions_get((topic, index))
                    if partition is None:
                        raise self._not_hosted_error(topic, index)
                    log_ = partition.log
                    epoch = fp.current_leader_epoch
                    if (log_ is None or (epoch != -1 and epoch != partition.leader_epoch)
                            or (require_leader and partition.leader_id != partition.local_broker_id)):
                        # (local_log_with_epoch's checks, inline when they pass: it raises their error)
                        log_ = partition.local_log_with_epoch(epoch, require_leader)
                    log_hw = log_.high_watermark
                    log_lso = log_.last_stable_offset
                    leo = log_.log_end_offset
                    max_offset = None if to_leo else (log_lso if committed else log_hw)
                    fetch_offset = fp.fetch_offset
                    if leader_quota is not None and self.should_leader_throttle(leader_quota, partition, replica_id):
                        # Kafka's readFromLog: a throttled replica's fetch gets no records (KIP-73)
                        leader_quota.throttled_fetches += 1
                        records = _NO_RECORDS
                    elif fetch_offset == leo:
                        # at the LEO (a follower's fetch after it caught up: every one at the
                        # leader of acks=all produces) Log.read is empty: not called (issue 29)
                        records = _NO_RECORDS
                    else:
                        records = log_.read(fetch_offset, min(fp.partition_max_bytes, limit), max_offset,
                                            min_one).records
                        n = len(records)
                        if n:
                            min_one = False
                            limit = max(0, limit - n)
                    hw, lso, log_start = log_hw, log_lso, log_.log_start_offset
                    if follower_state:
                        self._update_follower_fetch_state(partition, replica_id, fp, leo)
                    pd = FetchPartitionData(index, 0, hw, lso, log_start, records,
                                            _aborted_in(log_, fetch_offset, records) if committed else None)
                except KafkaError as exc:
                    # Kafka answers a partition error with empty records (MemoryRecords.EMPTY),
                    # never null: librdkafka rejects a whole response holding a -1 MessageSetSize.
                    pd = FetchPartitionData(index, exc.error_code, hw, lso, log_start, b"")
                    if exc.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        p = self.partitions.get((topic, index))
                        if p is not None and p.log is not None:
                            pd.high_watermark = p.log.high_watermark
                            pd.log_start_offset = p.log.log_start_offset
                except Exception:
                    log.exception("unexpected error reading %s-%d", topic, index)
                    pd = FetchPartitionData(index, ErrorCode.UNKNOWN_SERVER_ERROR, hw, lso, log_start, b"")
                topic_out.append(pd)
            out.append((topic, topic_out))
        return out

    @staticmethod
    def should_leader_throttle(quota: "ReplicationQuotaManager", partition: Partition, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: a throttled partition, a follower out of the ISR, the
        leader quota exceeded."""
        return (quota.is_throttled(partition.topic, partition.partition) and replica_id not in partition.isr
                and quota.is_quota_exceeded())

    def leader_throttled(self, partition: Partition, replica_id: int) -> bool:
        """Whether a follower's fetch of ``partition`` gets no records now (DelayedFetch asks)."""
        quotas = self.replication_quotas
        if quotas is None or replica_id < 0 or not quotas.leader.throttled:
            return False
        return self.should_leader_throttle(quotas.leader, partition, replica_id)

    def _update_follower_fetch_state(self, partition: Partition, replica_id: int, fp, leader_leo: int) -> None:
        if partition.leader_id != partition.local_broker_id:  # (not is_leader)
            return
        if replica_id not in partition.remote_replicas:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {partition.topic}-{partition.partition}")
        if partition.update_follower_fetch_state(replica_id, fp.fetch_offset, fp.log_start_offset, leader_leo):
            # The high watermark moved forward: acks=-1 produces, and consumers' fetches it reached.
            self.produce_purgatory.check_hw_moved(partition.key, partition.log.high_watermark)
            self.fetch_purgatory.check_appended(partition.key, partition.log)
        # The follower reported its log start offset: a DeleteRecords waiting for it may be done.
        self.delete_records_purgatory.check_and_complete(partition.key)

    def try_complete_delayed_requests(self, key: tuple[str, int]) -> None:
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)
        self.delete_records_purgatory.check_and_complete(key)

    # -- delete records --------------------------------------------------------------------
    def delete_records(self, timeout_ms: int, offsets: list[tuple[str, list[tuple[int, int]]]],
                       callback: Callable[[list], None]) -> DelayedDeleteRecords | None:
        """DeleteRecords (Kafka's ReplicaManager.deleteRecords): on each partition this broker
        leads, move the log start offset to the offset asked for (-1: the high watermark), then
        answer once every live replica's log start offset got there (the low watermark) or
        ``timeout_ms`` passed (REQUEST_TIMED_OUT). The segments wholly below it leave with the
        next retention pass. ``offsets``: [(topic, [(partition, offset)])]; ``callback`` gets
        [(topic, [{partition_index, low_watermark, error_code}])] in request order. Returns the
        DelayedDeleteRecords when the answer waits, for the caller to cancel."""
        results = []
        statuses: list[DeleteRecordsPartitionStatus] = []
        for topic, parts in offsets:
            topic_results = []
            for partition_index, offset in parts:
                result = {"partition_index": partition_index, "low_watermark": -1, "error_code": ErrorCode.NONE}
                required = -1
                if is_internal_topic(topic):
                    result["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
                else:
                    try:
                        partition = self.get_partition_or_error(topic, partition_index)
                        required = partition.delete_records_on_leader(offset)
                        log.info("%s-%d: log start offset moved to %d (DeleteRecords)", topic, partition_index,
                                 partition.log.log_start_offset)
                    except KafkaError as exc:
                        result["error_code"] = exc.error_code
                        if exc.error_code in (ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.POLICY_VIOLATION):
                            log.warning("DeleteRecords of %s-%d to %d refused: %s %s", topic, partition_index, offset,
                                        exc.error_code.name, exc)
                    except Exception:
                        log.exception("unexpected error deleting records of %s-%d", topic, partition_index)
                        result["error_code"] = ErrorCode.UNKNOWN_SERVER_ERROR
                topic_results.append(result)
                statuses.append(DeleteRecordsPartitionStatus((topic, partition_index), required, result))
            results.append((topic, topic_results))
        if any(s.pending for s in statuses):
            op = DelayedDeleteRecords(timeout_ms, statuses, self, self._is_alive_broker, lambda: callback(results))
            if not self.delete_records_purgatory.try_complete_else_watch(op, [s.key for s in statuses if s.pending]):
                return op
        else:
            callback(results)
        return None

    def describe_log_dirs(self, wanted: set[tuple[str, int]] | None) -> list[dict]:
        """DescribeLogDirs' results (Kafka's ReplicaManager.describeLogDirs): per log dir its
        absolute path, the logs there of the partitions ``wanted`` (None: all) by topic, each
        with its size in bytes, its offset lag (the high watermark less the log end offset,
        at least 0) and is_future_key false; and the file system's total and usable bytes. A dir
        that cannot be read answers KAFKA_STORAGE_ERROR."""
        results = []
        for log_dir, logs in self.log_manager.logs_by_dir().items():
            path = str(log_dir.absolute())
            try:
                usage = shutil.disk_usage(log_dir)
            except OSError as exc:
                log.warning("DescribeLogDirs: %s cannot be read: %s", path, exc)
                results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": [],
                                "total_bytes": -1, "usable_bytes": -1})
                continue
            by_topic: dict[str, list[dict]] = {}
            for (topic, index), log_ in sorted(logs.items()):
                if wanted is not None and (topic, index) not in wanted:
                    continue
                by_topic.setdefault(topic, []).append({
                    "partition_index": index, "partition_size": log_.size_in_bytes(),
                    "offset_lag": max(log_.high_watermark - log_.log_end_offset, 0), "is_future_key": False})
            results.append({"error_code": 0, "log_dir": path,
                            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                            "total_bytes": usage.total, "usable_bytes": usage.free})
        return results

    def _is_alive_broker(self, broker_id: int) -> bool:
        return broker_id in self.metadata_cache.brokers

    # -- list offsets ----------------------------------------------------------------------
    def fetch_offset_for_timestamp(self, topic: str, partition_index: int, timestamp: int, isolation_level: int | None,
                                   current_leader_epoch: int, require_leader: bool) -> tuple[int, int, int]:
        """(timestamp, offset, leader_epoch) for ListOffsets; raises KafkaError for the partition's slot.

        -2 earliest, -1 latest (HW for clients, LEO for replicas/debug); otherwise the first
        record with timestamp ≥ the one asked for, below the HW for clients; (-1, -1, -1) if none.

        A leader elected at LEO ``leader_epoch_start_offset`` whose HW has not reached it yet
        (its followers have not fetched in the new epoch) answers a client's latest, or a
        timestamp found at or past the last fetchable offset, OFFSET_NOT_AVAILABLE, retriable
        (KIP-207, Kafka's fetchOffsetForTimestamp): its HW may be behind what the old leader
        acknowledged, and offsets from ListOffsets must not go back.
        """
        partition = self.get_partition_or_error(topic, partition_index)
        log_ = partition.local_log_with_epoch(current_leader_epoch, require_leader)
        lagging: OffsetNotAvailableError | None = None
        if isolation_level is not None and partition.leader_epoch_start_offset > log_.high_watermark:
            lagging = OffsetNotAvailableError(
                f"{topic}-{partition_index}: the high watermark ({log_.high_watermark}) is lagging behind the start "
                f"offset of leader epoch {partition.leader_epoch} ({partition.leader_epoch_start_offset})")
        if isolation_level is None:
            last_fetchable = log_.log_end_offset
        elif isolation_level == 1:  # READ_COMMITTED: the last stable offset
            last_fetchable = log_.last_stable_offset
        else:
            last_fetchable = log_.high_watermark
        cache = log_.leader_epoch_cache

        def epoch_of(offset: int) -> int:
            epoch = cache.epoch_for_offset(offset)
            return -1 if epoch is None else epoch

        if timestamp == -2:
            return -1, log_.log_start_offset, epoch_of(log_.log_start_offset)
        if timestamp == -1:
            if lagging is not None:
                raise lagging
            return -1, last_fetchable, epoch_of(last_fetchable)
        found = log_.offset_for_timestamp(timestamp)
        if found is None or found.offset >= last_fetchable:
            if lagging is not None:
                raise lagging
            return -1, -1, -1
        epoch = found.leader_epoch if found.leader_epoch is not None else -1
        return found.timestamp, found.offset, epoch

    # -- control plane ---------------------------------------------------------------------
    def become_leader_or_follower(self, controller_id: int, controller_epoch: int,
                                  states: Iterable[LeaderAndIsrState]) -> tuple[int, dict[tuple[str, int], int]]:
        """Apply LeaderAndIsr. Returns (top-level error, per-partition errors)."""
        states = list(states)
        if controller_epoch < self.controller_epoch:
            log.warning("ignoring LeaderAndIsr from controller %d with epoch %d: current controller epoch is %d",
                        controller_id, controller_epoch, self.controller_epoch)
            return ErrorCode.STALE_CONTROLLER_EPOCH, {(s.topic, s.partition): ErrorCode.STALE_CONTROLLER_EPOCH
                                                      for s in states}
        self.controller_epoch = controller_epoch
        responses: dict[tuple[str, int], int] = {}
        to_lead: list[tuple[Partition, LeaderAndIsrState]] = []
        to_follow: list[tuple[Partition, LeaderAndIsrState]] = []
        try:
            self._create_partitions(states, responses, to_lead, to_follow)
        finally:
            # New partition dirs are durable before this broker acts on them or answers.
            try:
                self.log_manager.sync_created_log_dirs()
            except OSError as exc:  # out of descriptors: the next LeaderAndIsr (or shutdown) syncs them
                log.error("cannot fsync the log dirs of new partitions: %s", exc)
        if to_lead:
            to_lead = self._make_leaders(to_lead, responses)
        if to_follow:
            self._make_followers(to_follow)
        self._leadership_changed([(p.topic, p.partition, st.leader_epoch) for p, st in to_lead],
                                 [(p.topic, p.partition, st.leader_epoch) for p, st in to_follow])
        return ErrorCode.NONE, responses

    def _create_partitions(self, states: list[LeaderAndIsrState], responses: dict[tuple[str, int], int],
                           to_lead: list[tuple[Partition, LeaderAndIsrState]],
                           to_follow: list[tuple[Partition, LeaderAndIsrState]]) -> None:
        """The partitions of a LeaderAndIsr that this broker must act on, created if new (their
        log dirs' fsync deferred to the caller), sorted into leaders and followers; the others
        answered in ``responses``."""
        for st in states:
            key = (st.topic, st.partition)
            if self.broker_id not in st.replicas:
                log.warning("ignoring LeaderAndIsr for %s-%d: replicas %s exclude broker %d",
                            st.topic, st.partition, st.replicas, self.broker_id)
                responses[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            existing = self.partitions.get(key)
            if existing is not None and existing.log is not None:
                same = (st.leader_epoch, st.partition_epoch) == (existing.leader_epoch, existing.partition_epoch)
                if same and st.leader == existing.leader_id:
                    responses[key] = ErrorCode.NONE  # already applied (a controller re-sending its full state)
                    continue
                if same or existing.is_stale(st):
                    log.info("ignoring LeaderAndIsr for %s-%d: leader %d at leader epoch %d / partition epoch %d "
                             "is not newer than leader %d at %d / %d", st.topic, st.partition, st.leader,
                             st.leader_epoch, st.partition_epoch, existing.leader_id, existing.leader_epoch,
                             existing.partition_epoch)
                    responses[key] = ErrorCode.STALE_CONTROLLER_EPOCH
                    continue
            try:
                partition = self._get_or_create_partition(st.topic, st.partition, defer_dir_sync=True)
            except KafkaError as exc:
                log.error("LeaderAndIsr for %s-%d: %s", st.topic, st.partition, exc)
                responses[key] = exc.error_code
                if exc.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                    self._replica_failed(st)
                continue
            except OSError as exc:
                log.error("LeaderAndIsr for %s-%d: cannot create the replica: %s", st.topic, st.partition, exc)
                responses[key] = ErrorCode.KAFKA_STORAGE_ERROR
                self._replica_failed(st)
                continue
            self.failed_replicas.pop(key, None)
            responses[key] = ErrorCode.NONE
            (to_lead if st.leader == self.broker_id else to_follow).append((partition, st))

    def _replica_failed(self, st: LeaderAndIsrState) -> None:
        """Remember ``st`` for retry_failed_replicas, unless a newer state of the partition
        failed before it (the retry's own older state failing again, a delayed request): the
        newest (leader epoch, partition epoch) is kept."""
        key = (st.topic, st.partition)
        kept = self.failed_replicas.get(key)
        if kept is None or (st.leader_epoch, st.partition_epoch) >= (kept.leader_epoch, kept.partition_epoch):
            self.failed_replicas[key] = st

    def _leadership_changed(self, leaders: list[PartitionEpoch], followers: list[PartitionEpoch]) -> None:
        if not leaders and not followers:
            return
        for listener in list(self.leadership_listeners):
            try:
                listener(leaders, followers)
            except Exception:
                log.exception("leadership listener failed")

    def _make_leaders(self, items: list[tuple[Partition, LeaderAndIsrState]],
                      responses: dict[tuple[str, int], int]) -> list[tuple[Partition, LeaderAndIsrState]]:
        """Lead ``items``; returns those now led. One whose leader epoch cannot be written
        (out of descriptors or disk space) is answered KAFKA_STORAGE_ERROR and left unled, as
        Kafka's makeLeaders answers a KafkaStorageException."""
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions([p.key for p, _ in items])
        led = []
        for partition, st in items:
            # The same leader told a new ISR: a change it proposed, committed, whose
            # LeaderAndIsr arrived before the AlterPartition answer (which is then ignored).
            same_leader = partition.is_leader and partition.leader_epoch == st.leader_epoch
            old_isr = len(partition.isr)
            try:
                partition.make_leader(st)
            except (OSError, KafkaStorageError) as exc:
                log.error("LeaderAndIsr for %s-%d: cannot become leader: %s", st.topic, st.partition, exc)
                partition.leader_id = -1
                responses[partition.key] = ErrorCode.KAFKA_STORAGE_ERROR
                self.try_complete_delayed_requests(partition.key)
                continue
            led.append((partition, st))
            if same_leader:
                if len(st.isr) < old_isr:
                    self.isr_shrinks += 1
                elif len(st.isr) > old_isr:
                    self.isr_expands += 1
            self.try_complete_delayed_requests(partition.key)
        return led

    def _make_followers(self, items: list[tuple[Partition, LeaderAndIsrState]]) -> None:
        changed = []
        for partition, st in items:
            if partition.make_follower(st):
                changed.append(partition)
            # A former leader's waiting produces and consumer fetches answer now (case B).
            self.try_complete_delayed_requests(partition.key)
        if self.fetcher_manager is not None and changed:
            self.fetcher_manager.remove_fetcher_for_partitions([p.key for p in changed])
            self.fetcher_manager.add_fetcher_for_partitions(changed)

    def has_applied(self, topic: str, info: "PartitionInfo") -> bool:
        """Whether this broker acts on the partition state its metadata shows: true where it
        is not a replica, else once the LeaderAndIsr of that leader epoch is applied (the
        controller sends UpdateMetadata first, so metadata can run ahead for a moment)."""
        if self.broker_id not in info.replicas:
            return True
        partition = self.partitions.get((topic, info.partition))
        return partition is not None and partition.log is not None and partition.leader_epoch >= info.leader_epoch

    def topic_configs_changed(self, topics: Iterable[str]) -> None:
        """The controller changed these topics' config overrides: every local log of them
        takes its topic's new LogConfig at once (retention, max.message.bytes,
        min.insync.replicas, segment settings, ...)."""
        wanted = set(topics)
        for (topic, _p), log_ in self.log_manager.all_logs().items():
            if topic in wanted:
                log_.update_config(self.log_config_for(topic))
        quotas = self.replication_quotas
        if quotas is not None:  # the throttled replicas (KIP-73) are topic configs too
            cache = self.metadata_cache
            quotas.topic_configs_changed({t: (cache.topics[t].configs if t in cache.topics else {}) for t in wanted},
                                         wanted)

    def stop_replicas(self, keys: Iterable[tuple[str, int]], delete: bool,
                      leader_epoch: int | None = None) -> dict[tuple[str, int], int]:
        """StopReplica: stop fetching; with ``delete``, drop the partition and its log.
        ``leader_epoch``: the request's epoch for them (None: not given)."""
        keys = list(keys)
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions(keys)
        out = {}
        for key in keys:
            self.failed_replicas.pop(key, None)
            partition = self.partitions.pop(key, None) if delete else self.partitions.get(key)
            if partition is not None:
                if delete:
                    partition.log = None
                    self.log_manager.delete_log(*key)
                else:
                    partition.leader_id = -1
            elif delete and self.log_manager.get_log(*key) is not None:
                self.log_manager.delete_log(*key)
            self.try_complete_delayed_requests(key)
            out[key] = ErrorCode.NONE
        self._leadership_changed([], [(t, p, leader_epoch) for t, p in keys])
        if delete and self.topic_stats is not None:
            hosted = {t for t, _p in self.partitions}
            for topic in {t for t, _p in keys} - hosted:
                self.topic_stats.remove(topic)  # Kafka drops a deleted topic's metrics
        return out

    def delete_stray_partitions(self, wanted: set[tuple[str, int]]) -> list[tuple[str, int]]:
        """A controller's full LeaderAndIsr names every partition this broker is a replica of: a
        local log of any other is a stray, left by a StopReplica that never reached this broker
        (its topic deleted, or the broker moved off it, while the broker was cut off or down, and
        the controller forgot the request with the old registration). It is deleted, as Kafka
        deletes the stray partitions a FULL LeaderAndIsr omits (findStrayPartitionsFromLeaderAndIsr);
        else its files stay for ever (the simulator's seed 98: a deleted topic's partition on a
        broker partitioned from the controller when the topic went). Returns what went."""
        strays = [key for key in self.log_manager.all_logs() if key not in wanted]
        strays += [key for key in self.partitions if key not in wanted and key not in strays]
        if strays:
            log.warning("deleting %d stray partition(s) the controller's full state does not list: %s", len(strays),
                        ", ".join(f"{t}-{p}" for t, p in sorted(strays)[:10]) + (" ..." if len(strays) > 10 else ""))
            self.stop_replicas(sorted(strays), delete=True)
        return strays

    def retry_failed_replicas(self) -> None:
        """Create the replicas a storage error kept from being created, once the disk allows it.
        Kafka takes the log dir offline, and with its only log dir halts the broker, whose
        restart creates them; kbroker keeps running through a full disk (a follower's failed
        append backs off and retries), so without this such a replica stayed offline until the
        broker restarted, however soon the disk recovered: a reassignment adding it never
        completed (the simulator's seed 300). Only a state the metadata still shows current is
        retried (this broker a replica, at that leader epoch and partition epoch): re-applying
        an older one would set an old ISR and partition epoch (a leader's AlterPartition then
        fenced) over what the controller decided since; a newer one is the controller's to send
        (its LeaderAndIsr follows its UpdateMetadata), so the failed one is dropped. Metadata
        behind the failed state (its UpdateMetadata not here yet) keeps it for a later pass."""
        if not self.failed_replicas:
            return
        states = []
        for key, st in list(self.failed_replicas.items()):
            info = self.metadata_cache.partition_info(*key)
            if info is None or self.broker_id not in info.replicas:
                del self.failed_replicas[key]
                continue
            current, failed = (info.leader_epoch, info.partition_epoch), (st.leader_epoch, st.partition_epoch)
            if current != failed:
                if current > failed:
                    del self.failed_replicas[key]
                continue
            states.append(st)
        if states:
            log.info("retrying the creation of %d replica(s) a storage error kept from being created: %s",
                     len(states), ", ".join(f"{st.topic}-{st.partition}" for st in states))
            self.become_leader_or_follower(-1, self.controller_epoch, states)

    def maybe_shrink_isr(self) -> None:
        """Propose dropping lagging followers from the ISRs this broker leads (the change, and
        any HW move it allows, happens when the proposal is committed)."""
        for partition in list(self.partitions.values()):
            if partition.is_leader:
                partition.maybe_shrink_isr(self.replica_lag_time_max_ms)

    def shutdown(self) -> None:
        """Answer every waiting request with what it has (used on broker shutdown)."""
        self.produce_purgatory.complete_all()
        self.fetch_purgatory.complete_all()
        self.delete_records_purgatory.complete_all()
