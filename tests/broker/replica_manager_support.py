"""A ReplicaManager over a real LogManager in a test's directory, on MockTime (shared by the
broker tests that drive one directly)."""

from __future__ import annotations

import contextlib
from typing import Iterator

from broker.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from protocol.clock import MockTime
from storage import LogConfig, LogManager


@contextlib.contextmanager
def replica_manager(tmp_path, time: MockTime, config: LogConfig, lag_ms: int = 10_000,
                    metadata_cache: MetadataCache | None = None, **kw) -> Iterator[ReplicaManager]:
    """Broker 1's ReplicaManager, every topic on ``config`` (and an empty metadata cache unless
    one is given); its logs shut down afterwards."""
    logs = LogManager([tmp_path], config, time=time)
    logs.startup()
    try:
        yield ReplicaManager(broker_id=1, time=time, log_manager=logs, metadata_cache=metadata_cache or MetadataCache(1),
                             log_config_for=lambda topic: config, replica_lag_time_max_ms=lag_ms, **kw)
    finally:
        logs.shutdown()
