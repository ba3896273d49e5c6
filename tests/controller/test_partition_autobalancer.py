"""The controller's partition autobalancer (controller/partition_autobalancer.py) on MockTime:
a QuorumController over a real metadata store, brokers registered and heartbeating by hand,
the moves completed by the leaders' AlterPartitions. What it decides, when, and what it never
touches."""

from __future__ import annotations

from collections import Counter

from controller.partition_autobalancer import AutobalancerConfig
from protocol.api_keys import ApiKey

from .helpers import Harness, request

TICK = 1000


def harness(tmp_path, mode="node_add", **kw) -> Harness:
    kw.setdefault("tick_interval_ms", TICK)
    return Harness(tmp_path, autobalancer=AutobalancerConfig(mode=mode, **kw), session_timeout_ms=9000,
                   auto_leader_rebalance_enable=False)


def alter_partition(h, topic, pid, isr):
    part = h.partition(topic, pid)
    return request(ApiKey.ALTER_PARTITION, 3, broker_id=part.leader, broker_epoch=h.epochs[part.leader], topics=[{
        "topic_id": h.controller.replication.topic(topic).topic_id, "partitions": [{
            "partition_index": pid, "leader_epoch": part.leader_epoch, "partition_epoch": part.partition_epoch,
            "leader_recovery_state": 0, "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in isr]}]}])


def moving(h) -> dict[tuple[str, int], tuple]:
    return {(info.name, pid): (list(p.replicas), list(p.adding), list(p.removing))
            for info, pid, p in h.controller.replication.reassigning_partitions()}


async def complete_moves(h) -> int:
    """Every move in progress completes: its leader adds the new replicas to the ISR (they caught up)."""
    done = 0
    for (topic, pid), (replicas, _adding, _removing) in sorted(moving(h).items()):
        live_isr = [b for b in replicas if h.controller.cluster.is_active(b)]
        answer = await h.controller.alter_partition(alter_partition(h, topic, pid, live_isr), 3)
        assert answer["error_code"] == 0, answer
        done += 1
    await h.settle()
    return done


def counts(h, topic="t") -> Counter:
    return Counter(b for p in h.controller.replication.topic(topic).parts.values() for b in p.replicas)


async def balance_until_still(h, brokers, rounds=20) -> int:
    """Ticks (with heartbeats) and completions until a tick starts nothing; the moves started."""
    started = 0
    for _ in range(rounds):
        await h.heartbeat_all(*brokers)
        await h.advance(TICK)
        now = len(moving(h))
        if not now:
            return started
        started += now
        await complete_moves(h)
    raise AssertionError(f"still moving after {rounds} ticks: {moving(h)}")


async def revive(h, broker_id) -> None:
    """A fenced broker heartbeats again: it gets its full state, then is unfenced."""
    for _ in range(3):
        if (await h.heartbeat(broker_id))["is_fenced"] is False:
            return
        await h.settle()
    raise AssertionError(f"broker {broker_id} still fenced")


def assignment_12_rf2() -> dict[int, list[int]]:
    brokers = [1, 2, 3]
    return {p: [brokers[p % 3], brokers[(p + 1) % 3]] for p in range(12)}


async def broker_4_joins(h) -> None:
    """Brokers 1-3 with topic t (12 partitions, RF 2, evenly spread), then broker 4 registers."""
    await h.start_brokers(1, 2, 3)
    await h.create(("t", -1, -1, {}, assignment_12_rf2()))
    await h.start_brokers(4)


async def test_node_add_gives_a_new_broker_its_share_then_stops(tmp_path):
    h = await harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2, 3)
        await h.create(("t", -1, -1, {}, assignment_12_rf2()))
        await h.advance(TICK)
        assert not moving(h)  # balanced on three brokers: nothing to do
        await h.start_brokers(4)
        started = await balance_until_still(h, [1, 2, 3, 4])
        c = counts(h)
        assert set(c) == {1, 2, 3, 4} and max(c.values()) - min(c.values()) <= 1, c
        assert started == 6  # 24 replicas: broker 4 takes 6, nothing else moves
        assert not h.controller.autobalancer.pending
        # the preferred leaders lead (elections after the moves), and are even
        parts = h.controller.replication.topic("t").parts.values()
        assert all(p.leader == p.replicas[0] for p in parts)
        leaders = Counter(p.leader for p in parts)
        assert max(leaders.values()) - min(leaders.values()) <= 1, leaders
        # then nothing more, tick after tick
        for _ in range(3):
            await h.heartbeat_all(1, 2, 3, 4)
            await h.advance(TICK)
            assert not moving(h)
    finally:
        await h.stop()


async def test_off_moves_nothing(tmp_path):
    h = await harness(tmp_path, mode="off").start()
    try:
        await broker_4_joins(h)
        for _ in range(3):
            await h.heartbeat_all(1, 2, 3, 4)
            await h.advance(TICK)
        assert not moving(h) and counts(h)[4] == 0
    finally:
        await h.stop()


async def test_node_add_does_not_even_out_an_uneven_cluster_without_a_new_broker(tmp_path):
    h = await harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2, 3)
        await h.advance(TICK)  # the brokers' arrival is handled (nothing to move yet)
        await h.create(("t", -1, -1, {}, {p: [1, 2] for p in range(6)}))  # broker 3 empty at creation
        # broker 3 was there before the topic: no broker joins, node_add leaves the counts alone
        for _ in range(3):
            await h.heartbeat_all(1, 2, 3)
            await h.advance(TICK)
        assert not moving(h)
    finally:
        await h.stop()


async def test_moves_are_bounded_by_concurrent_moves(tmp_path):
    h = await harness(tmp_path, concurrent_moves=2).start()
    try:
        await broker_4_joins(h)
        seen = 0
        for _ in range(10):
            await h.heartbeat_all(1, 2, 3, 4)
            await h.advance(TICK)
            assert len(moving(h)) <= 2
            seen = max(seen, len(moving(h)))
            await h.heartbeat_all(1, 2, 3, 4)
            await h.advance(TICK)  # a tick while moves are in progress starts no more
            assert len(moving(h)) <= 2
            if not moving(h):
                break
            await complete_moves(h)
        assert seen == 2
        c = counts(h)
        assert max(c.values()) - min(c.values()) <= 1, c
    finally:
        await h.stop()


async def test_a_partition_below_min_insync_is_never_moved(tmp_path):
    h = await harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2, 3)
        await h.create(("t", -1, -1, {"min.insync.replicas": "2"}, {p: [1, 2] for p in range(4)}))
        # partition 0's follower 2 dropped out of the ISR: ISR [1] < min.insync 2
        answer = await h.controller.alter_partition(alter_partition(h, "t", 0, [1]), 3)
        assert answer["error_code"] == 0
        await h.start_brokers(4)
        for _ in range(6):
            await h.heartbeat_all(1, 2, 3, 4)
            await h.advance(TICK)
            assert ("t", 0) not in moving(h)
            await complete_moves(h)
        assert h.partition("t", 0).replicas == (1, 2)
        assert counts(h)[4] > 0  # the others moved
    finally:
        await h.stop()


async def test_node_add_waits_while_a_broker_is_down_and_never_empties_it(tmp_path):
    h = await harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2, 3)
        await h.create(("t", -1, -1, {}, assignment_12_rf2()))
        for _ in range(3):  # broker 3 stops heartbeating: fenced
            await h.heartbeat_all(1, 2)
            await h.advance(5_000)
        assert h.broker(3).fenced
        await h.start_brokers(4)
        # nothing is evened out while 3 is down, for an hour
        for _ in range(60):
            await h.heartbeat_all(1, 2, 4)
            await h.advance(60_000)
        assert h.broker(3).fenced and not moving(h) and counts(h)[4] == 0
        # back: the balance the new broker asked for goes on
        await revive(h, 3)
        await balance_until_still(h, [1, 2, 3, 4])
        assert counts(h)[4] == 6
    finally:
        await h.stop()


async def test_continuous_restores_the_replication_factor_off_a_broker_down_past_the_timeout(tmp_path):
    h = await harness(tmp_path, mode="continuous", node_availability_timeout_ms=60_000).start()
    try:
        await h.start_brokers(1, 2, 3, 4)
        await h.create(("t", -1, -1, {}, {p: [b for b in (1, 2, 3, 4) if b != 1 + p % 4][:3] for p in range(8)}))
        assert counts(h) == Counter({1: 6, 2: 6, 3: 6, 4: 6})
        # broker 4 stops: fenced after the session (9 s); for 60 s after that nothing moves
        for _ in range(20):
            await h.heartbeat_all(1, 2, 3)
            await h.advance(3_000)
        assert h.broker(4).fenced and not moving(h)
        # past the timeout: every replica of 4 moves to 1-3, RF 3 again
        for _ in range(5):
            await h.heartbeat_all(1, 2, 3)
            await h.advance(3_000)
        started = moving(h)
        assert started and all(4 in removing for _r, _a, removing in started.values()), started
        await complete_moves(h)
        await balance_until_still(h, [1, 2, 3])
        parts = h.controller.replication.topic("t").parts.values()
        assert all(len(p.replicas) == 3 and 4 not in p.replicas for p in parts)
        assert counts(h) == Counter({1: 8, 2: 8, 3: 8})
        # broker 4 comes back empty: continuous mode gives it its share again
        await revive(h, 4)
        await balance_until_still(h, [1, 2, 3, 4])
        assert counts(h) == Counter({1: 6, 2: 6, 3: 6, 4: 6})
    finally:
        await h.stop()


async def test_continuous_moves_replicas_off_a_full_log_dir(tmp_path):
    h = await harness(tmp_path, mode="continuous").start()
    try:
        await h.start_brokers(1, 2, 3, 4)
        await h.create(("t", -1, -1, {}, {p: [(p % 4) + 1, ((p + 1) % 4) + 1] for p in range(16)}))
        balancer = h.controller.autobalancer
        h.controller.broker_heartbeat(request(ApiKey.BROKER_HEARTBEAT, 1, broker_id=1, broker_epoch=h.epochs[1],
                                              current_metadata_offset=0, want_fence=False, want_shut_down=False,
                                              log_dir_usage=[{"total_bytes": 100,
                                                              "used_bytes": 95}]))
        await h.settle()
        assert balancer.disk_percent(1) == 95.0
        for b, used in ((2, 75), (3, 20), (4, 20)):
            balancer.report_usage(b, [_usage(used)])
        await h.heartbeat_all(1, 2, 3, 4)
        await h.advance(TICK)
        started = moving(h)
        assert started and all(removing == [1] for _r, _a, removing in started.values()), started
        # (95 - 80 + 5) / 95 of broker 1's 8 replicas: 2, to 3 and 4 (2 is within 10 % of the limit)
        assert len(started) == 2 and all(set(adding) <= {3, 4} for _r, adding, _rm in started.values()), started
        await complete_moves(h)
        # below the limit now: nothing brings them back onto 1 or 2 (both within the headroom)
        balancer.report_usage(1, [_usage(72)])
        for _ in range(4):
            await h.heartbeat_all(1, 2, 3, 4)
            await h.advance(TICK)
            assert all(not set(adding) & {1, 2} for _r, adding, _rm in moving(h).values()), moving(h)
            await complete_moves(h)
    finally:
        await h.stop()


def _usage(percent):
    from controller.partition_autobalancer import LogDirUsage
    return LogDirUsage(100, percent)


async def test_replicas_of_an_unregistered_broker_move_to_the_live_ones(tmp_path):
    h = await harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2, 3, 4)
        await h.create(("t", -1, -1, {}, {p: [(p % 4) + 1, ((p + 1) % 4) + 1] for p in range(8)}))
        for _ in range(3):  # broker 4 stops (no heartbeats): fenced
            await h.heartbeat_all(1, 2, 3)
            await h.advance(5_000)
        assert h.broker(4).fenced and not moving(h)
        answer = await h.controller.unregister_broker(request(ApiKey.UNREGISTER_BROKER, 0, broker_id=4))
        assert answer["error_code"] == 0
        await balance_until_still(h, [1, 2, 3])
        parts = h.controller.replication.topic("t").parts.values()
        assert all(len(p.replicas) == 2 and 4 not in p.replicas for p in parts)
        c = counts(h)
        assert max(c.values()) - min(c.values()) <= 1, c
    finally:
        await h.stop()


async def test_moves_live_in_the_metadata_log_and_a_new_controller_finishes_the_balance(tmp_path):
    h = await harness(tmp_path, concurrent_moves=2).start()
    await broker_4_joins(h)
    await h.heartbeat_all(1, 2, 3, 4)
    await h.advance(TICK)
    before = moving(h)
    assert len(before) == 2
    epochs = dict(h.epochs)
    await h.stop()

    h2 = await Harness(tmp_path, time=h.time, autobalancer=AutobalancerConfig(
        mode="node_add", tick_interval_ms=TICK, concurrent_moves=2), auto_leader_rebalance_enable=False).start()
    try:
        h2.epochs = epochs
        assert moving(h2) == before  # the moves are in the log
        assert h2.controller.autobalancer.pending
        await complete_moves(h2)
        await balance_until_still(h2, [1, 2, 3, 4])
        c = counts(h2)
        assert c[4] == 6 and max(c.values()) - min(c.values()) <= 1, c
    finally:
        await h2.stop()


RATE = 5_000_000


def throttle_lists(h, topic="t") -> tuple[set[str], set[str]]:
    configs = h.controller.configs.topic_configs(topic)
    return tuple({e for e in (configs.get(k) or "").split(",") if e}
                 for k in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"))


def broker_rates(h) -> dict[str, dict[str, str]]:
    return {name: {k: v for k, v in c.items() if k.endswith("replication.throttled.rate")}
            for name, c in h.controller.configs.broker_configs.items()
            if any(k.endswith("replication.throttled.rate") for k in c)}


async def alter_configs(h, *resources) -> None:
    """IncrementalAlterConfigs SETs: (resource type, name, {key: value})."""
    resp = await h.controller.incremental_alter_configs(request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, resources=[
        {"resource_type": t, "resource_name": name, "configs": [
            {"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}
        for t, name, configs in resources]))
    assert all(r["error_code"] == 0 for r in resp["responses"]), resp


async def test_moves_run_under_the_replication_throttles_which_go_once_they_are_done(tmp_path):
    """As Cruise Control's executor does (kafka-reassign-partitions.sh --throttle's lists):
    each move's current replicas are leader-throttled and its new replica follower-throttled,
    the brokers it involves get the rate, and all of it goes once the moves are over."""
    h = await harness(tmp_path, concurrent_moves=2, replication_throttled_rate=RATE).start()
    try:
        await broker_4_joins(h)
        seen = 0
        for _ in range(10):
            await h.heartbeat_all(1, 2, 3, 4)
            await h.advance(TICK)
            now = moving(h)
            if not now:
                break
            leader, follower = throttle_lists(h)
            want_leader = {f"{p}:{b}" for (_t, p), (_r, _adding, removing) in now.items()
                           for b in set(h.partition("t", p).replicas) - set(_adding)}
            want_follower = {f"{p}:{b}" for (_t, p), (_r, adding, _removing) in now.items() for b in adding}
            assert (leader, follower) == (want_leader, want_follower)
            involved = {b for (_t, p) in now for b in h.partition("t", p).replicas}
            assert broker_rates(h) == {str(b): {"leader.replication.throttled.rate": str(RATE),
                                                "follower.replication.throttled.rate": str(RATE)}
                                       for b in involved}
            seen += len(now)
            await complete_moves(h)
        assert seen == 6
        assert throttle_lists(h) == (set(), set()) and broker_rates(h) == {}
        assert "t" not in h.controller.configs.configs  # no empty lists left behind either
    finally:
        await h.stop()


async def test_throttles_set_by_someone_else_are_left_alone(tmp_path):
    """A broker with a dynamic rate of its own (or a cluster-wide one) keeps it; a "*" list
    stays "*"; entries of other partitions stay."""
    h = await harness(tmp_path, concurrent_moves=50, replication_throttled_rate=RATE).start()
    try:
        await h.start_brokers(1, 2, 3)
        await h.create(("t", -1, -1, {}, assignment_12_rf2()), ("u", -1, -1, {}, {0: [1, 2]}))
        await alter_configs(h, (4, "1", {"leader.replication.throttled.rate": "1000"}),
                            (2, "t", {"follower.replication.throttled.replicas": "*"}),
                            (2, "u", {"leader.replication.throttled.replicas": "0:1,0:2"}))
        await h.start_brokers(4)
        await h.heartbeat_all(1, 2, 3, 4)
        await h.advance(TICK)
        assert moving(h)
        rates = broker_rates(h)
        assert rates["1"] == {"leader.replication.throttled.rate": "1000",
                              "follower.replication.throttled.rate": str(RATE)}
        configs = h.controller.configs
        assert configs.topic_configs("t")["follower.replication.throttled.replicas"] == "*"
        await balance_until_still(h, [1, 2, 3, 4])
        assert broker_rates(h) == {"1": {"leader.replication.throttled.rate": "1000"}}
        assert configs.topic_configs("t") == {"follower.replication.throttled.replicas": "*"}
        assert configs.topic_configs("u")["leader.replication.throttled.replicas"].split(",")[:2] == ["0:1", "0:2"]
    finally:
        await h.stop()


async def test_a_new_controller_clears_the_throttles_of_the_moves_it_finds(tmp_path):
    h = await harness(tmp_path, concurrent_moves=2, replication_throttled_rate=RATE).start()
    await broker_4_joins(h)
    await h.heartbeat_all(1, 2, 3, 4)
    await h.advance(TICK)
    assert len(moving(h)) == 2 and broker_rates(h)
    epochs = dict(h.epochs)
    await h.stop()

    h2 = await Harness(tmp_path, time=h.time, autobalancer=AutobalancerConfig(
        mode="node_add", tick_interval_ms=TICK, concurrent_moves=2, replication_throttled_rate=RATE),
        auto_leader_rebalance_enable=False).start()
    try:
        h2.epochs = epochs
        assert throttle_lists(h2) != (set(), set())  # in the metadata log
        await complete_moves(h2)
        await balance_until_still(h2, [1, 2, 3, 4])
        assert throttle_lists(h2) == (set(), set()) and broker_rates(h2) == {}
    finally:
        await h2.stop()


async def test_no_throttles_with_a_rate_of_zero(tmp_path):
    h = await harness(tmp_path, replication_throttled_rate=0).start()
    try:
        await broker_4_joins(h)
        await h.heartbeat_all(1, 2, 3, 4)
        await h.advance(TICK)
        assert moving(h)
        assert throttle_lists(h) == (set(), set()) and broker_rates(h) == {}
    finally:
        await h.stop()


async def test_the_throttles_of_a_move_cancelled_or_a_topic_deleted_go_too(tmp_path):
    h = await harness(tmp_path, concurrent_moves=50, replication_throttled_rate=RATE).start()
    try:
        await broker_4_joins(h)
        await h.heartbeat_all(1, 2, 3, 4)
        await h.advance(TICK)
        now = sorted(moving(h))
        assert len(now) >= 2, now
        cancelled, kept = now[:1], now[1:]
        resp = await h.controller.alter_partition_reassignments(request(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=1000, topics=[{"name": "t", "partitions": [
                {"partition_index": p, "replicas": None} for _t, p in cancelled]}]), 0)
        assert all(p["error_code"] == 0 for t in resp["responses"] for p in t["partitions"]), resp
        await h.heartbeat_all(1, 2, 3, 4)
        await h.advance(TICK)  # the cancelled move's entries go; the others stay
        leader, follower = throttle_lists(h)
        pids = {e.split(":")[0] for e in leader | follower}
        assert pids == {str(p) for _t, p in kept}, (pids, cancelled, kept)
        # the topic goes while its moves are under way: nothing of theirs is left
        await h.controller.delete_topics(request(ApiKey.DELETE_TOPICS, 5, topic_names=["t"]), 5)
        await h.heartbeat_all(1, 2, 3, 4)
        await h.advance(TICK)
        assert "t" not in h.controller.configs.configs and broker_rates(h) == {}
    finally:
        await h.stop()
