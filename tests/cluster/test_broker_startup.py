"""A broker with a controller opens its listener before it registers (the port must be bound to
be advertised, and the controller's requests come in through it) but serves clients only once
the controller has unfenced it and told it so, as Kafka's broker enables request processing
only then. Before that, a client connecting at once (a CreateTopics right after start, as
``kbroker serve`` followed by ``kbroker topics create`` does) met a controller that knew no
live broker: INVALID_REPLICATION_FACTOR "larger than available brokers: 0"."""

from __future__ import annotations

import asyncio

import pytest

from controller.launcher import BrokerProcess, ControllerProcess, port_open
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from protocol.errors import ErrorCode
from tests.support import wait_until

pytestmark = pytest.mark.timeout(180)


async def test_requests_that_come_before_the_broker_is_live_are_served_once_it_is(tmp_path):
    controller = ControllerProcess(tmp_path / "controller")  # started only after the client asked
    broker = BrokerProcess(tmp_path / "broker-1", None, 1, {
        "process.roles": "broker", "node.id": 1, "controller.quorum.bootstrap.servers": controller.address,
        "controller.listener.names": "CONTROLLER", "broker.heartbeat.interval.ms": 500})
    try:
        broker.launch()
        wait_until(lambda: port_open(broker.port) or not broker.running, 60, what="the broker to listen")
        assert broker.running, broker.log_text()[-3000:]
        conn = BrokerConnection("127.0.0.1", broker.port, client_id="test")
        await conn.connect()  # ApiVersions is answered at once: clients send it first
        try:
            metadata = asyncio.ensure_future(conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False},
                                                          version=8))
            created = asyncio.ensure_future(conn.request(ApiKey.CREATE_TOPICS, {"topics": [{
                "name": "early", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout_ms": 30000}))
            controller.start(60)
            md = await asyncio.wait_for(metadata, 60)
            assert {b.node_id for b in md.brokers} == {1}  # not the empty list of a broker nobody knows yet
            topics = (await asyncio.wait_for(created, 60)).topics
            assert [(t.name, t.error_code) for t in topics] == [("early", ErrorCode.NONE)], topics
        finally:
            conn.close()
    finally:
        broker.kill()
        controller.kill()
