"""ClientQuotaControlManager (Kafka's): client quotas kept in the metadata log (KIP-546).

State: {entity: {key: value}}, an entity being a frozen set of (entity type, name) pairs
(``user``, ``client-id``; a None name is the type's default), changed only by replaying
ClientQuotaRecord (``remove``: the key leaves; an entity without keys leaves).

AlterClientQuotas, as Kafka's controller answers it (newest ClientQuotaControlManager), per
entity of the request, INVALID_REQUEST for:
  * an empty entity, an entity type named twice, an unknown entity type, an empty name;
  * an entity type combination Kafka refuses (``ip`` with ``user`` or ``client-id``);
  * a key named twice for one entity ("Ignoring duplicate entity"), an entity named twice
    (the second: "Ignoring duplicate entity"; what the first asked is applied);
  * an unknown key, a value <= 0, a fractional value for an integer key (more than 1e-6 off a
    whole number), an integer key's value above its type's range.
The alterations of the entities without error are applied together (one atomic batch of
records, Kafka's ControllerResult.atomicOf); a record is written only for a value that
changes, a removal only for a key that is set.

What kbroker does not take, with INVALID_REQUEST and a message saying so (Kafka accepts them,
the issue asks that what is accepted is enforced, and these are not):
``controller_mutation_rate`` (KIP-599) and ``ip`` entities with ``connection_creation_rate``
(KIP-612).

DescribeClientQuotas (``describe``): Kafka's ClientQuotasImage.describe over this state.
"""

from __future__ import annotations

import logging
import math

from protocol.errors import ErrorCode
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType as T, make_record

from .controller_result import ControllerResult

log = logging.getLogger("kbroker.controller.quotas")

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
LONG_MAX = 2**63 - 1
# Kafka's QuotaConfig.userAndClientQuotaConfigs: the keys of user / client-id entities and their types.
USER_AND_CLIENT_KEYS = {"producer_byte_rate": "long", "consumer_byte_rate": "long", "request_percentage": "double"}
NOT_ENFORCED = {"controller_mutation_rate": "KIP-599", "connection_creation_rate": "KIP-612"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = frozenset  # of (entity type, name or None)


def entity_of(pairs) -> Entity:
    return frozenset(pairs)


def entity_label(entity: Entity) -> str:
    """As Kafka's ClientQuotaEntity prints: ``{user=alice, client-id=<default>}``."""
    return "{" + ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in sorted(entity)) + "}"


def quota_record(entity: Entity, key: str, value: float | None) -> ApiMessageAndVersion:
    """A ClientQuotaRecord setting ``key`` (``value`` None: removing it)."""
    return make_record(T.CLIENT_QUOTA, entity=[{"entity_type": t, "entity_name": n} for t, n in sorted(entity)],
                       key=key, value=0.0 if value is None else value, remove=value is None)


def check_value(key: str, value: float) -> str | None:
    """Kafka's validateQuotaKeyValue for user / client-id keys: None, or why INVALID_REQUEST."""
    if key in NOT_ENFORCED:
        return f"{key} ({NOT_ENFORCED[key]}) is not supported by kbroker (it would not be enforced)"
    kind = USER_AND_CLIENT_KEYS.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not value > 0.0:  # NaN too
        return f"Quota {key} must be greater than 0"
    if kind == "long":
        if value > LONG_MAX:
            return f"Proposed value for {key} is too large for a LONG."
        if math.fmod(value, 1.0) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None


def check_entity(pairs: list[tuple[str, str | None]]) -> str | None:
    """Kafka's validateEntity and configKeysForEntityType: None, or why INVALID_REQUEST."""
    if not pairs:
        return "Invalid empty client quota entity"
    seen: set[str] = set()
    for entity_type, name in pairs:
        if entity_type in seen:
            return f"Invalid empty client quota entity, duplicate entity entry {entity_type}"
        seen.add(entity_type)
        if entity_type not in ENTITY_TYPES:
            return f"Unhandled client quota entity type: {entity_type}"
        if name is not None and not name:
            return f"Empty {entity_type} not supported"
    if IP in seen:
        if len(seen) > 1:
            return "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
        return "ip entities (connection_creation_rate, KIP-612) are not supported by kbroker"
    return None


class ClientQuotaControlManager:
    def __init__(self) -> None:
        self.quotas: dict[Entity, dict[str, float]] = {}

    def replay(self, record: ApiMessageAndVersion) -> None:
        if record.type != T.CLIENT_QUOTA:
            raise ValueError(f"not a ClientQuotaRecord: {record!r}")
        entity = entity_of((e.entity_type, e.entity_name) for e in record.entity)
        if record.remove:
            values = self.quotas.get(entity)
            if values is not None:
                values.pop(record.key, None)
                if not values:
                    del self.quotas[entity]
            log.info("client quota of %s: %s removed", entity_label(entity), record.key)
        else:
            self.quotas.setdefault(entity, {})[record.key] = record.value
            log.info("client quota of %s: %s = %s", entity_label(entity), record.key, record.value)

    def alter_client_quotas(self, entries) -> ControllerResult:
        """``entries``: AlterClientQuotas' (``entity`` [{entity_type, entity_name}], ``ops``
        [{key, value, remove}]). The response body's ``entries``, one per distinct entity."""
        records: list[ApiMessageAndVersion] = []
        results: dict[Entity, tuple[int, str | None]] = {}
        raw: dict[Entity, list] = {}
        for entry in entries:
            pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
            entity = entity_of(pairs)
            raw.setdefault(entity, pairs)
            alterations: dict[str, float | None] = {}
            for op in entry.ops:
                if op.key in alterations:
                    results[entity] = (ErrorCode.INVALID_REQUEST, f"Duplicate quota key {op.key} not updating "
                                                                   f"quota for this entity {entity_label(entity)}")
                else:
                    alterations[op.key] = None if op.remove else op.value
            if entity in results:  # a key named twice, or the entity named twice
                results[entity] = (ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {entity_label(entity)}")
                continue
            results[entity] = self._alter_entity(entity, pairs, alterations, records)
        out = []
        for entity, (code, message) in results.items():
            if code:
                log.warning("AlterClientQuotas of %s refused: %s", entity_label(entity), message)
            out.append({"error_code": code, "error_message": message,
                        "entity": [{"entity_type": t, "entity_name": n} for t, n in raw[entity]]})
        return ControllerResult(records, out)

    def _alter_entity(self, entity: Entity, pairs, alterations: dict[str, float | None],
                      records: list[ApiMessageAndVersion]) -> tuple[int, str | None]:
        problem = check_entity(pairs)
        if problem is not None:
            return ErrorCode.INVALID_REQUEST, problem
        current = self.quotas.get(entity, {})
        mine = []
        for key, value in alterations.items():
            if value is None:
                if key in current:
                    mine.append(quota_record(entity, key, None))
                continue
            problem = check_value(key, value)
            if problem is not None:
                return ErrorCode.INVALID_REQUEST, problem
            if current.get(key) != value:
                mine.append(quota_record(entity, key, value))
        records.extend(mine)
        return ErrorCode.NONE, None

    def snapshot_records(self) -> list[ApiMessageAndVersion]:
        return [quota_record(entity, key, value) for entity, values in sorted(self.quotas.items(), key=lambda kv:
                sorted(kv[0], key=lambda p: (p[0], p[1] or ""))) for key, value in sorted(values.items())]


def describe(quotas: dict[Entity, dict[str, float]], components, strict: bool) -> tuple[int, str | None, list | None]:
    """DescribeClientQuotas over ``quotas`` (Kafka's ClientQuotasImage.describe): (error code,
    message, entries). ``components``: [{entity_type, match_type, match}]; each entity
    matching every component (exact name, the default, any) is listed, and with ``strict``
    only entities of exactly those types."""
    wanted: dict[str, tuple[int, str | None]] = {}
    for c in components:
        if c.entity_type in wanted:
            return ErrorCode.INVALID_REQUEST, f"Entity type {c.entity_type} cannot appear more than once in the " \
                                              f"filter.", None
        if c.entity_type not in ENTITY_TYPES:
            return ErrorCode.INVALID_REQUEST, f"Unknown entity type {c.entity_type}", None
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}", None
        if c.match_type == MATCH_EXACT and c.match is None:
            return ErrorCode.INVALID_REQUEST, f"Exact match of {c.entity_type} needs a name", None
        wanted[c.entity_type] = (c.match_type, c.match)
    if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
        return ErrorCode.INVALID_REQUEST, ("Invalid entity filter component combination, IP filter component "
                                           "should not be used with user or clientId filter component."), None
    entries = []
    for entity, values in quotas.items():
        names = dict(entity)
        if strict and set(names) != set(wanted):
            continue
        ok = True
        for entity_type, (match_type, match) in wanted.items():
            if entity_type not in names:
                ok = False
            elif match_type == MATCH_EXACT:
                ok = names[entity_type] == match
            elif match_type == MATCH_DEFAULT:
                ok = names[entity_type] is None
            if not ok:
                break
        if ok:
            entries.append({"entity": [{"entity_type": t, "entity_name": n} for t, n in sorted(entity, key=lambda p: p[0])],
                            "values": [{"key": k, "value": v} for k, v in sorted(values.items())]})
    return ErrorCode.NONE, None, entries
