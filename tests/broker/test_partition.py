"""Partition's ISR changes through AlterPartition (KIP-497/KIP-841) on real log files and a
MockTime: proposals take effect only when answered, the high watermark waits for the maximal
ISR meanwhile, one proposal at a time, and the controller's errors are handled as Kafka's
Partition does."""

from __future__ import annotations

import pytest

from broker.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache
from broker.partition import (AlterPartitionResult, CommittedPartitionState, LeaderAndIsrState, PendingExpandIsr,
                              PendingShrinkIsr)
from broker.replica_manager import FetchParams
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.fast_codecs import FetchPartition
from protocol.records import Record, build_batch
from storage import LogConfig

from tests.broker.replica_manager_support import replica_manager

LAG_MS = 10_000


class RecordingSender:
    """An AlterPartitionSender that keeps proposals until the test answers them."""

    def __init__(self):
        self.proposals = []  # [(partition, new_isr, on_result)]

    def submit(self, partition, new_isr, on_result):
        self.proposals.append((partition, list(new_isr), on_result))

    def answer(self, result: AlterPartitionResult, index: int = -1) -> bool:
        partition, _isr, on_result = self.proposals.pop(index)
        return on_result(result)

    def commit(self, index: int = -1) -> bool:
        partition, isr, _ = self.proposals[index]
        return self.answer(AlterPartitionResult(0, partition.leader_id, partition.leader_epoch, isr,
                                                partition.partition_epoch + 1), index)


@pytest.fixture
def time():
    return MockTime()


@pytest.fixture
def sender():
    return RecordingSender()


@pytest.fixture
def cache():
    cache = MetadataCache(1)
    for b in (1, 2, 3):
        cache.brokers[b] = BrokerInfo(b, {"PLAINTEXT": BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + b)})
    return cache


@pytest.fixture
def rm(tmp_path, time, sender, cache):
    with replica_manager(tmp_path, time, LogConfig(min_insync_replicas=2), lag_ms=LAG_MS, metadata_cache=cache,
                         alter_partition=sender) as manager:
        yield manager


def state(leader=1, epoch=0, isr=(1, 2, 3), partition_epoch=0, replicas=(1, 2, 3)):
    return LeaderAndIsrState("t", 0, 1, leader, epoch, list(isr), partition_epoch, list(replicas))


def lead(rm, **kw):
    error, results = rm.become_leader_or_follower(0, 1, [state(**kw)])
    assert error == 0 and results[("t", 0)] == 0
    return rm.get_partition("t", 0)


def produce(rm, n=3, acks=-1, timeout_ms=30_000):
    out = []
    batch = bytearray(build_batch([Record(value=b"v", timestamp=1)] * n))
    rm.append_records(timeout_ms, acks, False, [("t", [(0, batch)])], out.append)
    return out


def fetch(rm, replica_id, offset):
    out = []
    rm.fetch_messages(FetchParams(replica_id, 0, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, offset, 0, 1 << 20)])],
                      out.append)
    return out[0][0][1][0]


def result(out):
    [(_topic, [row])] = out[0]
    return row[1], row[2]


def test_expansion_is_proposed_and_takes_effect_only_when_committed(rm, sender):
    p = lead(rm, isr=(1, 2))
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    assert p.high_watermark == 3 and sender.proposals == []
    fetch(rm, 3, 3)  # caught up to the HW: proposed
    assert [isr for _, isr, _ in sender.proposals] == [[1, 2, 3]]
    assert isinstance(p.partition_state, PendingExpandIsr)
    assert p.isr == {1, 2} and p.maximal_isr == {1, 2, 3}
    assert rm.metadata_cache.partition_info("t", 0) is None or 3 not in rm.metadata_cache.partition_info("t", 0).isr
    assert sender.commit() is False
    assert isinstance(p.partition_state, CommittedPartitionState)
    assert p.isr == {1, 2, 3} and p.partition_epoch == 1


def test_pending_expansion_holds_the_high_watermark_for_the_new_member(rm, sender):
    p = lead(rm, isr=(1, 2))
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    fetch(rm, 3, 3)  # proposed at LEO 3
    produce(rm, acks=1)  # LEO 6
    fetch(rm, 2, 6)
    assert p.high_watermark == 3  # broker 3 is in the maximal ISR and has 3
    fetch(rm, 3, 6)
    assert p.high_watermark == 6


def test_pending_shrink_keeps_the_high_watermark_until_the_controller_agrees(rm, sender, time):
    p = lead(rm)
    fetch(rm, 2, 0)
    fetch(rm, 3, 0)
    out = produce(rm)
    fetch(rm, 2, 3)
    assert out == [] and p.high_watermark == 0  # broker 3 has not fetched
    time.sleep(LAG_MS + 1)
    fetch(rm, 2, 3)
    rm.maybe_shrink_isr()
    assert [isr for _, isr, _ in sender.proposals] == [[1, 2]]
    assert isinstance(p.partition_state, PendingShrinkIsr)
    fetch(rm, 2, 3)  # recompute the HW: the lagging follower still counts
    assert p.high_watermark == 0 and out == []
    sender.commit()
    assert p.isr == {1, 2} and p.high_watermark == 3
    assert result(out) == (ErrorCode.NONE, 0)  # the delayed produce completes on the commit


def test_a_new_leader_gives_its_isr_followers_the_lag_time_for_their_first_fetch(rm, sender, time):
    """On becoming leader a follower's LEO is unknown until it fetches; an ISR member counts as
    caught up at the election (Kafka's resetReplicaState), so it is not dropped before
    replica.lag.time.max.ms has passed without it catching up."""
    p = lead(rm)
    time.sleep(LAG_MS // 2)
    rm.maybe_shrink_isr()
    assert sender.proposals == [] and p.isr == {1, 2, 3}
    fetch(rm, 2, 0)  # broker 2 fetches; broker 3 never does
    time.sleep(LAG_MS // 2 + 1)
    rm.maybe_shrink_isr()
    assert [isr for _, isr, _ in sender.proposals] == [[1, 2]]


def test_a_leader_cut_off_from_the_controller_never_acknowledges_acks_all(rm, sender, time):
    """The isolation case: followers stop fetching, the shrink is never answered, so the HW
    cannot move and the acks=all write times out instead of being acknowledged."""
    p = lead(rm)
    fetch(rm, 2, 0)
    fetch(rm, 3, 0)
    out = produce(rm, timeout_ms=LAG_MS * 3)
    time.sleep(LAG_MS + 1)
    rm.maybe_shrink_isr()
    assert len(sender.proposals) == 1  # in flight, never answered
    time.sleep(LAG_MS)
    rm.maybe_shrink_isr()
    assert len(sender.proposals) == 1  # nothing else proposed while one is in flight
    assert produce(rm, acks=1)  # an append recomputes the HW: the unanswered shrink does not count
    assert p.high_watermark == 0
    time.sleep(LAG_MS)
    assert result(out) == (ErrorCode.REQUEST_TIMED_OUT, 0)


def test_only_one_proposal_in_flight(rm, sender, time):
    p = lead(rm, isr=(1, 2))
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    fetch(rm, 3, 3)
    assert len(sender.proposals) == 1
    time.sleep(LAG_MS + 1)
    rm.maybe_shrink_isr()  # broker 2 lags now, but the expansion is in flight
    fetch(rm, 3, 3)
    assert len(sender.proposals) == 1 and isinstance(p.partition_state, PendingExpandIsr)


@pytest.mark.parametrize("error", [ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED])
def test_errors_proving_nothing_was_applied_return_to_the_committed_state(rm, sender, error):
    p = lead(rm, isr=(1, 2))
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    fetch(rm, 3, 3)
    assert sender.answer(AlterPartitionResult(error)) is False
    assert isinstance(p.partition_state, CommittedPartitionState) and p.isr == {1, 2}
    fetch(rm, 3, 3)
    if error == ErrorCode.INELIGIBLE_REPLICA:
        # Fenced or shutting down as the controller sees it: not proposed at every fetch again,
        # only once the live brokers (UpdateMetadata) have changed.
        assert sender.proposals == []
        rm.live_brokers_changed()
        fetch(rm, 3, 3)
    assert [isr for _, isr, _ in sender.proposals] == [[1, 2, 3]]


@pytest.mark.parametrize("error", [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
def test_errors_that_mean_new_state_is_coming_keep_the_proposal_pending(rm, sender, error):
    p = lead(rm, isr=(1, 2))
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    fetch(rm, 3, 3)
    assert sender.answer(AlterPartitionResult(error)) is False
    assert isinstance(p.partition_state, PendingExpandIsr)
    fetch(rm, 3, 3)
    assert sender.proposals == []  # nothing new until a LeaderAndIsr arrives
    rm.become_leader_or_follower(0, 1, [state(isr=(1, 2, 3), partition_epoch=1)])
    assert isinstance(p.partition_state, CommittedPartitionState) and p.isr == {1, 2, 3}


@pytest.mark.parametrize("error", [ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION])
def test_other_errors_ask_for_a_retry(rm, sender, error):
    p = lead(rm, isr=(1, 2))
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    fetch(rm, 3, 3)
    assert sender.answer(AlterPartitionResult(error)) is True
    assert isinstance(p.partition_state, PendingExpandIsr)


def test_answers_for_a_replaced_or_older_state_are_ignored(rm, sender):
    p = lead(rm, isr=(1, 2))
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    fetch(rm, 3, 3)
    _, _, on_result = sender.proposals.pop(0)
    # The controller moved on (a new ISR at partition epoch 2) before our answer arrived.
    rm.become_leader_or_follower(0, 1, [state(isr=(1, 2), partition_epoch=2)])
    assert on_result(AlterPartitionResult(0, 1, 0, [1, 2, 3], 1)) is False
    assert p.isr == {1, 2} and p.partition_epoch == 2
    fetch(rm, 3, 3)  # a new proposal; then the old one's late refusal must not undo it
    assert isinstance(p.partition_state, PendingExpandIsr)
    assert on_result(AlterPartitionResult(ErrorCode.INELIGIBLE_REPLICA)) is False
    assert isinstance(p.partition_state, PendingExpandIsr)
    # An answer for another leader epoch changes nothing either.
    partition, isr, on_result = sender.proposals[-1]
    assert on_result(AlterPartitionResult(0, 1, 7, isr, 3)) is False
    assert p.isr == {1, 2} and isinstance(p.partition_state, PendingExpandIsr)


def test_min_insync_counts_the_committed_isr_not_the_proposal(rm, sender):
    p = lead(rm, isr=(1,))
    fetch(rm, 2, 0)  # LEO 0 = HW 0: proposed
    assert p.maximal_isr == {1, 2} and p.isr == {1}
    assert result(produce(rm)) == (ErrorCode.NOT_ENOUGH_REPLICAS, -1)
    sender.commit()
    out = produce(rm)
    fetch(rm, 2, 3)
    assert result(out) == (ErrorCode.NONE, 0)


def test_a_fenced_or_shutting_down_broker_is_not_proposed(rm, sender, cache):
    p = lead(rm, isr=(1, 2))
    del cache.brokers[3]  # the controller no longer lists it as live
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    fetch(rm, 3, 3)
    assert sender.proposals == [] and p.isr == {1, 2}


def test_a_caught_up_eligible_follower_outside_the_isr_holds_the_high_watermark(rm, sender):
    """Kafka's shouldWaitForReplicaToJoinIsr: the HW does not run past a follower that is
    caught up and about to join, so it joins without a gap."""
    p = lead(rm, isr=(1, 2))
    fetch(rm, 3, 0)  # LEO 0 = HW: proposed; refused as not attempted (back to committed)
    sender.answer(AlterPartitionResult(ErrorCode.OPERATION_NOT_ATTEMPTED))
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    assert p.high_watermark == 0  # broker 3 fetched within the lag time and is eligible
    fetch(rm, 3, 3)
    assert p.high_watermark == 3


def test_offsets_for_an_epoch_older_than_the_known_ones_over_records_still_there_come_from_their_headers(rm):
    """A leader whose leader-epoch checkpoint was lost (its batches kept) knows only the epochs
    it assigned since; for an older epoch the answer comes from the kept batches' headers, each
    holding the epoch of the leader that wrote it: what the lost entries said. Kafka's answer,
    the first known epoch's start, told followers holding another record under a longer batch
    of this leader's that the logs agree (simulator seed 6584: their fetches failed for ever);
    an undefined one made an ISR member truncate to its own high watermark, below the leader's,
    dropping committed records (seed 8258)."""
    lead(rm, epoch=1)
    produce(rm, n=2, acks=1)                                                   # epoch 1: 0-1
    partition = lead(rm, epoch=2, partition_epoch=1)
    produce(rm, n=3, acks=1)                                                   # epoch 2: 2-4
    log = partition.log
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 2)]
    known = {e: partition.last_offset_for_leader_epoch(-1, e, True) for e in (0, 1, 2)}
    assert known == {0: (0, 0, 0), 1: (0, 1, 2), 2: (0, 2, 5)}
    log.leader_epoch_cache.clear()                                             # the checkpoint lost
    partition = lead(rm, epoch=5, partition_epoch=2)
    assert log.leader_epoch_cache.entries() == [(5, 5)]
    assert {e: partition.last_offset_for_leader_epoch(-1, e, True) for e in (0, 1, 2)} == known
    assert partition.last_offset_for_leader_epoch(-1, 3, True) == (0, 2, 5)     # no epoch 3: epoch 2's end
    assert partition.last_offset_for_leader_epoch(-1, 5, True) == (0, 5, 5)
    assert partition.last_offset_for_leader_epoch(-1, -1, True) == (0, -1, -1)  # Kafka's for no epoch


def test_offsets_for_an_epoch_older_than_the_known_ones_read_the_headers_once_and_a_read_error_is_a_storage_error(
        rm, monkeypatch):
    """The headers below the first known epoch are read once per range (each follower asks at
    each leadership change), and a failed read answers KAFKA_STORAGE_ERROR (the follower asks
    again), never undefined: a follower would truncate to its own high watermark (seed 8258)."""
    import broker.partition as partition_module
    lead(rm, epoch=1)
    produce(rm, n=2, acks=1)
    log = rm.get_partition("t", 0).log
    log.leader_epoch_cache.clear()
    partition = lead(rm, epoch=5, partition_epoch=1)
    real, calls = partition_module._epochs_from_headers, []

    def counted(log_, until):
        calls.append(until)
        return real(log_, until)
    monkeypatch.setattr(partition_module, "_epochs_from_headers", counted)
    for _ in range(3):
        assert partition.last_offset_for_leader_epoch(-1, 1, True) == (0, 1, 2)
    assert calls == [2]

    def failing(log_, until):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(partition_module, "_epochs_from_headers", failing)
    partition._header_epochs_cache = None
    assert partition.last_offset_for_leader_epoch(-1, 1, True) == (ErrorCode.KAFKA_STORAGE_ERROR, -1, -1)


def test_offsets_for_an_epoch_older_than_the_known_ones_below_the_log_start_are_the_first_start(rm):
    """Records deleted below the first known epoch (retention, DeleteRecords): Kafka's answer,
    the first known epoch's start offset, for a follower to fetch from the log start."""
    lead(rm, epoch=2)
    produce(rm, n=3, acks=1)
    partition = lead(rm, epoch=5, partition_epoch=1)
    produce(rm, n=3, acks=1)
    log = partition.log
    log.high_watermark = log.log_end_offset
    assert log.maybe_increment_log_start_offset(3)
    log.leader_epoch_cache.truncate_from_start(3)
    assert log.leader_epoch_cache.entries() == [(5, 3)]
    assert partition.last_offset_for_leader_epoch(-1, 2, True) == (0, 2, 3)


def test_offsets_for_an_epoch_older_than_the_known_ones_over_a_compacted_gap_are_the_first_start(tmp_path, time,
                                                                                                   sender, cache):
    """A compacted log whose first batch (of the first known epoch) is above its log start: no
    record of an older epoch is there, and the answer stays Kafka's (a KIP-320 consumer's
    position validated below that batch is not taken for a truncation)."""
    with replica_manager(tmp_path, time, LogConfig(min_insync_replicas=2, cleanup_policy="compact"), lag_ms=LAG_MS,
                         metadata_cache=cache, alter_partition=sender) as manager:
        error, _ = manager.become_leader_or_follower(0, 1, [state(leader=2, epoch=6)])
        assert error == 0
        log = manager.get_partition("t", 0).log
        log.append_as_follower(build_batch([Record(key=b"k", value=b"v", timestamp=1)] * 2, base_offset=5,
                                           partition_leader_epoch=6))
        assert log.log_start_offset == 0 and log.leader_epoch_cache.entries() == [(6, 5)]
        partition = lead(manager, epoch=7, partition_epoch=1)
        assert partition.last_offset_for_leader_epoch(-1, 3, True) == (0, 3, 5)


def test_the_high_watermark_check_over_followers_in_the_isr_reads_no_clock(rm, time, monkeypatch):
    """A follower behind that is in the maximal ISR holds the HW whatever its lag: the clock
    (read for a follower outside the ISR, whether it is caught up) is not read for it (every
    acks=all produce at RF=3 checks the HW so, issue 29)."""
    p = lead(rm)
    produce(rm, acks=1)
    fetch(rm, 2, 3)
    reads = []
    real = time.milliseconds
    monkeypatch.setattr(time, "milliseconds", lambda: reads.append(1) or real())
    produce(rm, acks=1)  # LEO 6; broker 2 at 3, broker 3 unknown: both in the ISR
    assert p.maybe_increment_high_watermark() is False and p.high_watermark == 0
    assert reads == []
    fetch(rm, 3, 6)
    assert p.high_watermark == 3  # broker 2's LEO
