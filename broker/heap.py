"""Keeping a big, long-lived heap out of the cyclic collector's sight, for as long as someone
needs it: ``gc.freeze``/``gc.unfreeze``, counted.

A broker's start (every log's segments and indexes, the controller's metadata: millions of
objects with 10,000 partitions) and a LeaderAndIsr for thousands of partitions create objects
by the ten thousand, and each full collection scanned the whole heap again, 0.3-0.5 s each.
Both freeze the heap meanwhile; ``gc.unfreeze`` is global, so the end of the first must not
unfreeze what the other still holds (a LeaderAndIsr applied during the start ended the start's
freeze, and a full collection came before the next one). ``hold`` freezes what exists now
(again, if already held: what was created since is frozen too); the last ``release`` unfreezes.
Thread-safe (tests run several brokers in one process, each on its own loop).
"""

from __future__ import annotations

import gc
import threading

_holds = 0
_lock = threading.Lock()


def hold() -> None:
    global _holds
    with _lock:
        _holds += 1
        gc.freeze()


def release() -> None:
    """One ``hold`` ends; the last one gives the frozen objects back to the collector."""
    global _holds
    with _lock:
        if _holds == 0:
            return
        _holds -= 1
        if _holds == 0:
            gc.unfreeze()


def holds() -> int:
    return _holds
