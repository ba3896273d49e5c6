"""AclControlManager (Kafka's): the ACL bindings kept in the metadata log.

State: {id: StandardAcl}, changed only by replaying AccessControlEntryRecord (a binding with a
fresh random id) and RemoveAccessControlEntryRecord (by id). The controller's own authorizer,
when one is configured, is told every change (Kafka's ClusterMetadataAuthorizer), so the
controller checks requests against the same bindings; brokers get the records through
UpdateMetadata (the whole set in a full state, each change after).

CreateAcls: each binding is validated as Kafka's AclApis and AclControlManager.validateNewAcl
do — INVALID_REQUEST for a CLUSTER resource not named ``kafka-cluster``, an empty name, a
resource type, pattern type, operation or permission that cannot be stored (UNKNOWN, ANY,
MATCH) — and for a principal that is not ``<type>:<name>`` (kbroker's check: Kafka accepts
it and then fails every check that meets it). A binding that exists already succeeds without
a record. DeleteAcls: each filter deletes every binding it matches (one record per binding,
even when several filters match it) and lists them.
"""

from __future__ import annotations

import logging
import random
import uuid
from typing import Any

from broker.security.authorizer import (CLUSTER_NAME, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
                                        ResourceType, StandardAcl, StandardAuthorizer)
from protocol.errors import ErrorCode
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType as T, make_record

from .controller_result import ControllerResult

log = logging.getLogger("kbroker.controller.acls")


def acl_record(acl_id: uuid.UUID, acl: StandardAcl) -> ApiMessageAndVersion:
    return make_record(T.ACCESS_CONTROL_ENTRY, id=acl_id, resource_type=int(acl.resource_type),
                       resource_name=acl.resource_name, pattern_type=int(acl.pattern_type), principal=acl.principal,
                       host=acl.host, operation=int(acl.operation), permission_type=int(acl.permission_type))


def validate_new_acl(acl: StandardAcl) -> str | None:
    """Why ``acl`` cannot be created (INVALID_REQUEST), or None."""
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {acl.permission_type.name}"
    kind, sep, name = acl.principal.partition(":")
    if not sep or not kind or not name:
        return f"Invalid principal {acl.principal!r}: expected <type>:<name>, e.g. User:alice"
    return None


class AclControlManager:
    def __init__(self, authorizer: StandardAuthorizer | None = None, rng: random.Random | None = None) -> None:
        self.acls: dict[uuid.UUID, StandardAcl] = {}
        self._existing: set[StandardAcl] = set()
        self.authorizer = authorizer
        self.rng = rng or random.Random()

    # -- replay ----------------------------------------------------------------------------

    def replay(self, record: ApiMessageAndVersion) -> None:
        if record.type == T.ACCESS_CONTROL_ENTRY:
            acl = StandardAcl.from_record(record)
            self.acls[record.id] = acl
            self._existing.add(acl)
            if self.authorizer is not None:
                self.authorizer.add_acl(record.id, acl)
        elif record.type == T.REMOVE_ACCESS_CONTROL_ENTRY:
            acl = self.acls.pop(record.id, None)
            if acl is None:
                raise ValueError(f"RemoveAccessControlEntryRecord for {record.id}: no ACL has that id")
            self._existing.discard(acl)
            if self.authorizer is not None:
                self.authorizer.remove_acl(record.id)
        else:
            raise ValueError(f"not an ACL record: {record!r}")

    # -- decisions -------------------------------------------------------------------------

    def _new_id(self, taken: set[uuid.UUID]) -> uuid.UUID:
        while True:
            acl_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
            if acl_id not in self.acls and acl_id not in taken:
                return acl_id

    def create_acls(self, bindings: list[StandardAcl]) -> ControllerResult:
        """Results (error code, message) per binding, in order."""
        records, results = [], []
        new: set[StandardAcl] = set()
        ids: set[uuid.UUID] = set()
        for acl in bindings:
            problem = validate_new_acl(acl)
            if problem is not None:
                results.append((ErrorCode.INVALID_REQUEST, problem))
                continue
            if acl not in self._existing and acl not in new:
                new.add(acl)
                acl_id = self._new_id(ids)
                ids.add(acl_id)
                records.append(acl_record(acl_id, acl))
                log.info("creating ACL %s", acl)
            results.append((ErrorCode.NONE, None))
        return ControllerResult(records, results)

    def delete_acls(self, filters: list[AclBindingFilter]) -> ControllerResult:
        """Per filter: (error code, message, [matching bindings])."""
        records, results = [], []
        removed: set[uuid.UUID] = set()
        for f in filters:
            if f.is_unknown():
                results.append((ErrorCode.INVALID_REQUEST, "Unknown patternFilter." if f.pattern_type == 0
                                or f.resource_type == 0 else "Unknown entryFilter.", []))
                continue
            matched = [(i, acl) for i, acl in self.acls.items() if f.matches(acl)]
            for acl_id, acl in matched:
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(make_record(T.REMOVE_ACCESS_CONTROL_ENTRY, id=acl_id))
                    log.info("deleting ACL %s", acl)
            results.append((ErrorCode.NONE, None, [acl for _i, acl in matched]))
        return ControllerResult(records, results)

    def snapshot_records(self) -> list[ApiMessageAndVersion]:
        return [acl_record(i, acl) for i, acl in self.acls.items()]

    def state(self) -> dict[Any, StandardAcl]:
        return dict(self.acls)
