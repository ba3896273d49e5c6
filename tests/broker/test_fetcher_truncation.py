"""The follower's truncation (KIP-101/KIP-279) on real log files and a MockTime, the leader
played by a scripted connection: several OffsetsForLeaderEpoch rounds until the logs agree,
and a follower that lost its leader-epoch checkpoint, which truncates to its high watermark
(Kafka's behaviour) instead of keeping a tail nobody vouches for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.fetcher import PartitionFetchState, ReplicaFetcher
from broker.partition import Partition
from protocol.api_keys import ApiKey
from protocol.clock import MockTime
from protocol.records import Record, build_batch
from storage import Log, LogConfig
from storage.checkpoint import OffsetCheckpointFile
from storage.epoch_cache import FILE_NAME as EPOCH_FILE
from storage.log_manager import RECOVERY_POINT_CHECKPOINT, LogManager

from .controller_fakes import response


class ScriptedLeader:
    """A connection to the leader that answers OffsetsForLeaderEpoch from a table: epoch asked ->
    (largest epoch <= it, end offset)."""

    def __init__(self, answers: dict[int, tuple[int, int]]) -> None:
        self.answers = answers
        self.asked: list[int] = []

    async def request(self, api_key, body, version=None):
        assert api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                self.asked.append(p["leader_epoch"])
                epoch, end = self.answers[p["leader_epoch"]]
                parts.append({"error_code": 0, "partition": p["partition"], "leader_epoch": epoch, "end_offset": end})
            topics.append({"topic": t["topic"], "partitions": parts})
        return response(ApiKey.OFFSET_FOR_LEADER_EPOCH, {"topics": topics}, 3)


def follower_log(path, time, epochs: list[tuple[int, int]]) -> Log:
    """A follower's log: ``epochs`` is [(leader epoch, records)] written in that order."""
    log = Log.open(path, LogConfig(), time=time)
    offset = 0
    for epoch, n in epochs:
        log.append_as_follower(build_batch([Record(value=b"v", timestamp=1)] * n, base_offset=offset,
                                           partition_leader_epoch=epoch))
        offset += n
    return log


def fetcher_for(partition: Partition, time) -> tuple[ReplicaFetcher, PartitionFetchState]:
    manager = SimpleNamespace(broker_id=2, time=time, backoff_ms=1000, topic_stats=None,
                              on_truncated_below_recovery_point=None)
    fetcher = ReplicaFetcher(manager, 1, "127.0.0.1", 9)
    state = PartitionFetchState(partition, leader_epoch=4)
    fetcher.partitions[partition.key] = state
    return fetcher, state


@pytest.fixture
def time():
    return MockTime()


def follower(log: Log, time) -> Partition:
    p = Partition("t", 0, local_broker_id=2, time=time)
    p.log = log
    return p


async def test_truncation_takes_as_many_rounds_as_the_epochs_need(tmp_path, time):
    # Follower: epoch 0 at 0-4, epoch 1 at 5-7, epoch 3 at 8-9. The leader never had epochs 1 and 3.
    log = follower_log(tmp_path / "t-0", time, [(0, 5), (1, 3), (3, 2)])
    fetcher, state = fetcher_for(follower(log, time), time)
    leader = ScriptedLeader({3: (2, 9), 1: (0, 6)})
    await fetcher._truncate(leader)
    # Round 1: the leader's epoch 2 ends at 9; ours before it (1) ends at 8: cut there, ask again.
    assert (leader.asked, log.log_end_offset, state.truncating) == ([3], 8, True)
    await fetcher._truncate(leader)
    # Round 2: both have epoch 0; it ends at 5 here, 6 there: cut at 5, done.
    assert (leader.asked, log.log_end_offset, state.truncating) == ([3, 1], 5, False)
    assert log.leader_epoch_cache.latest_epoch() == 0
    log.close()


async def test_an_empty_epoch_of_the_follower_at_its_log_end_is_dropped_and_the_next_round_goes_older(tmp_path, time):
    """The follower led epoch 2 without appending (its epoch cache ends 2@5, at its LEO); the
    leader never had epoch 2 and answers its epoch 1, which the follower lacks. The follower's
    epoch before 1 (0) ends where 2 starts, at its LEO: nothing to cut, but the conflicting empty
    epoch goes (Kafka's truncateTo at or past the LEO truncates the epoch cache from the end),
    so the next round asks about epoch 0 instead of asking about 2 for ever."""
    log = follower_log(tmp_path / "t-0", time, [(0, 5)])
    log.leader_epoch_cache.assign(2, 5)
    fetcher, state = fetcher_for(follower(log, time), time)
    leader = ScriptedLeader({2: (1, 8), 0: (0, 5)})
    await fetcher._truncate(leader)
    await fetcher._truncate(leader)
    assert leader.asked == [2, 0]
    assert (log.log_end_offset, state.truncating) == (5, False)
    assert log.leader_epoch_cache.latest_epoch() == 0
    log.close()


async def test_a_follower_without_leader_epochs_truncates_to_its_high_watermark(tmp_path, time):
    log = follower_log(tmp_path / "t-0", time, [(0, 5), (1, 2), (1, 3)])
    log.update_high_watermark(7)
    log.close()
    (tmp_path / "t-0" / EPOCH_FILE).unlink()  # the leader-epoch checkpoint is lost
    log = Log.open(tmp_path / "t-0", LogConfig(), time=time, recovery_point=10, had_clean_shutdown=True)
    log.update_high_watermark(7)
    assert log.leader_epoch_cache.latest_epoch() is None and log.log_end_offset == 10
    fetcher, state = fetcher_for(follower(log, time), time)
    leader = ScriptedLeader({})
    await fetcher._truncate(leader)
    assert leader.asked == []  # nothing to ask about
    assert (log.log_end_offset, state.truncating) == (7, False)  # the unvouched tail is gone
    log.close()


def lost_epochs_log(path, time) -> Log:
    """A follower back from a clean shutdown with its leader-epoch checkpoint lost: records 0-9,
    high watermark 7 (offsets 7-9 were taken while it led, cut off, and nobody vouches for them)."""
    log = follower_log(path, time, [(0, 5), (1, 2), (1, 3)])
    log.update_high_watermark(7)
    log.close()
    (path / EPOCH_FILE).unlink()
    log = Log.open(path, LogConfig(), time=time, recovery_point=10, had_clean_shutdown=True)
    log.update_high_watermark(7)
    assert log.leader_epoch_cache.latest_epoch() is None and log.log_end_offset == 10
    return log


async def test_a_follower_without_leader_epochs_truncates_to_its_high_watermark_when_added_not_when_connected(
        tmp_path, time):
    """Simulator seed 2771: the leader a broker back without leader epochs was told to follow was
    down. The truncation to the high watermark waited for a connection to it, so the tail stayed;
    the broker was killed meanwhile, its recovery rebuilt a leader epoch for that tail from the
    batches, and the epoch truncation against the next leader (which had lost its epochs too)
    kept it: two ISR members with different records at the same offsets. Kafka's
    truncateToHighWatermark asks the leader nothing: the tail goes when the partition is added."""
    log = lost_epochs_log(tmp_path / "t-0", time)
    fetcher, state = fetcher_for(follower(log, time), time)
    fetcher.partitions.clear()
    try:
        fetcher.add_partitions({("t", 0): state})
        # No await yet: the fetcher's loop has not run, nothing was connected to or asked.
        assert (log.log_end_offset, state.truncating) == (7, False)
    finally:
        await fetcher.stop()  # (before its loop ran: the stub manager has no network)
    log.close()


async def test_a_follower_with_leader_epochs_waits_for_the_leader_to_truncate(tmp_path, time):
    log = follower_log(tmp_path / "t-0", time, [(0, 5), (1, 5)])
    log.update_high_watermark(7)
    fetcher, state = fetcher_for(follower(log, time), time)
    fetcher.partitions.clear()
    try:
        fetcher.add_partitions({("t", 0): state})
        assert (log.log_end_offset, state.truncating) == (10, True)  # only the leader can tell where they diverge
    finally:
        await fetcher.stop()
    log.close()


async def test_a_failed_truncation_when_added_is_left_to_the_fetchers_loop(tmp_path, time, monkeypatch):
    log = lost_epochs_log(tmp_path / "t-0", time)
    fetcher, state = fetcher_for(follower(log, time), time)
    fetcher.partitions.clear()

    def eio(offset):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(log, "truncate_to", eio)
    try:
        fetcher.add_partitions({("t", 0): state})  # (a LeaderAndIsr being applied: it must not raise)
        assert (log.log_end_offset, state.truncating) == (10, True)
    finally:
        await fetcher.stop()
    monkeypatch.undo()
    await fetcher._truncate(ScriptedLeader({}))  # the loop's round, the disk back
    assert (log.log_end_offset, state.truncating) == (7, False)
    log.close()


async def test_an_empty_follower_has_nothing_to_truncate(tmp_path, time):
    log = Log.open(tmp_path / "t-0", LogConfig(), time=time)
    fetcher, state = fetcher_for(follower(log, time), time)
    await fetcher._truncate(ScriptedLeader({}))
    assert (log.log_end_offset, state.truncating) == (0, False)
    log.close()


def test_a_leader_log_start_beyond_the_followers_old_high_watermark_is_taken_after_the_new_one(tmp_path, time):
    """The leader's log start offset (moved by DeleteRecords or retention, never past its HW)
    may be above the follower's HW, which lags one fetch behind. The follower takes the
    leader's HW first, then its log start (Kafka's processPartitionData order); the other way
    round the log start is refused as above the HW, and the fetch fails again every round."""
    log = follower_log(tmp_path / "t-0", time, [(4, 10)])
    log.update_high_watermark(5)
    fetcher, state = fetcher_for(follower(log, time), time)
    fetched = SimpleNamespace(error_code=0, high_watermark=15, log_start_offset=12,
                              records=build_batch([Record(value=b"v", timestamp=1)] * 5, base_offset=10,
                                                  partition_leader_epoch=4))
    state.truncating = False
    fetcher._process_partition(("t", 0), state, fetched)
    assert (log.log_end_offset, log.high_watermark, log.log_start_offset) == (15, 15, 12)
    assert state.delayed_until_ms == 0  # not backed off
    log.close()


async def test_a_truncation_below_the_recovery_point_writes_the_recovery_point_checkpoint_at_once(tmp_path, time):
    """Kafka's LogManager.truncateTo checkpoints the recovery points of the log's dir right after
    a truncation: else a crash before the next periodic checkpoint finds the old, higher recovery
    point and recovery skips what the follower appended after truncating below it."""
    manager = LogManager([tmp_path], LogConfig(), time=time)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    for epoch, n in [(0, 5), (1, 3)]:
        log.append_as_follower(build_batch([Record(value=b"v", timestamp=1)] * n, base_offset=log.log_end_offset,
                                           partition_leader_epoch=epoch))
    log.flush()
    manager.checkpoint_recovery_points()
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    assert checkpoint.read() == {("t", 0): 8}
    fetcher, state = fetcher_for(follower(log, time), time)
    fetcher.manager.on_truncated_below_recovery_point = manager.checkpoint_recovery_points_after_truncation
    await fetcher._truncate(ScriptedLeader({1: (0, 5)}))  # the leader never had epoch 1
    assert (log.log_end_offset, log.recovery_point, state.truncating) == (5, 5, False)
    assert checkpoint.read() == {("t", 0): 5}  # on disk now, not at the next periodic checkpoint
    manager.shutdown()


def test_a_follower_without_leader_epochs_ahead_of_the_leader_truncates_to_the_leaders_high_watermark(tmp_path, time):
    """OFFSET_OUT_OF_RANGE for a follower that knows no leader epochs and whose high watermark
    (taken from an earlier leader) is above the new leader's log end: epoch truncation would cut
    to its own HW only, the next fetch would be out of range again, for ever. It cuts to the HW
    the leader's answer carries (at most the leader's log end; Kafka cuts to the log end)."""
    log = follower_log(tmp_path / "t-0", time, [(0, 3), (0, 3), (0, 4)])
    log.update_high_watermark(9)
    log.leader_epoch_cache.clear()
    fetcher, state = fetcher_for(follower(log, time), time)
    state.truncating = False
    out_of_range = SimpleNamespace(error_code=1, high_watermark=6, log_start_offset=0, records=b"")  # OFFSET_OUT_OF_RANGE
    fetcher._process_partition(("t", 0), state, out_of_range)
    assert (log.log_end_offset, state.truncating) == (6, False)
    log.close()


def test_a_follower_with_leader_epochs_out_of_range_truncates_by_epoch(tmp_path, time):
    log = follower_log(tmp_path / "t-0", time, [(0, 10)])
    fetcher, state = fetcher_for(follower(log, time), time)
    state.truncating = False
    out_of_range = SimpleNamespace(error_code=1, high_watermark=6, log_start_offset=0, records=b"")
    fetcher._process_partition(("t", 0), state, out_of_range)
    assert (log.log_end_offset, state.truncating) == (10, True)  # asks the leader where the logs diverge
    log.close()


def batch_3_to_5(log_start_offset: int) -> SimpleNamespace:
    """A fetch answer of the leader (epoch 4, HW 6): its batch of offsets 3-5."""
    return SimpleNamespace(error_code=0, high_watermark=6, log_start_offset=log_start_offset,
                           records=build_batch([Record(value=b"v", timestamp=1)] * 3, base_offset=3,
                                               partition_leader_epoch=4))


def test_an_empty_follower_whose_fetch_offset_is_inside_the_leaders_first_batch_starts_at_that_batch(tmp_path, time):
    """DeleteRecords to offset 4, inside the leader's batch 3-5: a follower starting over there (an
    empty log at 4) gets that batch whole; it starts again at 3 and takes it, then its log start
    goes up to the leader's (Kafka's truncateFullyAndStartAt on UnexpectedAppendOffsetException).
    Before, every fetch at 4 failed on the batch starting at 3."""
    log = follower_log(tmp_path / "t-0", time, [])
    log.truncate_fully_and_start_at(4)
    fetcher, state = fetcher_for(follower(log, time), time)
    state.truncating = False
    fetched = batch_3_to_5(log_start_offset=4)
    fetcher._process_partition(("t", 0), state, fetched)
    assert (log.log_end_offset, log.high_watermark, log.log_start_offset) == (6, 6, 4)
    assert state.delayed_until_ms == 0  # not backed off
    log.close()


def test_a_follower_with_records_whose_fetch_offset_is_inside_a_leader_batch_is_not_cut(tmp_path, time):
    """Only an empty log starts over: a follower holding records the leader's batch overlaps is
    left alone (the append fails and backs off; truncation by epoch is what mends that)."""
    log = follower_log(tmp_path / "t-0", time, [(4, 4)])
    fetcher, state = fetcher_for(follower(log, time), time)
    state.truncating = False
    fetched = batch_3_to_5(log_start_offset=0)
    fetcher._process_partition(("t", 0), state, fetched)
    assert log.log_end_offset == 4 and log.log_start_offset == 0
    assert state.delayed_until_ms > 0
    log.close()


class SessionLeader:
    """A leader's end of a KIP-227 fetch session for partition t-0 (Kafka's
    CachedPartition.maybeUpdateResponseData): a full fetch answers it; an incremental one only
    when its high watermark changed since the last answer. ``during`` runs while a fetch is
    in flight."""

    def __init__(self, high_watermark: int) -> None:
        self.high_watermark = high_watermark
        self.sent_high_watermark = -1
        self.during = None
        self.fulls = 0

    async def fetch(self, request, eager=False):
        from protocol.fast_codecs import FetchPartitionData, FetchResponse
        if self.during is not None:
            during, self.during = self.during, None
            during()
        full = request.session_epoch == 0
        self.fulls += full
        parts = []
        if full or self.sent_high_watermark != self.high_watermark:
            self.sent_high_watermark = self.high_watermark
            parts.append(FetchPartitionData(0, 0, self.high_watermark, self.high_watermark, 0, None))
        return FetchResponse(0, 0, 7, [("t", parts)] if parts else [])


async def test_an_answer_dropped_for_a_state_replaced_in_flight_is_asked_again_in_a_full_fetch(tmp_path, time):
    # Simulator seed 2301: a LeaderAndIsr of a new leader epoch (same leader) replaced the
    # partition's fetch state while a Fetch was in flight; its answer, the leader's HW 59 (nothing
    # new to read), went unused, the new state's truncation cut nothing, and the partition stayed
    # in the session with the same fetch position: the leader's session, which took HW 59 as
    # delivered, never sent it again. The follower kept HW 58 below its log end 59 for ever.
    log = follower_log(tmp_path / "t-0", time, [(2, 59)])
    log.update_high_watermark(58)
    partition = follower(log, time)
    manager = SimpleNamespace(broker_id=2, time=time, backoff_ms=1000, topic_stats=None, follower_quota=None,
                              on_truncated_below_recovery_point=None, fetch_wait_max_ms=500, fetch_min_bytes=1,
                              fetch_max_bytes=1 << 20, fetch_response_max_bytes=10 << 20)
    fetcher = ReplicaFetcher(manager, 1, "127.0.0.1", 9)  # type: ignore[arg-type]
    state = PartitionFetchState(partition, leader_epoch=2)
    state.truncating = False
    fetcher.partitions[partition.key] = state
    leader = SessionLeader(high_watermark=58)
    assert await fetcher._fetch(leader)  # full: the session starts, HW 58
    assert fetcher.session.session_id == 7 and log.high_watermark == 58

    replaced = PartitionFetchState(partition, leader_epoch=3)  # truncating

    def new_leader_epoch() -> None:
        fetcher.partitions[partition.key] = replaced
        leader.high_watermark = 59  # (the last acks=all produce committed)

    leader.during = new_leader_epoch
    assert await fetcher._fetch(leader)  # answered HW 59 for a state no longer there
    assert log.high_watermark == 58
    replaced.truncating = False  # (the epoch truncation round: nothing to cut)
    for _ in range(3):
        assert await fetcher._fetch(leader)
    assert log.high_watermark == 59
    assert leader.fulls == 2
