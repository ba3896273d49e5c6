"""Test support: real brokers on 127.0.0.1 — as a child process (``BrokerProcess``, the way
operators run it: ``python -m broker serve``) or on a background thread's event loop in this
process (``ThreadedBroker``, for blocking clients such as kafka-python). Both listen on real
sockets; nothing here mocks the network, the disk or the clients."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def broker_overrides(log_dir: Path, port: int, broker_id: int = 0, **extra) -> dict[str, str]:
    props = {"broker.id": str(broker_id), "listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(log_dir)}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return props


class BrokerProcess:
    """``python -m broker serve`` as a child process with its own data dir and port."""

    def __init__(self, log_dir: Path, port: int | None = None, broker_id: int = 0, overrides: dict | None = None):
        self.log_dir = Path(log_dir)
        self.port = port or free_port()
        self.broker_id = broker_id
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen | None = None
        self.output = self.log_dir.parent / f"broker-{broker_id}-{self.port}.out"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        props = broker_overrides(self.log_dir, self.port, self.broker_id)
        props.update(self.overrides)
        cmd = [sys.executable, "-m", "broker", "serve"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout_s: float = 30.0) -> "BrokerProcess":
        out = open(self.output, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        out.close()
        deadline = time.monotonic() + timeout_s
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"broker did not listen on {self.port}:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)
        return self

    def log_text(self) -> str:
        try:
            return self.output.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait: the graceful path."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    @property
    def pid(self) -> int:
        return self.proc.pid


class ThreadedBroker:
    """A KafkaServer on its own event loop in a daemon thread of this process."""

    def __init__(self, log_dir: Path, port: int = 0, broker_id: int = 0, overrides: dict | None = None):
        from broker.config import KafkaConfig
        from broker.server import KafkaServer

        props = broker_overrides(log_dir, port, broker_id)
        props.update(overrides or {})
        self.server = KafkaServer(KafkaConfig(props))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def _run(self) -> None:
        import uvloop

        self.loop = uvloop.new_event_loop()
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.startup())
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
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    @property
    def port(self) -> int:
        return self.server.bound_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(self, fn, *args):
        """Run ``fn(*args)`` on the broker's loop and return its result (for inspecting state)."""
        async def run():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def stop(self) -> None:
        if self.loop is None or not self.loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self.server.shutdown(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
