"""KIP-73 replication throttles' bookkeeping (broker/replication_quota.py) on MockTime: which
replicas a throttled-replicas config names for this broker, the windowed rate against the
bound, and how long until it is back within it."""

from __future__ import annotations

from broker.replication_quota import ALL_REPLICAS, UNBOUNDED, ReplicationQuotaManager, ReplicationQuotas, \
    parse_throttled_replicas
from protocol.clock import MockTime


def test_throttled_replicas_lists_are_read_as_kafka_reads_them():
    assert parse_throttled_replicas("*", 1) is ALL_REPLICAS
    assert parse_throttled_replicas("", 1) is False and parse_throttled_replicas(None, 1) is False
    assert parse_throttled_replicas("0:1,0:2,1:2,3:1", 1) == frozenset({0, 3})
    assert parse_throttled_replicas("0:1,0:2", 3) == frozenset()


def test_the_quota_is_exceeded_above_the_bound_over_the_window_and_recovers():
    time = MockTime()
    q = ReplicationQuotaManager("leader", time, samples=2, window_seconds=1)
    q.update_topic("t", "0:1,1:2", broker_id=1)
    assert q.is_throttled("t", 0) and not q.is_throttled("t", 1) and not q.is_throttled("u", 0)
    q.record(10_000_000)
    assert not q.is_quota_exceeded()  # unbounded (Kafka's default)
    q.update_quota(1_000_000)
    # 10 MB recorded in a window of at least (samples - 1) x 1 s: 10 MB/s > 1 MB/s
    assert q.is_quota_exceeded() and q.byte_rate() == 10_000_000
    assert q.throttle_time_ms() == 9000  # 10 MB at 1 MB/s is 10 s of window; 1 s has passed
    time.sleep(2500)  # the sample expired (2 samples of 1 s)
    assert not q.is_quota_exceeded() and q.throttle_time_ms() == 0
    q.update_topic("t", None, broker_id=1)
    assert not q.throttled


def test_the_two_sides_follow_their_topic_configs_and_rates():
    class Config(dict):
        pass
    quotas = ReplicationQuotas(2, MockTime())
    quotas.topic_configs_changed({"a": {"leader.replication.throttled.replicas": "0:1,0:2",
                                        "follower.replication.throttled.replicas": "*"},
                                  "b": {"retention.ms": "1"}})
    assert quotas.leader.throttled == {"a": frozenset({0})} and quotas.follower.throttled == {"a": ALL_REPLICAS}
    quotas.topic_configs_changed({"a": {}}, ["a"])
    assert not quotas.leader.throttled and not quotas.follower.throttled
    quotas.configs_changed(Config({"leader.replication.throttled.rate": 5, "follower.replication.throttled.rate": UNBOUNDED}))
    assert quotas.leader.bound == 5 and quotas.follower.bound >= UNBOUNDED and not quotas.follower.is_quota_exceeded()


def test_the_leader_throttles_followers_out_of_the_isr_only():
    """Kafka's shouldLeaderThrottle: throttled partition, follower not in the ISR, quota exceeded."""
    from types import SimpleNamespace

    from broker.replica_manager import ReplicaManager

    time = MockTime()
    q = ReplicationQuotaManager("leader", time, samples=2, window_seconds=1)
    q.update_quota(1000)
    q.update_topic("t", "0:1", broker_id=1)
    q.record(100_000)
    part = SimpleNamespace(topic="t", partition=0, isr=frozenset({1, 2}))
    assert ReplicaManager.should_leader_throttle(q, part, 3)       # adding replica 3: held back
    assert not ReplicaManager.should_leader_throttle(q, part, 2)   # in the ISR: never
    other = SimpleNamespace(topic="t", partition=1, isr=frozenset({1}))
    assert not ReplicaManager.should_leader_throttle(q, other, 3)  # not a throttled partition
    time.sleep(3000)
    assert not ReplicaManager.should_leader_throttle(q, part, 3)   # the rate is back within the quota


async def test_the_follower_leaves_out_throttled_partitions_it_has_not_caught_up_on(tmp_path):
    """Kafka's ReplicaFetcherThread: while the follower quota is exceeded, a throttled partition
    is left out of the fetch unless this replica has caught up (lag 0 at its last fetch); with
    nothing left to fetch, the fetcher waits (at most replica.fetch.backoff.ms)."""
    from types import SimpleNamespace

    from broker.fetcher import PartitionFetchState, ReplicaFetcher
    from broker.partition import Partition
    from storage import Log, LogConfig

    time = MockTime()
    quota = ReplicationQuotaManager("follower", time, samples=2, window_seconds=1)
    quota.update_quota(1000)
    quota.update_topic("t", "0:2,1:2", broker_id=2)
    manager = SimpleNamespace(broker_id=2, time=time, backoff_ms=1000, topic_stats=None, follower_quota=quota,
                              fetch_wait_max_ms=500, fetch_min_bytes=1, fetch_max_bytes=1 << 20,
                              fetch_response_max_bytes=10 << 20)
    fetcher = ReplicaFetcher(manager, 1, "127.0.0.1", 9)
    states = {}
    for p, lag in ((0, 5), (1, 0), (2, 5)):
        part = Partition("t", p, local_broker_id=2, time=time)
        part.log = Log.open(tmp_path / f"t-{p}", LogConfig(), time=time)
        state = states[p] = fetcher.partitions[part.key] = PartitionFetchState(part, leader_epoch=0)
        state.truncating, state.lag = False, lag

    class Leader:
        def __init__(self) -> None:
            self.asked: list[list[int]] = []

        async def fetch(self, request, eager=False):
            self.asked.append(sorted(fp.partition for _t, parts in request.topics for fp in parts))
            return SimpleNamespace(error_code=0, responses=[])

    leader = Leader()
    assert await fetcher._fetch(leader) and leader.asked[-1] == [0, 1, 2]  # within the quota: all
    quota.record(100_000)
    assert await fetcher._fetch(leader) and leader.asked[-1] == [1, 2]  # t-0 held; t-1 caught up; t-2 not throttled
    del fetcher.partitions[("t", 2)], fetcher.partitions[("t", 1)]
    assert not await fetcher._fetch(leader) and len(leader.asked) == 2
    assert fetcher._throttled_until_ms == time.monotonic_ms() + 1000  # the backoff bounds the wait
    assert quota.throttled_fetches == 2
