"""Fixtures of the loadgen suites: a tap (``kbroker record``) as a real child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port, port_open, wait_until

KBROKER = str(Path(sys.executable).with_name("kbroker"))


class Tap:
    """``kbroker record`` in front of ``upstream``, recording into ``out``."""

    def __init__(self, upstream: str, out: Path) -> None:
        self.port = free_port()
        self.out = out
        self.log = out.parent / f"{out.name}.tap.log"
        self.proc = subprocess.Popen([KBROKER, "record", "--listen", f"127.0.0.1:{self.port}", "--upstream", upstream,
                                      "--out", str(out)], stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"))
        wait_until(lambda: port_open(self.port) or self.proc.poll() is not None, 30, what="the tap to listen")
        assert self.proc.poll() is None, self.log.read_text()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        assert self.proc.returncode == 0, self.log.read_text()


@pytest.fixture
def tap_factory(tmp_path):
    taps: list[Tap] = []

    def make(upstream: str, name: str = "traffic") -> Tap:
        tap = Tap(upstream, tmp_path / name)
        taps.append(tap)
        return tap

    yield make
    for tap in taps:
        if tap.proc.poll() is None:
            tap.proc.kill()
            tap.proc.wait()


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the whole run (Spark starts slowly on two shared cores); its
    Python workers run this interpreter, which has kbroker installed."""
    import os

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from loadgen.replay import configured

    session = configured(SparkSession.builder.master("local[2]").appName("kbroker-loadgen-tests")
                         .config("spark.ui.enabled", "false")).getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A controller and three brokers (controller/launcher.py's LocalCluster), quick to notice a
    dead broker and to shrink the ISR, as the leader-kill test needs."""
    from controller.launcher import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("cluster"), 3,
                     broker_props={"broker.heartbeat.interval.ms": 500, "replica.fetch.backoff.ms": 200,
                                   "replica.lag.time.max.ms": 2000},
                     controller_props={"broker.session.timeout.ms": 3000})
    try:
        c.start()
        yield c
    finally:
        c.kill()


def cli_replay(master: str, recording: Path, bootstrap: str, out: Path, *extra: str) -> dict:
    """``kbroker loadgen replay --master MASTER ...`` (spark-submit underneath); its result.json."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    result = subprocess.run([KBROKER, "loadgen", "replay", "--master", master, "--recording", str(recording),
                             "--bootstrap", bootstrap, "--out", str(out), *extra], capture_output=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-5000:] + result.stdout.decode()[-5000:]
    # The console table (spark-submit passes the driver's stderr on as its stdout).
    assert b"kbroker load test" in result.stdout + result.stderr
    return json.loads((out / "result.json").read_text())
