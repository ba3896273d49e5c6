"""ScramControlManager (Kafka's): SCRAM credentials kept in the metadata log (KIP-554).

State: {(user, mechanism type): ScramCredential}, changed only by replaying
UserScramCredentialRecord (salt, StoredKey, ServerKey, iterations: never the password) and
RemoveUserScramCredentialRecord. Brokers get the records through UpdateMetadata and fill
their CredentialCache from them.

AlterUserScramCredentials, as Kafka's controller answers it: a user named twice in a request
(deletions and upsertions together) is DUPLICATE_RESOURCE; an empty name
UNACCEPTABLE_CREDENTIAL; an unknown mechanism UNSUPPORTED_SASL_MECHANISM; iterations below the
mechanism's minimum (4096) or above 16384 UNACCEPTABLE_CREDENTIAL; deleting a credential that
does not exist RESOURCE_NOT_FOUND. The client sends the salted password; StoredKey and ServerKey
are derived from it here. Results: successful deletions, successful upsertions, then errors.
"""

from __future__ import annotations

import logging

from broker.security.credentials import MECHANISMS_BY_TYPE, ScramCredential, credential_from_salted_password
from protocol.errors import ErrorCode
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType as T, make_record

from .controller_result import ControllerResult

log = logging.getLogger("kbroker.controller.scram")

MAX_ITERATIONS = 16384  # Kafka's ScramControlManager.MAX_ITERATIONS
DUPLICATE = "A user credential cannot be altered twice in the same request"


def credential_record(user: str, mechanism: int, credential: ScramCredential) -> ApiMessageAndVersion:
    return make_record(T.USER_SCRAM_CREDENTIAL, name=user, mechanism=mechanism, salt=credential.salt,
                       stored_key=credential.stored_key, server_key=credential.server_key,
                       iterations=credential.iterations)


class ScramControlManager:
    def __init__(self) -> None:
        self.credentials: dict[tuple[str, int], ScramCredential] = {}

    def replay(self, record: ApiMessageAndVersion) -> None:
        if record.type == T.USER_SCRAM_CREDENTIAL:
            key = (record.name, record.mechanism)
            existed = key in self.credentials
            self.credentials[key] = ScramCredential(bytes(record.salt), bytes(record.stored_key),
                                                    bytes(record.server_key), record.iterations)
            log.info("%s the SCRAM credential of %r (%s)", "changed" if existed else "created", record.name,
                     _name(record.mechanism))
        elif record.type == T.REMOVE_USER_SCRAM_CREDENTIAL:
            if self.credentials.pop((record.name, record.mechanism), None) is None:
                raise ValueError(f"RemoveUserScramCredentialRecord: no credential of {record.name!r} "
                                 f"({_name(record.mechanism)})")
            log.info("removed the SCRAM credential of %r (%s)", record.name, _name(record.mechanism))
        else:
            raise ValueError(f"not a SCRAM record: {record!r}")

    @staticmethod
    def _check_user_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
        if not name:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
        if mechanism not in MECHANISMS_BY_TYPE:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
        return None

    def alter_credentials(self, deletions, upsertions) -> ControllerResult:
        """``deletions``: [(name, mechanism)]; ``upsertions``: [(name, mechanism, iterations,
        salt, salted password)]. The response body's ``results``."""
        errors: dict[str, tuple[int, str]] = {}
        to_delete: dict[str, tuple[str, int]] = {}
        to_upsert: dict[str, tuple] = {}
        for name, mechanism in deletions:
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None:
                errors[name] = (ErrorCode.DUPLICATE_RESOURCE, DUPLICATE)
                continue
            problem = self._check_user_and_mechanism(name, mechanism)
            if problem is None and (name, mechanism) not in self.credentials:
                problem = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
            if problem is not None:
                errors[name] = problem
            else:
                to_delete[name] = (name, mechanism)
        for upsertion in upsertions:
            name, mechanism, iterations = upsertion[0], upsertion[1], upsertion[2]
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
                errors[name] = (ErrorCode.DUPLICATE_RESOURCE, DUPLICATE)
                continue
            problem = self._check_user_and_mechanism(name, mechanism)
            if problem is None:
                if iterations < MECHANISMS_BY_TYPE[mechanism].min_iterations:
                    problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
                elif iterations > MAX_ITERATIONS:
                    problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            if problem is not None:
                errors[name] = problem
            else:
                to_upsert[name] = upsertion
        records, results = [], []
        for name, mechanism in to_delete.values():
            records.append(make_record(T.REMOVE_USER_SCRAM_CREDENTIAL, name=name, mechanism=mechanism))
            results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None})
        for name, mechanism, iterations, salt, salted in to_upsert.values():
            credential = credential_from_salted_password(MECHANISMS_BY_TYPE[mechanism], bytes(salted), bytes(salt),
                                                         iterations)
            records.append(credential_record(name, mechanism, credential))
            results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None})
        for name, (code, message) in errors.items():
            results.append({"user": name, "error_code": code, "error_message": message})
        return ControllerResult(records, results)

    def snapshot_records(self) -> list[ApiMessageAndVersion]:
        return [credential_record(user, mechanism, c) for (user, mechanism), c in sorted(self.credentials.items())]


def _name(mechanism: int) -> str:
    m = MECHANISMS_BY_TYPE.get(mechanism)
    return m.mechanism_name if m is not None else f"mechanism {mechanism}"
