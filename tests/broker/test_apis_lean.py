"""KafkaApis' lean cases against its general path, the reference (issue 29): ``handle``'s table
of Produce and Fetch handlers, and a follower's Fetch without an authorizer
(``_handle_fetch_lean``, answered by ``_follower_respond``); and the ReplicaManager's
(``append_records`` of one partition, the fetch's). Two brokers, one with ``lean``
off, get the same requests (produces, followers' and consumers' fetches with and without
sessions, at offsets in and out of the log, old and new leader epochs, time passing); they
must write the same bytes and keep the same replica state and metrics."""

from __future__ import annotations

import random
import struct
import uuid

import pytest

from broker.metrics import BrokerTopicStats, RequestMetrics
from broker.replication_quota import ReplicationQuotas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import APIS
from protocol.records import Record, build_batch

from .test_apis import Broker

TOPIC_ID = uuid.UUID(int=7)
OTHER_ID = uuid.UUID(int=8)
ALONE_ID = uuid.UUID(int=9)


def _setup(tmp_path, name: str, lean: bool) -> Broker:
    b = Broker(tmp_path / name, request_metrics=RequestMetrics())
    if not lean:
        b.apis.lean = False
        b.apis._served = b.apis._hot_handlers()
        b.rm.lean = False  # (ReplicaManager's lean cases too: append_records' one partition, the fetch's)
        b.rm.fetch_purgatory.lean = False  # (and the Fetch purgatory's: force_complete, check_appended's reached)
    b.rm.topic_stats = BrokerTopicStats()
    b.apis.fetch_manager.cache._random.seed(1)  # the same session ids on both
    parts = [(0, 1, 1, [1, 2, 3])]
    others = [(0, 1, 1, [1, 2]), (1, 1, 1, [1, 2])]
    alone = [(0, 1, 1, [1])]  # (an acks=all produce the ISR has at once)
    assert b.update_metadata([("t", TOPIC_ID, parts, {}), ("u", OTHER_ID, others, {}), ("v", ALONE_ID, alone, {})],
                             brokers=(1, 2, 3)) == ErrorCode.NONE
    assert b.leader_and_isr("t", TOPIC_ID, parts).error_code == ErrorCode.NONE
    assert b.leader_and_isr("u", OTHER_ID, others).error_code == ErrorCode.NONE
    assert b.leader_and_isr("v", ALONE_ID, alone).error_code == ErrorCode.NONE
    # KIP-73's leader quota, on and off by the driver's "quota" step (ReplicationQuotas with
    # "*" for t and u; a rate low enough to be exceeded): what it records is compared (_state)
    quotas = b.quotas = ReplicationQuotas(1, b.time, leader_rate=400)
    quotas.leader.update_topic("t", "*", 1)
    quotas.leader.update_topic("u", "*", 1)
    b.recorded = []
    record = quotas.leader.record
    quotas.leader.record = lambda size, now_ms=None: (b.recorded.append(size), record(size, now_ms))[1]
    return b


def _frames(b: Broker) -> list[bytes]:
    data = b"".join(bytes(x) for x in b.transport.written)
    b.transport.written.clear()
    out = []
    while data:
        (size,) = struct.unpack_from(">i", data)
        out.append(data[:4 + size])
        data = data[4 + size:]
    return out


class _Driver:
    """Random steps, the same for both brokers; a follower's session as the lean broker answers it."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.sessions: dict[int, tuple[int, int]] = {}  # replica -> (session id, next epoch)
        self.produced = 0

    def step(self):
        r = self.random
        kind = r.choice(["produce", "produce", "follower", "follower", "follower", "follower", "consumer", "sleep",
                         "quota"])
        if kind == "quota":
            return "quota", 0, None
        if kind == "produce":
            n = r.randint(1, 3)
            records = build_batch([Record(value=b"v" * r.randint(1, 50), timestamp=1) for _ in range(n)])
            topic, acks = r.choice([("t", 1), ("t", -1), ("t", -1), ("t", -1), ("t", 0), ("u", -1), ("v", -1), ("v", 1),
                                    ("x", -1), ("x", 1)])
            return ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": acks, "timeout_ms": r.choice([1000, 300]),
                                       "topic_data": [{"name": topic, "partition_data": [
                                           {"index": 0, "records": records}]}]}
        if kind == "sleep":
            return "sleep", r.choice([100, 600]), None
        replica = r.choice([2, 3, 3, 2, 4]) if kind == "follower" else -1
        which = r.choice([[("t", 0)], [("t", 0)], [("t", 0)], [("u", 0), ("u", 1)], [("t", 0), ("u", 0)], [("x", 0)]])
        mode = r.choice(["incremental", "incremental", "incremental", "full", "sessionless", "stale", "unknown"])
        session_id, epoch = 0, -1
        if mode == "full":
            epoch = 0
        elif mode in ("incremental", "stale", "unknown") and replica in self.sessions:
            session_id, epoch = self.sessions[replica]
            if mode == "stale":
                epoch += 5
            elif mode == "unknown":
                session_id += 1
        return ApiKey.FETCH, r.choice([11, 11, 9, 7, 4]), {
            "replica_id": replica, "max_wait_ms": r.choice([500, 500, 0]), "min_bytes": r.choice([1, 1, 200]),
            "max_bytes": r.choice([1 << 20, 100]), "isolation_level": r.choice([0, 1]),
            "session_id": session_id, "session_epoch": epoch, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": t, "partitions": [{
                "partition": p, "current_leader_epoch": r.choice([-1, 1, 1, 0, 2]),
                "fetch_offset": r.choice(["leo", "leo", "leo", "low", "past"]),
                "log_start_offset": 0, "partition_max_bytes": r.choice([1 << 20, 1 << 20, 60])}]}
                for t, p in which]}

    def learn(self, fetches: dict[int, tuple[dict, int]], frames: list[bytes]) -> None:
        """The followers' next session epochs, from the answers to their fetches (``fetches``:
        correlation id -> (request, version))."""
        for frame in frames:
            request, version = fetches.pop(struct.unpack_from(">i", frame, 4)[0], (None, 0))
            if request is None or request["replica_id"] < 0 or version < 7:
                continue
            response = APIS[ApiKey.FETCH].response.parse(version, frame, 8)
            if response.session_id:
                old = self.sessions.get(request["replica_id"])
                epoch = 1 if old is None or old[0] != response.session_id else old[1] + 1
                self.sessions[request["replica_id"]] = (response.session_id, epoch)


def _offsets(b: Broker, request: dict) -> None:
    """The symbolic fetch offsets of ``request`` made real, on the lean broker's log (the same)."""
    for topic in request["topics"]:
        for p in topic["partitions"]:
            if isinstance(p["fetch_offset"], str):
                partition = b.rm.partitions.get((topic["topic"], p["partition"]))
                leo = partition.log.log_end_offset if partition is not None else 0
                p["fetch_offset"] = {"leo": leo, "low": max(0, leo - 2), "past": leo + 5}[p["fetch_offset"]]


def _state(b: Broker):
    out = []
    for key, partition in sorted(b.rm.partitions.items()):
        log_ = partition.log
        out.append((key, log_.log_end_offset, log_.high_watermark, sorted(partition.partition_state.isr),
                    [(rid, r.log_end_offset, r.last_caught_up_time_ms, r.last_fetch_time_ms)
                     for rid, r in sorted(partition.remote_replicas.items())]))
    stats = b.rm.topic_stats
    out.append(sorted((name, s.fetch_requests, s.failed_fetch, s.replication_bytes_out, s.bytes_out)
                      for name, s in stats.topics.items()))
    sessions = b.apis.fetch_manager.cache.sessions
    out.append(sorted((s.id, s.epoch, list(s.partitions)) for s in sessions.values()))
    out.append((len(b.rm.fetch_purgatory._watchers), len(b.rm.produce_purgatory._watchers), b.apis._quota_exempt))
    metrics = b.apis.request_metrics.by_key
    out.append((sorted(metrics[ApiKey.FETCH].errors.items()), sorted(metrics[ApiKey.PRODUCE].errors.items())))
    out.append((b.recorded, b.quotas.leader.rate._total, b.quotas.leader.throttled_fetches))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_the_lean_apis_paths_answer_as_the_general_path(tmp_path, seed):
    lean, general = _setup(tmp_path, "lean", True), _setup(tmp_path, "general", False)
    try:
        driver = _Driver(seed)
        fetches: dict[int, tuple[dict, int]] = {}
        for i in range(120):
            api_key, version, body = driver.step()
            if api_key == "quota":  # KIP-73's leader quota on, or off
                for b in (lean, general):
                    b.rm.replication_quotas = b.quotas if b.rm.replication_quotas is None else None
            elif api_key == "sleep":
                lean.time.sleep(version)
                general.time.sleep(version)
            else:
                if api_key == ApiKey.FETCH:
                    _offsets(lean, body)
                correlation_id = lean.send(api_key, version, body)
                general.send(api_key, version, body)
                if api_key == ApiKey.FETCH:
                    fetches[correlation_id] = (body, version)
            frames = _frames(lean)
            assert frames == _frames(general), (i, api_key, version, body)
            driver.learn(fetches, frames)
            assert _state(lean) == _state(general), (i, api_key, version, body)
    finally:
        lean.close()
        general.close()


def test_the_lean_paths_are_taken(tmp_path):
    """The lean cases are what a follower's fetches and the produces take (else the comparison
    above compares the general path with itself)."""
    b = _setup(tmp_path, "b", True)
    try:
        taken = []
        b.apis._handle = lambda ctx: taken.append("general")  # type: ignore[method-assign]
        b.apis._handle_fetch = lambda *a: taken.append("general fetch")  # type: ignore[method-assign]
        new_context = b.apis.fetch_manager.new_context
        b.apis.fetch_manager.new_context = (  # type: ignore[method-assign]
            lambda *a: (taken.append("follower"), new_context(*a))[1])
        b.send(ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_batch([Record(value=b"v", timestamp=1)])}]}]})
        b.send(ApiKey.FETCH, 11, {
            "replica_id": 2, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": 0, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 1, "fetch_offset": 0,
                                                      "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        b.send(ApiKey.API_VERSIONS, 0, {})
        assert taken == ["follower", "general"]
        assert len(_frames(b)) == 2
    finally:
        b.close()


def test_handle_follows_a_handler_replaced(tmp_path):
    """handle's table is rebuilt when ``handlers`` changes: a wrapper put in place of Produce's or
    Fetch's handler is what their requests get (as through _handle), and Fetch's lean handler
    comes back with handle_fetch_request."""
    b = _setup(tmp_path, "b", True)
    try:
        called = []
        produce, fetch = b.apis.handlers[ApiKey.PRODUCE], b.apis.handlers[ApiKey.FETCH]
        b.apis.handlers[ApiKey.PRODUCE] = lambda ctx: (called.append("produce"), produce(ctx))[1]
        b.apis.handlers[ApiKey.FETCH] = lambda ctx: (called.append("fetch"), fetch(ctx))[1]
        general = b.apis._handle
        b.apis._handle = lambda ctx: (called.append("general"), general(ctx))[1]  # type: ignore[method-assign]
        follower_fetch = {
            "replica_id": 2, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 1, "fetch_offset": 0,
                                                      "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}]}
        b.send(ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_batch([Record(value=b"v", timestamp=1)])}]}]})
        b.send(ApiKey.FETCH, 11, follower_fetch)
        assert called == ["produce", "fetch"]
        assert len(_frames(b)) == 2
        # back to the broker's own: Fetch's lean handler again
        b.apis.handlers[ApiKey.FETCH] = fetch
        assert b.apis._served[(ApiKey.FETCH, 11)] == b.apis._handle_fetch_lean
        b.send(ApiKey.FETCH, 11, follower_fetch)
        assert called == ["produce", "fetch"]
        assert len(_frames(b)) == 1
        # removed: through _handle (which answers it as unsupported)
        del b.apis.handlers[ApiKey.PRODUCE]
        b.send(ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": []})
        assert called == ["produce", "fetch", "general"]
    finally:
        b.close()


def test_fetch_params_cannot_be_changed(tmp_path):
    """A follower's FetchParams are cached and shared by its fetches (and the parked ones): no
    attribute of any FetchParams can be set or deleted once made."""
    from broker.fetch_params import FetchParams
    from broker.partition import FETCH_LOG_END

    params = FetchParams(2, 500, 1, 1 << 20, 0)
    assert (params.replica_id, params.max_wait_ms, params.min_bytes, params.max_bytes, params.isolation,
            params.require_leader) == (2, 500, 1, 1 << 20, FETCH_LOG_END, True)
    with pytest.raises(AttributeError, match="never changed"):
        params.min_bytes = 2
    with pytest.raises(AttributeError, match="never changed"):
        del params.max_wait_ms
    with pytest.raises(AttributeError):
        params.other = 1  # type: ignore[attr-defined]
    assert params.min_bytes == 1 and params.max_wait_ms == 500


def test_requests_held_until_live_are_answered_in_order_after(tmp_path):
    """hold_until_live empties handle's table (every request through _handle, which holds them)
    and live() rebuilds it: a Produce and a follower's Fetch sent before live() are held, then
    answered in the order they came; a handler replaced meanwhile is the one live() puts in."""
    b = _setup(tmp_path, "b", True)
    try:
        b.apis.hold_until_live()
        assert b.apis._served == {}
        called = []
        produce = b.apis.handlers[ApiKey.PRODUCE]
        b.apis.handlers[ApiKey.PRODUCE] = lambda ctx: (called.append("produce"), produce(ctx))[1]
        assert b.apis._served == {}  # (still held: the change leaves the table empty)
        first = b.send(ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_batch([Record(value=b"v", timestamp=1)])}]}]})
        second = b.send(ApiKey.FETCH, 11, {
            "replica_id": 2, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 1, "fetch_offset": 0,
                                                      "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        assert _frames(b) == [] and called == []
        b.apis.live()
        assert b.apis._served == b.apis._hot_handlers() and b.apis._served
        assert b.apis._served[(ApiKey.PRODUCE, 8)] is b.apis.handlers[ApiKey.PRODUCE]
        frames = _frames(b)
        assert [struct.unpack_from(">i", f, 4)[0] for f in frames] == [first, second]
        assert called == ["produce"]
        produced = APIS[ApiKey.PRODUCE].response.parse(8, frames[0], 8)
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        fetched = APIS[ApiKey.FETCH].response.parse(11, frames[1], 8)
        assert fetched.responses[0].partitions[0].records  # (the record produced before it)
    finally:
        b.close()


def test_a_followers_answer_counts_its_throttled_partitions_bytes_against_the_leader_quota() -> None:
    """KIP-73's leader side (apis._record_leader_quota, called by the general and the lean
    answer alike, so the comparisons above cannot see it): the records of throttled partitions
    only, none for an empty answer."""
    from broker.apis import _record_leader_quota
    from broker.replication_quota import ReplicationQuotaManager
    from protocol.clock import MockTime
    from protocol.fast_codecs import FetchPartitionData

    quota = ReplicationQuotaManager("leader", MockTime(), samples=2, window_seconds=1, bound=100)
    quota.throttled = {"t": frozenset({0}), "u": None}
    results = [("t", [FetchPartitionData(0, 0, 0, 0, 0, b"x" * 7), FetchPartitionData(1, 0, 0, 0, 0, b"y" * 50)]),
               ("u", [FetchPartitionData(3, 0, 0, 0, 0, b"z" * 11), FetchPartitionData(4, 0, 0, 0, 0, None)]),
               ("v", [FetchPartitionData(0, 0, 0, 0, 0, b"w" * 90)])]
    _record_leader_quota(quota, results)
    assert quota.byte_rate() == pytest.approx(18 / 1.0)
