"""ReplicaManager, Partition and DelayedProduce on real log files and a MockTime: the acks=-1
completion cases, the high watermark and the ISR rules, without sockets or sleeps."""

from __future__ import annotations

import pytest

from broker.metadata_cache import MetadataCache
from broker.partition import AlterPartitionResult, LeaderAndIsrState
from broker.replica_manager import FetchParams, ReplicaManager
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.fast_codecs import FetchPartition
from protocol.records import Record, build_batch
from storage import LogConfig, LogManager
from tests.broker.replica_manager_support import replica_manager

LAG_MS = 10_000


@pytest.fixture
def time():
    return MockTime()


@pytest.fixture
def rm(tmp_path, time):
    with replica_manager(tmp_path, time, LogConfig(min_insync_replicas=2), LAG_MS) as manager:
        yield manager


def lead(rm, epoch=0, isr=(1, 2, 3), leader=1):
    error, results = rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 0, 1, leader, epoch, list(isr), 0,
                                                                           [1, 2, 3])])
    assert error == 0 and results[("t", 0)] == 0
    return rm.get_partition("t", 0)


def produce(rm, n=3, acks=-1, timeout_ms=1000):
    out = []
    batch = bytearray(build_batch([Record(value=b"v", timestamp=1)] * n))
    rm.append_records(timeout_ms, acks, False, [("t", [(0, batch)])], out.append)
    return out


def follower_fetch(rm, replica_id, offset):
    out = []
    rm.fetch_messages(FetchParams(replica_id, 0, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, offset, 0, 1 << 20)])],
                      out.append)
    return out[0][0][1][0]


def result(out):
    [(topic, [row])] = out[0]
    return row[1], row[2]  # error, base offset


def test_acks_all_completes_when_the_isr_reaches_the_offset(rm):
    p = lead(rm)
    out = produce(rm, 3)
    assert out == [] and rm.produce_purgatory.delayed() == 1
    follower_fetch(rm, 2, 3)
    assert out == [] and p.high_watermark == 0  # broker 3 has not fetched yet
    follower_fetch(rm, 3, 3)
    assert p.high_watermark == 3
    assert result(out) == (ErrorCode.NONE, 0)
    assert rm.produce_purgatory.delayed() == 0


def test_acks_all_times_out_with_request_timed_out(rm, time):
    lead(rm)
    out = produce(rm, timeout_ms=1500)
    time.sleep(1499)
    assert out == []
    time.sleep(1)
    assert result(out) == (ErrorCode.REQUEST_TIMED_OUT, 0)


def test_leadership_lost_while_waiting_answers_not_leader(rm):
    lead(rm)
    out = produce(rm)
    rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 0, 1, 2, 1, [2, 3], 1, [1, 2, 3])])
    assert result(out) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 0)


def test_partition_removed_while_waiting_answers_unknown(rm):
    lead(rm)
    out = produce(rm)
    rm.stop_replicas([("t", 0)], delete=True)
    assert result(out) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0)


def test_isr_below_min_insync_before_append_is_refused(rm):
    lead(rm, isr=(1,))
    out = produce(rm)
    assert result(out) == (ErrorCode.NOT_ENOUGH_REPLICAS, -1)
    assert produce(rm, acks=1) and rm.get_partition("t", 0).log_end_offset == 3  # acks=1 is not refused


def test_isr_shrinking_while_waiting_gives_not_enough_replicas_after_append(rm, time):
    p = lead(rm)
    follower_fetch(rm, 2, 0)
    follower_fetch(rm, 3, 0)
    out = produce(rm, timeout_ms=60_000)
    time.sleep(LAG_MS + 1)
    rm.maybe_shrink_isr()  # both followers lag: ISR -> [1], HW -> LEO, but 1 < min.insync.replicas
    assert p.isr == {1}
    assert result(out) == (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, 0)


def test_caught_up_followers_stay_lagging_ones_leave_and_come_back(rm, time):
    p = lead(rm)
    produce(rm, acks=1)
    follower_fetch(rm, 3, 1)  # behind from the start
    time.sleep(LAG_MS // 2)
    follower_fetch(rm, 2, 3)  # caught up half the lag time in
    produce(rm, acks=1)  # leader LEO 6: both followers are behind now
    time.sleep(LAG_MS // 2 + 1)
    rm.maybe_shrink_isr()  # broker 2 was caught up 5 s ago, broker 3 not for over 10 s
    assert p.isr == {1, 2}
    follower_fetch(rm, 2, 6)
    follower_fetch(rm, 3, 3)
    assert p.isr == {1, 2}  # broker 3 is below the HW (6) still
    follower_fetch(rm, 3, 6)
    assert p.isr == {1, 2, 3}
    assert p.high_watermark == 6


def test_high_watermark_never_moves_backwards_and_consumers_stop_at_it(rm):
    p = lead(rm)
    produce(rm, acks=1)
    follower_fetch(rm, 2, 3)
    follower_fetch(rm, 3, 3)
    assert p.high_watermark == 3
    produce(rm, acks=1)
    follower_fetch(rm, 2, 1)  # a fetch from below the HW (a follower that truncated) must not pull it back
    assert p.remote_replicas[2].log_end_offset == 1
    assert p.high_watermark == 3
    consumer = []
    rm.fetch_messages(FetchParams(-1, 0, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 0, -1, 1 << 20)])],
                      consumer.append)
    pd = consumer[0][0][1][0]
    assert pd.high_watermark == 3 and len(pd.records) == len(build_batch([Record(value=b"v", timestamp=1)] * 3))


def test_consumer_long_poll_completes_when_the_high_watermark_moves(rm, time):
    p = lead(rm)
    out = []
    rm.fetch_messages(FetchParams(-1, 5000, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 0, -1, 1 << 20)])],
                      out.append)
    assert out == []
    produce(rm, acks=1)
    assert out == []  # new data, but not below the HW yet
    follower_fetch(rm, 2, 3)
    follower_fetch(rm, 3, 3)
    assert p.high_watermark == 3 and len(out) == 1
    assert out[0][0][1][0].high_watermark == 3


def test_stale_controller_and_leader_epochs_change_nothing(rm):
    lead(rm, epoch=4)
    rm.controller_epoch = 7
    error, results = rm.become_leader_or_follower(0, 6, [LeaderAndIsrState("t", 0, 6, 2, 9, [2], 0, [1, 2, 3])])
    assert error == ErrorCode.STALE_CONTROLLER_EPOCH and results[("t", 0)] == ErrorCode.STALE_CONTROLLER_EPOCH
    error, results = rm.become_leader_or_follower(0, 7, [LeaderAndIsrState("t", 0, 7, 2, 4, [2], 0, [1, 2, 3])])
    assert error == 0 and results[("t", 0)] == ErrorCode.STALE_CONTROLLER_EPOCH
    p = rm.get_partition("t", 0)
    assert (p.leader_id, p.leader_epoch) == (1, 4)
    error, results = rm.become_leader_or_follower(0, 7, [LeaderAndIsrState("x", 0, 7, 2, 1, [2], 0, [2, 3])])
    assert results[("x", 0)] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and rm.get_partition("x", 0) is None


def test_a_leader_and_isr_creating_many_partitions_fsyncs_the_log_dir_once_before_acting(rm, monkeypatch):
    """New partition dirs are made durable by one fsync of their log dir per LeaderAndIsr (not
    one per partition: 1,000 new partitions cost seconds of fsyncs otherwise), before any
    partition becomes leader or follower."""
    import storage.log_manager
    events = []
    real_fsync_dir = storage.log_manager.fsync_dir
    monkeypatch.setattr(storage.log_manager, "fsync_dir", lambda path: (events.append(("fsync", path)),
                                                                         real_fsync_dir(path)))
    real_make_leaders = rm._make_leaders
    monkeypatch.setattr(rm, "_make_leaders", lambda items, *rest: (events.append(("lead", len(items))),
                                                                   real_make_leaders(items, *rest))[1])
    states = [LeaderAndIsrState("many", p, 1, 1, 0, [1, 2, 3], 0, [1, 2, 3]) for p in range(50)]
    error, results = rm.become_leader_or_follower(0, 1, states)
    assert error == 0 and set(results.values()) == {0} and len(results) == 50
    log_dir = rm.log_manager.log_dirs[0]
    assert events == [("fsync", log_dir), ("lead", 50)]
    assert all((log_dir / f"many-{p}").is_dir() for p in range(50))
    # A log created on its own (auto-creation, tools) is synced at once, as before.
    events.clear()
    rm.log_manager.get_or_create_log("single", 0)
    assert events == [("fsync", log_dir)]


def test_a_partition_whose_log_cannot_be_created_is_answered_kafka_storage_error_alone(rm):
    """Issue 12 §5: an OSError creating one partition's log (here a file where its directory
    must go) answers that partition KAFKA_STORAGE_ERROR, leaves nothing of it, and the rest of
    the LeaderAndIsr is applied."""
    log_dir = rm.log_manager.log_dirs[0]
    (log_dir / "t-1").write_bytes(b"not a directory")
    states = [LeaderAndIsrState("t", p, 1, 1, 0, [1], 0, [1]) for p in range(3)]
    error, results = rm.become_leader_or_follower(0, 1, states)
    assert error == ErrorCode.NONE
    assert results == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.KAFKA_STORAGE_ERROR, ("t", 2): ErrorCode.NONE}
    assert rm.get_partition("t", 1) is None and rm.log_manager.get_log("t", 1) is None
    assert rm.get_partition("t", 0).is_leader and rm.get_partition("t", 2).is_leader
    assert sorted(p.name for p in log_dir.iterdir() if p.name.startswith("t-")) == ["t-0", "t-1", "t-2"]
    assert (log_dir / "t-1").is_file()  # what was there before is not ours to remove


def test_a_replica_a_storage_error_kept_from_being_created_is_created_once_the_disk_allows(rm):
    """The simulator's seed 300: a reassignment added broker 2 back to t0-0 while its disk was
    full; its LeaderAndIsr answered KAFKA_STORAGE_ERROR and nothing created the replica after the
    disk recovered, so the move never completed. retry_failed_replicas (the broker's ISR-expiration
    pass) creates it once it can, from the state the metadata still shows current."""
    from broker.metadata_cache import PartitionInfo
    log_dir = rm.log_manager.log_dirs[0]
    (log_dir / "t-1").write_bytes(b"no space")  # (creating its directory fails, as on a full disk)
    st = LeaderAndIsrState("t", 1, 1, 2, 3, [2, 3], 5, [2, 3, 1], adding=(1,))
    rm.metadata_cache.update_partition("t", None, PartitionInfo(1, 2, 3, [2, 3, 1], [2, 3], partition_epoch=5))
    error, results = rm.become_leader_or_follower(0, 1, [st])
    assert results == {("t", 1): ErrorCode.KAFKA_STORAGE_ERROR}
    rm.retry_failed_replicas()  # the disk still full: still not there
    assert rm.get_partition("t", 1) is None
    (log_dir / "t-1").unlink()  # the disk recovered
    rm.retry_failed_replicas()
    p = rm.get_partition("t", 1)
    assert p is not None and p.log is not None and p.leader_id == 2 and p.leader_epoch == 3
    assert rm.failed_replicas == {}


def test_a_failed_replica_whose_state_the_metadata_moved_past_is_not_retried(rm):
    from broker.metadata_cache import PartitionInfo
    log_dir = rm.log_manager.log_dirs[0]
    (log_dir / "t-1").write_bytes(b"no space")
    rm.metadata_cache.update_partition("t", None, PartitionInfo(1, 2, 3, [2, 3, 1], [2, 3]))
    rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 1, 1, 2, 3, [2, 3], 5, [2, 3, 1])])
    (log_dir / "t-1").unlink()
    rm.metadata_cache.update_partition("t", None, PartitionInfo(1, 3, 4, [2, 3], [2, 3]))  # moved off broker 1
    rm.retry_failed_replicas()
    assert rm.get_partition("t", 1) is None and rm.log_manager.get_log("t", 1) is None
    assert rm.failed_replicas == {}


def test_a_failed_replica_is_retried_only_at_the_partition_epoch_the_metadata_shows(rm):
    """The leader epoch alone is not the state: an ISR change since (partition epoch 6, the
    controller's LeaderAndIsr of it to come) re-applied as the failed state would set the old
    ISR and partition epoch 5. A newer partition epoch drops the failed state; metadata behind
    it (its UpdateMetadata not yet here) keeps it, and it is retried once they agree."""
    from broker.metadata_cache import PartitionInfo
    log_dir = rm.log_manager.log_dirs[0]
    (log_dir / "t-1").write_bytes(b"no space")
    rm.metadata_cache.update_partition("t", None, PartitionInfo(1, 2, 3, [2, 3, 1], [2, 3], partition_epoch=5))
    st = LeaderAndIsrState("t", 1, 1, 2, 3, [2, 3], 5, [2, 3, 1])
    assert rm.become_leader_or_follower(0, 1, [st])[1] == {("t", 1): ErrorCode.KAFKA_STORAGE_ERROR}
    (log_dir / "t-1").unlink()
    rm.metadata_cache.update_partition("t", None, PartitionInfo(1, 2, 3, [2, 3, 1], [2], partition_epoch=6))
    rm.retry_failed_replicas()
    assert rm.get_partition("t", 1) is None and rm.failed_replicas == {}

    (log_dir / "t-1").write_bytes(b"no space")
    st7 = LeaderAndIsrState("t", 1, 1, 2, 3, [2, 3], 7, [2, 3, 1])
    assert rm.become_leader_or_follower(0, 1, [st7])[1] == {("t", 1): ErrorCode.KAFKA_STORAGE_ERROR}
    (log_dir / "t-1").unlink()
    rm.retry_failed_replicas()  # the metadata (partition epoch 6) is behind: kept, not applied
    assert rm.get_partition("t", 1) is None and rm.failed_replicas == {("t", 1): st7}
    rm.metadata_cache.update_partition("t", None, PartitionInfo(1, 2, 3, [2, 3, 1], [2, 3], partition_epoch=7))
    rm.retry_failed_replicas()
    p = rm.get_partition("t", 1)
    assert p is not None and (p.leader_id, p.leader_epoch, p.partition_epoch) == (2, 3, 7)
    assert rm.failed_replicas == {}


def test_an_older_state_failing_after_a_newer_one_leaves_the_newer_to_retry(rm):
    """Of two failed states of a partition the newest (leader epoch, partition epoch) is kept,
    whichever failed last."""
    log_dir = rm.log_manager.log_dirs[0]
    (log_dir / "t-1").write_bytes(b"no space")
    newer = LeaderAndIsrState("t", 1, 1, 2, 3, [2, 3], 6, [2, 3, 1])
    older = LeaderAndIsrState("t", 1, 1, 2, 3, [2, 3, 1], 5, [2, 3, 1])
    for st in (newer, older):
        assert rm.become_leader_or_follower(0, 1, [st])[1] == {("t", 1): ErrorCode.KAFKA_STORAGE_ERROR}
    assert rm.failed_replicas == {("t", 1): newer}
    newest = LeaderAndIsrState("t", 1, 1, 3, 4, [3], 0, [2, 3, 1])  # a new leader epoch: newer whatever its ISR's
    assert rm.become_leader_or_follower(0, 1, [newest])[1] == {("t", 1): ErrorCode.KAFKA_STORAGE_ERROR}
    assert rm.failed_replicas == {("t", 1): newest}


def test_the_isr_expiration_pass_retries_failed_replicas_though_a_shrink_raises(rm, monkeypatch, caplog):
    """broker/server.py's ISR-expiration pass: a partition's maybe_shrink_isr raising is
    logged, and the failed replicas are still retried in the same pass."""
    from types import SimpleNamespace

    from broker.metadata_cache import PartitionInfo
    from broker.server import KafkaServer
    led = lead(rm)

    def broken(lag_ms):
        raise RuntimeError("a shrink that fails")
    monkeypatch.setattr(led, "maybe_shrink_isr", broken)
    log_dir = rm.log_manager.log_dirs[0]
    (log_dir / "t-1").write_bytes(b"no space")
    rm.metadata_cache.update_partition("t", None, PartitionInfo(1, 2, 3, [2, 3, 1], [2, 3], partition_epoch=5))
    rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 1, 1, 2, 3, [2, 3], 5, [2, 3, 1])])
    (log_dir / "t-1").unlink()
    KafkaServer._isr_expiration(SimpleNamespace(replica_manager=rm))  # type: ignore[arg-type]
    p = rm.get_partition("t", 1)
    assert p is not None and p.log is not None and rm.failed_replicas == {}
    assert any("a shrink that fails" in r.getMessage() or (r.exc_info and "a shrink that fails" in str(r.exc_info[1]))
               for r in caplog.records if r.name == "kbroker.server")


# -- DeleteRecords (DelayedDeleteRecords) ------------------------------------------------------

def follower_fetch_at(rm, replica_id, offset, log_start_offset):
    out = []
    rm.fetch_messages(FetchParams(replica_id, 0, 1, 1 << 20, 0),
                      [("t", [FetchPartition(0, -1, offset, log_start_offset, 1 << 20)])], out.append)
    return out


def delete_records(rm, offset, timeout_ms=1000):
    out = []
    rm.delete_records(timeout_ms, [("t", [(0, offset)])], out.append)
    return out


def alive(rm, *ids):
    from broker.metadata_cache import BrokerInfo
    rm.metadata_cache.brokers = {i: BrokerInfo(i, {}) for i in ids}


def test_delete_records_answers_once_every_live_replica_moved_its_log_start(rm):
    p = lead(rm)
    alive(rm, 1, 2, 3)
    produce(rm, 10)
    follower_fetch_at(rm, 2, 10, 0)
    follower_fetch_at(rm, 3, 10, 0)
    assert p.high_watermark == 10
    out = delete_records(rm, 4)
    assert p.log.log_start_offset == 4  # the leader's at once
    assert out == [] and rm.delete_records_purgatory.delayed() == 1
    follower_fetch_at(rm, 2, 10, 4)
    assert out == []  # broker 3 still holds offsets below 4
    follower_fetch_at(rm, 3, 10, 4)
    assert out == [[("t", [{"partition_index": 0, "low_watermark": 4, "error_code": ErrorCode.NONE}])]]


def test_delete_records_does_not_wait_for_a_replica_on_a_dead_broker(rm):
    lead(rm)
    alive(rm, 1, 2)
    produce(rm, 10)
    follower_fetch_at(rm, 2, 10, 0)
    follower_fetch_at(rm, 3, 10, 0)
    out = delete_records(rm, 6)
    assert out == []
    follower_fetch_at(rm, 2, 10, 6)
    assert out[0][0][1][0]["low_watermark"] == 6


def test_delete_records_times_out_and_refuses_beyond_the_high_watermark(rm, time):
    p = lead(rm)
    alive(rm, 1, 2, 3)
    produce(rm, 10)
    follower_fetch_at(rm, 2, 10, 0)
    follower_fetch_at(rm, 3, 10, 0)
    assert delete_records(rm, 11) == [[("t", [{"partition_index": 0, "low_watermark": -1,
                                                "error_code": ErrorCode.OFFSET_OUT_OF_RANGE}])]]
    assert p.log.log_start_offset == 0
    out = delete_records(rm, -1, timeout_ms=500)  # -1: the high watermark
    assert p.log.log_start_offset == 10 and out == []
    time.sleep(499)
    assert out == []
    time.sleep(1)
    assert out == [[("t", [{"partition_index": 0, "low_watermark": -1, "error_code": ErrorCode.REQUEST_TIMED_OUT}])]]


class HeldAlterPartition:
    """An AlterPartitionSender whose proposals wait for the test to answer them."""

    def __init__(self) -> None:
        self.proposals: list[tuple[list[int], object]] = []

    def submit(self, partition, new_isr, on_result) -> None:
        self.proposals.append((sorted(new_isr), on_result))


def test_a_parked_follower_fetch_counts_when_received_not_again_when_it_completes(tmp_path, time):
    """Simulator seed 4422 (at 55839f7): a follower's long-poll fetch parked on its leader; the
    leader paused; the follower lost power, restarted with fewer records and was not yet back;
    the leader woke, the parked fetch expired, and its completion recorded the dead
    incarnation's fetch offset as a fetch made now: the follower was proposed for the ISR with
    a log end it no longer had. As in Kafka (readFromPurgatory), a follower's position is
    recorded when its fetch arrives only."""
    config = LogConfig(min_insync_replicas=2)
    logs = LogManager([tmp_path], config, time=time)
    logs.startup()
    held = HeldAlterPartition()
    rm = ReplicaManager(broker_id=1, time=time, log_manager=logs, metadata_cache=MetadataCache(1),
                        log_config_for=lambda topic: config, replica_lag_time_max_ms=LAG_MS, alter_partition=held)
    try:
        p = lead(rm, isr=(1, 2))
        produce(rm, acks=1)
        follower_fetch(rm, 2, 3)
        assert p.high_watermark == 3
        received_at = time.milliseconds()
        out = []
        rm.fetch_messages(FetchParams(3, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 3, 0, 1 << 20)])],
                          out.append)
        assert out == [] and [isr for isr, _ in held.proposals] == [[1, 2, 3]]  # caught up when received
        _isr, answer = held.proposals[0]
        answer(AlterPartitionResult(ErrorCode.OPERATION_NOT_ATTEMPTED))  # the controller did not take it
        assert p.isr == {1, 2} and not p.partition_state.is_inflight
        time.sleep(500)  # the parked fetch expires and is answered
        assert len(out) == 1 and out[0][0][1][0].error_code == 0
        assert len(held.proposals) == 1  # its completion proposes nothing
        replica = p.remote_replicas[3]
        assert replica.last_fetch_time_ms == received_at and replica.last_caught_up_time_ms == received_at
    finally:
        logs.shutdown()


def test_a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_offset_not_available(rm):
    """KIP-207 (Kafka's fetchOffsetForTimestamp): elected at LEO 3 with its HW still 0 (the
    followers have not fetched in the new epoch), a client's latest offset, or a timestamp found
    at or past the HW, is OFFSET_NOT_AVAILABLE (retriable), not the stale HW an acknowledged
    record may lie beyond; the earliest offset and a replica's LEO are answered; once the
    followers fetched, the HW is."""
    from protocol.errors import OffsetNotAvailableError

    lead(rm, epoch=0)
    produce(rm, acks=1)
    p = lead(rm, epoch=1)
    assert (p.high_watermark, p.leader_epoch_start_offset) == (0, 3)
    for isolation in (0, 1):
        with pytest.raises(OffsetNotAvailableError):
            rm.fetch_offset_for_timestamp("t", 0, -1, isolation, -1, True)
        with pytest.raises(OffsetNotAvailableError):
            rm.fetch_offset_for_timestamp("t", 0, 1, isolation, -1, True)  # found at offset 0, not below the HW
    assert rm.fetch_offset_for_timestamp("t", 0, -2, 0, -1, True)[1] == 0
    assert rm.fetch_offset_for_timestamp("t", 0, -1, None, -1, False)[1] == 3  # a replica: the LEO
    follower_fetch(rm, 2, 3)
    follower_fetch(rm, 3, 3)
    assert p.high_watermark == 3
    assert rm.fetch_offset_for_timestamp("t", 0, -1, 0, -1, True)[1] == 3
    assert rm.fetch_offset_for_timestamp("t", 0, 1, 0, -1, True)[1] == 0


# -- a moved high watermark tries only the produces it reached (ProducePurgatory) ------------

def count_tries(monkeypatch):
    """{required offset of the op's first partition: try_complete calls}."""
    from broker.delayed_produce import DelayedProduce
    tries: dict[int, int] = {}
    real = DelayedProduce.try_complete

    def counted(self):
        key = self.statuses[0].required_offset
        tries[key] = tries.get(key, 0) + 1
        return real(self)
    monkeypatch.setattr(DelayedProduce, "try_complete", counted)
    return tries


def test_a_hw_move_tries_only_the_produces_it_reached(rm, monkeypatch):
    p = lead(rm)
    outs = [produce(rm, 3) for _ in range(3)]  # offsets 0-2, 3-5, 6-8: waiting for HW 3, 6, 9
    assert rm.produce_purgatory.delayed() == 3
    tries = count_tries(monkeypatch)
    assert follower_fetch(rm, 2, 9).error_code == 0  # broker 3 is at 0: the HW stays
    assert follower_fetch(rm, 3, 3).error_code == 0  # HW 3
    assert p.high_watermark == 3
    assert result(outs[0]) == (ErrorCode.NONE, 0) and outs[1] == [] and outs[2] == []
    # only the produce the HW reached was tried; those waiting for 6 and 9 were not looked at
    assert tries == {3: 1}
    assert follower_fetch(rm, 3, 9).error_code == 0  # HW 9: the other two, in offset order
    assert result(outs[1]) == (ErrorCode.NONE, 3) and result(outs[2]) == (ErrorCode.NONE, 6)
    assert tries == {3: 1, 6: 1, 9: 1}
    assert rm.produce_purgatory.delayed() == 0 and rm.produce_purgatory._heaps == {}


def test_a_produce_of_two_partitions_completes_when_the_hw_reaches_both(rm):
    lead(rm)
    error, results = rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 1, 1, 1, 0, [1, 2, 3], 0, [1, 2, 3])])
    assert results[("t", 1)] == 0
    batch = bytearray(build_batch([Record(value=b"v", timestamp=1)] * 2))
    out = []
    rm.append_records(1000, -1, False, [("t", [(0, batch), (1, bytearray(batch))])], out.append)
    for replica in (2, 3):
        assert follower_fetch(rm, replica, 2).error_code == 0  # partition 0 reaches 2
    assert out == []
    for replica in (2, 3):
        out2 = []
        rm.fetch_messages(FetchParams(replica, 0, 1, 1 << 20, 0), [("t", [FetchPartition(1, -1, 2, 0, 1 << 20)])],
                          out2.append)
        assert out2[0][0][1][0].error_code == 0
    [(topic, rows)] = out[0]
    assert [(r[0], r[1]) for r in rows] == [(0, ErrorCode.NONE), (1, ErrorCode.NONE)]
    assert rm.produce_purgatory._heaps == {}


def test_produces_completed_otherwise_leave_no_heap_behind(rm, time):
    """A produce answered by its timeout or by a leadership change is not left in the index."""
    lead(rm)
    outs = [produce(rm, 1, timeout_ms=1000) for _ in range(3)]
    time.sleep(1000)
    assert [result(o)[0] for o in outs] == [ErrorCode.REQUEST_TIMED_OUT] * 3
    assert rm.produce_purgatory._heaps == {}
    out = produce(rm, 1)
    lead(rm, epoch=1, leader=2, isr=(1, 2, 3))  # no longer the leader: NOT_LEADER_OR_FOLLOWER
    assert result(out)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert rm.produce_purgatory._heaps == {}


def test_an_op_waiting_twice_on_one_partition_is_tried_again_only_at_its_later_offset(rm, monkeypatch):
    """WriteTxnMarkers may wait on two markers of one partition (two producers' transactions):
    one op, two required offsets on one key. Once the HW passed the first, HW moves below the
    second do not try the op again (its entry for the first offset is not put back)."""
    from broker.delayed_produce import DelayedProduce, ProducePartitionStatus
    p = lead(rm)
    produce(rm, 9, acks=1)
    done = []
    statuses = [ProducePartitionStatus(("t", 0), 3, [0, ErrorCode.NONE, 0, -1, 0]),
                ProducePartitionStatus(("t", 0), 9, [0, ErrorCode.NONE, 3, -1, 0])]
    op = DelayedProduce(1000, statuses, rm, lambda: done.append(True))
    assert not rm.produce_purgatory.try_complete_else_watch(op, [("t", 0)])
    tries = count_tries(monkeypatch)
    for offset in (3, 5, 7):
        follower_fetch(rm, 2, offset)
        follower_fetch(rm, 3, offset)
        assert p.high_watermark == offset
    assert tries == {3: 1} and done == []  # tried when the HW passed 3, not at 5 and 7
    follower_fetch(rm, 2, 9)
    follower_fetch(rm, 3, 9)
    assert tries == {3: 2} and done == [True]
    assert [s.result[1] for s in statuses] == [ErrorCode.NONE, ErrorCode.NONE]
    assert rm.produce_purgatory._heaps == {}


def test_a_fetch_answer_carries_the_logs_start_high_watermark_and_stable_offset(rm):
    """Each partition of a Fetch answer carries the log start (a consumer's DeleteRecords view,
    a follower's KIP-107 log start), the HW and the LSO read with it; a partition the broker does
    not host answers its error with -1 for them."""
    p = lead(rm)
    alive(rm, 1, 2, 3)
    produce(rm, 10)
    follower_fetch_at(rm, 2, 10, 0)
    follower_fetch_at(rm, 3, 10, 0)
    delete_records(rm, 4)
    assert p.log.log_start_offset == 4 and p.high_watermark == 10
    out = []
    rm.fetch_messages(FetchParams(-1, 0, 1, 1 << 20, 0),
                      [("t", [FetchPartition(0, -1, 5, 0, 1 << 20), FetchPartition(7, -1, 0, 0, 1 << 20)])],
                      out.append)
    [[(topic, [data, missing])]] = out
    assert (topic, data.error_code, data.log_start_offset, data.high_watermark, data.last_stable_offset) == \
        ("t", ErrorCode.NONE, 4, 10, 10)
    assert data.records
    assert (missing.partition, missing.error_code, missing.log_start_offset, missing.high_watermark) == \
        (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)


@pytest.fixture
def tries(monkeypatch):
    """How often DelayedFetch.try_complete runs."""
    from broker.delayed_fetch import DelayedFetch
    counted = {"n": 0}
    real = DelayedFetch.try_complete

    def counting(self):
        counted["n"] += 1
        return real(self)
    monkeypatch.setattr(DelayedFetch, "try_complete", counting)
    return counted


def test_a_follower_fetch_that_read_nothing_parks_untried_and_completes_on_the_next_append(rm, time, tries):
    """Issue 29: at the leader of an acks=all produce every follower's next fetch reads nothing
    (its offset is the LEO) and parks; the try before parking could only find what the read had
    just found. It is parked untried, and answered by the next append or its max wait."""
    p = lead(rm)
    produce(rm, 3, acks=1)
    out = []
    rm.fetch_messages(FetchParams(2, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 3, 0, 1 << 20)])],
                      out.append)
    assert out == [] and tries["n"] == 0 and rm.fetch_purgatory.delayed() == 1
    assert p.remote_replicas[2].log_end_offset == 3  # its position counted when it arrived
    produce(rm, 2, acks=1)
    assert len(out) == 1 and tries["n"] == 0  # its wake level reached: answered untried (DelayedFetch.reached)
    [(_topic, [pd])] = out[0]
    assert pd.error_code == 0 and len(pd.records) > 0
    expired = []
    rm.fetch_messages(FetchParams(2, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 5, 0, 1 << 20)])],
                      expired.append)
    time.sleep(499)
    assert expired == []
    time.sleep(1)
    [(_topic, [pd])] = expired[0]
    assert pd.error_code == 0 and len(pd.records) == 0 and tries["n"] == 0


def test_a_consumer_fetch_that_read_nothing_is_still_tried_before_it_parks(rm, tries):
    """A consumer reads to the high watermark: the follower's shortcut is not taken for it."""
    lead(rm)
    produce(rm, 3, acks=1)
    follower_fetch(rm, 2, 3)
    follower_fetch(rm, 3, 3)
    out = []
    rm.fetch_messages(FetchParams(-1, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 3, 0, 1 << 20)])],
                      out.append)
    assert out == [] and tries["n"] == 1 and rm.fetch_purgatory.delayed() == 1


def test_a_follower_fetch_with_something_to_read_is_answered_at_once(rm, tries):
    lead(rm)
    produce(rm, 3, acks=1)
    out = []
    rm.fetch_messages(FetchParams(2, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 0, 0, 1 << 20)])],
                      out.append)
    assert len(out) == 1 and tries["n"] == 0 and rm.fetch_purgatory.delayed() == 0


def test_a_parked_fetch_of_a_follower_the_leader_throttles_is_not_answered_by_an_append(rm, time, tries):
    """KIP-73: a follower out of the ISR fetching a throttled partition while the leader's quota
    is exceeded gets no records, and new data does not answer its long-poll early (Kafka's
    DelayedFetch): the append that reaches its wake level tries it, and it waits on."""
    from broker.replication_quota import ReplicationQuotas

    lead(rm, isr=(1, 2))
    quotas = rm.replication_quotas = ReplicationQuotas(1, time)
    quotas.leader.update_quota(1000)
    quotas.leader.update_topic("t", "0:1", broker_id=1)
    quotas.leader.record(100_000)
    p = rm.get_partition("t", 0)
    produce(rm, 3, acks=1)
    follower_fetch(rm, 2, 3)  # the high watermark at 3
    out = []
    # from offset 0, below the high watermark: it stays out of the ISR (caught up, it would join
    # and be let through)
    rm.fetch_messages(FetchParams(3, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 0, 0, 1 << 20)])],
                      out.append)
    assert out == [] and rm.fetch_purgatory.delayed() == 1 and 3 not in p.isr
    produce(rm, 2, acks=1)
    assert out == [] and tries["n"] == 1  # tried, still throttled: waits
    time.sleep(500)
    [(_topic, [pd])] = out[0]
    assert pd.error_code == 0 and len(pd.records) == 0  # its max wait: answered, still held back


def test_parked_produces_and_fetches_share_one_timer_per_delay_and_expire_at_their_deadlines(rm, time):
    """Issue 29: the Produce and Fetch purgatories arm one timer per delay, not one per parked
    operation (a call_later and a cancel each, three per acks=all produce at its leader)."""
    lead(rm)
    outs = []
    for i in range(5):
        outs.append(produce(rm, 1, timeout_ms=1000))
        time.sleep(10)
    fetched = []
    for _ in range(2):  # consumers: nothing below the high watermark yet
        rm.fetch_messages(FetchParams(-1, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 0, -1, 1 << 20)])],
                          fetched.append)
    assert rm.produce_purgatory.delayed() == 5 and rm.fetch_purgatory.delayed() == 2
    assert time.pending_timers() == 2  # one for the produces' 1000 ms, one for the fetches' 500 ms
    time.sleep(499)
    assert fetched == []
    time.sleep(1)  # the fetches' max wait, 500 ms after they parked (t=550)
    assert len(fetched) == 2
    for i, out in enumerate(outs):
        time.sleep(1000 - 550 - 1 if i == 0 else 9)
        assert out == [] and all(o == [] for o in outs[i:])
        time.sleep(1)  # exactly 1000 ms after it was parked (at 10 * i)
        assert result(out) == (ErrorCode.REQUEST_TIMED_OUT, i) and all(o == [] for o in outs[i + 1:])
    assert time.pending_timers() == 0
