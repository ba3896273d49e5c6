"""SASL/OAUTHBEARER on the server (RFC 7628, KIP-255) with Kafka's unsecured JWS validator
(OAuthBearerUnsecuredValidatorCallbackHandler), for development.

The client's message is ``n,[a=<authzid>],`` then ``\\x01auth=Bearer <token>\\x01``, optional
``key=value\\x01`` extensions and a final ``\\x01``. The token is an unsigned JWS
(``{"alg":"none"}``, an empty signature) whose claims are checked as Kafka checks them, on the
injected clock: the principal claim (``unsecuredValidatorPrincipalClaimName``, default
``sub``) is a non-empty string; ``iat``, if present, is not after now plus
``unsecuredValidatorAllowableClockSkewMs`` (default 0); ``exp`` exists and now minus the skew
is before it; ``exp`` is after ``iat``; the scope claim (``unsecuredValidatorScopeClaimName``,
default ``scope``: a space-separated string or a list) holds every item of
``unsecuredValidatorRequiredScope`` (space-separated). The session ends at ``exp``
(KIP-368: the client must re-authenticate before).

A token that fails is answered, as RFC 7628 and Kafka do, with a JSON error
(``{"status":"invalid_token"}``, or ``insufficient_scope`` with the scope); the client
answers with a lone ``\\x01`` and the exchange fails with that JSON as the message.

With ``sasl.oauthbearer.jwks.endpoint.url`` set, tokens are instead checked as an OIDC issuer's
signed tokens (KIP-768; broker/security/oauthbearer_jwks.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Callable, Mapping

from .authenticator import AuthenticationFailed, SaslServerMechanism

_MESSAGE = re.compile(r"^n,(a=([^,]*))?,\x01(.*)\x01\x01$", re.DOTALL)
_BEARER = re.compile(r"^[Bb][Ee][Aa][Rr][Ee][Rr] +([-._~+/0-9A-Za-z]+=*) *$")
_EXTENSION_KEY = re.compile(r"^[A-Za-z]+$")


class InvalidToken(ValueError):
    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope


def _b64url_json(part: str, what: str) -> object:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        return json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise InvalidToken(f"the {what} is not base64url-encoded JSON: {exc}") from None


def _number(claims: dict[str, object], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidToken(f"The {name} claim had the incorrect type: {type(value).__name__}")
    return float(value)


def validate_unsecured_token(token: str, options: Mapping[str, str], now_ms: int) -> tuple[str, int]:
    """(principal name, expiry ms) of a valid unsecured JWS, or InvalidToken."""
    principal_claim = (options.get("unsecuredValidatorPrincipalClaimName") or "").strip() or "sub"
    scope_claim = (options.get("unsecuredValidatorScopeClaimName") or "").strip() or "scope"
    required_scope = (options.get("unsecuredValidatorRequiredScope") or "").split()
    skew_text = (options.get("unsecuredValidatorAllowableClockSkewMs") or "").strip() or "0"
    skew = int(skew_text)
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidToken(f"an unsecured JWS has 3 parts, this one {len(parts)}")
    if parts[2]:
        raise InvalidToken("an unsecured JWS has an empty signature")
    header = _b64url_json(parts[0], "header")
    claims = _b64url_json(parts[1], "payload")
    if not isinstance(header, dict) or header.get("alg") != "none":
        raise InvalidToken('the header of an unsecured JWS is {"alg":"none"}')
    if not isinstance(claims, dict):
        raise InvalidToken("the payload is not a JSON object")
    principal = claims.get(principal_claim)
    if principal is None:
        raise InvalidToken(f"Required claim missing: {principal_claim}")
    if not isinstance(principal, str) or not principal.strip():
        raise InvalidToken(f"The {principal_claim} claim had the incorrect type or is empty")
    iat = _number(claims, "iat")
    exp = _number(claims, "exp")
    if iat is not None and 1000 * iat > now_ms + skew:
        raise InvalidToken(f"The Issued At value ({iat} seconds) was after the indicated time ({now_ms} ms) plus "
                           f"allowable clock skew ({skew} ms)")
    if exp is None:
        raise InvalidToken("Required claim missing: exp")
    if now_ms - skew >= 1000 * exp:
        raise InvalidToken(f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was on or after "
                           f"the Expiration Time value ({exp} seconds)")
    if iat is not None and exp <= iat:
        raise InvalidToken(f"The Expiration Time time ({exp} seconds) was not after the Issued At time ({iat} seconds)")
    raw_scope = claims.get(scope_claim)
    scope = set(raw_scope.split()) if isinstance(raw_scope, str) else \
        {s for s in raw_scope if isinstance(s, str)} if isinstance(raw_scope, list) else set()
    for item in required_scope:
        if item not in scope:
            raise InvalidToken(f"The provided scope ({sorted(scope)}) was missing a required scope ({item}). All "
                               f"required scope elements: {required_scope}", scope=str(required_scope))
    return principal, int(exp * 1000)


class OAuthBearerServer(SaslServerMechanism):
    mechanism = "OAUTHBEARER"

    def __init__(self, options: Mapping[str, str], now_ms: Callable[[], int],
                 validate: Callable[[str], tuple[str, int]] | None = None) -> None:
        """``validate``: a token -> (principal, expiry ms), or InvalidToken (default: Kafka's
        unsecured validator with ``options``; oauthbearer_jwks.JwksValidator for signed tokens)."""
        super().__init__()
        self.options = options
        self.now_ms = now_ms
        self.validate = validate or (lambda token: validate_unsecured_token(token, self.options, self.now_ms()))
        self._error: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("OAUTHBEARER: a message after the exchange completed")
        if self._error is not None:
            # The client's answer to our error (RFC 7628 wants a lone %x01); either way it fails.
            raise AuthenticationFailed(f"OAUTHBEARER: invalid token: {self._error}", self._error)
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("OAUTHBEARER: the message is not UTF-8") from None
        m = _MESSAGE.match(text)
        if m is None:
            raise AuthenticationFailed("OAUTHBEARER: invalid client initial response")
        authzid = m.group(2) or ""
        auth = None
        for item in m.group(3).split("\x01"):
            key, sep, value = item.partition("=")
            if not sep:
                raise AuthenticationFailed(f"OAUTHBEARER: invalid key-value pair {item!r}")
            if key == "auth":
                auth = value
            elif not _EXTENSION_KEY.match(key):
                raise AuthenticationFailed(f"OAUTHBEARER: invalid extension name {key!r}")
        bearer = _BEARER.match(auth or "")
        if bearer is None:
            raise AuthenticationFailed("OAUTHBEARER: no 'auth=Bearer <token>' in the client initial response")
        try:
            principal, expiry_ms = self.validate(bearer.group(1))
        except InvalidToken as exc:
            status = "insufficient_scope" if exc.scope is not None else "invalid_token"
            self._error = json.dumps({"status": status, **({"scope": exc.scope} if exc.scope else {})},
                                     separators=(",", ":"))
            self.failure_reason = str(exc)
            return self._error.encode("utf-8")
        if authzid and authzid != principal:
            raise AuthenticationFailed(f"OAUTHBEARER: authorization id {authzid!r} differs from the token's "
                                       f"principal {principal!r}", "Authentication failed: Client requested an "
                                       "authorization id that is different from the token's principal name")
        self.authorization_id = principal
        self.credential_expiry_ms = expiry_ms
        self.complete = True
        return b""
