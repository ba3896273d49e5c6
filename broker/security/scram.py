"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 on the server (RFC 5802/7677, Kafka's
ScramSaslServer and KIP-84), reading credentials from the broker's ``CredentialCache``.

1. client-first ``n,[a=<authzid>],n=<user>,r=<client nonce>[,extensions]``: only the ``n``
   channel-binding flag (no channel binding, as Kafka), an authzid equal to the user, no
   extension (``tokenauth``: delegation tokens are not implemented). The answer is
   server-first ``r=<client nonce><server nonce>,s=<salt>,i=<iterations>`` from the user's
   credential; the server nonce comes from ``secrets``.
2. client-final ``c=<base64 of the gs2 header>,r=<nonce>,p=<proof>``: the channel binding
   must repeat the first message's header (``biws`` for ``n,,``), the nonce must be the
   combined one (or the client nonce followed by it, as librdkafka 2.0 sends it), and
   H(proof XOR HMAC(StoredKey, AuthMessage)) must be StoredKey. The answer is server-final ``v=<HMAC(ServerKey, AuthMessage)>``.

An unknown user is answered from a fake credential (a salt derived from the user name under
a per-process secret, so that asking twice gives the same salt, and random keys): the same
messages, the same work, and a failure at step 2 exactly as a wrong password fails. Nothing
in the answers or their timing tells whether the user exists.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Callable

from protocol.client.sasl import scram_attributes, scram_unescape

from .authenticator import AuthenticationFailed, SaslServerMechanism
from .credentials import MECHANISMS, CredentialCache, ScramCredential

_FAKE_SECRET = secrets.token_bytes(32)
_FAKE_ITERATIONS = 4096


def _fake_credential(mechanism: str, user: str) -> ScramCredential:
    hash_name = MECHANISMS[mechanism].hash_name
    seed = hmac.digest(_FAKE_SECRET, f"{mechanism}\0{user}".encode("utf-8"), "sha512")
    size = hashlib.new(hash_name).digest_size
    return ScramCredential(seed[:32], secrets.token_bytes(size), secrets.token_bytes(size), _FAKE_ITERATIONS)


class ScramServer(SaslServerMechanism):
    def __init__(self, mechanism: str, credentials: CredentialCache,
                 server_nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        super().__init__()
        self.server_nonce = server_nonce
        if mechanism not in MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self.hash_name = MECHANISMS[mechanism].hash_name
        self.credentials = credentials
        self._state = 0
        self._user = ""
        self._known = False
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._client_nonce = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"{self.mechanism}: the message is not UTF-8") from None
        if self._state == 0:
            return self._server_first_message(text)
        if self._state == 1:
            return self._server_final_message(text)
        raise AuthenticationFailed(f"{self.mechanism}: a message after the exchange completed")

    def _server_first_message(self, text: str) -> bytes:
        flag, sep, rest = text.partition(",")
        authz, sep2, bare = rest.partition(",")
        if not sep or not sep2 or flag != "n":
            raise AuthenticationFailed(f"{self.mechanism}: invalid client first message (gs2 header "
                                       f"{flag!r}; only 'n', no channel binding)")
        if authz and not authz.startswith("a="):
            raise AuthenticationFailed(f"{self.mechanism}: invalid authorization id field {authz!r}")
        try:
            attrs = scram_attributes(bare)
            user = scram_unescape(attrs.get("n", ""))
            authzid = scram_unescape(authz[2:]) if authz else ""
        except ValueError as exc:
            raise AuthenticationFailed(f"{self.mechanism}: invalid client first message: {exc}") from None
        nonce = attrs.get("r", "")
        if list(attrs)[:2] != ["n", "r"] or not user or not nonce or any(ord(c) < 0x21 or c == "," for c in nonce):
            raise AuthenticationFailed(f"{self.mechanism}: invalid client first message")
        extensions = [k for k in attrs if k not in ("n", "r")]
        if extensions:
            raise AuthenticationFailed(f"{self.mechanism}: unsupported extensions {extensions} (delegation tokens "
                                       "are not implemented)")
        if authzid and authzid != user:
            raise AuthenticationFailed(f"{self.mechanism}: authorization id {authzid!r} differs from the user "
                                       f"{user!r}", "Authentication failed: Client requested an authorization id "
                                       "that is different from username")
        credential = self.credentials.get(self.mechanism, user)
        self._known = credential is not None
        if credential is None:
            credential = _fake_credential(self.mechanism, user)
        self._user, self._credential = user, credential
        self._gs2_header = f"{flag},{authz},"
        self._client_first_bare = bare
        self._client_nonce = nonce
        self._nonce = nonce + self.server_nonce()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = 1
        return self._server_first.encode("utf-8")

    def _server_final_message(self, text: str) -> bytes:
        credential = self._credential
        assert credential is not None
        try:
            attrs = scram_attributes(text)
        except ValueError as exc:
            raise AuthenticationFailed(f"{self.mechanism}: invalid client final message: {exc}") from None
        binding, nonce, proof_b64 = attrs.get("c"), attrs.get("r"), attrs.get("p")
        if binding is None or nonce is None or proof_b64 is None or list(attrs)[:2] != ["c", "r"] \
                or list(attrs)[-1] != "p":
            raise AuthenticationFailed(f"{self.mechanism}: invalid client final message")
        expected_binding = base64.b64encode(self._gs2_header.encode("utf-8")).decode()
        if not hmac.compare_digest(binding.encode(), expected_binding.encode()):
            raise AuthenticationFailed(f"{self.mechanism}: channel binding {binding!r} does not match "
                                       f"the first message's header ({expected_binding!r})")
        # The combined nonce, or (librdkafka before 2.x's way, which Kafka's ScramSaslServer long
        # accepted with endsWith) the client nonce followed by the combined one: kcat 1.7 sends it.
        legacy = self._client_nonce + self._nonce
        if not (hmac.compare_digest(nonce.encode("utf-8"), self._nonce.encode("utf-8"))
                or hmac.compare_digest(nonce.encode("utf-8"), legacy.encode("utf-8"))):
            raise AuthenticationFailed(f"{self.mechanism}: the nonce is not the combined one")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthenticationFailed(f"{self.mechanism}: malformed proof") from None
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        signature = hmac.digest(credential.stored_key, auth_message, self.hash_name)
        ok = len(proof) == len(signature)
        client_key = bytes(a ^ b for a, b in zip(proof, signature)) if ok else signature
        ok = hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(), credential.stored_key) and ok
        server_signature = hmac.digest(credential.server_key, auth_message, self.hash_name)
        if not ok or not self._known:
            raise AuthenticationFailed(f"{self.mechanism}: invalid credentials for user {self._user!r}"
                                       f"{'' if self._known else ' (no such user)'}")
        self._state = 2
        self.authorization_id = self._user
        self.complete = True
        return f"v={base64.b64encode(server_signature).decode()}".encode("utf-8")
