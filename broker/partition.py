"""Partition: one partition replica on this broker, leader or follower (Kafka's Partition).

The leader keeps a ``Replica`` per follower (its log end offset and when it was last caught
up), moves the high watermark to the smallest LEO in the ISR (never backwards), shrinks
the ISR when a follower lags more than replica.lag.time.max.ms and grows it when the
follower catches up. Every ISR change goes through ``_alter_isr`` (the one place that will
send AlterPartition to the controller). ``check_enough_replicas_reach_offset`` is what a
DelayedProduce asks.

Not thread-safe: everything runs on the event loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from protocol.clock import Time
from protocol.errors import (ErrorCode, FencedLeaderEpochError, KafkaError, NotEnoughReplicasError,
                             NotLeaderOrFollowerError, UnknownLeaderEpochError)

if TYPE_CHECKING:
    from storage import Log, LogAppendInfo

log = logging.getLogger("kbroker.partition")

FETCH_LOG_END = 0          # followers read up to the log end offset
FETCH_HIGH_WATERMARK = 1   # consumers (read_uncommitted) read up to the high watermark
FETCH_TXN_COMMITTED = 2    # read_committed: the last stable offset (= HW without transactions)


@dataclass
class LeaderAndIsrState:
    """One partition's state as the controller sends it (LeaderAndIsr / embedded controller)."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    is_new: bool = False


class Replica:
    """A follower's state, as its leader tracks it (Kafka's Replica / ReplicaState)."""

    __slots__ = ("broker_id", "log_end_offset", "log_start_offset", "last_caught_up_time_ms",
                 "last_fetch_leader_log_end_offset", "last_fetch_time_ms")

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.log_end_offset = -1
        self.log_start_offset = -1
        self.last_caught_up_time_ms = 0
        self.last_fetch_leader_log_end_offset = -1
        self.last_fetch_time_ms = 0

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, leader_end_offset: int, now_ms: int) -> None:
        # Caught up at this fetch if it asked for everything the leader had; caught up at the
        # previous fetch if it now asks for at least what the leader had back then.
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms

    def reset(self, now_ms: int, leader_end_offset: int, in_sync: bool) -> None:
        """On becoming leader: LEO unknown; an ISR member counts as caught up now."""
        self.log_end_offset = -1
        self.log_start_offset = -1
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms
        self.last_caught_up_time_ms = now_ms if in_sync else 0


class Partition:
    def __init__(self, topic: str, partition: int, *, local_broker_id: int, time: Time,
                 on_isr_change: Callable[["Partition", list[int]], None] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.local_broker_id = local_broker_id
        self.time = time
        self.log: Log | None = None
        self.leader_id = -1
        self.leader_epoch = -1
        self.leader_epoch_start_offset = -1
        self.partition_epoch = 0
        self.controller_epoch = -1
        self.replicas: list[int] = []
        self.isr: frozenset[int] = frozenset()
        self.remote_replicas: dict[int, Replica] = {}
        self._on_isr_change = on_isr_change

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, leader={self.leader_id}, epoch={self.leader_epoch})"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas if self.log is not None else 1

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark if self.log is not None else -1

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset if self.log is not None else -1

    # -- leadership ------------------------------------------------------------------------
    def _update_assignment(self, state: LeaderAndIsrState) -> None:
        self.controller_epoch = state.controller_epoch
        self.replicas = list(state.replicas)
        self.isr = frozenset(state.isr)
        self.partition_epoch = state.partition_epoch

    def make_leader(self, state: LeaderAndIsrState) -> bool:
        """Become (or stay) leader; True if this is a new leader epoch here."""
        assert self.log is not None, "create the log before making a replica leader"
        now = self.time.milliseconds()
        is_new_epoch = state.leader_epoch > self.leader_epoch
        self._update_assignment(state)
        leo = self.log.log_end_offset
        if is_new_epoch:
            # Epoch → start offset, so followers can find where this epoch's log begins (KIP-101).
            self.log.leader_epoch_cache.assign(state.leader_epoch, leo)
            self.leader_epoch_start_offset = leo
            log.info("%s-%d: leader at epoch %d from offset %d, ISR %s", self.topic, self.partition,
                     state.leader_epoch, leo, sorted(self.isr))
        self.leader_epoch = state.leader_epoch
        self.leader_id = self.local_broker_id
        self.remote_replicas = {}
        for rid in self.replicas:
            if rid != self.local_broker_id:
                replica = Replica(rid)
                replica.reset(now, leo, rid in self.isr)
                self.remote_replicas[rid] = replica
        self.maybe_increment_high_watermark()
        return is_new_epoch

    def make_follower(self, state: LeaderAndIsrState) -> bool:
        """Follow ``state.leader``; True if the leader or epoch changed (so fetching must restart)."""
        changed = state.leader != self.leader_id or state.leader_epoch > self.leader_epoch
        self._update_assignment(state)
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.leader_epoch_start_offset = -1
        self.remote_replicas = {}
        return changed

    # -- leader: appends, HW, ISR ----------------------------------------------------------
    def _leader_log(self) -> "Log":
        if not self.is_leader or self.log is None:
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of "
                                           f"{self.topic}-{self.partition} (leader {self.leader_id})")
        return self.log

    def append_records_to_leader(self, records, required_acks: int) -> "LogAppendInfo":
        leader_log = self._leader_log()
        if required_acks == -1 and len(self.isr) < leader_log.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"ISR {sorted(self.isr)} of {self.topic}-{self.partition} is smaller than "
                f"min.insync.replicas={leader_log.config.min_insync_replicas}")
        return leader_log.append_as_leader(records, self.leader_epoch)

    def maybe_increment_high_watermark(self) -> bool:
        """HW := min LEO over the ISR (the leader's own LEO included); never moves backwards."""
        leader_log = self.log
        if leader_log is None or not self.is_leader:
            return False
        new_hw = leader_log.log_end_offset
        for rid in self.isr:
            if rid == self.local_broker_id:
                continue
            replica = self.remote_replicas.get(rid)
            if replica is None or replica.log_end_offset < 0:
                new_hw = min(new_hw, leader_log.high_watermark)
            elif replica.log_end_offset < new_hw:
                new_hw = replica.log_end_offset
        old_hw = leader_log.high_watermark
        if new_hw > old_hw:
            leader_log.update_high_watermark(new_hw)
            return True
        return False

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                                    leader_end_offset: int) -> bool:
        """Record a follower's fetch; returns True if the high watermark moved."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            return False
        replica.update_fetch_state(fetch_offset, log_start_offset, leader_end_offset, self.time.milliseconds())
        self.maybe_expand_isr(replica)
        return self.maybe_increment_high_watermark()

    def _is_caught_up(self, replica: Replica, now_ms: int, max_lag_ms: int) -> bool:
        if self.log is None:
            return False
        if replica.log_end_offset >= self.log.log_end_offset:
            return True
        return now_ms - replica.last_caught_up_time_ms <= max_lag_ms

    def maybe_expand_isr(self, replica: Replica) -> None:
        """Add a follower that has reached the HW and this leader epoch's start (Kafka's rule)."""
        if replica.broker_id in self.isr or self.log is None or not self.is_leader:
            return
        if replica.log_end_offset >= self.log.high_watermark and replica.log_end_offset >= self.leader_epoch_start_offset:
            self._alter_isr(sorted(self.isr | {replica.broker_id}), f"replica {replica.broker_id} caught up")

    def maybe_shrink_isr(self, max_lag_ms: int) -> bool:
        """Drop followers that have not caught up within ``max_lag_ms``; True if the ISR changed."""
        if not self.is_leader or self.log is None:
            return False
        now = self.time.milliseconds()
        out = [rid for rid in self.isr if rid != self.local_broker_id
               and rid in self.remote_replicas and not self._is_caught_up(self.remote_replicas[rid], now, max_lag_ms)]
        if not out:
            return False
        lags = {rid: now - self.remote_replicas[rid].last_caught_up_time_ms for rid in out}
        self._alter_isr(sorted(self.isr - set(out)), f"replicas {sorted(out)} lagging (ms since caught up: {lags})")
        return True

    def _alter_isr(self, new_isr: list[int], reason: str) -> None:
        """The one place the ISR changes on a leader (AlterPartition goes to the controller from here)."""
        log.info("%s-%d: ISR %s -> %s (%s)", self.topic, self.partition, sorted(self.isr), new_isr, reason)
        self.isr = frozenset(new_isr)
        self.partition_epoch += 1
        if self._on_isr_change is not None:
            self._on_isr_change(self, new_isr)
        # A smaller ISR may let the HW move forward.
        self.maybe_increment_high_watermark()

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, int]:
        """(done, error code) for an acks=-1 append that needs the HW to reach ``required_offset``."""
        if not self.is_leader or self.log is None:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if len(self.isr) < self.log.config.min_insync_replicas:
                return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return True, ErrorCode.NONE
        return False, ErrorCode.NONE

    # -- reads -----------------------------------------------------------------------------
    def local_log_with_epoch(self, current_leader_epoch: int, require_leader: bool) -> "Log":
        """The log, after the epoch and leadership checks every read makes (KIP-320)."""
        if current_leader_epoch != -1 and current_leader_epoch != self.leader_epoch:
            if current_leader_epoch < self.leader_epoch:
                raise FencedLeaderEpochError(f"epoch {current_leader_epoch} < current {self.leader_epoch}")
            raise UnknownLeaderEpochError(f"epoch {current_leader_epoch} > current {self.leader_epoch}")
        if require_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of "
                                           f"{self.topic}-{self.partition}")
        if self.log is None:
            raise NotLeaderOrFollowerError(f"no local log for {self.topic}-{self.partition}")
        return self.log

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int,
                                     require_leader: bool) -> tuple[int, int, int]:
        """(error, epoch, end offset) for OffsetsForLeaderEpoch: the largest epoch ≤ the one asked
        for, and the start offset of the next epoch (or the LEO)."""
        try:
            local = self.local_log_with_epoch(current_leader_epoch, require_leader)
        except KafkaError as exc:
            return exc.error_code, -1, -1
        epoch, end = local.leader_epoch_cache.end_offset_for(leader_epoch, local.log_end_offset)
        return ErrorCode.NONE, epoch, end
