"""Fixtures of the client suite; ``bootstrap`` and ``topic_name`` (shared with the CLI suite)
are in tests/conftest.py."""

from __future__ import annotations

import uuid

import pytest

from protocol.client import KafkaClient


@pytest.fixture
async def client(bootstrap: str):
    async with KafkaClient(bootstrap) as c:
        yield c


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
