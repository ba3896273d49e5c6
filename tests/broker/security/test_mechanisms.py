"""The SASL mechanisms, both sides (protocol/client/sasl.py against broker/security/): RFC
7677's SCRAM-SHA-256 example byte for byte, wrong passwords and unknown users alike, replayed
and out-of-order messages, and Kafka's unsecured OAUTHBEARER validator on an injected clock."""

from __future__ import annotations

import base64
import json

import pytest

from broker.security.authenticator import AuthenticationFailed
from broker.security.credentials import SCRAM_SHA_256, SCRAM_SHA_512, CredentialCache, make_credential
from broker.security.oauthbearer import OAuthBearerServer, validate_unsecured_token, InvalidToken
from broker.security.plain import PlainServer, users_from_jaas
from broker.security.scram import ScramServer
from protocol.client.sasl import OAuthBearerClient, PlainClient, SaslError, ScramClient, unsecured_token
from protocol.clock import MockTime


def exchange(client, server) -> None:
    message = client.initial()
    while message is not None:
        answer = server.evaluate(message)
        message = client.evaluate(answer)
    assert client.complete and server.complete


# -- PLAIN ---------------------------------------------------------------------------------

USERS = users_from_jaas({"username": "admin", "password": "x", "user_admin": "admin-secret", "user_alice": "a"})


def test_plain_round_trip():
    server = PlainServer(USERS)
    exchange(PlainClient("admin", "admin-secret"), server)
    assert server.authorization_id == "admin"


@pytest.mark.parametrize("token", [b"\0admin\0wrong", b"\0nobody\0admin-secret", b"\0admin", b"", b"\0\0",
                                   b"\0admin\0admin-secret\0", b"\xff\0admin\0admin-secret"])
def test_plain_refusals(token):
    with pytest.raises(AuthenticationFailed) as info:
        PlainServer(USERS).evaluate(token)
    assert info.value.client_message is None  # Kafka's fixed message: nothing about the user


def test_plain_authzid_must_be_the_user():
    assert PlainServer(USERS).evaluate(b"admin\0admin\0admin-secret") == b""
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        PlainServer(USERS).evaluate(b"alice\0admin\0admin-secret")


# -- SCRAM ---------------------------------------------------------------------------------

def test_scram_sha_256_rfc7677_example():
    """RFC 7677 section 3, every message as the RFC prints it."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cache = CredentialCache()
    cache.put("SCRAM-SHA-256", "user", make_credential(SCRAM_SHA_256, "pencil", 4096, salt))
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    server = ScramServer("SCRAM-SHA-256", cache, server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert client.initial() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    client_final = client.evaluate(server_first)
    assert client_final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server_final = server.evaluate(client_final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert client.evaluate(server_final) is None
    assert client.complete and server.complete and server.authorization_id == "user"


@pytest.mark.parametrize("mechanism, scram", [("SCRAM-SHA-256", SCRAM_SHA_256), ("SCRAM-SHA-512", SCRAM_SHA_512)])
def test_scram_round_trip_and_escaped_names(mechanism, scram):
    cache = CredentialCache()
    cache.put(mechanism, "a=b,c", make_credential(scram, "secret"))
    server = ScramServer(mechanism, cache)
    exchange(ScramClient(mechanism, "a=b,c", "secret"), server)
    assert server.authorization_id == "a=b,c"


def scram_failure(cache, user, password, mechanism="SCRAM-SHA-256") -> tuple[bytes, AuthenticationFailed]:
    client = ScramClient(mechanism, user, password)
    server = ScramServer(mechanism, cache)
    server_first = server.evaluate(client.initial())
    with pytest.raises(AuthenticationFailed) as info:
        server.evaluate(client.evaluate(server_first))
    return server_first, info.value


def test_scram_wrong_password_and_unknown_user_look_alike():
    cache = CredentialCache()
    cache.put("SCRAM-SHA-256", "alice", make_credential(SCRAM_SHA_256, "right"))
    known_first, wrong = scram_failure(cache, "alice", "wrong")
    unknown_first, unknown = scram_failure(cache, "bob", "whatever")
    # the same message shape (a 32-byte salt, 4096 iterations), the same refusal, nothing for the client
    for first in (known_first, unknown_first):
        attrs = dict(p.split("=", 1) for p in first.decode().split(","))
        assert len(base64.b64decode(attrs["s"])) == 32 and attrs["i"] == "4096"
    assert wrong.client_message is None and unknown.client_message is None
    # asking twice about an unknown user gives the same salt (a fake credential, not a random one)
    again, _ = scram_failure(cache, "bob", "whatever")
    assert again.decode().split(",s=")[1] == unknown_first.decode().split(",s=")[1]


def test_scram_deleted_credential_fails_the_next_login():
    cache = CredentialCache()
    cache.put("SCRAM-SHA-512", "alice", make_credential(SCRAM_SHA_512, "pw"))
    exchange(ScramClient("SCRAM-SHA-512", "alice", "pw"), ScramServer("SCRAM-SHA-512", cache))
    cache.remove("SCRAM-SHA-512", "alice")
    scram_failure(cache, "alice", "pw", "SCRAM-SHA-512")


@pytest.mark.parametrize("first", [
    b"", b"garbage", b"p=tls-unique,,n=user,r=abc", b"y,,n=user,r=abc", b"n,,r=abc,n=user", b"n,,n=,r=abc",
    b"n,,n=user,r=", b"n,,n=user,r=abc,tokenauth=true", b"n,a=other,n=user,r=abc", b"n,,n=us=ZZer,r=abc",
    b"\xff\xfe", b"n,,n=user,r=abc,r=def",
])
def test_scram_hostile_first_messages(first):
    with pytest.raises(AuthenticationFailed):
        ScramServer("SCRAM-SHA-256", CredentialCache()).evaluate(first)


def test_scram_final_message_checks():
    cache = CredentialCache()
    cache.put("SCRAM-SHA-256", "user", make_credential(SCRAM_SHA_256, "pencil"))

    def started():
        client = ScramClient("SCRAM-SHA-256", "user", "pencil")
        server = ScramServer("SCRAM-SHA-256", cache)
        final = client.evaluate(server.evaluate(client.initial()))
        return client, server, final.decode()

    _c, server, final = started()
    with pytest.raises(AuthenticationFailed, match="channel binding"):
        server.evaluate(final.replace("c=biws", "c=eSws").encode())
    _c, server, final = started()
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.evaluate(final.replace(",r=", ",r=x").encode())
    _c, server, final = started()
    with pytest.raises(AuthenticationFailed):  # a repeated client-first message in place of the final one
        server.evaluate(b"n,,n=user,r=abc")
    _c, server, final = started()
    with pytest.raises(AuthenticationFailed):
        server.evaluate(final[:-8].encode() + b"AAAAAAA=")
    _c, server, final = started()
    server.evaluate(final.encode())
    with pytest.raises(AuthenticationFailed, match="after the exchange"):
        server.evaluate(final.encode())


def test_scram_client_checks_the_server():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    client.initial()
    with pytest.raises(SaslError, match="nonce"):
        client.evaluate(b"r=zzz,s=QUJD,i=4096")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    client.initial()
    with pytest.raises(SaslError, match="below the minimum"):
        client.evaluate(b"r=abcdef,s=QUJD,i=100")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    client.initial()
    client.evaluate(b"r=abcdef,s=QUJD,i=4096")
    with pytest.raises(SaslError, match="signature is wrong"):
        client.evaluate(b"v=" + base64.b64encode(b"x" * 32))


# -- OAUTHBEARER (unsecured) ----------------------------------------------------------------

NOW = 1_700_000_000_000


def token(claims: dict) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")  # noqa: E731
    return f"{enc({'alg': 'none'})}.{enc(claims)}."


def test_oauthbearer_login_token_validates():
    tok, expiry = unsecured_token({"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginLifetimeSeconds": "60",
                                   "unsecuredLoginListClaim_scope": ",a,b"}, NOW)
    assert expiry == NOW + 60_000
    assert validate_unsecured_token(tok, {"unsecuredValidatorRequiredScope": "a b"}, NOW + 1000) == ("alice", expiry)


@pytest.mark.parametrize("claims, options, now, reason", [
    ({"sub": "a", "exp": NOW / 1000}, {}, NOW, "on or after the Expiration Time"),
    ({"sub": "a", "exp": NOW / 1000}, {"unsecuredValidatorAllowableClockSkewMs": "5"}, NOW + 5, "on or after"),
    ({"sub": "a"}, {}, NOW, "Required claim missing: exp"),
    ({"exp": NOW / 1000 + 60}, {}, NOW, "Required claim missing: sub"),
    ({"sub": 7, "exp": NOW / 1000 + 60}, {}, NOW, "incorrect type"),
    ({"sub": "a", "iat": NOW / 1000 + 10, "exp": NOW / 1000 + 60}, {}, NOW, "Issued At"),
    ({"sub": "a", "iat": NOW / 1000 - 10, "exp": NOW / 1000 - 20}, {"unsecuredValidatorAllowableClockSkewMs": "60000"},
     NOW, "not after the Issued At"),
    ({"sub": "a", "exp": NOW / 1000 + 60, "scope": "x"}, {"unsecuredValidatorRequiredScope": "x y"}, NOW, "missing"),
    ({"who": "a", "exp": NOW / 1000 + 60}, {}, NOW, "Required claim missing: sub"),
])
def test_oauthbearer_refused_tokens(claims, options, now, reason):
    with pytest.raises(InvalidToken, match=reason):
        validate_unsecured_token(token(claims), options, now)


def test_oauthbearer_options_and_skew():
    claims = {"who": "bob", "exp": NOW / 1000, "roles": ["r1", "r2"]}
    options = {"unsecuredValidatorPrincipalClaimName": "who", "unsecuredValidatorScopeClaimName": "roles",
               "unsecuredValidatorRequiredScope": "r2", "unsecuredValidatorAllowableClockSkewMs": "1000"}
    assert validate_unsecured_token(token(claims), options, NOW + 999)[0] == "bob"


def test_oauthbearer_exchange_and_expired_token():
    time = MockTime(start_ms=NOW)
    tok, _ = unsecured_token({"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginLifetimeSeconds": "10"}, NOW)
    server = OAuthBearerServer({}, time.milliseconds)
    exchange(OAuthBearerClient(tok), server)
    assert server.authorization_id == "alice" and server.credential_expiry_ms == NOW + 10_000
    time.sleep(10_000)  # the token's exp, on the injected clock
    server = OAuthBearerServer({}, time.milliseconds)
    client = OAuthBearerClient(tok)
    error = server.evaluate(client.initial())
    assert json.loads(error) == {"status": "invalid_token"}
    assert client.evaluate(error) == b"\x01"
    with pytest.raises(AuthenticationFailed) as info:
        server.evaluate(b"\x01")
    assert info.value.client_message == '{"status":"invalid_token"}'


@pytest.mark.parametrize("message", [b"", b"n,,", b"n,,\x01auth=Basic abc\x01\x01", b"n,,\x01auth=Bearer \x01\x01",
                                     b"x,,\x01auth=Bearer a.b.\x01\x01", b"n,,\x01noequals\x01\x01", b"\xff"])
def test_oauthbearer_hostile_messages(message):
    with pytest.raises(AuthenticationFailed):
        OAuthBearerServer({}, lambda: NOW).evaluate(message)


def test_scram_accepts_librdkafka_2_0_final_nonce():
    """librdkafka 2.0 (Debian's kcat) sends the client nonce followed by the combined one;
    Kafka's server accepted it (endsWith), and so does kbroker — nothing else."""
    cache = CredentialCache()
    cache.put("SCRAM-SHA-256", "user", make_credential(SCRAM_SHA_256, "pencil"))

    def final_with(nonce_of):
        client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="cnonce")
        server = ScramServer("SCRAM-SHA-256", cache, server_nonce=lambda: "snonce")
        first = server.evaluate(client.initial())
        final = client.evaluate(first).decode().replace("r=cnoncesnonce", f"r={nonce_of}")
        # recompute the proof over the message as sent, as librdkafka does
        import hashlib
        import hmac as _hmac
        salted = hashlib.pbkdf2_hmac("sha256", b"pencil", cache.get("SCRAM-SHA-256", "user").salt, 4096)
        ck = _hmac.digest(salted, b"Client Key", "sha256")
        without = final[:final.rindex(",p=")]
        auth = f"{client.client_first_bare},{first.decode()},{without}".encode()
        sig = _hmac.digest(hashlib.sha256(ck).digest(), auth, "sha256")
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(ck, sig))).decode()
        return server, f"{without},p={proof}".encode()

    server, final = final_with("cnoncecnoncesnonce")
    assert server.evaluate(final).startswith(b"v=")
    server, final = final_with("xxcnoncesnonce")
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.evaluate(final)
