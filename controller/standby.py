"""StandbyController: what a controller process that is not the active one answers.

Every controller request gets NOT_CONTROLLER (at the top level, or per resource where the
response has no top-level error code), so a broker's ControllerChannel moves on to the next
address of controller.quorum.bootstrap.servers; Metadata lists no brokers and names the
active controller (-1 while none is known). It has the QuorumController's request methods,
so ControllerApis serves either.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from protocol.errors import ErrorCode

from .replication_control import ZERO_UUID, _topic_error

NOT_CONTROLLER = ErrorCode.NOT_CONTROLLER
MESSAGE = "This controller is a standby; the active controller is elected through ZooKeeper."


class StandbyController:
    def __init__(self, node_id: int, cluster_id: str, active_controller_id: Callable[[], int]) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.active_controller_id = active_controller_id

    @staticmethod
    def _answer(body: dict) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        future.set_result(body)
        return future

    def register_broker(self, request) -> asyncio.Future:
        return self._answer({"error_code": NOT_CONTROLLER, "broker_epoch": -1})

    def broker_heartbeat(self, request) -> asyncio.Future:
        return self._answer({"error_code": NOT_CONTROLLER, "is_caught_up": False, "is_fenced": True,
                             "should_shut_down": False})

    def alter_partition(self, request, version: int) -> asyncio.Future:
        return self._answer({"error_code": NOT_CONTROLLER, "topics": []})

    def allocate_producer_ids(self, request) -> asyncio.Future:
        return self._answer({"error_code": NOT_CONTROLLER, "producer_id_start": -1, "producer_id_len": 0})

    def controlled_shutdown(self, request, version: int) -> asyncio.Future:
        return self._answer({"error_code": NOT_CONTROLLER, "remaining_partitions": []})

    def create_topics(self, request, version: int) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "topics": [_topic_error(t.name, NOT_CONTROLLER, MESSAGE)
                                                               for t in request.topics]})

    def delete_topics(self, request, version: int) -> asyncio.Future:
        if version >= 6:
            items = [(t.name, t.topic_id) for t in request.topics]
        else:
            items = [(name, ZERO_UUID) for name in request.topic_names]
        return self._answer({"throttle_time_ms": 0, "responses": [
            {"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": NOT_CONTROLLER, "error_message": MESSAGE}
            for name, topic_id in items]})

    def create_partitions(self, request) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "results": [
            {"name": t.name, "error_code": NOT_CONTROLLER, "error_message": MESSAGE} for t in request.topics]})

    def _configs(self, request) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "responses": [
            {"error_code": NOT_CONTROLLER, "error_message": MESSAGE, "resource_type": r.resource_type,
             "resource_name": r.resource_name} for r in request.resources]})

    def incremental_alter_configs(self, request) -> asyncio.Future:
        return self._configs(request)

    def alter_configs(self, request) -> asyncio.Future:
        return self._configs(request)

    def elect_leaders(self, request, version: int) -> asyncio.Future:
        results = [{"topic": tp.topic, "partition_result": [
            {"partition_id": p, "error_code": NOT_CONTROLLER, "error_message": MESSAGE} for p in tp.partitions]}
            for tp in (request.topic_partitions or [])]
        return self._answer({"throttle_time_ms": 0, "error_code": NOT_CONTROLLER, "replica_election_results": results})

    def describe_configs(self, request) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "results": [
            {"error_code": NOT_CONTROLLER, "error_message": MESSAGE, "resource_type": r.resource_type,
             "resource_name": r.resource_name, "configs": []} for r in request.resources]})

    def metadata(self, topics: list[str] | None, listener: str | None = None) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "brokers": [], "cluster_id": self.cluster_id,
                             "controller_id": self.active_controller_id(), "topics": []})

    def create_acls(self, request, version: int) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "results": [
            {"error_code": NOT_CONTROLLER, "error_message": MESSAGE} for _c in request.creations]})

    def delete_acls(self, request, version: int) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "filter_results": [
            {"error_code": NOT_CONTROLLER, "error_message": MESSAGE, "matching_acls": []} for _f in request.filters]})

    def describe_acls(self, acl_filter) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "error_code": NOT_CONTROLLER, "error_message": MESSAGE,
                             "resources": []})

    def alter_user_scram_credentials(self, request) -> asyncio.Future:
        users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
        return self._answer({"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": NOT_CONTROLLER, "error_message": MESSAGE} for u in users]})

    def alter_client_quotas(self, request) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "entries": [
            {"error_code": NOT_CONTROLLER, "error_message": MESSAGE, "entity": [
                {"entity_type": c.entity_type, "entity_name": c.entity_name} for c in e.entity]} for e in request.entries]})

    def describe_client_quotas(self, request) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "error_code": NOT_CONTROLLER, "error_message": MESSAGE,
                             "entries": None})

    def alter_partition_reassignments(self, request, version: int) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "error_code": NOT_CONTROLLER, "error_message": MESSAGE,
                             "responses": []})

    def unregister_broker(self, request) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "error_code": NOT_CONTROLLER, "error_message": MESSAGE})

    def list_partition_reassignments(self, request) -> asyncio.Future:
        return self._answer({"throttle_time_ms": 0, "error_code": NOT_CONTROLLER, "error_message": MESSAGE,
                             "topics": []})
