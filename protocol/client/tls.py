"""TLS contexts from Kafka's ``ssl.*`` properties, for both ends of a connection.

The broker's listeners (``server_context``) and every outgoing connection (``client_context``:
the CLI, inter-broker fetchers, the controller's links) are configured with Kafka's keys:

* ``ssl.keystore.type`` PEM or PKCS12 (Kafka's default, JKS, cannot be read here: an unset
  type is an error saying so, KIP-651), with ``ssl.keystore.location`` (a PEM file holding the
  private key and the certificate chain, or a PKCS12 file), ``ssl.keystore.password``
  (PKCS12), ``ssl.key.password`` (an encrypted PEM key), or inline PEM in
  ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``;
* ``ssl.truststore.type`` PEM or PKCS12 with ``ssl.truststore.location`` (or inline PEM in
  ``ssl.truststore.certificates``); without one, the system's CAs;
* ``ssl.enabled.protocols`` (TLSv1.2 and TLSv1.3 only), ``ssl.protocol``, ``ssl.cipher.suites``
  (IANA names as Java takes them, or OpenSSL names), ``ssl.endpoint.identification.algorithm``
  (``https``, the default: the server's certificate must name the host; empty: not checked).

Python's ``ssl`` module loads a certificate chain only from a file: key material that is not
already a PEM file (PKCS12, inline PEM) goes through ``cryptography``, is written to a 0600
file in a private temporary directory with the key encrypted under a one-time random
password, loaded, and removed at once. ``SslConfigError`` names the key at fault.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
    from cryptography.x509 import Certificate

PEM, PKCS12, JKS = "PEM", "PKCS12", "JKS"
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_REFUSED_PROTOCOLS = ("TLSv1", "TLSv1.1", "SSLv2", "SSLv3", "SSL", "SSLv2Hello")
# TLS 1.3 suites cannot be restricted through Python's ssl module: a list that names TLS 1.3
# suites must name every one OpenSSL enables.
_TLS13_SUITES = frozenset({"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"})
_KX = {"ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-", "DHE_RSA": "DHE-RSA-", "RSA": ""}
_ENC = {"AES_128_GCM_SHA256": "AES128-GCM-SHA256", "AES_256_GCM_SHA384": "AES256-GCM-SHA384",
        "CHACHA20_POLY1305_SHA256": "CHACHA20-POLY1305", "AES_128_CBC_SHA256": "AES128-SHA256",
        "AES_256_CBC_SHA384": "AES256-SHA384", "AES_128_CBC_SHA": "AES128-SHA", "AES_256_CBC_SHA": "AES256-SHA"}


class SslConfigError(ValueError):
    """A TLS setting that cannot be used; the message starts with the key."""


def _get(props: Mapping[str, str | None], key: str) -> str | None:
    value = props.get(key)
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def _read(props: Mapping[str, str | None], key: str) -> bytes:
    path = _get(props, key)
    assert path is not None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SslConfigError(f"{key}: cannot read {path}: {exc.strerror}") from None


def _type(props: Mapping[str, str | None], key: str, location_key: str) -> str:
    kind = (_get(props, key) or JKS).upper()
    if kind == JKS:
        where = _get(props, location_key)
        raise SslConfigError(
            f"{key}: {'unset, which means JKS' if _get(props, key) is None else 'JKS'}"
            f"{f' (for {where})' if where else ''}: kbroker cannot read Java keystores; use PEM files "
            f"({key}=PEM, KIP-651) or PKCS12 ({key}=PKCS12)")
    if kind not in (PEM, PKCS12):
        raise SslConfigError(f"{key}: {kind} is not PEM or PKCS12")
    return kind


def _password(props: Mapping[str, str | None], key: str) -> bytes | None:
    value = props.get(key)
    return None if value is None or value == "" else str(value).encode("utf-8")


def has_keystore(props: Mapping[str, str | None]) -> bool:
    return bool(_get(props, "ssl.keystore.location") or _get(props, "ssl.keystore.certificate.chain")
                or _get(props, "ssl.keystore.key"))


def _load_chain_via_file(ctx: ssl.SSLContext, key: "PrivateKeyTypes", certs: "list[Certificate]") -> None:
    """Hand ``ctx`` a key and chain that exist only in memory: a 0600 file in a private
    temporary directory, the key encrypted under a one-time password, removed once loaded."""
    from cryptography.hazmat.primitives import serialization

    one_time = secrets.token_urlsafe(24).encode()
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(one_time))
    chain_pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    with tempfile.TemporaryDirectory(prefix="kbroker-tls-") as tmp:
        path = os.path.join(tmp, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, key_pem + chain_pem)
        finally:
            os.close(fd)
        ctx.load_cert_chain(path, password=one_time)


def load_keystore(ctx: ssl.SSLContext, props: Mapping[str, str | None]) -> None:
    """Load the certificate chain and private key ``props`` name into ``ctx`` (again, to
    reload: new handshakes use the new ones, established connections keep theirs)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    chain = _get(props, "ssl.keystore.certificate.chain")
    inline_key = _get(props, "ssl.keystore.key")
    location = _get(props, "ssl.keystore.location")
    key_password = _password(props, "ssl.key.password")
    if chain or inline_key:
        if not (chain and inline_key):
            missing = "ssl.keystore.key" if chain else "ssl.keystore.certificate.chain"
            raise SslConfigError(f"{missing}: an inline PEM keystore needs both ssl.keystore.certificate.chain "
                                 "and ssl.keystore.key")
        if (_get(props, "ssl.keystore.type") or "").upper() != PEM:
            raise SslConfigError("ssl.keystore.type: inline ssl.keystore.certificate.chain/ssl.keystore.key need "
                                 "ssl.keystore.type=PEM")
        if location:
            raise SslConfigError("ssl.keystore.location: not with an inline ssl.keystore.certificate.chain")
        try:
            key = serialization.load_pem_private_key(inline_key.encode(), key_password)
            certs = x509.load_pem_x509_certificates(chain.encode())
        except (ValueError, TypeError) as exc:
            raise SslConfigError(f"ssl.keystore.key: cannot load the inline PEM key or chain: {exc}") from None
        _load_chain_via_file(ctx, key, list(certs))
        return
    if not location:
        return
    kind = _type(props, "ssl.keystore.type", "ssl.keystore.location")
    if kind == PEM:
        if props.get("ssl.keystore.password"):
            raise SslConfigError("ssl.keystore.password: a PEM keystore takes no store password, only "
                                 "ssl.key.password for an encrypted key")
        data = _read(props, "ssl.keystore.location")
        try:
            key = serialization.load_pem_private_key(data, key_password)
            certs = x509.load_pem_x509_certificates(data)
        except (ValueError, TypeError) as exc:
            raise SslConfigError(f"ssl.keystore.location: {location} is not a PEM file with a private key "
                                 f"(decrypted by ssl.key.password) and a certificate chain: {exc}") from None
        _load_chain_via_file(ctx, key, list(certs))
        return
    data = _read(props, "ssl.keystore.location")
    try:
        p12_key, cert, extra = pkcs12.load_key_and_certificates(data, _password(props, "ssl.keystore.password"))
    except (ValueError, TypeError) as exc:
        raise SslConfigError(f"ssl.keystore.location: cannot open the PKCS12 keystore {location} with "
                             f"ssl.keystore.password: {exc}") from None
    if p12_key is None or cert is None:
        raise SslConfigError(f"ssl.keystore.location: the PKCS12 keystore {location} holds no private key "
                             "and certificate")
    _load_chain_via_file(ctx, p12_key, [cert, *extra])


def load_truststore(ctx: ssl.SSLContext, props: Mapping[str, str | None]) -> bool:
    """Load the CAs ``props`` name into ``ctx``; False when none are configured."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    inline = _get(props, "ssl.truststore.certificates")
    location = _get(props, "ssl.truststore.location")
    if inline:
        if (_get(props, "ssl.truststore.type") or "").upper() != PEM:
            raise SslConfigError("ssl.truststore.type: inline ssl.truststore.certificates need ssl.truststore.type=PEM")
        try:
            ctx.load_verify_locations(cadata=inline)
        except (ssl.SSLError, ValueError) as exc:
            raise SslConfigError(f"ssl.truststore.certificates: not PEM certificates: {exc}") from None
        return True
    if not location:
        return False
    kind = _type(props, "ssl.truststore.type", "ssl.truststore.location")
    data = _read(props, "ssl.truststore.location")
    if kind == PEM:
        if props.get("ssl.truststore.password"):
            raise SslConfigError("ssl.truststore.password: a PEM truststore takes no password")
        try:
            ctx.load_verify_locations(cadata=data.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError) as exc:
            raise SslConfigError(f"ssl.truststore.location: {location} holds no PEM certificate: {exc}") from None
        return True
    try:
        store = pkcs12.load_pkcs12(data, _password(props, "ssl.truststore.password"))
    except (ValueError, TypeError) as exc:
        raise SslConfigError(f"ssl.truststore.location: cannot open the PKCS12 truststore {location}: {exc}") from None
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    if not certs:
        raise SslConfigError(f"ssl.truststore.location: the PKCS12 truststore {location} holds no certificate")
    ctx.load_verify_locations(cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs))
    return True


def _split(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def _openssl_cipher(name: str) -> str:
    if not name.startswith("TLS_"):
        return name
    kx, sep, enc = name[4:].partition("_WITH_")
    if not sep or kx not in _KX or enc not in _ENC:
        raise SslConfigError(f"ssl.cipher.suites: unknown cipher suite {name}")
    return _KX[kx] + _ENC[enc]


def apply_protocols_and_ciphers(ctx: ssl.SSLContext, props: Mapping[str, str | None]) -> None:
    """ssl.enabled.protocols (TLS 1.2+ only), ssl.protocol and ssl.cipher.suites onto ``ctx``."""
    enabled = _split(_get(props, "ssl.enabled.protocols")) or ["TLSv1.2", "TLSv1.3"]
    for name in enabled:
        if name in _REFUSED_PROTOCOLS:
            raise SslConfigError(f"ssl.enabled.protocols: {name} is refused: kbroker speaks TLSv1.2 and TLSv1.3 only")
        if name not in _TLS_VERSIONS:
            raise SslConfigError(f"ssl.enabled.protocols: unknown protocol {name} (TLSv1.2, TLSv1.3)")
    protocol = _get(props, "ssl.protocol") or "TLSv1.3"
    if protocol not in ("TLS", "TLSv1.2", "TLSv1.3"):
        raise SslConfigError(f"ssl.protocol: {protocol} is refused: TLS, TLSv1.2 or TLSv1.3")
    versions = sorted(_TLS_VERSIONS[n] for n in enabled)
    suites = _split(_get(props, "ssl.cipher.suites"))
    if suites:
        tls13 = [s for s in suites if s in _TLS13_SUITES]
        tls12 = [_openssl_cipher(s) for s in suites if s not in _TLS13_SUITES]
        if tls13 and set(tls13) != _TLS13_SUITES:
            raise SslConfigError(f"ssl.cipher.suites: TLS 1.3 suites cannot be chosen one by one here: list all of "
                                 f"{', '.join(sorted(_TLS13_SUITES))} or none (then TLS 1.3 is off)")
        if not tls13:
            versions = [v for v in versions if v != ssl.TLSVersion.TLSv1_3]
        if tls12:
            try:
                ctx.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise SslConfigError(f"ssl.cipher.suites: none of {', '.join(suites)} is available") from None
        else:
            versions = [v for v in versions if v != ssl.TLSVersion.TLSv1_2]
        if not versions:
            raise SslConfigError("ssl.cipher.suites: no suite of an enabled protocol (ssl.enabled.protocols) is listed")
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]


CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(props: Mapping[str, str | None]) -> ssl.SSLContext:
    """A listener's context: its keystore (required), ssl.client.auth with the truststore."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    apply_protocols_and_ciphers(ctx, props)
    if not has_keystore(props):
        raise SslConfigError("ssl.keystore.location: a TLS listener needs a keystore (ssl.keystore.location, or "
                             "ssl.keystore.certificate.chain and ssl.keystore.key)")
    load_keystore(ctx, props)
    client_auth = (_get(props, "ssl.client.auth") or "none").lower()
    if client_auth not in CLIENT_AUTH:
        raise SslConfigError(f"ssl.client.auth: {client_auth} is not none, requested or required")
    ctx.verify_mode = CLIENT_AUTH[client_auth]
    if client_auth != "none" and not load_truststore(ctx, props):
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(props: Mapping[str, str | None]) -> ssl.SSLContext:
    """An outgoing connection's context: the truststore (else the system's CAs), a keystore
    for mutual TLS when one is configured, and hostname verification unless
    ssl.endpoint.identification.algorithm is empty."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    apply_protocols_and_ciphers(ctx, props)
    algorithm = props.get("ssl.endpoint.identification.algorithm")
    algorithm = "https" if algorithm is None else str(algorithm).strip().lower()
    if algorithm not in ("", "https"):
        raise SslConfigError(f"ssl.endpoint.identification.algorithm: {algorithm} is not https or empty")
    ctx.check_hostname = algorithm == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not load_truststore(ctx, props):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if has_keystore(props):
        load_keystore(ctx, props)
    return ctx
