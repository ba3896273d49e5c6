"""A test "broker" for the controller's tests: a real listener (broker.network's socket server)
that answers ApiVersions, LeaderAndIsr, UpdateMetadata and StopReplica and records every
request it got, decoded; and a raw protocol client to the controller for registration and
heartbeats. Real sockets; nothing is mocked."""

from __future__ import annotations

import asyncio
import struct
import uuid
from dataclasses import dataclass

from broker.network import SocketServer
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import APIS, response_is_flexible

_I32 = struct.Struct(">i")
SERVED = (ApiKey.API_VERSIONS, ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA)


@dataclass
class Received:
    api_key: int
    version: int
    body: object

    @property
    def name(self) -> str:
        return ApiKey(self.api_key).name


class RecordingBroker:
    def __init__(self, broker_id: int, *, answer_error: int = ErrorCode.NONE) -> None:
        self.broker_id = broker_id
        self.answer_error = answer_error
        self.received: list[Received] = []
        self.server = SocketServer(self, max_request_size=100 << 20, max_inflight=100)
        self.port = 0
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.controller: BrokerConnection | None = None
        self.controller_address: tuple[str, int] | None = None
        self.heartbeats: asyncio.Task | None = None
        self.last_heartbeat = None
        self.changed = asyncio.Event()
        self.paused = False
        # One reconnect at a time: the heartbeat loop and a test's own heartbeat() both find the
        # connection lost after a controller restart; a second connect() closed the first's new
        # connection in the middle of its ApiVersions ("connection ... closed").
        self._reconnecting = asyncio.Lock()

    # -- the listener --------------------------------------------------------------------

    async def start(self, port: int = 0) -> "RecordingBroker":
        self.port = await self.server.start("PLAINTEXT", "127.0.0.1", port)
        return self

    def stop_listening(self) -> None:
        self.server.close_all()

    def handle(self, ctx) -> None:
        key, version = ctx.header.api_key, ctx.header.api_version
        if key not in SERVED:
            ctx.close_connection(f"api key {key} not served")
            return
        api = APIS[key]
        if key == ApiKey.API_VERSIONS:
            body = {"error_code": 0, "api_keys": [
                {"api_key": k, "min_version": APIS[k].min_version, "max_version": APIS[k].max_version} for k in SERVED]}
        else:
            request = api.request.parse(version, ctx.frame, ctx.body_offset)
            self.received.append(Received(key, version, request))
            self.changed.set()
            body = self._answer(key, request)
        data = api.response.build(version, body)
        flexible = response_is_flexible(key, version)
        header = _I32.pack(ctx.header.correlation_id) + (b"\x00" if flexible else b"")
        ctx.send_response(_I32.pack(len(header) + len(data)) + header + data)

    def _answer(self, key: int, request) -> dict:
        if key == ApiKey.LEADER_AND_ISR:
            return {"error_code": self.answer_error, "topics": [
                {"topic_id": t.topic_id, "partition_errors": [
                    {"partition_index": p.partition_index, "error_code": 0} for p in t.partition_states]}
                for t in request.topic_states]}
        if key == ApiKey.STOP_REPLICA:
            return {"error_code": self.answer_error, "partition_errors": []}
        return {"error_code": self.answer_error}

    def requests(self, api_key: int | None = None) -> list[Received]:
        return [r for r in self.received if api_key is None or r.api_key == api_key]

    def mentioning(self, topic: str) -> list[Received]:
        """The LeaderAndIsr, UpdateMetadata and StopReplica requests that name ``topic``, in order."""
        return [r for r in self.received if any(t.topic_name == topic for t in r.body.topic_states)]

    def leader_and_isr_states(self) -> dict[tuple[str, int], object]:
        """The newest partition state this broker was sent, per partition."""
        out = {}
        for r in self.requests(ApiKey.LEADER_AND_ISR):
            for t in r.body.topic_states:
                for p in t.partition_states:
                    out[(t.topic_name, p.partition_index)] = p
        return out

    async def wait_for(self, predicate, timeout_s: float = 20.0, what: str = "condition"):
        async with asyncio.timeout(timeout_s):
            while True:
                value = predicate()
                if value:
                    return value
                self.changed.clear()
                try:
                    async with asyncio.timeout(0.05):
                        await self.changed.wait()
                except TimeoutError:
                    pass

    # -- the client side: registration and heartbeats -------------------------------------

    async def connect(self, host: str | None = None, port: int | None = None) -> None:
        if host is not None:
            self.controller_address = (host, port)
        if self.controller is not None:
            self.controller.close()
        self.controller = BrokerConnection(*self.controller_address, client_id=f"broker-{self.broker_id}")
        await self.controller.connect()

    async def _to_controller(self, api_key: int, body: dict):
        """One request to the controller, reconnecting first if the connection was lost."""
        if self.controller is None or not self.controller.connected:
            async with self._reconnecting:
                if self.controller is None or not self.controller.connected:  # (another call reconnected)
                    await self.connect()
        assert self.controller is not None
        return await self.controller.request(api_key, body)

    async def register(self, cluster_id: str, incarnation_id: uuid.UUID | None = None) -> object:
        if incarnation_id is not None:
            self.incarnation_id = incarnation_id
        resp = await self._to_controller(ApiKey.BROKER_REGISTRATION, {
            "broker_id": self.broker_id, "cluster_id": cluster_id, "incarnation_id": self.incarnation_id,
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": self.port, "security_protocol": 0}],
            "rack": None})
        if resp.error_code == 0:
            self.broker_epoch = resp.broker_epoch
        return resp

    async def heartbeat(self, want_shut_down: bool = False):
        resp = await self._to_controller(ApiKey.BROKER_HEARTBEAT, {
            "broker_id": self.broker_id, "broker_epoch": self.broker_epoch, "current_metadata_offset": 0,
            "want_fence": False, "want_shut_down": want_shut_down})
        self.last_heartbeat = resp
        return resp

    def start_heartbeats(self, interval_ms: int) -> None:
        async def loop():
            while True:
                if not self.paused:
                    try:
                        await self.heartbeat()
                    except Exception:
                        pass
                await asyncio.sleep(interval_ms / 1000)
        self.heartbeats = asyncio.get_running_loop().create_task(loop())

    async def wait_unfenced(self, timeout_s: float = 20.0) -> None:
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    resp = await self.heartbeat()
                    if resp.error_code == 0 and not resp.is_fenced:
                        return
                except (OSError, KafkaError):
                    pass  # the controller is restarting
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        if self.heartbeats is not None:
            self.heartbeats.cancel()
        if self.controller is not None:
            self.controller.close()
        self.server.close_all()
