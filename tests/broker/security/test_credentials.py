"""SCRAM credentials against RFC 7677's SCRAM-SHA-256 example and RFC 5802's definitions."""

from __future__ import annotations

import base64
import hashlib
import hmac

from broker.security.credentials import (MECHANISMS_BY_TYPE, SCRAM_SHA_256, SCRAM_SHA_512, CredentialCache,
                                         make_credential)
from broker.security.principal import ANONYMOUS, KafkaPrincipal

# RFC 7677 section 3: user "user", password "pencil".
CLIENT_FIRST_BARE = "n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL_NO_PROOF = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_PROOF = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_SIGNATURE = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_example():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = make_credential(SCRAM_SHA_256, "pencil", 4096, salt)
    auth_message = f"{CLIENT_FIRST_BARE},{SERVER_FIRST},{CLIENT_FINAL_NO_PROOF}".encode()
    # The server's check: ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage); H(ClientKey) == StoredKey.
    client_signature = hmac.digest(cred.stored_key, auth_message, "sha256")
    proof = base64.b64decode(CLIENT_PROOF)
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
    assert hashlib.sha256(client_key).digest() == cred.stored_key
    assert base64.b64encode(hmac.digest(cred.server_key, auth_message, "sha256")).decode() == SERVER_SIGNATURE
    assert cred.iterations == 4096 and cred.salt == salt


def test_fresh_salts_and_the_cache():
    a = make_credential(SCRAM_SHA_512, "secret")
    b = make_credential(SCRAM_SHA_512, "secret")
    assert a.salt != b.salt and a.stored_key != b.stored_key and len(a.stored_key) == 64
    cache = CredentialCache()
    cache.put("SCRAM-SHA-512", "alice", a)
    assert cache.get("SCRAM-SHA-512", "alice") == a
    assert cache.get("SCRAM-SHA-256", "alice") is None and cache.get("PLAIN", "alice") is None
    cache.remove("SCRAM-SHA-512", "alice")
    assert cache.get("SCRAM-SHA-512", "alice") is None
    assert MECHANISMS_BY_TYPE[1] is SCRAM_SHA_256 and MECHANISMS_BY_TYPE[2] is SCRAM_SHA_512


def test_principal_text():
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert KafkaPrincipal.parse("User:CN=a,O=b:c") == KafkaPrincipal("User", "CN=a,O=b:c")
    assert KafkaPrincipal.user("alice") == KafkaPrincipal.parse("User:alice")
