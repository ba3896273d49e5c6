"""Test support: real brokers on 127.0.0.1 — as a child process (``BrokerProcess``, the way
operators run it: ``python -m broker serve``) or on a background thread's event loop in this
process (``ThreadedBroker``, for blocking clients such as kafka-python). Both are combined
broker,controller nodes by default (a single-node cluster, as ``make run`` starts) and listen
on real sockets; nothing here mocks the network, the disk or the clients."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from pathlib import Path

from controller.launcher import BrokerProcess, free_port, port_open  # noqa: F401  (re-exported for tests)


async def tls_handshake(raw: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO,
                        timeout_s: float) -> None:
    """A client's TLS handshake over a non-blocking socket and memory BIOs (for the tests that
    write TLS records themselves): each flight sent, the peer's answer awaited (``timeout_s``)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            await loop.sock_sendall(raw, outgoing.read())
            data = await asyncio.wait_for(loop.sock_recv(raw, 65536), timeout_s)
            assert data, "closed during the handshake"
            incoming.write(data)
    await loop.sock_sendall(raw, outgoing.read())


def wait_until(predicate, timeout_s: float = 20.0, interval_s: float = 0.02, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def _uvloop_new_event_loop() -> asyncio.AbstractEventLoop:
    import uvloop

    return uvloop.new_event_loop()


# Both event loops, as a parametrization: asyncio's (the tests' default) and uvloop's (the
# broker's, whose callbacks, tasks and contexts are its own C code). A test takes
# ``loop_factory`` and runs its coroutine with ``run_on``.
LOOP_FACTORIES = {"asyncio": asyncio.new_event_loop, "uvloop": _uvloop_new_event_loop}


def run_on(loop_factory, coro):
    """Run ``coro`` to its end on a new event loop from ``loop_factory``, closed afterwards."""
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)


def on_both_loops(check):
    """``async def test_...()`` (no fixtures) as a test run once on each of LOOP_FACTORIES."""
    import pytest

    @pytest.mark.parametrize("loop_factory", list(LOOP_FACTORIES.values()), ids=list(LOOP_FACTORIES))
    def test(loop_factory) -> None:
        run_on(loop_factory, check())
    test.__name__, test.__qualname__, test.__doc__ = check.__name__, check.__qualname__, check.__doc__
    return test


def broker_overrides(log_dir: Path, port: int, broker_id: int = 0) -> dict[str, str]:
    return {"broker.id": str(broker_id), "listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(log_dir)}


class ThreadedBroker:
    """A node (KafkaRaftServer: by default combined broker,controller, the controller on an
    ephemeral port) on its own event loop in a daemon thread of this process. ``server`` is
    its broker (KafkaServer) once started."""

    def __init__(self, log_dir: Path, port: int = 0, broker_id: int = 0, overrides: dict | None = None):
        from broker.config import KafkaConfig
        from controller.kafka_raft_server import KafkaRaftServer

        props = broker_overrides(log_dir, port, broker_id)
        props.update(overrides or {})
        self.node = KafkaRaftServer(KafkaConfig(props))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def _run(self) -> None:
        import uvloop

        self.loop = uvloop.new_event_loop()
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.node.startup())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.close()

    def start(self) -> "ThreadedBroker":
        self.thread = threading.Thread(target=self._run, name="kbroker", daemon=True)
        self.thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("the node did not start within 30 s")
        if self._error is not None:
            raise self._error
        return self

    @property
    def server(self):
        return self.node.broker

    @property
    def port(self) -> int:
        return self.node.bound_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(self, fn, *args):
        """Run ``fn(*args)`` on the broker's loop and return its result (for inspecting state)."""
        async def run():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def run(self, coro, timeout_s: float = 60):
        """Run a coroutine (a client session, say) on the broker's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        if self.loop is None or not self.loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self.node.shutdown(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
