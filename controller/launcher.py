"""Start brokers and controllers as child processes: ``python -m broker serve`` and
``python -m controller``, with per-process overrides.

The process-based mirror of docker-compose.yml that tests and benchmarks use (no Docker
engine here): each process gets its own port and data dir on 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class BrokerProcess:
    """One broker process with its own data dir and port; its output goes to a file."""

    def __init__(self, log_dir: Path, port: int | None = None, broker_id: int = 0, overrides: dict | None = None,
                 python: str = sys.executable, repo: Path = REPO) -> None:
        """``repo``: the checkout whose code runs (another one lets a benchmark compare two trees)."""
        self.log_dir = Path(log_dir)
        self.repo = Path(repo)
        self.port = port or free_port()
        self.broker_id = broker_id
        self.overrides = dict(overrides or {})
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.output = self.log_dir.parent / f"broker-{broker_id}-{self.port}.out"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def command(self) -> list[str]:
        props = {"broker.id": str(self.broker_id), "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                 "log.dirs": str(self.log_dir), **{k: str(v) for k, v in self.overrides.items()}}
        cmd = [self.python, "-m", "broker", "serve"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout_s: float = 30.0) -> "BrokerProcess":
        self.log_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.output, "ab") as out:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            if self.repo != REPO:  # its packages first, ahead of the editable install of this one
                env["PYTHONPATH"] = str(self.repo)
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, cwd=self.repo, env=env)
        deadline = time.monotonic() + timeout_s
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.command()[2]} {self.broker_id} exited with {self.proc.returncode}:\n"
                                   f"{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"broker {self.broker_id} did not listen on {self.port}:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)
        return self

    def log_text(self) -> str:
        try:
            return self.output.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait: the graceful path. Returns the exit status."""
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


class ControllerProcess(BrokerProcess):
    """One controller process (``python -m controller``) with its own metadata dir and port."""

    def __init__(self, metadata_dir: Path, port: int | None = None, node_id: int = 3000, overrides: dict | None = None,
                 python: str = sys.executable) -> None:
        super().__init__(metadata_dir, port, node_id, overrides, python)
        self.node_id = node_id
        self.output = self.log_dir.parent / f"controller-{node_id}-{self.port}.out"

    @property
    def metadata_dir(self) -> Path:
        return self.log_dir

    def command(self) -> list[str]:
        props = {"process.roles": "controller", "node.id": str(self.node_id),
                 "listeners": f"CONTROLLER://127.0.0.1:{self.port}", "controller.listener.names": "CONTROLLER",
                 "metadata.log.dir": str(self.log_dir), **{k: str(v) for k, v in self.overrides.items()}}
        cmd = [self.python, "-m", "controller"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd
