"""docker-compose.yml + docker-compose.secure.yml on the Docker engine (issue 25 §6): the one-shot
``certs`` service makes the certificates into a volume at start (the image holds none), the
brokers' published EXTERNAL listeners are SASL_SSL with SCRAM, brokers and the controller
authenticate each other with their certificates, the authorizer is on, and the one-shot
``admin`` service has created the admin user. From the host, with the CA certificate and the
password copied out of the volume (``docker cp``), kcat round-trips records as admin; plaintext
and a wrong password are refused, and a user without ACLs gets TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.compose import REPO, SECURE_FILE, ComposeCluster, docker, running, wait_for

N = 200


@pytest.fixture(scope="module")
def secure_cluster() -> Iterator[ComposeCluster]:
    with running(ComposeCluster(files=(SECURE_FILE,), one_shot=("certs", "admin"))) as stack:
        yield stack


@pytest.fixture(scope="module")
def admin_files(secure_cluster, tmp_path_factory) -> tuple[Path, str]:
    """The CA certificate and admin's password, out of the secrets volume (through broker-1, which mounts it)."""
    out = tmp_path_factory.mktemp("secrets")
    container = secure_cluster.container("broker-1")
    for name in ("ca.pem", "admin.password"):
        docker("cp", f"{container}:/etc/kbroker/secrets/{name}", str(out / name))
    return out / "ca.pem", (out / "admin.password").read_text().strip()


def kcat(*argv: str, data: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *argv], input=data, capture_output=True, text=True, timeout=timeout)


def sasl(cluster: ComposeCluster, ca: Path, user: str, password: str) -> list[str]:
    return ["-b", cluster.bootstrap, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-512",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}", "-X", f"ssl.ca.location={ca}"]


def test_the_secrets_are_in_the_volume_not_in_the_image(secure_cluster):
    names = ("ca.pem", "ca-key.pem", "controller.pem", "broker-1.pem", "admin.pem", "admin.password")
    find = ["find", "/", "-xdev", "-type", "f", "("] + " -o ".join(f"-name {n}" for n in names).split() + [")"]
    assert docker("run", "--rm", "--user", "root", "--entrypoint", find[0], "kbroker:latest", *find[1:]).stdout.strip() == ""
    # in the volume: the keys and the password are kbroker's only (0600), as kbroker certs makes them
    listing = docker("exec", secure_cluster.container("broker-1"), "ls", "-ln", "/etc/kbroker/secrets").stdout
    modes = {line.split()[-1]: (line.split()[0], line.split()[2]) for line in listing.splitlines()[1:]}
    for name in names:
        assert modes[name] == ("-rw-------", "999"), (name, modes)


def test_kcat_round_trips_as_admin_with_scram_over_tls(secure_cluster, admin_files, kcat_path):
    ca, password = admin_files
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    data = "".join(f"{topic}-{i}\n" for i in range(N))
    produced = kcat(*sasl(secure_cluster, ca, "admin", password), "-P", "-t", topic, "-X", "acks=all", data=data)
    assert produced.returncode == 0, produced.stderr
    read = kcat(*sasl(secure_cluster, ca, "admin", password), "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert read.returncode == 0, read.stderr
    assert sorted(read.stdout.splitlines()) == sorted(data.splitlines())
    # Replicated to the three brokers over the mutual TLS INTERNAL listener, the brokers'
    # certificates mapped to their principals; the brokers registered with the controller as theirs.
    def in_sync():
        listing = kcat(*sasl(secure_cluster, ca, "admin", password), "-L", "-t", topic).stdout
        isrs = [line.split("isrs: ")[1].split(",") for line in listing.splitlines() if "isrs: " in line]
        return " 3 brokers:" in listing and len(isrs) == 3 and all(len(i) == 3 for i in isrs)

    wait_for(in_sync, 30, "three partitions with three replicas in sync")
    logs = secure_cluster.compose("logs", "--no-color", "controller", "broker-1", "broker-2", "broker-3").stdout
    for principal, listener in (("broker-1", "CONTROLLER"), ("controller", "INTERNAL")):
        assert f"authenticated by its TLS certificate as User:{principal} on listener {listener}" in logs, \
            (principal, listener)


def test_plaintext_and_wrong_passwords_are_refused(secure_cluster, admin_files, kcat_path):
    ca, _password = admin_files
    plain = kcat("-b", secure_cluster.external(1), "-L", "-m", "3")
    assert plain.returncode != 0 and "Failed to acquire metadata" in plain.stderr, plain.stderr
    wrong = kcat(*sasl(secure_cluster, ca, "admin", "wrong"), "-L", "-m", "5")
    assert wrong.returncode != 0 and "Authentication failed during authentication due to invalid credentials " \
        "with SASL mechanism SCRAM-SHA-512" in wrong.stderr, wrong.stderr


def test_a_user_without_acls_is_refused(secure_cluster, admin_files, kcat_path, tmp_path):
    ca, password = admin_files
    config = tmp_path / "admin.properties"
    config.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
                      f"sasl.password={password}\nssl.ca.location={ca}\n")
    made = subprocess.run([sys.executable, "-m", "cli", "users", "scram", "set", "-u", "bob", "--add-config",
                           "SCRAM-SHA-512=[password=bob-secret]", "-b", secure_cluster.external(1),
                           "--command-config", str(config)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert made.returncode == 0, made.stderr

    def bob_refused():
        out = kcat(*sasl(secure_cluster, ca, "bob", "bob-secret"), "-P", "-t", "bobs", data="x\n")
        return out.returncode != 0 and "Topic authorization failed" in out.stderr

    wait_for(bob_refused, 30, "bob logged in and refused (TOPIC_AUTHORIZATION_FAILED)", interval_s=1)
