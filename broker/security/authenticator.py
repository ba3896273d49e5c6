"""What every server-side SASL mechanism is (broker/security/plain.py, scram.py,
oauthbearer.py): sans-I/O, one per authentication exchange.

``evaluate(token)`` takes the client's next message and returns the server's answer (``b""``
when there is nothing to say); it raises ``AuthenticationFailed`` when the client did not
prove who it is. Once ``complete``, ``authorization_id`` names the principal (``User:<id>``)
and ``credential_expiry_ms`` (wall clock) bounds the session when the credential expires
(an OAUTHBEARER token), as Kafka's CREDENTIAL_LIFETIME_MS negotiated property does.

``AuthenticationFailed.client_message``: what the client is told. None means Kafka's fixed
message, which says nothing about whether the user exists ("Authentication failed during
authentication due to invalid credentials with SASL mechanism X"); ``log_message`` is what
the broker's log says.
"""

from __future__ import annotations


class AuthenticationFailed(Exception):
    def __init__(self, log_message: str, client_message: str | None = None) -> None:
        super().__init__(log_message)
        self.client_message = client_message


class SaslServerMechanism:
    mechanism = ""

    def __init__(self) -> None:
        self.complete = False
        self.authorization_id: str | None = None
        self.credential_expiry_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        raise NotImplementedError
