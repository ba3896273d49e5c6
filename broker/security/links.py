"""Where a listener's security meets the process: its listener started with TLS and SASL,
and the networks this process's outgoing links (inter-broker, to the controller, controller
to brokers) open their connections through, with this process's credentials."""

from __future__ import annotations

import logging
from typing import Any

from protocol.client import Network
from protocol.client.security import ClientSecurity, SecurityConfigError
from protocol.client.tls import SslConfigError, server_context

from ..config import ConfigError, Endpoint, KafkaConfig
from .sasl_server import ListenerAuthentication
from .oauthbearer_jwks import JwksError

log = logging.getLogger("kbroker.security")


def network_for(config: KafkaConfig, listener_name: str | None, mechanism: str | None, plaintext: Network) -> Network:
    """The network outgoing connections to ``listener_name`` (of another process configured
    like this one) go through: TLS and SASL as that listener's security says, with this
    process's credentials for it (the listener's keystore, its JAAS username/password), as
    Kafka's inter-broker and controller clients do. A PLAINTEXT listener: ``plaintext``."""
    sec = config.security.listeners.get(listener_name) if listener_name else None
    if sec is None or sec.protocol == "PLAINTEXT":
        return plaintext
    try:
        return Network(ClientSecurity.from_properties(sec.client_properties(mechanism)))
    except SecurityConfigError as exc:
        key, _, rest = str(exc).partition(": ")
        where = sec.keys.get(key, key)
        if key == "sasl.jaas.config" and mechanism is not None:
            where = f"listener.name.{sec.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        raise ConfigError(f"{where}: {rest} (this process's credentials towards listener {sec.name})") from None


async def start_listener(socket_server: Any, config: KafkaConfig, ep: Endpoint, credentials: Any,
                         avoid_ports: frozenset[int] = frozenset()) -> int:
    """Listen on ``ep`` with its security (TLS, SASL); a key store that cannot be used stops
    the start with an error naming its key. ``avoid_ports``: SocketServer.start's."""
    sec = config.security.listeners.get(ep.listener_name)
    try:
        tls = mapper = auth = None
        if sec is not None and sec.uses_tls:
            tls, mapper = server_context(sec.ssl_properties()), sec.mapper
        if sec is not None and sec.uses_sasl:
            auth = ListenerAuthentication(sec, credentials, socket_server.time, socket_server.max_request_size)
        port = await socket_server.start(ep.listener_name, ep.host, ep.port, tls=tls, principal_mapper=mapper,
                                         authentication=auth, avoid_ports=avoid_ports)
    except JwksError as exc:
        raise ConfigError(f"{sec.keys.get('sasl.oauthbearer.jwks.endpoint.url') if sec is not None else ''}: "
                          f"{str(exc).partition(': ')[2]} (listener {ep.listener_name})") from None
    except SslConfigError as exc:
        key, _, rest = str(exc).partition(": ")
        raise ConfigError(f"{sec.keys.get(key, key) if sec is not None else key}: {rest} (listener "
                          f"{ep.listener_name})") from None
    log.info("listening on %s://%s:%d (%s)", ep.listener_name, ep.host or "0.0.0.0", port,
             sec.protocol if sec is not None else "PLAINTEXT")
    return port
