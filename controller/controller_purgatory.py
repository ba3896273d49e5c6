"""ControllerPurgatory (Kafka's): actions waiting for the metadata log to be durable up to an offset.

Everything the controller does outside itself — a response, a request to a broker — is
derived from records; it is parked here under the offset of the last record written when
it was decided, and runs once an fsync covers that offset. Offsets are added in
non-decreasing order (one event queue), so a deque suffices and actions run in the order
they were decided.
"""

from __future__ import annotations

import collections
import logging
from typing import Callable

log = logging.getLogger("kbroker.controller.purgatory")


class ControllerPurgatory:
    def __init__(self) -> None:
        self._pending: collections.deque[tuple[int, Callable[[], None], Callable | None]] = collections.deque()

    def add(self, offset: int, action: Callable[[], None], on_failure: Callable[[BaseException], None] | None = None,
            ) -> None:
        """Run ``action`` once ``offset`` is durable; ``on_failure(exc)`` if it never will be."""
        if self._pending and offset < self._pending[-1][0]:
            raise ValueError(f"offset {offset} is below the last one added ({self._pending[-1][0]})")
        self._pending.append((offset, action, on_failure))

    def complete_up_to(self, offset: int) -> int:
        """Run, in order, every action waiting for an offset <= ``offset``; returns how many ran."""
        ran = 0
        pending = self._pending
        while pending and pending[0][0] <= offset:
            _offset, action, _fail = pending.popleft()
            ran += 1
            try:
                action()
            except Exception:  # one failing action must not strand the ones after it
                log.exception("controller action for offset %d failed", _offset)
        return ran

    def fail_all(self, exc: BaseException) -> int:
        """The offsets will never be durable (a failed fsync, or stopping): tell every waiting
        action's ``on_failure`` and drop them all; returns how many there were."""
        pending, self._pending = self._pending, collections.deque()
        for _offset, _action, on_failure in pending:
            if on_failure is not None:
                try:
                    on_failure(exc)
                except Exception:
                    log.exception("controller failure callback failed")
        return len(pending)

    def __len__(self) -> int:
        return len(self._pending)
