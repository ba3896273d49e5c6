"""SCRAM on the control plane from the cluster's first second (KIP-900): every process is
formatted with ``kbroker storage format --add-scram`` before its first start, then a controller
and three brokers run SCRAM-SHA-512 over SASL_SSL on the controller's listener (brokers register,
heartbeat, send AlterPartition) and on the brokers' inter-broker listener (the controller's
LeaderAndIsr / UpdateMetadata, followers' fetches). Clients log in with a user of the same
bootstrap. kill -9 of a leader under acks=all load: a new leader, nothing acknowledged lost; the
killed broker comes back (checking the controller's login with its bootstrap copy again) and
catches up."""

from __future__ import annotations

import asyncio

from cli.certs import make_certs
from controller.launcher import BrokerProcess, ControllerProcess, free_port
from protocol.client import KafkaClient, Network
from protocol.client.security import ClientSecurity
from tests.support import wait_until

from .helpers import NumberedProducer, partitions_of, read_all, wait_for

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
MECHANISM = "SCRAM-SHA-512"
PARTITIONS = 3
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
USERS = {"controller": "controller-secret", "broker": "broker-secret", "alice": "alice-secret"}
BOOTSTRAP = [f"{MECHANISM}=[name={u},password={p}]" for u, p in USERS.items()]


def _stored_key(path, user: str) -> bytes:
    from broker.security.bootstrap import _read_records
    return next(bytes(r.stored_key) for r in _read_records(path) if getattr(r, "name", None) == user)


def login(user: str) -> str:
    return f'{SCRAM} required username="{user}" password="{USERS[user]}";'


def scram_cluster(tmp_path, format_brokers: bool = True):
    keystores = make_certs(tmp_path / "certs", ["localhost"], [])
    ca = str(tmp_path / "certs" / "ca.pem")
    common = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL", "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM, "sasl.mechanism.controller.protocol": MECHANISM,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystores["localhost"]),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": ca,
    }
    controller = ControllerProcess(tmp_path / "controller", free_port(), 3000, {
        **common, "broker.session.timeout.ms": "4000",
        # its credentials towards the brokers' INTERNAL listener
        "listener.name.internal.scram-sha-512.sasl.jaas.config": login("controller")})
    brokers = {}
    for i in (1, 2, 3):
        port, internal, external = free_port(), free_port(), free_port()
        brokers[i] = BrokerProcess(tmp_path / f"broker-{i}", port, i, {
            **common, "process.roles": "broker", "node.id": i, "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": controller.address,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": login("broker"),
            "listener.name.controller.scram-sha-512.sasl.jaas.config": login("broker"),
            "default.replication.factor": 3, "min.insync.replicas": 2, "offsets.topic.replication.factor": 3,
            "replica.lag.time.max.ms": 5000})
        brokers[i].external = external
    controller.format_storage(CLUSTER_ID, BOOTSTRAP)
    for b in brokers.values():
        if format_brokers:
            b.format_storage(CLUSTER_ID, BOOTSTRAP)
    client = {"security.protocol": "sasl_ssl", "ssl.ca.location": ca, "sasl.mechanism": MECHANISM,
              "sasl.username": "alice", "sasl.password": USERS["alice"]}
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": ca,
        "sasl.mechanism": MECHANISM, "sasl.username": "alice", "sasl.password": USERS["alice"]})
    return controller, brokers, client, security


async def test_scram_sha_512_between_the_processes_from_the_first_start(tmp_path):
    controller, brokers, client, security = scram_cluster(tmp_path)
    controller.start(30)
    try:
        assert "Appending 4 bootstrap record(s)" in controller.log_text()  # 3 credentials and metadata.version's
        for b in brokers.values():
            b.launch()
        for b in brokers.values():
            b.wait_ready(60)
        bootstrap = ",".join(f"127.0.0.1:{b.external}" for b in brokers.values())
        async with KafkaClient(bootstrap, network=Network(security)) as admin:
            await admin.create_topics([("scram", PARTITIONS, 3, None)])
        probe = brokers[1].port

        async def full_isr():
            parts = await partitions_of(probe, "scram")
            return len(parts) == PARTITIONS and all(len(p.isr_nodes) == 3 for p in parts.values())
        await wait_for(full_isr, 30, "every replica in sync over the SCRAM inter-broker listener")

        with NumberedProducer(bootstrap, "scram", PARTITIONS, 120, config=client) as producer:
            await asyncio.to_thread(wait_until, lambda: producer.count >= 1000, 60, 0.05, "1,000 acknowledged records")
            leader = (await partitions_of(probe, "scram"))[0].leader_id
            survivor = next(i for i in brokers if i != leader)
            brokers[leader].kill()

            async def moved():
                p = (await partitions_of(brokers[survivor].port, "scram"))[0]
                return p.leader_id not in (leader, -1)
            await wait_for(moved, 30, "a new leader elected over SCRAM links")
            seen = producer.count
            await asyncio.to_thread(wait_until, lambda: producer.count >= seen + 1000, 60, 0.05,
                                    "1,000 more acknowledged records after the failover")
            # the killed broker comes back: the controller logs in to it again, and it follows
            brokers[leader].launch().wait_ready(60)
            await wait_for(full_isr, 60, f"broker {leader} back in every ISR")
        assert producer.unflushed == 0 and not producer.errors
        read = await asyncio.to_thread(read_all, f"127.0.0.1:{brokers[survivor].external}", "scram", PARTITIONS,
                                       client)
        for p in range(PARTITIONS):
            missing = set(producer.acked[p]) - set(read[p])
            assert not missing, f"partition {p}: {len(missing)} acknowledged records lost"

        # The controller's password changes (AlterUserScramCredentials, then its JAAS configuration
        # and a restart): a broker restarted afterwards checks the credentials the controller gave
        # it last time, not its stale bootstrap copy, and comes back.
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
        admin_client = AdminClient({"bootstrap.servers": bootstrap, **client})
        for f in admin_client.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "controller", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"rotated-secret")]).values():
            f.result(10)
        saved = [b.log_dir / "scram-credentials.checkpoint" for b in brokers.values()]

        def rotated_everywhere() -> bool:
            return all(s.exists() and _stored_key(s, "controller") != _stored_key(s.parent / "bootstrap.checkpoint",
                                                                                   "controller") for s in saved)
        await asyncio.to_thread(wait_until, rotated_everywhere, 10, 0.05, "every broker's copy of the new credential")
        controller.stop()
        controller.overrides["listener.name.internal.scram-sha-512.sasl.jaas.config"] = (
            f'{SCRAM} required username="controller" password="rotated-secret";')
        controller.start(30)
        brokers[survivor].kill()
        brokers[survivor].launch().wait_ready(60)
        assert "SCRAM credentials of 'alice', 'broker', 'controller' from " + str(saved[survivor - 1]) in (
            brokers[survivor].log_text())
    finally:
        for b in brokers.values():
            b.kill()
        controller.kill()
