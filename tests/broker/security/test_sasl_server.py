"""The SASL state machine of a connection (broker/security/sasl_server.py), driven through a mock
transport on MockTime: Kafka's order of requests, its answers and errors, the delayed close
after a failure, the receive-size cap before authentication, KIP-368 session expiry and
re-authentication, the KIP-43 v0 handshake, and the listener's authentication counters."""

from __future__ import annotations

import struct

import pytest

from broker.config import KafkaConfig
from broker.metrics import RequestMetrics
from broker.network import KafkaConnection, SocketServer
from broker.security.sasl_server import ListenerAuthentication
from broker.security.credentials import SCRAM_SHA_256, CredentialCache, make_credential
from protocol.api_keys import ApiKey
from protocol.client.sasl import PlainClient, ScramClient
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.fast_codecs import encode_request_header
from protocol.messages import APIS, request_is_flexible
from tests.broker.test_network import MockTransport

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" '
        'user_bob="bob-secret";')
FIXED = "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN"


class Apis:
    """Answers ApiVersions at once; records everything else and answers it with b"ok"."""

    def __init__(self):
        self.seen = []

    def handle(self, ctx):
        self.seen.append((ctx.header.api_key, ctx.principal))
        ctx.send_response(b"\x00\x00\x00\x06" + struct.pack(">i", ctx.header.correlation_id) + b"ok")


def setup(**props):
    time = MockTime()
    config = KafkaConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "process.roles": "broker",
                          "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                          "sasl.mechanism.inter.broker.protocol": "PLAIN",
                          "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, **props})
    cache = CredentialCache()
    cache.put("SCRAM-SHA-256", "carol", make_credential(SCRAM_SHA_256, "carol-secret"))
    server = SocketServer(Apis(), max_request_size=1 << 20, max_inflight=100, time=time, metrics=RequestMetrics(),
                          now=time.nanoseconds)
    server.listener_auth["SASL_PLAINTEXT"] = ListenerAuthentication(
        config.security.listener("SASL_PLAINTEXT"), cache, time, server.max_request_size)
    conn = KafkaConnection(server, "SASL_PLAINTEXT")
    transport = MockTransport()
    conn.connection_made(transport)
    return conn, transport, time, server.dispatcher, cache


def frame(api_key: int, version: int, cid: int, body: dict | bytes = b"") -> bytes:
    if isinstance(body, dict):
        body = APIS[api_key].request.build(version, body)
    raw = encode_request_header(api_key, version, cid, "t", request_is_flexible(api_key, version)) + body
    return struct.pack(">i", len(raw)) + raw


def parse(api_key: int, version: int, data: bytes):
    size = struct.unpack(">i", data[:4])[0]
    assert size == len(data) - 4
    pos = 8 + (1 if request_is_flexible(api_key, version) and api_key != ApiKey.API_VERSIONS else 0)
    return APIS[api_key].response.parse(version, data, pos)


def handshake(conn, transport, mechanism="PLAIN", cid=1, version=1):
    conn.data_received(frame(ApiKey.SASL_HANDSHAKE, version, cid, {"mechanism": mechanism}))
    return parse(ApiKey.SASL_HANDSHAKE, version, transport.written.pop())


def authenticate(conn, transport, token: bytes, cid=2, version=2):
    conn.data_received(frame(ApiKey.SASL_AUTHENTICATE, version, cid, {"auth_bytes": token}))
    return parse(ApiKey.SASL_AUTHENTICATE, version, transport.written.pop()) if transport.written else None


def test_plain_login_then_requests_reach_the_dispatcher_as_the_user():
    conn, transport, _time, apis, _ = setup()
    conn.data_received(frame(ApiKey.API_VERSIONS, 3, 0, {"client_software_name": "t", "client_software_version": "1"}))
    assert apis.seen == [(ApiKey.API_VERSIONS, conn.principal)]  # ApiVersions is answered before authentication
    transport.written.clear()
    response = handshake(conn, transport)
    assert response.error_code == 0 and list(response.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
    response = authenticate(conn, transport, PlainClient("alice", "alice-secret").initial())
    assert response.error_code == 0 and response.error_message is None and response.session_lifetime_ms == 0
    assert str(conn.principal) == "User:alice"
    conn.data_received(frame(ApiKey.METADATA, 1, 3, {"topics": []}))
    assert apis.seen[-1] == (ApiKey.METADATA, conn.principal)
    assert (conn.lstats.auth_succeeded, conn.lstats.auth_failed) == (1, 0)
    assert conn.framer.max_size == 1 << 20  # the pre-authentication cap is lifted


def test_anything_before_the_handshake_is_closed_without_a_reply():
    conn, transport, _time, apis, _ = setup()
    conn.data_received(frame(ApiKey.METADATA, 1, 1, {"topics": []}))
    assert transport.closed and transport.written == [] and apis.seen == []


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("nobody", "alice-secret")])
def test_wrong_password_and_unknown_user_get_the_same_answer_after_the_delay(user, password):
    conn, transport, time, apis, _ = setup()
    handshake(conn, transport)
    assert authenticate(conn, transport, PlainClient(user, password).initial()) is None
    assert not transport.closed and transport.paused  # reading stops; the answer waits for the delay
    conn.data_received(frame(ApiKey.METADATA, 1, 3, {"topics": []}))
    assert apis.seen == []
    time.sleep(99)
    assert transport.written == [] and not transport.closed
    time.sleep(1)  # connection.failed.authentication.delay.ms (100)
    response = parse(ApiKey.SASL_AUTHENTICATE, 2, transport.written[0])
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and response.error_message == FIXED
    assert transport.closed and conn.principal.name == "ANONYMOUS"
    assert (conn.lstats.auth_succeeded, conn.lstats.auth_failed) == (0, 1)


def test_failure_delay_zero_answers_and_closes_at_once():
    conn, transport, time, _apis, _ = setup(**{"connection.failed.authentication.delay.ms": "0"})
    handshake(conn, transport)
    conn.data_received(frame(ApiKey.SASL_AUTHENTICATE, 2, 2, {"auth_bytes": PlainClient("alice", "no").initial()}))
    time.sleep(0)  # the next turn of the loop
    response = parse(ApiKey.SASL_AUTHENTICATE, 2, transport.written.pop())
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and transport.closed


def test_unsupported_mechanism_names_the_enabled_ones():
    conn, transport, time, _apis, _ = setup()
    conn.data_received(frame(ApiKey.SASL_HANDSHAKE, 1, 1, {"mechanism": "GSSAPI"}))
    time.sleep(100)
    response = parse(ApiKey.SASL_HANDSHAKE, 1, transport.written.pop())
    assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert list(response.mechanisms) == ["PLAIN", "SCRAM-SHA-256"] and transport.closed


def test_other_requests_after_the_handshake_get_illegal_sasl_state():
    conn, transport, time, _apis, _ = setup()
    handshake(conn, transport)
    conn.data_received(frame(ApiKey.METADATA, 1, 2, {"topics": [{"name": "t"}]}))
    time.sleep(100)
    response = parse(ApiKey.METADATA, 1, transport.written.pop())
    assert [t.error_code for t in response.topics] == [ErrorCode.ILLEGAL_SASL_STATE] and transport.closed
    assert conn.lstats.auth_failed == 1


def test_frames_above_the_receive_size_before_authentication_fail_it():
    conn, transport, time, _apis, _ = setup(**{"sasl.server.max.receive.size": "1000"})
    conn.data_received(struct.pack(">i", 1001) + b"x" * 10)
    time.sleep(100)
    assert transport.closed and transport.written == [] and conn.lstats.auth_failed == 1


def test_scram_login_and_replayed_first_message():
    conn, transport, _time, _apis, _ = setup()
    handshake(conn, transport, "SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", "carol", "carol-secret")
    first = authenticate(conn, transport, client.initial())
    final = authenticate(conn, transport, client.evaluate(bytes(first.auth_bytes)), cid=3)
    assert final.error_code == 0 and client.evaluate(bytes(final.auth_bytes)) is None and client.complete
    assert str(conn.principal) == "User:carol"
    conn2, transport2, time2, _apis2, _ = setup()
    handshake(conn2, transport2, "SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", "carol", "carol-secret")
    authenticate(conn2, transport2, client.initial())
    assert authenticate(conn2, transport2, client.initial(), cid=3) is None  # the first message again
    time2.sleep(100)
    assert parse(ApiKey.SASL_AUTHENTICATE, 2, transport2.written.pop()).error_code == \
        ErrorCode.SASL_AUTHENTICATION_FAILED


def test_session_lifetime_expiry_and_reauthentication():
    conn, transport, time, apis, _ = setup(**{"connections.max.reauth.ms": "1000"})
    handshake(conn, transport)
    response = authenticate(conn, transport, PlainClient("alice", "alice-secret").initial(), version=1)
    assert response.session_lifetime_ms == 1000
    time.sleep(900)
    assert handshake(conn, transport, cid=3).error_code == 0  # re-authentication within the session
    response = authenticate(conn, transport, PlainClient("alice", "alice-secret").initial(), cid=4, version=1)
    assert response.error_code == 0 and response.session_lifetime_ms == 1000
    assert (conn.lstats.auth_succeeded, conn.lstats.reauth_succeeded) == (1, 1)
    time.sleep(999)
    conn.data_received(frame(ApiKey.METADATA, 1, 5, {"topics": []}))
    assert apis.seen[-1][0] == ApiKey.METADATA and not transport.closed
    time.sleep(1)  # the new session ends 1000 ms after the re-authentication
    conn.data_received(frame(ApiKey.METADATA, 1, 6, {"topics": []}))
    assert transport.closed and len(apis.seen) == 1


def test_reauthentication_cannot_change_the_principal():
    conn, transport, time, _apis, _ = setup(**{"connections.max.reauth.ms": "1000"})
    handshake(conn, transport)
    authenticate(conn, transport, PlainClient("alice", "alice-secret").initial(), version=1)
    handshake(conn, transport, cid=3)
    assert authenticate(conn, transport, PlainClient("bob", "bob-secret").initial(), cid=4, version=1) is None
    time.sleep(100)
    response = parse(ApiKey.SASL_AUTHENTICATE, 1, transport.written.pop())
    assert "Cannot change principals during re-authentication from User.alice: User.bob" == response.error_message
    assert transport.closed and str(conn.principal) == "User:alice"


def test_kip43_v0_handshake_with_raw_tokens():
    conn, transport, _time, apis, _ = setup()
    assert handshake(conn, transport, version=0).error_code == 0
    token = PlainClient("alice", "alice-secret").initial()
    conn.data_received(struct.pack(">i", len(token)) + token)  # no request header
    assert transport.written.pop() == b"\x00\x00\x00\x00" and str(conn.principal) == "User:alice"
    conn.data_received(frame(ApiKey.METADATA, 1, 3, {"topics": []}))  # requests with headers again
    assert apis.seen[-1][0] == ApiKey.METADATA


def test_hostile_frames_never_raise():
    authenticate_first = frame(ApiKey.SASL_AUTHENTICATE, 2, 1, {"auth_bytes": b"x"})[4:]
    for payload in (b"", b"\x00" * 3, b"\xff" * 40, struct.pack(">hhi", 17, 1, 1) + b"\x7f\xff",
                    struct.pack(">hhi", 36, 9, 1), authenticate_first, struct.pack(">hhih", 17, 7, 1, -1) + b"x",
                    struct.pack(">hhih", 17, 1, 1, -1) + b"\x7f\x00"):
        conn, transport, time, _apis, _ = setup()
        conn.data_received(struct.pack(">i", len(payload)) + payload)
        time.sleep(100)
        assert transport.closed and transport.written == [], payload
