"""Key stores reloaded without a restart (Kafka's dynamic listener reconfiguration, KIP-226).

* IncrementalAlterConfigs / AlterConfigs of a BROKER resource naming this broker's id (Kafka's
  AdminClient sends those to that broker) whose every key is a listener's key store setting —
  ``listener.name.<l>.ssl.keystore.location`` and the other ``RELOADABLE`` keys, or the plain
  keys for every TLS listener — is applied here: the new settings are loaded into a fresh
  context first (so a bad file, password or type is refused with INVALID_CONFIG and changes
  nothing), then into the listener's live TLS context. New handshakes present the new
  certificate (and trust the new CAs); connections already established keep theirs. The same
  location again reloads the file (a certificate renewed in place). Such a change lives as long
  as the process: server.properties stays the source at the next start (Kafka would keep it in
  its metadata). Other broker configs still go to the controller as before.
* SIGHUP (``kbroker serve``; Kafka has no such signal) reloads every TLS listener's key stores
  from the files its settings name.

Checked as Kafka checks it: ALTER_CONFIGS on the CLUSTER.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from protocol.api_keys import ApiKey
from protocol.client.tls import SslConfigError, load_keystore, load_truststore, server_context
from protocol.errors import ErrorCode

log = logging.getLogger("kbroker.security")

BROKER = 4
RELOADABLE = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates"})
_LISTENER_KEY = re.compile(r"^listener\.name\.([^.]+)\.(.+)$")
_SET, _DELETE = 0, 1


class ListenerReconfiguration:
    def __init__(self, broker_id: int, security: Any, socket_server: Any) -> None:
        """``security``: the process's SecurityConfig; ``socket_server`` its SocketServer."""
        self.broker_id = broker_id
        self.security = security
        self.socket_server = socket_server
        self.overrides: dict[str, dict[str, str | None]] = {}  # listener -> reloadable key -> value

    def _tls_listeners(self) -> list[str]:
        return [name for name in self.socket_server.tls_contexts if name in self.security.listeners]

    def _target(self, name: str) -> tuple[list[str], str] | None:
        """(listeners, key) a config name reconfigures; None if it is not a reloadable key."""
        m = _LISTENER_KEY.match(name)
        listener, key = (m.group(1).upper(), m.group(2)) if m else (None, name)
        if key not in RELOADABLE:
            return None
        if listener is None:
            return self._tls_listeners(), key
        return ([listener] if listener in self.socket_server.tls_contexts else []), key

    def handles(self, api_key: int, request: Any) -> bool:
        """Whether ``request`` is a key store change of this broker's listeners and nothing else."""
        if api_key not in (ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS) or not request.resources:
            return False
        for res in request.resources:
            if res.resource_type != BROKER or res.resource_name != str(self.broker_id) or not res.configs:
                return False
            if any(self._target(c.name) is None for c in res.configs):
                return False
        return True

    def apply(self, api_key: int, request: Any, allowed: bool) -> dict:
        results = []
        for res in request.resources:
            code, message = ErrorCode.NONE, None
            if not allowed:
                code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
            else:
                changes: dict[str, dict[str, str | None]] = {}
                for c in res.configs:
                    listeners, key = self._target(c.name)  # type: ignore[misc]
                    operation = getattr(c, "config_operation", _SET if c.value is not None else _DELETE)
                    if operation not in (_SET, _DELETE):
                        code, message = ErrorCode.INVALID_CONFIG, f"{c.name}: only SET and DELETE apply to key stores"
                        break
                    if not listeners:
                        code, message = ErrorCode.INVALID_CONFIG, f"{c.name}: no TLS listener to reconfigure"
                        break
                    for listener in listeners:
                        changes.setdefault(listener, {})[key] = None if operation == _DELETE else c.value
                if code == ErrorCode.NONE:
                    code, message = self._reload(changes, dry_run=bool(getattr(request, "validate_only", False)))
            results.append({"error_code": code, "error_message": message, "resource_type": res.resource_type,
                            "resource_name": res.resource_name})
        return {"throttle_time_ms": 0, "responses": results}

    def _properties(self, listener: str, extra: dict[str, str | None] | None = None) -> dict[str, str | None]:
        props = self.security.listener(listener).ssl_properties()
        for source in (self.overrides.get(listener, {}), extra or {}):
            for key, value in source.items():
                if value is None:
                    props.pop(key, None)
                else:
                    props[key] = value
        return props

    def _reload(self, changes: dict[str, dict[str, str | None]], dry_run: bool = False) -> tuple[int, str | None]:
        staged = {}
        for listener, change in changes.items():
            props = self._properties(listener, change)
            try:
                server_context(props)  # everything loads, or nothing changes
            except SslConfigError as exc:
                key, _, rest = str(exc).partition(": ")
                return ErrorCode.INVALID_CONFIG, f"listener.name.{listener.lower()}.{key}: {rest}"
            staged[listener] = props
        if dry_run:
            return ErrorCode.NONE, None
        for listener, props in staged.items():
            ctx = self.socket_server.tls_contexts[listener]
            load_keystore(ctx, props)
            load_truststore(ctx, props)
            self.overrides.setdefault(listener, {}).update(changes[listener])
            log.info("listener %s: key store reloaded (%s)", listener, ", ".join(sorted(changes[listener])))
        return ErrorCode.NONE, None

    def reload_all(self) -> list[str]:
        """SIGHUP: every TLS listener's key stores read again from their files; a listener whose
        files do not load keeps its current ones (and the error is logged). Returns the reloaded."""
        done = []
        for listener in self._tls_listeners():
            code, message = self._reload({listener: {}})
            if code == ErrorCode.NONE:
                done.append(listener)
            else:
                log.error("listener %s: key store not reloaded: %s", listener, message)
        return done
