"""The broker the client and CLI suites talk to: kbroker's own ``KafkaServer`` on a background
event loop of this process (``tests.support.ThreadedBroker``), shared by the whole session.

``KBROKER_TEST_BOOTSTRAP=host:port`` points the suites at another broker instead (tansu, or
an Apache Kafka), to check the client against a second implementation.
"""

from __future__ import annotations

import os
import uuid

import pytest

from protocol.client import KafkaClient

BOOTSTRAP_ENV = "KBROKER_TEST_BOOTSTRAP"


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory) -> str:
    external = os.environ.get(BOOTSTRAP_ENV)
    if external:
        yield external
        return
    try:
        from tests.support import ThreadedBroker
        broker = ThreadedBroker(tmp_path_factory.mktemp("kbroker") / "data",
                                overrides={"listeners": "PLAINTEXT://127.0.0.1:0"}).start()
    except Exception as exc:
        pytest.fail(f"kbroker's broker did not start ({exc!r}); set {BOOTSTRAP_ENV}=host:port to test the "
                    f"client against another broker")
    yield broker.bootstrap
    broker.stop()


@pytest.fixture
async def client(bootstrap: str):
    async with KafkaClient(bootstrap) as c:
        yield c


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def new_topic(client: KafkaClient):
    """``await new_topic(partitions, configs)`` creates a fresh topic and waits for its leaders."""
    async def make(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:12]}"
        await client.create_topics([(name, partitions, 1, configs)])
        for p in await client.partitions_for(name):
            await client.leader_for(name, p)
        return name
    return make
