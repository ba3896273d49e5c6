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
