"""Bootstrap metadata (Kafka's KIP-900): records written before a cluster's first start.

``kbroker storage format --add-scram 'SCRAM-SHA-512=[name=broker,password=broker-secret]'``
(cli/storage.py, Kafka's ``kafka-storage format``) writes them into ``bootstrap.checkpoint``
in the node's ``metadata.log.dir``: a FeatureLevelRecord of metadata.version, then one
UserScramCredentialRecord per ``--add-scram`` (salt, StoredKey, ServerKey, iterations: never
the password). The file is RecordBatch v2 batches of metadata records, as the controller's
snapshots are.

Who reads it:

* the controller, at its first start only (an empty metadata log): the records are appended
  to the log with its first records, so the credentials exist, and replay onto every broker,
  as any credential made by AlterUserScramCredentials does. Once the log holds anything, the
  file is ignored (Kafka's QuorumController does the same);
* a broker, until the controller's first metadata arrives: its SCRAM credentials seed the
  broker's CredentialCache. kbroker's controller pushes LeaderAndIsr/UpdateMetadata to
  brokers over their inter-broker listener (Kafka's brokers pull metadata instead), so a
  broker whose inter-broker listener runs SCRAM must check the controller's login before it
  has heard anything from it: with the same ``--add-scram`` as the controller's, it can.
  The controller's first full state then replaces them. From then on the broker keeps the
  credentials the controller gave it in ``scram-credentials.checkpoint`` beside the bootstrap
  file, and starts from that copy next time (as a Kafka broker starts from its local copy of
  the metadata log): a password changed since the bootstrap is the one a restarted broker
  checks;
* a standby controller (controller.metadata.store=zookeeper) while no term of its own is
  active: its SCRAM listener checks them, so brokers can log in and be told NOT_CONTROLLER.

``parse_scram_argument`` reads ``--add-scram`` as Kafka's ScramParser does.
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
from pathlib import Path
from typing import Iterable

from protocol.errors import KafkaError
from protocol.messages.metadata_records import (ApiMessageAndVersion, MetadataRecordError, MetadataRecordType as T,
                                                decode_record, encode_record, make_record)
from protocol.records import Record, batch_body, build_batch, check_batch, decode_records
from storage.checkpoint import write_atomically

from .credentials import (MECHANISMS, MECHANISMS_BY_TYPE, CredentialCache, ScramCredential,
                          credential_from_salted_password, salted_password)

log = logging.getLogger("kbroker.security")

BOOTSTRAP_FILE = "bootstrap.checkpoint"
# A broker's copy of the SCRAM credentials the controller's metadata last gave it.
CREDENTIALS_FILE = "scram-credentials.checkpoint"
METADATA_VERSION_FEATURE = "metadata.version"
DEFAULT_ITERATIONS = 4096  # Kafka's ScramParser default


class FormatterError(ValueError):
    """A bad ``--add-scram`` argument, or a directory that cannot be formatted (Kafka's FormatterException)."""


class BootstrapError(ValueError):
    """bootstrap.checkpoint exists but cannot be read."""


# -- --add-scram -----------------------------------------------------------------------------

def parse_scram_argument(text: str) -> ApiMessageAndVersion:
    """``SCRAM-SHA-256=[name=alice,password=alice-secret]`` (or ``iterations=8192``,
    ``salt=<base64>``, ``saltedpassword=<base64>`` with a salt) -> a UserScramCredentialRecord.
    Components are split at commas and a value wholly in double quotes loses them, as in
    Kafka's ScramParser; iterations default to 4096 and must lie in the mechanism's bounds."""
    text = text.strip()
    mechanism_name, sep, config = text.partition("=")
    if not sep:
        raise FormatterError(f"Failed to find equals sign in SCRAM argument '{text}'")
    mechanism = MECHANISMS.get(mechanism_name)
    if mechanism is None:
        raise FormatterError(f"The add-scram mechanism {mechanism_name} is not supported.")
    if not config.startswith("["):
        raise FormatterError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise FormatterError("Expected configuration string to end with ]")
    components: dict[str, str] = {}
    for component in config[1:-1].split(","):
        key, sep, value = component.partition("=")
        if not sep:
            raise FormatterError(f"No equals sign found in SCRAM component: {component}")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        components[key] = value
    name = components.pop("name", None)
    if name is None:
        raise FormatterError("You must supply 'name' to add-scram")
    salt = _base64(components.pop("salt", None), "salt")
    iterations_text = components.pop("iterations", None)
    try:
        iterations = DEFAULT_ITERATIONS if iterations_text is None else int(iterations_text)
    except ValueError:
        raise FormatterError(f"Failed to parse iterations count: {iterations_text}") from None
    password = components.pop("password", None)
    salted = _base64(components.pop("saltedpassword", None), "saltedPassword")
    if password is None:
        if salted is None:
            raise FormatterError("You must supply one of 'password' or 'saltedpassword' to add-scram")
        if salt is None:
            raise FormatterError("You must supply 'salt' with 'saltedpassword' to add-scram")
    if components:
        raise FormatterError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}")
    if iterations < mechanism.min_iterations:
        raise FormatterError(f"The 'iterations' value must be >= {mechanism.min_iterations} for add-scram using "
                             f"{mechanism.mechanism_name}")
    if iterations > mechanism.max_iterations:
        raise FormatterError(f"The 'iterations' value must be <= {mechanism.max_iterations} for add-scram using "
                             f"{mechanism.mechanism_name}")
    if salt is None:
        salt = secrets.token_bytes(32)
    if salted is None:
        assert password is not None
        salted = salted_password(mechanism, password.encode("utf-8"), salt, iterations)
    credential = credential_from_salted_password(mechanism, salted, salt, iterations)
    return make_record(T.USER_SCRAM_CREDENTIAL, name=name, mechanism=mechanism.type_id, salt=credential.salt,
                       stored_key=credential.stored_key, server_key=credential.server_key,
                       iterations=credential.iterations)


def _base64(value: str | None, what: str) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise FormatterError(f"Failed to decode given {what}: {value}") from None


# -- the file --------------------------------------------------------------------------------

def bootstrap_records(scram_records: Iterable[ApiMessageAndVersion], metadata_version: int) -> list[ApiMessageAndVersion]:
    """What ``format`` writes: metadata.version first (as Kafka's BootstrapMetadata), then the credentials."""
    return [make_record(T.FEATURE_LEVEL, name=METADATA_VERSION_FEATURE, feature_level=metadata_version),
            *scram_records]


def write_bootstrap(directory: Path, records: list[ApiMessageAndVersion], now_ms: int) -> Path:
    """Write ``directory/bootstrap.checkpoint`` atomically, readable by its owner only (it
    holds what an offline guess at a password would be checked against)."""
    data = build_batch([Record(value=encode_record(r), timestamp=now_ms) for r in records], base_offset=0)
    path = Path(directory) / BOOTSTRAP_FILE
    write_atomically(path, data, mode=0o600)
    return path


def read_bootstrap(directory: Path) -> list[ApiMessageAndVersion] | None:
    """The records of ``directory/bootstrap.checkpoint``; None when there is no such file.
    Raises BootstrapError naming the file when it does not decode."""
    return _read_records(Path(directory) / BOOTSTRAP_FILE)


def _read_records(path: Path) -> list[ApiMessageAndVersion] | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BootstrapError(f"{path}: {exc.strerror}") from None
    records: list[ApiMessageAndVersion] = []
    pos = 0
    try:
        while pos < len(data):
            header = check_batch(data, pos, len(data))
            for record in decode_records(header, batch_body(data, pos, header)):
                if record.value is None:
                    raise MetadataRecordError("a record without a value")
                records.append(decode_record(record.value))
            pos += header.size
    except (KafkaError, ValueError) as exc:  # a torn or damaged file (MetadataRecordError is a ValueError)
        raise BootstrapError(f"{path}: not a metadata records file ({exc})") from None
    return records


def scram_credentials(records: Iterable[ApiMessageAndVersion]) -> dict[tuple[str, str], ScramCredential]:
    """(mechanism name, user) -> credential, of the UserScramCredentialRecords among ``records``."""
    out: dict[tuple[str, str], ScramCredential] = {}
    for r in records:
        if r.type == T.USER_SCRAM_CREDENTIAL and r.mechanism in MECHANISMS_BY_TYPE:
            out[(MECHANISMS_BY_TYPE[r.mechanism].mechanism_name, r.name)] = ScramCredential(
                bytes(r.salt), bytes(r.stored_key), bytes(r.server_key), r.iterations)
    return out


def write_credentials(directory: Path, cache: CredentialCache, now_ms: int) -> Path:
    """Save the broker's SCRAM credentials (those the controller's metadata gave it) as
    ``directory/scram-credentials.checkpoint``: what it starts from next time (0600; atomic,
    not fsynced: a copy lost with the page cache leaves the previous one)."""
    records = [make_record(T.USER_SCRAM_CREDENTIAL, name=user, mechanism=mechanism.type_id, salt=c.salt,
                           stored_key=c.stored_key, server_key=c.server_key, iterations=c.iterations)
               for name, mechanism in MECHANISMS.items() for user, c in sorted(cache.users(name).items())]
    Path(directory).mkdir(parents=True, exist_ok=True)
    path = Path(directory) / CREDENTIALS_FILE
    records = records or [make_record(T.NO_OP)]  # a batch needs a record: none means no credential
    write_atomically(path, build_batch([Record(value=encode_record(r), timestamp=now_ms) for r in records]),
                     sync=False, mode=0o600)
    return path


def seed_credentials(cache: CredentialCache, directory: Path, who: str) -> int:
    """Put the SCRAM credentials this broker starts with into ``cache``: those the controller
    gave it last time (scram-credentials.checkpoint), else the bootstrap file's; returns how
    many. They serve until the controller's first metadata replaces them."""
    source = Path(directory) / CREDENTIALS_FILE
    try:
        records = _read_records(source)
    except BootstrapError as exc:
        log.warning("%s: %s; starting from the bootstrap credentials", who, exc)
        records = None
    if records is None:
        source = Path(directory) / BOOTSTRAP_FILE
        records = read_bootstrap(directory)
    credentials = scram_credentials(records or [])
    for (mechanism, user), credential in credentials.items():
        cache.put(mechanism, user, credential)
    if credentials:
        users = sorted({user for _m, user in credentials})
        log.info("%s: SCRAM credentials of %s from %s, until the controller's metadata arrives", who,
                 ", ".join(repr(u) for u in users), source)
    return len(credentials)
