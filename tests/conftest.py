"""Fixtures shared by the integration suites: real brokers on 127.0.0.1."""

from __future__ import annotations

import shutil

import pytest

from tests.support import BrokerProcess, ThreadedBroker


@pytest.fixture
def threaded_broker(tmp_path):
    """A broker on a background event loop of this process, on a free port."""
    broker = ThreadedBroker(tmp_path / "data", overrides={"listeners": "PLAINTEXT://127.0.0.1:0"}).start()
    yield broker
    broker.stop()


@pytest.fixture
def broker_process(tmp_path):
    """A factory of ``python -m broker serve`` child processes; all are killed at teardown."""
    procs: list[BrokerProcess] = []

    def make(**kw) -> BrokerProcess:
        kw.setdefault("log_dir", tmp_path / f"data{len(procs)}")
        proc = BrokerProcess(**kw)
        procs.append(proc)
        return proc

    yield make
    for p in procs:
        p.kill()


@pytest.fixture(scope="session")
def kcat_path():
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: `make test` installs Debian's kcat (apt-get install kcat)")
    return path
