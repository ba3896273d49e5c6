"""ProducerIdControlManager (Kafka's): producer ids handed to brokers in blocks.

A broker asks for a block (AllocateProducerIds) and gets the next 1000 ids; the
ProducerIdsRecord written for it holds the first id of the block after it, which is all
replay needs. Ids are never handed out twice, across controller restarts included.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType as T, make_record

from .cluster_control import ClusterControlManager
from .controller_result import ControllerResult

BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
LONG_MAX = 2**63 - 1


class ProducerIdControlManager:
    def __init__(self, cluster_control: ClusterControlManager) -> None:
        self.cluster_control = cluster_control
        self.next_producer_id = 0
        self._last_record: ApiMessageAndVersion | None = None

    def replay(self, record: ApiMessageAndVersion) -> None:
        if record.next_producer_id <= self.next_producer_id and self._last_record is not None:
            raise ValueError(f"ProducerIdsRecord goes back from {self.next_producer_id} to {record.next_producer_id}")
        self.next_producer_id = record.next_producer_id
        self._last_record = record

    def generate_next_producer_ids(self, broker_id: int, broker_epoch: int) -> ControllerResult:
        error = self.cluster_control.check_broker_epoch(broker_id, broker_epoch)
        if error:
            return ControllerResult([], {"error_code": error, "producer_id_start": -1, "producer_id_len": 0})
        start = self.next_producer_id
        if start > LONG_MAX - BLOCK_SIZE:
            return ControllerResult([], {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "producer_id_start": -1,
                                         "producer_id_len": 0})
        record = make_record(T.PRODUCER_IDS, broker_id=broker_id, broker_epoch=broker_epoch,
                             next_producer_id=start + BLOCK_SIZE)
        return ControllerResult([record], {"error_code": ErrorCode.NONE, "producer_id_start": start,
                                           "producer_id_len": BLOCK_SIZE})

    def snapshot_records(self) -> list[ApiMessageAndVersion]:
        return [self._last_record] if self._last_record is not None else []
