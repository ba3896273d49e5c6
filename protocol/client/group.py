"""Consumer groups on the client side: the classic protocol (Kafka's ConsumerCoordinator).

``GroupConsumer`` subscribes to topics as a member of a group: it finds the group's
coordinator (FindCoordinator), joins (JoinGroup, answering MEMBER_ID_REQUIRED with the id it
is given), and when it is the leader computes the assignment with the protocol the group
chose (``range`` or ``roundrobin``, Kafka's RangeAssignor and RoundRobinAssignor) and sends it
in SyncGroup. It then fetches its partitions with a ``Consumer``, from the committed offsets
(OffsetFetch) or per ``auto_offset_reset``. A heartbeat task keeps the membership
(``heartbeat_interval_ms``); when the coordinator answers REBALANCE_IN_PROGRESS the next
``getmany`` first commits what was consumed (commit before revoke), then rejoins. ``commit``
sends the positions of the records returned so far (OffsetCommit with the generation and
member id); ``close`` commits, leaves the group (LeaveGroup) and stops.

The assignors are plain functions (``range_assign``, ``roundrobin_assign``) over the members'
subscriptions and the topics' partition counts.

Group-level helpers for tools (``kbroker groups``) live in ``GroupAdmin``: list, describe,
committed offsets, delete and commit offsets for a group with no members.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Iterable, Mapping

from ..api_keys import ApiKey
from ..errors import ErrorCode, KafkaError
from ..messages.consumer_protocol import (PROTOCOL_TYPE, decode_assignment, decode_subscription, encode_assignment,
                                          encode_subscription)
from .clock import sleep
from .cluster import KafkaClient
from .connection import BrokerConnection, KafkaConnectionError, wire_error
from .consumer import Consumer, ConsumerRecord
from .metadata import TopicPartition

log = logging.getLogger("kbroker.client.group")

ASSIGNORS = ("range", "roundrobin")
_RETRY_COORDINATOR = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
_REJOIN = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID,
                     ErrorCode.FENCED_INSTANCE_ID})


# -- assignors ------------------------------------------------------------------------------------

def range_assign(subscriptions: Mapping[str, list[str]], partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, its partitions split into contiguous ranges over the
    members subscribed to it (sorted by member id), the first ``n % members`` one larger."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        n = partitions.get(topic, 0)
        per, extra = divmod(n, len(members))
        start = 0
        for i, member in enumerate(members):
            count = per + (1 if i < extra else 0)
            out[member] += [TopicPartition(topic, p) for p in range(start, start + count)]
            start += count
    return out


def roundrobin_assign(subscriptions: Mapping[str, list[str]],
                      partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RoundRobinAssignor: every partition of every subscribed topic, sorted, dealt in
    turn to the members (sorted by member id), skipping members not subscribed to its topic."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return out
    all_tps = [TopicPartition(t, p) for t in sorted({t for ts in subscriptions.values() for t in ts})
               for p in range(partitions.get(t, 0))]
    i = 0
    for tp in all_tps:
        for _ in range(len(members)):
            member = members[i % len(members)]
            i += 1
            if tp.topic in subscriptions[member]:
                out[member].append(tp)
                break
    return out


_ASSIGN = {"range": range_assign, "roundrobin": roundrobin_assign}


def decode_member_assignment(data: bytes | None) -> list[TopicPartition]:
    if not data:
        return []
    value = decode_assignment(data)
    return [TopicPartition(a.topic, p) for a in value.assigned_partitions for p in a.partitions]


# -- the coordinator connection -------------------------------------------------------------------

async def find_coordinator(client: KafkaClient, group_id: str, timeout_ms: int = 30000) -> BrokerConnection:
    """A connection to the group's coordinator (FindCoordinator retried while it is being set up)."""
    deadline = client.time.monotonic_ms() + timeout_ms
    while True:
        conn = await client.any_connection(coordinator=True)
        r = await conn.request(ApiKey.FIND_COORDINATOR, {"key": group_id, "key_type": 0},
                               conn.version_for(ApiKey.FIND_COORDINATOR, max_v=3))
        if r.error_code == ErrorCode.NONE:
            node_id: int = r.node_id
            return await client.coordinator_connection(node_id)  # (not behind a parked Fetch)
        if r.error_code not in _RETRY_COORDINATOR or client.time.monotonic_ms() > deadline:
            raise wire_error(r.error_code, f"FindCoordinator for group {group_id!r}", r.error_message)
        await sleep(client.time, 100)


# -- the member -----------------------------------------------------------------------------------

class GroupConsumer:
    def __init__(self, client: KafkaClient, group_id: str, topics: Iterable[str], *, session_timeout_ms: int = 10000,
                 rebalance_timeout_ms: int = 60000, heartbeat_interval_ms: int = 1000,
                 assignors: Iterable[str] = ASSIGNORS, auto_offset_reset: str = "earliest",
                 client_id: str | None = None, isolation_level: int = 0) -> None:
        self.client = client
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.assignors = [a for a in assignors if a in _ASSIGN]
        if not self.assignors:
            raise ValueError(f"no known assignor among {list(assignors)} (known: {', '.join(ASSIGNORS)})")
        self.consumer = Consumer(client, auto_offset_reset=auto_offset_reset, isolation_level=isolation_level)
        self.member_id = ""
        self.generation_id = -1
        self.protocol: str | None = None
        self.leader = False
        self.assignment: list[TopicPartition] = []
        self._coordinator: BrokerConnection | None = None
        self._consumed: dict[TopicPartition, int] = {}  # next offset after what getmany returned
        self._committed: dict[TopicPartition, int] = {}
        self._rejoin = True
        self._heartbeat: asyncio.Task[None] | None = None
        self._closed = False

    # -- membership ----------------------------------------------------------------------------
    async def _coord(self) -> BrokerConnection:
        if self._coordinator is None or not self._coordinator.connected:
            self._coordinator = await find_coordinator(self.client, self.group_id)
        return self._coordinator

    async def _request(self, api_key: int, body: Mapping[str, Any], max_v: int) -> Any:
        conn = await self._coord()
        try:
            return await conn.request(api_key, body, conn.version_for(api_key, max_v=max_v))
        except KafkaConnectionError:
            self._coordinator = None
            raise

    async def _join(self) -> None:
        """JoinGroup (+ SyncGroup) until a member of a stable generation."""
        partitions = {t: len(await self.client.partitions_for(t)) for t in self.topics}
        metadata = encode_subscription({"topics": self.topics, "user_data": None}, 0)
        while True:
            try:
                r = await self._request(ApiKey.JOIN_GROUP, {
                    "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                    "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                    "group_instance_id": None, "protocol_type": PROTOCOL_TYPE,
                    "protocols": [{"name": a, "metadata": metadata} for a in self.assignors]}, 5)
            except KafkaConnectionError:
                await sleep(self.client.time, 100)
                continue
            if r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if r.error_code in _RETRY_COORDINATOR:
                self._coordinator = None
                await sleep(self.client.time, 100)
                continue
            if r.error_code != ErrorCode.NONE:
                raise wire_error(r.error_code, f"JoinGroup of group {self.group_id!r}")
            self.member_id, self.generation_id, self.protocol = r.member_id, r.generation_id, r.protocol_name
            self.leader = r.leader == r.member_id
            assignments: list[dict[str, Any]] = []
            if self.leader:
                subscriptions = {m.member_id: list(decode_subscription(m.metadata).topics) for m in r.members}
                for topic in {t for ts in subscriptions.values() for t in ts} - set(partitions):
                    partitions[topic] = len(await self.client.partitions_for(topic))
                assigned = _ASSIGN[self.protocol or "range"](subscriptions, partitions)
                for member, tps in assigned.items():
                    by_topic: dict[str, list[int]] = {}
                    for tp in tps:
                        by_topic.setdefault(tp.topic, []).append(tp.partition)
                    assignments.append({"member_id": member, "assignment": encode_assignment(
                        {"assigned_partitions": [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())],
                         "user_data": None}, 0)})
            s = await self._request(ApiKey.SYNC_GROUP, {
                "group_id": self.group_id, "generation_id": self.generation_id, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": PROTOCOL_TYPE, "protocol_name": self.protocol,
                "assignments": assignments}, 3)
            if s.error_code in _REJOIN or s.error_code in _RETRY_COORDINATOR:
                if s.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue
            if s.error_code != ErrorCode.NONE:
                raise wire_error(s.error_code, f"SyncGroup of group {self.group_id!r}")
            await self._assign(decode_member_assignment(s.assignment))
            self._rejoin = False
            log.info("group %s generation %d: member %s assigned %s", self.group_id, self.generation_id,
                     self.member_id, ", ".join(f"{tp.topic}-{tp.partition}" for tp in self.assignment) or "nothing")
            return

    async def _assign(self, tps: list[TopicPartition]) -> None:
        self.assignment = sorted(tps)
        self.consumer.assign(self.assignment)
        self._consumed = {tp: o for tp, o in self._consumed.items() if tp in tps}
        committed = await self.committed()
        for tp in self.assignment:
            if tp in self._consumed:
                self.consumer.seek(tp, self._consumed[tp])
            elif committed.get(tp, -1) >= 0:
                self.consumer.seek(tp, committed[tp])

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            await sleep(self.client.time, self.heartbeat_interval_ms)
            if self._rejoin or self._closed:
                continue
            try:
                r = await self._request(ApiKey.HEARTBEAT, {"group_id": self.group_id, "generation_id": self.generation_id,
                                                           "member_id": self.member_id, "group_instance_id": None}, 3)
            except KafkaError:
                continue
            if r.error_code in _REJOIN:
                if r.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self._rejoin = True
            elif r.error_code in _RETRY_COORDINATOR:
                self._coordinator = None

    @property
    def stable(self) -> bool:
        """A member of a generation with its assignment, no rejoin pending."""
        return self.generation_id >= 0 and not self._rejoin

    # -- consuming -----------------------------------------------------------------------------
    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records of the assigned partitions, waiting up to ``timeout_ms`` for some; a rebalance
        the heartbeats learn of meanwhile is joined at once (after committing what was consumed)."""
        if self._heartbeat is None:
            self._heartbeat = asyncio.ensure_future(self._heartbeat_loop())
        time = self.client.time
        deadline = time.monotonic_ms() + timeout_ms
        while True:
            if self._rejoin:
                if self.generation_id >= 0:
                    await self._commit_quietly()  # commit before revoke
                await self._join()
            # Rounded up: a wait of less than a millisecond rounded down to 0 would spin until the
            # deadline without yielding to the clock (the simulator's seed 2 never got past it).
            wait = math.ceil(max(0.0, min(deadline - time.monotonic_ms(), self.heartbeat_interval_ms)))
            if not self.assignment:
                await sleep(time, wait)
                batch: dict[TopicPartition, list[ConsumerRecord]] = {}
            else:
                batch = await self.consumer.getmany(wait)
            if batch or time.monotonic_ms() >= deadline:
                break
        for tp, records in batch.items():
            if records:
                self._consumed[tp] = records[-1].offset + 1
        return batch

    # -- offsets -------------------------------------------------------------------------------
    async def committed(self) -> dict[TopicPartition, int]:
        r = await self._request(ApiKey.OFFSET_FETCH, {"group_id": self.group_id, "topics": None}, 5)
        if r.error_code:
            raise wire_error(r.error_code, f"OffsetFetch of group {self.group_id!r}")
        return {TopicPartition(t.name, p.partition_index): p.committed_offset for t in r.topics for p in t.partitions}

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: the positions after the records returned so far)."""
        offsets = dict(self._consumed if offsets is None else offsets)
        offsets = {tp: o for tp, o in offsets.items() if self._committed.get(tp) != o}
        if not offsets:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": offset,
                                                      "committed_metadata": ""})
        r = await self._request(ApiKey.OFFSET_COMMIT, {
            "group_id": self.group_id, "generation_id_or_member_epoch": self.generation_id, "member_id": self.member_id,
            "group_instance_id": None, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}, 7)
        for t in r.topics:
            for p in t.partitions:
                if p.error_code in _REJOIN:
                    self._rejoin = True
                if p.error_code:
                    raise wire_error(p.error_code, f"OffsetCommit of {t.name}-{p.partition_index} in {self.group_id!r}")
        self._committed.update(offsets)

    async def _commit_quietly(self) -> None:
        try:
            await self.commit()
        except KafkaError as exc:
            log.warning("group %s: commit before rejoining failed: %s", self.group_id, exc)

    async def close(self, commit: bool = True) -> None:
        """Commit (unless told not to), leave the group, stop heartbeating."""
        self._closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self.consumer.close()
        if self.generation_id >= 0:
            if commit:
                await self._commit_quietly()
            try:
                await self._request(ApiKey.LEAVE_GROUP, {"group_id": self.group_id, "member_id": self.member_id,
                                                         "members": [{"member_id": self.member_id}]}, 3)
            except KafkaError as exc:
                log.warning("group %s: LeaveGroup failed: %s", self.group_id, exc)


# -- groups as tools see them ---------------------------------------------------------------------

class GroupAdmin:
    """``kbroker groups``: what kafka-consumer-groups.sh asks brokers."""

    def __init__(self, client: KafkaClient) -> None:
        self.client = client

    async def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group: ListGroups to every broker (each
        answers for the groups it coordinates)."""
        await self.client.refresh_metadata()
        out: dict[str, tuple[str, str, str]] = {}
        for node_id in sorted(self.client.cluster.brokers):
            conn = await self.client.connection(node_id)
            r = await conn.request(ApiKey.LIST_GROUPS, {"states_filter": []}, conn.version_for(ApiKey.LIST_GROUPS, max_v=4))
            if r.error_code:
                raise wire_error(r.error_code, f"ListGroups to broker {node_id}")
            for g in r.groups:
                out[g.group_id] = (g.group_id, g.protocol_type, g.get("group_state") or "")
        return sorted(out.values())

    async def describe(self, group_id: str) -> Any:
        """The DescribeGroups entry of the group (state, protocol, members with assignments)."""
        conn = await find_coordinator(self.client, group_id)
        r = await conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group_id], "include_authorized_operations": False},
                               conn.version_for(ApiKey.DESCRIBE_GROUPS, max_v=5))
        [g] = r.groups
        if g.error_code:
            raise wire_error(g.error_code, f"DescribeGroups of {group_id!r}")
        return g

    async def committed(self, group_id: str) -> dict[TopicPartition, int]:
        conn = await find_coordinator(self.client, group_id)
        r = await conn.request(ApiKey.OFFSET_FETCH, {"group_id": group_id, "topics": None},
                               conn.version_for(ApiKey.OFFSET_FETCH, max_v=5))
        if r.error_code:
            raise wire_error(r.error_code, f"OffsetFetch of {group_id!r}")
        return {TopicPartition(t.name, p.partition_index): p.committed_offset for t in r.topics for p in t.partitions
                if p.committed_offset >= 0}

    async def delete(self, group_id: str) -> None:
        conn = await find_coordinator(self.client, group_id)
        r = await conn.request(ApiKey.DELETE_GROUPS, {"groups_names": [group_id]},
                               conn.version_for(ApiKey.DELETE_GROUPS, max_v=2))
        [res] = r.results
        if res.error_code:
            raise wire_error(res.error_code, f"DeleteGroups of {group_id!r}")

    async def commit(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit offsets for a group without members (as kafka-consumer-groups.sh --reset-offsets)."""
        conn = await find_coordinator(self.client, group_id)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": offset,
                                                      "committed_metadata": ""})
        r = await conn.request(ApiKey.OFFSET_COMMIT, {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
            conn.version_for(ApiKey.OFFSET_COMMIT, max_v=7))
        for t in r.topics:
            for p in t.partitions:
                if p.error_code:
                    raise wire_error(p.error_code, f"OffsetCommit of {t.name}-{p.partition_index} in {group_id!r}")
