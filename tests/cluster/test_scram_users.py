"""SCRAM users kept by the controller (issue 25, KIP-554): a user created through
AlterUserScramCredentials logs in on every broker within a second, without a restart; after
its credential is deleted the next login fails, and a session that re-authenticates
(KIP-368, connections.max.reauth.ms) ends. A broker restarted gets every credential back with
its full state.

A controller and two brokers, each with a PLAINTEXT listener (between the processes, and for
the admin) and a SASL_PLAINTEXT listener with SCRAM-SHA-256 and SCRAM-SHA-512 for the users."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from controller.launcher import LocalCluster, free_port
from protocol.client import BrokerConnection, Network
from protocol.client.security import ClientSecurity
from protocol.errors import ErrorCode, KafkaError
from tests.support import wait_until

from .helpers import admin, wait_futures

REAUTH_MS = 3000
FIXED = ("Authentication failed during {} due to invalid credentials with SASL mechanism SCRAM-SHA-512")


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, 2, broker_props={"broker.heartbeat.interval.ms": 500})
    c.sasl_ports = {}
    for b in c.brokers.values():
        c.sasl_ports[b.broker_id] = port = free_port()
        b.overrides.update({"listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{port}",
                            "inter.broker.listener.name": "PLAINTEXT",
                            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
                            "connections.max.reauth.ms": REAUTH_MS})
    try:
        c.start()
        yield c
    finally:
        c.kill()


async def login(port: int, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
    """One SCRAM authentication (and an ApiVersions) with kbroker's client; raises its failure."""
    security = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                               "sasl.username": user, "sasl.password": password})
    conn = BrokerConnection("127.0.0.1", port, network=Network(security), request_timeout_ms=5000)
    try:
        await conn.connect()
    finally:
        conn.close()


async def first_login_after(port: int, started: float, user: str, password: str) -> float:
    """Seconds from ``started`` to the first successful login (tries back to back, 10 s at most)."""
    while True:
        try:
            await login(port, user, password)
            return time.monotonic() - started
        except KafkaError as exc:
            assert exc.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, exc
            assert time.monotonic() - started < 10, "never logged in"


def scram(user: str, password: bytes, iterations: int = 4096) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, iterations), password)


def test_a_user_logs_in_on_every_broker_within_a_second_and_not_once_deleted(cluster):
    a = admin(cluster)
    for port in cluster.sasl_ports.values():  # nobody yet
        with pytest.raises(KafkaError, match="invalid credentials"):
            asyncio.run(login(port, "alice", "alice-secret"))
    wait_futures(a.alter_user_scram_credentials([scram("alice", b"alice-secret", 8192)]))
    started = time.monotonic()
    took = {b: asyncio.run(first_login_after(port, started, "alice", "alice-secret"))
            for b, port in cluster.sasl_ports.items()}
    assert all(t < 1.0 for t in took.values()), took
    with pytest.raises(KafkaError, match="invalid credentials"):
        asyncio.run(login(cluster.sasl_ports[1], "alice", "wrong"))

    # A real client's session on broker 2, re-authenticating every REAUTH_MS.
    errors: list = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{cluster.sasl_ports[2]}", "security.protocol": "sasl_plaintext",
                         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-secret",
                         "error_cb": errors.append})
    producer.produce("scram-topic", b"before")
    assert producer.flush(30) == 0

    wait_futures(a.alter_user_scram_credentials([UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)]))
    deleted = time.monotonic()
    for port in cluster.sasl_ports.values():
        def refused() -> bool:
            try:
                asyncio.run(login(port, "alice", "alice-secret"))
            except KafkaError as exc:
                assert exc.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
                assert FIXED.format("authentication") in str(exc)
                return True
            return False
        wait_until(refused, timeout_s=5, what="the login refused once the credential is deleted")
    assert time.monotonic() - deleted < 2.0

    # The session's next re-authentication fails, and the broker ends it.
    deadline = time.monotonic() + REAUTH_MS / 1000 * 3 + 10
    while not any("re-authentication" in e.str() or "Authentication failed" in e.str() for e in errors):
        producer.poll(0.2)
        assert time.monotonic() < deadline, [e.str() for e in errors]
    # The producer holds sessions on broker 2 (bootstrap) and on the partition's leader, either
    # of which may be the one whose re-authentication fails first.
    wait_until(lambda: any("re-authentication" in b.log_text() for b in cluster.brokers.values()), timeout_s=10,
               what="the failed re-authentication in a broker's log")


def test_a_restarted_broker_gets_the_credentials_back(cluster):
    a = admin(cluster)
    wait_futures(a.alter_user_scram_credentials([scram("bob", b"bob-secret")]))
    asyncio.run(first_login_after(cluster.sasl_ports[1], time.monotonic(), "bob", "bob-secret"))
    broker = cluster.brokers[1]
    broker.stop()
    broker.start(60)
    cluster.wait_live()
    asyncio.run(login(cluster.sasl_ports[1], "bob", "bob-secret"))
