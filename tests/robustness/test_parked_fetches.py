"""Issue 12 §4: parked fetches are cheap. DelayedFetch.tryComplete compares positions only
(never reads the log) and watchers are keyed by partition; the completion semantics hold.
ReplicaManager on real log files and MockTime. The cost is measured by
bench/robustness_bench.py (produce p50/p99 with 0 vs 1,000 parked fetches), never asserted."""

from __future__ import annotations

import pytest

from broker.partition import LeaderAndIsrState
from broker.replica_manager import FetchParams
from protocol.clock import MockTime
from protocol.fast_codecs import FetchPartition
from protocol.records import Record, build_batch
from storage import Log, LogConfig

from tests.broker.replica_manager_support import replica_manager


@pytest.fixture
def time():
    return MockTime()


@pytest.fixture
def rm(tmp_path, time):
    with replica_manager(tmp_path, time, LogConfig(segment_bytes=64 * 1024), lag_ms=30000) as manager:
        states = [LeaderAndIsrState(t, p, 1, 1, 0, [1], 0, [1]) for t in ("a", "b") for p in (0, 1)]
        error, _ = manager.become_leader_or_follower(0, 1, states)
        assert error == 0
        yield manager


def produce(rm, topic="a", partition=0, n=1, value=b"v" * 100):
    out = []
    batch = bytearray(build_batch([Record(value=value, timestamp=1)] * n))
    rm.append_records(1000, 1, False, [(topic, [(partition, batch)])], out.append)
    assert out and out[0][0][1][0][1] == 0
    return len(batch)


def park(rm, topic="a", partition=0, offset=0, min_bytes=1, max_wait_ms=10_000, part_max=1 << 20, replica_id=-1):
    out = []
    op = rm.fetch_messages(FetchParams(replica_id, max_wait_ms, min_bytes, 1 << 20, 0),
                           [(topic, [FetchPartition(partition, -1, offset, 0, part_max)])], out.append)
    return op, out


def test_watchers_are_keyed_by_partition(rm):
    ops = [park(rm, "a", 0)[0] for _ in range(5)] + [park(rm, "b", 1)[0] for _ in range(3)]
    assert all(op is not None for op in ops)
    assert len(rm.fetch_purgatory._watchers[("a", 0)]) == 5
    assert len(rm.fetch_purgatory._watchers[("b", 1)]) == 3
    assert ("a", 1) not in rm.fetch_purgatory._watchers


def test_produce_to_another_partition_tries_none_of_them(rm, monkeypatch):
    from broker.delayed_fetch import DelayedFetch
    for _ in range(10):
        park(rm, "a", 0)
    calls = []
    original, reached = DelayedFetch.try_complete, DelayedFetch.reached  # (a woken fetch: reached())
    monkeypatch.setattr(DelayedFetch, "try_complete", lambda self: calls.append(1) or original(self))
    monkeypatch.setattr(DelayedFetch, "reached", lambda self: calls.append(1) or reached(self))
    produce(rm, "b", 0)
    assert calls == [] and rm.fetch_purgatory.delayed() == 10
    produce(rm, "a", 0)
    assert len(calls) == 10 and rm.fetch_purgatory.delayed() == 0


def test_try_complete_never_reads_the_log(rm, monkeypatch):
    ops = [park(rm, "a", 0, min_bytes=10_000)[0] for _ in range(20)]
    reads = []
    original = Log.read
    monkeypatch.setattr(Log, "read", lambda self, *a, **k: reads.append(1) or original(self, *a, **k))
    produce(rm, "a", 0)
    assert reads == []  # 20 fetches checked, none read
    assert all(not op.completed for op in ops)


def test_a_fetch_at_the_log_end_does_not_read_the_log(rm, monkeypatch):
    """A fetch at the LEO would read nothing: Log.read is not called for it (every follower
    fetch at the leader of acks=all produces, issue 29); it parks, and the next append answers it."""
    produce(rm, "a", 0)
    reads = []
    original = Log.read
    monkeypatch.setattr(Log, "read", lambda self, *a, **k: reads.append(a[0]) or original(self, *a, **k))
    op, out = park(rm, "a", 0, offset=1)
    assert op is not None and out == [] and reads == []
    produce(rm, "a", 0)
    assert reads == [1] and len(out) == 1  # the completion reads, from the fetch offset
    [(topic, [pd])] = out[0]
    assert topic == "a" and pd.error_code == 0 and len(pd.records) > 0 and pd.high_watermark == 2


def test_min_bytes_completes_when_enough_bytes_accumulate(rm):
    op, out = park(rm, "a", 0, min_bytes=1000)
    size = produce(rm, "a", 0)  # about 170 bytes
    assert out == [] and not op.completed
    while size < 1000:
        assert out == []
        size += produce(rm, "a", 0)
    assert len(out) == 1
    [(topic, [pd])] = out[0]
    assert topic == "a" and pd.error_code == 0 and len(pd.records) >= 1000


def test_partition_max_bytes_caps_what_a_partition_counts(rm):
    op, out = park(rm, "a", 0, min_bytes=1000, part_max=300)
    for _ in range(10):
        produce(rm, "a", 0)
    assert out == [] and not op.completed  # at most 300 bytes count for this partition


def test_min_bytes_one_completes_on_the_first_append(rm):
    op, out = park(rm, "a", 0)
    produce(rm, "a", 0)
    assert len(out) == 1 and rm.fetch_purgatory.delayed() == 0


def test_consumer_waits_for_the_high_watermark_follower_for_the_leo(rm):
    # A partition with a follower: the HW moves only when it fetches.
    error, _ = rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("a", 1, 1, 1, 1, [1, 2], 0, [1, 2])])
    assert error == 0
    consumer, consumer_out = park(rm, "a", 1, min_bytes=150)
    follower, follower_out = park(rm, "a", 1, min_bytes=150, replica_id=2)
    produce(rm, "a", 1)
    assert follower_out and not consumer_out  # the LEO moved, the HW did not
    out = []
    rm.fetch_messages(FetchParams(2, 0, 1, 1 << 20, 0), [("a", [FetchPartition(1, -1, 1, 0, 1 << 20)])], out.append)
    assert consumer_out  # the follower caught up: HW = 1, the consumer's bytes are readable


def test_a_new_segment_completes_the_fetch(rm):
    op, out = park(rm, "a", 0, min_bytes=1 << 20)
    for _ in range(400):  # 64 KiB segments: rolls well before 1 MiB
        produce(rm, "a", 0)
        if out:
            break
    assert out and rm.get_partition("a", 0).log.num_segments >= 2


def test_truncation_below_the_fetch_offset_completes_it(rm):
    for _ in range(3):
        produce(rm, "a", 0)
    log = rm.get_partition("a", 0).log
    op, out = park(rm, "a", 0, offset=3, min_bytes=1000)
    assert op is not None
    log.truncate_to(1)
    rm.try_complete_delayed_requests(("a", 0))
    assert out  # answered (OFFSET_OUT_OF_RANGE for the offset beyond the log end)


def test_expiry_answers_with_what_is_there(rm, time):
    op, out = park(rm, "a", 0, min_bytes=10_000, max_wait_ms=500)
    produce(rm, "a", 0)
    time.sleep(499)
    assert out == []
    time.sleep(1)
    [(topic, [pd])] = out[0]
    assert pd.error_code == 0 and len(pd.records) > 0


def test_1000_parked_fetches_on_one_partition_stay_parked_through_appends(rm):
    ops = [park(rm, "a", 0, min_bytes=1 << 30)[0] for _ in range(1000)]
    for _ in range(20):
        produce(rm, "a", 0)
    assert rm.fetch_purgatory.delayed() == 1000 and not any(op.completed for op in ops)


def test_an_append_tries_only_the_fetches_its_new_end_can_complete(rm, monkeypatch):
    from broker.delayed_fetch import DelayedFetch
    far = [park(rm, "a", 0, min_bytes=1 << 20)[0] for _ in range(1000)]  # need 1 MiB more
    near_op, near_out = park(rm, "a", 0, min_bytes=150)
    calls = []
    original, reached = DelayedFetch.try_complete, DelayedFetch.reached  # (a woken fetch: reached())
    monkeypatch.setattr(DelayedFetch, "try_complete", lambda self: calls.append(self) or original(self))
    monkeypatch.setattr(DelayedFetch, "reached", lambda self: calls.append(self) or reached(self))
    produce(rm, "a", 0)  # ~170 bytes: reaches the near one's wake-up position only
    assert calls == [near_op] and near_out
    calls.clear()
    for _ in range(5):
        produce(rm, "a", 0)
    assert calls == [] and not any(op.completed for op in far)


def test_fetches_of_several_partitions_are_tried_on_every_append(rm):
    out = []
    op = rm.fetch_messages(FetchParams(-1, 10_000, 400, 1 << 20, 0),
                           [("a", [FetchPartition(0, -1, 0, 0, 1 << 20), FetchPartition(1, -1, 0, 0, 1 << 20)])],
                           out.append)
    assert op is not None
    produce(rm, "a", 0)
    assert out == []
    produce(rm, "a", 1)
    assert out == []
    produce(rm, "a", 1)  # about 510 bytes over the two partitions
    assert len(out) == 1


def test_expired_fetches_leave_no_wake_up_entries_behind(rm, time):
    for _ in range(500):
        park(rm, "a", 0, min_bytes=1 << 30, max_wait_ms=100)
    time.sleep(100)
    assert rm.fetch_purgatory.delayed() == 0
    assert rm.fetch_purgatory._heaps == {} and rm.fetch_purgatory._unindexed == {}
