"""A broker that heartbeats is not fenced because the controller's loop was busy.

uvloop (libuv) runs the timers that came due before it polls the sockets: after a long I/O
callback the session-expiry timer fired ahead of a heartbeat already in the socket, and the
live broker was fenced. The expiry check now waits one loop turn (the sockets are read
first) and a heartbeat counts when received.

Real event loops (asyncio's and uvloop) on the system clock: the controller's own work
holds the loop past a broker's session deadline while that broker's heartbeat already
sits in a socket buffer. The heartbeat counts (it was sent in time); a broker that really
was silent is still fenced."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import uvloop

from controller.controller_result import ControllerResult
from protocol.client.clock import SYSTEM_TIME

from .helpers import Harness, heartbeat

SESSION_MS = 1000


async def _scenario(tmp_path, where: str) -> tuple[bool, bool]:
    h = Harness(tmp_path, time=SYSTEM_TIME, session_timeout_ms=SESSION_MS)
    await h.start()
    rsock, wsock = socket.socketpair()
    rsock.setblocking(False)
    busy_r, busy_w = socket.socketpair()
    busy_r.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await h.start_brokers(1, 2)

        def on_readable() -> None:  # a heartbeat request read off the socket, as the server does
            rsock.recv(64)
            h.controller.broker_heartbeat(heartbeat(1, h.epochs[1]))

        loop.add_reader(rsock.fileno(), on_readable)

        def stall() -> None:
            # The loop held past both sessions: broker 1's heartbeat arrives in time,
            # broker 2 stays silent.
            time.sleep(SESSION_MS * 0.7 / 1000)
            wsock.send(b"h")
            time.sleep(SESSION_MS * 0.8 / 1000)

        def busy() -> ControllerResult:
            stall()
            return ControllerResult([], None)

        def on_busy_readable() -> None:
            busy_r.recv(64)
            stall()

        await h.heartbeat_all(1, 2)
        if where == "event":  # the controller's own long event (building a huge CreateTopics)
            await h.controller._submit("busy", busy)
        else:  # a long I/O callback (decoding a big request or response off a socket)
            loop.add_reader(busy_r.fileno(), on_busy_readable)
            busy_w.send(b"b")
        deadline = time.monotonic() + 30
        while not h.broker(2).fenced:
            assert time.monotonic() < deadline, "the silent broker was never fenced"
            await asyncio.sleep(0.005)
        return h.broker(1).fenced, h.broker(2).fenced
    finally:
        loop.remove_reader(rsock.fileno())
        loop.remove_reader(busy_r.fileno())
        for sock in (rsock, wsock, busy_r, busy_w):
            sock.close()
        await h.settle()  # the fencing's records durable before the store closes
        await h.stop()


@pytest.mark.parametrize("where", ["event", "io-callback"])
@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
def test_a_heartbeat_waiting_behind_the_controllers_work_counts(tmp_path, loop_factory, where):
    loop = loop_factory()
    try:
        fenced1, fenced2 = loop.run_until_complete(_scenario(tmp_path, where))
    finally:
        loop.close()
    assert fenced2, "broker 2 sent nothing: fenced"
    assert not fenced1, "broker 1's heartbeat was in the socket before its session ended: not fenced"
