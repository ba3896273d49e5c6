"""``kbroker storage format|random-uuid`` (Kafka's kafka-storage), run as a command: what it
writes where (a controller's metadata.log.dir, a broker's log.dirs), the bootstrap metadata
a controller then starts from, and the refusals (a formatted directory, a bad cluster id, a bad
``--add-scram``), with kafka-storage's messages."""

from __future__ import annotations

import os
import subprocess

from broker.security.bootstrap import BOOTSTRAP_FILE, read_bootstrap
from broker.config import read_properties
from protocol.messages.metadata_records import MetadataRecordType as T

from .test_cli import KBROKER, serve_env

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def storage(*args: str, expect: int = 0) -> subprocess.CompletedProcess:
    result = subprocess.run([KBROKER, "storage", *args], capture_output=True, text=True, env=serve_env(), timeout=60)
    assert result.returncode == expect, (result.returncode, result.stdout, result.stderr)
    return result


def test_random_uuid_is_a_cluster_id():
    ids = {storage("random-uuid").stdout.strip() for _ in range(2)}
    assert len(ids) == 2 and all(len(i) == 22 for i in ids)
    storage("format", "--override", "process.roles=controller", "--override", "node.id=1",
            "--override", "metadata.log.dir=/nonexistent-dir-never-made", "-t", "not-an-id", expect=2)
    assert not os.path.exists("/nonexistent-dir-never-made")


def test_format_a_controller_then_a_broker(tmp_path):
    controller_dir = tmp_path / "controller"
    out = storage("format", "--override", "process.roles=controller", "--override", "node.id=3000",
                  "--override", f"metadata.log.dir={controller_dir}", "-t", CLUSTER_ID,
                  "--add-scram", "SCRAM-SHA-512=[name=broker,password=broker-secret]",
                  "-S", "SCRAM-SHA-256=[name=admin,password=admin-secret,iterations=8192]").stdout
    assert out == (f"Formatting metadata directory {controller_dir} with metadata.version 3.3-IV3 "
                   "(SCRAM credentials of admin, broker).\n")
    assert read_properties(controller_dir / "meta.properties") == {"version": "1", "node.id": "3000",
                                                                   "cluster.id": CLUSTER_ID}
    records = read_bootstrap(controller_dir)
    assert [(r.type, getattr(r, "name", None)) for r in records] == [
        (T.FEATURE_LEVEL, "metadata.version"), (T.USER_SCRAM_CREDENTIAL, "broker"), (T.USER_SCRAM_CREDENTIAL, "admin")]
    assert records[2].iterations == 8192
    assert os.stat(controller_dir / BOOTSTRAP_FILE).st_mode & 0o777 == 0o600
    assert "broker-secret" not in (controller_dir / BOOTSTRAP_FILE).read_bytes().decode("latin-1")
    # again: refused, as kafka-storage refuses it; --ignore-formatted leaves it alone
    err = storage("format", "--override", "process.roles=controller", "--override", "node.id=3000",
                  "--override", f"metadata.log.dir={controller_dir}", "-t", CLUSTER_ID, expect=1).stderr
    assert f"Log directory {controller_dir} is already formatted. Use --ignore-formatted" in err
    before = (controller_dir / BOOTSTRAP_FILE).read_bytes()
    out = storage("format", "--override", "process.roles=controller", "--override", "node.id=3000",
                  "--override", f"metadata.log.dir={controller_dir}", "-t", CLUSTER_ID, "-g",
                  "-S", "SCRAM-SHA-512=[name=other,password=x]").stdout
    assert out == "All of the log directories are already formatted.\n"
    assert (controller_dir / BOOTSTRAP_FILE).read_bytes() == before
    # a broker with two log dirs: both identified, the bootstrap copy in the first (its metadata.log.dir)
    a, b = tmp_path / "a", tmp_path / "b"
    out = storage("format", "--override", "process.roles=broker", "--override", "node.id=1",
                  "--override", f"log.dirs={a},{b}", "-t", CLUSTER_ID,
                  "-S", "SCRAM-SHA-512=[name=broker,password=broker-secret]").stdout
    assert out.splitlines() == [
        f"Formatting metadata directory {a} with metadata.version 3.3-IV3 (SCRAM credentials of broker).",
        f"Formatting data directory {b} with metadata.version 3.3-IV3."]
    for d in (a, b):
        assert read_properties(d / "meta.properties")["cluster.id"] == CLUSTER_ID
    assert read_bootstrap(a) is not None and read_bootstrap(b) is None


def test_refusals(tmp_path):
    base = ["format", "--override", "process.roles=controller", "--override", f"metadata.log.dir={tmp_path / 'c'}",
            "-t", CLUSTER_ID]
    err = storage(*base, expect=2).stderr
    assert "node.id: you must specify a valid non-negative node ID" in err
    base += ["--override", "node.id=1"]
    err = storage(*base, "-S", "SCRAM-SHA-512=[name=a,password=b,iterations=100]", expect=2).stderr
    assert "--add-scram: The 'iterations' value must be >= 4096 for add-scram using SCRAM-SHA-512" in err
    err = storage(*base, "-S", "SCRAM-SHA-1=[name=a,password=b]", expect=2).stderr
    assert "The add-scram mechanism SCRAM-SHA-1 is not supported." in err
    assert not (tmp_path / "c").exists()  # nothing written when an argument is bad
