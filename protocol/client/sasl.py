"""The client side of Kafka's SASL mechanisms, sans-I/O: PLAIN (RFC 4616), SCRAM-SHA-256 and
SCRAM-SHA-512 (RFC 5802/7677, KIP-84) and OAUTHBEARER (RFC 7628, KIP-255) with Kafka's
unsecured tokens.

A mechanism gives its first message (``initial()``), then is handed each server challenge
(``evaluate(challenge)``) and answers the next message, or None when it has nothing more to
send; ``complete`` tells whether the exchange succeeded from its side (a SCRAM client checks
the server's signature). ``SaslError`` is a server that failed the exchange or could not be
trusted. ``BrokerConnection`` carries the messages in SaslAuthenticate requests.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import Callable, Mapping

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_MIN_ITERATIONS = 4096


class SaslError(Exception):
    pass


class SaslMechanism:
    name = ""
    complete = False

    def initial(self) -> bytes:
        raise NotImplementedError

    def evaluate(self, challenge: bytes) -> bytes | None:
        raise NotImplementedError

    @property
    def session_expires_ms(self) -> int | None:
        """When the credential itself expires (a token), wall-clock ms; None: it does not."""
        return None


class PlainClient(SaslMechanism):
    name = "PLAIN"

    def __init__(self, username: str, password: str, authzid: str = "") -> None:
        self.message = b"\0".join(s.encode("utf-8") for s in (authzid, username, password))

    def initial(self) -> bytes:
        self.complete = True
        return self.message

    def evaluate(self, challenge: bytes) -> bytes | None:
        return None


def scram_escape(name: str) -> str:
    """RFC 5802 saslname: ',' and '=' as =2C and =3D."""
    return name.replace("=", "=3D").replace(",", "=2C")


def scram_unescape(name: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ValueError(f"invalid escape in SCRAM name: ={code}")
            i += 3
        elif name[i] == ",":
            raise ValueError("unescaped ',' in SCRAM name")
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def scram_attributes(message: str) -> dict[str, str]:
    """``k=v,k=v`` (the value may hold '='); a repeated or malformed attribute is an error."""
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1 or key in out:
            raise ValueError(f"malformed SCRAM attribute {part!r}")
        out[key] = value
    return out


def scram_keys(hash_name: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) from a SaltedPassword."""
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    return client_key, hashlib.new(hash_name, client_key).digest(), hmac.digest(salted, b"Server Key", hash_name)


class ScramClient(SaslMechanism):
    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.name = mechanism
        self.hash_name = SCRAM_HASHES[mechanism]
        self.username = username
        self.password = password.encode("utf-8")
        self.client_nonce = nonce or secrets.token_urlsafe(24)
        self.client_first_bare = f"n={scram_escape(username)},r={self.client_nonce}"
        self._server_signature: bytes | None = None
        self._state = 0

    def initial(self) -> bytes:
        self._state = 1
        return ("n,," + self.client_first_bare).encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes | None:
        try:
            text = challenge.decode("utf-8")
            attrs = scram_attributes(text)
        except (UnicodeDecodeError, ValueError) as exc:
            raise SaslError(f"{self.name}: malformed server message: {exc}") from None
        if "e" in attrs:
            raise SaslError(f"{self.name}: the server failed the exchange: {attrs['e']}")
        if self._state == 1:
            return self._client_final(text, attrs)
        if self._state == 2:
            if self._server_signature is None or "v" not in attrs:
                raise SaslError(f"{self.name}: no server signature in the final message")
            try:
                signature = base64.b64decode(attrs["v"], validate=True)
            except ValueError:
                raise SaslError(f"{self.name}: malformed server signature") from None
            if not hmac.compare_digest(signature, self._server_signature):
                raise SaslError(f"{self.name}: the server's signature is wrong (it does not know the credential)")
            self._state = 3
            self.complete = True
            return None
        raise SaslError(f"{self.name}: unexpected server message after the exchange")

    def _client_final(self, server_first: str, attrs: dict[str, str]) -> bytes:
        nonce, salt_b64, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self.client_nonce) or len(nonce) <= len(self.client_nonce):
            raise SaslError(f"{self.name}: the server's nonce does not extend the client's")
        if salt_b64 is None or not iterations.isdigit():
            raise SaslError(f"{self.name}: the server's first message lacks the salt or the iterations")
        n = int(iterations)
        if n < SCRAM_MIN_ITERATIONS:
            raise SaslError(f"{self.name}: {n} iterations are below the minimum {SCRAM_MIN_ITERATIONS}")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except ValueError:
            raise SaslError(f"{self.name}: malformed salt") from None
        salted = hashlib.pbkdf2_hmac(self.hash_name, self.password, salt, n)
        client_key, stored_key, server_key = scram_keys(self.hash_name, salted)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.client_first_bare},{server_first},{without_proof}".encode("utf-8")
        signature = hmac.digest(stored_key, auth_message, self.hash_name)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = hmac.digest(server_key, auth_message, self.hash_name)
        self._state = 2
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode("utf-8")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


_UNSECURED_HEADER = _b64url(b'{"alg":"none"}')


def unsecured_token(options: Mapping[str, str], now_ms: int) -> tuple[str, int]:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler: an unsigned JWS (alg none) from the
    JAAS options ``unsecuredLoginStringClaim_<name>`` (``sub`` is required),
    ``unsecuredLoginNumberClaim_<name>``, ``unsecuredLoginListClaim_<name>`` (the first
    character separates the items), ``unsecuredLoginLifetimeSeconds`` (3600),
    ``unsecuredLoginPrincipalClaimName`` (sub) and ``unsecuredLoginScopeClaimName`` (scope).
    Returns (token, expiry in ms)."""
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    lifetime_s = float(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    claims: dict[str, object] = {}
    for key, value in options.items():
        if key.startswith("unsecuredLoginStringClaim_"):
            claims[key[len("unsecuredLoginStringClaim_"):]] = value
        elif key.startswith("unsecuredLoginNumberClaim_"):
            claims[key[len("unsecuredLoginNumberClaim_"):]] = float(value) if "." in value else int(value)
        elif key.startswith("unsecuredLoginListClaim_") and value:
            claims[key[len("unsecuredLoginListClaim_"):]] = [v for v in value[1:].split(value[0]) if v]
    if not isinstance(claims.get(principal_claim), str) or not claims[principal_claim]:
        raise SaslError(f"OAUTHBEARER: the JAAS option unsecuredLoginStringClaim_{principal_claim} (the principal) "
                        "is required")
    expiry_ms = now_ms + int(lifetime_s * 1000)
    claims.setdefault("iat", now_ms / 1000.0)
    claims.setdefault("exp", expiry_ms / 1000.0)
    token = f"{_UNSECURED_HEADER}.{_b64url(json.dumps(claims).encode())}."
    return token, expiry_ms


class OAuthBearerClient(SaslMechanism):
    name = "OAUTHBEARER"

    def __init__(self, token: str, expiry_ms: int | None = None, extensions: Mapping[str, str] | None = None) -> None:
        self.token = token
        self.expiry_ms = expiry_ms
        self.extensions = dict(extensions or {})
        self._sent = False

    @property
    def session_expires_ms(self) -> int | None:
        return self.expiry_ms

    def initial(self) -> bytes:
        self._sent = True
        ext = "".join(f"{k}={v}\x01" for k, v in sorted(self.extensions.items()))
        return f"n,,\x01auth=Bearer {self.token}\x01{ext}\x01".encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes | None:
        if not challenge:
            self.complete = True
            return None
        # RFC 7628: the server's error (JSON) is answered with a lone %x01, and it then fails.
        return b"\x01"


def mechanism_for(mechanism: str, username: str | None, password: str | None, jaas_options: Mapping[str, str],
                  now_ms: Callable[[], int]) -> SaslMechanism:
    """A fresh client mechanism for one exchange."""
    if mechanism == "OAUTHBEARER":
        token = jaas_options.get("kbroker.token")
        if token:
            return OAuthBearerClient(token)
        extensions = {k[len("unsecuredLoginExtension_"):]: v for k, v in jaas_options.items()
                      if k.startswith("unsecuredLoginExtension_")}
        return OAuthBearerClient(*unsecured_token(jaas_options, now_ms()), extensions=extensions)
    if username is None or password is None:
        raise SaslError(f"{mechanism}: no username and password (sasl.jaas.config, or sasl.username/sasl.password)")
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in SCRAM_HASHES:
        return ScramClient(mechanism, username, password)
    raise SaslError(f"SASL mechanism {mechanism} is not supported by kbroker's client "
                    "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)")
