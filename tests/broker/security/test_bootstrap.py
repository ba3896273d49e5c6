"""Bootstrap metadata (KIP-900): ``--add-scram`` read as Kafka's ScramParser reads it, the
credential it makes logs in, and bootstrap.checkpoint written and read back (0600; a damaged
file named)."""

from __future__ import annotations

import base64
import os

import pytest

from broker.security.authenticator import AuthenticationFailed
from broker.security.bootstrap import (BOOTSTRAP_FILE, BootstrapError, FormatterError, bootstrap_records,
                                       parse_scram_argument, read_bootstrap, scram_credentials, seed_credentials,
                                       write_bootstrap)
from broker.security.credentials import SCRAM_SHA_256, SCRAM_SHA_512, CredentialCache, salted_password
from broker.security.scram import ScramServer
from protocol.client.sasl import ScramClient
from protocol.messages.metadata_records import MetadataRecordType as T


def logs_in(cache: CredentialCache, mechanism: str, user: str, password: str) -> bool:
    client, server = ScramClient(mechanism, user, password), ScramServer(mechanism, cache)
    try:
        message = client.initial()
        while message is not None:
            message = client.evaluate(server.evaluate(message))
    except AuthenticationFailed:
        return False
    return server.complete and server.authorization_id == user


def cache_of(*records) -> CredentialCache:
    cache = CredentialCache()
    for (mechanism, user), credential in scram_credentials(records).items():
        cache.put(mechanism, user, credential)
    return cache


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_password_entry_makes_a_credential_that_logs_in(mechanism):
    record = parse_scram_argument(f"{mechanism}=[name=alice,password=alice-secret]")
    assert record.type == T.USER_SCRAM_CREDENTIAL and record.name == "alice" and record.iterations == 4096
    assert len(record.salt) == 32
    cache = cache_of(record)
    assert logs_in(cache, mechanism, "alice", "alice-secret")
    assert not logs_in(cache, mechanism, "alice", "wrong")
    other = "SCRAM-SHA-512" if mechanism == "SCRAM-SHA-256" else "SCRAM-SHA-256"
    assert not logs_in(cache, other, "alice", "alice-secret")  # one mechanism's credential only


def test_quotes_iterations_salt_and_salted_password():
    record = parse_scram_argument('SCRAM-SHA-512=[name="bob",password="a b",iterations=8192]')
    assert record.name == "bob" and record.iterations == 8192
    assert logs_in(cache_of(record), "SCRAM-SHA-512", "bob", "a b")
    salt = b"fixed-salt-bytes"
    salted = salted_password(SCRAM_SHA_256, b"carol-secret", salt, 4096)
    record = parse_scram_argument(f"SCRAM-SHA-256=[name=carol,salt={base64.b64encode(salt).decode()},"
                                  f"saltedpassword={base64.b64encode(salted).decode()}]")
    assert bytes(record.salt) == salt
    assert logs_in(cache_of(record), "SCRAM-SHA-256", "carol", "carol-secret")
    # the same salt and iterations from a password give the same keys
    again = parse_scram_argument(f"SCRAM-SHA-256=[name=carol,salt={base64.b64encode(salt).decode()},"
                                 "password=carol-secret]")
    assert bytes(again.stored_key) == bytes(record.stored_key) and bytes(again.server_key) == bytes(record.server_key)


@pytest.mark.parametrize("argument,message", [
    ("SCRAM-SHA-256", "Failed to find equals sign in SCRAM argument 'SCRAM-SHA-256'"),
    ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
    ("SCRAM-SHA-256=name=a,password=b]", "Expected configuration string to start with ["),
    ("SCRAM-SHA-256=[name=a,password=b", "Expected configuration string to end with ]"),
    ("SCRAM-SHA-256=[password=b]", "You must supply 'name' to add-scram"),
    ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword' to add-scram"),
    ("SCRAM-SHA-256=[name=a,saltedpassword=AAAA]", "You must supply 'salt' with 'saltedpassword' to add-scram"),
    ("SCRAM-SHA-256=[name=a,password=b,colour=blue]", "Unknown SCRAM configurations: colour"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=x]", "Failed to parse iterations count: x"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=4095]",
     "The 'iterations' value must be >= 4096 for add-scram using SCRAM-SHA-256"),
    ("SCRAM-SHA-512=[name=a,password=b,iterations=16385]",
     "The 'iterations' value must be <= 16384 for add-scram using SCRAM-SHA-512"),
    ("SCRAM-SHA-256=[name=a,password]", "No equals sign found in SCRAM component: password"),
    ("SCRAM-SHA-256=[name=a,salt=%%%,password=b]", "Failed to decode given salt: %%%"),
])
def test_kafkas_errors(argument, message):
    with pytest.raises(FormatterError) as info:
        parse_scram_argument(argument)
    assert str(info.value) == message


def test_the_file_round_trips_private_and_seeds_a_cache(tmp_path):
    records = bootstrap_records([parse_scram_argument("SCRAM-SHA-512=[name=broker,password=broker-secret]"),
                                 parse_scram_argument("SCRAM-SHA-256=[name=admin,password=admin-secret]")], 7)
    path = write_bootstrap(tmp_path, records, 1_700_000_000_000)
    assert path == tmp_path / BOOTSTRAP_FILE
    assert os.stat(path).st_mode & 0o777 == 0o600
    read = read_bootstrap(tmp_path)
    assert [r.type for r in read] == [T.FEATURE_LEVEL, T.USER_SCRAM_CREDENTIAL, T.USER_SCRAM_CREDENTIAL]
    assert read[0].name == "metadata.version" and read[0].feature_level == 7
    cache = CredentialCache()
    assert seed_credentials(cache, tmp_path, "broker 1") == 2
    assert logs_in(cache, "SCRAM-SHA-512", "broker", "broker-secret")
    assert logs_in(cache, "SCRAM-SHA-256", "admin", "admin-secret")
    assert read_bootstrap(tmp_path / "nowhere") is None
    assert seed_credentials(CredentialCache(), tmp_path / "nowhere", "broker 1") == 0


@pytest.mark.parametrize("damage", [lambda b: b[:-3], lambda b: b[:20] + bytes([b[20] ^ 0xFF]) + b[21:], lambda b: b"x"])
def test_a_damaged_file_is_named(tmp_path, damage):
    path = write_bootstrap(tmp_path, bootstrap_records([parse_scram_argument(
        "SCRAM-SHA-512=[name=broker,password=broker-secret]")], 7), 0)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(BootstrapError) as info:
        read_bootstrap(tmp_path)
    assert str(path) in str(info.value)


def test_sha512_credentials_keep_their_mechanism():
    record = parse_scram_argument("SCRAM-SHA-512=[name=x,password=y]")
    assert record.mechanism == SCRAM_SHA_512.type_id
    assert parse_scram_argument("SCRAM-SHA-256=[name=x,password=y]").mechanism == SCRAM_SHA_256.type_id


def test_a_broker_starts_from_what_the_controller_gave_it_last(tmp_path, caplog):
    from broker.security.bootstrap import CREDENTIALS_FILE, write_credentials
    from broker.security.metadata import SecurityMetadata
    from protocol.messages.metadata_records import encode_record
    write_bootstrap(tmp_path, bootstrap_records([parse_scram_argument(
        "SCRAM-SHA-512=[name=broker,password=old-secret]")], 7), 0)
    # the controller's metadata: a full state, then a change; each one saved
    cache = CredentialCache()
    sm = SecurityMetadata(None, cache)
    sm.on_credentials_changed = lambda: write_credentials(tmp_path, cache, 0)
    sm.apply([encode_record(parse_scram_argument("SCRAM-SHA-512=[name=broker,password=new-secret]"))], full=True)
    assert os.stat(tmp_path / CREDENTIALS_FILE).st_mode & 0o777 == 0o600
    sm.apply([encode_record(parse_scram_argument("SCRAM-SHA-256=[name=alice,password=a]"))], full=False)
    restarted = CredentialCache()
    assert seed_credentials(restarted, tmp_path, "broker 1") == 2
    assert logs_in(restarted, "SCRAM-SHA-512", "broker", "new-secret")
    assert not logs_in(restarted, "SCRAM-SHA-512", "broker", "old-secret")
    assert logs_in(restarted, "SCRAM-SHA-256", "alice", "a")
    # every credential deleted: the saved copy says so, and the bootstrap is not used again
    sm.apply([], full=True)
    assert seed_credentials(CredentialCache(), tmp_path, "broker 1") == 0
    # a damaged copy: the bootstrap's, with a warning
    (tmp_path / CREDENTIALS_FILE).write_bytes(b"garbage")
    restarted = CredentialCache()
    assert seed_credentials(restarted, tmp_path, "broker 1") == 1
    assert logs_in(restarted, "SCRAM-SHA-512", "broker", "old-secret")
    assert any(CREDENTIALS_FILE in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


def test_acl_changes_alone_do_not_rewrite_the_copy(tmp_path):
    from broker.security.metadata import SecurityMetadata
    calls = []
    sm = SecurityMetadata(None, CredentialCache())
    sm.on_credentials_changed = lambda: calls.append(1)
    sm.apply([], full=False)
    assert calls == []
    sm.on_credentials_changed = lambda: (_ for _ in ()).throw(OSError(28, "No space left on device"))
    sm.apply([], full=True)  # a failed save is logged, not raised into UpdateMetadata
