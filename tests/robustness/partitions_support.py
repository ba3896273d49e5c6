"""Many partitions on one broker (issue 12 §5): produce to every partition of a topic round-robin
and read every partition back, over raw frames on one connection (Produce v7 and Fetch v4
requests each covering a slice of the partitions). Shared by tests/robustness/test_partitions.py
and bench/partitions_bench.py.

Each record's value names its partition and round (``p<partition>-r<round>``), so what is read
back can be checked against what was acknowledged."""

from __future__ import annotations

import socket
import struct
import time
from collections import deque

from protocol.fast_codecs import (FetchPartition, FetchRequest, decode_fetch_response, decode_produce_response,
                                  encode_fetch_request, encode_produce_request)
from protocol.records import batch_body, decode_records, iter_batch_headers, Record, build_batch

from .resources_support import read_frame

PRODUCE_VERSION, FETCH_VERSION = 7, 4
# What a client retries: the partition moves (a restarted broker is told again that it leads).
RETRIABLE = {5, 6}  # LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER
RETRY_BACKOFF_S = 0.1  # a client's retry.backoff.ms


def value_of(partition: int, round_: int, pad: int = 0) -> bytes:
    return f"p{partition}-r{round_}-".encode() + b"x" * pad


class PartitionsClient:
    """One connection; ``produce_round`` and ``read_all`` pipeline up to ``depth`` requests."""

    def __init__(self, port: int, topic: str, partitions: int, *, per_request: int = 200, depth: int = 4,
                 timeout_s: float = 120.0) -> None:
        """``timeout_s``: for one response, and for retrying partitions that answer a
        RETRIABLE error (as a client does until delivery.timeout.ms)."""
        self.topic = topic
        self.partitions = partitions
        self.per_request = per_request
        self.depth = depth
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.timeout_s = timeout_s
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "PartitionsClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _slices(self, partitions: list[int] | None = None) -> list[list[int]]:
        ps = list(range(self.partitions)) if partitions is None else partitions
        return [ps[i:i + self.per_request] for i in range(0, len(ps), self.per_request)]

    def _retry(self, pending: set[int], deadline: float, errors: dict[int, int]) -> None:
        """Before another pass over the partitions that answered a retriable error."""
        if time.monotonic() > deadline:
            raise AssertionError(f"{self.topic}: partitions still failing after {self.timeout_s} s: "
                                 f"{sorted(errors.items())[:10]}")
        time.sleep(RETRY_BACKOFF_S)

    def _pipeline(self, frames, on_response) -> None:
        """Send ``frames`` (an iterable of (correlation id, frame, context)) keeping ``depth`` in flight."""
        in_flight: deque = deque()
        for correlation_id, frame, context in frames:
            if len(in_flight) >= self.depth:
                self._receive(in_flight, on_response)
            self.sock.sendall(frame)
            in_flight.append((correlation_id, context))
        while in_flight:
            self._receive(in_flight, on_response)

    def _receive(self, in_flight: deque, on_response) -> None:
        correlation_id, context = in_flight.popleft()
        resp = read_frame(self.sock)
        got = struct.unpack_from(">i", resp, 0)[0]
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        on_response(memoryview(resp)[4:], context)

    def _next_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def produce_round(self, round_: int, acked: dict[int, list[tuple[int, bytes]]] | None = None,
                      pad: int = 0, records_per_batch: int = 1) -> int:
        """One batch (``records_per_batch`` records) to every partition, acks=1; returns the number of
        records acknowledged. ``acked[partition]`` gets (base offset, value) per acknowledged record."""
        now = int(time.time() * 1000)
        count = 0
        pending = set(range(self.partitions))
        errors: dict[int, int] = {}

        def frames():
            for part_slice in self._slices(sorted(pending)):
                batches = []
                for p in part_slice:
                    records = [Record(value=value_of(p, round_, pad) + str(i).encode(), timestamp=now)
                               for i in range(records_per_batch)]
                    batches.append((p, build_batch(records)))
                cid = self._next_id()
                frame = b"".join(bytes(c) for c in encode_produce_request(
                    PRODUCE_VERSION, cid, "partitions", 1, 30000, [(self.topic, batches)]))
                yield cid, frame, part_slice

        def on_response(body, part_slice):
            nonlocal count
            results = decode_produce_response(PRODUCE_VERSION, body, 0)
            for _topic, parts in results:
                for partition, error, base_offset, *_rest in parts:
                    if error in RETRIABLE:  # nothing written: sent again in the next pass
                        errors[partition] = error
                        continue
                    if error:
                        raise AssertionError(f"produce to {self.topic}-{partition}: error {error}")
                    pending.discard(partition)
                    count += records_per_batch
                    if acked is not None:
                        for i in range(records_per_batch):
                            acked.setdefault(partition, []).append(
                                (base_offset + i, value_of(partition, round_, pad) + str(i).encode()))

        deadline = time.monotonic() + self.timeout_s
        while True:
            errors.clear()
            self._pipeline(frames(), on_response)
            if not pending:
                return count
            self._retry(pending, deadline, errors)

    def not_served(self) -> list[int]:
        """The partitions a Fetch from offset 0 answers with an error (NOT_LEADER_OR_FOLLOWER
        until the restarted broker has been told it leads them)."""
        failing = []

        def frames():
            for chunk in self._slices():
                cid = self._next_id()
                req = FetchRequest(FETCH_VERSION, -1, 0, 0, 1, 0, 0, -1,
                                   [(self.topic, [FetchPartition(p, -1, 0, -1, 1) for p in chunk])], [], "")
                yield cid, encode_fetch_request(FETCH_VERSION, cid, "partitions", req), chunk

        def on_response(body, _chunk):
            for _topic, parts in decode_fetch_response(FETCH_VERSION, body, 0).responses:
                failing.extend(pd.partition for pd in parts if pd.error_code)

        self._pipeline(frames(), on_response)
        return failing

    def read_all(self, max_bytes: int = 1 << 20) -> dict[int, list[tuple[int, bytes]]]:
        """Every record of every partition from offset 0: {partition: [(offset, value)]}."""
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(self.partitions)}
        offsets = {p: 0 for p in range(self.partitions)}
        pending = set(range(self.partitions))
        errors: dict[int, int] = {}
        deadline = time.monotonic() + self.timeout_s
        while pending:
            if errors:
                self._retry(pending, deadline, errors)
                errors.clear()
            todo = sorted(pending)
            chunks = [todo[i:i + self.per_request] for i in range(0, len(todo), self.per_request)]

            def frames():
                for chunk in chunks:
                    cid = self._next_id()
                    req = FetchRequest(FETCH_VERSION, -1, 0, 0, max_bytes, 0, 0, -1,
                                       [(self.topic, [FetchPartition(p, -1, offsets[p], -1, max_bytes)
                                                      for p in chunk])], [], "")
                    yield cid, encode_fetch_request(FETCH_VERSION, cid, "partitions", req), chunk

            def on_response(body, _chunk):
                resp = decode_fetch_response(FETCH_VERSION, body, 0)
                for _topic, parts in resp.responses:
                    for pd in parts:
                        if pd.error_code in RETRIABLE:
                            errors[pd.partition] = pd.error_code
                            continue
                        if pd.error_code:
                            raise AssertionError(f"fetch {self.topic}-{pd.partition}: error {pd.error_code}")
                        got_any = False
                        buf = bytes(pd.records or b"")
                        for pos, header in iter_batch_headers(buf):
                            for record in decode_records(header, batch_body(buf, pos, header)):
                                out[pd.partition].append((record.offset, record.value or b""))
                                got_any = True
                            offsets[pd.partition] = header.next_offset
                        if not got_any or offsets[pd.partition] >= pd.high_watermark:
                            pending.discard(pd.partition)

            self._pipeline(frames(), on_response)
        return out


def produce_for(port: int, chunks: list[tuple[str, list[int]]], seconds: float, *, records_per_batch: int = 10,
                value_size: int = 100, depth: int = 4, max_requests: int | None = None) -> tuple[int, int, float]:
    """Produce (acks=1) request after request for ``seconds`` (or until ``max_requests`` were
    sent), each to one chunk of ``chunks``
    (a topic and its partitions, one batch each) in turn, ``depth`` requests in flight; returns
    (records acknowledged, requests, seconds taken). For benchmarks: the partitions touched
    are the only thing that changes between two calls with the same chunk sizes."""
    client = PartitionsClient(port, "", 0, depth=depth)
    batch = build_batch([Record(value=b"v" * value_size, timestamp=int(time.time() * 1000))
                         for _ in range(records_per_batch)])
    records = requests = 0
    started = time.monotonic()
    deadline = started + seconds

    def frames():
        i = 0
        while time.monotonic() < deadline and (max_requests is None or i < max_requests):
            topic, partitions = chunks[i % len(chunks)]
            i += 1
            cid = client._next_id()
            frame = b"".join(bytes(c) for c in encode_produce_request(
                PRODUCE_VERSION, cid, "partitions", 1, 30000, [(topic, [(p, batch) for p in partitions])]))
            yield cid, frame, None

    def on_response(body, _context):
        nonlocal records, requests
        requests += 1
        for topic, parts in decode_produce_response(PRODUCE_VERSION, body, 0):
            for partition, error, *_rest in parts:
                if error:
                    raise AssertionError(f"produce to {topic}-{partition}: error {error}")
                records += records_per_batch

    try:
        client._pipeline(frames(), on_response)
    finally:
        client.close()
    return records, requests, time.monotonic() - started
