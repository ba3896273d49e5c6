"""``kbroker certs``: a development CA, broker certificates with SANs and client
certificates, through ``cryptography`` (never for production: the CA key sits beside them).

    kbroker certs --dir ./certs [--broker localhost --san 127.0.0.1 ...] [--client alice ...] [--pkcs12 PASSWORD]

writes, into DIR (created 0700; keys 0600):

* ``ca.pem`` / ``ca-key.pem``: the CA (kept and reused when present);
* ``<name>.pem``: a PEM keystore per broker and client: its private key (PKCS#8, unencrypted
  unless ``--key-password``) followed by its certificate and the CA's, which is what
  ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` reads;
* ``<name>.p12`` with ``--pkcs12 PASSWORD`` (``ssl.keystore.type=PKCS12``), and
  ``truststore.p12`` holding the CA;
* it prints the broker and client settings that use them.

A broker certificate's subject is ``CN=<name>`` and its SANs the name, every ``--san`` (DNS
names or IP addresses) and 127.0.0.1/localhost; a client certificate's subject is
``CN=<name>,OU=clients,O=kbroker`` (the DN ``ssl.principal.mapping.rules`` maps).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 825


def _name(cn: str, ou: str | None = None, o: str | None = "kbroker") -> x509.Name:
    attrs = []
    if o:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o))
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _write(path: Path, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    if private:
        os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class CertificateAuthority:
    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.key = key
        self.cert = cert

    @classmethod
    def create(cls, name: str = "kbroker development CA") -> "CertificateAuthority":
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name(name, o="kbroker")
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False, data_encipherment=False,
                                             key_agreement=False, encipher_only=False, decipher_only=False),
                               critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    @classmethod
    def load_or_create(cls, directory: Path) -> "CertificateAuthority":
        cert_path, key_path = directory / "ca.pem", directory / "ca-key.pem"
        if cert_path.exists() and key_path.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)
            return cls(key, x509.load_pem_x509_certificate(cert_path.read_bytes()))
        ca = cls.create()
        _write(cert_path, _cert_pem(ca.cert), private=False)
        _write(key_path, _key_pem(ca.key), private=True)
        return ca

    def issue(self, subject: x509.Name, sans: list[str] = (), *, server: bool = True, client: bool = True,
              days: int = VALID_DAYS, not_before: datetime.datetime | None = None
              ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = not_before or datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=days))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                                  critical=False))
        names: list[x509.GeneralName] = []
        for san in dict.fromkeys(sans):
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                names.append(x509.DNSName(san))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return key, builder.sign(self.key, hashes.SHA256())

    def keystore_pem(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, password: str | None = None) -> bytes:
        """Kafka's PEM keystore: the private key, then the chain (leaf first)."""
        return _key_pem(key, password) + _cert_pem(cert) + _cert_pem(self.cert)

    def keystore_p12(self, name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, password: str) -> bytes:
        return pkcs12.serialize_key_and_certificates(name.encode(), key, cert, [self.cert],
                                                     serialization.BestAvailableEncryption(password.encode()))

    def truststore_p12(self, password: str) -> bytes:
        return pkcs12.serialize_key_and_certificates(b"ca", None, None, [self.cert],
                                                     serialization.BestAvailableEncryption(password.encode()))


def broker_subject(name: str) -> x509.Name:
    return _name(name, o=None)


def client_subject(name: str) -> x509.Name:
    return _name(name, ou="clients", o="kbroker")


def make_certs(directory: Path, brokers: list[str], clients: list[str], sans: list[str] = (),
               pkcs12_password: str | None = None, key_password: str | None = None) -> dict[str, Path]:
    """Write the CA, broker and client keystores into ``directory``; returns name -> PEM keystore."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca = CertificateAuthority.load_or_create(directory)
    out: dict[str, Path] = {}
    for name, subject, names in ([(b, broker_subject(b), [b, *sans, "localhost", "127.0.0.1"]) for b in brokers]
                                 + [(c, client_subject(c), []) for c in clients]):
        key, cert = ca.issue(subject, names)
        path = directory / f"{name}.pem"
        _write(path, ca.keystore_pem(key, cert, key_password), private=True)
        out[name] = path
        if pkcs12_password:
            _write(directory / f"{name}.p12", ca.keystore_p12(name, key, cert, pkcs12_password), private=True)
    if pkcs12_password:
        _write(directory / "truststore.p12", ca.truststore_p12(pkcs12_password), private=False)
    return out


def run(args) -> int:
    directory = Path(args.dir)
    brokers = args.broker or ["localhost"]
    paths = make_certs(directory, brokers, args.clients or [], args.san or [], args.pkcs12, args.key_password)
    ca = directory / "ca.pem"
    print(f"CA: {ca} (its key: {directory / 'ca-key.pem'}; keep it private)")
    for name, path in paths.items():
        print(f"{'broker' if name in brokers else 'client'} {name}: {path}"
              + (f" and {directory / (name + '.p12')}" if args.pkcs12 else ""))
    first = paths[brokers[0]]
    print("\n# a broker's TLS listener (server.properties):")
    print(f"ssl.keystore.type=PEM\nssl.keystore.location={first}")
    if args.key_password:
        print("ssl.key.password=<the --key-password>")
    print(f"ssl.truststore.type=PEM\nssl.truststore.location={ca}")
    print("\n# a client (--command-config FILE):")
    print(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={ca}")
    for name in args.clients or []:
        print(f"# mutual TLS as {name}:\nssl.keystore.type=PEM\nssl.keystore.location={paths[name]}")
        break
    print(f"\n# kcat: -X security.protocol=ssl -X ssl.ca.location={ca}")
    return 0
