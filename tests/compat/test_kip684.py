"""KIP-684 with a real client (confluent-kafka): the broker-wide ``ssl.client.auth=required``
asks SSL listeners for client certificates, not SASL_SSL ones; a SASL_SSL listener asks only
when its own ``listener.name.<l>.ssl.client.auth`` says so, and then wants both the certificate
and the SASL login. One broker process with an SSL, a SASL_SSL and such a mutual-TLS SASL_SSL
listener (MTLS_SASL)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from cli.certs import make_certs
from controller.launcher import BrokerProcess, free_port

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    directory = tmp_path_factory.mktemp("kip684")
    keystores = make_certs(directory / "certs", ["localhost"], ["alice"])
    ports = {name: free_port() for name in ("SSL", "SASL_SSL", "MTLS_SASL")}
    plain = free_port()
    process = BrokerProcess(directory / "data", plain, 1, {
        "listeners": ",".join([f"PLAINTEXT://127.0.0.1:{plain}"] + [f"{n}://127.0.0.1:{p}" for n, p in ports.items()]),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,MTLS_SASL:SASL_SSL,"
                                          "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystores["localhost"]),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(directory / "certs" / "ca.pem"),
        "ssl.client.auth": "required", "listener.name.mtls_sasl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN", "plain.sasl.jaas.config": PLAIN_JAAS,
    })
    process.start(60)
    process.ports = ports
    process.ca = str(directory / "certs" / "ca.pem")
    process.alice = str(keystores["alice"])
    yield process
    process.stop()


def lists_topics(broker, listener: str, certificate: bool, sasl: bool) -> bool:
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}", "ssl.ca.location": broker.ca,
            "security.protocol": "sasl_ssl" if sasl else "ssl", "socket.timeout.ms": 3000}
    if certificate:
        conf.update({"ssl.certificate.location": broker.alice, "ssl.key.location": broker.alice})
    if sasl:
        conf.update({"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
    try:
        return bool(AdminClient(conf).list_topics(timeout=4).brokers)
    except KafkaException:
        return False


def test_the_broker_wide_key_is_for_ssl_listeners(broker):
    assert not lists_topics(broker, "SSL", certificate=False, sasl=False)
    assert lists_topics(broker, "SSL", certificate=True, sasl=False)
    assert lists_topics(broker, "SASL_SSL", certificate=False, sasl=True)  # KIP-684: not asked for a certificate
    assert ("Broker configuration 'ssl.client.auth' is applied only to SSL listeners" in broker.log_text())


def test_a_listener_prefixed_key_asks_sasl_ssl_clients_for_both(broker):
    assert not lists_topics(broker, "MTLS_SASL", certificate=False, sasl=True)
    assert lists_topics(broker, "MTLS_SASL", certificate=True, sasl=True)
