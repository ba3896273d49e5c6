"""docker-compose.yml, really started: a compose project of its own (a unique name, free host
ports) that tests and bench/docker_bench.py bring up, drive and tear down.

Works with Debian's docker-compose 1.29 and with ``docker compose`` (v2): both name the default
network ``<project>_default`` and label containers with their service.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from controller.launcher import free_port  # noqa: F401  (used by the compose tests)
from tests import support

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
HA_FILE = REPO / "docker-compose.ha.yml"
SECURE_FILE = REPO / "docker-compose.secure.yml"
HOST_FILE = REPO / "docker-compose.host.yml"
SCALE_FILE = REPO / "docker-compose.scale.yml"
IMAGES = ("kbroker:latest", "kbroker-prometheus:latest")
BROKERS = ("broker-1", "broker-2", "broker-3")


def docker_answers() -> str | None:
    """None if the Docker engine answers ``docker info``, else why not."""
    if shutil.which("docker") is None:
        return "no docker command"
    try:
        result = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                                text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 30 s"
    if result.returncode != 0:
        return f"`docker info` failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}"
    return None


def compose_commands() -> list[list[str]]:
    """Every compose implementation here: Debian's docker-compose (1.29) and ``docker compose`` (v2)."""
    found = []
    if shutil.which("docker-compose"):
        found.append(["docker-compose"])
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        found.append(["docker", "compose"])
    return found


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    return support.wait_until(predicate, timeout_s, interval_s, what)


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {result.stderr.strip()}")
    return result


class ComposeCluster:
    """One compose project of docker-compose.yml (plus ``files``), on free host ports."""

    def __init__(self, *, files: tuple[Path, ...] = (), command: list[str] | None = None,
                 project: str | None = None, one_shot: tuple[str, ...] = (), base: Path = COMPOSE_FILE) -> None:
        """``one_shot``: services that run once and exit (docker-compose.secure.yml's certs and
        admin): done, rather than healthy, when they exited with status 0. ``base``: the file
        ``files`` extend (docker-compose.host.yml stands alone)."""
        self.project = project or f"kbt{uuid.uuid4().hex[:10]}"
        self.one_shot = one_shot
        self.files = (base, *files)
        self.command = command or compose_commands()[0]
        self.ports = {f"BROKER_{i}_PORT": free_port() for i in (1, 2, 3)}
        self.ports["PROMETHEUS_PORT"] = free_port()
        if SCALE_FILE in files:
            self.ports["BROKER_4_PORT"] = free_port()
        self._prometheus_config: Path | None = None
        if HOST_FILE in self.files:
            # network_mode: host: every listener is a port of the host's loopback
            self.ports["CONTROLLER_PORT"] = free_port()
            self.ports["CONTROLLER_METRICS_PORT"] = free_port()
            for i in (1, 2, 3):
                self.ports[f"BROKER_{i}_INTERNAL_PORT"] = free_port()
                self.ports[f"BROKER_{i}_METRICS_PORT"] = free_port()
            self._prometheus_config = Path(tempfile.mkdtemp(prefix=f"{self.project}-")) / "prometheus.yml"
            text = (REPO / "deploy" / "compose" / "prometheus-host.yml").read_text()
            for default, key in (("19404", "CONTROLLER_METRICS_PORT"), ("19405", "BROKER_1_METRICS_PORT"),
                                 ("19406", "BROKER_2_METRICS_PORT"), ("19407", "BROKER_3_METRICS_PORT")):
                text = text.replace(f"127.0.0.1:{default}", f"127.0.0.1:{self.ports[key]}")
            self._prometheus_config.write_text(text)
            self._prometheus_config.parent.chmod(0o755)
            self._prometheus_config.chmod(0o644)

    # -- compose -------------------------------------------------------------------------------

    def compose(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        cmd = [*self.command, "-p", self.project]
        for f in self.files:
            cmd += ["-f", str(f)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "KBROKER_"))}
        env.update({k: str(v) for k, v in self.ports.items()})
        if self._prometheus_config is not None:
            env["PROMETHEUS_CONFIG"] = str(self._prometheus_config)
        result = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd + list(args))} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def up(self, timeout_s: float = 180) -> float:
        """``up -d``, then wait until every service is healthy; the seconds that took."""
        started = time.monotonic()
        self.compose("up", "-d", timeout=timeout_s)
        self.wait_healthy(timeout_s=timeout_s)
        return time.monotonic() - started

    def down(self, volumes: bool = True) -> None:
        self.compose("down", "-t", "10", *(["-v"] if volumes else []), check=False)

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "200", check=False).stdout

    # -- containers ----------------------------------------------------------------------------

    def container(self, service: str) -> str:
        """The id of the service's container (running or not)."""
        out = docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}",
                     "--filter", f"label=com.docker.compose.service={service}").stdout.split()
        if len(out) != 1:
            raise RuntimeError(f"{self.project}: {len(out)} containers for {service}")
        return out[0]

    def services(self) -> list[str]:
        return self.compose("config", "--services").stdout.split()

    def state(self, service: str) -> dict[str, Any]:
        state: dict[str, Any] = json.loads(docker("inspect", "-f", "{{json .State}}", self.container(service)).stdout)
        return state

    def restart_count(self, service: str) -> int:
        return int(docker("inspect", "-f", "{{.RestartCount}}", self.container(service)).stdout)

    def healthy(self, service: str) -> bool:
        state = self.state(service)
        if service in self.one_shot:
            if state.get("Status") == "exited" and state.get("ExitCode") != 0:
                raise RuntimeError(f"{self.project}: the one-shot service {service} exited with {state.get('ExitCode')}")
            return state.get("Status") == "exited"
        return bool(state.get("Running")) and state.get("Health", {}).get("Status") == "healthy"

    def wait_healthy(self, services: list[str] | None = None, timeout_s: float = 180) -> None:
        names = services or self.services()
        wait_for(lambda: all(self.healthy(s) for s in names), timeout_s, f"{names} healthy")

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    # -- what clients on the host use ----------------------------------------------------------

    def external(self, broker: int) -> str:
        return f"127.0.0.1:{self.ports[f'BROKER_{broker}_PORT']}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.external(i) for i in (1, 2, 3))

    def prometheus_query(self, query: str) -> list[dict[str, Any]]:
        """An instant query through Prometheus' HTTP API; the result vector."""
        url = (f"http://127.0.0.1:{self.ports['PROMETHEUS_PORT']}/api/v1/query?"
               + urllib.parse.urlencode({"query": query}))
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


@contextlib.contextmanager
def running(stack: ComposeCluster, timeout_s: float = 180) -> Iterator[ComposeCluster]:
    """``stack`` brought up (if that fails: its logs printed, torn down, the error raised),
    then torn down with its volumes, its logs printed first if a service is not healthy."""
    try:
        stack.up(timeout_s=timeout_s)
    except Exception:
        print(stack.logs())
        stack.down()
        raise
    try:
        yield stack
    finally:
        try:
            unhealthy = any(not stack.healthy(s) for s in stack.services())
        except Exception:  # noqa: BLE001 - a one-shot service that failed: its logs, and down all the same
            unhealthy = True
        if unhealthy:
            print(stack.logs())
        stack.down(volumes=True)
