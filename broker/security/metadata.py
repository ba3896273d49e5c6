"""The security part of the controller's metadata on a broker: ACL bindings and SCRAM
credentials, replayed from the controller's records.

The controller sends them inside UpdateMetadata (kbroker's tagged field, see
protocol/messages/control.py): the whole set in a full state — which replaces what the broker
had — and the records of each change in the incremental requests that follow, replayed in
order. ``SecurityMetadata.apply`` does both: AccessControlEntryRecord /
RemoveAccessControlEntryRecord go to the authorizer's bindings (ignored when no authorizer is
configured: nothing reads them), UserScramCredentialRecord / RemoveUserScramCredentialRecord
to the broker's one ``CredentialCache``, which the SCRAM authenticator reads.

``describe_acls_resources`` and ``describe_scram_credentials`` answer DescribeAcls and
DescribeUserScramCredentials from them.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from protocol.errors import ErrorCode
from protocol.messages.metadata_records import MetadataRecordError, MetadataRecordType as T, decode_record

from .authorizer import StandardAcl, StandardAuthorizer
from .credentials import MECHANISMS, MECHANISMS_BY_TYPE, CredentialCache, ScramCredential

log = logging.getLogger("kbroker.security")

SECURITY_RECORD_TYPES = frozenset({T.ACCESS_CONTROL_ENTRY, T.REMOVE_ACCESS_CONTROL_ENTRY, T.USER_SCRAM_CREDENTIAL,
                                   T.REMOVE_USER_SCRAM_CREDENTIAL})
# What UpdateMetadata's records carry (tag 10001): the security records and the client quotas
# (ClientQuotaRecord: this broker's ``client_quotas``, {entity: {key: value}}).
# and the dynamic broker configs (ConfigRecords of resource type 4, given to ``on_broker_configs``).
BROKER_RECORD_TYPES = SECURITY_RECORD_TYPES | {T.CLIENT_QUOTA, T.CONFIG}


class SecurityMetadata:
    def __init__(self, authorizer: StandardAuthorizer | None, credential_cache: CredentialCache) -> None:
        self.authorizer = authorizer
        self.credential_cache = credential_cache
        # Called after the SCRAM credentials changed (a full state, or a credential record):
        # the broker keeps a copy on disk for its next start (broker/security/bootstrap.py).
        self.on_credentials_changed: Callable[[], None] | None = None
        # The client quotas, {frozenset((entity type, name or None), ...): {key: value}}, kept
        # in place (the quota managers hold this dict); told after every change.
        self.client_quotas: dict[frozenset, dict[str, float]] = {}
        self.on_quotas_changed: Callable[[], None] | None = None
        # Given the dynamic broker config records (and whether they are the whole set):
        # broker/dynamic_config.py applies them.
        self.on_broker_configs: Callable[[list, bool], None] | None = None

    def apply(self, encoded_records: Iterable[bytes], full: bool) -> None:
        """Replay the records (each framed as in the metadata log); ``full``: they are the
        whole set, replacing the current one. A record that does not decode is logged and
        skipped (the rest still applies)."""
        records = []
        for raw in encoded_records:
            try:
                record = decode_record(raw)
            except MetadataRecordError as exc:
                log.warning("security record from the controller skipped: %s", exc)
                continue
            if record.type not in BROKER_RECORD_TYPES:
                log.warning("unexpected %s among the security records; skipped", record.message.name)
                continue
            records.append(record)
        self._apply_quotas([r for r in records if r.type == T.CLIENT_QUOTA], full)
        configs = [r for r in records if r.type == T.CONFIG]
        if self.on_broker_configs is not None and (configs or full):
            self.on_broker_configs(configs, full)
        authorizer, cache = self.authorizer, self.credential_cache
        if full:
            acls = {r.id: StandardAcl.from_record(r) for r in records if r.type == T.ACCESS_CONTROL_ENTRY}
            if authorizer is not None:
                before = authorizer.acl_count()
                authorizer.load(acls)
                if before or acls:
                    log.info("ACLs loaded from the controller: %d binding(s)", len(acls))
            cache.clear()
            for r in records:
                if r.type == T.USER_SCRAM_CREDENTIAL:
                    self._put_credential(r)
            self._credentials_changed()
            return
        added = removed = 0
        credentials = False
        for r in records:
            if r.type == T.ACCESS_CONTROL_ENTRY:
                if authorizer is not None:
                    authorizer.add_acl(r.id, StandardAcl.from_record(r))
                    added += 1
            elif r.type == T.REMOVE_ACCESS_CONTROL_ENTRY:
                if authorizer is not None and authorizer.remove_acl(r.id) is not None:
                    removed += 1
            elif r.type == T.USER_SCRAM_CREDENTIAL:
                self._put_credential(r)
                credentials = True
                log.info("SCRAM credential of user %r (%s) set", r.name, _mechanism_name(r.mechanism))
            elif r.type == T.REMOVE_USER_SCRAM_CREDENTIAL:
                mechanism = MECHANISMS_BY_TYPE.get(r.mechanism)
                if mechanism is not None:
                    cache.remove(mechanism.mechanism_name, r.name)
                credentials = True
                log.info("SCRAM credential of user %r (%s) removed", r.name, _mechanism_name(r.mechanism))
        if added or removed:
            log.info("ACLs changed: %d added, %d removed (%d now)", added, removed,
                     authorizer.acl_count() if authorizer is not None else 0)
        if credentials:
            self._credentials_changed()

    def _apply_quotas(self, records: list, full: bool) -> None:
        quotas = self.client_quotas
        if not records and (not full or not quotas):
            return
        if full:
            quotas.clear()
        for r in records:
            entity = frozenset((e.entity_type, e.entity_name) for e in r.entity)
            if r.remove:
                values = quotas.get(entity)
                if values is not None:
                    values.pop(r.key, None)
                    if not values:
                        del quotas[entity]
            else:
                quotas.setdefault(entity, {})[r.key] = r.value
        if not full:
            log.info("client quotas changed: %d record(s), %d entities now", len(records), len(quotas))
        elif quotas:
            log.info("client quotas loaded from the controller: %d entities", len(quotas))
        if self.on_quotas_changed is not None:
            self.on_quotas_changed()

    def _credentials_changed(self) -> None:
        if self.on_credentials_changed is not None:
            try:
                self.on_credentials_changed()
            except OSError as exc:  # the copy on disk is a convenience for the next start
                log.warning("the SCRAM credentials could not be saved: %s", exc)

    def _put_credential(self, r) -> None:
        mechanism = MECHANISMS_BY_TYPE.get(r.mechanism)
        if mechanism is None:
            log.warning("SCRAM credential of user %r with unknown mechanism %d skipped", r.name, r.mechanism)
            return
        self.credential_cache.put(mechanism.mechanism_name, r.name, ScramCredential(
            bytes(r.salt), bytes(r.stored_key), bytes(r.server_key), r.iterations))


def _mechanism_name(type_id: int) -> str:
    mechanism = MECHANISMS_BY_TYPE.get(type_id)
    return mechanism.mechanism_name if mechanism is not None else f"mechanism {type_id}"


def describe_acls_resources(acls: Iterable[StandardAcl]) -> list[dict]:
    """DescribeAcls' resources: the bindings grouped by resource pattern (Kafka's
    DescribeAclsResponse.aclsResources), patterns in order of type, name and pattern type."""
    grouped: dict[tuple[int, str, int], list[dict]] = {}
    for acl in acls:
        grouped.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
            {"principal": acl.principal, "host": acl.host, "operation": int(acl.operation),
             "permission_type": int(acl.permission_type)})
    return [{"resource_type": int(t), "resource_name": n, "pattern_type": int(p), "acls": entries}
            for (t, n, p), entries in sorted(grouped.items())]


DESCRIBE_DUPLICATE_USER = "Cannot describe SCRAM credentials for the same user twice in a single request: "
DESCRIBE_USER_THAT_DOES_NOT_EXIST = "Attempt to describe a user credential that does not exist: "


def describe_scram_credentials(cache: CredentialCache, users: list[str] | None) -> list[dict]:
    """DescribeUserScramCredentials' results (Kafka's ScramImage.describe): ``users`` None
    (or empty) describes every user with a credential."""
    by_user: dict[str, list[dict]] = {}
    for name, mechanism in MECHANISMS.items():
        for user, credential in sorted(cache.users(name).items()):
            by_user.setdefault(user, []).append({"mechanism": mechanism.type_id, "iterations": credential.iterations})
    if not users:
        wanted = {u: False for u in sorted(by_user)}
    else:
        wanted = {}
        for u in users:
            wanted[u] = u in wanted
    results = []
    for user, duplicate in wanted.items():
        if duplicate:
            results.append({"user": user, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                            "error_message": DESCRIBE_DUPLICATE_USER + user, "credential_infos": []})
        elif user in by_user:
            results.append({"user": user, "error_code": ErrorCode.NONE, "error_message": None,
                            "credential_infos": sorted(by_user[user], key=lambda c: c["mechanism"])})
        else:
            results.append({"user": user, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                            "error_message": DESCRIBE_USER_THAT_DOES_NOT_EXIST + user, "credential_infos": []})
    return results
