"""The trace of a simulated run: every event in order, a hash over all of them, and the tail.

An event is one line, ``<simulated seconds> <process> <kind> <detail>``. The hash (BLAKE2b
over every line) is what two runs of one seed must agree on; the tail (the last
``tail`` lines) is what a violation prints. Bytes delivered on a connection are shown as
their length and CRC-32; the hash takes the bytes themselves (with the time, process and
connection), so it covers what every process said to every other. Delivered bytes are
most of a run's events: their line is written only if it is printed (verbose, or in the
tail a violation shows), never for the hash.
"""

from __future__ import annotations

import collections
import hashlib
import struct
import sys
import zlib
from typing import Any, TextIO


_DATA = struct.Struct("<dQI")  # time, connection, length of a delivery (hashed before its bytes)


def _data_line(now: float, who: str, conn_id: int, data: bytes) -> str:
    return f"{now:.6f} {who} recv conn {conn_id} {len(data)}B crc {zlib.crc32(data):08x}"


class Trace:
    def __init__(self, clock: Any, *, tail: int = 200, verbose: bool = False, out: TextIO | None = None) -> None:
        self._clock = clock  # an object with ``_now`` (the SimLoop)
        self._hash = hashlib.blake2b(digest_size=16)
        # Lines, and deliveries as (time, who, connection, bytes), formatted only when shown
        # (most of a run's events are deliveries, and hardly any is ever shown).
        self.tail: collections.deque[str | tuple[float, str, int, bytes]] = collections.deque(maxlen=tail)
        self.verbose = verbose
        self.out = out or sys.stdout
        self.events = 0

    def event(self, who: str, kind: str, detail: str = "") -> None:
        line = f"{self._clock._now:.6f} {who} {kind} {detail}"
        self._hash.update(line.encode())
        self._hash.update(b"\n")
        self.tail.append(line)
        self.events += 1
        if self.verbose:
            print(line, file=self.out)

    def note(self, who: str, text: str) -> None:
        """A line for the tail (and the verbose output) that the hash does not cover: log
        records, whose text may name things (object addresses) a replay need not repeat."""
        line = f"{self._clock._now:.6f} {who} {text}"
        self.tail.append(line)
        if self.verbose:
            print(line, file=self.out)

    def data(self, process: Any, conn_id: int, data: bytes) -> None:
        now = self._clock._now
        if process is not None:
            who, who_bytes = process.key, process.key_bytes
        else:
            who, who_bytes = "sim", b"sim"
        update = self._hash.update
        update(_DATA.pack(now, conn_id, len(data)) + who_bytes)
        update(data)
        self.tail.append((now, who, conn_id, data))
        self.events += 1
        if self.verbose:
            print(_data_line(now, who, conn_id, data), file=self.out)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def last(self, n: int = 60) -> list[str]:
        return [line if isinstance(line, str) else _data_line(*line) for line in list(self.tail)[-n:]]
