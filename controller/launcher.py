"""Start brokers and controllers as child processes: ``python -m broker serve`` and
``python -m controller``, with per-process overrides; and ``LocalCluster``, a controller
plus N brokers wired to it.

The process-based mirror of docker-compose.yml that tests and benchmarks use (no Docker
engine here): each process gets its own port and data dir on 127.0.0.1, and its output in
a file next to its data dir. ``BrokerProcess.start`` returns once the broker is live: its
own Metadata lists it, which happens when the controller has unfenced it (a combined
single node, the default, in a fraction of a second); ``ControllerProcess.start`` once it
listens. Readiness is read over the Kafka protocol (a blocking Metadata request), so these
synchronous helpers work from inside an event loop too.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from protocol.api_keys import ApiKey
from protocol.client.tls import client_context
from protocol.fast_codecs import encode_request_header
from protocol.messages import APIS

REPO = Path(__file__).resolve().parent.parent
CONTROLLER_LISTENER = "CONTROLLER"

# A secure LocalCluster (``kbroker cluster up --secure``): clients on SASL_SSL with SCRAM, the
# control plane (broker to broker, broker to controller, controller to broker) on SSL listeners
# that require a client certificate, the StandardAuthorizer with no ACL meaning no access.
SECURE_PROTOCOL_MAP = "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL"
SECURE_MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# Certificates are ``kbroker certs``' (cli/certs.py): a process's subject is CN=<name>, a
# client's CN=<name>,OU=clients,O=kbroker; both map to the principal User:<name>, and a
# certificate of any other shape has no principal (its connection is refused).
SECURE_PRINCIPAL_RULES = "RULE:^CN=([^,]+),OU=clients,O=kbroker$/$1/,RULE:^CN=([^,]+)$/$1/"
ADMIN_USER = "admin"
# A secure cluster's controllers on ZooKeeper: their SASL (DIGEST-MD5) identity there, and the
# file (0600, in the secrets directory) that gives them its password.
ZOOKEEPER_USER = "kbroker"
ZOOKEEPER_DIGEST_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"


_PORT_FLOOR = 10000
_ports_given: set[int] = set()
_port_choice = random.SystemRandom()  # (no state a forked process shares with its parent)


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for ports it picks itself (bind to port 0, outgoing connections):
    /proc/sys/net/ipv4/ip_local_port_range, Linux's default where it cannot be read."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port() -> int:
    """A loopback port free now, for a process started later to bind. It is drawn at random
    below the kernel's ephemeral range, never from it: a port the kernel handed out for bind(0)
    is one it hands out again, to any process's outgoing connection, in the time between this
    check and the later bind ("address already in use"), and runs of the suite side by side widen
    that window. Below the range only an explicit bind takes a port: two callers drawing the
    same one of ~20,000 is what is left, and this process never gives the same port twice."""
    low, _ = ephemeral_port_range()
    for _ in range(1000 if low - _PORT_FLOOR >= 1000 else 0):
        port = _port_choice.randrange(_PORT_FLOOR, low)
        if port in _ports_given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ports_given.add(port)
        return port
    # no room below the range (or none found free): the kernel's pick, with the old window back
    print(f"free_port: no free port below the ephemeral range ({low}); taking one of it", file=sys.stderr)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def metadata(port: int, host: str = "127.0.0.1", timeout_s: float = 5.0, tls: ssl.SSLContext | None = None) -> Any:
    """A blocking Metadata v1 request (no topics) to a broker or controller; the parsed response.
    ``tls``: over TLS with this context (an SSL listener; with a client certificate for mutual TLS)."""
    api = APIS[ApiKey.METADATA]
    body = encode_request_header(ApiKey.METADATA, 1, 1, "kbroker-launcher", False) + api.request.build(1, {"topics": []})
    with socket.create_connection((host, port), timeout=timeout_s) as raw:
        raw.settimeout(timeout_s)
        with (tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", read_exactly(sock, 4))[0]
            frame = read_exactly(sock, size)
    return api.response.parse(1, frame, 4)


def read_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return bytes(data)


def pid_alive(pid: int | None, data_dir: str) -> bool:
    """Whether process ``pid`` runs and is the one we started: an argument of its command line
    ends in ``=<data_dir>`` (``log.dirs=...``, ``metadata.log.dir=...``), so a recycled pid or a
    zombie (an empty command line) is not it."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"={data_dir}\0".encode() in f.read()
    except OSError:
        return False


def live_brokers(port: int, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> set[int]:
    """The broker ids a node's Metadata lists (a controller lists the unfenced brokers); empty if it does not answer."""
    try:
        return {b.node_id for b in metadata(port, host, tls=tls).brokers}
    except (OSError, ValueError):
        return set()


class BrokerProcess:
    """One broker process with its own data dir and port; its output goes to a file."""

    role = "broker"

    def __init__(self, log_dir: Path, port: int | None = None, broker_id: int = 0, overrides: dict | None = None,
                 python: str = sys.executable, repo: Path = REPO, host: str = "127.0.0.1",
                 prefix: list[str] | None = None) -> None:
        """``repo``: the checkout whose code runs (another one lets a benchmark compare two trees).
        ``host``: the address it listens on and advertises; ``prefix``: what runs the command
        (``ip netns exec NS`` puts it in a network namespace, tests/netns.py)."""
        self.log_dir = Path(log_dir)
        self.repo = Path(repo)
        self.host = host
        self.prefix = list(prefix or [])
        self.port = port or free_port()
        self.broker_id = broker_id
        self.overrides = dict(overrides or {})
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.recorded_pid: int | None = None  # a process another run started (a cluster's state file)
        self.output = self.log_dir.parent / f"broker-{broker_id}-{self.port}.out"
        # Where and how the harness asks whether it is live (``metadata``): ``port`` in
        # plaintext unless a secure cluster names another listener and its client's TLS settings.
        self.probe_port: int | None = None
        self.probe_properties: dict[str, str] | None = None
        self._probe_tls: ssl.SSLContext | None = None
        self.loggers: dict[str, str] = {}  # logger name -> level (--logger), e.g. kbroker.network: DEBUG
        # A properties file read before the overrides (-c): what must stay off the command line
        # (a secure cluster's ZooKeeper password).
        self.config_file: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def probe_tls(self) -> ssl.SSLContext | None:
        """The TLS context of the harness's probes (built when first needed: the key stores it
        reads may be written after this object is made); None: plaintext."""
        if self.probe_properties is None:
            return None
        if self._probe_tls is None:
            self._probe_tls = client_context(self.probe_properties)
        return self._probe_tls

    def metadata(self, timeout_s: float = 5.0) -> Any:
        """``metadata`` asked of this process, on its probe listener."""
        return metadata(self.probe_port or self.port, self.host, timeout_s, tls=self.probe_tls)

    def live_brokers(self) -> set[int]:
        """The brokers this process's Metadata lists (a controller: the ones it has unfenced);
        empty if it does not answer."""
        return live_brokers(self.probe_port or self.port, self.host, tls=self.probe_tls)

    @property
    def metrics_port(self) -> int | None:
        """The port of its metrics endpoint, when ``metrics.listener`` names one."""
        listener = str(self.overrides.get("metrics.listener") or "")
        port = listener.rsplit(":", 1)[-1].split("/", 1)[0] if listener else ""
        return int(port) if port.isdigit() and int(port) else None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else self.recorded_pid

    def command(self) -> list[str]:
        props = {"broker.id": str(self.broker_id), "listeners": f"PLAINTEXT://{self.host}:{self.port}",
                 "log.dirs": str(self.log_dir), **{k: str(v) for k, v in self.overrides.items()}}
        cmd = [*self.prefix, self.python, "-m", "broker", "serve"]
        if self.config_file is not None:
            cmd += ["-c", str(self.config_file)]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        for name, level in self.loggers.items():
            cmd += ["--logger", f"{name}={level}"]
        return cmd

    def start(self, timeout_s: float = 30.0) -> "BrokerProcess":
        self.launch()
        return self.wait_ready(timeout_s)

    def format_storage(self, cluster_id: str, add_scram: list[str] | tuple[str, ...] = (),
                       ignore_formatted: bool = False) -> subprocess.CompletedProcess:
        """``kbroker storage format`` with this process's configuration (before its first start):
        meta.properties, and bootstrap.checkpoint with the ``--add-scram`` credentials. Raises
        RuntimeError with the command's output if it fails."""
        command = self.command()
        overrides = [a for i, a in enumerate(command) if i and command[i - 1] == "--override"]
        cmd = [*self.prefix, self.python, "-m", "cli", "storage", "format", "-t", cluster_id]
        for pair in overrides:
            cmd += ["--override", pair]
        for entry in add_scram:
            cmd += ["--add-scram", entry]
        if ignore_formatted:
            cmd.append("--ignore-formatted")
        env = dict(os.environ, PYTHONPATH=str(self.repo)) if self.repo != REPO else None
        done = subprocess.run(cmd, cwd=self.repo, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"kbroker storage format of {self.role} {self.broker_id} failed ({done.returncode}): "
                               f"{done.stderr.strip()}")
        return done

    def launch(self, detach: bool = False) -> "BrokerProcess":
        """Start the process; ``wait_ready`` waits for it (several can start at once).
        ``detach``: in a session of its own, so that it outlives the caller and its terminal's
        signals (``kbroker cluster up``)."""
        self.log_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.output, "ab") as out:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            if self.repo != REPO:  # its packages first, ahead of the editable install of this one
                env["PYTHONPATH"] = str(self.repo)
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, cwd=self.repo, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=detach)
        self.recorded_pid = None
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> "BrokerProcess":
        deadline = time.monotonic() + timeout_s
        self._wait(lambda: port_open(self.port, self.host), deadline, f"to listen on {self.port}")
        self._wait(self.ready, deadline, "to be live")
        return self

    def ready(self) -> bool:
        """Live: its own Metadata lists it (the controller unfenced it and told it so)."""
        return self.broker_id in self.live_brokers()

    def _wait(self, condition, deadline: float, what: str) -> None:
        while not condition():
            if not self.running:
                status = self.proc.returncode if self.proc is not None else "?"
                raise RuntimeError(f"{self.role} {self.broker_id} exited with {status}:\n"
                                   f"{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"{self.role} {self.broker_id} did not come {what}:\n"
                                   f"{self.log_text()[-3000:]}")
            time.sleep(0.02)

    def log_text(self) -> str:
        try:
            return self.output.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait: the graceful path. Returns the exit status (0 for a process another
        run started, whose status this one cannot see)."""
        if self.proc is None:
            if self.running:
                self.signal(signal.SIGTERM)
                self._wait_gone(timeout_s)
            return 0
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        elif self.proc is None and self.running:
            self.signal(signal.SIGKILL)
            self._wait_gone(10)

    def _wait_gone(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.running:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.command(), timeout_s)
            time.sleep(0.02)

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            self.proc.send_signal(sig)
        elif self.recorded_pid:
            os.kill(self.recorded_pid, sig)

    @property
    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_alive(self.recorded_pid, str(self.log_dir))


class ControllerProcess(BrokerProcess):
    """One controller process (``python -m controller``) with its own metadata dir and port."""

    role = "controller"

    def __init__(self, metadata_dir: Path, port: int | None = None, node_id: int = 3000, overrides: dict | None = None,
                 python: str = sys.executable, host: str = "127.0.0.1", prefix: list[str] | None = None, *,
                 await_active: bool = False) -> None:
        """``await_active``: ``start`` returns once this controller is the active one (a lone
        controller on ZooKeeper starts as a standby and wins the election a moment later, or once
        the session of a killed predecessor has expired); otherwise once it listens."""
        super().__init__(metadata_dir, port, node_id, overrides, python, host=host, prefix=prefix)
        self.node_id = node_id
        self.await_active = await_active
        self.output = self.log_dir.parent / f"controller-{node_id}-{self.port}.out"

    @property
    def metadata_dir(self) -> Path:
        return self.log_dir

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def ready(self) -> bool:
        return not self.await_active or self.is_active()

    def is_active(self) -> bool:
        """Its Metadata names itself the controller (a standby names the active one, or -1)."""
        try:
            return self.metadata(timeout_s=2.0).controller_id == self.node_id
        except (OSError, ValueError):
            return False

    def command(self) -> list[str]:
        props = {"process.roles": "controller", "node.id": str(self.node_id),
                 "listeners": f"CONTROLLER://{self.host}:{self.port}", "controller.listener.names": "CONTROLLER",
                 "metadata.log.dir": str(self.log_dir), **{k: str(v) for k, v in self.overrides.items()}}
        cmd = [*self.prefix, self.python, "-m", "controller"]
        if self.config_file is not None:
            cmd += ["-c", str(self.config_file)]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        for name, level in self.loggers.items():
            cmd += ["--logger", f"{name}={level}"]
        return cmd


class LocalCluster:
    """Controller processes and broker processes (``process.roles=broker``) registered with them,
    each with its own data dir under ``directory`` (``controller-<id>``, ``broker-<id>``) and
    its output in ``directory/<role>-<id>-<port>.out``. ``base_port`` numbers the ports from
    there (brokers in id order, then the controllers: 9092 gives brokers 9092, 9093, 9094 and
    the controller 9095); ``controller_port`` / ``broker_ports`` name them one by one; otherwise
    free ports are picked.

    One controller (the default) keeps its metadata locally. ``controllers=3`` with
    ``zookeeper=<zookeeper.connect>`` starts standby controllers on ZooKeeper
    (controller.metadata.store=zookeeper): one is elected active, and every broker lists all of
    them in controller.quorum.bootstrap.servers. ``controller`` is the first controller
    process; ``active_controller()`` the one that is active now.

    ``start()`` starts the controllers, then the brokers, and returns once the active controller
    lists every broker as unfenced. ``broker_props`` / ``controller_props`` override any key (e.g.
    ``broker.session.timeout.ms`` for quicker failover in tests). ``metrics=True`` gives every
    process a metrics endpoint on a free port (``metrics_port`` of each; ``metrics_targets``);
    ``metrics_base_port`` numbers them from there instead (controllers first: deploy/prometheus.yml
    expects 9404).

    ``save_state()`` writes ``directory/cluster.json`` (ids, ports, pids, overrides) and
    ``LocalCluster.load(directory)`` builds the same cluster from it, its processes identified
    by pid (and data dir): what ``kbroker cluster up|status|down`` use across invocations."""

    def __init__(self, directory: Path, brokers: int = 3, *, broker_ids: list[int] | None = None,
                 controller_id: int = 3000, base_port: int | None = None, controller_port: int | None = None,
                 broker_ports: dict[int, int] | None = None, broker_props: dict | None = None,
                 controller_props: dict | None = None, python: str = sys.executable, controllers: int = 1,
                 controller_ports: list[int] | None = None, zookeeper: str | None = None,
                 zookeeper_port: int | None = None, metrics: bool = False,
                 metrics_base_port: int | None = None, secure: bool = False,
                 internal_ports: dict[int, int] | None = None) -> None:
        """``zookeeper``: the zookeeper.connect of the controllers, or ``"start"``: a ZooKeeper
        server of the cluster's own (``directory/zookeeper``, on ``zookeeper_port``), started
        first and stopped last (what ``kbroker cluster up --zookeeper`` does).

        ``secure``: what ``kbroker cluster up --secure`` runs (see ``secure_properties``):
        brokers' client listener (``port``) on SASL_SSL with SCRAM, and an INTERNAL listener
        (``internal_ports``, or the ports after the controllers' from ``base_port``, or free
        ones) on SSL with client certificates required, like the controller's listener; the
        key stores are read from ``secrets_dir``, which must hold them before ``launch``
        (cli/cluster.py makes them with ``kbroker certs``). The harness probes the processes
        over the SSL listeners with the ``admin`` client certificate. With ZooKeeper too, the
        controllers authenticate to it (SASL, ``zookeeper.set.acl``): the cluster's own ZooKeeper
        takes SASL sessions only, with the password of ``zookeeper_password_file``, which the
        controllers read from ``zookeeper_client_file`` (both made by cli/cluster.py); another
        ZooKeeper needs ``zookeeper.sasl.jaas.config`` in ``controller_props``."""
        self.directory = Path(directory)
        if controllers > 1 and not zookeeper:
            raise ValueError("several controllers need ZooKeeper (zookeeper=<zookeeper.connect>)")
        if secure and zookeeper and zookeeper != "start" and not (controller_props or {}).get("zookeeper.sasl.jaas.config"):
            raise ValueError("a secure cluster's controllers authenticate to ZooKeeper: with a ZooKeeper of your own, "
                             "give their identity (controller_props zookeeper.sasl.jaas.config)")
        self.secure = secure
        metrics = metrics or metrics_base_port is not None
        metrics_ports = iter(range(metrics_base_port, metrics_base_port + controllers
                                   + len(broker_ids or range(brokers)))) if metrics_base_port else None

        def metrics_listener() -> str:
            return f"http://127.0.0.1:{next(metrics_ports) if metrics_ports else free_port()}"
        ids = list(broker_ids) if broker_ids is not None else list(range(1, brokers + 1))
        broker_ports = dict(broker_ports or {})
        ports: list[int | None] = list(controller_ports or [controller_port] + [None] * (controllers - 1))
        if base_port:
            broker_ports = {i: base_port + n for n, i in enumerate(ids)}
            ports = [base_port + len(ids) + n for n in range(controllers)]
            zookeeper_port = zookeeper_port or base_port + len(ids) + controllers
            if secure:  # after the controllers' (and the cluster's own ZooKeeper's)
                first = base_port + len(ids) + controllers + (1 if zookeeper == "start" else 0)
                internal_ports = {i: first + n for n, i in enumerate(ids)}
        self.zookeeper_server: ZooKeeperProcess | None = None
        if zookeeper == "start":
            self.zookeeper_server = ZooKeeperProcess(self.directory / "zookeeper", zookeeper_port)
            zookeeper = f"{self.zookeeper_server.address}/kbroker"
        self.zookeeper = zookeeper
        self.controller_props = dict(controller_props or {})
        cprops = dict(self.controller_props)
        if zookeeper:
            cprops = {"controller.metadata.store": "zookeeper", "zookeeper.connect": zookeeper, **cprops}
            if secure:  # SASL to ZooKeeper, and every znode the controllers make theirs alone
                cprops = {"zookeeper.set.acl": "true", **cprops}
        self.controllers = []
        processes = [f"controller-{controller_id + n}" for n in range(controllers)] + [f"broker-{i}" for i in ids]
        self.super_users = [f"User:{name}" for name in (ADMIN_USER, *processes)]
        for n in range(controllers):
            props = {**self.secure_properties(f"controller-{controller_id + n}"), **cprops} if secure else dict(cprops)
            if metrics and "metrics.listener" not in props:
                props["metrics.listener"] = metrics_listener()
            self.controllers.append(ControllerProcess(self.directory / f"controller-{controller_id + n}", ports[n],
                                                      controller_id + n, props, python))
            if secure and self.zookeeper_server is not None:
                self.controllers[-1].config_file = self.zookeeper_client_file
        self.controller = self.controllers[0]
        self.broker_props = dict(broker_props or {})
        self.brokers: dict[int, BrokerProcess] = {}
        quorum = ",".join(c.address for c in self.controllers)
        for i in ids:
            props = {"process.roles": "broker", "node.id": i, "controller.quorum.bootstrap.servers": quorum,
                     "controller.listener.names": CONTROLLER_LISTENER}
            port = broker_ports.get(i) or free_port()
            internal = None
            if secure:
                internal = (internal_ports or {}).get(i) or free_port()
                props.update(self.secure_properties(f"broker-{i}"))
                props.update({"listeners": f"CLIENT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal}",
                              "inter.broker.listener.name": "INTERNAL",
                              "sasl.enabled.mechanisms": SECURE_MECHANISMS})
            props.update(self.broker_props)
            if metrics and "metrics.listener" not in self.broker_props:
                props["metrics.listener"] = metrics_listener()
            self.brokers[i] = BrokerProcess(self.directory / f"broker-{i}", port, i, props, python)
            self.brokers[i].probe_port = internal
        if secure:
            for p in [*self.controllers, *self.brokers.values()]:
                p.probe_properties = self.admin_tls_properties()

    # -- a secure cluster ---------------------------------------------------------------------

    @property
    def secrets_dir(self) -> Path:
        """A secure cluster's CA, key stores and admin password (0700; never to be committed)."""
        return self.directory / "secrets"

    @property
    def ca_file(self) -> Path:
        return self.secrets_dir / "ca.pem"

    @property
    def zookeeper_password_file(self) -> Path:
        """A secure cluster's own ZooKeeper: the controllers' SASL password there (random, 0600)."""
        return self.secrets_dir / "zookeeper.password"

    @property
    def zookeeper_client_file(self) -> Path:
        """The controllers' properties file (0600) with their zookeeper.sasl.jaas.config."""
        return self.secrets_dir / "controller-zookeeper.properties"

    def keystore(self, name: str) -> Path:
        """``kbroker certs``' PEM key store of a process or client (``broker-1``, ``admin``)."""
        return self.secrets_dir / f"{name}.pem"

    def certificate_names(self) -> tuple[list[str], list[str]]:
        """The certificates a secure cluster needs: the processes' (controllers, brokers) and the clients'."""
        return ([f"controller-{c.broker_id}" for c in self.controllers] + [f"broker-{i}" for i in self.brokers],
                [ADMIN_USER])

    def secure_properties(self, name: str) -> dict[str, str]:
        """The security settings of process ``name`` (``controller-3000``, ``broker-1``), the
        same on the controller and the brokers apart from the key store: every process's
        principal, and ``admin``'s, is a super user."""
        return {"listener.security.protocol.map": SECURE_PROTOCOL_MAP,
                "inter.broker.listener.name": "INTERNAL",
                "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.keystore(name)),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file),
                "listener.name.internal.ssl.client.auth": "required",
                "listener.name.controller.ssl.client.auth": "required",
                "ssl.principal.mapping.rules": SECURE_PRINCIPAL_RULES,
                "authorizer.class.name": STANDARD_AUTHORIZER,
                "allow.everyone.if.no.acl.found": "false",
                "super.users": ";".join(self.super_users)}

    def admin_tls_properties(self) -> dict[str, str]:
        """Kafka client properties of the ``admin`` client certificate on the SSL listeners
        (the harness's probes, and how ``kbroker cluster up`` creates the SCRAM admin)."""
        return {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file),
                "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.keystore(ADMIN_USER))}

    @property
    def internal_bootstrap(self) -> str:
        """host:port of every broker's SSL (mutual TLS) listener; the client bootstrap when not secure."""
        return ",".join(f"{b.host}:{b.probe_port or b.port}" for b in self.brokers.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    @property
    def metrics_targets(self) -> list[str]:
        """host:port of every process's metrics endpoint (a Prometheus scrape config's targets)."""
        return [f"127.0.0.1:{p.metrics_port}" for p in self.processes if p.metrics_port]

    @property
    def processes(self) -> list[Any]:
        own_zookeeper = [self.zookeeper_server] if self.zookeeper_server is not None else []
        return [*own_zookeeper, *self.controllers, *self.brokers.values()]

    def active_controller(self) -> ControllerProcess | None:
        """The running controller that names itself the controller in its Metadata (None: none now)."""
        for c in self.controllers:
            if not c.running:
                continue
            try:
                if c.metadata(timeout_s=2.0).controller_id == c.node_id:
                    return c
            except (OSError, ValueError):
                continue
        return None

    def wait_active_controller(self, timeout_s: float = 60.0, *,
                               not_this: ControllerProcess | None = None) -> ControllerProcess:
        deadline = time.monotonic() + timeout_s
        while True:
            active = self.active_controller()
            if active is not None and active is not not_this:
                return active
            if time.monotonic() > deadline:
                raise TimeoutError(f"no active controller after {timeout_s}s")
            time.sleep(0.02)

    def start(self, timeout_s: float = 60.0, detach: bool = False) -> "LocalCluster":
        """Start whatever of the cluster is not running (everything, the first time), and wait
        until every broker is live. ``detach``: the processes outlive the caller."""
        self.launch(timeout_s, detach)
        self.wait_ready(timeout_s)
        return self

    def launch(self, timeout_s: float = 60.0, detach: bool = False) -> list[Any]:
        """Start the processes that are not running: the controllers first (until they listen
        and one is active), then the brokers, without waiting for them. Returns the ones started."""
        started: list[Any] = []
        zk = self.zookeeper_server
        if zk is not None:
            if self.secure:  # only the controllers' identity gets a session (cli/cluster.py made the password)
                zk.sasl_users = {ZOOKEEPER_USER: self.zookeeper_password_file.read_text().strip()}
                zk.require_sasl = True
            if not zk.running:
                zk.launch(detach)
                started.append(zk)
            zk.wait_ready(timeout_s)
        for c in self.controllers:
            if not c.running:
                c.launch(detach)
                started.append(c)
        for c in self.controllers:
            c.wait_ready(timeout_s)
        self.wait_active_controller(timeout_s)
        for b in self.brokers.values():
            if not b.running:
                b.launch(detach)
                started.append(b)
        return started

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        for b in self.brokers.values():
            b.wait_ready(max(0.1, deadline - time.monotonic()))
        self.wait_live(list(self.brokers), max(0.1, deadline - time.monotonic()))

    STATE_FILE = "cluster.json"

    @property
    def state_file(self) -> Path:
        return self.directory / self.STATE_FILE

    def state(self) -> dict[str, Any]:
        def process(p: BrokerProcess) -> dict[str, Any]:
            return {"id": p.broker_id, "port": p.port, "pid": p.pid if p.running else None,
                    "data_dir": str(p.log_dir), "log": str(p.output),
                    "metrics_listener": p.overrides.get("metrics.listener"),
                    **({"internal_port": p.probe_port} if p.probe_port else {})}
        zk = self.zookeeper_server
        return {"controller": process(self.controller), "controllers": [process(c) for c in self.controllers],
                "zookeeper": "start" if zk is not None else self.zookeeper,
                "zookeeper_server": None if zk is None else {"port": zk.port, "pid": zk.pid if zk.running else None,
                                                             "data_dir": str(zk.directory), "log": str(zk.output)},
                "brokers": [process(b) for b in self.brokers.values()],
                "broker_props": {k: str(v) for k, v in self.broker_props.items()},
                "controller_props": {k: str(v) for k, v in self.controller_props.items()},
                "secure": self.secure,
                "bootstrap": self.bootstrap}

    def save_state(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state(), indent=2) + "\n")
        os.replace(tmp, self.state_file)

    @classmethod
    def load(cls, directory: Path, python: str = sys.executable) -> "LocalCluster":
        """The cluster whose state file ``directory`` holds (FileNotFoundError if none)."""
        directory = Path(directory)
        state = json.loads((directory / cls.STATE_FILE).read_text())
        brokers = state["brokers"]
        controllers = state.get("controllers") or [state["controller"]]
        zk = state.get("zookeeper_server")
        cluster = cls(directory, broker_ids=[b["id"] for b in brokers], controller_id=controllers[0]["id"],
                      controller_ports=[c["port"] for c in controllers], controllers=len(controllers),
                      zookeeper=state.get("zookeeper"), zookeeper_port=zk["port"] if zk else None,
                      broker_ports={b["id"]: b["port"] for b in brokers},
                      broker_props=state.get("broker_props"), controller_props=state.get("controller_props"),
                      python=python, secure=bool(state.get("secure")),
                      internal_ports={b["id"]: b["internal_port"] for b in brokers if b.get("internal_port")})
        for c, saved in zip(cluster.controllers, controllers):
            c.recorded_pid = saved["pid"]
        if cluster.zookeeper_server is not None and zk:
            cluster.zookeeper_server.recorded_pid = zk["pid"]
        for b in brokers:
            cluster.brokers[b["id"]].recorded_pid = b["pid"]
        for p, saved in (*zip(cluster.controllers, controllers), *((cluster.brokers[b["id"]], b) for b in brokers)):
            if saved.get("metrics_listener"):
                p.overrides["metrics.listener"] = saved["metrics_listener"]
        return cluster

    def wait_live(self, ids: list[int] | None = None, timeout_s: float = 60.0) -> None:
        """Until the active controller lists these brokers (all, by default) as unfenced."""
        wanted = set(self.brokers if ids is None else ids)
        deadline = time.monotonic() + timeout_s

        def live() -> set[int]:
            active = self.active_controller() if len(self.controllers) > 1 else self.controller
            return active.live_brokers() if active is not None else set()

        while not wanted <= live():
            if time.monotonic() > deadline:
                raise TimeoutError(f"brokers {sorted(wanted - live())} are not live after {timeout_s}s")
            time.sleep(0.02)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the brokers (controlled shutdown: the controllers must still run), then the controllers."""
        for b in self.brokers.values():
            if b.running:
                b.signal(signal.SIGTERM)
        for b in self.brokers.values():
            b.stop(timeout_s)
        for c in self.controllers:
            c.stop(timeout_s)
        if self.zookeeper_server is not None:
            self.zookeeper_server.stop(timeout_s)

    def kill(self) -> None:
        for b in self.brokers.values():
            b.kill()
        for c in self.controllers:
            c.kill()
        if self.zookeeper_server is not None:
            self.zookeeper_server.kill()


# ----------------------------------------------------------------------------------------
# ZooKeeper (Debian's ``zookeeper`` package: /usr/share/java/zookeeper.jar, whose manifest
# names its dependencies; started as Debian's zkServer.sh starts it, ``java -cp <conf>:<jar>
# org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg``, in the foreground).

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
ZOOKEEPER_LOG4J = """log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
"""


def zookeeper_available() -> bool:
    return ZOOKEEPER_JAR.exists()


def four_letter_word(port: int, word: str = "srvr", host: str = "127.0.0.1", timeout_s: float = 1.0) -> str:
    """A ZooKeeper four-letter-word command's answer ('' if the server does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(word.encode())
            out = bytearray()
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                out += chunk
        return out.decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperProcess:
    """One ZooKeeper server (standalone, or member ``myid`` of an ensemble) with its own data
    dir, config and output file under ``directory``, on free ports. ``tick_ms`` is short so
    that tests can use short session timeouts (ZooKeeper allows 2 to 20 ticks)."""

    def __init__(self, directory: Path, client_port: int | None = None, *, myid: int = 1,
                 peers: list[tuple[int, int, int]] | None = None, tick_ms: int = 200, java: str = "java",
                 sasl_users: dict[str, str] | None = None) -> None:
        """``sasl_users``: name -> password the server accepts with SASL DIGEST-MD5 (its JAAS
        ``Server`` section; unauthenticated clients still connect, and ACLs decide what they see)."""
        self.sasl_users = dict(sasl_users or {})
        # With SASL users: refuse any session that has not authenticated (enforce.auth, ZooKeeper 3.7+).
        self.require_sasl = False
        self.directory = Path(directory)
        self.client_port = client_port or free_port()
        self.myid = myid
        self.peers = peers  # [(myid, quorum port, election port)] of every member, or None: standalone
        self.tick_ms = tick_ms
        self.java = java
        self.proc: subprocess.Popen | None = None
        self.recorded_pid: int | None = None  # a process another run started (a cluster's state file)
        self.output = self.directory / "zookeeper.out"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    # What ``kbroker cluster`` shows of any process.
    @property
    def port(self) -> int:
        return self.client_port

    @property
    def broker_id(self) -> int:
        return self.myid

    @property
    def bootstrap(self) -> str:
        return self.address

    @property
    def log_dir(self) -> Path:
        return self.directory

    metrics_port = None  # no metrics endpoint (LocalCluster.metrics_targets)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else self.recorded_pid

    def config_text(self) -> str:
        lines = [f"tickTime={self.tick_ms}", "initLimit=50", "syncLimit=25", f"dataDir={self.directory / 'data'}",
                 f"clientPort={self.client_port}", "clientPortAddress=127.0.0.1", "maxClientCnxns=0",
                 "admin.enableServer=false", "4lw.commands.whitelist=*", "autopurge.purgeInterval=1",
                 f"minSessionTimeout={2 * self.tick_ms}", "maxSessionTimeout=120000", "forceSync=yes"]
        if self.sasl_users:
            lines.append("authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider")
            if self.require_sasl:
                lines += ["enforce.auth.enabled=true", "enforce.auth.schemes=sasl"]
        if self.peers:
            lines.append("standaloneEnabled=false")
            for sid, quorum, election in self.peers:
                lines.append(f"server.{sid}=127.0.0.1:{quorum}:{election}")
        return "\n".join(lines) + "\n"

    def command(self) -> list[str]:
        conf = self.directory / "conf"
        jaas = [f"-Djava.security.auth.login.config={conf / 'jaas.conf'}"] if self.sasl_users else []
        return [self.java, "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.jmx.log4j.disable=true", *jaas,
                f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}", "-cp", f"{conf}:{ZOOKEEPER_JAR}",
                ZOOKEEPER_MAIN, str(conf / "zoo.cfg")]

    def launch(self, detach: bool = False) -> "ZooKeeperProcess":
        if not zookeeper_available():
            raise RuntimeError(f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper package (make test-deps)")
        conf = self.directory / "conf"
        data = self.directory / "data"
        conf.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        (conf / "zoo.cfg").write_text(self.config_text())
        (conf / "log4j.properties").write_text(ZOOKEEPER_LOG4J)
        if self.sasl_users:
            users = " ".join(f'user_{u}="{p}"' for u, p in self.sasl_users.items())
            jaas = conf / "jaas.conf"  # passwords: readable by this user only
            fd = os.open(jaas, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required {users};\n}};\n")
            os.chmod(jaas, 0o600)
        (data / "myid").write_text(f"{self.myid}\n")
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, cwd=self.directory,
                                         stdin=subprocess.DEVNULL, start_new_session=detach)
        self.recorded_pid = None
        return self

    def start(self, timeout_s: float = 60.0) -> "ZooKeeperProcess":
        self.launch()
        return self.wait_ready(timeout_s)

    def serving(self) -> bool:
        """It answers ``srvr`` with a mode (standalone, leader or follower): it serves clients."""
        return "Mode:" in four_letter_word(self.client_port)

    def wait_ready(self, timeout_s: float = 60.0) -> "ZooKeeperProcess":
        deadline = time.monotonic() + timeout_s
        while not self.serving():
            if not self.running:
                raise RuntimeError(f"zookeeper {self.myid} exited:\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"zookeeper {self.myid} did not serve on {self.client_port}:\n"
                                   f"{self.log_text()[-3000:]}")
            time.sleep(0.05)
        return self

    def log_text(self) -> str:
        try:
            return self.output.read_text(errors="replace")
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if not self.recorded_pid:
            return False
        try:  # the pid is this server's only if its command line names this config
            with open(f"/proc/{self.recorded_pid}/cmdline", "rb") as f:
                return str(self.directory / "conf" / "zoo.cfg").encode() + b"\0" in f.read()
        except OSError:
            return False

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            self.proc.send_signal(sig)
        elif self.recorded_pid:
            os.kill(self.recorded_pid, sig)

    def _wait_gone(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.running:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self, timeout_s: float = 30.0) -> int:
        if self.proc is None:
            if self.running:
                self.signal(signal.SIGTERM)
                if not self._wait_gone(timeout_s):
                    self.kill()
            return 0
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        elif self.proc is None and self.running:
            self.signal(signal.SIGKILL)
            self._wait_gone(10)


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers forming one ensemble (``size`` 1: one standalone server)."""

    def __init__(self, directory: Path, size: int = 1, *, tick_ms: int = 200) -> None:
        self.directory = Path(directory)
        peers = [(i, free_port(), free_port()) for i in range(1, size + 1)] if size > 1 else None
        self.servers = [ZooKeeperProcess(self.directory / f"zookeeper-{i}", myid=i, peers=peers, tick_ms=tick_ms)
                        for i in range(1, size + 1)]

    @property
    def connect(self) -> str:
        """zookeeper.connect for this ensemble."""
        return ",".join(s.address for s in self.servers)

    def start(self, timeout_s: float = 90.0) -> "ZooKeeperEnsemble":
        for s in self.servers:
            s.launch()
        for s in self.servers:
            s.wait_ready(timeout_s)
        return self

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def kill(self) -> None:
        for s in self.servers:
            s.kill()
