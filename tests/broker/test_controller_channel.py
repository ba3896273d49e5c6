"""ControllerChannel against real listeners: a standby that answers NOT_CONTROLLER, an address
nobody listens on, the active controller. The channel moves on from the first two, stays with
the third, and relays encoded bodies as they are."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.broker_lifecycle import BrokerLifecycleManager, BrokerState, Listener
from broker.controller_channel import ControllerChannel
from broker.network import SocketServer
from tests.support import free_port
from protocol.api_keys import ApiKey
from protocol.client import KafkaConnectionError
from protocol.clock import MockTime
from protocol.errors import ErrorCode, NotControllerError
from protocol.messages import APIS, response_is_flexible

SERVED = (ApiKey.API_VERSIONS, ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.CREATE_PARTITIONS)


class FakeController:
    """A listener answering as an active controller, or as a standby (NOT_CONTROLLER everywhere)."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.received: list[tuple[int, int, bytes]] = []
        self.server = SocketServer(self, max_request_size=1 << 20, max_inflight=10)
        self.port = 0

    async def start(self) -> "FakeController":
        self.port = await self.server.start("CONTROLLER", "127.0.0.1", 0)
        return self

    def handle(self, ctx) -> None:
        key, version = ctx.header.api_key, ctx.header.api_version
        api = APIS[key]
        error = ErrorCode.NONE if self.active else ErrorCode.NOT_CONTROLLER
        if key == ApiKey.API_VERSIONS:
            body = {"error_code": 0, "api_keys": [{"api_key": k, "min_version": APIS[k].min_version,
                                                   "max_version": APIS[k].max_version} for k in SERVED]}
        else:
            raw = bytes(memoryview(ctx.frame)[ctx.body_offset:])
            self.received.append((key, version, raw))
            request = api.request.parse(version, raw)
            if key == ApiKey.BROKER_HEARTBEAT:
                body = {"error_code": error, "is_caught_up": True, "is_fenced": False, "should_shut_down": False}
            elif key == ApiKey.BROKER_REGISTRATION:
                body = {"error_code": error, "broker_epoch": 77}
            else:  # CreatePartitions: the error goes in each topic's slot
                body = {"results": [{"name": t.name, "error_code": error, "error_message": None} for t in request.topics]}
        data = api.response.build(version, body)
        header = struct.pack(">i", ctx.header.correlation_id) + (b"\x00" if response_is_flexible(key, version) else b"")
        ctx.send_response(struct.pack(">i", len(header) + len(data)) + header + data)

    def close(self) -> None:
        self.server.close_all()


@pytest.fixture
async def controllers():
    made: list[FakeController] = []

    async def make(active: bool) -> FakeController:
        c = await FakeController(active).start()
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()


def channel(*ports: int) -> ControllerChannel:
    return ControllerChannel([("127.0.0.1", p) for p in ports], broker_id=1, purpose="test", time=MockTime(),
                             request_timeout_ms=5000)


HEARTBEAT = {"broker_id": 1, "broker_epoch": 3, "current_metadata_offset": 0, "want_fence": False,
             "want_shut_down": False}


async def test_moves_past_a_standby_and_a_dead_address_to_the_active_controller_and_stays(controllers):
    standby, active = await controllers(False), await controllers(True)
    ch = channel(standby.port, free_port(), active.port)
    try:
        response = await ch.send(ApiKey.BROKER_HEARTBEAT, HEARTBEAT)
        assert response.error_code == ErrorCode.NONE
        assert ch.current == ("127.0.0.1", active.port)
        assert len(standby.received) == 1 and len(active.received) == 1
        await ch.send(ApiKey.BROKER_HEARTBEAT, HEARTBEAT)
        assert len(standby.received) == 1 and len(active.received) == 2  # it stayed
    finally:
        ch.close()


async def test_every_address_failing_raises_the_last_failure_and_the_next_send_starts_over(controllers):
    standby = await controllers(False)
    ch = channel(free_port(), standby.port)
    try:
        with pytest.raises(NotControllerError):
            await ch.send(ApiKey.BROKER_HEARTBEAT, HEARTBEAT)
        with pytest.raises(KafkaConnectionError):
            await channel(free_port()).send(ApiKey.BROKER_HEARTBEAT, HEARTBEAT)
        standby.active = True  # the standby took over
        assert (await ch.send(ApiKey.BROKER_HEARTBEAT, HEARTBEAT)).error_code == ErrorCode.NONE
    finally:
        ch.close()


async def test_relays_encoded_bodies_and_sees_not_controller_in_per_resource_errors(controllers):
    standby, active = await controllers(False), await controllers(True)
    ch = channel(standby.port, active.port)
    api = APIS[ApiKey.CREATE_PARTITIONS]
    body = api.request.build(2, {"topics": [{"name": "t", "count": 3, "assignments": None}], "timeout_ms": 1000,
                                 "validate_only": False})
    try:
        answer = await ch.send_raw(ApiKey.CREATE_PARTITIONS, 2, body)
        assert [(k, v, raw) for k, v, raw in active.received] == [(ApiKey.CREATE_PARTITIONS, 2, body)]
        assert len(standby.received) == 1  # asked first, answered NOT_CONTROLLER for topic t
        assert [(r.name, r.error_code) for r in api.response.parse(2, answer).results] == [("t", 0)]
    finally:
        ch.close()


async def test_the_lifecycle_manager_registers_and_runs_with_the_active_controller_past_a_standby(controllers):
    standby, active = await controllers(False), await controllers(True)
    time = MockTime()
    ch = ControllerChannel([("127.0.0.1", standby.port), ("127.0.0.1", active.port)], broker_id=1, purpose="heartbeat",
                           time=time, request_timeout_ms=5000)
    m = BrokerLifecycleManager(broker_id=1, time=time, channel=ch, listeners=[Listener("PLAINTEXT", "h", 1)],
                               cluster_id="c", heartbeat_interval_ms=2000)
    try:
        m.start()
        async with asyncio.timeout(20):
            while m.state != BrokerState.RUNNING:  # the exchanges are real I/O; the timers are on MockTime
                time.sleep(10)
                await asyncio.sleep(0.01)
        assert m.broker_epoch == 77
        assert [k for k, _v, _b in standby.received] == [ApiKey.BROKER_REGISTRATION]  # asked once, then left
        assert [k for k, _v, _b in active.received][:2] == [ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT]
    finally:
        m.close()
        ch.close()
