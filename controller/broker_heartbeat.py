"""BrokerHeartbeatManager (Kafka's): when each unfenced broker was last heard from.

Not part of the replicated state (heartbeats are not records): it lives on the injected
monotonic clock. Brokers are kept in order of last contact, so the ones whose session
expired are found from the front, and the next expiry is the front's.

A broker is tracked while it is unfenced: ``touch`` on each heartbeat (and when a
controller takes over, for every unfenced broker: each gets a full session to reach it),
``remove`` when it is fenced. A session expires when the broker has been silent for
broker.session.timeout.ms: at that moment it is fenced.
"""

from __future__ import annotations

import collections

from protocol.clock import Time


class BrokerHeartbeatManager:
    def __init__(self, time: Time, session_timeout_ms: int) -> None:
        self.time = time
        self.session_timeout_ms = session_timeout_ms
        self._last_contact: collections.OrderedDict[int, float] = collections.OrderedDict()

    def touch(self, broker_id: int) -> None:
        self._last_contact[broker_id] = self.time.monotonic_ms()
        self._last_contact.move_to_end(broker_id)

    def remove(self, broker_id: int) -> None:
        self._last_contact.pop(broker_id, None)

    def tracked(self, broker_id: int) -> bool:
        return broker_id in self._last_contact

    def has_valid_session(self, broker_id: int) -> bool:
        last = self._last_contact.get(broker_id)
        return last is not None and self.time.monotonic_ms() - last < self.session_timeout_ms

    def expired(self) -> list[int]:
        """Tracked brokers silent for the session timeout or longer, oldest first."""
        now = self.time.monotonic_ms()
        out = []
        for broker_id, last in self._last_contact.items():
            if now - last < self.session_timeout_ms:
                break
            out.append(broker_id)
        return out

    def next_expiry_ms(self) -> float | None:
        """Milliseconds from now until the oldest session expires (0 if it already has); None
        when no broker is tracked."""
        for last in self._last_contact.values():
            return max(0.0, last + self.session_timeout_ms - self.time.monotonic_ms())
        return None
