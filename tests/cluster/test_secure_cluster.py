"""A controller and three brokers with SASL_SSL everywhere (issue 25 §4): brokers register and
heartbeat with the controller over its SASL_SSL listener, the controller sends LeaderAndIsr /
UpdateMetadata over the brokers' SASL_SSL inter-broker listener, followers fetch over it, and
clients produce and consume over another SASL_SSL listener. kill -9 of a leader under acks=all
load: a new leader is elected and nothing acknowledged is lost. (Each broker also keeps a
PLAINTEXT listener that the harness asks whether it is live.)"""

from __future__ import annotations

import asyncio
import time

from cli.certs import make_certs
from controller.launcher import BrokerProcess, ControllerProcess, free_port
from protocol.client import BrokerConnection, KafkaClient, Network
from protocol.client.security import ClientSecurity
from protocol.errors import KafkaError
from tests.support import wait_until

from .helpers import NumberedProducer, partitions_of, read_all, wait_for

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
PARTITIONS = 3


def jaas(user: str, password: str, **users: str) -> str:
    opts = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    return f'{PLAIN} required username="{user}" password="{password}" {opts};'


async def test_sasl_ssl_everywhere_replicates_and_fails_over(tmp_path):
    keystores = make_certs(tmp_path / "certs", ["localhost"], [])
    ca = str(tmp_path / "certs" / "ca.pem")
    inner = {"broker": "broker-secret", "controller": "controller-secret"}
    common = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL", "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "sasl.mechanism.controller.protocol": "PLAIN",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystores["localhost"]),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": ca,
        "listener.name.external.plain.sasl.jaas.config": jaas("x", "x", alice="alice-secret"),
        "listener.name.external.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    }
    controller = ControllerProcess(tmp_path / "controller", free_port(), 3000, {
        **common, "broker.session.timeout.ms": "4000",
        # its own SASL_SSL listener, and its credentials towards the brokers' INTERNAL listener
        "listener.name.controller.plain.sasl.jaas.config": jaas("controller", "controller-secret", **inner),
        "listener.name.internal.plain.sasl.jaas.config": jaas("controller", "controller-secret", **inner)})
    brokers = {}
    for i in (1, 2, 3):
        port, internal, external = free_port(), free_port(), free_port()
        brokers[i] = BrokerProcess(tmp_path / f"broker-{i}", port, i, {
            **common, "process.roles": "broker", "node.id": i, "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": controller.address,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "listener.name.internal.plain.sasl.jaas.config": jaas("broker", "broker-secret", **inner),
            "listener.name.controller.plain.sasl.jaas.config": jaas("broker", "broker-secret"),
            "default.replication.factor": 3, "min.insync.replicas": 2, "offsets.topic.replication.factor": 3,
            "replica.lag.time.max.ms": 5000})
        brokers[i].external = external
    client = {"security.protocol": "sasl_ssl", "ssl.ca.location": ca, "sasl.mechanism": "PLAIN",
              "sasl.username": "alice", "sasl.password": "alice-secret"}
    controller.start(30)
    try:
        for b in brokers.values():
            b.launch()
        for b in brokers.values():
            b.wait_ready(60)
        bootstrap = ",".join(f"127.0.0.1:{b.external}" for b in brokers.values())
        security = ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
                                                   "ssl.truststore.location": ca, "sasl.mechanism": "PLAIN",
                                                   "sasl.username": "alice", "sasl.password": "alice-secret"})
        async with KafkaClient(bootstrap, network=Network(security)) as admin:
            await admin.create_topics([("secure", PARTITIONS, 3, None)])
        probe = brokers[1].port
        # a SCRAM user made through any broker (forwarded to the controller) logs in on every broker within a second
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
        made = time.monotonic()
        admin_client = AdminClient({"bootstrap.servers": bootstrap, **client})
        for f in admin_client.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-secret")]).values():
            f.result(10)
        scram = ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
                                                "ssl.truststore.location": ca, "sasl.mechanism": "SCRAM-SHA-512",
                                                "sasl.username": "dave", "sasl.password": "dave-secret"})

        async def logs_in(port: int) -> bool:
            conn = BrokerConnection("127.0.0.1", port, network=Network(scram), request_timeout_ms=2000)
            try:
                await conn.connect()
                return True
            except KafkaError:
                return False
            finally:
                conn.close()
        for b in brokers.values():
            while not await logs_in(b.external):
                assert time.monotonic() - made < 5, f"dave cannot log in on broker {b.broker_id}"
        assert time.monotonic() - made < 1.5

        async def full_isr():
            parts = await partitions_of(probe, "secure")
            return len(parts) == PARTITIONS and all(len(p.isr_nodes) == 3 for p in parts.values())
        await wait_for(full_isr, 30, "every replica in sync over the SASL_SSL inter-broker listener")

        with NumberedProducer(bootstrap, "secure", PARTITIONS, 120, config=client) as producer:
            await asyncio.to_thread(wait_until, lambda: producer.count >= 1000, 60, 0.05, "1,000 acknowledged records")
            leader = (await partitions_of(probe, "secure"))[0].leader_id
            survivor = next(i for i in brokers if i != leader)
            brokers[leader].kill()

            async def moved():
                p = (await partitions_of(brokers[survivor].port, "secure"))[0]
                return p.leader_id not in (leader, -1)
            await wait_for(moved, 30, "a new leader elected over authenticated channels")
            seen = producer.count
            await asyncio.to_thread(wait_until, lambda: producer.count >= seen + 1000, 60, 0.05,
                                    "1,000 more acknowledged records after the failover")
        assert producer.unflushed == 0 and not producer.errors
        read = await asyncio.to_thread(read_all, f"127.0.0.1:{brokers[survivor].external}", "secure", PARTITIONS,
                                       client)
        for p in range(PARTITIONS):
            missing = set(producer.acked[p]) - set(read[p])
            assert not missing, f"partition {p}: {len(missing)} acknowledged records lost"
    finally:
        for b in brokers.values():
            b.kill()
        controller.kill()


async def test_mutual_tls_between_brokers_and_the_controller(tmp_path):
    """The other way Kafka secures the control plane: SSL listeners with ssl.client.auth=required,
    each process presenting its listener's key store as its client certificate (and mapped to a
    principal by ssl.principal.mapping.rules): brokers register, replicate and stay in sync."""
    keystores = make_certs(tmp_path / "certs", ["localhost"], [])
    ca = str(tmp_path / "certs" / "ca.pem")
    common = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,CONTROLLER:SSL",
        "inter.broker.listener.name": "INTERNAL", "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/broker-$1/,DEFAULT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystores["localhost"]),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": ca}
    controller = ControllerProcess(tmp_path / "controller", free_port(), 3000, common)
    brokers = {}
    for i in (1, 2, 3):
        port, internal = free_port(), free_port()
        brokers[i] = BrokerProcess(tmp_path / f"broker-{i}", port, i, {
            **common, "process.roles": "broker", "node.id": i, "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": controller.address,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal}",
            "min.insync.replicas": 2, "offsets.topic.replication.factor": 3})
    controller.start(30)
    try:
        for b in brokers.values():
            b.launch()
        for b in brokers.values():
            b.wait_ready(60)
        async with KafkaClient(brokers[1].bootstrap) as admin:
            await admin.create_topics([("mtls", 1, 3, None)])
        with NumberedProducer(brokers[1].bootstrap, "mtls", 1, 60, max_records=2000) as producer:
            await asyncio.to_thread(wait_until, lambda: producer.count >= 2000, 60, 0.05, "2,000 acks=all records")
        assert not producer.errors
        assert "authenticated by its TLS certificate as User:broker-localhost on listener INTERNAL" in \
            brokers[2].log_text() + brokers[3].log_text() + brokers[1].log_text()
        assert "authenticated by its TLS certificate as User:broker-localhost on listener CONTROLLER" in \
            controller.log_text()
    finally:
        for b in brokers.values():
            b.kill()
        controller.kill()
