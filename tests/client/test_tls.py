"""protocol/client/tls.py: Kafka's ssl.* keys into Python ssl contexts (both ends), checked by
real handshakes over memory BIOs: PEM files, inline PEM, encrypted keys, PKCS12, JKS refused,
TLS 1.2+ only, cipher suites by IANA name, hostname verification."""

from __future__ import annotations

import os
import warnings
import ssl
import tempfile

import pytest

from cli.certs import make_certs
from protocol.client.tls import SslConfigError, client_context, server_context


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    paths = make_certs(d, ["localhost"], ["alice"], pkcs12_password="changeit")
    make_certs(d / "enc", ["localhost"], [], key_password="kp")
    return d, paths


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str = "localhost"):
    """Run a TLS handshake between the two contexts in memory; the (server, client) SSLObjects."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    done = [False, False]
    for _ in range(20):
        for i, (obj, out, peer_in) in enumerate(((cli, c_out, s_in), (srv, s_out, c_in))):
            if not done[i]:
                try:
                    obj.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
            data = out.read()
            if data:
                peer_in.write(data)
        if all(done):
            # TLS 1.3: the server's view of a client certificate settles with the client's next flight
            cli.write(b"x")
            s_in.write(c_out.read())
            srv.read(1)
            return srv, cli
    raise AssertionError("handshake did not finish")


def trust(d) -> dict:
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(d / "ca.pem")}


def test_pem_file_keystore_and_truststore(certs):
    d, paths = certs
    srv, cli = handshake(server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["localhost"])}),
                         client_context(trust(d)))
    assert cli.version() == "TLSv1.3"


def test_inline_pem_and_encrypted_key(certs):
    d, paths = certs
    text = paths["localhost"].read_text()
    key = text[:text.index("-----END PRIVATE KEY-----") + len("-----END PRIVATE KEY-----")]
    chain = text[len(key):]
    handshake(server_context({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain,
                              "ssl.keystore.key": key}), client_context(trust(d)))
    encrypted = str(d / "enc" / "localhost.pem")
    handshake(server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": encrypted,
                              "ssl.key.password": "kp"}), client_context(trust(d / "enc")))
    with pytest.raises(SslConfigError, match="^ssl.keystore.location: .*ssl.key.password"):
        server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": encrypted, "ssl.key.password": "no"})
    with pytest.raises(SslConfigError, match="^ssl.keystore.password: a PEM keystore takes no store password"):
        server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": encrypted, "ssl.keystore.password": "x"})


def test_pkcs12_keystore_and_truststore(certs):
    d, _paths = certs
    handshake(server_context({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(d / "localhost.p12"),
                              "ssl.keystore.password": "changeit"}),
              client_context({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(d / "truststore.p12"),
                              "ssl.truststore.password": "changeit"}))
    with pytest.raises(SslConfigError, match="^ssl.keystore.location: cannot open the PKCS12 keystore"):
        server_context({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(d / "localhost.p12"),
                        "ssl.keystore.password": "wrong"})


def test_jks_and_unset_types_are_refused(certs):
    d, paths = certs
    with pytest.raises(SslConfigError, match="^ssl.keystore.type: unset, which means JKS .*KIP-651"):
        server_context({"ssl.keystore.location": str(paths["localhost"])})
    with pytest.raises(SslConfigError, match="^ssl.truststore.type: JKS"):
        client_context({"ssl.truststore.type": "JKS", "ssl.truststore.location": str(d / "ca.pem")})


def test_key_material_never_stays_on_disk(certs):
    d, _paths = certs
    before = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("kbroker-tls-")}
    server_context({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(d / "localhost.p12"),
                    "ssl.keystore.password": "changeit"})
    assert {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("kbroker-tls-")} == before


def test_protocols_tls12_plus_only(certs):
    d, paths = certs
    keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["localhost"])}
    with pytest.raises(SslConfigError, match="^ssl.enabled.protocols: TLSv1.1 is refused"):
        server_context({**keystore, "ssl.enabled.protocols": "TLSv1.2,TLSv1.1"})
    srv, cli = handshake(server_context({**keystore, "ssl.enabled.protocols": "TLSv1.2"}), client_context(trust(d)))
    assert cli.version() == "TLSv1.2"
    client11 = client_context(trust(d))
    with warnings.catch_warnings():  # TLS 1.1 is deprecated: that is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        client11.maximum_version = ssl.TLSVersion.TLSv1_1
        client11.minimum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError):
        handshake(server_context(keystore), client11)


def test_cipher_suites_by_iana_name(certs):
    d, paths = certs
    keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["localhost"])}
    srv, cli = handshake(server_context({**keystore, "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}),
                         client_context(trust(d)))
    assert cli.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384" and cli.version() == "TLSv1.2"
    with pytest.raises(SslConfigError, match="TLS 1.3 suites cannot be chosen one by one"):
        server_context({**keystore, "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"})
    with pytest.raises(SslConfigError, match="unknown cipher suite TLS_FOO_WITH_BAR"):
        server_context({**keystore, "ssl.cipher.suites": "TLS_FOO_WITH_BAR"})


def test_endpoint_identification_and_client_certificates(certs):
    d, paths = certs
    keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["localhost"])}
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server_context(keystore), client_context(trust(d)), hostname="other.example")
    handshake(server_context(keystore), client_context({**trust(d), "ssl.endpoint.identification.algorithm": ""}),
              hostname="other.example")
    server = server_context({**keystore, **trust(d), "ssl.client.auth": "required"})
    srv, _ = handshake(server, client_context({**trust(d), "ssl.keystore.type": "PEM",
                                               "ssl.keystore.location": str(paths["alice"])}))
    assert srv.getpeercert()["subject"][-1] == (("commonName", "alice"),)
    with pytest.raises(ssl.SSLError):
        handshake(server, client_context(trust(d)))  # required, none given
