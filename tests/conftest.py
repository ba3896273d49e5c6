"""Fixtures shared by the integration suites: real brokers on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from tests.support import BrokerProcess, ThreadedBroker


BOOTSTRAP_ENV = "KBROKER_TEST_BOOTSTRAP"


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory) -> str:
    """The broker the client and CLI suites talk to: kbroker's own ``KafkaServer`` on a background
    event loop of this process (``ThreadedBroker``), shared by the whole session.

    ``KBROKER_TEST_BOOTSTRAP=host:port`` points the suites at another broker instead (tansu, or
    an Apache Kafka), to check the client against a second implementation.
    """
    external = os.environ.get(BOOTSTRAP_ENV)
    if external:
        yield external
        return
    try:
        broker = ThreadedBroker(tmp_path_factory.mktemp("kbroker") / "data",
                                overrides={"listeners": "PLAINTEXT://127.0.0.1:0"}).start()
    except Exception as exc:
        pytest.fail(f"kbroker's broker did not start ({exc!r}); set {BOOTSTRAP_ENV}=host:port to test the "
                    f"client against another broker")
    yield broker.bootstrap
    broker.stop()


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


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


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One ZooKeeper server (Debian's package, a real process) for the session; tests take a
    chroot of their own (``zookeeper_connect``)."""
    from controller.launcher import ZooKeeperEnsemble
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper"), 1).start()
    try:
        yield ensemble
    finally:
        ensemble.kill()


@pytest.fixture
def zookeeper_connect(zookeeper, request) -> str:
    """zookeeper.connect with a chroot of this test's own."""
    import re
    import uuid
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:80]
    return f"{zookeeper.connect}/{name}-{uuid.uuid4().hex[:8]}"
