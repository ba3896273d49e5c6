"""Producer ids for InitProducerId: handed out from durable blocks, never repeated.

A ``ProducerIdManager`` hands out ids from a block it got from a ``ProducerIdBlockSource``.
The source is the one seam: today ``LocalBlockSource`` keeps a per-broker counter file
(written atomically *before* a block is used, so a crash can skip ids but never repeat
them); once the controller process exists it will hand out blocks instead (Kafka's
AllocateProducerIds). Ids of different brokers never collide because each broker's
space starts at ``broker_id << 32``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from storage.checkpoint import write_atomically

log = logging.getLogger("kbroker.producer_ids")

BLOCK_SIZE = 1000
FILE_NAME = "kbroker-producer-id-block"


class ProducerIdBlockSource(Protocol):
    def next_block(self) -> tuple[int, int]:
        """(first id, number of ids) of a block no one else will ever get."""


class LocalBlockSource:
    """Blocks from a per-broker counter kept in ``<log dir>/kbroker-producer-id-block``."""

    def __init__(self, path: Path, broker_id: int, block_size: int = BLOCK_SIZE) -> None:
        if broker_id < 0:
            raise ValueError("broker id must be known before producer ids are handed out")
        self.path = path
        self.base = broker_id << 32
        self.block_size = block_size

    def next_block(self) -> tuple[int, int]:
        start = self.base
        if self.path.exists():
            text = self.path.read_text().split()
            if len(text) != 2 or text[0] != "v1":
                raise ValueError(f"{self.path}: unreadable producer id block file")
            start = max(start, int(text[1]))
        if start + self.block_size > self.base + (1 << 32):
            raise RuntimeError("this broker's producer id space is exhausted")
        write_atomically(self.path, f"v1 {start + self.block_size}\n".encode())
        log.info("allocated producer id block [%d, %d)", start, start + self.block_size)
        return start, self.block_size


class ProducerIdManager:
    def __init__(self, source: ProducerIdBlockSource) -> None:
        self.source = source
        self._next = 0
        self._end = 0

    def generate_producer_id(self) -> int:
        if self._next >= self._end:
            start, size = self.source.next_block()
            self._next, self._end = start, start + size
        pid = self._next
        self._next += 1
        return pid
