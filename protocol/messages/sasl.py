"""SaslHandshake (17) and SaslAuthenticate (36), KIP-43/KIP-152/KIP-368.

SaslHandshake v0 is followed by raw SASL tokens (size-prefixed, no Kafka header); v1 by
SaslAuthenticate requests carrying them. SaslAuthenticate v1+ answers the session's lifetime
(KIP-368: the client must re-authenticate before it ends).
"""

from ..schema import Field as F, Message

SASL_HANDSHAKE_REQUEST = Message("SaslHandshakeRequest", 17, "0-1", "none", [
    F("mechanism", "string"),
])

SASL_HANDSHAKE_RESPONSE = Message("SaslHandshakeResponse", 17, "0-1", "none", [
    F("error_code", "int16"),
    F("mechanisms", "[]string"),
])

SASL_AUTHENTICATE_REQUEST = Message("SaslAuthenticateRequest", 36, "0-2", "2+", [
    F("auth_bytes", "bytes"),
])

SASL_AUTHENTICATE_RESPONSE = Message("SaslAuthenticateResponse", 36, "0-2", "2+", [
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
    F("auth_bytes", "bytes"),
    F("session_lifetime_ms", "int64", "1+", default=0),
])
