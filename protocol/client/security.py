"""A client's security, from Kafka's client properties.

``ClientSecurity.from_properties`` takes what a Kafka client's ``--command-config`` file holds:
``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``sasl.mechanism``,
``sasl.jaas.config`` (``username``/``password`` options; OAUTHBEARER's ``unsecuredLogin*``
options) or librdkafka's ``sasl.username``/``sasl.password``, and the ``ssl.*`` keys of
``protocol.client.tls``. A ``Network`` carries one (``Network(security=...)``): every
connection it opens is TLS when the protocol says so, and authenticates (SaslHandshake,
SaslAuthenticate) right after ApiVersions when it is SASL.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from typing import Mapping

from .jaas import JaasError, parse_single_jaas
from .tls import SslConfigError, client_context

SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
SSL_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SecurityConfigError(ValueError):
    """A client security property that cannot be used; the message names the key."""


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    jaas_options: dict[str, str] = field(default_factory=dict)

    @property
    def uses_tls(self) -> bool:
        return self.protocol in SSL_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @classmethod
    def from_properties(cls, props: Mapping[str, str | None]) -> "ClientSecurity":
        props = with_librdkafka_aliases(props)
        protocol = str(props.get("security.protocol") or "PLAINTEXT").strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise SecurityConfigError(f"security.protocol: {protocol} is not PLAINTEXT, SSL, SASL_PLAINTEXT or "
                                      "SASL_SSL")
        context = None
        if protocol in SSL_PROTOCOLS:
            try:
                context = client_context(props)
            except SslConfigError as exc:
                raise SecurityConfigError(str(exc)) from None
        mechanism = username = password = None
        options: dict[str, str] = {}
        if protocol in SASL_PROTOCOLS:
            key = "sasl.mechanism" if props.get("sasl.mechanism") else "sasl.mechanisms"
            mechanism = str(props.get(key) or "GSSAPI").strip().upper()
            if mechanism not in CLIENT_MECHANISMS:
                raise SecurityConfigError(f"{'sasl.mechanism' if key not in props else key}: {mechanism} is not "
                                          f"supported by kbroker's client ({', '.join(CLIENT_MECHANISMS)})")
            jaas = props.get("sasl.jaas.config")
            if jaas:
                try:
                    options = dict(parse_single_jaas(str(jaas)).options)
                except JaasError as exc:
                    raise SecurityConfigError(f"sasl.jaas.config: {exc}") from None
            username = options.get("username", props.get("sasl.username") or None)
            password = options.get("password", props.get("sasl.password") or None)
            if mechanism != "OAUTHBEARER" and (username is None or password is None):
                raise SecurityConfigError(f"sasl.jaas.config: {mechanism} needs a username and a password "
                                          "(sasl.jaas.config options, or sasl.username and sasl.password)")
        return cls(protocol, context, mechanism, username, password, options)


PLAINTEXT = ClientSecurity()

# Kafka client properties the client reads (the rest of a command-config file is not its business).
SECURITY_PROPERTIES = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password", "sasl.mechanisms",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.enabled.protocols", "ssl.protocol",
    "ssl.cipher.suites", "ssl.endpoint.identification.algorithm",
    # librdkafka's (kcat's -X) names, mapped onto Kafka's
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.cipher.suites",
})


def with_librdkafka_aliases(props: Mapping[str, str | None]) -> dict[str, str | None]:
    """librdkafka's TLS names (what kcat users pass with -X) as Kafka's: ssl.ca.location is a
    PEM truststore, ssl.certificate.location + ssl.key.location a PEM keystore (read inline),
    ssl.endpoint.identification.algorithm=none is empty."""
    out = dict(props)
    ca = out.pop("ssl.ca.location", None)
    if ca and not out.get("ssl.truststore.location"):
        out["ssl.truststore.location"] = ca
        out.setdefault("ssl.truststore.type", "PEM")
    cert, key = out.pop("ssl.certificate.location", None), out.pop("ssl.key.location", None)
    if cert and key and not out.get("ssl.keystore.location"):
        try:
            with open(str(cert), encoding="ascii") as c, open(str(key), encoding="ascii") as k:
                out["ssl.keystore.certificate.chain"], out["ssl.keystore.key"] = c.read(), k.read()
        except OSError as exc:
            raise SecurityConfigError(f"ssl.certificate.location: cannot read {cert} or {key}: {exc.strerror}") \
                from None
        out.setdefault("ssl.keystore.type", "PEM")
    elif cert or key:
        raise SecurityConfigError("ssl.certificate.location: needs ssl.key.location too (and the other way round)")
    if str(out.get("ssl.endpoint.identification.algorithm") or "").lower() == "none":
        out["ssl.endpoint.identification.algorithm"] = ""
    return out


def read_client_properties(path: str) -> dict[str, str]:
    """A Kafka client properties file (``--command-config``): key=value or key: value lines,
    # and ! comments, trailing backslash continuations."""
    props: dict[str, str] = {}
    pending = ""
    with open(path, encoding="utf-8") as f:
        for raw in f.read().splitlines():
            line = (pending + raw.strip()) if pending else raw.strip()
            pending = ""
            if not line or line[0] in "#!":
                continue
            if line.endswith("\\"):
                pending = line[:-1]
                continue
            m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
            if m is None:
                props[line] = ""
            else:
                props[m.group(1)] = m.group(2)
    return props
