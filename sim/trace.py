"""The trace of a simulated run: every event in order, a hash over all of them, and the tail.

An event is one line, ``<simulated seconds> <process> <kind> <detail>``. The hash (BLAKE2b
over every line) is what two runs of one seed must agree on; the tail (the last
``tail`` lines) is what a violation prints. Bytes delivered on a connection are traced as
their length and CRC-32, so the hash covers what every process said to every other.
"""

from __future__ import annotations

import collections
import hashlib
import sys
import zlib
from typing import Any, TextIO


class Trace:
    def __init__(self, clock: Any, *, tail: int = 200, verbose: bool = False, out: TextIO | None = None) -> None:
        self._clock = clock  # an object with ``_now`` (the SimLoop)
        self._hash = hashlib.blake2b(digest_size=16)
        self.tail: collections.deque[str] = collections.deque(maxlen=tail)
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
        self.event(process.key if process is not None else "sim", "recv",
                   f"conn {conn_id} {len(data)}B crc {zlib.crc32(data):08x}")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def last(self, n: int = 60) -> list[str]:
        return list(self.tail)[-n:]
