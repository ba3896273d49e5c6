"""FetchParams: what one Fetch request asks for as a whole (Kafka's FetchParams) — who is
fetching, how long it may wait, how many bytes it wants and up to which offset it may read."""

from __future__ import annotations

from .partition import FETCH_HIGH_WATERMARK, FETCH_LOG_END, FETCH_TXN_COMMITTED

_set = object.__setattr__


class FetchParams:
    """Shared, never changed once made: a follower's are built once per what its requests ask
    and used by all its fetches (KafkaApis._handle_fetch_lean), and a parked fetch keeps its own
    (DelayedFetch.params). Setting or deleting an attribute raises AttributeError (``__init__``
    sets them with object.__setattr__; reads are the slots' own)."""

    __slots__ = ("replica_id", "max_wait_ms", "min_bytes", "max_bytes", "isolation", "require_leader")

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: int
    require_leader: bool

    def __init__(self, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int) -> None:
        _set(self, "replica_id", replica_id)
        _set(self, "max_wait_ms", max_wait_ms)
        _set(self, "min_bytes", min_bytes)
        _set(self, "max_bytes", max_bytes)
        if replica_id >= 0:
            _set(self, "isolation", FETCH_LOG_END)
        elif isolation_level == 1:
            _set(self, "isolation", FETCH_TXN_COMMITTED)
        else:
            _set(self, "isolation", FETCH_HIGH_WATERMARK)
        _set(self, "require_leader", True)  # no fetch-from-follower (KIP-392) yet

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"FetchParams is shared (a follower's cached ones, a parked fetch's): "
                             f"never changed once made ({name} = {value!r}); make another")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"FetchParams is shared: never changed once made (del {name})")

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0
