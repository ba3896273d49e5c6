"""The server side of SASL on a connection (Kafka's SaslServerAuthenticator), beside
broker/network.py's connection: every request of a connection on a SASL listener passes
through ``SaslServerAuthenticator.handle`` before the dispatcher sees it. A connection on
another listener has none (``KafkaConnection.sasl`` is None: one attribute check).

States, in order (Kafka's names):

    INITIAL ──ApiVersions──▶ HANDSHAKE ──SaslHandshake──▶ AUTHENTICATE ──…SaslAuthenticate…──▶ COMPLETE
       └────────────SaslHandshake────────────┘                 (any failure) ──▶ FAILED

* Before SaslHandshake only ApiVersions (once) and SaslHandshake are answered; anything else
  closes the connection without a reply (a client with the wrong security protocol, or not a
  Kafka client at all).
* SaslHandshake naming a mechanism the listener does not enable answers
  UNSUPPORTED_SASL_MECHANISM with the enabled ones. v1 is followed by SaslAuthenticate
  requests; v0 (KIP-43) by the mechanism's raw tokens, size-prefixed without a request
  header (``RawTokens``: the connection's frame processing is swapped for it meanwhile).
* In AUTHENTICATE, anything but SaslAuthenticate answers ILLEGAL_SASL_STATE (the request's own
  error response). A token the mechanism refuses answers SASL_AUTHENTICATION_FAILED with
  Kafka's fixed message, which does not say whether the user exists.
* Every failure is answered and the connection closed after
  ``connection.failed.authentication.delay.ms`` on the injected clock (reading stops
  meanwhile), and counted in the listener's failed-authentication-total; a success counts in
  successful-authentication-total.
* Until authentication completes, frames above ``sasl.server.max.receive.size`` close the
  connection (a failed authentication).
* COMPLETE: the connection's principal is ``User:<authorization id>`` and requests go to the
  dispatcher. SaslAuthenticate v1+ told the client the session's lifetime (KIP-368): the
  least of ``connections.max.reauth.ms`` and the credential's own expiry (an OAUTHBEARER
  token). A request that arrives after the session ended closes the connection; a
  SaslHandshake re-authenticates (same mechanism, same principal), and the session starts
  again (successful-reauthentication-total).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from protocol.api_keys import ApiKey
from protocol.clock import Time, TimerHandle
from protocol.errors import ErrorCode
from protocol.fast_codecs import response_header
from protocol.messages import APIS, response_is_flexible
from protocol.schema import SchemaError

from ..error_response import error_response_body
from .authenticator import AuthenticationFailed, SaslServerMechanism
from .credentials import CredentialCache
from .oauthbearer import OAuthBearerServer
from .plain import PlainServer, users_from_jaas
from .principal import KafkaPrincipal
from .scram import ScramServer

if TYPE_CHECKING:
    from ..network import KafkaConnection, RequestContext
    from .listeners import ListenerSecurity

log = logging.getLogger("kbroker.authentication")

INITIAL, HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = "INITIAL", "HANDSHAKE", "AUTHENTICATE", "COMPLETE", "FAILED"
_PRE_HANDSHAKE = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE})


def failure_message(mechanism: str, reauthenticating: bool = False) -> str:
    """Kafka's fixed message for invalid credentials (SaslServerAuthenticator)."""
    return (f"Authentication failed during {'re-authentication' if reauthenticating else 'authentication'} due to "
            f"invalid credentials with SASL mechanism {mechanism}")


def encode_response(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    payload = response_header(correlation_id, response_is_flexible(api_key, version)) + \
        APIS[api_key].response.build(version, body)
    return len(payload).to_bytes(4, "big") + payload


def answer_sasl_outside_authentication(ctx: "RequestContext") -> None:
    """SaslHandshake or SaslAuthenticate on a listener without SASL, or after authentication
    without a re-authentication: ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers them."""
    key, version = ctx.header.api_key, ctx.api_version
    if key == ApiKey.SASL_HANDSHAKE:
        body: dict = {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    else:
        body = {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
                "error_message": "SaslAuthenticate request received after successful authentication"}
    ctx.send_response(encode_response(key, version, ctx.header.correlation_id, body))


class ListenerAuthentication:
    """What every connection of one SASL listener authenticates against: its mechanisms, its
    JAAS users (PLAIN), the broker's SCRAM credential cache, OAUTHBEARER's validator options,
    the injected clock and the listener's limits."""

    def __init__(self, security: "ListenerSecurity", credentials: CredentialCache, time: Time,
                 max_request_size: int) -> None:
        self.listener = security.name
        self.mechanisms = list(security.mechanisms)
        self.time = time
        self.credentials = credentials
        self.max_request_size = max_request_size
        self.max_receive_size = int(security.values["sasl.server.max.receive.size"])
        self.failed_delay_ms = int(security.values["connection.failed.authentication.delay.ms"])
        self.reauth_ms = dict(security.reauth_ms)
        plain = security.jaas.get("PLAIN")
        self.plain_users = users_from_jaas(plain.options) if plain is not None else {}
        oauth = security.jaas.get("OAUTHBEARER")
        self.oauth_options = dict(oauth.options) if oauth is not None else {}
        self.jwks = None  # KIP-768: tokens signed by an OIDC issuer's keys (JwksError at start if unreadable)
        values = security.values
        if "OAUTHBEARER" in self.mechanisms and values.get("sasl.oauthbearer.jwks.endpoint.url"):
            from .oauthbearer_jwks import JwksValidator
            self.jwks = JwksValidator(
                values["sasl.oauthbearer.jwks.endpoint.url"], now_ms=time.milliseconds,
                expected_audience=values["sasl.oauthbearer.expected.audience"],
                expected_issuer=values["sasl.oauthbearer.expected.issuer"],
                sub_claim=values["sasl.oauthbearer.sub.claim.name"],
                scope_claim=values["sasl.oauthbearer.scope.claim.name"],
                clock_skew_s=values["sasl.oauthbearer.clock.skew.seconds"],
                refresh_ms=values["sasl.oauthbearer.jwks.endpoint.refresh.ms"])

    def authenticator(self, conn: "KafkaConnection") -> "SaslServerAuthenticator":
        return SaslServerAuthenticator(conn, self)

    def new_mechanism(self, name: str) -> SaslServerMechanism:
        if name == "PLAIN":
            return PlainServer(self.plain_users)
        if name == "OAUTHBEARER":
            return OAuthBearerServer(self.oauth_options, self.time.milliseconds,
                                     self.jwks.validate if self.jwks is not None else None)
        return ScramServer(name, self.credentials)


class SaslServerAuthenticator:
    __slots__ = ("conn", "auth", "state", "mechanism", "server", "handshake_version", "session_expiry_ns",
                 "reauthenticating", "_close_timer", "supports_reauth")

    def __init__(self, conn: "KafkaConnection", auth: ListenerAuthentication) -> None:
        self.conn = conn
        self.auth = auth
        self.state = INITIAL
        self.mechanism: str | None = None
        self.server: SaslServerMechanism | None = None
        self.handshake_version = 1
        self.session_expiry_ns: int | None = None
        self.reauthenticating = False
        self.supports_reauth = False
        self._close_timer: TimerHandle | None = None
        conn.framer.max_size = auth.max_receive_size

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    # -- requests --------------------------------------------------------------------------
    def handle(self, ctx: "RequestContext") -> None:
        state = self.state
        key = ctx.header.api_key
        if state == COMPLETE:
            if key == ApiKey.SASL_HANDSHAKE:
                self._begin_reauthentication(ctx)
                return
            expiry = self.session_expiry_ns
            if expiry is not None and self.auth.time.nanoseconds() >= expiry:
                ctx.close_connection(f"its authenticated session (principal {self.conn.principal}) expired without "
                                     "re-authentication (connections.max.reauth.ms or the credential's lifetime)")
                return
            self.conn.dispatcher.handle(ctx)
            return
        if state == FAILED:
            ctx.send_no_response()  # closing: it is dropped
            return
        if state == AUTHENTICATE:
            if key != ApiKey.SASL_AUTHENTICATE:
                self._illegal_state(ctx)
                return
            self._authenticate(ctx)
            return
        # INITIAL or HANDSHAKE (ApiVersions seen): before the handshake
        if key not in _PRE_HANDSHAKE:
            api = APIS.get(key)
            ctx.close_connection(f"unexpected request {api.name if api else key} before SaslHandshake on SASL listener "
                                 f"{self.auth.listener} (a client with the wrong security protocol, one without "
                                 "KIP-43 support, or no Kafka client)")
            return
        if key == ApiKey.API_VERSIONS:
            if state != INITIAL:
                ctx.close_connection("a second ApiVersions request during SASL authentication")
                return
            self.state = HANDSHAKE
            self.conn.dispatcher.handle(ctx)
            return
        self._handshake(ctx)

    def _parse(self, ctx: "RequestContext") -> Any:
        api = APIS[ctx.header.api_key]
        if not api.supports(ctx.api_version):
            ctx.close_connection(f"unsupported version {ctx.api_version} of {api.name} during SASL authentication")
            return None
        try:
            return api.request.parse(ctx.api_version, ctx.frame, ctx.body_offset)
        except SchemaError as exc:
            ctx.close_connection(f"malformed {api.name} during SASL authentication: {exc}")
            return None

    def _handshake(self, ctx: "RequestContext") -> None:
        request = self._parse(ctx)
        if request is None:
            return
        mechanism = request.mechanism or ""
        version = ctx.api_version
        body = {"error_code": 0, "mechanisms": self.auth.mechanisms}
        if mechanism not in self.auth.mechanisms:
            body["error_code"] = ErrorCode.UNSUPPORTED_SASL_MECHANISM
            self._fail(ctx, encode_response(ApiKey.SASL_HANDSHAKE, version, ctx.header.correlation_id, body),
                       f"unsupported SASL mechanism {mechanism!r} (enabled: {', '.join(self.auth.mechanisms)})")
            return
        ctx.send_response(encode_response(ApiKey.SASL_HANDSHAKE, version, ctx.header.correlation_id, body))
        self.mechanism = mechanism
        self.server = self.auth.new_mechanism(mechanism)
        self.handshake_version = version
        self.state = AUTHENTICATE
        if version == 0:
            RawTokens(self).install()

    def _begin_reauthentication(self, ctx: "RequestContext") -> None:
        request = self._parse(ctx)
        if request is None:
            return
        mechanism = request.mechanism or ""
        version = ctx.api_version
        if version == 0:
            ctx.close_connection("re-authentication needs SaslHandshake v1+")
            return
        body = {"error_code": 0, "mechanisms": self.auth.mechanisms}
        if mechanism not in self.auth.mechanisms or mechanism != self.mechanism:
            body["error_code"] = ErrorCode.UNSUPPORTED_SASL_MECHANISM
            self.reauthenticating = True
            self._fail(ctx, encode_response(ApiKey.SASL_HANDSHAKE, version, ctx.header.correlation_id, body),
                       f"SASL mechanism {mechanism!r} requested by client is not supported for re-authentication "
                       f"of mechanism {self.mechanism!r}")
            return
        ctx.send_response(encode_response(ApiKey.SASL_HANDSHAKE, version, ctx.header.correlation_id, body))
        self.server = self.auth.new_mechanism(mechanism)
        self.reauthenticating = True
        self.state = AUTHENTICATE

    def _illegal_state(self, ctx: "RequestContext") -> None:
        api = APIS.get(ctx.header.api_key)
        frame = None
        if api is not None and api.supports(ctx.api_version):
            try:
                request = api.request.parse(ctx.api_version, ctx.frame, ctx.body_offset)
                body = error_response_body(api, ctx.api_version, request, ErrorCode.ILLEGAL_SASL_STATE,
                                           f"Unexpected Kafka request of type {api.name} during SASL authentication.")
                frame = encode_response(api.key, ctx.api_version, ctx.header.correlation_id, body)
            except (SchemaError, ValueError, KeyError, TypeError):
                frame = None
        self._fail(ctx, frame, f"unexpected request {api.name if api else ctx.header.api_key} during SASL "
                               "authentication (ILLEGAL_SASL_STATE)")

    def _authenticate(self, ctx: "RequestContext") -> None:
        request = self._parse(ctx)
        if request is None:
            return
        version = ctx.api_version
        if version > 0:
            self.supports_reauth = True
        correlation_id = ctx.header.correlation_id
        try:
            answer = self.evaluate(bytes(request.auth_bytes))
        except AuthenticationFailed as exc:
            assert self.mechanism is not None
            message = exc.client_message or failure_message(self.mechanism, self.reauthenticating)
            body = {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": message,
                    "auth_bytes": b"", "session_lifetime_ms": 0}
            self._fail(ctx, encode_response(ApiKey.SASL_AUTHENTICATE, version, correlation_id, body), str(exc))
            return
        lifetime = self._session_lifetime_ms() if self.state == COMPLETE else 0
        body = {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime_ms": lifetime}
        ctx.send_response(encode_response(ApiKey.SASL_AUTHENTICATE, version, correlation_id, body))

    # -- the exchange ----------------------------------------------------------------------
    def evaluate(self, token: bytes) -> bytes:
        """The mechanism's answer to ``token``; on completion the connection is authenticated
        (AuthenticationFailed otherwise)."""
        server = self.server
        assert server is not None
        answer = server.evaluate(token)
        if server.complete:
            assert server.authorization_id is not None
            principal = KafkaPrincipal.user(server.authorization_id)
            conn = self.conn
            if self.reauthenticating and principal != conn.principal:
                raise AuthenticationFailed(
                    f"re-authentication as {principal} of a session of {conn.principal}",
                    f"Cannot change principals during re-authentication from {conn.principal.principal_type}."
                    f"{conn.principal.name}: {principal.principal_type}.{principal.name}")
            conn.principal = principal
            self.state = COMPLETE
            conn.framer.max_size = self.auth.max_request_size
            stats = conn.lstats
            if stats is not None:
                if self.reauthenticating:
                    stats.reauth_succeeded += 1
                else:
                    stats.auth_succeeded += 1
            log.debug("%s authenticated as %s with %s on listener %s", conn.peer, principal, self.mechanism,
                      self.auth.listener)
        return answer

    def _session_lifetime_ms(self) -> int:
        """KIP-368: the least of connections.max.reauth.ms and the credential's remaining
        lifetime (0: no limit); the session ends that long from now on the injected clock."""
        server = self.server
        assert server is not None and self.mechanism is not None
        time = self.auth.time
        max_reauth = self.auth.reauth_ms.get(self.mechanism, 0) or 0
        expiry = server.credential_expiry_ms
        if expiry is None and max_reauth <= 0:
            self.session_expiry_ns = None
            return 0
        remaining = max(0, expiry - time.milliseconds()) if expiry is not None else None
        lifetime = remaining if max_reauth <= 0 else max_reauth if remaining is None else min(remaining, max_reauth)
        assert lifetime is not None
        self.session_expiry_ns = time.nanoseconds() + lifetime * 1_000_000
        return lifetime

    # -- failure ---------------------------------------------------------------------------
    def _fail(self, ctx: "RequestContext", response: bytes | None, reason: str) -> None:
        """Answer ``response`` (if any) and close, both after connection.failed.authentication.delay.ms."""
        self.fail(reason, lambda: ctx.send_response(response) if response is not None else ctx.send_no_response(),
                  ctx.on_cancel)

    def fail(self, reason: str, answer: Callable[[], None] | None = None,
             on_cancel: Callable[[Callable[[], object]], None] | None = None) -> None:
        conn = self.conn
        if self.state == FAILED or conn.closed:
            return
        self.state = FAILED
        if conn.lstats is not None:
            conn.lstats.auth_failed += 1
        log.info("failed %s of %s on listener %s%s: %s", "re-authentication" if self.reauthenticating else
                 "authentication", conn.peer, self.auth.listener, f" ({self.mechanism})" if self.mechanism else "",
                 reason)
        conn._max_inflight = 0  # flow control keeps reading paused from now on
        conn._update_reading()

        def close() -> None:
            self._close_timer = None
            if conn.closed:
                return
            if answer is not None:
                answer()
            conn.close()

        # Even without a delay, after the read being processed (its responses are written first).
        self._close_timer = timer = self.auth.time.schedule(max(0, self.auth.failed_delay_ms), close)
        if on_cancel is not None:
            on_cancel(timer.cancel)

    def connection_closed(self) -> None:
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None


class RawTokens:
    """SaslHandshake v0 (KIP-43): the mechanism's tokens come and go as bare size-prefixed
    frames, without request headers. While they do, the connection's frame processing is
    this object's; it gives it back once the exchange completes."""

    def __init__(self, authenticator: SaslServerAuthenticator) -> None:
        self.authenticator = authenticator

    def install(self) -> None:
        self.authenticator.conn._process = self.process  # type: ignore[method-assign]

    def process(self, frame: bytearray) -> None:
        a = self.authenticator
        conn = a.conn
        if a.state != AUTHENTICATE:
            return
        try:
            answer = a.evaluate(bytes(frame))
        except AuthenticationFailed as exc:
            a.fail(str(exc))  # v0 has no way to say why: the connection closes
            return
        if a.state == COMPLETE:
            del conn._process  # back to requests with headers
        if conn.transport is not None and not conn.closed:  # even an empty token is answered, as Kafka does
            conn.transport.write(len(answer).to_bytes(4, "big") + answer)
