"""``kbroker cluster up|status|down|elect-leaders`` and ``kbroker topics describe`` against the
processes ``cluster up`` leaves running: real processes started by the real command (in a
subprocess that exits while they go on), real clients (kcat, the CLI's own)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.launcher import REPO, live_brokers, pid_alive

pytestmark = pytest.mark.timeout(240)

FAST = ["--broker-config", "broker.heartbeat.interval.ms=500", "--broker-config", "replica.fetch.backoff.ms=200",
        "--controller-config", "broker.session.timeout.ms=3000"]


def kbroker(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")  # rich tables at full width, whatever the terminal
    return subprocess.run([sys.executable, "-m", "cli", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, env=env)


def state(directory: Path) -> dict:
    return json.loads((directory / "cluster.json").read_text())


def pids(directory: Path) -> dict[str, int | None]:
    s = state(directory)
    return {"controller": s["controller"]["pid"], **{f"broker-{b['id']}": b["pid"] for b in s["brokers"]}}


def data_dirs(directory: Path) -> dict[str, str]:
    s = state(directory)
    return {"controller": s["controller"]["data_dir"], **{f"broker-{b['id']}": b["data_dir"] for b in s["brokers"]}}


def wait_until(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.1)


def describe_rows(bootstrap: str, topic: str) -> dict[int, dict[str, str]]:
    """The partition rows of ``kbroker topics describe``, by partition."""
    result = kbroker("topics", "describe", "-b", bootstrap, "-t", topic)
    assert result.returncode == 0, result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│┃").split("│")]
        if len(cells) == 8 and cells[0] == topic:
            rows[int(cells[1])] = dict(zip(("leader", "epoch", "replicas", "isr", "offline", "error"), cells[2:]))
    return rows


@pytest.fixture
def cluster_dir(tmp_path):
    directory = tmp_path / "cluster"
    yield directory
    # Whatever the test left running: kill it by the pids the state file names (and only those).
    if (directory / "cluster.json").exists():
        dirs = data_dirs(directory)
        for name, pid in pids(directory).items():
            if pid_alive(pid, dirs[name]):
                os.kill(pid, signal.SIGKILL)
        s = state(directory)
        for c in s.get("controllers", []):
            if pid_alive(c["pid"], c["data_dir"]):
                os.kill(c["pid"], signal.SIGKILL)
        zk = s.get("zookeeper_server")
        if zk and zk["pid"]:
            try:
                with open(f"/proc/{zk['pid']}/cmdline", "rb") as f:
                    ours = f"{zk['data_dir']}/conf/zoo.cfg".encode() in f.read()
            except OSError:
                ours = False
            if ours:
                os.kill(zk["pid"], signal.SIGKILL)


def test_up_status_describe_restart_elect_down(cluster_dir, kcat_path):
    up = kbroker("cluster", "up", "-n", "3", "--dir", str(cluster_dir), "--base-port", "0", *FAST)
    assert up.returncode == 0, up.stderr
    bootstrap = up.stdout.strip()
    s = state(cluster_dir)
    assert bootstrap == s["bootstrap"] and len(bootstrap.split(",")) == 3
    # The command has exited; the processes it started run on, each with its data dir and log file.
    dirs = data_dirs(cluster_dir)
    first = pids(cluster_dir)
    assert all(pid_alive(pid, dirs[name]) for name, pid in first.items()), first
    assert all(Path(p["log"]).is_file() and Path(p["data_dir"]).is_dir() for p in [s["controller"], *s["brokers"]])
    # Every broker registered and unfenced: the controller says so, and kcat sees three brokers.
    assert live_brokers(s["controller"]["port"]) == {1, 2, 3}
    listing = subprocess.run([kcat_path, "-b", bootstrap, "-L"], capture_output=True, text=True, timeout=60).stdout
    assert " 3 brokers:" in listing, listing

    status = kbroker("cluster", "status", "--dir", str(cluster_dir))
    assert status.returncode == 0, status.stdout + status.stderr
    assert len(re.findall(r"│ broker\s+│ \d\s+│ 127\.0\.0\.1:\d+\s+│ \d+\s+│ running\s+│ live", status.stdout)) == 3
    assert re.search(r"│ controller │ 3000 │ .* running\s+│ listening", status.stdout), status.stdout

    created = kbroker("topics", "create", "-b", bootstrap, "-t", "six", "--partitions", "6",
                      "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    rows = wait_until(lambda: (r := describe_rows(bootstrap, "six")) and len(r) == 6
                      and all(sorted(x["isr"].split(",")) == ["1", "2", "3"] for x in r.values()) and r,
                      20, "six partitions in sync")
    assert sorted(r["leader"] for r in rows.values()) == ["1", "1", "2", "2", "3", "3"]
    assert all(r["leader"] == r["replicas"].split(",")[0] and r["offline"] == "" for r in rows.values()), rows
    assert "0 under-replicated, 0 offline" in kbroker("cluster", "status", "--dir", str(cluster_dir)).stdout

    # kill -9 broker 2: status says it stopped (exit 1); once its session lapses the controller
    # moves its leaderships, and describe shows it offline and out of every ISR.
    os.kill(first["broker-2"], signal.SIGKILL)
    status = kbroker("cluster", "status", "--dir", str(cluster_dir))
    assert status.returncode == 1 and re.search(r"│ broker\s+│ 2\s+│ .* stopped", status.stdout), status.stdout
    rows = wait_until(lambda: (r := describe_rows(bootstrap, "six")) and all(
        x["offline"] == "2" and "2" not in x["isr"].split(",") and x["leader"] in ("1", "3") for x in r.values())
        and r, 20, "broker 2 offline everywhere")
    status = kbroker("cluster", "status", "--dir", str(cluster_dir)).stdout
    assert "6 under-replicated, 0 offline" in status, status
    moved = sorted(p for p, r in rows.items() if r["replicas"].split(",")[0] == "2")
    assert len(moved) == 2

    # up again starts only what is not running (broker 2, with its data) and waits for it.
    again = kbroker("cluster", "up", "--dir", str(cluster_dir))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == bootstrap and "started broker 2" in again.stderr
    second = pids(cluster_dir)
    assert {k: v for k, v in second.items() if k != "broker-2"} == {k: v for k, v in first.items() if k != "broker-2"}
    assert second["broker-2"] != first["broker-2"] and pid_alive(second["broker-2"], dirs["broker-2"])
    wait_until(lambda: "0 under-replicated, 0 offline" in kbroker("cluster", "status", "--dir", str(cluster_dir)).stdout,
               30, "broker 2 back in every ISR")

    # Preferred election gives broker 2 its two leaderships back.
    elect = kbroker("cluster", "elect-leaders", "-b", bootstrap)
    assert elect.returncode == 0, elect.stdout + elect.stderr
    assert elect.stdout.strip() == ("Successfully completed leader election (PREFERRED) for partitions "
                                    + ", ".join(f"six-{p}" for p in moved)), elect.stdout
    rows = wait_until(lambda: (r := describe_rows(bootstrap, "six")) and all(
        x["leader"] == x["replicas"].split(",")[0] for x in r.values()) and r, 20, "preferred leaders")
    again = kbroker("cluster", "elect-leaders", "-b", bootstrap, "-t", "six")
    assert again.returncode == 0 and "Valid replica already elected for partitions six-0, six-1" in again.stdout

    down = kbroker("cluster", "down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert all(not pid_alive(pid, dirs[name]) for name, pid in second.items())
    assert len(re.findall(r"stopped (broker|controller) \d+", down.stderr)) == 4, down.stderr
    status = kbroker("cluster", "status", "--dir", str(cluster_dir))
    assert status.returncode == 1 and len(re.findall(r"│ stopped", status.stdout)) == 4, status.stdout

    # The same cluster comes back with its data: the topic and its assignment are still there.
    back = kbroker("cluster", "up", "--dir", str(cluster_dir))
    assert back.returncode == 0 and back.stdout.strip() == bootstrap, back.stderr
    rows_back = wait_until(lambda: (r := describe_rows(bootstrap, "six")) and len(r) == 6 and r, 20, "the topic")
    assert {p: r["replicas"] for p, r in rows_back.items()} == {p: r["replicas"] for p, r in rows.items()}

    assert kbroker("cluster", "down", "--dir", str(cluster_dir), "--purge").returncode == 0
    assert not cluster_dir.exists()


def test_up_refuses_a_busy_port_and_a_different_size(cluster_dir):
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # brokers on port-1 and port, the controller on port+1: one of them is taken.
        refused = kbroker("cluster", "up", "-n", "2", "--dir", str(cluster_dir), "--base-port", str(port - 1))
    assert refused.returncode == 1 and re.search(rf"port .*\b{port}\b.* already in use", refused.stderr), refused.stderr
    assert not (cluster_dir / "cluster.json").exists()
    up = kbroker("cluster", "up", "-n", "1", "--dir", str(cluster_dir), "--base-port", "0")
    assert up.returncode == 0, up.stderr
    other = kbroker("cluster", "up", "-n", "2", "--dir", str(cluster_dir))
    assert other.returncode == 2 and "holds a cluster of 1 brokers" in other.stderr
    # a cluster that is not secure is not made secure by --secure (its processes keep their configs)
    secure = kbroker("cluster", "up", "--secure", "--dir", str(cluster_dir))
    assert secure.returncode == 2 and "holds a cluster that is not secure" in secure.stderr, secure.stderr
    assert not (cluster_dir / "secrets").exists()
    zookeeper = kbroker("cluster", "up", "--secure", "--zookeeper", "--dir", str(cluster_dir / "zk"))
    assert zookeeper.returncode == 2 and "--secure" in zookeeper.stderr, zookeeper.stderr
    assert kbroker("cluster", "down", "--dir", str(cluster_dir)).returncode == 0
    assert kbroker("cluster", "status", "--dir", str(cluster_dir / "nothing")).returncode == 1


def test_up_with_three_controllers_on_zookeeper_survives_the_active_controllers_kill(cluster_dir):
    up = kbroker("cluster", "up", "-n", "3", "--controllers", "3", "--zookeeper", "--dir", str(cluster_dir),
                 "--base-port", "0", *FAST, "--controller-config", "zookeeper.session.timeout.ms=3000")
    assert up.returncode == 0, up.stderr
    s = state(cluster_dir)
    assert len(s["controllers"]) == 3 and s["zookeeper"] == "start" and s["zookeeper_server"]["pid"]
    assert "standbys" in up.stderr
    status = kbroker("cluster", "status", "--dir", str(cluster_dir))
    assert status.returncode == 0, status.stdout + status.stderr
    assert len(re.findall(r"│ controller │ 30\d\d\s+│ .* running\s+│ active", status.stdout)) == 1, status.stdout
    assert len(re.findall(r"│ controller │ 30\d\d\s+│ .* running\s+│ standby", status.stdout)) == 2, status.stdout
    assert re.search(r"│ zookeeper\s+│ 1\s+│ .* running\s+│ serving", status.stdout), status.stdout

    active = int(re.search(r"│ controller │ (30\d\d)\s+│ .* running\s+│ active", status.stdout).group(1))
    pid = next(c["pid"] for c in s["controllers"] if c["id"] == active)
    os.kill(pid, signal.SIGKILL)
    # A standby takes over; a topic created now gets its leaders.
    status = wait_until(lambda: (st := kbroker("cluster", "status", "--dir", str(cluster_dir)).stdout) and re.search(
        r"│ controller │ (30\d\d)\s+│ .* running\s+│ active", st) and st, 30, "a standby to take over")
    assert int(re.search(r"│ controller │ (30\d\d)\s+│ .* running\s+│ active", status).group(1)) != active
    created = kbroker("topics", "create", "-b", s["bootstrap"], "-t", "after", "--partitions", "3",
                      "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    wait_until(lambda: (r := describe_rows(s["bootstrap"], "after")) and len(r) == 3
               and all(x["leader"] in ("1", "2", "3") for x in r.values()), 30, "leaders for the new topic")
    # up brings the killed controller back, as a standby.
    again = kbroker("cluster", "up", "--dir", str(cluster_dir))
    assert again.returncode == 0 and f"started controller {active}" in again.stderr, again.stderr
    status = kbroker("cluster", "status", "--dir", str(cluster_dir)).stdout
    assert re.search(rf"│ controller │ {active}\s+│ .* running\s+│ standby", status), status

    down = kbroker("cluster", "down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert "stopped zookeeper 1" in down.stderr
    s = state(cluster_dir)
    assert all(p["pid"] is None for p in [*s["controllers"], *s["brokers"], s["zookeeper_server"]]), s
