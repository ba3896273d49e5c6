"""The ACL matrix of issue 25 over the four clients: principal x operation x resource, each cell
Kafka's answer (StandardAuthorizer semantics, KafkaApis' checks and error codes).

One process (broker and controller) with Kafka's StandardAuthorizer: a PLAINTEXT listener for
the process itself (User:ANONYMOUS, a super user as Kafka's setup wants the inter-broker
principal), and a SASL_PLAINTEXT listener where the users log in with PLAIN. The ACLs,
created by the super user ``admin``:

    alice  ALLOW Write, Read  topic orders (literal)        ALLOW Read group g-alice
    bob    ALLOW All          topic bob- (prefixed)         DENY Write topic bob-locked
           ALLOW Read         group g-bob
    User:* ALLOW Read         topic public, topic pub- (prefixed)
    carol  ALLOW All          topic orders from host 10.9.9.9 only, topic carol from 127.0.0.1
    dave   ALLOW Create       cluster    ALLOW Describe cluster
           ALLOW Delete       topic doomed    ALLOW AlterConfigs topic orders
    eve    nothing

Cells: produce, consume, Metadata of all topics (filtered) and of a named one, a group's
join + commit, describe of a group, create / delete / alter-configs of topics. kcat and the
three Python clients each answer their cells through their own API; every answer is the error
code Kafka would give (TOPIC_AUTHORIZATION_FAILED 29, GROUP_AUTHORIZATION_FAILED 30) or success.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

import pytest

from controller.launcher import BrokerProcess, free_port
from protocol.errors import ErrorCode as E

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret",
         "dave": "dave-secret", "eve": "eve-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
TOPICS = ["orders", "bob-data", "bob-locked", "public", "pub-news", "carol", "doomed", "other"]
OK = 0
TAF, GAF = E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED


class Matrix:
    def __init__(self, directory):
        plain, self.sasl = free_port(), free_port()
        self.process = BrokerProcess(directory / "data", plain, 1, {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{self.sasl}",
            "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS;User:admin", "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.replication.factor": "1", "auto.create.topics.enable": "false"})

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl}"

    def librdkafka(self, user: str) -> dict:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": USERS[user]}

    def python(self, user: str) -> dict:
        return {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                "sasl_plain_username": user, "sasl_plain_password": USERS[user]}


def setup_acls(m: Matrix) -> None:
    from kafka.admin import (ACL, ACLOperation as O, ACLPermissionType as PT, ACLResourcePatternType as RPT,
                             KafkaAdminClient, NewTopic, ResourcePattern, ResourceType as RT)
    admin = KafkaAdminClient(**m.python("admin"), request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS])

        def acl(user, op, rtype, name, pattern=RPT.LITERAL, perm=PT.ALLOW, host="*"):
            return ACL(f"User:{user}" if user != "*" else "User:*", host, op, perm, ResourcePattern(rtype, name, pattern))
        acls = [acl("alice", O.WRITE, RT.TOPIC, "orders"), acl("alice", O.READ, RT.TOPIC, "orders"),
                acl("alice", O.READ, RT.GROUP, "g-alice"),
                acl("bob", O.ALL, RT.TOPIC, "bob-", RPT.PREFIXED), acl("bob", O.WRITE, RT.TOPIC, "bob-locked",
                                                                        perm=PT.DENY),
                acl("bob", O.READ, RT.GROUP, "g-bob"),
                acl("*", O.READ, RT.TOPIC, "public"), acl("*", O.READ, RT.TOPIC, "pub-", RPT.PREFIXED),
                acl("carol", O.ALL, RT.TOPIC, "orders", host="10.9.9.9"),
                acl("carol", O.ALL, RT.TOPIC, "carol", host="127.0.0.1"),
                acl("dave", O.CREATE, RT.CLUSTER, "kafka-cluster"), acl("dave", O.DESCRIBE, RT.CLUSTER, "kafka-cluster"),
                acl("dave", O.DELETE, RT.TOPIC, "doomed"), acl("dave", O.ALTER_CONFIGS, RT.TOPIC, "orders")]
        result = admin.create_acls(acls)
        assert not result["failed"], result["failed"]
    finally:
        admin.close()
    # seed one record in every topic, as the super user
    from confluent_kafka import Producer
    producer = Producer({**m.librdkafka("admin"), "acks": "all"})
    for t in TOPICS:
        producer.produce(t, b"seed")
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    m = Matrix(tmp_path_factory.mktemp("acl-matrix"))
    m.process.start(60)
    try:
        setup_acls(m)
        yield m
    finally:
        m.process.stop()


PRODUCE = [("alice", "orders", OK), ("alice", "public", TAF), ("bob", "bob-data", OK),
           ("bob", "bob-locked", TAF),  # DENY over the prefixed ALLOW
           ("bob", "orders", TAF), ("carol", "orders", TAF),  # host-specific: only from 10.9.9.9
           ("carol", "carol", OK), ("eve", "orders", TAF), ("admin", "public", OK)]  # super user
CONSUME = [("alice", "orders", OK), ("eve", "public", OK),  # User:*
           ("eve", "pub-news", OK), ("eve", "orders", TAF), ("bob", "bob-locked", OK),  # the DENY is Write only
           ("carol", "orders", TAF)]
VISIBLE = {"alice": {"orders", "public", "pub-news"}, "bob": {"bob-data", "bob-locked", "public", "pub-news"},
           "eve": {"public", "pub-news"}, "carol": {"carol", "public", "pub-news"}}
STABLE = set(TOPICS) - {"doomed"}  # what no cell creates or deletes
VISIBLE["admin"] = STABLE
GROUPS = [("alice", "g-alice", "orders", OK), ("alice", "g-bob", "orders", GAF), ("eve", "g-alice", "public", GAF),
          ("bob", "g-bob", "bob-data", OK)]


# -- confluent-kafka ---------------------------------------------------------------------------

def ck_produce(m, user, topic) -> int:
    from confluent_kafka import Producer
    outcome: list = []
    producer = Producer({**m.librdkafka(user), "message.timeout.ms": 10000})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(OK if err is None else err.code()))
    producer.flush(20)
    return outcome[0] if outcome else -999


def ck_consume(m, user, topic) -> int:
    """librdkafka looks the topic up first (Metadata): a topic it may not describe ends there
    (an assigned partition without a leader is never fetched); else the record is read."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient
    md = AdminClient(m.librdkafka(user)).list_topics(topic, timeout=10).topics[topic]
    if md.error is not None:
        return md.error.code()
    consumer = Consumer({**m.librdkafka(user), "group.id": f"unused-{uuid.uuid4()}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or (msg.error() and msg.error().code() == GAF):
                continue  # librdkafka looks up the (unused) group's coordinator: DESCRIBE on a group it may not
            return msg.error().code() if msg.error() else OK
        return -999
    finally:
        consumer.close()


def ck_visible(m, user) -> set:
    from confluent_kafka.admin import AdminClient
    md = AdminClient(m.librdkafka(user)).list_topics(timeout=10)
    return {t for t in md.topics if t in STABLE}  # (topics other tests create or delete aside)


def ck_group(m, user, group, topic) -> int:
    from confluent_kafka import Consumer, KafkaException
    consumer = Consumer({**m.librdkafka(user), "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                return msg.error().code()
            try:
                consumer.commit(msg, asynchronous=False)
            except KafkaException as exc:
                return exc.args[0].code()
            return OK
        return -999
    finally:
        consumer.close()


def ck_admin(m) -> dict:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    def code(futures) -> int:
        try:
            for f in futures.values():
                f.result(timeout=20)
            return OK
        except KafkaException as exc:
            return exc.args[0].code()
    dave, alice, bob = (AdminClient(m.librdkafka(u)) for u in ("dave", "alice", "bob"))
    return {
        "dave creates": code(dave.create_topics([NewTopic("ck-dave-new", 1, 1)])),
        "alice creates": code(alice.create_topics([NewTopic("ck-alice-new", 1, 1)])),
        "bob creates bob-": code(bob.create_topics([NewTopic("bob-ck-new", 1, 1)])),
        "alice alters orders": code(alice.alter_configs([ConfigResource("topic", "orders",
                                                                        {"retention.ms": "86400000"})])),
        "dave alters orders": code(dave.alter_configs([ConfigResource("topic", "orders",
                                                                      {"retention.ms": "86400000"})])),
        "alice deletes orders": code(alice.delete_topics(["orders"])),
    }


def test_confluent_kafka(matrix):
    for user, topic, expected in PRODUCE:
        assert (user, topic, ck_produce(matrix, user, topic)) == (user, topic, expected)
    for user, topic, expected in CONSUME:
        assert (user, topic, ck_consume(matrix, user, topic)) == (user, topic, expected)
    for user, expected in VISIBLE.items():
        assert (user, ck_visible(matrix, user)) == (user, expected)
    for user, group, topic, expected in GROUPS:
        assert (user, group, ck_group(matrix, user, group, topic)) == (user, group, expected)
    assert ck_admin(matrix) == {"dave creates": OK, "alice creates": TAF, "bob creates bob-": OK,
                                "alice alters orders": TAF, "dave alters orders": OK, "alice deletes orders": TAF}


# -- kafka-python ------------------------------------------------------------------------------

def kp_code(exc) -> int:
    return getattr(exc, "errno", -1)


def kp_produce(m, user, topic) -> int:
    from kafka import KafkaProducer
    producer = KafkaProducer(**m.python(user), max_block_ms=10000, retries=0)
    try:
        producer.send(topic, b"x").get(timeout=20)
        return OK
    except Exception as exc:  # noqa: BLE001 - the client's error, by its code
        return kp_code(exc)
    finally:
        producer.close(5)


def kp_consume(m, user, topic) -> int:
    """As librdkafka, kafka-python looks the topic up first: its Metadata answer decides (an
    unauthorized topic's partitions are never fetched); else the record is read."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(**m.python(user), request_timeout_ms=15000)
    try:
        [described] = admin.describe_topics([topic])
    finally:
        admin.close()
    if described["error_code"]:
        return described["error_code"]
    consumer = KafkaConsumer(**m.python(user), group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if consumer.poll(500):
                    return OK
            except Exception as exc:  # noqa: BLE001
                return kp_code(exc)
        return -999
    finally:
        consumer.close()


def kp_group(m, user, group, topic) -> int:
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, **m.python(user), group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if consumer.poll(500):
                    consumer.commit()
                    return OK
            except Exception as exc:  # noqa: BLE001
                return kp_code(exc)
        return -999
    finally:
        consumer.close()


def test_kafka_python(matrix):
    from kafka.admin import KafkaAdminClient, NewTopic

    for user, topic, expected in PRODUCE:
        assert (user, topic, kp_produce(matrix, user, topic)) == (user, topic, expected)
    for user, topic, expected in CONSUME:
        assert (user, topic, kp_consume(matrix, user, topic)) == (user, topic, expected)
    for user, group, topic, expected in GROUPS:
        assert (user, group, kp_group(matrix, user, group, topic)) == (user, group, expected)
    dave = KafkaAdminClient(**matrix.python("dave"), request_timeout_ms=15000)
    eve = KafkaAdminClient(**matrix.python("eve"), request_timeout_ms=15000)
    alice = KafkaAdminClient(**matrix.python("alice"), request_timeout_ms=15000)
    try:
        # describe of topics: a named topic the principal may not DESCRIBE is refused; the cluster
        assert [t["error_code"] for t in eve.describe_topics(["public", "orders"])] == [OK, TAF]
        assert {t["name"] for t in eve.describe_topics()} >= {"public", "pub-news"}
        assert "orders" not in {t["name"] for t in eve.describe_topics()}
        assert len(eve.describe_cluster()["brokers"]) == 1
        # ListGroups: DESCRIBE on the cluster shows every group, else those the principal may describe
        assert {g["group_id"] for g in dave.list_groups()} >= {"g-alice", "g-bob"}
        assert {g["group_id"] for g in alice.list_groups()} == {"g-alice"}
        # DescribeGroups: READ on the group implies DESCRIBE; none: GROUP_AUTHORIZATION_FAILED
        assert "g-alice" in alice.describe_groups(["g-alice"])
        with pytest.raises(Exception) as refused:
            eve.describe_groups(["g-alice"])
        assert kp_code(refused.value) == GAF
        # create and delete of topics
        dave.create_topics([NewTopic("kp-dave-new", 1, 1)])
        with pytest.raises(Exception) as refused:
            alice.create_topics([NewTopic("kp-alice-new", 1, 1)])
        assert kp_code(refused.value) == TAF
        dave.delete_topics(["doomed"])
        with pytest.raises(Exception) as refused:
            alice.delete_topics(["public"])
        assert kp_code(refused.value) == TAF
    finally:
        for client in (dave, eve, alice):
            client.close()


# -- aiokafka ----------------------------------------------------------------------------------

async def aio_produce(m, user, topic) -> int:
    from aiokafka import AIOKafkaProducer
    producer = AIOKafkaProducer(**m.python(user), request_timeout_ms=10000)
    await producer.start()
    try:
        async with asyncio.timeout(20):
            await producer.send_and_wait(topic, b"x")
        return OK
    except Exception as exc:  # noqa: BLE001
        return kp_code(exc)
    finally:
        await producer.stop()


async def aio_consume(m, user, topic) -> int:
    """aiokafka's Metadata answer for the topic first (see kp_consume), then the record."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    admin = AIOKafkaAdminClient(**m.python(user))
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if described["error_code"]:
        return described["error_code"]
    consumer = AIOKafkaConsumer(**m.python(user), enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        async with asyncio.timeout(20):
            while True:
                try:
                    if (await consumer.getmany(tp, timeout_ms=500)).get(tp):
                        return OK
                except Exception as exc:  # noqa: BLE001
                    return kp_code(exc)
    finally:
        await consumer.stop()


async def aio_group(m, user, group, topic) -> int:
    from aiokafka import AIOKafkaConsumer
    consumer = AIOKafkaConsumer(topic, **m.python(user), group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    try:
        await consumer.start()
        async with asyncio.timeout(20):
            while True:
                batch = await consumer.getmany(timeout_ms=500)
                if batch:
                    await consumer.commit()
                    return OK
    except Exception as exc:  # noqa: BLE001
        return kp_code(exc)
    finally:
        await consumer.stop()


async def test_aiokafka(matrix):
    for user, topic, expected in PRODUCE:
        assert (user, topic, await aio_produce(matrix, user, topic)) == (user, topic, expected)
    for user, topic, expected in CONSUME:
        assert (user, topic, await aio_consume(matrix, user, topic)) == (user, topic, expected)
    for user, group, topic, expected in GROUPS:
        assert (user, group, await aio_group(matrix, user, group, topic)) == (user, group, expected)


# -- kcat --------------------------------------------------------------------------------------

def kcat(m, user, *args, input=None) -> subprocess.CompletedProcess:
    conf = [a for k, v in m.librdkafka(user).items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    return subprocess.run(["kcat", "-b", m.bootstrap, *conf, *args], input=input, capture_output=True, text=True,
                          timeout=60)


def kcat_produce(m, user, topic) -> int:
    out = kcat(m, user, "-P", "-t", topic, "-X", "message.timeout.ms=10000", input="x\n")
    if "Topic authorization failed" in out.stderr:
        return TAF
    return OK if out.returncode == 0 else -out.returncode


def kcat_consume(m, user, topic) -> int:
    out = kcat(m, user, "-C", "-t", topic, "-o", "beginning", "-c", "1", "-e")
    if "Topic authorization failed" in out.stderr:
        return TAF
    return OK if out.returncode == 0 and out.stdout else -1


def test_kcat(matrix):
    for user, topic, expected in PRODUCE:
        assert (user, topic, kcat_produce(matrix, user, topic)) == (user, topic, expected)
    for user, topic, expected in CONSUME:
        assert (user, topic, kcat_consume(matrix, user, topic)) == (user, topic, expected)
    for user, expected in VISIBLE.items():
        listed = json.loads(kcat(matrix, user, "-L", "-J").stdout)
        assert (user, {t["topic"] for t in listed["topics"] if t["topic"] in STABLE}) == (user, expected)


# -- the control plane: an authenticated client is no controller ----------------------------

async def test_cluster_action_probe_from_an_authenticated_client(matrix):
    """alice (SASL) sends the controller's requests: each is refused with CLUSTER_AUTHORIZATION_FAILED
    and the partition keeps its data and offsets."""
    from confluent_kafka import Consumer, TopicPartition

    from protocol.api_keys import ApiKey
    from protocol.client import BrokerConnection, Network
    from protocol.client.security import ClientSecurity

    before = ck_read_all(matrix, "orders")
    security = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                               "sasl.username": "alice", "sasl.password": USERS["alice"]})
    conn = BrokerConnection("127.0.0.1", matrix.sasl, network=Network(security), request_timeout_ms=10000)
    await conn.connect()
    try:
        stop = await conn.request(ApiKey.STOP_REPLICA, {
            "controller_id": 1, "controller_epoch": 1000, "broker_epoch": -1, "topic_states": [
                {"topic_name": "orders", "partition_states": [
                    {"partition_index": 0, "leader_epoch": 1000, "delete_partition": True}]}]}, 4)
        assert stop.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        lisr = await conn.request(ApiKey.LEADER_AND_ISR, {
            "controller_id": 1, "controller_epoch": 1000, "broker_epoch": -1, "type": 2, "topic_states": [
                {"topic_name": "orders", "topic_id": uuid.uuid4(), "partition_states": [
                    {"partition_index": 0, "controller_epoch": 1000, "leader": 9, "leader_epoch": 1000, "isr": [9],
                     "partition_epoch": 1000, "replicas": [9], "is_new": False}]}], "live_leaders": []}, 7)
        assert lisr.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        um = await conn.request(ApiKey.UPDATE_METADATA, {
            "controller_id": 1, "controller_epoch": 1000, "broker_epoch": -1, "type": 2, "topic_states": [],
            "live_brokers": []}, 8)
        assert um.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    finally:
        conn.close()
    assert ck_read_all(matrix, "orders") == before and len(before) >= 2
    consumer = Consumer({**matrix.librdkafka("admin"), "group.id": "probe-check"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("orders", 0), timeout=10)
        assert (low, high) == (0, len(before))
    finally:
        consumer.close()
    assert "is Denied operation = ClusterAction" in matrix.process.log_text()


def ck_read_all(m, topic) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({**m.librdkafka("admin"), "group.id": f"read-{uuid.uuid4()}", "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    return out
                continue
            out.append(msg.value())
        raise AssertionError("did not reach the end")
    finally:
        consumer.close()


def test_kbroker_acls_and_users_over_sasl(matrix, tmp_path):
    """kbroker's commands log in with --command-config / -X as Kafka's tools do: the super user
    lists the ACLs; a principal without DESCRIBE / ALTER on the cluster is refused listing
    them, adding one and listing SCRAM credentials (exit 1, Kafka's error)."""
    from tests.cli.test_cli import kbroker

    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                      'username="admin" password="admin-secret";\n')
    listed = kbroker(matrix.bootstrap, "acls", "list", "--command-config", str(config), "--topic", "orders").stdout
    assert b"(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in listed
    as_eve = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=eve",
              "-X", "sasl.password=eve-secret"]
    refused = kbroker(matrix.bootstrap, "acls", "list", *as_eve, expect=1)
    assert b"Cluster authorization failed" in refused.stderr or b"CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    refused = kbroker(matrix.bootstrap, "acls", "add", *as_eve, "--allow-principal", "User:eve", "--topic", "orders",
                      expect=1)
    assert b"CLUSTER_AUTHORIZATION_FAILED" in refused.stderr or b"Cluster authorization failed" in refused.stderr
    refused = kbroker(matrix.bootstrap, "users", "scram", "list", *as_eve, expect=1)
    assert b"Cluster authorization failed" in refused.stderr or b"CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
