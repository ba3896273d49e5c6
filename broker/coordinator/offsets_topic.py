"""The group coordinator's ``__consumer_offsets``, as the broker provides it.

``OffsetsTopic`` gives the ``GroupCoordinatorAdapter`` what it needs from the rest of the broker:

* ``append``: group and offset records go through the normal replicated append
  (``ReplicaManager.append_records`` with acks=all, internal topics allowed, waiting at most
  ``offsets.commit.timeout.ms`` for the in-sync replicas);
* ``read_partition``: the records of a partition's log from its start to its end, for loading;
* ``locate``: the coordinator of a ``__consumer_offsets`` partition — its leader, as this
  broker's metadata shows it — for FindCoordinator. While the topic does not exist it is
  created through the controller (``offsets.topic.num.partitions`` partitions,
  ``offsets.topic.replication.factor`` replicas capped by the live brokers, compacted) and
  the answer is COORDINATOR_NOT_AVAILABLE, which clients retry, as Kafka answers;
* ``on_leadership_change``: the ReplicaManager's leadership listener — becoming leader of a
  partition loads its groups, losing it unloads them (Kafka's onLeadershipChange →
  onElection / onResignation).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from protocol.errors import ErrorCode
from protocol.records import (CONTROL_ABORT, CONTROL_COMMIT, Record as BatchRecord, batch_body, build_batch,
                              decode_records, iter_batch_headers, read_control_record)

from ..topic_admin import NewTopic
from .group_metadata_manager import GROUP_METADATA_TOPIC_NAME, Record, TxnMarker, TxnRecord

if TYPE_CHECKING:
    from protocol.clock import Time

    from ..metadata_cache import MetadataCache
    from ..replica_manager import PartitionEpoch, ReplicaManager
    from ..topic_admin import TopicAdmin, TopicResult
    from .adapter import GroupCoordinatorAdapter

log = logging.getLogger("kbroker.coordinator")

READ_CHUNK_BYTES = 1 << 20


class OffsetsTopic:
    def __init__(self, *, time: "Time", replica_manager: "ReplicaManager", metadata_cache: "MetadataCache",
                 topic_admin: "TopicAdmin", num_partitions: int, replication_factor: int, commit_timeout_ms: int,
                 topic_configs: Callable[[], dict[str, str]], topic: str = GROUP_METADATA_TOPIC_NAME) -> None:
        """``topic``: ``__consumer_offsets``, or ``__transaction_state`` for the transaction
        coordinator, which uses this class the same way."""
        self.topic = topic
        self.time = time
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.topic_admin = topic_admin
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.commit_timeout_ms = commit_timeout_ms
        self.topic_configs = topic_configs
        self.coordinator: "GroupCoordinatorAdapter | Any | None" = None
        self._creating = False

    def attach(self, coordinator: "GroupCoordinatorAdapter | Any") -> None:
        """The coordinator to tell about leadership changes; takes over the partitions this
        broker already leads (a restart applies LeaderAndIsr before the coordinator exists only
        in tests; normally the listener is in place first)."""
        self.coordinator = coordinator
        self.replica_manager.leadership_listeners.append(self.on_leadership_change)
        for (topic, index), partition in list(self.replica_manager.partitions.items()):
            if topic == self.topic and partition.is_leader and partition.log is not None:
                coordinator.on_elected(index, partition.leader_epoch)

    # -- leadership ------------------------------------------------------------------------
    def on_leadership_change(self, leaders: list["PartitionEpoch"], followers: list["PartitionEpoch"]) -> None:
        coordinator = self.coordinator
        if coordinator is None:
            return
        for topic, partition, epoch in leaders:
            if topic == self.topic:
                coordinator.on_elected(partition, epoch)
        for topic, partition, epoch in followers:
            if topic == self.topic:
                coordinator.on_resigned(partition, epoch)

    # -- writing ---------------------------------------------------------------------------
    def append(self, partition: int, records: list[Record], callback: Callable[[int], None],
               producer: tuple[int, int] | None = None) -> None:
        """One batch of ``records`` appended to ``__consumer_offsets``-``partition`` with acks=all;
        ``callback(error_code)`` once the in-sync replicas have it (or it failed / timed out).
        ``producer`` (id, epoch): a transactional batch of that producer (TxnOffsetCommit),
        without sequence numbers, as Kafka's coordinator writes it."""
        now = self.time.milliseconds()
        if producer is None:
            batch = build_batch([BatchRecord(key=k, value=v) for k, v in records], now_ms=now)
        else:
            batch = build_batch([BatchRecord(key=k, value=v) for k, v in records], now_ms=now,
                                producer_id=producer[0], producer_epoch=producer[1], transactional=True)

        def done(results: list) -> None:
            error = results[0][1][0][1]
            callback(error)

        self.replica_manager.append_records(self.commit_timeout_ms, -1, True,
                                            [(self.topic, [(partition, bytearray(batch))])], done,
                                            from_coordinator=producer is not None)

    # -- reading ---------------------------------------------------------------------------
    def read_partition(self, partition: int, done: Callable[[Iterable[Record] | None], None]) -> None:
        """``done`` gets the partition's (key, value) records from its log start to its end (as it
        is now), control batches left out, as a lazy iterable: the log is read
        ``READ_CHUNK_BYTES`` at a time as the coordinator consumes it, slice by slice between
        turns of the event loop, so neither reading nor decoding a large partition blocks the loop
        (``done(None)``: this broker has no log for it)."""
        p = self.replica_manager.get_partition(self.topic, partition)
        log_ = p.log if p is not None else None
        if log_ is None:
            done(None)
            return
        done(_read_records(log_, log_.log_start_offset, log_.log_end_offset,
                           self.topic == GROUP_METADATA_TOPIC_NAME))

    # -- FindCoordinator -------------------------------------------------------------------
    def partition_exists(self, topic: str, partition: int) -> bool:
        return self.metadata_cache.contains_partition(topic, partition)

    def locate(self, partition: int, listener_name: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of the leader of ``__consumer_offsets``-``partition``."""
        cache = self.metadata_cache
        info = cache.topics.get(self.topic)
        if info is None:
            self.maybe_create_topic()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        state = info.partitions.get(partition)
        if state is None or state.leader < 0 or state.leader not in cache.brokers:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        endpoint = cache.broker_endpoint(state.leader, listener_name)
        if endpoint is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, state.leader, endpoint.host, endpoint.port

    def maybe_create_topic(self) -> None:
        """Ask the controller to create ``__consumer_offsets`` (once at a time)."""
        if self._creating:
            return
        live = len(self.metadata_cache.brokers)
        replication_factor = max(1, min(self.replication_factor, live)) if live else self.replication_factor
        self._creating = True
        configs = dict(self.topic_configs())
        if int(configs.get("min.insync.replicas", 1)) > replication_factor:
            # (__transaction_state's min ISR, capped like its replication factor)
            configs["min.insync.replicas"] = str(replication_factor)
        topic = NewTopic(self.topic, self.num_partitions, replication_factor, configs=configs)
        log.info("creating %s with %d partitions and replication factor %d (offsets.topic.replication.factor=%d, "
                 "%d live brokers)", self.topic, self.num_partitions, replication_factor,
                 self.replication_factor, live)

        def created(results: list["TopicResult"]) -> None:
            self._creating = False
            code, message = results[0]
            if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.warning("creating %s failed: %s %s", self.topic, _name(code), message or "")

        self.topic_admin.create_topics([topic], False, created, timeout_ms=self.commit_timeout_ms)


def _read_records(log_, offset: int, end: int, transactions: bool = False) -> Iterator["Record | TxnRecord | TxnMarker"]:
    """``transactions``: records of transactional batches come as TxnRecord (with their
    producer id), COMMIT/ABORT markers as TxnMarker (the group coordinator's pending
    transactional offsets); otherwise control batches are left out."""
    while offset < end:
        # the log start may move on (retention, the cleaner) while the load yields
        offset = max(offset, log_.log_start_offset)
        if offset >= end:
            return
        data = log_.read(offset, READ_CHUNK_BYTES, None, True)
        # a copy: the segment may be cleaned or deleted while the load yields
        buf = bytes(data.records)
        if not buf:
            return
        next_offset = offset
        for pos, header in iter_batch_headers(buf):
            if header.base_offset >= end:
                return
            next_offset = header.next_offset
            if header.is_control:
                if transactions and header.base_offset >= offset:
                    try:
                        control = read_control_record(buf, pos, header)
                    except ValueError as exc:
                        log.warning("%s: an unreadable control batch at offset %d skipped: %s", log_, header.base_offset,
                                    exc)
                        continue
                    if control.type in (CONTROL_ABORT, CONTROL_COMMIT):
                        yield TxnMarker(header.producer_id, control.type == CONTROL_COMMIT)
                continue
            txn = transactions and header.is_transactional
            for r in decode_records(header, batch_body(buf, pos, header)):
                if offset <= r.offset < end:
                    if txn:
                        yield TxnRecord(header.producer_id, r.key, r.value)  # type: ignore[arg-type]
                    else:
                        yield (r.key, r.value)  # type: ignore[misc]
        if next_offset <= offset:
            return
        offset = next_offset


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
