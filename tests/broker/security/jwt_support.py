"""Test support: an OIDC issuer of our own (RSA and EC keys, a JWKS file, signed tokens)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _int(n: int) -> str:
    return b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


class Issuer:
    def __init__(self) -> None:
        self.keys: dict[str, object] = {}

    def add_rsa(self, kid: str) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def add_ec(self, kid: str) -> None:
        self.keys[kid] = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> str:
        out = []
        for kid, key in self.keys.items():
            if isinstance(key, rsa.RSAPrivateKey):
                n = key.public_key().public_numbers()
                out.append({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": _int(n.n), "e": _int(n.e)})
            else:
                n = key.public_key().public_numbers()
                out.append({"kty": "EC", "kid": kid, "crv": "P-256", "x": _int(n.x), "y": _int(n.y)})
        return json.dumps({"keys": out})

    def write(self, path: Path) -> str:
        path.write_text(self.jwks())
        return path.as_uri()

    def token(self, kid: str, claims: dict, alg: str | None = None) -> str:
        key = self.keys[kid]
        alg = alg or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        head = b64(json.dumps({"alg": alg, "kid": kid, "typ": "JWT"}).encode())
        body = b64(json.dumps(claims).encode())
        signed = f"{head}.{body}".encode()
        if isinstance(key, rsa.RSAPrivateKey):
            sig = key.sign(signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = utils.decode_dss_signature(key.sign(signed, ec.ECDSA(hashes.SHA256())))
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{head}.{body}.{b64(sig)}"
