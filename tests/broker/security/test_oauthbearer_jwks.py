"""KIP-768's broker-side validator: tokens signed by an issuer's keys from a JWKS file, on an
injected clock (broker/security/oauthbearer_jwks.py)."""

from __future__ import annotations

import base64
import json
import os

import pytest

from broker.security.oauthbearer import InvalidToken
from broker.security.oauthbearer_jwks import JwksError, JwksValidator
from protocol.clock import MockTime

from .jwt_support import Issuer

NOW = 1_700_000_000_000


@pytest.fixture
def issuer(tmp_path):
    i = Issuer()
    i.add_rsa("r1")
    i.add_ec("e1")
    return i, i.write(tmp_path / "jwks.json"), tmp_path / "jwks.json"


def claims(**extra):
    return {"sub": "alice", "iat": NOW / 1000, "exp": NOW / 1000 + 60, "iss": "https://idp", "aud": ["kafka"], **extra}


def test_rsa_and_ec_signed_tokens(issuer):
    i, url, _ = issuer
    time = MockTime(start_ms=NOW)
    v = JwksValidator(url, now_ms=time.milliseconds, expected_audience=["kafka"], expected_issuer="https://idp")
    assert v.validate(i.token("r1", claims())) == ("alice", NOW + 60_000)
    assert v.validate(i.token("e1", claims(sub="bob"))) == ("bob", NOW + 60_000)


@pytest.mark.parametrize("mutate, reason", [
    (lambda t: t[:-4] + ("AAAA" if not t.endswith("AAAA") else "BBBB"), "signature"),
    (lambda t: ".".join([t.split(".")[0], base64.urlsafe_b64encode(json.dumps(claims(sub="mallory")).encode()).decode()
                         .rstrip("="), t.split(".")[2]]), "signature"),
    (lambda t: "x.y", "3 parts"),
])
def test_tampered_tokens(issuer, mutate, reason):
    i, url, _ = issuer
    v = JwksValidator(url, now_ms=lambda: NOW)
    with pytest.raises(InvalidToken, match=reason):
        v.validate(mutate(i.token("r1", claims())))


def test_alg_none_and_unknown_keys_are_refused(issuer):
    i, url, _ = issuer
    v = JwksValidator(url, now_ms=lambda: NOW)
    head = base64.urlsafe_b64encode(b'{"alg":"none","kid":"r1"}').decode().rstrip("=")
    body = i.token("r1", claims()).split(".")[1]
    with pytest.raises(InvalidToken, match="algorithm 'none'"):
        v.validate(f"{head}.{body}.")
    other = Issuer()
    other.add_rsa("r1")  # the same kid, another key
    with pytest.raises(InvalidToken, match="signature"):
        v.validate(other.token("r1", claims()))
    other.add_rsa("r9")
    with pytest.raises(InvalidToken, match="no key 'r9'"):
        v.validate(other.token("r9", claims()))


def test_time_issuer_audience_and_subject(issuer):
    i, url, _ = issuer
    time = MockTime(start_ms=NOW)
    v = JwksValidator(url, now_ms=time.milliseconds, expected_audience=["kafka"], expected_issuer="https://idp",
                      clock_skew_s=30)
    token = i.token("r1", claims())
    time.sleep(60_000 + 29_999)
    assert v.validate(token)[0] == "alice"  # within the skew
    time.sleep(1)
    with pytest.raises(InvalidToken, match="expired"):
        v.validate(token)
    v = JwksValidator(url, now_ms=lambda: NOW, expected_audience=["kafka"], expected_issuer="https://idp")
    for bad, reason in ((claims(iss="https://evil"), "issuer"), (claims(aud="other"), "audience"),
                        (claims(iat=NOW / 1000 + 31), "future"), ({"sub": "a", "iat": NOW / 1000}, "exp"),
                        (claims(sub=""), "sub"), (claims(exp="soon"), "not a number")):
        with pytest.raises(InvalidToken, match=reason):
            v.validate(i.token("r1", bad))


def test_a_rotated_key_is_picked_up_without_a_restart(issuer):
    i, url, path = issuer
    time = MockTime(start_ms=NOW)
    v = JwksValidator(url, now_ms=time.milliseconds)
    i.add_rsa("r2")
    i.write(path)
    os.utime(path, (1, 1))  # a different modification time than the first read
    token = i.token("r2", claims())
    with pytest.raises(InvalidToken, match="no key 'r2'"):
        v.validate(token)  # read again at most once a second
    time.sleep(1000)
    assert v.validate(token)[0] == "alice"


def test_unreadable_key_sets(tmp_path):
    with pytest.raises(JwksError, match="only file:// URLs"):
        JwksValidator("https://idp/jwks", now_ms=lambda: NOW)
    with pytest.raises(JwksError, match="No such file"):
        JwksValidator((tmp_path / "missing.json").as_uri(), now_ms=lambda: NOW)
    (tmp_path / "bad.json").write_text('{"keys": []}')
    with pytest.raises(JwksError, match="no RSA or EC signing key"):
        JwksValidator((tmp_path / "bad.json").as_uri(), now_ms=lambda: NOW)
