"""Each listener's security resolved from Kafka's keys, and every security setting kbroker
recognises but does not implement refused at start with an error naming the key (a SASL_SSL
listener was once served as PLAINTEXT without a word)."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, KafkaConfig

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p" user_u="p";'


def config(**props) -> KafkaConfig:
    return KafkaConfig({"process.roles": "broker", **{k.replace("__", "."): v for k, v in props.items()}})


def refused(match: str, **props) -> None:
    with pytest.raises(ConfigError, match=match):
        config(**props)


def test_default_map_and_other_names():
    c = config(listeners="PLAINTEXT://:1,SSL://:2,SASL_SSL://:3,INTERNAL://:4",
               **{"ssl.keystore.type": "PEM", "sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    assert {n: s.protocol for n, s in c.security.listeners.items()} == {
        "PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_SSL": "SASL_SSL", "INTERNAL": "PLAINTEXT"}
    assert c.security.inter_broker_listener == "PLAINTEXT"


def test_a_sasl_listener_is_never_plaintext_by_default():
    # Kafka's default sasl.enabled.mechanisms is GSSAPI, which is not implemented: named, refused
    refused(r"^sasl.enabled.mechanisms: GSSAPI \(listener SASL_SSL, Kafka's default\)", listeners="SASL_SSL://:1")


def test_explicit_map_must_name_every_listener():
    refused("no security protocol for listener EXTERNAL", listeners="INTERNAL://:1,EXTERNAL://:2",
            **{"listener.security.protocol.map": "INTERNAL:PLAINTEXT"})
    refused(r"TLS \(listener X\) is not PLAINTEXT, SSL", listeners="X://:1", **{"listener.security.protocol.map": "X:TLS"})


@pytest.mark.parametrize("key, value", [
    ("sasl.kerberos.service.name", "kafka"), ("listener.name.internal.sasl.kerberos.service.name", "kafka"),
    ("sasl.server.callback.handler.class", "x.Y"), ("listener.name.a.plain.sasl.server.callback.handler.class", "x.Y"),
    ("sasl.login.class", "x.Y"), ("sasl.oauthbearer.token.endpoint.url", "https://idp/token"),
    ("ssl.engine.factory.class", "x.Y"), ("security.providers", "x"), ("delegation.token.secret.key", "k"),
    ("zookeeper.ssl.client.enable", "true"), ("zookeeper.ssl.keystore.location", "x"),
    ("zookeeper.sasl.client.username", "x"),
])
def test_unimplemented_security_keys_stop_the_start_naming_the_key(key, value):
    refused(f"^{key.replace('.', '[.]')}: ", listeners="PLAINTEXT://:1", **{key: value})


def test_unimplemented_keys_at_their_off_values_are_accepted():
    config(listeners="PLAINTEXT://:1", **{"zookeeper.ssl.client.enable": "false"})


def test_zookeeper_sasl_and_acls():
    jaas = 'org.apache.zookeeper.server.auth.DigestLoginModule required username="kb" password="pw";'
    c = config(listeners="PLAINTEXT://:1", **{"zookeeper.set.acl": "true", "zookeeper.sasl.jaas.config": jaas})
    assert c.security.zookeeper_sasl == ("kb", "pw")
    refused("zookeeper.set.acl: true needs the controllers' SASL identity", listeners="PLAINTEXT://:1",
            **{"zookeeper.set.acl": "true"})
    refused("zookeeper.sasl.jaas.config: com.sun.security.auth.module.Krb5LoginModule is not implemented",
            listeners="PLAINTEXT://:1", **{"zookeeper.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule "
                                                                       "required;"})


def test_jks_keystores_are_refused_with_kip651_advice():
    refused("ssl.keystore.type: unset, which means JKS .* use PEM files .*KIP-651.* or PKCS12",
            listeners="SSL://:1", **{"ssl.keystore.location": "/k.jks"})
    refused("listener.name.ssl.ssl.truststore.type: JKS", listeners="SSL://:1",
            **{"ssl.keystore.type": "PEM", "listener.name.ssl.ssl.truststore.type": "JKS",
               "ssl.truststore.location": "/t.jks"})


def test_listener_prefix_wins_and_mechanism_jaas():
    c = config(listeners="SASL_PLAINTEXT://:1,CLIENTS://:2",
               **{"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CLIENTS:SASL_PLAINTEXT,"
                                                    "CONTROLLER:PLAINTEXT",
                  "sasl.enabled.mechanisms": "SCRAM-SHA-512", "listener.name.clients.sasl.enabled.mechanisms": "PLAIN",
                  "listener.name.clients.plain.sasl.jaas.config": PLAIN_JAAS,
                  "listener.name.clients.plain.connections.max.reauth.ms": "5000",
                  "inter.broker.listener.name": "SASL_PLAINTEXT",
                  "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"})
    clients = c.security.listener("CLIENTS")
    assert clients.mechanisms == ["PLAIN"] and clients.jaas["PLAIN"].options["user_u"] == "p"
    assert clients.reauth_ms == {"PLAIN": 5000}
    assert c.security.listener("SASL_PLAINTEXT").mechanisms == ["SCRAM-SHA-512"]
    assert c.security.inter_broker_mechanism == "SCRAM-SHA-512"
    props = clients.client_properties("PLAIN")
    assert props["security.protocol"] == "SASL_PLAINTEXT" and props["sasl.mechanism"] == "PLAIN"
    assert "user_u" not in props["sasl.jaas.config"] and 'username="u"' in props["sasl.jaas.config"]


def test_sasl_listener_checks():
    refused("enables PLAIN but has no JAAS configuration", listeners="SASL_PLAINTEXT://:1",
            **{"sasl.enabled.mechanisms": "PLAIN"})
    refused("unknown SASL mechanism DIGEST-MD5", listeners="SASL_PLAINTEXT://:1",
            **{"sasl.enabled.mechanisms": "DIGEST-MD5"})
    refused("PLAIN takes org.apache.kafka.common.security.plain.PlainLoginModule", listeners="SASL_PLAINTEXT://:1",
            **{"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
               "listener.name.sasl_plaintext.plain.sasl.jaas.config": "a.B required;"})
    refused("Invalid login module control flag", listeners="SASL_PLAINTEXT://:1",
            **{"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": "a.B must;"})
    refused(r"sasl.mechanism.inter.broker.protocol: GSSAPI, Kafka's default", listeners="SASL_PLAINTEXT://:1",
            **{"sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    refused("sasl.mechanism.inter.broker.protocol: SCRAM-SHA-512 must be in sasl.enabled.mechanisms",
            listeners="SASL_PLAINTEXT://:1", **{"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                                                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"})


def test_inter_broker_listener_choice():
    refused("only one of inter.broker.listener.name and security.inter.broker.protocol",
            listeners="PLAINTEXT://:1", **{"inter.broker.listener.name": "PLAINTEXT",
                                           "security.inter.broker.protocol": "PLAINTEXT"})
    c = config(listeners="EXTERNAL://:1,SSL://:2", **{"security.inter.broker.protocol": "SSL",
                                                      "ssl.keystore.type": "PEM"})
    assert c.security.inter_broker_listener == "SSL"


def test_principal_builder_and_mapping_rules():
    config(listeners="PLAINTEXT://:1",
           **{"principal.builder.class": "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"})
    refused("principal.builder.class: com.acme.Builder cannot be loaded", listeners="PLAINTEXT://:1",
            **{"principal.builder.class": "com.acme.Builder"})
    refused("ssl.principal.mapping.rules: Invalid rule", listeners="SSL://:1",
            **{"ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/X"})


def test_controller_listener_security_for_a_broker_alone():
    c = config(listeners="PLAINTEXT://:1", **{"controller.listener.names": "CONTROLLER",
                                              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
                                              "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                                              "sasl.mechanism.controller.protocol": "SCRAM-SHA-256"})
    assert c.security.listener("CONTROLLER").protocol == "SASL_SSL"
    assert c.security.controller_mechanism == "SCRAM-SHA-256"


def test_oauthbearer_jwks_url_is_a_file_and_kafka_validator_class_is_accepted():
    props = {"sasl.enabled.mechanisms": "OAUTHBEARER", "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
             "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
                 "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"}
    c = config(listeners="SASL_PLAINTEXT://:1", **props, **{"sasl.oauthbearer.jwks.endpoint.url": "file:///k.json"})
    assert c.security.listener("SASL_PLAINTEXT").values["sasl.oauthbearer.jwks.endpoint.url"] == "file:///k.json"
    refused("sasl.oauthbearer.jwks.endpoint.url: https://idp/jwks: only file:// URLs", listeners="SASL_PLAINTEXT://:1",
            **props, **{"sasl.oauthbearer.jwks.endpoint.url": "https://idp/jwks"})
    refused("sasl.server.callback.handler.class: custom", listeners="SASL_PLAINTEXT://:1",
            **{**props, "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": "com.acme.H"})


def test_unprefixed_ssl_client_auth_is_for_ssl_listeners_only(caplog):
    """KIP-684: ``ssl.client.auth`` applies to SSL listeners; a SASL_SSL listener asks for
    client certificates only when its own ``listener.name.<l>.ssl.client.auth`` says so (Kafka
    warns when the plain key is set to something else than none)."""
    mtls_sasl = "listener.name.mtls_sasl.ssl.client.auth"
    c = config(listeners="SSL://:1,SASL_SSL://:2,MTLS_SASL://:3",
               **{"listener.security.protocol.map": "SSL:SSL,SASL_SSL:SASL_SSL,MTLS_SASL:SASL_SSL,CONTROLLER:PLAINTEXT",
                  "ssl.keystore.type": "PEM", "ssl.client.auth": "required", mtls_sasl: "requested",
                  "sasl.enabled.mechanisms": "PLAIN", "plain.sasl.jaas.config": PLAIN_JAAS,
                  "inter.broker.listener.name": "SSL"})
    auth = {n: s.ssl_properties()["ssl.client.auth"] for n, s in c.security.listeners.items() if s.uses_tls}
    assert auth == {"SSL": "required", "SASL_SSL": "none", "MTLS_SASL": "requested"}
    assert c.security.listener("MTLS_SASL").keys["ssl.client.auth"] == mtls_sasl
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["Broker configuration 'ssl.client.auth' is applied only to SSL listeners. Listener-prefixed "
                        "configuration can be used to enable SSL client authentication for SASL_SSL listeners "
                        "(listener SASL_SSL)."]
    caplog.clear()
    config(listeners="SSL://:1,SASL_SSL://:2", **{"ssl.keystore.type": "PEM", "ssl.client.auth": "none",
                                                   "sasl.enabled.mechanisms": "PLAIN", "plain.sasl.jaas.config": PLAIN_JAAS,
                                                   "inter.broker.listener.name": "SSL"})
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # none: nothing to say
