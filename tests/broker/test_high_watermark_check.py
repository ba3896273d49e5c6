"""Partition.maybe_increment_high_watermark's early returns (issue 29: most calls end at the
first follower behind) against the full computation, the reference kept here: over random
leaders, followers (LEO unknown, behind, at or past the LEO), maximal ISRs (members without a
Replica, followers outside it, caught up or not, eligible or not), both decide the same. Also a
follower's fetch state, updated inline, against Kafka's Replica update."""

from __future__ import annotations

import random

from broker import partition as partition_mod
from broker.partition import CommittedPartitionState, Partition, PendingExpandIsr, Replica
from protocol.clock import MockTime

LAG_MS = 10_000


class FakeLog:
    def __init__(self, leo: int, hw: int) -> None:
        self.log_end_offset = leo
        self.high_watermark = hw

    def update_high_watermark(self, hw: int) -> None:
        assert hw > self.high_watermark
        self.high_watermark = hw


def reference_new_hw(p: Partition, now_ms: int | None) -> int:
    """The HW the full computation gives (before the early returns): the smallest LEO over the
    maximal ISR and the caught-up eligible followers, an unknown LEO or a member without a
    Replica holding it where it is."""
    leader_log = p.log
    assert leader_log is not None
    new_hw = leader_log.log_end_offset
    hw = leader_log.high_watermark
    maximal = p.partition_state.maximal_isr
    remote = p.remote_replicas
    now = now_ms
    for rid, replica in remote.items():
        replica_leo = replica.log_end_offset
        if replica_leo >= new_hw:
            continue
        if rid not in maximal:
            if now is None:
                now = p.time.milliseconds()
            if not (p._is_caught_up(replica, now, p.replica_lag_time_max_ms)
                    and p._is_replica_isr_eligible(rid) and not partition_mod.BUG_HW_OVER_LOCAL_ISR):
                continue
        new_hw = replica_leo if replica_leo >= 0 else hw
    for rid in maximal:
        if rid != p.local_broker_id and rid not in remote:
            new_hw = min(new_hw, hw)
    return new_hw


def random_partition(rng: random.Random, time: MockTime) -> Partition:
    ineligible = {b for b in range(2, 7) if rng.random() < 0.2}
    p = Partition("t", 0, local_broker_id=1, time=time, replica_lag_time_max_ms=LAG_MS,
                  is_replica_isr_eligible=lambda b: b not in ineligible)
    p.leader_id = 1 if rng.random() < 0.95 else 2
    hw = rng.randrange(0, 20)
    leo = hw + rng.choice([0, 0, 1, 5, 10])
    p.log = FakeLog(leo, hw)  # type: ignore[assignment]
    followers = rng.sample(range(2, 7), rng.randrange(0, 5))
    for b in followers:
        r = Replica(b)
        r.log_end_offset = rng.choice([-1, hw - 1, hw, hw + 1, leo - 1, leo, leo + 1, rng.randrange(-1, leo + 2)])
        r.last_caught_up_time_ms = time.milliseconds() - rng.choice([0, LAG_MS, LAG_MS + 1, 5 * LAG_MS])
        p.remote_replicas[b] = r
    isr = {1} if rng.random() < 0.9 else set()
    isr |= {b for b in range(2, 8) if rng.random() < 0.5}  # (7 never has a Replica; others may not)
    committed = CommittedPartitionState(frozenset(isr))
    p.partition_state = committed
    outside = [b for b in range(2, 7) if b not in isr]
    if outside and rng.random() < 0.3:
        p.partition_state = PendingExpandIsr(rng.choice(outside), committed)
    return p


def test_the_early_returns_decide_as_the_full_computation():
    rng = random.Random(29)
    time = MockTime()
    time.sleep(100 * LAG_MS)
    moved = held = 0
    for _ in range(20_000):
        p = random_partition(rng, time)
        assert p.log is not None
        hw_before = p.log.high_watermark
        now = time.milliseconds() if rng.random() < 0.5 else None
        expected = reference_new_hw(p, now) if p.leader_id == 1 else hw_before
        result = p.maybe_increment_high_watermark(now)
        assert result == (expected > hw_before), (expected, hw_before, p.remote_replicas, p.partition_state)
        assert p.log.high_watermark == (expected if result else hw_before)
        moved += result
        held += not result
    assert moved > 150 and held > 10_000  # both outcomes covered


def reference_update_fetch_state(replica: Replica, fetch_offset: int, log_start_offset: int, leader_end_offset: int,
                                 now_ms: int) -> None:
    """Kafka's Replica.updateFetchStateOrThrow (what Partition.update_follower_fetch_state does inline)."""
    if fetch_offset >= leader_end_offset:
        replica.last_caught_up_time_ms = max(replica.last_caught_up_time_ms, now_ms)
    elif fetch_offset >= replica.last_fetch_leader_log_end_offset:
        replica.last_caught_up_time_ms = max(replica.last_caught_up_time_ms, replica.last_fetch_time_ms)
    replica.log_end_offset = fetch_offset
    replica.log_start_offset = log_start_offset
    replica.last_fetch_leader_log_end_offset = leader_end_offset
    replica.last_fetch_time_ms = now_ms


def test_a_follower_fetch_updates_its_replica_as_kafka_does():
    rng = random.Random(497)
    time = MockTime()
    p = Partition("t", 0, local_broker_id=1, time=time, replica_lag_time_max_ms=LAG_MS)
    p.leader_id = 1
    p.log = FakeLog(0, 0)  # type: ignore[assignment]
    p.partition_state = CommittedPartitionState(frozenset({1, 2}))
    p.remote_replicas[2] = replica = Replica(2)
    shadow = Replica(2)
    branches = set()
    for _ in range(5000):
        log_ = p.log
        assert isinstance(log_, FakeLog)
        log_.log_end_offset += rng.choice([0, 0, 1, 3])
        time.sleep(rng.choice([0, 1, 7]))
        if rng.random() < 0.05:
            replica.last_caught_up_time_ms = shadow.last_caught_up_time_ms = time.milliseconds() + 5  # (a clock step back)
        leo = log_.log_end_offset
        fetch_offset = rng.choice([leo, leo, leo - 1, replica.last_fetch_leader_log_end_offset, max(0, leo - 5)])
        before = replica.last_caught_up_time_ms
        reference_update_fetch_state(shadow, fetch_offset, 0, leo, time.milliseconds())
        p.update_follower_fetch_state(2, fetch_offset, 0, leo)
        assert [getattr(replica, f) for f in Replica.__slots__] == [getattr(shadow, f) for f in Replica.__slots__]
        branches.add((fetch_offset >= leo, replica.last_caught_up_time_ms != before))
    assert len(branches) == 4  # caught up now, caught up at the previous fetch, and neither moving it

