"""storage: the bottom layer, one Log per partition replica in Kafka's on-disk layout.

Plain synchronous file code (never asyncio, never broker/); see log.py for the model.
"""

from .checkpoint import OffsetCheckpointFile
from .config import LogConfig
from .epoch_cache import EpochEntry, LeaderEpochFileCache
from .log import FetchDataInfo, FlushPlan, Log, LogAppendInfo, OffsetsOutOfOrderError, TimestampAndOffset
from .log_loader import LogLoader, RecoveryReport
from .log_manager import LogManager
from .producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
from .segment import LogSegment
from .segment_budget import OpenSegmentBudget

__all__ = [
    "BatchMetadata", "EpochEntry", "FetchDataInfo", "FlushPlan", "LeaderEpochFileCache", "Log", "LogAppendInfo",
    "LogConfig", "LogLoader", "LogManager", "LogSegment", "OffsetCheckpointFile", "OffsetsOutOfOrderError",
    "OpenSegmentBudget", "ProducerStateEntry", "ProducerStateManager", "RecoveryReport", "TimestampAndOffset",
]
