"""ClusterControlManager (Kafka's): the registered brokers.

A broker registers once per process start (BrokerRegistration) with an incarnation id; its
registration (RegisterBrokerRecord) gives it a broker epoch, the offset of that record in
the metadata log, and starts it FENCED. Heartbeats unfence it (UnfenceBrokerRecord), a
lapsed session fences it again (FenceBrokerRecord), and BrokerRegistrationChangeRecord
marks controlled shutdown. Only ``replay`` changes the state; the other methods decide.

A broker may lead (``is_active``) when it is registered, unfenced and not shutting down.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace

from protocol.errors import ErrorCode
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType as T, make_record

log = logging.getLogger("kbroker.controller.cluster")

FENCE = 1
UNFENCE = -1
SECURITY_PROTOCOL_PLAINTEXT = 0


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str
    host: str
    port: int
    security_protocol: int = SECURITY_PROTOCOL_PLAINTEXT


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: uuid.UUID
    epoch: int
    listeners: tuple[BrokerEndpoint, ...]
    rack: str | None
    fenced: bool = True
    in_controlled_shutdown: bool = False

    def endpoint(self, name: str | None = None) -> BrokerEndpoint | None:
        """The endpoint on listener ``name``; without a name, the first one registered (the
        broker's inter-broker listener: the one the controller and other brokers use)."""
        if not self.listeners:
            return None
        if name is None:
            return self.listeners[0]
        return next((e for e in self.listeners if e.name == name), None)

    def to_record(self) -> ApiMessageAndVersion:
        return make_record(T.REGISTER_BROKER, broker_id=self.broker_id, incarnation_id=self.incarnation_id,
                           broker_epoch=self.epoch, rack=self.rack, fenced=self.fenced,
                           in_controlled_shutdown=self.in_controlled_shutdown,
                           end_points=[{"name": e.name, "host": e.host, "port": e.port,
                                        "security_protocol": e.security_protocol} for e in self.listeners])


class ClusterControlManager:
    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self.brokers: dict[int, BrokerRegistration] = {}

    # -- replay ----------------------------------------------------------------------------

    def replay(self, record: ApiMessageAndVersion) -> None:
        t = record.type
        if t == T.REGISTER_BROKER:
            listeners = tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol) for e in record.end_points)
            self.brokers[record.broker_id] = BrokerRegistration(
                record.broker_id, record.incarnation_id, record.broker_epoch, listeners, record.rack, record.fenced,
                record.in_controlled_shutdown)
        elif t == T.UNREGISTER_BROKER:
            existing = self.brokers.get(record.broker_id)
            if existing is not None and existing.epoch == record.broker_epoch:
                del self.brokers[record.broker_id]
        elif t in (T.FENCE_BROKER, T.UNFENCE_BROKER):
            self._change(record.id, record.epoch, fenced=(t == T.FENCE_BROKER))
        elif t == T.BROKER_REGISTRATION_CHANGE:
            changes = {}
            if record.fenced == FENCE:
                changes["fenced"] = True
            elif record.fenced == UNFENCE:
                changes["fenced"] = False
            if record.in_controlled_shutdown == 1:
                changes["in_controlled_shutdown"] = True
            self._change(record.broker_id, record.broker_epoch, **changes)

    def _change(self, broker_id: int, epoch: int, **changes) -> None:
        existing = self.brokers.get(broker_id)
        if existing is None or existing.epoch != epoch:
            # A record for an older registration (the broker re-registered since): nothing to do.
            log.debug("ignoring a change for broker %d epoch %d (registered: %s)", broker_id, epoch, existing)
            return
        self.brokers[broker_id] = replace(existing, **changes)

    # -- queries ---------------------------------------------------------------------------

    def registration(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def is_registered(self, broker_id: int) -> bool:
        return broker_id in self.brokers

    def is_unfenced(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is not None and not reg.fenced

    def is_active(self, broker_id: int) -> bool:
        """May lead: registered, unfenced and not in controlled shutdown (Kafka's isActive)."""
        reg = self.brokers.get(broker_id)
        return reg is not None and not reg.fenced and not reg.in_controlled_shutdown

    def unfenced_brokers(self) -> list[BrokerRegistration]:
        return [self.brokers[i] for i in sorted(self.brokers) if not self.brokers[i].fenced]

    def active_broker_ids(self) -> list[int]:
        return [i for i in sorted(self.brokers) if self.is_active(i)]

    def check_broker_epoch(self, broker_id: int, epoch: int) -> int:
        """ErrorCode.NONE, or STALE_BROKER_EPOCH for an unknown broker or another epoch (Kafka's checkBrokerEpoch)."""
        reg = self.brokers.get(broker_id)
        if reg is None or reg.epoch != epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        return ErrorCode.NONE

    # -- decisions -------------------------------------------------------------------------

    def registration_records(self, request, broker_epoch: int) -> ApiMessageAndVersion:
        """The RegisterBrokerRecord of a (new) registration: fenced, at ``broker_epoch``."""
        listeners = [{"name": e.name.upper(), "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                     for e in request.listeners]
        return make_record(T.REGISTER_BROKER, broker_id=request.broker_id, incarnation_id=request.incarnation_id,
                           broker_epoch=broker_epoch, end_points=listeners, rack=request.rack, fenced=True,
                           in_controlled_shutdown=False)

    def same_registration(self, request) -> BrokerRegistration | None:
        """The current registration when ``request`` repeats it exactly (same incarnation,
        listeners and rack: a retry of a registration whose answer was lost), else None."""
        reg = self.brokers.get(request.broker_id)
        if reg is None or reg.incarnation_id != request.incarnation_id or reg.rack != request.rack:
            return None
        listeners = tuple(BrokerEndpoint(e.name.upper(), e.host, e.port, e.security_protocol) for e in request.listeners)
        return reg if listeners == reg.listeners else None

    def fence_record(self, broker_id: int) -> ApiMessageAndVersion:
        return make_record(T.FENCE_BROKER, id=broker_id, epoch=self.brokers[broker_id].epoch)

    def unfence_record(self, broker_id: int) -> ApiMessageAndVersion:
        return make_record(T.UNFENCE_BROKER, id=broker_id, epoch=self.brokers[broker_id].epoch)

    def controlled_shutdown_record(self, broker_id: int) -> ApiMessageAndVersion:
        return make_record(T.BROKER_REGISTRATION_CHANGE, broker_id=broker_id, broker_epoch=self.brokers[broker_id].epoch,
                           in_controlled_shutdown=1)

    def snapshot_records(self) -> list[ApiMessageAndVersion]:
        return [self.brokers[i].to_record() for i in sorted(self.brokers)]
