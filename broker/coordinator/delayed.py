"""The group coordinator's delayed operations, on the broker's purgatory.

* ``DelayedHeartbeat`` (heartbeat purgatory, key ``member_key``): one per member, the session
  timeout. Completes as soon as the member proves it is alive; expiring removes the member
  (or, for a KIP-394 pending member, forgets its id).
* ``DelayedJoin`` (rebalance purgatory, key ``join_key``): a rebalance waiting for every known
  member to rejoin; completes when all have, or after the rebalance timeout with those that did.
* ``InitialDelayedJoin``: the first rebalance of an Empty group waits
  ``group.initial.rebalance.delay.ms`` and keeps extending by that much while new members keep
  arriving, up to the rebalance timeout; it never completes early.
* ``DelayedSync`` (rebalance purgatory, key ``sync_key``): after a generation is formed, members
  that send no SyncGroup within the rebalance timeout are removed and the group rebalances.

Each defers the decision to the GroupCoordinator, as Kafka's do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from ..purgatory import DelayedOperation, DelayedOperationPurgatory

if TYPE_CHECKING:
    from .group_metadata import GroupMetadata


def member_key(group_id: str, member_id: str) -> tuple:
    return ("member", group_id, member_id)


class GroupCoordinator(Protocol):
    """What the delayed operations call back into (the group coordinator implements it)."""

    def try_complete_heartbeat(self, group: "GroupMetadata", member_id: str, is_pending: bool,
                               force_complete: Callable[[], bool]) -> bool: ...

    def on_expire_heartbeat(self, group: "GroupMetadata", member_id: str, is_pending: bool) -> None: ...

    def try_complete_join(self, group: "GroupMetadata", force_complete: Callable[[], bool]) -> bool: ...

    def on_complete_join(self, group: "GroupMetadata") -> None: ...

    def try_complete_pending_sync(self, group: "GroupMetadata", generation_id: int,
                                  force_complete: Callable[[], bool]) -> bool: ...

    def on_expire_pending_sync(self, group: "GroupMetadata", generation_id: int) -> None: ...


def join_key(group_id: str) -> tuple:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple:
    return ("sync", group_id)


class DelayedHeartbeat(DelayedOperation):
    __slots__ = ("coordinator", "group", "member_id", "is_pending")

    def __init__(self, coordinator: "GroupCoordinator", group: "GroupMetadata", member_id: str, is_pending: bool,
                 timeout_ms: float) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_heartbeat(self.group, self.member_id, self.is_pending, self.force_complete)

    def on_expiration(self) -> None:
        self.coordinator.on_expire_heartbeat(self.group, self.member_id, self.is_pending)

    def on_complete(self) -> None:
        pass


class DelayedJoin(DelayedOperation):
    __slots__ = ("coordinator", "group")

    def __init__(self, coordinator: "GroupCoordinator", group: "GroupMetadata", rebalance_timeout_ms: float) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_join(self.group, self.force_complete)

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    __slots__ = ("purgatory", "configured_rebalance_delay_ms", "remaining_ms")

    def __init__(self, coordinator: "GroupCoordinator", purgatory: DelayedOperationPurgatory, group: "GroupMetadata",
                 configured_rebalance_delay_ms: int, delay_ms: int, remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.purgatory = purgatory
        self.configured_rebalance_delay_ms = configured_rebalance_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_rebalance_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - int(self.delay_ms), 0)
            self.purgatory.try_complete_else_watch(
                InitialDelayedJoin(self.coordinator, self.purgatory, group, self.configured_rebalance_delay_ms,
                                   delay, remaining), [join_key(group.group_id)])
        else:
            super().on_complete()


class DelayedSync(DelayedOperation):
    __slots__ = ("coordinator", "group", "generation_id")

    def __init__(self, coordinator: "GroupCoordinator", group: "GroupMetadata", generation_id: int,
                 rebalance_timeout_ms: float) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_pending_sync(self.group, self.generation_id, self.force_complete)

    def on_expiration(self) -> None:
        self.coordinator.on_expire_pending_sync(self.group, self.generation_id)

    def on_complete(self) -> None:
        pass
