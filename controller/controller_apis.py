"""ControllerApis (Kafka's): the controller's request handlers, behind broker.network's socket server.

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

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, RemoteProtocolError
from protocol.messages import APIS, response_is_flexible
from protocol.schema import Api, SchemaError

from broker.sasl_server import answer_sasl_outside_authentication


log = logging.getLogger("kbroker.controller.apis")

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
        }
        self.handlers = set(self.operations) | {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.SASL_HANDSHAKE,
                                                ApiKey.SASL_AUTHENTICATE}
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
        if key == ApiKey.METADATA:
            topics = None if request.topics is None or (header.api_version == 0 and not request.topics) else [
                t.name for t in request.topics if t.name is not None]
            future = self.controller.metadata(topics, ctx.listener_name)
        else:
            future = self.operations[key](request, header.api_version)
        future.add_done_callback(lambda f: self._respond(ctx, api, f))

    def _parse(self, ctx, api: Api):
        try:
            return api.request.parse(ctx.api_version, ctx.frame, ctx.body_offset)
        except SchemaError as exc:
            raise RemoteProtocolError(f"malformed body: {exc}") from None

    def _respond(self, ctx, api: Api, future: asyncio.Future) -> None:
        if future.cancelled():
            ctx.close_connection(f"{api.name}: the controller stopped")
            return
        exc = future.exception()
        if exc is not None:
            log.warning("%s from %s failed: %s", api.name, ctx.peer, exc)
            ctx.close_connection(f"{api.name} failed: {exc}")
            return
        self._send(ctx, api, future.result())

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
