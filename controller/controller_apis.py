"""ControllerApis (Kafka's): the controller's request handlers, behind broker.network's socket server.

Authorization (with ``authorizer.class.name`` set, the QuorumController's authorizer over its
own ACLs): what only brokers send (BrokerRegistration, BrokerHeartbeat, AlterPartition,
AllocateProducerIds, ControlledShutdown) needs CLUSTER_ACTION on the cluster, else
CLUSTER_AUTHORIZATION_FAILED and nothing changes. Admin requests from a principal holding
CLUSTER_ACTION are a broker's, forwarded after the broker authorized its client
(broker/security/request_checks.py); any other principal's are checked here the same way.

``handle(ctx)`` dispatches by API key: it decodes the request with its construct schema,
hands it to the QuorumController (which answers through a future, once what the answer
depends on is durable) and sends the encoded response. Only the APIs in ``handlers`` are
advertised by ApiVersions. A request whose answer cannot be given (the controller stopped
or failed) closes the connection, so a broker moves on to the next controller.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Callable

from broker.forwarding import error_response as forwarding_error_response
from broker.security import request_checks
from broker.security.authorizer import (CLUSTER_NAME, ERROR_MESSAGES, AclBindingFilter, AclOperation as Op,
                                        ResourceType as R)
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, RemoteProtocolError
from protocol.messages import APIS, response_is_flexible
from protocol.schema import Api, SchemaError

from broker.security.sasl_server import answer_sasl_outside_authentication


log = logging.getLogger("kbroker.controller.apis")

# What only brokers send: Kafka's ControllerApis refuses it without CLUSTER_ACTION on the cluster.
CLUSTER_ACTION_APIS = frozenset({ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION,
                                 ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.CONTROLLED_SHUTDOWN})
ACL_APIS = frozenset({ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.DESCRIBE_ACLS})


def cluster_action_refused(api_key: int) -> dict:
    """The CLUSTER_AUTHORIZATION_FAILED answer of a broker-only API."""
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return {ApiKey.BROKER_REGISTRATION: {"error_code": code, "broker_epoch": -1},
            ApiKey.BROKER_HEARTBEAT: {"error_code": code, "is_caught_up": False, "is_fenced": True,
                                      "should_shut_down": False},
            ApiKey.ALTER_PARTITION: {"error_code": code, "topics": []},
            ApiKey.ALLOCATE_PRODUCER_IDS: {"error_code": code, "producer_id_start": -1, "producer_id_len": 0},
            ApiKey.CONTROLLED_SHUTDOWN: {"error_code": code, "remaining_partitions": []}}[api_key]

_I32 = struct.Struct(">i")


def frame_response(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """Size, response header (v1, with an empty tagged-field block, for flexible versions) and body."""
    header = _I32.pack(correlation_id) + (b"\x00" if response_is_flexible(api_key, version) else b"")
    return _I32.pack(len(header) + len(body)) + header + body


class ControllerApis:
    def __init__(self, controller) -> None:
        """``controller``: the QuorumController, or a StandbyController while this process is
        a standby (the server swaps ``self.controller`` when it wins or loses an election)."""
        self.controller = controller
        # api key -> (decoded request, version) -> future of the response body
        self.operations: dict[int, Callable] = {
            ApiKey.BROKER_REGISTRATION: lambda r, v: self.controller.register_broker(r),
            ApiKey.BROKER_HEARTBEAT: lambda r, v: self.controller.broker_heartbeat(r),
            ApiKey.ALTER_PARTITION: lambda r, v: self.controller.alter_partition(r, v),
            ApiKey.ALLOCATE_PRODUCER_IDS: lambda r, v: self.controller.allocate_producer_ids(r),
            ApiKey.CONTROLLED_SHUTDOWN: lambda r, v: self.controller.controlled_shutdown(r, v),
            ApiKey.CREATE_TOPICS: lambda r, v: self.controller.create_topics(r, v),
            ApiKey.DELETE_TOPICS: lambda r, v: self.controller.delete_topics(r, v),
            ApiKey.CREATE_PARTITIONS: lambda r, v: self.controller.create_partitions(r),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: lambda r, v: self.controller.incremental_alter_configs(r),
            ApiKey.ALTER_CONFIGS: lambda r, v: self.controller.alter_configs(r),
            ApiKey.ELECT_LEADERS: lambda r, v: self.controller.elect_leaders(r, v),
            ApiKey.DESCRIBE_CONFIGS: lambda r, v: self.controller.describe_configs(r),
            ApiKey.CREATE_ACLS: lambda r, v: self.controller.create_acls(r, v),
            ApiKey.DELETE_ACLS: lambda r, v: self.controller.delete_acls(r, v),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: lambda r, v: self.controller.alter_user_scram_credentials(r),
            ApiKey.ALTER_CLIENT_QUOTAS: lambda r, v: self.controller.alter_client_quotas(r),
            ApiKey.DESCRIBE_CLIENT_QUOTAS: lambda r, v: self.controller.describe_client_quotas(r),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: lambda r, v: self.controller.alter_partition_reassignments(r, v),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: lambda r, v: self.controller.list_partition_reassignments(r),
            ApiKey.UNREGISTER_BROKER: lambda r, v: self.controller.unregister_broker(r),
        }
        self.handlers = set(self.operations) | {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.DESCRIBE_ACLS,
                                                ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
        self.api_versions = sorted((key, *APIS[key].advertise) for key in self.handlers)

    def handle(self, ctx) -> None:
        header = ctx.header
        key = header.api_key
        if key not in self.handlers:
            raise RemoteProtocolError(f"api key {key} is not served by the controller")
        api = APIS[key]
        if key == ApiKey.API_VERSIONS:
            return self._handle_api_versions(ctx, api)
        if key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            return answer_sasl_outside_authentication(ctx)
        if not api.supports(header.api_version):
            raise RemoteProtocolError(f"unsupported version {header.api_version} of {api.name} "
                                      f"(supported {api.min_version}-{api.max_version})")
        request = self._parse(ctx, api)
        complete = None
        authorizer = getattr(self.controller, "authorizer", None)
        if key in ACL_APIS and self._acl_request_invalid(ctx, api, request):
            return
        if authorizer is not None:
            if key in CLUSTER_ACTION_APIS:
                if not authorizer.authorize(ctx, Op.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME):
                    log.warning("%s from %s (%s) refused: CLUSTER_AUTHORIZATION_FAILED, no ClusterAction permission",
                                api.name, ctx.peer, ctx.principal)
                    return self._send(ctx, api, cluster_action_refused(key))
            elif not authorizer.authorize(ctx, Op.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME, False):
                # Not a broker: a client talking to the controller directly gets Kafka's
                # ControllerApis checks with its own principal (a broker ran them before
                # forwarding: broker/security/request_checks.py).
                screened = self._screen(ctx, api, request, authorizer)
                if screened is None:
                    return
                request, complete = screened
        elif key in ACL_APIS:
            return self._send(ctx, api, forwarding_error_response(key, request, ErrorCode.SECURITY_DISABLED,
                                                                  "No Authorizer is configured.")
                              if key != ApiKey.DESCRIBE_ACLS else {
                                  "throttle_time_ms": 0, "error_code": ErrorCode.SECURITY_DISABLED,
                                  "error_message": "No Authorizer is configured on the broker", "resources": []})
        if key == ApiKey.METADATA:
            topics = None if request.topics is None or (header.api_version == 0 and not request.topics) else [
                t.name for t in request.topics if t.name is not None]
            future = self.controller.metadata(topics, ctx.listener_name)
        elif key == ApiKey.DESCRIBE_ACLS:
            future = self.controller.describe_acls(AclBindingFilter.of(
                request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                request.principal_filter, request.host_filter, request.operation, request.permission_type))
        else:
            future = self.operations[key](request, header.api_version)
        future.add_done_callback(lambda f: self._respond(ctx, api, f, complete))

    def _acl_request_invalid(self, ctx, api: Api, request) -> bool:
        """UNKNOWN codes in an ACL request: the request does not parse in Kafka; the connection closes."""
        v0 = ctx.api_version == 0
        if api.key == ApiKey.CREATE_ACLS:
            bad = any(0 in (c.resource_type, 3 if v0 else c.resource_pattern_type, c.operation, c.permission_type)
                      for c in request.creations)
        else:
            filters = list(request.filters) if api.key == ApiKey.DELETE_ACLS else [request]
            bad = any(AclBindingFilter.of(f.resource_type_filter, f.resource_name_filter,
                                          3 if v0 else f.pattern_type_filter, f.principal_filter, f.host_filter,
                                          f.operation, f.permission_type).is_unknown() for f in filters)
        if bad:
            raise RemoteProtocolError(f"{api.name} holds an UNKNOWN resource type, pattern type, operation or "
                                      "permission")
        return False

    def _screen(self, ctx, api: Api, request, authorizer):
        """(request, complete) for a client's request after Kafka's checks, or None when it was
        answered here (refused whole, or nothing left)."""
        key = api.key

        def authorize(op: int, resource_type: int, name: str, log_if_denied: bool = True) -> bool:
            return authorizer.authorize(ctx, op, resource_type, name, log_if_denied)

        if key == ApiKey.METADATA:
            explicit = not (request.topics is None or (ctx.api_version == 0 and not request.topics))

            def complete_metadata(body: dict) -> dict:
                out = []
                for t in body["topics"]:
                    if authorize(Op.DESCRIBE, R.TOPIC, t["name"], explicit):
                        out.append(t)
                    elif explicit:
                        out.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": t["name"],
                                    "is_internal": t.get("is_internal", False), "partitions": []})
                body["topics"] = out
                return body
            return request, complete_metadata
        if key == ApiKey.DESCRIBE_ACLS:
            if not authorize(Op.DESCRIBE, R.CLUSTER, CLUSTER_NAME):
                code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                self._send(ctx, api, {"throttle_time_ms": 0, "error_code": code, "error_message": ERROR_MESSAGES[code],
                                      "resources": []})
                return None
            return request, None
        replication = getattr(self.controller, "replication", None)
        checked = request_checks.screen(key, request, authorize,
                                        lambda n: replication is None or replication.topic(n) is not None)
        if checked.error is not None:
            self._send(ctx, api, forwarding_error_response(key, request, checked.error, ERROR_MESSAGES[checked.error]))
            return None
        if checked.complete is not None and checked.request is None:
            self._send(ctx, api, checked.complete(request_checks.empty_response(key)))
            return None
        return checked.request, checked.complete

    def _parse(self, ctx, api: Api):
        try:
            return api.request.parse(ctx.api_version, ctx.frame, ctx.body_offset)
        except SchemaError as exc:
            raise RemoteProtocolError(f"malformed body: {exc}") from None

    def _respond(self, ctx, api: Api, future: asyncio.Future, complete=None) -> None:
        if future.cancelled():
            ctx.close_connection(f"{api.name}: the controller stopped")
            return
        exc = future.exception()
        if exc is not None:
            log.warning("%s from %s failed: %s", api.name, ctx.peer, exc)
            ctx.close_connection(f"{api.name} failed: {exc}")
            return
        body = future.result()
        self._send(ctx, api, body if complete is None else complete(body))

    def _send(self, ctx, api: Api, body: dict) -> None:
        version = ctx.api_version
        ctx.send_response(frame_response(api.key, version, ctx.header.correlation_id, api.response.build(version, body)))

    def _handle_api_versions(self, ctx, api: Api) -> None:
        version = ctx.api_version
        if not api.supports(version):
            # KIP-511: answer in a v0 body listing ApiVersions' own range, so the client falls back.
            body = api.response.build(0, {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": [
                {"api_key": ApiKey.API_VERSIONS, "min_version": api.min_version, "max_version": api.max_version}]})
            ctx.send_response(frame_response(api.key, 0, ctx.header.correlation_id, body))
            return
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in self.api_versions]
        self._send(ctx, api, {"error_code": ErrorCode.NONE, "api_keys": keys, "throttle_time_ms": 0})
