"""TimeIndex: timestamp -> offset in one segment (Kafka's ``TimeIndex``).

12-byte entries: timestamp (int64) and relative offset (int32). An entry (T, O) says the
largest timestamp in the segment up to that point is T, first reached by the batch whose
last offset is O. Entries are only added when the largest timestamp grows, so timestamps
are strictly increasing and offsets non-decreasing. ``offset_for_timestamp`` looks up the
floor entry, then the offset index for its position, then scans batches forward.

As in Kafka, ``is_full`` keeps the last slot free: when the segment stops being active it
appends a final entry for the largest timestamp seen, so that entry is the segment's
largest timestamp after a restart.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .index import AbstractIndex


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """Not thread-safe."""

    ENTRY = struct.Struct(">qi")
    TIMESTAMP, OFFSET = 0, 1
    SEARCH_KEYS = {TIMESTAMP: (struct.Struct(">q"), 0), OFFSET: (struct.Struct(">i"), 8)}
    EMPTY_LAST = (-1, 0)  # Kafka's: no timestamp yet

    def _to_entry(self, slot: int) -> TimestampOffset:
        timestamp, relative = self.entry(slot)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    def last_entry(self) -> TimestampOffset:
        """The last entry; (-1, base offset) when empty."""
        return self._to_entry(self.entries - 1) if self.entries else TimestampOffset(-1, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) when ``timestamp`` is above the last entry's (-1 when empty)."""
        last_timestamp, last_relative = self.last
        if timestamp <= last_timestamp:
            return
        if offset - self.base_offset < last_relative:
            raise ValueError(f"{self.path}: offset {offset} is below the last indexed offset")
        if not skip_full_check and self.is_full():
            raise ValueError(f"{self.path}: time index is full ({self.entries} entries)")
        self._append_entry(timestamp, offset - self.base_offset)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``target_timestamp``; (-1, base offset) if none."""
        slot = self.largest_lower_bound_slot_for(target_timestamp, self.TIMESTAMP)
        return TimestampOffset(-1, self.base_offset) if slot < 0 else self._to_entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry for an offset >= ``offset``."""
        relative = offset - self.base_offset
        slot = self.largest_lower_bound_slot_for(relative, self.OFFSET)
        while slot >= 0 and self.entry(slot)[1] >= relative:
            slot -= 1  # offsets may repeat; drop all equal to ``offset``
        self.truncate_to_entries(slot + 1)

    def _check_entry(self, entry: tuple[int, int], previous: tuple[int, int] | None, log_size: int,
                     next_offset_bound: int | None) -> str | None:
        timestamp, relative = entry
        if previous is not None and (timestamp <= previous[0] or relative < previous[1]):
            return f"not above the earlier entry {previous}"
        return self._offset_out_of_segment(relative, next_offset_bound)
