"""SCRAM credentials (RFC 5802, Kafka's KIP-84/KIP-554) and the broker's cache of them.

A credential never holds the password: only the salt, the iteration count and the two keys
derived from them (StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
HMAC(SaltedPassword, "Server Key")), which is what Kafka's UserScramCredentialRecord stores.
The controller keeps them in its metadata log; every broker replays them into one
``CredentialCache``, which the SCRAM authenticator reads.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import NamedTuple


class ScramMechanism(NamedTuple):
    mechanism_name: str  # the SASL name, SCRAM-SHA-256
    type_id: int  # Kafka's ScramMechanism type (UserScramCredentialRecord.mechanism, KIP-554)
    hash_name: str  # hashlib's name
    min_iterations: int
    max_iterations: int


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256", 4096, 16384)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512", 4096, 16384)
MECHANISMS: dict[str, ScramMechanism] = {m.mechanism_name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE: dict[int, ScramMechanism] = {m.type_id: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


class ScramCredential(NamedTuple):
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(): PBKDF2 with HMAC of the mechanism's hash (SASLprep is left to the client,
    as Kafka's ScramFormatter does)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def credential_from_salted_password(mechanism: ScramMechanism, salted: bytes, salt: bytes,
                                    iterations: int) -> ScramCredential:
    client_key = hmac.digest(salted, b"Client Key", mechanism.hash_name)
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", mechanism.hash_name)
    return ScramCredential(salt, stored_key, server_key, iterations)


def make_credential(mechanism: ScramMechanism, password: str | bytes, iterations: int = 4096,
                    salt: bytes | None = None) -> ScramCredential:
    """A credential for ``password``, with a fresh random salt unless one is given."""
    if isinstance(password, str):
        password = password.encode("utf-8")
    if salt is None:
        salt = secrets.token_bytes(32)
    return credential_from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations),
                                           salt, iterations)


class CredentialCache:
    """mechanism name -> user name -> ScramCredential. Filled by replaying the controller's
    records (or by hand in tests); read by every SCRAM authentication."""

    def __init__(self) -> None:
        self._by_mechanism: dict[str, dict[str, ScramCredential]] = {name: {} for name in MECHANISMS}

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        users = self._by_mechanism.get(mechanism)
        return None if users is None else users.get(user)

    def put(self, mechanism: str, user: str, credential: ScramCredential) -> None:
        self._by_mechanism[mechanism][user] = credential

    def remove(self, mechanism: str, user: str) -> None:
        users = self._by_mechanism.get(mechanism)
        if users is not None:
            users.pop(user, None)

    def users(self, mechanism: str) -> dict[str, ScramCredential]:
        return dict(self._by_mechanism.get(mechanism, {}))

    def clear(self) -> None:
        for users in self._by_mechanism.values():
            users.clear()
