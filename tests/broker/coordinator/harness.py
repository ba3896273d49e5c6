"""A group coordinator on a MockTime, with an in-memory ``__consumer_offsets`` behind its append,
and helpers that speak to it the way KafkaApis will: requests built and parsed with the real
schemas, responses built and parsed back with the response schema (so every body the
coordinator produces is known to encode)."""

from __future__ import annotations

from collections import defaultdict

from protocol.api_keys import ApiKey
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.messages import APIS
from protocol.messages.consumer_protocol import encode_assignment, encode_subscription

from broker.coordinator import GroupCoordinatorAdapter, GroupCoordinatorConfig
from broker.coordinator.group_metadata_manager import TxnMarker, TxnRecord

from tests.protocol.kafka_values import plain

E = ErrorCode


class FakeOffsetsLog:
    """``__consumer_offsets`` partitions as lists of (key, value). Appends complete at once with
    ``error`` (default NONE; a successful one is also written), or wait in ``pending`` when
    ``hold`` is set, until ``release()``."""

    def __init__(self) -> None:
        self.partitions: dict[int, list] = defaultdict(list)
        self.hold = False
        self.error = ErrorCode.NONE
        self.pending: list = []
        self.appends: list = []
        self.deferred_reads: list | None = None

    def append(self, partition, records, callback, producer=None) -> None:
        """``producer`` (id, epoch): a transactional batch (TxnOffsetCommit): its records are
        kept as TxnRecords, as the real log's reader hands them back."""
        if producer is not None:
            records = [TxnRecord(producer[0], k, v) for k, v in records]
        self.appends.append((partition, list(records)))
        if self.hold:
            self.pending.append((partition, list(records), callback))
        else:
            self._complete(partition, records, callback, self.error)

    def _complete(self, partition, records, callback, error) -> None:
        if error == ErrorCode.NONE:
            self.partitions[partition].extend(records)
        callback(error)

    def release(self, error=ErrorCode.NONE, count=None) -> None:
        n = len(self.pending) if count is None else count
        batch, self.pending = self.pending[:n], self.pending[n:]
        for partition, records, callback in batch:
            self._complete(partition, records, callback, error)

    def read_partition(self, partition, done) -> None:
        """The coordinator's ``read_partition``: the partition's records at once, unless reads are
        deferred (then ``deferred_reads`` collects (partition, done) for the test to answer)."""
        if self.deferred_reads is not None:
            self.deferred_reads.append((partition, done))
        else:
            done(list(self.partitions[partition]))


class Reply:
    """The response a callback delivered: ``body`` (parsed back from the built bytes), or None yet."""

    def __init__(self, api, version) -> None:
        self.api = api
        self.version = version
        self.body = None
        self.count = 0

    def __call__(self, body) -> None:
        self.count += 1
        data = self.api.response.build(self.version, body)
        self.body = plain(self.api.response.parse(self.version, data))

    @property
    def done(self) -> bool:
        return self.body is not None

    @property
    def error(self):
        assert self.body is not None, "no response yet"
        return self.body["error_code"]

    def __getitem__(self, key):
        assert self.body is not None, "no response yet"
        return self.body[key]


def subscription(*topics: str) -> bytes:
    return encode_subscription({"topics": list(topics), "user_data": None}, 0)


def assignment(**topics) -> bytes:
    return encode_assignment({"assigned_partitions": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                              "user_data": None}, 0)


class Cluster:
    """One broker's coordinator, leading every ``__consumer_offsets`` partition (or ``owned``)."""

    def __init__(self, config: GroupCoordinatorConfig | None = None, owned=None, start=True, expiration=False,
                 partition_exists=None) -> None:
        self.time = MockTime()
        self.log = FakeOffsetsLog()
        self.config = config or GroupCoordinatorConfig(offsets_topic_num_partitions=4)
        self.coordinator = GroupCoordinatorAdapter(self.config, self.time, lambda *a: self.log.append(*a),
                                                   lambda *a: self.log.read_partition(*a), partition_exists)
        if start:
            self.coordinator.startup(enable_metadata_expiration=expiration)
            for p in (range(self.config.offsets_topic_num_partitions) if owned is None else owned):
                self.elect(p)

    @property
    def core(self):
        return self.coordinator.coordinator

    def elect(self, partition, epoch=None) -> None:
        self.coordinator.on_elected(partition, epoch)

    def group(self, group_id):
        return self.core.group_manager.get_group(group_id)

    def sleep(self, ms) -> None:
        self.time.sleep(ms)

    def sleep_until(self, condition, step=100, limit=600_000) -> int:
        """Advance the clock in ``step``s until ``condition()``; returns the time that took."""
        waited = 0
        while not condition():
            assert waited < limit, "condition never came true"
            self.time.sleep(step)
            waited += step
        return waited

    # -- requests --------------------------------------------------------------------------
    def _call(self, key, method, version, request, *extra):
        api = APIS[key]
        req = api.request.parse(version, api.request.build(version, request))
        reply = Reply(api, version)
        getattr(self.coordinator, method)(req, version, *extra, reply)
        return reply

    def join(self, group="g", member_id="", protocols=(("range", b"m"),), session=10000, rebalance=30000,
             instance=None, version=5, protocol_type="consumer", client_id="client", reason=None) -> Reply:
        req = {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
               "member_id": member_id, "group_instance_id": instance, "protocol_type": protocol_type,
               "protocols": [{"name": n, "metadata": m} for n, m in protocols], "reason": reason}
        return self._call(ApiKey.JOIN_GROUP, "join_group", version, req, client_id, "/127.0.0.1")

    def sync(self, group="g", generation=1, member_id="", assignments=None, instance=None, version=3,
             protocol_type=None, protocol_name=None) -> Reply:
        req = {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance,
               "protocol_type": protocol_type, "protocol_name": protocol_name,
               "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]}
        return self._call(ApiKey.SYNC_GROUP, "sync_group", version, req)

    def heartbeat(self, group="g", generation=1, member_id="", instance=None, version=3) -> Reply:
        req = {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance}
        return self._call(ApiKey.HEARTBEAT, "heartbeat", version, req)

    def leave(self, group="g", member_id="", members=None, version=3) -> Reply:
        if version < 3:
            req = {"group_id": group, "member_id": member_id}
        else:
            members = members if members is not None else [(member_id, None)]
            req = {"group_id": group, "members": [{"member_id": m, "group_instance_id": i} for m, i in members]}
        return self._call(ApiKey.LEAVE_GROUP, "leave_group", version, req)

    def txn_commit(self, group="g", offsets=None, producer_id=1000, producer_epoch=0, generation=-1, member_id="",
                   instance=None, version=3, transactional_id="tx") -> Reply:
        """TxnOffsetCommit; ``offsets``: {(topic, partition): offset}."""
        topics: dict = {}
        for (t, p), offset in (offsets or {}).items():
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
        req = {"transactional_id": transactional_id, "group_id": group, "producer_id": producer_id,
               "producer_epoch": producer_epoch, "generation_id": generation, "member_id": member_id,
               "group_instance_id": instance, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        return self._call(ApiKey.TXN_OFFSET_COMMIT, "txn_offset_commit", version, req)

    def marker(self, producer_id=1000, commit=True, group="g") -> None:
        """The producer's COMMIT/ABORT marker written to ``group``'s __consumer_offsets partition."""
        partition = self.coordinator.partition_for(group)
        self.log.partitions[partition].append(TxnMarker(producer_id, commit))
        self.coordinator.on_transaction_completed(producer_id, commit, [("__consumer_offsets", partition)])

    def commit(self, group="g", offsets=None, generation=-1, member_id="", instance=None, version=7,
               retention=-1, leader_epoch=-1) -> Reply:
        """``offsets``: {(topic, partition): offset or (offset, metadata)}."""
        topics: dict = {}
        for (t, p), v in (offsets or {}).items():
            offset, metadata = v if isinstance(v, tuple) else (v, "")
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": offset,
                                             "committed_leader_epoch": leader_epoch, "committed_metadata": metadata})
        req = {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
               "group_instance_id": instance, "retention_time_ms": retention,
               "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        return self._call(ApiKey.OFFSET_COMMIT, "offset_commit", version, req)

    def fetch(self, group="g", partitions=None, version=5, require_stable=False) -> Reply:
        """``partitions``: [(topic, partition)], or None for all."""
        if partitions is None:
            topics = None
        else:
            by_topic: dict = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        if version >= 8:
            req = {"groups": [{"group_id": group, "topics": topics}], "require_stable": require_stable}
        else:
            req = {"group_id": group, "topics": topics, "require_stable": require_stable}
        return self._call(ApiKey.OFFSET_FETCH, "offset_fetch", version, req)

    def committed(self, group="g", partitions=None) -> dict:
        """{(topic, partition): offset} from an OffsetFetch v5 (asserting no errors)."""
        reply = self.fetch(group, partitions)
        assert reply.error == 0, reply.body
        out = {}
        for t in reply["topics"]:
            for p in t["partitions"]:
                assert p["error_code"] == 0, reply.body
                out[(t["name"], p["partition_index"])] = p["committed_offset"]
        return out

    def offset_delete(self, group="g", partitions=()) -> Reply:
        by_topic: dict = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append({"partition_index": p})
        req = {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        return self._call(ApiKey.OFFSET_DELETE, "offset_delete", 0, req)

    def list_groups(self, states=(), version=4, types=()) -> Reply:
        return self._call(ApiKey.LIST_GROUPS, "list_groups", version,
                          {"states_filter": list(states), "types_filter": list(types)})

    def describe(self, *groups, version=5, include_ops=False) -> Reply:
        return self._call(ApiKey.DESCRIBE_GROUPS, "describe_groups", version,
                          {"groups": list(groups), "include_authorized_operations": include_ops})

    def delete_groups(self, *groups, version=2) -> Reply:
        return self._call(ApiKey.DELETE_GROUPS, "delete_groups", version, {"groups_names": list(groups)})

    # -- whole flows -------------------------------------------------------------------------
    def join_new(self, group="g", **kw) -> str:
        """A KIP-394 first join: returns the member id the coordinator handed out."""
        reply = self.join(group, **kw)
        assert reply.error == E.MEMBER_ID_REQUIRED, reply.body
        return reply["member_id"]

    def stable_group(self, n=1, group="g", topics=("t",), session=10000, rebalance=30000) -> list[str]:
        """``n`` members joined, synced and Stable; returns their member ids, the leader first."""
        ids = [self.join_new(group, session=session, rebalance=rebalance) for _ in range(n)]
        replies = [self.join(group, member_id=m, session=session, rebalance=rebalance,
                             protocols=(("range", subscription(*topics)),)) for m in ids]
        self.sleep_until(lambda: all(r.done for r in replies))
        assert all(r.error == 0 for r in replies), [r.body for r in replies]
        leader = replies[0]["leader"]
        generation = replies[0]["generation_id"]
        ids = [leader] + [m for m in ids if m != leader]
        syncs = [self.sync(group, generation, m, {x: assignment(t=[i]) for i, x in enumerate(ids)} if m == leader else {})
                 for m in ids]
        assert all(s.error == 0 for s in syncs), [s.body for s in syncs]
        assert str(self.group(group).state) == "Stable"
        return ids
