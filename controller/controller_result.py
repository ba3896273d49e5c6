"""ControllerResult (Kafka's): what an operation decides, before anything happens.

An operation never changes state; it returns the metadata records that would, and the
response to send once they are durable. The controller appends the records, replays them
(which is what changes state), and releases the response after the fsync.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from protocol.messages.metadata_records import ApiMessageAndVersion

T = TypeVar("T")


@dataclass
class ControllerResult(Generic[T]):
    records: list[ApiMessageAndVersion] = field(default_factory=list)
    response: Any = None

    @classmethod
    def of(cls, records, response: T) -> "ControllerResult[T]":
        return cls(list(records), response)
