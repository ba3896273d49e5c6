"""FetchParams: what one Fetch request asks for as a whole (Kafka's FetchParams) — who is
fetching, how long it may wait, how many bytes it wants and up to which offset it may read."""

from __future__ import annotations

from .partition import FETCH_HIGH_WATERMARK, FETCH_LOG_END, FETCH_TXN_COMMITTED


class FetchParams:
    __slots__ = ("replica_id", "max_wait_ms", "min_bytes", "max_bytes", "isolation", "require_leader")

    def __init__(self, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int) -> None:
        self.replica_id = replica_id
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        if replica_id >= 0:
            self.isolation = FETCH_LOG_END
        elif isolation_level == 1:
            self.isolation = FETCH_TXN_COMMITTED
        else:
            self.isolation = FETCH_HIGH_WATERMARK
        self.require_leader = True  # no fetch-from-follower (KIP-392) yet

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0
