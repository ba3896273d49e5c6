"""Partition: one partition replica on this broker, leader or follower (Kafka's Partition).

The leader keeps a ``Replica`` per follower (its log end offset and when it was last caught
up) and moves the high watermark to the smallest LEO over the *maximal* ISR.

ISR changes follow KIP-497/KIP-841 (AlterPartition): the leader never changes its ISR on its
own. It proposes a change — add one follower that caught up (``PendingExpandIsr``), or drop
followers that fell behind (``PendingShrinkIsr``) — through an ``AlterPartitionSender`` (the
controller, or the local commit of a controller-less cluster), and the change takes effect
only when the answer comes back. While a proposal is in flight:

* the committed ISR (``isr``) still decides min.insync.replicas;
* the high watermark is computed over the maximal ISR — the committed ISR plus a follower
  being added — so it never runs ahead of a replica that might yet be in the ISR the
  controller commits; a shrink does not let the HW move until the controller agrees;
* nothing else is proposed.

Errors from the controller are handled as Kafka's ``handleAlterPartitionError``: the two
that prove the proposal was not applied (OPERATION_NOT_ATTEMPTED, INELIGIBLE_REPLICA) return
to the last committed state; FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION and
UNKNOWN_TOPIC_OR_PARTITION leave the proposal pending until a LeaderAndIsr brings the new
state; anything else is retried by the sender. ``check_enough_replicas_reach_offset`` is what
a DelayedProduce asks.

Not thread-safe: everything runs on the event loop.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from protocol.clock import Time
from protocol.errors import (ErrorCode, FencedLeaderEpochError, KafkaError, NotEnoughReplicasError,
                             NotLeaderOrFollowerError, OffsetOutOfRangeError, PolicyViolationError,
                             UnknownLeaderEpochError)
from protocol.records import iter_batch_headers

if TYPE_CHECKING:
    from storage import Log, LogAppendInfo

log = logging.getLogger("kbroker.partition")

# Test-only switches that re-introduce replication bugs the simulator must find (sim/bugs.py
# turns them on for a run; never set otherwise). Each is read only on a path that is rare in
# production: an election, an ISR change in flight, a follower outside the ISR, an acks=all
# produce still waiting for its replicas.
BUG_SHRINK_BEFORE_FIRST_FETCH = False  # an ISR member counts as never caught up after an election
BUG_HW_OVER_LOCAL_ISR = False  # the HW over the committed ISR, not the maximal one (KIP-497)
BUG_ACK_BEFORE_MIN_ISR = False  # acks=all answered once the leader has it


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"

def partition_names(keys, limit: int = 10) -> str:
    """``t-0, t-1, ...`` for a log line: at most ``limit`` names, then how many more (a
    LeaderAndIsr can hold tens of thousands of partitions; one line says what it did)."""
    keys = list(keys)
    shown = ", ".join(f"{t}-{p}" for t, p in keys[:limit])
    return shown if len(keys) <= limit else f"{shown} and {len(keys) - limit} more"


FETCH_LOG_END = 0          # followers read up to the log end offset
FETCH_HIGH_WATERMARK = 1   # consumers (read_uncommitted) read up to the high watermark
FETCH_TXN_COMMITTED = 2    # read_committed: the last stable offset (= HW without transactions)


@dataclass(slots=True)
class LeaderAndIsrState:
    """One partition's state as the controller sends it (LeaderAndIsr)."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    is_new: bool = False
    adding: tuple[int, ...] = ()    # a reassignment in progress (KIP-455): replicas being added
    removing: tuple[int, ...] = ()  # ... and removed


NO_VERIFYING_SEQUENCE = 1 << 31  # above any sequence: a guard no first batch verifies with yet


class VerificationGuard:
    """KIP-890: a producer's verification in progress on a partition (Kafka's
    VerificationStateEntry): the guard an append must still find (a marker drops it) and the
    lowest sequence of the batches verifying, how many requests are verifying with it (not yet
    appended), and the produce requests among them in arrival order (appended in that order:
    ``VerifyingProduce``)."""

    __slots__ = ("lowest_sequence", "in_flight", "queue")

    def __init__(self, lowest_sequence: int) -> None:
        self.lowest_sequence = lowest_sequence
        self.in_flight = 0
        self.queue: collections.deque["VerifyingProduce"] = collections.deque()


class VerifyingProduce:
    """A produce request whose transactional batches are verifying on some partitions, or wait
    behind verifications there (``join``: one ``VerificationGuard`` each, where it waits in the
    guard's queue): ``append`` runs once every answer is in (``expect``, then ``ready``) and
    every request queued before it on those guards has been appended, refused or cancelled."""

    __slots__ = ("guards", "answers", "answered", "finished", "_pending", "_append")

    def __init__(self, append: Callable[[], None]) -> None:
        self.guards: list[VerificationGuard] = []
        self.answers: dict[tuple[str, int], int] = {}  # the coordinator's error per partition verified
        self.answered = False
        self.finished = False
        self._pending = 0
        self._append = append

    def join(self, partition: "Partition", producer_id: int,
             base_sequence: int = NO_VERIFYING_SEQUENCE) -> VerificationGuard:
        """Hold the producer's guard on ``partition`` (``Partition.start_verification``: the
        batch verifying there from ``base_sequence``, or without it, one whose transaction is open
        there) and queue behind the requests already holding it. A request that fails to join
        everywhere is given up (``cancel``)."""
        guard = partition.start_verification(producer_id, base_sequence)
        guard.queue.append(self)
        self.guards.append(guard)
        return guard

    def expect(self, count: int) -> Callable[[dict[tuple[str, int], int]], None]:
        """The callback of the ``count`` verifications asked (each answers ``{(topic,
        partition): error}`` once, into ``answers``): the last one makes the request ``ready``."""
        self._pending = count
        return self._answered

    def _answered(self, errors: dict[tuple[str, int], int]) -> None:
        self.answers.update(errors)
        self._pending -= 1
        if not self._pending:
            self.ready()

    def ready(self) -> None:
        """Every answer is in: appended now, or once the requests before it are."""
        if not self.finished:
            self.answered = True
            _release([self])

    def cancel(self) -> None:
        """Its connection closed: nothing is appended, and the requests after it go on."""
        if self.finished:
            return
        self.finished = True
        for guard in self.guards:
            guard.queue.remove(self)
            guard.in_flight -= 1
        _release([guard.queue[0] for guard in self.guards if guard.queue])


def _release(candidates: list[VerifyingProduce]) -> None:
    """Append every request among ``candidates``, and then behind them, that is answered and
    first in each of its queues (a loop, not recursion: a queue may be long)."""
    while candidates:
        entry = candidates.pop()
        if entry.finished or not entry.answered or any(guard.queue[0] is not entry for guard in entry.guards):
            continue
        entry.finished = True
        for guard in entry.guards:
            guard.queue.popleft()
            guard.in_flight -= 1
        try:
            entry._append()
        except Exception:  # the requests behind it must not wait forever
            log.exception("appending a verified transactional produce failed")
        candidates.extend(guard.queue[0] for guard in entry.guards if guard.queue)


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

    def reset(self, now_ms: int, leader_end_offset: int, in_sync: bool) -> None:
        """On becoming leader: LEO unknown; an ISR member counts as caught up now."""
        self.log_end_offset = -1
        self.log_start_offset = -1
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms
        self.last_caught_up_time_ms = now_ms if in_sync and not BUG_SHRINK_BEFORE_FIRST_FETCH else 0


class CommittedPartitionState:
    """The ISR the controller committed; nothing in flight."""

    __slots__ = ("isr", "maximal_isr")
    is_inflight = False

    def __init__(self, isr: frozenset[int]) -> None:
        self.isr = isr
        # the same set: a field, not a property (read on every high watermark check, issue 29)
        self.maximal_isr = isr

    def __repr__(self) -> str:
        return f"Committed(isr={sorted(self.isr)})"


class PendingExpandIsr:
    """A follower that caught up is proposed for the ISR; until the answer, the HW counts it."""

    __slots__ = ("new_in_sync", "proposed_isr", "last_committed")
    is_inflight = True

    def __init__(self, new_in_sync: int, last_committed: CommittedPartitionState) -> None:
        self.new_in_sync = new_in_sync
        self.last_committed = last_committed
        self.proposed_isr = last_committed.isr | {new_in_sync}

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr if BUG_HW_OVER_LOCAL_ISR else self.proposed_isr

    def __repr__(self) -> str:
        return f"PendingExpandIsr(+{self.new_in_sync}, committed={sorted(self.isr)})"


class PendingShrinkIsr:
    """Followers that fell behind are proposed for removal; until the answer, they still count."""

    __slots__ = ("out_of_sync", "proposed_isr", "last_committed")
    is_inflight = True

    def __init__(self, out_of_sync: frozenset[int], last_committed: CommittedPartitionState) -> None:
        self.out_of_sync = out_of_sync
        self.last_committed = last_committed
        self.proposed_isr = last_committed.isr - out_of_sync

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr

    def __repr__(self) -> str:
        return f"PendingShrinkIsr(-{sorted(self.out_of_sync)}, committed={sorted(self.isr)})"


PartitionState = CommittedPartitionState | PendingExpandIsr | PendingShrinkIsr


class AlterPartitionResult:
    """The controller's answer to one proposal: an error code, or the partition's new state."""

    __slots__ = ("error", "leader", "leader_epoch", "isr", "partition_epoch")

    def __init__(self, error: int, leader: int = -1, leader_epoch: int = -1, isr: list[int] | None = None,
                 partition_epoch: int = -1) -> None:
        self.error = error
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.isr = list(isr or [])
        self.partition_epoch = partition_epoch

    def __repr__(self) -> str:
        if self.error:
            return f"AlterPartitionResult({ErrorCode(self.error).name})"
        return (f"AlterPartitionResult(leader={self.leader}, epoch={self.leader_epoch}, isr={self.isr}, "
                f"partition_epoch={self.partition_epoch})")


class AlterPartitionSender(Protocol):
    """Where ISR proposals go (Kafka's AlterPartitionManager). ``submit`` calls
    ``on_result(result)`` once the proposal is answered; if ``on_result`` returns True the
    sender retries the same proposal later (an error that proves nothing about the outcome)."""

    def submit(self, partition: "Partition", new_isr: list[int],
               on_result: Callable[[AlterPartitionResult], bool]) -> None: ...


class LocalAlterPartition:
    """For a broker with no controller to ask (a cluster driven by a static controller): every
    proposal commits at once, with the next partition epoch. Unsafe across leader changes —
    exactly why clusters with a controller send AlterPartition instead."""

    def submit(self, partition: "Partition", new_isr: list[int],
               on_result: Callable[[AlterPartitionResult], bool]) -> None:
        on_result(AlterPartitionResult(ErrorCode.NONE, partition.leader_id, partition.leader_epoch, new_isr,
                                       partition.partition_epoch + 1))


LOCAL_ALTER_PARTITION = LocalAlterPartition()

# The errors after which a proposal stays pending until a LeaderAndIsr brings the partition's
# new state; and those that prove it was not applied, so the last committed state holds again.
_WAIT_FOR_LEADER_AND_ISR = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                                      ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                                      ErrorCode.NEW_LEADER_ELECTED, ErrorCode.INVALID_REQUEST,
                                      ErrorCode.NOT_LEADER_OR_FOLLOWER})
_NOT_APPLIED = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})


def _epochs_from_headers(log_: "Log", until: int) -> list[tuple[int, int]]:
    """(epoch, start offset) of each leader epoch in the batch headers of [log start, ``until``),
    as the epoch cache assigns them on append: each batch's header holds the epoch of the leader
    that wrote it, so this is what the cache held before it lost these entries. Raises what
    reading the log raises (KafkaError, OSError)."""
    entries: list[tuple[int, int]] = []
    offset = log_.log_start_offset
    while offset < until:
        records = log_.read(offset, 1 << 20).records  # whole batches of one segment
        if not records:
            break
        for _pos, header in iter_batch_headers(records):
            if header.base_offset >= until:
                return entries
            epoch = header.partition_leader_epoch
            if epoch >= 0 and not (entries and entries[-1][0] == epoch):
                while entries and entries[-1][0] >= epoch:
                    entries.pop()
                entries.append((epoch, header.base_offset))
            offset = header.next_offset
    return entries


_REACHED = (True, ErrorCode.NONE)  # check_enough_replicas_reach_offset's common answers
_NOT_YET = (False, ErrorCode.NONE)


def _always_eligible(_broker_id: int) -> bool:
    return True


class Partition:
    def __init__(self, topic: str, partition: int, *, local_broker_id: int, time: Time,
                 on_isr_change: Callable[["Partition", list[int]], None] | None = None,
                 alter_partition: AlterPartitionSender = LOCAL_ALTER_PARTITION,
                 is_replica_isr_eligible: Callable[[int], bool] = _always_eligible,
                 replica_lag_time_max_ms: int = 30000,
                 on_ineligible_replica: Callable[[int], None] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.local_broker_id = local_broker_id
        # Its topic's AppendCounter.appended (broker/metrics.py BrokerTopicMetrics) when metrics are on.
        self.count_append: Callable[[int, Any], None] | None = None
        self.time = time
        self.log: Log | None = None
        # (log, log start, first known epoch's start) -> _epochs_from_headers of that range (see _header_epochs)
        self._header_epochs_cache: tuple[tuple[Any, int, int], list[tuple[int, int]]] | None = None
        self.leader_id = -1
        self.leader_epoch = -1
        self.leader_epoch_start_offset = -1
        self.partition_epoch = 0
        self.controller_epoch = -1
        self.replicas: list[int] = []
        self.adding_replicas: tuple[int, ...] = ()    # KIP-455: a reassignment in progress
        self.removing_replicas: tuple[int, ...] = ()
        self.partition_state: PartitionState = CommittedPartitionState(frozenset())
        self.remote_replicas: dict[int, Replica] = {}
        self.previous_isr: frozenset[int] = frozenset()  # the ISR before the last committed AlterPartition
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._on_isr_change = on_isr_change
        self._alter_partition = alter_partition
        self._is_replica_isr_eligible = is_replica_isr_eligible
        self._on_ineligible_replica = on_ineligible_replica
        # KIP-890: producer id -> the guard of a verification in flight or done for the first
        # batch of its transaction here; a marker of that producer drops it (Kafka's VerificationGuard).
        self.verification_guards: dict[int, VerificationGuard] = {}

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, leader={self.leader_id}, epoch={self.leader_epoch})"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR: what min.insync.replicas counts."""
        return self.partition_state.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The committed ISR plus a follower being added: what the high watermark waits for."""
        return self.partition_state.maximal_isr

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
    def is_stale(self, state: LeaderAndIsrState) -> bool:
        """A LeaderAndIsr older than what this replica knows: a lower leader epoch, or the same
        leader epoch with a lower partition epoch (an ISR change it has already seen)."""
        if state.leader_epoch != self.leader_epoch:
            return state.leader_epoch < self.leader_epoch
        return state.partition_epoch < self.partition_epoch

    def _update_assignment(self, state: LeaderAndIsrState) -> None:
        self.controller_epoch = state.controller_epoch
        self.replicas = list(state.replicas)
        self.adding_replicas, self.removing_replicas = tuple(state.adding), tuple(state.removing)
        # Whatever was proposed, the controller's state now stands (a pending proposal's answer
        # will find the state replaced and be ignored).
        self.partition_state = CommittedPartitionState(frozenset(state.isr))
        self.partition_epoch = state.partition_epoch

    def make_leader(self, state: LeaderAndIsrState) -> bool:
        """Become (or stay) leader; True if this is a new leader epoch here."""
        assert self.log is not None, "create the log before making a replica leader"
        now = self.time.milliseconds()
        is_new_epoch = state.leader_epoch > self.leader_epoch
        was_leader = self.is_leader
        self._update_assignment(state)
        leo = self.log.log_end_offset
        if is_new_epoch:
            # Epoch → start offset, so followers can find where this epoch's log begins (KIP-101).
            self.log.leader_epoch_cache.assign(state.leader_epoch, leo)
            self.leader_epoch_start_offset = leo
            # (ReplicaManager logs one line per LeaderAndIsr; this one per partition is for debugging)
            log.debug("%s-%d: leader at epoch %d from offset %d, ISR %s", self.topic, self.partition,
                      state.leader_epoch, leo, sorted(self.isr))
        self.leader_epoch = state.leader_epoch
        self.leader_id = self.local_broker_id
        if is_new_epoch or not was_leader:
            self.remote_replicas = {}
            # KIP-890 guards of an earlier leadership (a marker that came by replication meanwhile
            # dropped none of them): a stale lowest sequence would refuse the producer's next first
            # batch for good; requests still queued keep their own guard objects
            self.verification_guards = {}
        for rid in self.replicas:
            if rid != self.local_broker_id and rid not in self.remote_replicas:
                replica = Replica(rid)
                replica.reset(now, leo, rid in self.isr)
                self.remote_replicas[rid] = replica
        for rid in list(self.remote_replicas):
            if rid not in self.replicas:
                del self.remote_replicas[rid]
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
        self.verification_guards = {}  # (a leader's only; see make_leader)
        return changed

    # -- leader: appends, HW, ISR ----------------------------------------------------------
    def _leader_log(self) -> "Log":
        if not self.is_leader or self.log is None:
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of "
                                           f"{self.topic}-{self.partition} (leader {self.leader_id})")
        return self.log

    def append_records_to_leader(self, records, required_acks: int, from_coordinator: bool = False) -> "LogAppendInfo":
        leader_log = self.log
        if leader_log is None or self.leader_id != self.local_broker_id:  # not is_leader, without the property call
            leader_log = self._leader_log()  # raises NOT_LEADER_OR_FOLLOWER
        if required_acks == -1 and len(self.partition_state.isr) < leader_log.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"ISR {sorted(self.isr)} of {self.topic}-{self.partition} is smaller than "
                f"min.insync.replicas={leader_log.config.min_insync_replicas}")
        return leader_log.append_as_leader(records, self.leader_epoch, from_coordinator)

    def needs_verification(self, producer_id: int, epoch: int) -> bool:
        """KIP-890: a transactional batch of this producer starts its transaction here (no
        transaction of it is open in the log's producer state), so the coordinator must confirm
        the partition is in it first."""
        leader_log = self.log
        if leader_log is None:
            return False
        entry = leader_log.producer_state.last_entry(producer_id)
        return entry is None or entry.current_txn_first_offset < 0 or entry.producer_epoch != epoch

    def start_verification(self, producer_id: int,
                           base_sequence: int = NO_VERIFYING_SEQUENCE) -> "VerificationGuard":
        """The producer's verification guard here, shared by every request verifying at the same
        time (its first batches pipelined: Kafka's VerificationStateEntry keeps one guard per
        producer until a marker), remembering the lowest sequence among them (see
        ``out_of_order_first_batch``); a new one after a marker dropped it. Without
        ``base_sequence``: a transactional batch of the producer, its transaction open here, in a
        request that waits for verifications elsewhere; it holds the guard too (shared with what
        verifies here now or later), so that the producer's next requests here verify, hence
        wait, behind it."""
        guard = self.verification_guards.get(producer_id)
        if guard is None:
            guard = self.verification_guards[producer_id] = VerificationGuard(base_sequence)
        else:
            guard.lowest_sequence = min(guard.lowest_sequence, base_sequence)
        guard.in_flight += 1
        return guard

    def out_of_order_first_batch(self, producer_id: int, epoch: int, guard: "VerificationGuard",
                                 base_sequence: int) -> bool:
        """Kafka's checkSequence with a verification entry: while the producer has no
        transaction open here, a batch past the lowest sequence verifying may not be its first
        (a producer the partition has no state of is accepted at any sequence: appended first,
        the lower batches would then be refused and lost)."""
        return self.needs_verification(producer_id, epoch) and base_sequence > guard.lowest_sequence

    def verifying(self, producer_id: int) -> bool:
        """Requests of this producer are waiting for their verification here: a later batch of
        it goes through verification too, so it is appended after them, in order (Kafka reads a
        connection's next request only once the last is answered; kbroker serves pipelined
        requests at once, and a batch appended directly could overtake the verified ones)."""
        guard = self.verification_guards.get(producer_id)
        return guard is not None and guard.in_flight > 0

    def verification_holds(self, producer_id: int, guard: "VerificationGuard") -> bool:
        return self.verification_guards.get(producer_id) is guard

    def end_verification(self, producer_id: int, guard: "VerificationGuard") -> None:
        if self.verification_guards.get(producer_id) is guard:
            del self.verification_guards[producer_id]

    def append_end_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                              commit: bool) -> "LogAppendInfo":
        """A transaction marker from the coordinator (WriteTxnMarkers), written as leader; the
        coordinator waits for the ISR (acks=all) but, as Kafka, not for min.insync.replicas.
        A verification of the producer still in flight here no longer holds."""
        self.verification_guards.pop(producer_id, None)
        return self._leader_log().append_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                                        self.leader_epoch)

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """HW := the smallest LEO over the maximal ISR (the leader's own included) and over any
        follower that is caught up and eligible, hence about to join; never moves backwards.
        ``now_ms``: the clock's milliseconds when the caller has just read them (a follower's
        fetch), else read here when needed."""
        leader_log = self.log
        if leader_log is None or self.leader_id != self.local_broker_id:  # not is_leader (every produce: no property call)
            return False
        new_hw = leader_log.log_end_offset
        hw = leader_log.high_watermark
        if new_hw <= hw:
            return False  # (the HW is at the LEO already)
        maximal = self.partition_state.maximal_isr
        remote = self.remote_replicas
        for rid, replica in remote.items():
            replica_leo = replica.log_end_offset
            if replica_leo >= new_hw:
                continue
            if rid not in maximal:
                if now_ms is None:  # read once, and only for a follower behind outside the ISR (none on most produces)
                    now_ms = self.time.milliseconds()
                if not (self._is_caught_up(replica, now_ms, self.replica_lag_time_max_ms)
                        and self._is_replica_isr_eligible(rid) and not BUG_HW_OVER_LOCAL_ISR):
                    continue
            if replica_leo <= hw:
                # The HW cannot move: every later candidate is below this one, or the HW itself
                # (a follower whose LEO is unknown, -1, just became leader, holds it where it is).
                # Most calls end here: an append (every follower behind), and the fetch of the
                # first follower to catch up (the others behind; issue 29).
                return False
            new_hw = replica_leo
        # A member of the maximal ISR without a Replica (none but the leader itself, but for a
        # moment around a reassignment) holds the HW where it is.
        if maximal.difference(remote, (self.local_broker_id,)):
            return False
        if new_hw > hw:
            leader_log.update_high_watermark(new_hw)
            return True
        return False

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                                    leader_end_offset: int) -> bool:
        """Record a follower's fetch; returns True if the high watermark moved."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            return False
        now = self.time.milliseconds()
        # Kafka's Replica.updateFetchStateOrThrow, inline (two calls less per follower fetch,
        # issue 29): caught up at this fetch if it asked for everything the leader had; caught up
        # at the previous fetch if it now asks for at least what the leader had back then.
        if fetch_offset >= leader_end_offset:
            if now > replica.last_caught_up_time_ms:
                replica.last_caught_up_time_ms = now
        elif fetch_offset >= replica.last_fetch_leader_log_end_offset:
            if replica.last_fetch_time_ms > replica.last_caught_up_time_ms:
                replica.last_caught_up_time_ms = replica.last_fetch_time_ms
        replica.log_end_offset = fetch_offset
        replica.log_start_offset = log_start_offset
        replica.last_fetch_leader_log_end_offset = leader_end_offset
        replica.last_fetch_time_ms = now
        state = self.partition_state
        if not state.is_inflight and replica_id not in state.isr:  # (maybe_expand_isr's first test)
            self.maybe_expand_isr(replica)
        return self.maybe_increment_high_watermark(now)

    def _is_caught_up(self, replica: Replica, now_ms: int, max_lag_ms: int) -> bool:
        """Kafka's isCaughtUp: at the leader's LEO, or caught up within ``max_lag_ms``. A follower
        that has not fetched since this broker became leader (LEO unknown) counts from the
        election, as ``Replica.reset`` set it: an ISR member gets the lag time for its first fetch."""
        if self.log is None:
            return False
        if replica.log_end_offset >= self.log.log_end_offset:
            return True
        return now_ms - replica.last_caught_up_time_ms <= max_lag_ms

    def maybe_expand_isr(self, replica: Replica) -> None:
        """Propose a follower that has reached the HW and this leader epoch's start (Kafka's
        isFollowerInSync), if it is eligible and no other change is in flight."""
        state = self.partition_state
        if state.is_inflight or replica.broker_id in state.isr or self.log is None or not self.is_leader:
            return
        if replica.log_end_offset < self.log.high_watermark or replica.log_end_offset < self.leader_epoch_start_offset:
            return
        if not self._is_replica_isr_eligible(replica.broker_id):
            return
        assert isinstance(state, CommittedPartitionState)
        self._propose(PendingExpandIsr(replica.broker_id, state), f"replica {replica.broker_id} caught up")

    def maybe_shrink_isr(self, max_lag_ms: int | None = None) -> bool:
        """Propose dropping followers that have not caught up within the lag time; True if a
        change was proposed."""
        state = self.partition_state
        if not self.is_leader or self.log is None or state.is_inflight:
            return False
        lag = self.replica_lag_time_max_ms if max_lag_ms is None else max_lag_ms
        now = self.time.milliseconds()
        out = frozenset(rid for rid in state.isr if rid != self.local_broker_id
                        and rid in self.remote_replicas and not self._is_caught_up(self.remote_replicas[rid], now, lag))
        if not out:
            return False
        lags = {rid: now - self.remote_replicas[rid].last_caught_up_time_ms for rid in sorted(out)}
        assert isinstance(state, CommittedPartitionState)
        self._propose(PendingShrinkIsr(out, state), f"replicas {sorted(out)} lagging (ms since caught up: {lags})")
        return True

    def _propose(self, proposal: PendingExpandIsr | PendingShrinkIsr, reason: str) -> None:
        """The one place an ISR change starts: it takes effect when the answer commits it."""
        log.info("%s-%d: proposing ISR %s -> %s at partition epoch %d (%s)", self.topic, self.partition,
                 sorted(proposal.isr), sorted(proposal.proposed_isr), self.partition_epoch, reason)
        self.partition_state = proposal
        self._alter_partition.submit(self, sorted(proposal.proposed_isr),
                                     lambda result: self._on_alter_partition_result(proposal, result))

    def _on_alter_partition_result(self, proposal: PendingExpandIsr | PendingShrinkIsr,
                                   result: AlterPartitionResult) -> bool:
        """Apply the controller's answer to ``proposal``; True asks the sender to retry it."""
        if self.partition_state is not proposal:
            return False  # a LeaderAndIsr (or another answer) replaced it meanwhile
        error = result.error
        if error:
            if error in _NOT_APPLIED:
                log.info("%s-%d: ISR change to %s refused (%s); keeping ISR %s", self.topic, self.partition,
                         sorted(proposal.proposed_isr), ErrorCode(error).name, sorted(proposal.isr))
                self.partition_state = proposal.last_committed
                if (error == ErrorCode.INELIGIBLE_REPLICA and isinstance(proposal, PendingExpandIsr)
                        and self._on_ineligible_replica is not None):
                    # Fenced or shutting down as the controller sees it, though not yet in our
                    # metadata: not proposed again until the live brokers change.
                    self._on_ineligible_replica(proposal.new_in_sync)
                return False
            if error in _WAIT_FOR_LEADER_AND_ISR:
                log.info("%s-%d: ISR change to %s refused (%s); waiting for the controller's new state",
                         self.topic, self.partition, sorted(proposal.proposed_isr), ErrorCode(error).name)
                return False
            log.warning("%s-%d: ISR change to %s failed (%s); retrying", self.topic, self.partition,
                        sorted(proposal.proposed_isr), error_name(error))
            return True
        if result.leader_epoch != self.leader_epoch or result.partition_epoch < self.partition_epoch:
            log.info("%s-%d: ignoring a stale AlterPartition answer %r (leader epoch %d, partition epoch %d)",
                     self.topic, self.partition, result, self.leader_epoch, self.partition_epoch)
            return False
        new_isr = frozenset(result.isr)
        log.info("%s-%d: ISR %s -> %s committed at partition epoch %d", self.topic, self.partition,
                 sorted(proposal.isr), sorted(new_isr), result.partition_epoch)
        self.previous_isr = proposal.isr
        self.partition_state = CommittedPartitionState(new_isr)
        self.partition_epoch = result.partition_epoch
        # A smaller ISR may let the HW move forward; whoever waits on this partition is told.
        self.maybe_increment_high_watermark()
        if self._on_isr_change is not None:
            self._on_isr_change(self, sorted(new_isr))
        return False

    def low_watermark(self, is_alive: Callable[[int], bool]) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset over this leader's log and
        the followers on live brokers (-1 for one that has not fetched since this broker leads)."""
        low = self._leader_log().log_start_offset
        for rid, replica in self.remote_replicas.items():
            if replica.log_start_offset < low and is_alive(rid):
                low = replica.log_start_offset
        return low

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords on the leader (Kafka's deleteRecordsOnLeader): move the log start offset
        to ``offset`` (-1: the high watermark); returns the offset to wait for. Above the high
        watermark: OffsetOutOfRangeError; a topic without cleanup.policy delete: PolicyViolation."""
        log_ = self._leader_log()
        if not log_.config.delete:
            raise PolicyViolationError(f"records of partition {self.topic}-{self.partition} can not be deleted "
                                       f"due to the configured policy")
        converted = log_.high_watermark if offset == -1 else offset
        if converted < 0:
            raise OffsetOutOfRangeError(f"the offset {offset} for partition {self.topic}-{self.partition} "
                                        f"is not valid")
        log_.maybe_increment_log_start_offset(converted)
        return converted

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, int]:
        """(done, error code) for an acks=-1 append that needs the HW to reach ``required_offset``."""
        log_ = self.log
        if log_ is None or self.leader_id != self.local_broker_id:  # not is_leader, without the property call
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if log_.high_watermark >= required_offset:
            if len(self.partition_state.isr) < log_.config.min_insync_replicas:
                return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return _REACHED  # (True, NONE): one constant, every acks=all produce (issue 29)
        if BUG_ACK_BEFORE_MIN_ISR and log_.log_end_offset >= required_offset:
            return True, ErrorCode.NONE
        return _NOT_YET  # (False, NONE)

    # -- reads -----------------------------------------------------------------------------
    def local_log_with_epoch(self, current_leader_epoch: int, require_leader: bool) -> "Log":
        """The log, after the epoch and leadership checks every read makes (KIP-320).
        ReplicaManager.read_from_local_log inlines the test of when this raises (the fetch path):
        a check added here must be added there too."""
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
        for, and the start offset of the next epoch (or the LEO).

        An epoch older than every epoch this log knows gets, as in Kafka, the start offset of the
        first known one when the records before it were deleted (retention moves the first
        epoch's start up to the log start). When records below the first known epoch are still
        there (a leader-epoch checkpoint lost, the batches kept but not which epochs began where;
        or a follower that truncated to its high watermark with no epoch known and fetched again),
        their headers still say which leader epoch wrote each: the answer is read from them
        (_epochs_from_headers), what the lost entries would have said. Kafka's answer there,
        the first known epoch's start, told followers holding another record at an offset under
        a longer batch of the leader's that their logs agree (simulator seeds 6584, 7052: every
        fetch then failed on that batch); an undefined answer made an ISR member truncate to its
        own high watermark, below the leader's, dropping committed records (seed 8258)."""
        try:
            local = self.local_log_with_epoch(current_leader_epoch, require_leader)
        except KafkaError as exc:
            return exc.error_code, -1, -1
        cache = local.leader_epoch_cache
        epoch, end = cache.end_offset_for(leader_epoch, local.log_end_offset)
        first = cache.earliest_entry()
        if first is not None and 0 <= leader_epoch < first.epoch and first.start_offset > local.log_start_offset:
            try:
                entries = self._header_epochs(local, first.start_offset)
            except (KafkaError, OSError) as exc:
                # Not undefined: a follower would truncate to its own high watermark (seed 8258).
                log.warning("%s-%d: reading batch headers for leader epoch %d failed: %s", self.topic,
                            self.partition, leader_epoch, exc)
                return ErrorCode.KAFKA_STORAGE_ERROR, -1, -1
            epoch, end = leader_epoch, first.start_offset
            for entry_epoch, start in entries:  # Kafka's endOffsetFor over them
                if entry_epoch > leader_epoch:
                    end = start
                    break
                epoch = entry_epoch
        return ErrorCode.NONE, epoch, end

    def _header_epochs(self, local: "Log", until: int) -> list[tuple[int, int]]:
        """_epochs_from_headers of [log start, ``until``), read once for each such range of a log
        (a follower asks at each leadership change; the range stays until retention removes it)."""
        key = (local, local.log_start_offset, until)
        cached = self._header_epochs_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        entries = _epochs_from_headers(local, until)
        self._header_epochs_cache = (key, entries)
        return entries
