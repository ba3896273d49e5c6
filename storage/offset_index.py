"""OffsetIndex: offset -> file position in one segment (Kafka's ``OffsetIndex``).

8-byte entries: relative offset (int32, offset - base offset) and position (int32, the
byte position in the ``.log`` file of the batch whose last offset that is). Sparse: the
segment adds an entry once ``index.interval.bytes`` have been appended since the last one,
so a lookup returns a position at or before the wanted batch and the segment scans forward
from there (``LogSegment.translate_offset``).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .index import AbstractIndex

_I32 = struct.Struct(">i")
INT32_MAX = 2**31 - 1


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """Not thread-safe."""

    ENTRY = struct.Struct(">ii")
    OFFSET, POSITION = 0, 1
    SEARCH_KEYS = {OFFSET: (_I32, 0), POSITION: (_I32, 4)}
    EMPTY_LAST = (-1, 0)  # below every relative offset

    def _to_entry(self, slot: int) -> OffsetPosition:
        relative, position = self.entry(slot)
        return OffsetPosition(self.base_offset + relative, position)

    @property
    def last_offset(self) -> int:
        """The largest indexed offset, or the base offset when the index is empty."""
        return self._to_entry(self.entries - 1).offset if self.entries else self.base_offset

    def last_entry(self) -> OffsetPosition:
        return self._to_entry(self.entries - 1) if self.entries else OffsetPosition(self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offsets must grow (Kafka raises InvalidOffsetException)."""
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise ValueError(f"{self.path}: offset {offset} does not fit relative to base {self.base_offset}")
        if relative <= self.last[0]:
            raise ValueError(f"{self.path}: offset {offset} is not above the last indexed offset {self.last_offset}")
        self._append_entry(relative, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target_offset``; (base offset, 0) if none."""
        slot = self.largest_lower_bound_slot_for(target_offset - self.base_offset, self.OFFSET)
        return OffsetPosition(self.base_offset, 0) if slot < 0 else self._to_entry(slot)

    def lookup_by_position(self, position: int) -> OffsetPosition:
        """The entry with the largest position <= ``position``; (base offset, 0) if none."""
        slot = self.largest_lower_bound_slot_for(position, self.POSITION)
        return OffsetPosition(self.base_offset, 0) if slot < 0 else self._to_entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry for an offset >= ``offset``."""
        slot = self.largest_lower_bound_slot_for(offset - self.base_offset, self.OFFSET)
        if slot >= 0 and self._to_entry(slot).offset == offset:
            slot -= 1
        self.truncate_to_entries(slot + 1)

    def _check_entry(self, entry: tuple[int, int], previous: tuple[int, int] | None, log_size: int,
                     next_offset_bound: int | None) -> str | None:
        relative, position = entry
        if previous is not None and (relative <= previous[0] or position <= previous[1]):
            return f"not above the earlier entry {previous}"
        if not 0 <= position < max(log_size, 1):
            return f"position outside the {log_size}-byte segment"
        return self._offset_out_of_segment(relative, next_offset_bound)
