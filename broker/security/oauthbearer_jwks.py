"""OAUTHBEARER tokens signed by an OIDC issuer (KIP-768's broker-side validator, Kafka's
BrokerJwtValidator), with keys from a JWKS file.

Keys: ``sasl.oauthbearer.jwks.endpoint.url`` — a ``file://`` URL of a JSON Web Key Set (RSA and
EC keys; an ``https://`` endpoint is not fetched by kbroker: refused at start). The file is read
at start, again every ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` (3600000) when it changed,
and at once (at most once a second) when a token names a key id it does not hold, so a key
rotated into the file is picked up without a restart.

A token is a compact JWS; checked as Kafka checks it: the header's ``alg`` is RS256/384/512,
PS256/384/512 or ES256/384/512 (never ``none``), its ``kid`` names a key of the set (a set of
one key needs no ``kid``), the signature verifies; ``exp`` exists and has not passed, ``iat``
(if present) is not in the future, beyond ``sasl.oauthbearer.clock.skew.seconds`` (30);
``iss`` equals ``sasl.oauthbearer.expected.issuer`` and ``aud`` holds one of
``sasl.oauthbearer.expected.audience`` when those are set; the principal is the
``sasl.oauthbearer.sub.claim.name`` claim (sub), the scope the
``sasl.oauthbearer.scope.claim.name`` claim (scope). The clock is the injected one.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import os
from typing import Any, Callable
from urllib.parse import unquote, urlparse

from .oauthbearer import InvalidToken

log = logging.getLogger("kbroker.security")

_HASHES = {"256": "SHA256", "384": "SHA384", "512": "SHA512"}
_CURVES = {"P-256": "SECP256R1", "P-384": "SECP384R1", "P-521": "SECP521R1"}
_RELOAD_ON_UNKNOWN_KID_MS = 1000


class JwksError(ValueError):
    pass


def jwks_path(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise JwksError(f"{url}: only file:// URLs are read by kbroker (an HTTPS endpoint is not fetched)")
    return unquote(parsed.path)


def _b64url(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError) as exc:
        raise InvalidToken(f"not base64url: {exc}") from None


def _int(value: str) -> int:
    return int.from_bytes(_b64url(value), "big")


def load_jwks(text: str) -> dict[str | None, Any]:
    """kid -> public key (cryptography) of every RSA and EC key of a JWK set."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        keys = json.loads(text)["keys"]
    except (ValueError, KeyError, TypeError) as exc:
        raise JwksError(f"not a JSON Web Key Set: {exc}") from None
    out: dict[str | None, Any] = {}
    for jwk in keys:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        try:
            if jwk.get("kty") == "RSA":
                key: Any = rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
            elif jwk.get("kty") == "EC" and jwk.get("crv") in _CURVES:
                curve = getattr(ec, _CURVES[jwk["crv"]])()
                key = ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), curve).public_key()
            else:
                continue
        except (KeyError, ValueError, InvalidToken) as exc:
            raise JwksError(f"key {jwk.get('kid')!r}: {exc}") from None
        out[jwk.get("kid")] = key
    if not out:
        raise JwksError("the JSON Web Key Set holds no RSA or EC signing key")
    return out


class JwksValidator:
    def __init__(self, url: str, *, now_ms: Callable[[], int], expected_audience: list[str] | None = None,
                 expected_issuer: str | None = None, sub_claim: str = "sub", scope_claim: str = "scope",
                 clock_skew_s: int = 30, refresh_ms: int = 3600000) -> None:
        self.path = jwks_path(url)
        self.now_ms = now_ms
        self.expected_audience = list(expected_audience or [])
        self.expected_issuer = expected_issuer
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.clock_skew_ms = clock_skew_s * 1000
        self.refresh_ms = refresh_ms
        self.keys: dict[str | None, Any] = {}
        self._mtime = 0.0
        self._loaded_ms = 0
        self.reload(force=True)

    def reload(self, force: bool = False) -> None:
        try:
            mtime = os.stat(self.path).st_mtime
            if not force and mtime == self._mtime:
                self._loaded_ms = self.now_ms()
                return
            with open(self.path, encoding="utf-8") as f:
                keys = load_jwks(f.read())
        except (OSError, JwksError) as exc:
            if force and not self.keys:
                raise JwksError(f"sasl.oauthbearer.jwks.endpoint.url: {self.path}: {exc}") from None
            log.error("OAUTHBEARER key set %s not reloaded: %s", self.path, exc)
            self._loaded_ms = self.now_ms()
            return
        self.keys, self._mtime, self._loaded_ms = keys, mtime, self.now_ms()
        log.info("OAUTHBEARER key set %s: %d key(s)", self.path, len(keys))

    def _key(self, kid: str | None) -> Any:
        if self.now_ms() - self._loaded_ms >= self.refresh_ms:
            self.reload()
        if kid is None and len(self.keys) == 1:
            return next(iter(self.keys.values()))
        key = self.keys.get(kid)
        if key is None and self.now_ms() - self._loaded_ms >= _RELOAD_ON_UNKNOWN_KID_MS:
            self.reload()  # a key rotated into the set
            key = self.keys.get(kid)
        if key is None:
            raise InvalidToken(f"no key {kid!r} in the key set")
        return key

    def validate(self, token: str) -> tuple[str, int]:
        """(principal, expiry ms) of a valid token, or InvalidToken."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken(f"a JWS has 3 parts, this one {len(parts)}")
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidToken(f"the header or payload is not JSON: {exc}") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise InvalidToken("the header and the payload are JSON objects")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg[:2] not in ("RS", "PS", "ES") or alg[2:] not in _HASHES:
            raise InvalidToken(f"algorithm {alg!r} is not accepted (RS/PS/ES 256/384/512)")
        key = self._key(header.get("kid"))
        digest = getattr(hashes, _HASHES[alg[2:]])()
        signed, signature = f"{parts[0]}.{parts[1]}".encode("ascii"), _b64url(parts[2])
        try:
            if alg[:2] in ("RS", "PS"):
                if not isinstance(key, rsa.RSAPublicKey):
                    raise InvalidToken(f"{alg} needs an RSA key")
                pad = (padding.PKCS1v15() if alg[:2] == "RS"
                       else padding.PSS(mgf=padding.MGF1(digest), salt_length=padding.PSS.DIGEST_LENGTH))
                key.verify(signature, signed, pad, digest)
            else:
                if not isinstance(key, ec.EllipticCurvePublicKey):
                    raise InvalidToken(f"{alg} needs an EC key")
                half = len(signature) // 2
                der = utils.encode_dss_signature(int.from_bytes(signature[:half], "big"),
                                                 int.from_bytes(signature[half:], "big"))
                key.verify(der, signed, ec.ECDSA(digest))
        except InvalidSignature:
            raise InvalidToken("the signature does not verify") from None
        now = self.now_ms()
        exp, iat = claims.get("exp"), claims.get("iat")
        for name, value in (("exp", exp), ("iat", iat)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise InvalidToken(f"the {name} claim is not a number")
        if exp is None:
            raise InvalidToken("Required claim missing: exp")
        if now - self.clock_skew_ms >= exp * 1000:
            raise InvalidToken("the token has expired")
        if iat is not None and iat * 1000 > now + self.clock_skew_ms:
            raise InvalidToken("the token was issued in the future")
        if self.expected_issuer is not None and claims.get("iss") != self.expected_issuer:
            raise InvalidToken(f"issuer {claims.get('iss')!r} is not {self.expected_issuer!r}")
        if self.expected_audience:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not set(self.expected_audience) & {a for a in auds if isinstance(a, str)}:
                raise InvalidToken(f"audience {aud!r} is none of {self.expected_audience}")
        principal = claims.get(self.sub_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"Required claim missing: {self.sub_claim}")
        return principal, int(exp * 1000)
