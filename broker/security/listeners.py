"""Each listener's security, resolved from the configuration the way Kafka resolves it.

* ``listener.security.protocol.map`` names each listener's protocol: PLAINTEXT, SSL,
  SASL_PLAINTEXT or SASL_SSL. Unset, Kafka's default maps those four names to themselves, and
  any other name (CONTROLLER, INTERNAL, ...) is PLAINTEXT; set, it must name every listener.
* A key under ``listener.name.<listener lower-case>.`` wins over the plain key for that
  listener; SASL's JAAS configuration is per mechanism:
  ``listener.name.<l>.<mechanism lower-case>.sasl.jaas.config`` (so is
  ``connections.max.reauth.ms``).
* The inter-broker listener (``inter.broker.listener.name``, or the listener named after
  ``security.inter.broker.protocol``, or the first broker listener) is the one the
  controller and other brokers connect to, with ``sasl.mechanism.inter.broker.protocol``;
  brokers reach the controller on its listener with ``sasl.mechanism.controller.protocol``.
  A broker's own credentials on those links are the ``username``/``password`` options of
  that listener's JAAS configuration, as in Kafka.

A Kafka security setting that kbroker recognises but does not implement stops the process
at start with an error naming the key (``UNIMPLEMENTED``): Kafka would only warn about an
unknown key, but a security setting silently ignored leaves an operator believing they have
security they do not have. GSSAPI (Kerberos) is such a setting: Kafka's default
``sasl.enabled.mechanisms``, so a SASL listener must enable its mechanisms explicitly.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from protocol.client.jaas import (OAUTHBEARER_LOGIN_MODULE, PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasEntry,
                                  JaasError, parse_single_jaas)
from protocol.client.security import SECURITY_PROTOCOLS, SSL_PROTOCOLS, SASL_PROTOCOLS
from protocol.client.tls import SslConfigError, _type as store_type

from .principal_mapper import SslPrincipalMapper

log = logging.getLogger("kbroker.security")

IMPLEMENTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
LOGIN_MODULES = {"PLAIN": PLAIN_LOGIN_MODULE, "SCRAM-SHA-256": SCRAM_LOGIN_MODULE, "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
                 "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE}
DEFAULT_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"
KBROKER_PRINCIPAL_BUILDER = "kbroker.DefaultKafkaPrincipalBuilder"

_KERBEROS = "Kerberos (GSSAPI) is not implemented by kbroker"
_CALLBACKS = "custom (Java) callback handlers and login classes cannot be loaded by kbroker"
_OIDC = ("fetching OAUTHBEARER tokens from an OIDC token endpoint (KIP-768's client side) is not built in kbroker: its "
         "clients use unsecured tokens or a given one")
# The callback handlers kbroker is (Kafka's names): accepted as a value of sasl.server.callback.handler.class.
BUILT_IN_HANDLERS = frozenset({
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"})
# Kafka security keys kbroker recognises and does not implement: set (anywhere, under a
# listener prefix too), they stop the process at start.
UNIMPLEMENTED: dict[str, str] = {
    **{k: _KERBEROS for k in ("sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
                              "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
                              "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor")},
    **{k: _CALLBACKS for k in ("sasl.server.callback.handler.class", "sasl.client.callback.handler.class",
                               "sasl.login.callback.handler.class", "sasl.login.class")},
    **{k: "SASL login refresh and retries belong to login classes kbroker does not have"
       for k in ("sasl.login.refresh.buffer.seconds", "sasl.login.refresh.min.period.seconds",
                 "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.connect.timeout.ms",
                 "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms", "sasl.login.retry.backoff.max.ms")},
    "sasl.oauthbearer.token.endpoint.url": _OIDC,
    "ssl.engine.factory.class": "custom (Java) SSL engine factories cannot be loaded by kbroker",
    "ssl.provider": "security providers are Java's; kbroker's TLS is OpenSSL through Python's ssl module",
    "security.providers": "security providers are Java's; kbroker's TLS is OpenSSL through Python's ssl module",
    "delegation.token.master.key": "delegation tokens are not implemented by kbroker",
    "delegation.token.secret.key": "delegation tokens are not implemented by kbroker",
    "zookeeper.ssl.client.enable": "TLS to ZooKeeper is not implemented by kbroker",
    "zookeeper.clientCnxnSocket": "TLS to ZooKeeper is not implemented by kbroker",
}
# Refused only when set to something other than these (their off values).
_OFF_VALUES = {"zookeeper.ssl.client.enable": ("false",)}
ZOOKEEPER_DIGEST_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
_DEFAULT_NOTE = ", Kafka's default"
_MECHANISM_KEYS = ("sasl.jaas.config", "connections.max.reauth.ms", "sasl.server.callback.handler.class",
                   "sasl.login.callback.handler.class", "sasl.login.class")
_LISTENER_KEY = re.compile(r"^listener\.name\.([^.]+)\.(.+)$")
DEFAULT_PROTOCOL_MAP = {name: name for name in SECURITY_PROTOCOLS}


def _base_key(name: str) -> tuple[str | None, str]:
    """``listener.name.<l>.<key>`` -> (l, key); a plain key -> (None, key)."""
    m = _LISTENER_KEY.match(name)
    return (m.group(1), m.group(2)) if m else (None, name)


def _mechanism_key(key: str) -> tuple[str | None, str]:
    """``<mechanism>.sasl.jaas.config`` -> (MECHANISM, sasl.jaas.config)."""
    for suffix in _MECHANISM_KEYS:
        if key.endswith("." + suffix) and key != suffix:
            return key[:-len(suffix) - 1].upper(), suffix
    return None, key


def is_security_key(name: str, security_keys: Mapping[str, Any]) -> bool:
    """Whether ``name`` is a security key kbroker recognises (implemented or refused), under
    a listener prefix or not: such keys get no "unknown key" warning."""
    _listener, key = _base_key(name)
    _mech, key = _mechanism_key(key)
    zk = key.startswith("zookeeper.ssl.") or key.startswith("zookeeper.sasl.")
    return key in UNIMPLEMENTED or key in security_keys or zk


@dataclass
class ListenerSecurity:
    name: str
    protocol: str
    values: dict[str, Any]  # every security key, resolved for this listener
    mechanisms: list[str] = field(default_factory=list)
    jaas: dict[str, JaasEntry] = field(default_factory=dict)  # mechanism -> its JAAS entry
    reauth_ms: dict[str, int] = field(default_factory=dict)  # mechanism -> connections.max.reauth.ms
    mapper: SslPrincipalMapper | None = None
    keys: dict[str, str] = field(default_factory=dict)  # security key -> the name it was set under (errors)

    @property
    def protocol_id(self) -> int:
        return SECURITY_PROTOCOLS[self.protocol]

    @property
    def uses_tls(self) -> bool:
        return self.protocol in SSL_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    def ssl_properties(self) -> dict[str, str | None]:
        """The ssl.* settings of this listener, as protocol.client.tls takes them."""
        out: dict[str, str | None] = {}
        for key, value in self.values.items():
            if key.startswith("ssl."):
                out[key] = ",".join(value) if isinstance(value, list) else None if value is None else str(value)
        return out

    def client_properties(self, mechanism: str | None) -> dict[str, str | None]:
        """Kafka client properties for connecting to this listener as this process (a broker
        or the controller): the listener's ssl settings (its keystore is the client
        certificate, as Kafka's inter-broker clients use theirs) and, for SASL, ``mechanism``
        with this listener's JAAS configuration of it (its username/password options)."""
        props: dict[str, str | None] = {"security.protocol": self.protocol}
        if self.uses_tls:
            props.update(self.ssl_properties())
        if self.uses_sasl and mechanism is not None:
            props["sasl.mechanism"] = mechanism
            entry = self.jaas.get(mechanism)
            if entry is not None:
                opts = " ".join(f'{k}="{_escape(v)}"' for k, v in entry.options.items() if not k.startswith("user_"))
                props["sasl.jaas.config"] = f"{entry.login_module} required {opts};"
        return props


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


@dataclass
class SecurityConfig:
    listeners: dict[str, ListenerSecurity]
    inter_broker_listener: str | None
    inter_broker_mechanism: str | None  # for a SASL inter-broker listener
    controller_mechanism: str | None  # for a SASL controller listener
    zookeeper_sasl: tuple[str, str] | None = None  # (username, password): SASL DIGEST-MD5 to ZooKeeper

    def listener(self, name: str) -> ListenerSecurity:
        return self.listeners[name.upper()]


def resolve_security(config: Any, keys: Mapping[str, Any], security_keys: Mapping[str, Any],
                     ConfigError: type[Exception]) -> SecurityConfig:
    """Every listener's security from ``config`` (a KafkaConfig; ``keys`` its ConfigKeys,
    ``security_keys`` those of them that are security keys), raising ``ConfigError``."""
    originals: dict[str, Any] = config.originals
    _refuse_unimplemented(originals, ConfigError)
    builder = config["principal.builder.class"]
    if builder is not None and builder not in (DEFAULT_PRINCIPAL_BUILDER, KBROKER_PRINCIPAL_BUILDER):
        raise ConfigError(f"principal.builder.class: {builder} cannot be loaded; kbroker builds principals as Kafka's "
                          f"{DEFAULT_PRINCIPAL_BUILDER} does (the only builder)")
    protocol_map, explicit = _protocol_map(config, ConfigError)
    names: list[str] = []
    for ep in [*config.listeners, *config.controller_listeners]:
        if ep.listener_name not in names:
            names.append(ep.listener_name)
    for n in config["controller.listener.names"] or []:  # a broker alone: how it reaches the controller
        if n.upper() not in names:
            names.append(n.upper())
    inter_broker = _inter_broker_listener_name(config, ConfigError)
    if inter_broker is not None and inter_broker not in names:
        names.append(inter_broker)  # a controller alone: how it reaches brokers
    listeners: dict[str, ListenerSecurity] = {}
    for name in names:
        protocol = protocol_map.get(name)
        if protocol is None:
            if explicit:
                raise ConfigError(f"listener.security.protocol.map: no security protocol for listener {name} "
                                  f"(map: {','.join(f'{k}:{v}' for k, v in protocol_map.items())})")
            protocol = "PLAINTEXT"
        listeners[name] = _resolve_listener(config, originals, keys, security_keys, name, protocol, ConfigError)
    ib_mech = ctl_mech = None
    roles = config.process_roles
    if "broker" in roles:
        if inter_broker is None and config.broker_listeners:
            inter_broker = config.broker_listeners[0].listener_name
        if inter_broker is not None and inter_broker in {ep.listener_name for ep in config.controller_listeners}:
            raise ConfigError(f"inter.broker.listener.name: {inter_broker} is a controller listener "
                              "(controller.listener.names)")
    if inter_broker is not None and listeners[inter_broker].uses_sasl:
        ib_mech = _link_mechanism(config, listeners[inter_broker], "sasl.mechanism.inter.broker.protocol",
                                  "inter-broker", ConfigError)
    controller_names = [n.upper() for n in (config["controller.listener.names"] or [])]
    if controller_names and controller_names[0] in listeners and listeners[controller_names[0]].uses_sasl:
        ctl_mech = _link_mechanism(config, listeners[controller_names[0]], "sasl.mechanism.controller.protocol",
                                   "controller", ConfigError)
    return SecurityConfig(listeners, inter_broker, ib_mech, ctl_mech, _zookeeper_credentials(config, ConfigError))


def _zookeeper_credentials(config: Any, ConfigError: type[Exception]) -> tuple[str, str] | None:
    """(username, password) for SASL DIGEST-MD5 to ZooKeeper, from zookeeper.sasl.jaas.config."""
    text = config["zookeeper.sasl.jaas.config"]
    if not text:
        if config["zookeeper.set.acl"]:
            raise ConfigError("zookeeper.set.acl: true needs the controllers' SASL identity in zookeeper.sasl.jaas.config "
                              f"({ZOOKEEPER_DIGEST_MODULE} required username=\"...\" password=\"...\";)")
        return None
    try:
        entry = parse_single_jaas(str(text))
    except JaasError as exc:
        raise ConfigError(f"zookeeper.sasl.jaas.config: {exc}") from None
    if entry.login_module != ZOOKEEPER_DIGEST_MODULE:
        raise ConfigError(f"zookeeper.sasl.jaas.config: {entry.login_module} is not implemented: only "
                          f"{ZOOKEEPER_DIGEST_MODULE} (SASL DIGEST-MD5)")
    user, password = entry.options.get("username"), entry.options.get("password")
    if not user or password is None:
        raise ConfigError("zookeeper.sasl.jaas.config: username and password are required")
    return user, password


def _refuse_unimplemented(originals: dict[str, Any], ConfigError: type[Exception]) -> None:
    for name, value in originals.items():
        _listener, key = _base_key(name)
        _mech, key = _mechanism_key(key)
        reason = UNIMPLEMENTED.get(key)
        if reason is None and (key.startswith("zookeeper.ssl.") or key.startswith("zookeeper.sasl.")) \
                and key != "zookeeper.sasl.jaas.config":
            reason = "ZooKeeper TLS settings, and SASL ones other than zookeeper.sasl.jaas.config, are not implemented"
        if reason is None:
            continue
        if str(value).strip().lower() in _OFF_VALUES.get(key, ()):
            continue
        if key == "sasl.server.callback.handler.class" and _mech == "OAUTHBEARER" and str(value).strip() in BUILT_IN_HANDLERS:
            continue
        raise ConfigError(f"{name}: {reason} (the setting is refused rather than ignored)")


def _protocol_map(config: Any, ConfigError: type[Exception]) -> tuple[dict[str, str], bool]:
    raw = config["listener.security.protocol.map"]
    if raw is None:
        return dict(DEFAULT_PROTOCOL_MAP), False
    out: dict[str, str] = {}
    for item in raw:
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or not protocol:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not LISTENER:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {protocol} (listener {name}) is not PLAINTEXT, SSL, "
                              "SASL_PLAINTEXT or SASL_SSL")
        if name in out:
            raise ConfigError(f"listener.security.protocol.map: listener {name} appears twice")
        out[name] = protocol
    return out, True


def _inter_broker_listener_name(config: Any, ConfigError: type[Exception]) -> str | None:
    name, protocol = config["inter.broker.listener.name"], config["security.inter.broker.protocol"]
    if name and protocol:
        raise ConfigError("inter.broker.listener.name: only one of inter.broker.listener.name and "
                          "security.inter.broker.protocol should be set")
    if name:
        return str(name).strip().upper()
    if protocol:
        return str(protocol).strip().upper()  # Kafka: the listener named after the protocol
    return None


def _value(config: Any, originals: dict[str, Any], keys: Mapping[str, Any], listener: str,
           key: str) -> tuple[Any, str]:
    prefixed = f"listener.name.{listener.lower()}.{key}"
    if prefixed in originals:
        return keys[key].parse(originals[prefixed]), prefixed
    return config[key], key


def _resolve_listener(config: Any, originals: dict[str, Any], keys: Mapping[str, Any],
                      security_keys: Mapping[str, Any], name: str, protocol: str,
                      ConfigError: type[Exception]) -> ListenerSecurity:
    values: dict[str, Any] = {}
    where: dict[str, str] = {}
    for key in security_keys:
        values[key], where[key] = _value(config, originals, keys, name, key)
    sec = ListenerSecurity(name, protocol, values, keys=where)
    if protocol == "SASL_SSL" and where["ssl.client.auth"] == "ssl.client.auth":
        # KIP-684: the broker-wide ssl.client.auth is for SSL listeners; a SASL_SSL listener asks
        # for client certificates only through its own listener.name.<l>.ssl.client.auth.
        if str(values["ssl.client.auth"] or "none").strip().lower() != "none":
            log.warning("Broker configuration 'ssl.client.auth' is applied only to SSL listeners. Listener-prefixed "
                        "configuration can be used to enable SSL client authentication for SASL_SSL listeners "
                        "(listener %s).", name)
        values["ssl.client.auth"] = "none"
    if sec.uses_tls:
        props = sec.ssl_properties()
        try:
            if props.get("ssl.keystore.location"):
                store_type(props, "ssl.keystore.type", "ssl.keystore.location")
            if props.get("ssl.truststore.location"):
                store_type(props, "ssl.truststore.type", "ssl.truststore.location")
        except SslConfigError as exc:
            key, _, rest = str(exc).partition(": ")
            raise ConfigError(f"{where.get(key, key)}: {rest} (listener {name})") from None
        try:
            sec.mapper = SslPrincipalMapper(values["ssl.principal.mapping.rules"])
        except ValueError as exc:
            raise ConfigError(f"{where['ssl.principal.mapping.rules']}: {exc}") from None
    if sec.uses_sasl:
        mechanisms = [m.strip().upper() for m in values["sasl.enabled.mechanisms"] or []]
        key = where["sasl.enabled.mechanisms"]
        if not mechanisms:
            raise ConfigError(f"{key}: listener {name} is {protocol} but enables no SASL mechanism")
        for mech in mechanisms:
            if mech == "GSSAPI":
                raise ConfigError(f"{key}: GSSAPI (listener {name}{_DEFAULT_NOTE if key not in originals else ''})"
                                  f": {_KERBEROS}; enable PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
            if mech not in IMPLEMENTED_MECHANISMS:
                raise ConfigError(f"{key}: unknown SASL mechanism {mech} (listener {name}): PLAIN, SCRAM-SHA-256, "
                                  "SCRAM-SHA-512 or OAUTHBEARER")
        sec.mechanisms = list(dict.fromkeys(mechanisms))
        for mech in sec.mechanisms:
            jaas_key = f"listener.name.{name.lower()}.{mech.lower()}.sasl.jaas.config"
            text = originals.get(jaas_key)
            if text is None and f"{mech.lower()}.sasl.jaas.config" in originals:
                jaas_key = f"{mech.lower()}.sasl.jaas.config"
                text = originals[jaas_key]
            if text is not None:
                try:
                    entry = parse_single_jaas(str(text))
                except JaasError as exc:
                    raise ConfigError(f"{jaas_key}: {exc}") from None
                if entry.login_module != LOGIN_MODULES[mech]:
                    raise ConfigError(f"{jaas_key}: {mech} takes {LOGIN_MODULES[mech]}, not {entry.login_module}")
                sec.jaas[mech] = entry
            elif mech == "PLAIN":
                raise ConfigError(f"{jaas_key}: listener {name} enables PLAIN but has no JAAS configuration for it "
                                  f'(users as user_<name>="<password>")')
            if mech == "OAUTHBEARER" and values["sasl.oauthbearer.jwks.endpoint.url"]:
                from .oauthbearer_jwks import JwksError, jwks_path
                try:
                    jwks_path(values["sasl.oauthbearer.jwks.endpoint.url"])
                except JwksError as exc:
                    raise ConfigError(f"{where['sasl.oauthbearer.jwks.endpoint.url']}: {exc}") from None
            if mech == "OAUTHBEARER" and mech in sec.jaas:
                skew = sec.jaas[mech].options.get("unsecuredValidatorAllowableClockSkewMs", "0").strip() or "0"
                if not skew.isdigit():
                    raise ConfigError(f"{jaas_key}: unsecuredValidatorAllowableClockSkewMs={skew!r} is not a "
                                      "non-negative number of ms")
            reauth_key = f"listener.name.{name.lower()}.{mech.lower()}.connections.max.reauth.ms"
            sec.reauth_ms[mech] = (keys["connections.max.reauth.ms"].parse(originals[reauth_key])
                                   if reauth_key in originals else values["connections.max.reauth.ms"])
    return sec


def _link_mechanism(config: Any, listener: ListenerSecurity, key: str, what: str,
                    ConfigError: type[Exception]) -> str:
    mech = str(config[key]).strip().upper()
    if mech == "GSSAPI":
        raise ConfigError(f"{key}: GSSAPI{_DEFAULT_NOTE if key not in config.originals else ''} for the "
                          f"{what} listener {listener.name}: {_KERBEROS}; set PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
                          "or OAUTHBEARER")
    if mech not in IMPLEMENTED_MECHANISMS:
        raise ConfigError(f"{key}: unknown SASL mechanism {mech}")
    if mech not in listener.mechanisms:
        raise ConfigError(f"{key}: {mech} must be in {listener.keys['sasl.enabled.mechanisms']} of the {what} "
                          f"listener {listener.name} ({', '.join(listener.mechanisms)})")
    return mech

