"""``kbroker cluster up --secure`` (issue 25 §6): real processes started by the real command, and
real clients using the client configuration it prints and writes, unchanged — kcat (``-F`` and
the printed ``-X`` flags), confluent-kafka (the librdkafka file as its settings) and the
``kbroker`` CLI (``--command-config``). Anonymous and plaintext clients are refused on every
listener; a second SCRAM user gets TOPIC_AUTHORIZATION_FAILED until ``kbroker acls add`` lets it
in; ``status``, ``down`` and ``up`` again keep working, the data and the admin's credential with
them. The tests share one cluster and run in file order (the last one restarts it)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from cli.certs import make_certs
from controller.launcher import REPO, metadata, pid_alive
from protocol.api_keys import ApiKey
from protocol.client.security import read_client_properties
from protocol.messages import APIS
from tests.robustness.resources_support import request_frame

from .test_cluster_cli import FAST, kbroker, wait_until

pytestmark = pytest.mark.timeout(300)

N = 50


class Secure:
    """The cluster ``up --secure`` left running, and what it printed."""

    def __init__(self, directory: Path, up: subprocess.CompletedProcess) -> None:
        self.dir = directory
        self.up = up
        self.bootstrap = up.stdout.strip()
        self.state = json.loads((directory / "cluster.json").read_text())
        self.client_properties = directory / "client.properties"
        self.librdkafka_properties = directory / "client-librdkafka.properties"
        self.ca = directory / "secrets" / "ca.pem"

    @property
    def first(self) -> str:
        return self.bootstrap.split(",")[0]

    def librdkafka(self, **overrides: str) -> dict[str, str]:
        """The librdkafka file as confluent-kafka's settings, unchanged (plus ``overrides``)."""
        return {**read_client_properties(str(self.librdkafka_properties)), **overrides}

    def printed_kcat_x(self) -> list[str]:
        """The kcat command ``up`` printed with -X flags, as argv (without kcat itself)."""
        [line] = [ln.strip() for ln in self.up.stderr.splitlines() if ln.strip().startswith("kcat -b ")]
        return shlex.split(line)[1:]

    def cli(self, *argv: str) -> subprocess.CompletedProcess:
        return kbroker(*argv, "-b", self.first, "--command-config", str(self.client_properties))

    def kill_all(self) -> None:
        """Whatever is left running, by the pids the state file names (and only those)."""
        if not (self.dir / "cluster.json").exists():
            return
        state = json.loads((self.dir / "cluster.json").read_text())
        for p in [*state["controllers"], *state["brokers"]]:
            if pid_alive(p["pid"], p["data_dir"]):
                os.kill(p["pid"], signal.SIGKILL)


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    directory = tmp_path_factory.mktemp("secure") / "cluster"
    up = kbroker("cluster", "up", "--secure", "-n", "2", "--dir", str(directory), "--base-port", "0", *FAST)
    cluster = Secure(directory, up)
    try:
        assert up.returncode == 0, up.stderr
        yield cluster
    finally:
        cluster.kill_all()


def kcat(*argv: str, data: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *argv], input=data, capture_output=True, text=True, timeout=60)


def lines(tag: str) -> list[str]:
    return [f"{tag}-{i}" for i in range(N)]


def produce(conf: dict, topic: str, values: list[str]) -> list:
    """confluent-kafka's producer: the delivery errors (none: every value acknowledged)."""
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
    errors: list = []
    for v in values:
        producer.produce(topic, v.encode(), on_delivery=lambda err, _msg: err is not None and errors.append(err))
    assert producer.flush(30) == 0
    return errors


def consume(conf: dict, topic: str, expected: int, group: str | None = None) -> list[str]:
    consumer = Consumer({**conf, "group.id": group or f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        out: list[str] = []
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise AssertionError(msg.error())
            out.append(msg.value().decode())
        return out
    finally:
        consumer.close()


def test_up_prints_the_client_config_and_keeps_the_secrets_private(secure):
    s = secure.state
    assert s["secure"] is True and secure.bootstrap == s["bootstrap"] and len(secure.bootstrap.split(",")) == 2
    err = secure.up.stderr
    assert "created the SCRAM credentials of admin" in err
    assert f"{secure.client_properties} (kbroker --command-config" in err
    assert f"{secure.librdkafka_properties} (kcat -F, confluent-kafka)" in err
    assert f"kcat -F {secure.librdkafka_properties} -L" in err
    kafka = read_client_properties(str(secure.client_properties))
    password = (secure.dir / "secrets" / "admin.password").read_text().strip()
    assert kafka == {
        "bootstrap.servers": secure.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
                            f'password="{password}";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(secure.ca)}
    assert secure.librdkafka() == {
        "bootstrap.servers": secure.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin", "sasl.password": password, "ssl.ca.location": str(secure.ca)}
    assert len(password) >= 24
    # The printed -X flags are the librdkafka file's settings.
    argv = secure.printed_kcat_x()
    assert argv[:2] == ["-b", secure.bootstrap] and argv[-1] == "-L"
    assert dict(a.split("=", 1) for a in argv[3:-1:2]) == {k: v for k, v in secure.librdkafka().items()
                                                           if k != "bootstrap.servers"}
    # Keys, the password and the client files are the owner's only; the CA certificate is public.
    secrets = secure.dir / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    for name in ("ca-key.pem", "admin.pem", "admin.password", "broker-1.pem", "broker-2.pem", "controller-3000.pem"):
        assert stat.S_IMODE((secrets / name).stat().st_mode) == 0o600, name
    for path in (secure.client_properties, secure.librdkafka_properties):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_kcat_round_trips_with_the_file_and_with_the_printed_flags(secure, kcat_path):
    topic = "kcat-secure"
    data = "\n".join(lines(topic)) + "\n"
    produced = kcat("-F", str(secure.librdkafka_properties), "-P", "-t", topic, "-X", "acks=all", data=data)
    assert produced.returncode == 0, produced.stderr
    read = kcat("-F", str(secure.librdkafka_properties), "-C", "-t", topic, "-o", "beginning", "-e")
    assert read.returncode == 0 and read.stdout == data, read.stderr
    argv = secure.printed_kcat_x()[:-1]  # without -L
    read = kcat(*argv, "-C", "-t", topic, "-o", "beginning", "-e")
    assert read.returncode == 0 and read.stdout == data, read.stderr


def test_confluent_kafka_round_trips_with_the_file_as_its_settings(secure):
    topic = "confluent-secure"
    assert produce(secure.librdkafka(), topic, lines(topic)) == []
    assert sorted(consume(secure.librdkafka(), topic, N)) == sorted(lines(topic))


def test_the_kbroker_cli_round_trips_with_the_properties_file(secure):
    created = secure.cli("topics", "create", "-t", "cli-secure", "--partitions", "2", "--replication-factor", "2")
    assert created.returncode == 0, created.stderr
    data = "\n".join(lines("cli")) + "\n"
    produced = subprocess.run([sys.executable, "-m", "cli", "produce", "-t", "cli-secure", "-b", secure.first,
                               "--command-config", str(secure.client_properties)],
                              input=data, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert produced.returncode == 0, produced.stderr
    read = secure.cli("consume", "-t", "cli-secure", "--from-beginning", "--max-messages", str(N))
    assert read.returncode == 0 and sorted(read.stdout.splitlines()) == sorted(lines("cli")), read.stderr
    # Both brokers replicate it over the mutual TLS listener: the brokers' principals are super users.
    wait_until(lambda: isr(secure, "cli-secure") == {0: ["1", "2"], 1: ["1", "2"]}, 30, "both partitions in sync")


def isr(secure: Secure, topic: str) -> dict[int, list[str]]:
    """Each partition's ISR, as ``kbroker topics describe`` (as the admin) shows it."""
    out = secure.cli("topics", "describe", "-t", topic).stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│┃").split("│")]
        if len(cells) == 8 and cells[0] == topic:
            rows[int(cells[1])] = sorted(cells[5].split(","))
    return rows


def test_anonymous_and_plaintext_clients_are_refused(secure, kcat_path):
    # A plaintext Kafka client on the SASL_SSL port: no metadata.
    plain = kcat("-b", secure.first, "-L", "-m", "3")
    assert plain.returncode != 0 and "Failed to acquire metadata" in plain.stderr, plain.stderr
    # TLS without SASL (an anonymous principal): the broker answers nothing but ApiVersions and
    # SaslHandshake, so librdkafka's Metadata gets no answer either.
    anonymous = kcat("-b", secure.first, "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={secure.ca}",
                     "-L", "-m", "3")
    assert anonymous.returncode != 0 and "Failed to acquire metadata" in anonymous.stderr, anonymous.stderr
    host, port = secure.first.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        ctx = ssl.create_default_context(cafile=str(secure.ca))
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(request_frame(ApiKey.METADATA, 1, APIS[ApiKey.METADATA].request.build(1, {"topics": []})))
            assert tls.recv(4096) == b""  # closed without a reply
    # A wrong password: Kafka's fixed message.
    wrong = kcat("-F", str(secure.librdkafka_properties), "-X", "sasl.password=wrong", "-L", "-m", "5")
    assert wrong.returncode != 0 and "Authentication failed during authentication due to invalid credentials " \
        "with SASL mechanism SCRAM-SHA-512" in wrong.stderr, wrong.stderr
    # The mutual TLS listeners of the brokers and the controller: no certificate, or one from
    # another CA (same names), and the handshake fails; the CA's admin certificate gets in.
    stranger = make_certs(secure.dir.parent / "stranger", [], ["admin"])["admin"]
    probes = [(b["internal_port"], "broker") for b in secure.state["brokers"]]
    probes.append((secure.state["controller"]["port"], "controller"))
    for probe_port, role in probes:
        for keystore in (None, stranger):
            ctx = ssl.create_default_context(cafile=str(secure.ca))
            if keystore is not None:
                ctx.load_cert_chain(str(keystore))
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                metadata(probe_port, tls=ctx, timeout_s=5)
        ctx = ssl.create_default_context(cafile=str(secure.ca))
        ctx.load_cert_chain(str(secure.dir / "secrets" / "admin.pem"))
        assert metadata(probe_port, tls=ctx).brokers, role


def test_a_second_user_needs_an_acl(secure):
    topic = "acl-secure"
    created = secure.cli("topics", "create", "-t", topic, "--partitions", "1", "--replication-factor", "2")
    assert created.returncode == 0, created.stderr
    user = secure.cli("users", "scram", "set", "-u", "alice", "--add-config",
                      "SCRAM-SHA-512=[iterations=4096,password=alice-secret]")
    assert user.returncode == 0, user.stderr
    alice = secure.librdkafka(**{"sasl.username": "alice", "sasl.password": "alice-secret"})

    def alice_produces():
        errors = produce(alice, topic, lines("alice"))
        return errors == [] or {e.code() for e in errors}

    # alice logs in (her credential reached the brokers) but may not write: TOPIC_AUTHORIZATION_FAILED.
    refused = wait_until(lambda: alice_produces() == {KafkaError.TOPIC_AUTHORIZATION_FAILED}, 30,
                         "alice logged in and refused")
    assert refused
    granted = secure.cli("acls", "add", "--allow-principal", "User:alice", "--producer", "--topic", topic)
    assert granted.returncode == 0, granted.stderr
    assert wait_until(lambda: alice_produces() is True, 30, "alice's records accepted after the ACL")
    # Reading needs READ on the topic and on the group: librdkafka's Fetch gets
    # TOPIC_AUTHORIZATION_FAILED (and its FindCoordinator GROUP_AUTHORIZATION_FAILED), no record.
    consumer = Consumer({**alice, "group.id": "alice-group", "auto.offset.reset": "earliest"})
    codes, records = set(), []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while KafkaError.TOPIC_AUTHORIZATION_FAILED not in codes and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                codes.add(msg.error().code()) if msg.error() else records.append(msg.value())
    finally:
        consumer.close()
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes and not records, (codes, len(records))
    assert codes <= {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}, codes
    granted = secure.cli("acls", "add", "--allow-principal", "User:alice", "--consumer", "--topic", topic,
                         "--group", "alice-group")
    assert granted.returncode == 0, granted.stderr
    assert wait_until(lambda: len(consume(alice, topic, N, group="alice-group")) == N, 30, "alice reads her records")


def test_status_down_and_up_again(secure, kcat_path):
    d = str(secure.dir)
    status = kbroker("cluster", "status", "--dir", d)
    assert status.returncode == 0, status.stdout + status.stderr
    assert len(re.findall(r"│ broker\s+│ \d\s+│ 127\.0\.0\.1:\d+\s+│ \d+\s+│ running\s+│ live", status.stdout)) == 2
    assert "0 offline" in status.stdout, status.stdout
    down = kbroker("cluster", "down", "--dir", d)
    assert down.returncode == 0, down.stderr
    status = kbroker("cluster", "status", "--dir", d)
    assert status.returncode == 1 and len(re.findall(r"│ stopped", status.stdout)) == 3, status.stdout
    again = kbroker("cluster", "up", "--dir", d)
    assert again.returncode == 0 and again.stdout.strip() == secure.bootstrap, again.stderr
    # The admin's credential was kept by the controller: nothing created, the same files work.
    assert "created the SCRAM credentials" not in again.stderr and "made " not in again.stderr
    assert f"kcat -F {secure.librdkafka_properties} -L" in again.stderr
    read = kcat("-F", str(secure.librdkafka_properties), "-C", "-t", "kcat-secure", "-o", "beginning", "-e")
    assert read.returncode == 0 and read.stdout.splitlines() == lines("kcat-secure"), read.stderr
    assert kbroker("cluster", "status", "--dir", d).returncode == 0
    # --secure again on it is fine; a cluster that is not secure is not turned into one.
    assert kbroker("cluster", "up", "--secure", "--dir", d).returncode == 0
    assert kbroker("cluster", "down", "--dir", d, "--purge").returncode == 0
