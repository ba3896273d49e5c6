"""TLS and SASL with the real clients (issue 25): one broker process with a listener per
protocol — PLAINTEXT, SSL (client certificates requested, mapped by
ssl.principal.mapping.rules), MTLS (SSL, certificates required), SASL_PLAINTEXT (PLAIN and
OAUTHBEARER) and SASL_SSL (PLAIN) — and kcat, confluent-kafka, kafka-python and aiokafka
producing and consuming over each. Refusals come as Kafka's errors within a second and the
connection closes; a plaintext client on the TLS port is closed and the broker gives back
its descriptors."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import subprocess
import time

import pytest

from cli.certs import make_certs
from controller.launcher import BrokerProcess, free_port
from protocol.client import BrokerConnection, KafkaClient, Network
from protocol.client.security import ClientSecurity
from protocol.errors import ErrorCode, KafkaError
from tests.robustness.resources_support import fd_count, request_frame
from tests.support import wait_until

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
OAUTH_JAAS = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
              'unsecuredLoginStringClaim_sub="admin";')
FIXED = "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN"
N = 200


class SecureBroker:
    def __init__(self, directory):
        self.certs = directory / "certs"
        self.keystores = make_certs(self.certs, ["localhost"], ["alice", "mallory"])
        self.ca = str(self.certs / "ca.pem")
        self.ports = {name: free_port() for name in ("SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")}
        plain_port = free_port()
        listeners = ",".join([f"PLAINTEXT://127.0.0.1:{plain_port}"]
                             + [f"{n}://127.0.0.1:{p}" for n, p in self.ports.items()])
        self.process = BrokerProcess(directory / "data", plain_port, 1, {
            "listeners": listeners,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                              "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.keystores["localhost"]),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": self.ca,
            "listener.name.ssl.ssl.client.auth": "requested", "listener.name.mtls.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=clients,.*$/$1/U,DEFAULT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "group.initial.rebalance.delay.ms": "0", "offsets.topic.replication.factor": "1",
        })
        # Successful TLS logins are DEBUG lines (as in Kafka): this broker logs them, to show principals.
        self.process.loggers = {"kbroker.network": "DEBUG"}
        self.plaintext = f"127.0.0.1:{plain_port}"

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    # each client's settings for a listener ------------------------------------------------
    def librdkafka(self, listener: str, user: str = "alice", password: str = "alice-secret",
                   mechanism: str = "PLAIN") -> dict:
        conf = {"bootstrap.servers": self.bootstrap(listener)}
        if listener in ("SSL", "MTLS", "SASL_SSL"):
            conf.update({"ssl.ca.location": self.ca})
        if listener == "MTLS":
            conf.update({"ssl.certificate.location": str(self.keystores["alice"]),
                         "ssl.key.location": str(self.keystores["alice"])})
        conf["security.protocol"] = {"SSL": "ssl", "MTLS": "ssl", "SASL_PLAINTEXT": "sasl_plaintext",
                                     "SASL_SSL": "sasl_ssl"}[listener]
        if listener.startswith("SASL"):
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
        return conf

    def python_client(self, listener: str) -> dict:
        conf: dict = {"security_protocol": {"MTLS": "SSL"}.get(listener, listener)}
        if listener.startswith("SASL"):
            conf.update({"sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"})
        return conf


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    broker = SecureBroker(tmp_path_factory.mktemp("secure"))
    broker.process.start(60)
    yield broker
    broker.process.stop()


LISTENERS = ["SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL"]


def values(tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(N)]


@pytest.mark.parametrize("listener", LISTENERS)
def test_kcat(secure, listener):
    args = [a for k, v in secure.librdkafka(listener).items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    topic = f"kcat-{listener.lower()}"
    data = "\n".join(v.decode() for v in values(topic)) + "\n"
    subprocess.run(["kcat", "-b", secure.bootstrap(listener), *args, "-P", "-t", topic, "-X", "acks=all"],
                   input=data, text=True, check=True, timeout=60)
    out = subprocess.run(["kcat", "-b", secure.bootstrap(listener), *args, "-C", "-t", topic, "-o", "beginning", "-e"],
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == data


@pytest.mark.parametrize("listener", LISTENERS)
def test_confluent_kafka(secure, listener):
    from confluent_kafka import Consumer, Producer

    topic = f"ck-{listener.lower()}"
    producer = Producer({**secure.librdkafka(listener), "acks": "all"})
    for v in values(topic):
        producer.produce(topic, v)
    assert producer.flush(30) == 0
    consumer = Consumer({**secure.librdkafka(listener), "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < N and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert got == values(topic)


@pytest.mark.parametrize("listener", LISTENERS)
def test_kafka_python(secure, listener):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    tls = {"ssl_cafile": secure.ca, "ssl_check_hostname": True} if "SSL" in listener or listener == "MTLS" else {}
    if listener == "MTLS":
        tls.update({"ssl_certfile": str(secure.keystores["alice"]), "ssl_keyfile": str(secure.keystores["alice"])})
    conf = {**secure.python_client(listener), **tls}
    topic = f"kp-{listener.lower()}"
    producer = KafkaProducer(bootstrap_servers=secure.bootstrap(listener), acks="all", **conf)
    for v in values(topic):
        producer.send(topic, v)
    producer.flush(30)
    producer.close(10)
    consumer = KafkaConsumer(bootstrap_servers=secure.bootstrap(listener), group_id=None, consumer_timeout_ms=20_000,
                             **conf)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == N:
            break
    consumer.close()
    assert got == values(topic)


@pytest.mark.parametrize("listener", LISTENERS)
async def test_aiokafka(secure, listener):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    conf = secure.python_client(listener)
    if "SSL" in listener or listener == "MTLS":
        conf["ssl_context"] = create_ssl_context(
            cafile=secure.ca, **({"certfile": str(secure.keystores["alice"]), "keyfile": str(secure.keystores["alice"])}
                                 if listener == "MTLS" else {}))
    topic = f"aio-{listener.lower()}"
    producer = AIOKafkaProducer(bootstrap_servers=secure.bootstrap(listener), acks="all", **conf)
    await producer.start()
    try:
        for v in values(topic):
            await producer.send(topic, v)
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=secure.bootstrap(listener), **conf)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        async with asyncio.timeout(30):
            while len(got) < N:
                for msgs in (await consumer.getmany(tp, timeout_ms=1000)).values():
                    got.extend(m.value for m in msgs)
    finally:
        await consumer.stop()
    assert got == values(topic)


def test_mtls_principal_comes_from_the_mapped_certificate_name(secure):
    from confluent_kafka.admin import AdminClient

    before = secure.process.log_text().count("authenticated by its TLS certificate as User:ALICE on listener MTLS")
    admin = AdminClient(secure.librdkafka("MTLS"))
    assert admin.list_topics(timeout=10).brokers
    wait_until(lambda: secure.process.log_text().count(
        "authenticated by its TLS certificate as User:ALICE on listener MTLS") > before, 10, what="the mapped principal")


def test_mtls_without_a_certificate_fails_the_handshake(secure):
    ctx = ssl.create_default_context(cafile=secure.ca)
    answer = None
    with socket.create_connection(("127.0.0.1", secure.ports["MTLS"]), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(request_frame(18, 0, b""))
                answer = tls.recv(4)  # TLS 1.3: the server's refusal arrives after the client's Finished
        except (ssl.SSLError, ConnectionResetError):
            pass
    assert not answer  # an alert or a close, never an ApiVersions answer
    wait_until(lambda: "TLS handshake failed" in secure.process.log_text(), 10, what="the handshake failure logged")


def test_oauthbearer_unsecured_with_confluent_kafka(secure):
    from confluent_kafka import Consumer, Producer

    conf = {"bootstrap.servers": secure.bootstrap("SASL_PLAINTEXT"), "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.config": "principal=alice lifeSeconds=3600",
            "enable.sasl.oauthbearer.unsecure.jwt": True}
    producer = Producer(conf)
    for v in values("oauth"):
        producer.produce("oauth", v)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": "oauth-g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["oauth"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < N and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert got == values("oauth")


def librdkafka_error(conf: dict) -> tuple[str, float]:
    """The first error a confluent-kafka client reports, and how long it took."""
    from confluent_kafka import Producer

    errors: list = []
    start = time.monotonic()
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = start + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.05)
    assert errors, "no error reported"
    return errors[0].str(), time.monotonic() - start


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_wrong_password_and_unknown_user_get_the_same_kafka_error_within_a_second(secure, listener):
    wrong, t1 = librdkafka_error(secure.librdkafka(listener, "alice", "wrong"))
    unknown, t2 = librdkafka_error(secure.librdkafka(listener, "nobody", "alice-secret"))
    assert FIXED in wrong and FIXED in unknown
    assert re.sub(r"\d+ms", "", wrong) == re.sub(r"\d+ms", "", unknown)
    assert t1 < 1.0 and t2 < 1.0


def connection(secure, listener: str, **props) -> BrokerConnection:
    security = ClientSecurity.from_properties({"security.protocol": listener, "ssl.truststore.type": "PEM",
                                               "ssl.truststore.location": secure.ca, **props})
    return BrokerConnection("127.0.0.1", secure.ports[listener], network=Network(security), request_timeout_ms=5000)


async def test_refusals_through_the_bundled_client_then_the_close(secure):
    conn = connection(secure, "SASL_SSL", **{"sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                             "sasl.password": "nope"})
    start = time.monotonic()
    with pytest.raises(KafkaError) as info:
        await conn.connect()
    assert info.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and FIXED in str(info.value)
    assert 0.1 <= time.monotonic() - start < 1.0  # connection.failed.authentication.delay.ms, then the answer
    conn = connection(secure, "SASL_SSL", **{"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": OAUTH_JAAS})
    with pytest.raises(KafkaError) as info:
        await conn.connect()
    assert info.value.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert "enables PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in str(info.value)
    conn = connection(secure, "SASL_SSL", **{"sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                             "sasl.password": "alice-secret"})
    await conn.connect()
    assert conn.connected
    conn.close()


async def test_expired_oauthbearer_token_is_refused_within_a_second(secure):
    from protocol.client.sasl import unsecured_token

    token, _ = unsecured_token({"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginLifetimeSeconds": "1"},
                               int(time.time() * 1000) - 5000)  # expired 4 s ago
    conn = connection(secure, "SASL_PLAINTEXT", **{
        "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": OAUTH_JAAS.replace(
            'unsecuredLoginStringClaim_sub="admin"', f'kbroker.token="{token}"')})
    start = time.monotonic()
    with pytest.raises(KafkaError) as info:
        await conn.connect()
    assert time.monotonic() - start < 1.0
    assert info.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and '{"status":"invalid_token"}' in str(info.value)


async def test_the_bundled_client_over_every_listener(secure):
    for listener, props in [("SSL", {}), ("MTLS", {"ssl.keystore.type": "PEM",
                                                  "ssl.keystore.location": str(secure.keystores["alice"])}),
                            ("SASL_PLAINTEXT", {"sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS.replace(
                                'username="admin" password="admin-secret"', 'username="alice" password="alice-secret"')}),
                            ("SASL_PLAINTEXT", {"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": OAUTH_JAAS})]:
        security = ClientSecurity.from_properties({"security.protocol": "SSL" if listener == "MTLS" else listener,
                                                   "ssl.truststore.type": "PEM", "ssl.truststore.location": secure.ca,
                                                   **props})
        async with KafkaClient(secure.bootstrap(listener), network=Network(security)) as client:
            topic = f"bundled-{listener.lower()}-{props.get('sasl.mechanism', 'tls').lower()}"
            await client.create_topics([(topic, 1, 1, None)])
            metadata = await client.refresh_metadata([topic])
            assert topic in metadata.topics


def test_plaintext_client_on_the_tls_port_is_closed_and_descriptors_come_back(secure):
    pid = secure.process.pid
    fds = fd_count(pid)
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=5) as sock:
            sock.sendall(request_frame(18, 0, b""))  # an ApiVersions in the clear: not a ClientHello
            sock.settimeout(5)
            assert sock.recv(65536)[:1] in (b"", b"\x15")  # closed, at most after a TLS alert
    wait_until(lambda: fd_count(pid) <= fds, 10, what="the broker's descriptors to come back")


def test_authentication_metrics_per_listener(tmp_path):
    """successful/failed authentication totals, per listener, in the Prometheus endpoint."""
    certs = make_certs(tmp_path / "certs", ["localhost"], [])
    ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path / "data", ports["PLAINTEXT"], 1, {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "inter.broker.listener.name": "PLAINTEXT", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs["localhost"]), "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "metrics.listener": f"http://127.0.0.1:{metrics_port}"}).start(60)
    try:
        base = {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "sasl_ssl",
                "ssl.ca.location": str(tmp_path / "certs" / "ca.pem"), "sasl.mechanism": "PLAIN"}
        librdkafka_error({**base, "sasl.username": "alice", "sasl.password": "wrong"})
        from confluent_kafka.admin import AdminClient
        assert AdminClient({**base, "sasl.username": "alice", "sasl.password": "alice-secret"}).list_topics(timeout=10)
        with socket.create_connection(("127.0.0.1", ports["SASL_SSL"]), timeout=5) as sock:
            sock.sendall(b"\x00\x00\x00\x10 not a ClientHello")
            sock.settimeout(5)
            sock.recv(100)

        def series() -> dict[str, float]:
            import urllib.request
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
            return {m.group(1): float(m.group(2)) for m in re.finditer(
                r'^(kafka_server_socket_server_metrics_\w+_authentication_total\{listener="SASL_SSL"\}) (\S+)$',
                text, re.M)}
        name = 'kafka_server_socket_server_metrics_{}_authentication_total{{listener="SASL_SSL"}}'
        wait_until(lambda: series().get(name.format("failed"), 0) >= 2, 10, what="two failed authentications")
        got = series()
        assert got[name.format("successful")] >= 1 and got[name.format("failed")] == 2, json.dumps(got)
    finally:
        broker.stop()


# -- SCRAM: users created through AlterUserScramCredentials (KIP-554) ---------------------------

def scram_users(secure, *alterations) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": secure.plaintext})
    for future in admin.alter_user_scram_credentials(list(alterations)).values():
        future.result(10)


def upsert(user: str, mechanism: str, password: str, iterations: int = 4096):
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    return UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")],
                                                                  iterations), password.encode())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_every_client(secure, mechanism):
    from aiokafka.helpers import create_ssl_context
    from confluent_kafka import Consumer, Producer
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    user = f"scram-{mechanism[-3:]}"
    created = time.monotonic()
    scram_users(secure, upsert(user, mechanism, "s3cret", 8192))
    conf = secure.librdkafka("SASL_SSL", user, "s3cret", mechanism)
    # the credential reaches the broker from the controller: a login succeeds within a second
    wait_until(lambda: not librdkafka_error_or_none({**conf, "socket.timeout.ms": 500}), 5, 0.05, "a SCRAM login")
    assert time.monotonic() - created < 1.5

    topic = f"scram-{mechanism.lower()}"
    args = [a for k, v in conf.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    data = "".join(f"kcat-{i}\n" for i in range(N))
    subprocess.run(["kcat", "-b", secure.bootstrap("SASL_SSL"), *args, "-P", "-t", topic], input=data, text=True,
                   check=True, timeout=60)
    producer = Producer({**conf, "acks": "all"})
    for i in range(N):
        producer.produce(topic, f"ck-{i}".encode())
    assert producer.flush(30) == 0
    python_conf = {"security_protocol": "SASL_SSL", "sasl_mechanism": mechanism, "sasl_plain_username": user,
                   "sasl_plain_password": "s3cret"}
    kp = KafkaProducer(bootstrap_servers=secure.bootstrap("SASL_SSL"), ssl_cafile=secure.ca, acks="all", **python_conf)
    for i in range(N):
        kp.send(topic, f"kp-{i}".encode())
    kp.flush(30)
    kp.close(10)

    async def aiokafka_round_trip() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka import TopicPartition as AioTP
        ctx = create_ssl_context(cafile=secure.ca)
        producer = AIOKafkaProducer(bootstrap_servers=secure.bootstrap("SASL_SSL"), ssl_context=ctx, **python_conf)
        await producer.start()
        try:
            for i in range(N):
                await producer.send(topic, f"aio-{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=secure.bootstrap("SASL_SSL"), ssl_context=ctx, **python_conf)
        await consumer.start()
        got: list[bytes] = []
        try:
            tp = AioTP(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            async with asyncio.timeout(30):
                while len(got) < 4 * N:
                    for msgs in (await consumer.getmany(tp, timeout_ms=1000)).values():
                        got.extend(m.value for m in msgs)
        finally:
            await consumer.stop()
        return got
    expected = ([f"kcat-{i}".encode() for i in range(N)] + [f"ck-{i}".encode() for i in range(N)]
                + [f"kp-{i}".encode() for i in range(N)] + [f"aio-{i}".encode() for i in range(N)])
    assert asyncio.run(aiokafka_round_trip()) == expected
    consumer = KafkaConsumer(bootstrap_servers=secure.bootstrap("SASL_SSL"), ssl_cafile=secure.ca, group_id=None,
                             consumer_timeout_ms=20_000, **python_conf)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [m.value for _, m in zip(range(4 * N), consumer)]
    consumer.close()
    assert got == expected
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 4 * N and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == expected
    # a wrong password, and a user that does not exist, get the same fixed message
    wrong = librdkafka_error({**conf, "sasl.password": "nope"})[0]
    unknown = librdkafka_error({**conf, "sasl.username": "nobody"})[0]
    fixed = FIXED.replace("PLAIN", mechanism)
    assert fixed in wrong and fixed in unknown


def librdkafka_error_or_none(conf: dict) -> str | None:
    """None when a confluent-kafka client authenticates (a metadata round trip), else its first error."""
    from confluent_kafka.admin import AdminClient
    errors: list = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    try:
        admin.list_topics(timeout=2)
    except Exception as exc:  # noqa: BLE001
        return str(exc)
    return str(errors[0]) if errors else None


async def test_deleted_scram_credential_fails_the_next_login_and_ends_a_reauthenticating_session(tmp_path):
    """KIP-368 with librdkafka: sessions last connections.max.reauth.ms; confluent-kafka
    re-authenticates before the end (counted), until the credential is deleted: then its
    re-authentication fails and the connection closes, and a new login fails."""
    from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

    certs = make_certs(tmp_path / "certs", ["localhost"], [])
    ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path / "data", ports["PLAINTEXT"], 1, {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "inter.broker.listener.name": "PLAINTEXT", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs["localhost"]), "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "connections.max.reauth.ms": "1500", "metrics.listener": f"http://127.0.0.1:{metrics_port}"}).start(60)
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
        for f in admin.alter_user_scram_credentials([upsert("dora", "SCRAM-SHA-256", "pw")]).values():
            f.result(10)
        conf = {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "sasl_ssl",
                "ssl.ca.location": str(tmp_path / "certs" / "ca.pem"), "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "dora", "sasl.password": "pw"}
        wait_until(lambda: not librdkafka_error_or_none(conf), 5, 0.05, "dora's login")
        errors: list = []
        from confluent_kafka import Producer
        producer = Producer({**conf, "error_cb": errors.append, "acks": "all"})

        def reauthentications() -> float:
            import urllib.request
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
            m = re.search(r'^kafka_server_socket_server_metrics_successful_reauthentication_total'
                          r'\{listener="SASL_SSL"\} (\S+)$', text, re.M)
            return float(m.group(1)) if m else 0.0

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # 5 s of produce: sessions of 1.5 s re-authenticated on the way
            producer.produce("reauth", b"x")
            producer.poll(0.05)
        assert producer.flush(10) == 0 and not errors
        assert reauthentications() >= 2
        for f in admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion("dora", ScramMechanism.SCRAM_SHA_256)]).values():
            f.result(10)
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            producer.produce("reauth", b"y")
            producer.poll(0.1)
        assert errors, "the session went on after its credential was deleted"
        assert "SCRAM-SHA-256" in errors[0].str() and "re-authentication" in errors[0].str(), errors[0].str()
        assert librdkafka_error_or_none(conf)  # and a new login fails
    finally:
        broker.stop()


async def plain_sasl_broker(tmp_path, reauth_ms: int):
    """A broker with a SASL_PLAINTEXT (PLAIN) listener and connections.max.reauth.ms, and
    kbroker's client connected to it as alice: (broker, connection, client security)."""
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port()}
    broker = BrokerProcess(tmp_path / "data", ports["PLAINTEXT"], 1, {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS, "connections.max.reauth.ms": str(reauth_ms)})
    await asyncio.to_thread(broker.start, 60)
    security = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                               "sasl.username": "alice", "sasl.password": "alice-secret"})
    conn = BrokerConnection("127.0.0.1", ports["SASL_PLAINTEXT"], network=Network(security))
    try:
        await conn.connect()
    except BaseException:
        broker.stop()
        raise
    return broker, conn, security


async def test_the_bundled_client_reauthenticates_before_its_session_ends(tmp_path):
    """KIP-368 on kbroker's own client (what inter-broker and controller links use): with
    connections.max.reauth.ms=3000 a connection used for 7.5 s re-authenticates (between its
    requests) instead of being closed by the broker. (The client starts at 85-95 % of the
    lifetime, as Kafka's do: 3 s leaves a loaded machine 150-450 ms for the exchange.)"""
    broker, conn, security = await plain_sasl_broker(tmp_path, 3000)
    try:
        assert conn.session_lifetime_ms == 3000
        from protocol.api_keys import ApiKey
        deadline = time.monotonic() + 7.5
        requests = 0
        while time.monotonic() < deadline:
            await asyncio.gather(*(conn.request(ApiKey.METADATA, {"topics": []}, 1) for _ in range(5)))
            requests += 5
            await asyncio.sleep(0.05)
        assert conn.connected and conn.reauthentications >= 2, (conn.reauthentications, requests)
        conn.close()
    finally:
        broker.stop()


async def test_requests_sent_while_the_client_re_authenticates_wait_for_it(tmp_path):
    """A request made while kbroker's client re-authenticates waits until the exchange is over:
    sent between SaslHandshake and the last SaslAuthenticate, the broker would answer it
    ILLEGAL_SASL_STATE and close the connection (it used to, under load, in the test above)."""
    broker, conn, security = await plain_sasl_broker(tmp_path, 600000)
    try:
        from protocol.api_keys import ApiKey
        for _ in range(3):
            conn._start_reauthentication(security)  # what the session timer does; the requests below
            # are made while its SaslHandshake is on the wire
            answers = await asyncio.gather(*(conn.request(ApiKey.METADATA, {"topics": []}, 1) for _ in range(10)))
            assert len(answers) == 10
        await asyncio.sleep(0)
        assert conn.connected and conn.reauthentications == 3, conn.reauthentications
        conn.close()
    finally:
        broker.stop()


def kbroker(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    import sys
    return subprocess.run([sys.executable, "-m", "cli", *args], input=input, capture_output=True, text=True, timeout=60)


def test_cli_client_commands_take_command_config_and_kcat_style_properties(secure, tmp_path):
    config = tmp_path / "client.properties"
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
            'password="alice-secret";')
    config.write_text("# a Kafka client properties file\nsecurity.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                      f"sasl.jaas.config={jaas}\nssl.truststore.type=PEM\nssl.truststore.location={secure.ca}\n")
    bootstrap = ["-b", secure.bootstrap("SASL_SSL")]
    assert kbroker("topics", "create", "-t", "cli-secure", *bootstrap, "--command-config", str(config)).returncode == 0
    done = kbroker("produce", "-t", "cli-secure", *bootstrap, "--command-config", str(config), input="a\nb\nc\n")
    assert done.returncode == 0, done.stderr
    # kcat's -X with librdkafka's names, no file
    x = ["-X", "security.protocol=sasl_ssl", "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=alice",
         "-X", "sasl.password=alice-secret", "-X", f"ssl.ca.location={secure.ca}"]
    out = kbroker("consume", "-t", "cli-secure", *bootstrap, *x, "--from-beginning", "-e")
    assert out.returncode == 0 and out.stdout.split() == ["a", "b", "c"], out.stderr
    health = kbroker("health", *bootstrap, *x)
    assert health.returncode == 0, health.stderr
    wrong = kbroker("health", *bootstrap, *x[:-4], "-X", "sasl.password=nope", "-X", f"ssl.ca.location={secure.ca}")
    assert wrong.returncode == 1 and FIXED in wrong.stderr
    plaintext = kbroker("health", "-b", secure.bootstrap("SSL"), "-X", "security.protocol=SSL",
                        "-X", f"ssl.ca.location={secure.ca}", "-X", "ssl.endpoint.identification.algorithm=https")
    assert plaintext.returncode == 0, plaintext.stderr


def test_kbroker_certs_writes_pem_and_pkcs12_keystores(tmp_path):
    import os
    out = kbroker("certs", "--dir", str(tmp_path / "c"), "--broker", "broker-1", "--san", "10.0.0.1",
                  "--client", "alice", "--pkcs12", "changeit")
    assert out.returncode == 0, out.stderr
    names = sorted(os.listdir(tmp_path / "c"))
    assert names == ["alice.p12", "alice.pem", "broker-1.p12", "broker-1.pem", "ca-key.pem", "ca.pem", "truststore.p12"]
    for private in ("alice.pem", "broker-1.pem", "ca-key.pem", "alice.p12"):
        assert (tmp_path / "c" / private).stat().st_mode & 0o077 == 0
    from cryptography import x509
    cert = x509.load_pem_x509_certificates((tmp_path / "c" / "broker-1.pem").read_bytes())[0]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"broker-1", "localhost"} <= set(sans.get_values_for_type(x509.DNSName))
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"10.0.0.1", "127.0.0.1"}
    # both keystore kinds load as a listener's keystore (and the PKCS12 truststore as a truststore)
    from protocol.client.tls import client_context, server_context
    server_context({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(tmp_path / "c" / "broker-1.p12"),
                    "ssl.keystore.password": "changeit"})
    server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "c" / "broker-1.pem")})
    client_context({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(tmp_path / "c" / "truststore.p12"),
                    "ssl.truststore.password": "changeit"})


def served_serial(port: int, ca: str) -> int:
    """The serial number of the certificate a TLS listener presents to a new connection."""
    from cryptography import x509
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


async def test_key_store_reloaded_by_alter_configs_and_sighup_while_connections_keep_working(tmp_path):
    import signal

    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from cli.certs import CertificateAuthority, broker_subject

    certs = tmp_path / "certs"
    make_certs(certs, [], [])
    ca = CertificateAuthority.load_or_create(certs)
    keystore = certs / "broker.pem"

    def renew() -> int:
        key, cert = ca.issue(broker_subject("localhost"), ["localhost", "127.0.0.1"])
        keystore.write_bytes(ca.keystore_pem(key, cert))
        return cert.serial_number

    first = renew()
    ports = {"PLAINTEXT": free_port(), "SSL": free_port()}
    broker = BrokerProcess(tmp_path / "data", ports["PLAINTEXT"], 1, {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "inter.broker.listener.name": "PLAINTEXT", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)})
    await asyncio.to_thread(broker.start, 60)
    try:
        assert served_serial(ports["SSL"], str(certs / "ca.pem")) == first
        security = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem")})
        established = BrokerConnection("127.0.0.1", ports["SSL"], network=Network(security))
        await established.connect()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})

        def alter(name: str, value: str):
            resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
                ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
            return admin.incremental_alter_configs([resource])[resource].result(10)

        second = renew()  # renewed in place: the same location again reloads it
        await asyncio.to_thread(alter, "listener.name.ssl.ssl.keystore.location", str(keystore))
        assert served_serial(ports["SSL"], str(certs / "ca.pem")) == second
        from protocol.api_keys import ApiKey
        assert (await established.request(ApiKey.METADATA, {"topics": []}, 1)).brokers  # still working
        # a key store that does not load is refused, and the listener keeps its certificate
        (certs / "bad.pem").write_text("not a key store")
        with pytest.raises(Exception, match="INVALID_CONFIG"):
            await asyncio.to_thread(alter, "listener.name.ssl.ssl.keystore.location", str(certs / "bad.pem"))
        assert served_serial(ports["SSL"], str(certs / "ca.pem")) == second
        third = renew()
        broker.signal(signal.SIGHUP)
        wait_until(lambda: served_serial(ports["SSL"], str(certs / "ca.pem")) == third, 10, what="the SIGHUP reload")
        assert (await established.request(ApiKey.METADATA, {"topics": []}, 1)).brokers
        established.close()
    finally:
        broker.stop()


def test_oauthbearer_tokens_signed_by_an_issuer_jwks_file(tmp_path):
    """KIP-768 on the broker: sasl.oauthbearer.jwks.endpoint.url (a file) — confluent-kafka
    (oauth_cb), kafka-python (a token provider) and the bundled client log in with tokens the
    issuer signed, as the sub claim; a forged or expired token is refused within a second."""
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    from kafka.net.sasl.oauth import AbstractTokenProvider

    from tests.broker.security.jwt_support import Issuer

    issuer = Issuer()
    issuer.add_rsa("k1")
    url = issuer.write(tmp_path / "jwks.json")
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port()}
    broker = BrokerProcess(tmp_path / "data", ports["PLAINTEXT"], 1, {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": url, "sasl.oauthbearer.expected.audience": "kafka"}).start(60)
    try:
        now = time.time()
        good = issuer.token("k1", {"sub": "carol", "iat": now, "exp": now + 300, "aud": "kafka"})
        bootstrap = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
        ck = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "sasl_plaintext",
                          "sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _cfg: (good, now + 300)})
        assert ck.list_topics(timeout=10).brokers

        class Provider(AbstractTokenProvider):
            def token(self):
                return good
        kp = KafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider())
        assert kp.list_topics() is not None
        kp.close()

        async def bundled(token: str) -> None:
            conn = BrokerConnection("127.0.0.1", ports["SASL_PLAINTEXT"], network=Network(ClientSecurity.from_properties(
                {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                 "sasl.jaas.config": f'{OAUTH_JAAS[:OAUTH_JAAS.index(" required")]} required kbroker.token="{token}";'})))
            await conn.connect()
            conn.close()
        asyncio.run(bundled(good))
        forger = Issuer()
        forger.add_rsa("k1")
        for bad in (forger.token("k1", {"sub": "carol", "iat": now, "exp": now + 300, "aud": "kafka"}),
                    issuer.token("k1", {"sub": "carol", "iat": now - 600, "exp": now - 300, "aud": "kafka"}),
                    issuer.token("k1", {"sub": "carol", "iat": now, "exp": now + 300, "aud": "other"})):
            start = time.monotonic()
            with pytest.raises(KafkaError) as info:
                asyncio.run(bundled(bad))
            assert info.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "invalid_token" in str(info.value)
            assert time.monotonic() - start < 1.0
    finally:
        broker.stop()
