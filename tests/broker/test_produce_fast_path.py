"""The produce path's compiled common case — the ``plain`` flag of the Produce decoder
(protocol/_produce_codec.c: KafkaApis skips its per-partition checks) and the log's one-call
stamp (storage/_record_walk.c's ``stamp``) — against the Python path, the reference: two
brokers get the same requests, one with both short-cuts turned off; the answers (bytes), the
logs (bytes, end offsets) must be the same, for plain requests and for every kind of odd or
bad one (CRC, magic, trailing bytes, two batches, transactional, zstd below v7, producer
sequence and epoch, too large, LogAppendTime claimed, unknown partitions and topics)."""

from __future__ import annotations

import dataclasses
import random
import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import broker.apis as apis_module
from protocol.api_keys import ApiKey
from protocol.fast_codecs import decode_produce_request
from protocol.records import Record, build_batch
from storage import log as log_module

from .test_apis import Broker

KINDS = ["plain", "plain", "plain", "idempotent", "two", "trailing", "transactional", "zstd", "magic1", "magic3",
         "crc", "none", "short", "append_time", "stale_max", "big", "base_offset"]


def _records(kind: str, rng: random.Random) -> bytes | None:
    if kind == "none":
        return None
    n = rng.randrange(1, 5)
    recs = [Record(key=b"k", value=rng.randbytes(rng.choice([0, 10, 100, 900 if kind == "big" else 50])),
                   timestamp=1000 + rng.randrange(0, 100)) for _ in range(n)]
    pid = {"idempotent": 7, "transactional": 9}.get(kind, -1)
    seq = rng.choice([0, 0, n, 100]) if pid >= 0 else -1
    batch = bytearray(build_batch(recs, producer_id=pid, producer_epoch=rng.choice([0, 0, 1]) if pid >= 0 else -1,
                                  base_sequence=seq, transactional=kind == "transactional",
                                  timestamp_type=1 if kind == "append_time" else 0,
                                  base_offset=3 if kind == "base_offset" else 0))
    if kind == "zstd":  # the codec bits only: refused before anything reads the records below v7
        batch[22] |= 4
        struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    elif kind in ("magic1", "magic3"):
        batch[16] = 1 if kind == "magic1" else 3
    elif kind == "crc":
        batch[-1] ^= 0xFF
    elif kind == "stale_max":
        struct.pack_into(">q", batch, 35, 5)
        struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    elif kind == "two":
        batch += build_batch(recs)
    elif kind == "trailing":
        batch += bytes(rng.randrange(1, 30))
    elif kind == "short":
        batch = batch[:rng.choice([10, 20, 40])]
    return bytes(batch)


def _python_path(monkeypatch) -> None:
    """This broker's produce path without the compiled short-cuts."""
    monkeypatch.setattr(apis_module, "decode_produce_request",
                        lambda *a: dataclasses.replace(decode_produce_request(*a), plain=False))
    monkeypatch.setattr(log_module, "stamp_batch", None)


def test_the_fast_produce_path_answers_and_appends_as_the_python_path(tmp_path):
    fast, python = Broker(tmp_path / "fast"), Broker(tmp_path / "python")
    brokers = (fast, python)
    try:
        for b in brokers:
            b.create_online("a", partitions=2)
            b.create_online("c", partitions=1, configs={"cleanup.policy": "compact", "max.message.bytes": "1000"})

        @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
        @given(seed=st.integers(0, 2**32), version=st.integers(3, 8), acks=st.sampled_from([1, 1, -1]),
               layout=st.lists(st.tuples(st.sampled_from(["a", "a", "c", "zz"]),
                                         st.lists(st.tuples(st.sampled_from([0, 0, 1, 5]), st.sampled_from(KINDS)),
                                                  min_size=1, max_size=3)), min_size=1, max_size=3))
        def run(seed, version, acks, layout):
            rng = random.Random(seed)
            topic_data = [{"name": t, "partition_data": [{"index": p, "records": _records(kind, rng)}
                                                         for p, kind in parts]} for t, parts in layout]
            body = {"transactional_id": None, "acks": acks, "timeout_ms": 1000, "topic_data": topic_data}
            for b in brokers:
                if b is python:
                    with pytest.MonkeyPatch.context() as patch:
                        _python_path(patch)
                        b.send(ApiKey.PRODUCE, version, body)
                else:
                    b.send(ApiKey.PRODUCE, version, body)
            assert fast.transport.written == python.transport.written
            assert fast.transport.closed == python.transport.closed
            for b in brokers:
                b.transport.written.clear()
            for t, p in (("a", 0), ("a", 1), ("c", 0)):
                logs = [b.rm.get_partition(t, p).log for b in brokers]
                assert logs[0].log_end_offset == logs[1].log_end_offset
                reads = [bytes(log.read(log.log_start_offset, 1 << 24).records or b"") for log in logs]
                assert reads[0] == reads[1]

        run()
    finally:
        for b in brokers:
            b.close()


def test_a_plain_request_skips_the_checks_and_an_odd_one_does_not(tmp_path, monkeypatch):
    """The decoder's ``plain``: every partition one whole plain batch; one odd partition (a
    trailing byte, two batches, a transactional batch, None) and the checks run."""
    rng = random.Random(1)
    frames = {kind: _records(kind, rng) for kind in ("plain", "trailing", "two", "transactional", "none", "zstd")}
    seen = []
    real = apis_module.decode_produce_request

    def spy(*args):
        seen.append((out := real(*args)).plain)
        return out

    monkeypatch.setattr(apis_module, "decode_produce_request", spy)
    b = Broker(tmp_path)
    try:
        b.create_online("a", partitions=2)
        for kind, version in [("plain", 3), ("trailing", 3), ("two", 3), ("transactional", 3), ("none", 3),
                              ("zstd", 6), ("zstd", 7)]:
            b.send(ApiKey.PRODUCE, version, {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
                {"name": "a", "partition_data": [{"index": 0, "records": frames["plain"]},
                                                 {"index": 1, "records": frames[kind]}]}]})
        assert seen == [True, False, False, False, False, False, True]
    finally:
        b.close()

