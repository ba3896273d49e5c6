"""GroupCoordinatorAdapter: the group coordinator as KafkaApis calls it, one method per API.

Each method takes the request as ``api.request.parse(version, ...)`` returns it (a construct
Container; fields a version lacks are there at their defaults) and the API version, and calls
``respond(body)`` once, now or later, with the response body for ``api.response.build(version,
body)``. Version differences (v0 JoinGroup's rebalance timeout, LeaveGroup's single member
before v3, OffsetFetch's per-partition errors before v2 and its groups from v8, protocol names
that may be null only from JoinGroup v7, ...) are handled here, as Kafka's request/response
classes and KafkaApis handle them.

What the broker injects:

* ``append(partition, records, callback)``: append ``records`` ([(key bytes, value bytes or
  None)]) to ``__consumer_offsets``-``partition`` with acks=all and call ``callback(error_code)``
  once (0 on success, else the produce error, e.g. NOT_LEADER_OR_FOLLOWER,
  NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT);
* ``read_partition(partition, done)``: call ``done(records)`` once, now or later, with the
  (key, value) records of ``__consumer_offsets``-``partition`` from its log start to its end, in
  log order (value None for a tombstone; control batches left out), or ``done(None)`` when this
  broker has no log for it. Until then the partition's groups answer
  COORDINATOR_LOAD_IN_PROGRESS;
* ``partition_exists(topic, partition) -> bool`` (optional): OffsetCommit and OffsetDelete answer
  UNKNOWN_TOPIC_OR_PARTITION for partitions that do not exist, as KafkaApis does.

A KafkaApis handler is then a parse and a call, e.g. for JoinGroup::

    api = APIS[ApiKey.JOIN_GROUP]
    request = self.parse(ctx, api)
    self.group_coordinator.join_group(request, ctx.api_version, ctx.client_id, "/" + client_ip,
                                      lambda body: self.send(ctx, api, body))

and a request refused before the coordinator (authorization) is answered with
``error_response(api.key, request, ctx.api_version, error)``.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from protocol.api_keys import ApiKey
from protocol.clock import Time
from protocol.errors import ErrorCode

from .config import GroupCoordinatorConfig
from .group_coordinator import GroupCoordinator
from .group_metadata import JoinGroupResult, OffsetAndMetadata, SyncGroupResult
from .group_metadata_manager import GROUP_METADATA_TOPIC_NAME, AppendFn, Record

log = logging.getLogger("kbroker.coordinator")

Respond = Callable[[dict], None]
ReadFn = Callable[[int, Callable[[Iterable[Record] | None], None]], None]
INT32_MIN = -(1 << 31)
# DescribeGroups' authorized operations of a group when everything is allowed: READ (3),
# DELETE (6) and DESCRIBE (8), Kafka's AclOperation codes, as a bit field.
ALL_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
COORDINATOR_TYPE_GROUP = 0


class GroupCoordinatorAdapter:
    def __init__(self, config: GroupCoordinatorConfig, time: Time, append: AppendFn, read_partition: ReadFn,
                 partition_exists: Callable[[str, int], bool] | None = None) -> None:
        self.time = time
        self.coordinator = GroupCoordinator(config, time, append)
        self.read_partition = read_partition
        self.partition_exists = partition_exists or (lambda topic, partition: True)

    # -- lifecycle and leadership --------------------------------------------------------
    def startup(self, enable_metadata_expiration: bool = True) -> None:
        self.coordinator.startup(enable_metadata_expiration)

    def shutdown(self) -> None:
        self.coordinator.shutdown()

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of ``group_id``; its leader is the coordinator."""
        return self.coordinator.partition_for(group_id)

    def on_elected(self, partition: int, epoch: int | None = None) -> None:
        """This broker now leads ``__consumer_offsets``-``partition`` (``epoch``: its leader epoch):
        load the partition's groups and offsets through ``read_partition``. An election or
        resignation with an epoch older than one already seen is ignored."""
        self.coordinator.on_election(partition, epoch, lambda done: self.read_partition(partition, done))

    def on_resigned(self, partition: int, epoch: int | None = None) -> None:
        """This broker no longer leads ``partition``: its groups are dropped; parked requests answer NOT_COORDINATOR."""
        self.coordinator.on_resignation(partition, epoch)

    def offsets_topic_configs(self) -> dict[str, str]:
        """The topic configuration ``__consumer_offsets`` is created with (compacted: only the
        newest value of each key matters); with ``offsets.topic.num.partitions`` partitions and
        ``offsets.topic.replication.factor`` replicas, capped by the live brokers."""
        return {"cleanup.policy": "compact", "segment.bytes": str(self.coordinator.config.offsets_topic_segment_bytes),
                "compression.type": "producer"}

    def on_partitions_deleted(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Topic partitions were deleted: their committed offsets go too."""
        self.coordinator.handle_deleted_partitions(list(partitions))

    # -- FindCoordinator -----------------------------------------------------------------
    def find_coordinator(self, request, version: int, locate: Callable[[int], tuple[int, int, str, int]],
                         respond: Respond) -> None:
        """``locate(partition) -> (error_code, node_id, host, port)`` for the leader of that
        ``__consumer_offsets`` partition: COORDINATOR_NOT_AVAILABLE (and -1, "", -1) when the topic
        is missing (the broker then creates it, as Kafka does) or the partition has no live leader.
        Only group coordinators exist here: other key types answer INVALID_REQUEST."""
        def one(key: str) -> tuple[int, str | None, int, str, int]:
            if request.key_type != COORDINATOR_TYPE_GROUP:
                return ErrorCode.INVALID_REQUEST, f"coordinator key type {request.key_type} is not supported", -1, "", -1
            error, node_id, host, port = locate(self.partition_for(key))
            if error != ErrorCode.NONE:
                return error, _error_name(error), -1, "", -1
            return ErrorCode.NONE, None, node_id, host, port

        if version < 4:
            error, message, node_id, host, port = one(request.key)
            respond({"error_code": error, "error_message": message, "node_id": node_id, "host": host, "port": port})
        else:
            coordinators = []
            for key in request.coordinator_keys:
                error, message, node_id, host, port = one(key)
                coordinators.append({"key": key, "node_id": node_id, "host": host, "port": port, "error_code": error,
                                     "error_message": message})
            respond({"coordinators": coordinators})

    # -- JoinGroup -----------------------------------------------------------------------
    def join_group(self, request, version: int, client_id: str | None, client_host: str, respond: Respond) -> None:
        """``client_host``: the client's address as Kafka shows it ("/127.0.0.1")."""
        def callback(result: JoinGroupResult) -> None:
            protocol_name = result.protocol_name
            if version < 7 and protocol_name is None:
                protocol_name = ""      # not nullable before v7
            elif version >= 7 and protocol_name == "":
                protocol_name = None
            respond({"error_code": result.error, "generation_id": result.generation_id,
                     "protocol_type": result.protocol_type, "protocol_name": protocol_name,
                     "leader": result.leader_id, "skip_assignment": result.skip_assignment,
                     "member_id": result.member_id,
                     "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in result.members]})

        # v0 has no rebalance timeout: the session timeout serves as both
        rebalance_timeout_ms = request.session_timeout_ms if version == 0 else request.rebalance_timeout_ms
        group_instance_id = request.group_instance_id
        self.coordinator.handle_join_group(
            group_id=request.group_id, member_id=request.member_id, group_instance_id=group_instance_id,
            # KIP-394: from v4 a dynamic member's first join only gets it a member id
            require_known_member_id=version >= 4 and group_instance_id is None,
            support_skipping_assignment=version >= 9, client_id=client_id or "", client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms, session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            callback=callback, reason=request.reason)

    # -- SyncGroup -----------------------------------------------------------------------
    def sync_group(self, request, version: int, respond: Respond) -> None:
        def callback(result: SyncGroupResult) -> None:
            respond({"error_code": result.error, "protocol_type": result.protocol_type,
                     "protocol_name": result.protocol_name, "assignment": result.assignment})

        if version >= 5 and (request.protocol_type is None or request.protocol_name is None):
            # mandatory from v5
            callback(SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        assignment = {a.member_id: bytes(a.assignment) for a in request.assignments}
        self.coordinator.handle_sync_group(request.group_id, request.generation_id, request.member_id,
                                           request.protocol_type, request.protocol_name, request.group_instance_id,
                                           assignment, callback)

    # -- Heartbeat -----------------------------------------------------------------------
    def heartbeat(self, request, version: int, respond: Respond) -> None:
        self.coordinator.handle_heartbeat(request.group_id, request.member_id, request.group_instance_id,
                                          request.generation_id, lambda error: respond({"error_code": error}))

    # -- LeaveGroup ----------------------------------------------------------------------
    def leave_group(self, request, version: int, respond: Respond) -> None:
        if version < 3:
            members = [(request.member_id, None, None)]
        else:
            members = [(m.member_id, m.group_instance_id, m.reason) for m in request.members]

        def callback(top_error: int, results: list) -> None:
            if version < 3:
                # one error only: the group's, else the member's
                error = top_error if top_error != ErrorCode.NONE else next(
                    (e for _, _, e in results if e != ErrorCode.NONE), ErrorCode.NONE)
                respond({"error_code": error})
            else:
                respond({"error_code": top_error, "members": [
                    {"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in results]})

        self.coordinator.handle_leave_group(request.group_id, members, callback)

    # -- OffsetCommit --------------------------------------------------------------------
    def offset_commit(self, request, version: int, respond: Respond) -> None:
        now = self.time.milliseconds()
        # OffsetCommit v2-4 may set a retention: the offset then expires at now + retention
        retention = request.retention_time_ms
        expire_timestamp = None if retention == -1 else now + retention
        order: list[tuple[str, int]] = []
        errors: dict[tuple[str, int], int] = {}
        offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        for topic in request.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if tp not in errors and tp not in offsets:
                    order.append(tp)
                if not self.partition_exists(*tp):
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                offsets[tp] = OffsetAndMetadata(
                    p.committed_offset, None if p.committed_leader_epoch == -1 else p.committed_leader_epoch,
                    "" if p.committed_metadata is None else p.committed_metadata,
                    now if p.commit_timestamp == -1 else p.commit_timestamp, expire_timestamp)

        def callback(results: dict[tuple[str, int], int]) -> None:
            merged = {**errors, **results}
            respond({"topics": _by_topic(order, lambda tp: {"partition_index": tp[1], "error_code": merged[tp]})})

        if not offsets:
            callback({})
            return
        self.coordinator.handle_commit_offsets(request.group_id, request.member_id, request.group_instance_id,
                                               request.generation_id_or_member_epoch, offsets, callback)

    # -- TxnOffsetCommit ------------------------------------------------------------------
    def txn_offset_commit(self, request, version: int, respond: Respond,
                          errors: dict[tuple[str, int], int] | None = None) -> None:
        """TxnOffsetCommit; ``errors``: partitions already refused (authorization), answered
        with their code in request order."""
        now = self.time.milliseconds()
        order: list[tuple[str, int]] = []
        errors = dict(errors or {})
        offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        for topic in request.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if tp not in order:
                    order.append(tp)
                if tp in errors:
                    continue
                if not self.partition_exists(*tp):
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                offsets[tp] = OffsetAndMetadata(
                    p.committed_offset, None if p.committed_leader_epoch == -1 else p.committed_leader_epoch,
                    "" if p.committed_metadata is None else p.committed_metadata, now, None)

        def callback(results: dict[tuple[str, int], int]) -> None:
            merged = {**errors, **results}
            respond({"topics": _by_topic(order, lambda tp: {"partition_index": tp[1],
                                                            "error_code": _txn_commit_error(merged[tp], version)})})

        if not offsets:
            callback({})
            return
        if version >= 3:
            generation, member_id, instance_id = request.generation_id, request.member_id, request.group_instance_id
        else:
            generation, member_id, instance_id = -1, "", None
        self.coordinator.handle_txn_commit_offsets(request.group_id, request.producer_id, request.producer_epoch,
                                                   member_id, instance_id, generation, offsets, callback,
                                                   request.transactional_id)

    def on_transaction_completed(self, producer_id: int, commit: bool, partitions: Iterable[tuple[str, int]]) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` was written to these ``__consumer_offsets``
        partitions (this broker leads them): its pending transactional offsets complete."""
        self.coordinator.handle_txn_completion(producer_id, [p for t, p in partitions if t == GROUP_METADATA_TOPIC_NAME],
                                               commit)

    # -- OffsetFetch ---------------------------------------------------------------------
    def offset_fetch(self, request, version: int, respond: Respond) -> None:
        require_stable = request.require_stable
        if version >= 8:
            groups = []
            for g in request.groups:
                partitions = None if g.topics is None else _unique((t.name, p) for t in g.topics for p in t.partition_indexes)
                error, data = self.coordinator.handle_fetch_offsets(g.group_id, require_stable, partitions)
                groups.append({"group_id": g.group_id, "error_code": error,
                               "topics": [] if error else _fetch_topics(data, partitions)})
            respond({"groups": groups})
            return
        partitions = None if request.topics is None else _unique((t.name, p) for t in request.topics for p in t.partition_indexes)
        error, data = self.coordinator.handle_fetch_offsets(request.group_id, require_stable, partitions)
        if error != ErrorCode.NONE and version < 2:
            # no top-level error before v2: every requested partition carries it
            failed = {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": error}
            respond({"topics": _by_topic(partitions or [], lambda tp: {"partition_index": tp[1], **failed})})
        elif error != ErrorCode.NONE:
            respond({"error_code": error, "topics": []})
        else:
            respond({"error_code": ErrorCode.NONE, "topics": _fetch_topics(data, partitions)})

    # -- OffsetDelete --------------------------------------------------------------------
    def offset_delete(self, request, version: int, respond: Respond) -> None:
        order: list[tuple[str, int]] = []
        errors: dict[tuple[str, int], int] = {}
        partitions = []
        for topic in request.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if tp in errors or tp in partitions:
                    continue
                order.append(tp)
                if self.partition_exists(*tp):
                    partitions.append(tp)
                else:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        group_error, results = self.coordinator.handle_delete_offsets(request.group_id, partitions)
        if group_error != ErrorCode.NONE:
            respond({"error_code": group_error, "topics": []})
            return
        merged = {**errors, **results}
        respond({"error_code": ErrorCode.NONE,
                 "topics": _by_topic(order, lambda tp: {"partition_index": tp[1], "error_code": merged[tp]})})

    # -- ListGroups / DescribeGroups / DeleteGroups --------------------------------------
    def list_groups(self, request, version: int, respond: Respond) -> None:
        error, groups = self.coordinator.handle_list_groups(request.states_filter or (), request.types_filter or ())
        respond({"error_code": error, "groups": [
            {"group_id": g, "protocol_type": pt, "group_state": state, "group_type": "classic"} for g, pt, state in groups]})

    def describe_groups(self, request, version: int, respond: Respond,
                        authorized_operations: int = ALL_GROUP_OPERATIONS) -> None:
        """``authorized_operations``: what the caller may do to a group, answered when the request
        asks for it (v3+)."""
        described = []
        for group_id in request.groups:
            error, (state, protocol_type, protocol, members) = self.coordinator.handle_describe_group(group_id)
            described.append({
                "error_code": error, "group_id": group_id, "group_state": state, "protocol_type": protocol_type,
                "protocol_data": protocol,
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                             "client_host": m.client_host, "member_metadata": m.metadata,
                             "member_assignment": m.assignment} for m in members],
                "authorized_operations": authorized_operations if request.include_authorized_operations else INT32_MIN})
        respond({"groups": described})

    def delete_groups(self, request, version: int, respond: Respond) -> None:
        names = list(dict.fromkeys(request.groups_names))
        errors = self.coordinator.handle_delete_groups(names)
        respond({"results": [{"group_id": g, "error_code": errors[g]} for g in names]})


def error_response(api_key: int, request, version: int, error: int) -> dict:
    """The body answering a whole group API request with one error (Kafka's getErrorResponse),
    for what KafkaApis refuses before the coordinator sees it (GROUP_AUTHORIZATION_FAILED, ...):
    every partition, group or key of the request carries ``error``."""
    e = int(error)
    if api_key == ApiKey.FIND_COORDINATOR:
        if version < 4:
            return {"error_code": e, "error_message": _error_name(e), "node_id": -1, "host": "", "port": -1}
        return {"coordinators": [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": e,
                                  "error_message": _error_name(e)} for k in request.coordinator_keys]}
    if api_key == ApiKey.JOIN_GROUP:
        return {"error_code": e, "generation_id": -1, "protocol_name": "" if version < 7 else None, "leader": "",
                "member_id": "", "members": []}
    if api_key in (ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.LIST_GROUPS, ApiKey.OFFSET_DELETE):
        return {"error_code": e}
    if api_key == ApiKey.OFFSET_COMMIT:
        return {"topics": [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": e}
                                                           for p in t.partitions]} for t in request.topics]}
    if api_key == ApiKey.OFFSET_FETCH:
        if version >= 8:
            return {"groups": [{"group_id": g.group_id, "error_code": e, "topics": []} for g in request.groups]}
        if version >= 2:
            return {"error_code": e, "topics": []}
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": e}
            for p in t.partition_indexes]} for t in request.topics or ()]}
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return {"groups": [{"error_code": e, "group_id": g, "group_state": "", "protocol_type": "", "protocol_data": "",
                            "members": []} for g in request.groups]}
    if api_key == ApiKey.DELETE_GROUPS:
        return {"results": [{"group_id": g, "error_code": e} for g in dict.fromkeys(request.groups_names)]}
    raise ValueError(f"not a group API: {api_key}")


def _error_name(error: int) -> str:
    try:
        return ErrorCode(error).name
    except ValueError:
        return str(error)


def _by_topic(partitions: Iterable[tuple[str, int]], make: Callable[[tuple[str, int]], dict]) -> list[dict]:
    """Partitions grouped by topic, topics and partitions in first-seen order."""
    topics: dict[str, list] = {}
    for tp in partitions:
        topics.setdefault(tp[0], []).append(make(tp))
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def _unique(items: Iterable) -> list:
    return list(dict.fromkeys(items))


def _fetch_topics(data: dict, partitions: list | None) -> list[dict]:
    order = partitions if partitions is not None else sorted(data)

    def make(tp):
        d = data[tp]
        return {"partition_index": tp[1], "committed_offset": d.offset,
                "committed_leader_epoch": -1 if d.leader_epoch is None else d.leader_epoch,
                "metadata": d.metadata, "error_code": d.error}

    return _by_topic(order, make)


def _txn_commit_error(error: int, version: int) -> int:
    """PRODUCER_FENCED exists for clients from TxnOffsetCommit v2 on (KIP-588): older ones get
    INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.PRODUCER_FENCED and version < 2:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
