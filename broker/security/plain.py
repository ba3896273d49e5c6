"""SASL/PLAIN on the server (RFC 4616, Kafka's PlainSaslServer): one message,
``[authzid] NUL authcid NUL passwd`` in UTF-8, checked against the listener's JAAS users
(``user_<name>="<password>"`` in ``listener.name.<l>.plain.sasl.jaas.config``).

The password is compared in constant time, through SHA-256 digests of equal length, and an
unknown user is compared against a random digest: a wrong password and an unknown user take
the same time and get the same answer. An authzid other than the user is refused, as Kafka
refuses it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Mapping

from .authenticator import AuthenticationFailed, SaslServerMechanism

_UNKNOWN_USER = hashlib.sha256(secrets.token_bytes(32)).digest()


def users_from_jaas(options: Mapping[str, str]) -> dict[str, bytes]:
    """``user_<name>`` options -> name -> SHA-256 of the password."""
    return {k[5:]: hashlib.sha256(v.encode("utf-8")).digest() for k, v in options.items() if k.startswith("user_")}


class PlainServer(SaslServerMechanism):
    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, bytes]) -> None:
        super().__init__()
        self.users = users

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("PLAIN: a message after the exchange completed")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("PLAIN: invalid message format (expected 3 NUL-separated fields)")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN: the message is not UTF-8") from None
        if not username:
            raise AuthenticationFailed("PLAIN: empty username")
        expected = self.users.get(username)
        ok = hmac.compare_digest(hashlib.sha256(password.encode("utf-8")).digest(),
                                 expected if expected is not None else _UNKNOWN_USER)
        if not ok or expected is None:
            raise AuthenticationFailed(f"PLAIN: invalid username or password (user {username!r})")
        if authzid and authzid != username:
            raise AuthenticationFailed(f"PLAIN: authorization id {authzid!r} differs from the username {username!r}",
                                       "Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self.authorization_id = username
        self.complete = True
        return b""
