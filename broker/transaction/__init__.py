"""The transaction coordinator (``coordinator.py``), its markers (``markers.py``) and its
APIs as KafkaApis serves them (``handlers.py``)."""

from .coordinator import TRANSACTION_STATE_TOPIC_NAME, TransactionConfig, TransactionCoordinator, TxnState

__all__ = ["TRANSACTION_STATE_TOPIC_NAME", "TransactionConfig", "TransactionCoordinator", "TxnState"]
