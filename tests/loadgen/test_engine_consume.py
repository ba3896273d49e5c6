"""The replay's consumer (loadgen/engine.py consume) counts every record of a partition once, in
offset order, against a broker whose Fetch answer can lack a batch that appears a moment later
(tansu 0.6.0 raises the high watermark before it stores the batch: the answer to a Fetch between
the two has a hole where that batch goes). Fetch answers are built with the project's codecs."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from loadgen import engine
from protocol.fast_codecs import FetchPartitionData, decode_fetch_response, encode_fetch_response
from protocol.records import Record, build_batch

TOPIC = "t"
VERSION = 11


def batch(base: int, n: int) -> bytes:
    return build_batch([Record(timestamp=1000 + i, value=b"v") for i in range(n)], base_offset=base)


class HoleyBroker:
    """One partition whose log is ``batches``; the batches in ``late`` are left out of the first
    answer that reaches past them (stored after the high watermark moved, as tansu does), and
    are in every answer after it. ``fetches``: the offset each Fetch asked for."""

    def __init__(self, batches: list[tuple[int, int]], late: set[int]) -> None:
        self.log = {base: batch(base, n) for base, n in batches}
        self.late = set(late)
        self.fetches: list[int] = []
        self.cluster = SimpleNamespace(leader=lambda topic, partition: 1, topics={})

    # the KafkaClient the consumer uses
    async def __aenter__(self) -> "HoleyBroker":
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def refresh_metadata(self, topics: list[str]) -> None:
        return None

    async def connection(self, node: int) -> "HoleyBroker":
        return self

    def version_for(self, api_key: int, max_v: int) -> int:
        return VERSION

    async def fetch(self, request, version):
        (topic, [part]), = request.topics
        offset = part.fetch_offset
        self.fetches.append(offset)
        hidden = {b for b in self.late if b >= offset}
        records = b"".join(data for base, data in sorted(self.log.items()) if base >= offset and base not in hidden)
        self.late -= hidden
        if not records:
            await asyncio.sleep(0.01)  # max_wait_ms of a broker with nothing more
        hw = max(self.log) + 3
        chunks, _size = encode_fetch_response(VERSION, 7, [(topic, [FetchPartitionData(
            0, 0, hw, hw, 0, records or None)])])
        return decode_fetch_response(VERSION, memoryview(b"".join(bytes(c) for c in chunks)), 8)


def consume(broker: HoleyBroker, expected: int, monkeypatch, **kw):
    monkeypatch.setattr(engine, "KafkaClient", lambda *a, **k: broker)
    params = engine.Params(bootstrap="127.0.0.1:1", job_start=time.time())
    return asyncio.run(engine.consume(params, {(TOPIC, 0): 0}, expected, idle_s=2.0, **kw))


def test_a_batch_missing_from_the_middle_of_an_answer_is_fetched_again_and_counted(monkeypatch):
    # The first answer: [0, 3) [6, 9) [9, 12), the batch at 3 not stored yet. Taking 6 and 9 moved
    # the position to 12 and counted 9 records of 12 (the flake's 4799 of 4800).
    broker = HoleyBroker([(0, 3), (3, 3), (6, 3), (9, 3)], late={3})
    stats = consume(broker, 12, monkeypatch)
    assert stats["totals"]["consumed"] == 12
    assert sum(stats["e2e"].values()) == 12
    assert broker.fetches[:2] == [0, 3]


def test_a_hole_at_the_start_of_an_answer_is_fetched_again_and_counted(monkeypatch):
    broker = HoleyBroker([(0, 3), (3, 3), (6, 3)], late={0})
    stats = consume(broker, 9, monkeypatch)
    assert stats["totals"]["consumed"] == 9
    assert broker.fetches[:2] == [0, 0]


def take(records: bytes, position: int, hole_since: float | None, now: float, wait: float = 2.0):
    return engine.take_batches(memoryview(records), position, hole_since, now, wait)


def test_take_batches_counts_from_the_position_and_stops_at_a_hole_until_it_has_lasted():
    answer = batch(0, 3) + batch(3, 3) + batch(8, 2)   # offsets 6 and 7 are missing
    got, position, since = take(answer, 4, None, 100.0)
    # The batch below the position is passed over, the one holding it counts from it on.
    assert [n for _ts, n, _size in got] == [2] and position == 6 and since == 100.0
    got, position, since = take(answer, 6, since, 101.9)
    assert got == [] and position == 6 and since == 100.0
    # Still there after 2 s: compaction's kind of hole, stepped over as Kafka's clients step over it.
    got, position, since = take(answer, 6, since, 102.0)
    assert [n for _ts, n, _size in got] == [2] and position == 10 and since is None
    # Without a wait, a hole is stepped over at once (a Kafka client).
    got, position, since = take(answer, 6, None, 5.0, wait=0.0)
    assert [n for _ts, n, _size in got] == [2] and position == 10 and since is None


def test_take_batches_moves_past_control_batches_without_counting_them():
    marker = build_batch([Record(timestamp=5, key=b"\x00\x00\x00\x00", value=b"\x00\x00\x00\x00\x00\x00")],
                         base_offset=3, control=True, transactional=True, producer_id=1, producer_epoch=0)
    got, position, since = take(batch(0, 3) + marker + batch(4, 2), 0, None, 1.0)
    assert [n for _ts, n, _size in got] == [3, 0, 2] and position == 6 and since is None
