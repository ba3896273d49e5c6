"""Raw Kafka frames for the robustness suites: a bare socket, Produce requests built field
by field, and record batches with chosen (possibly lying) header fields and raw record bytes."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from crc32c import crc32c

from protocol.fast_codecs import encode_request_header
from protocol.messages import APIS
from protocol.records import (ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER, HEADER_SIZE, LOG_OVERHEAD, Record, build_batch,
                              decode_records, batch_body, check_batch, iter_batch_headers, read_header)


class Raw:
    """A bare TCP connection speaking frames."""

    def __init__(self, port: int, timeout: float = 10.0, source: str | None = None):
        """``source``: the local address to connect from (127.0.0.2: another host to ACLs)."""
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.correlation_id = 0

    def request(self, api_key: int, version: int, body: bytes, flexible: bool = False) -> int:
        self.correlation_id += 1
        raw = encode_request_header(api_key, version, self.correlation_id, "robustness", flexible) + body
        self.sock.sendall(struct.pack(">i", len(raw)) + raw)
        return self.correlation_id

    def response(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def ask(self, api_key: int, version: int, body: dict):
        """One request built from its schema; its parsed response."""
        from protocol.messages import request_is_flexible, response_is_flexible
        api = APIS[api_key]
        self.request(api_key, version, api.request.build(version, body), request_is_flexible(api_key, version))
        return api.response.parse(version, self.response(), 5 if response_is_flexible(api_key, version) else 4)

    def produce(self, partitions: dict[tuple[str, int], bytes | None], version: int = 7, acks: int = 1,
                transactional_id: str | None = None) -> dict[tuple[str, int], int]:
        """One Produce request; {(topic, partition): error_code}."""
        answers = self.produce_answers(partitions, version, acks, transactional_id)
        return {key: p.error_code for key, p in answers.items()}

    def produce_answers(self, partitions: dict[tuple[str, int], bytes | None], version: int = 8, acks: int = 1,
                        transactional_id: str | None = None) -> dict:
        """One Produce request; {(topic, partition): its parsed partition response}."""
        topics: dict[str, list] = {}
        for (topic, partition), records in partitions.items():
            topics.setdefault(topic, []).append({"index": partition, "records": records})
        body = APIS[0].request.build(version, {
            "transactional_id": transactional_id, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": t, "partition_data": parts} for t, parts in topics.items()]})
        self.request(0, version, body)
        resp = APIS[0].response.parse(version, self.response(), 4)
        return {(t.name, p.index): p for t in resp.responses for p in t.partition_responses}


def good_batch(n: int = 3, value: bytes = b"v" * 20, ts: int = 1_700_000_000_000, **kw) -> bytes:
    return build_batch([Record(value=value + str(i).encode(), timestamp=ts + i) for i in range(n)], **kw)


def rebuilt(batch: bytes, *, body: bytes | None = None, fix_crc: bool = True, **fields) -> bytes:
    """``batch`` with header fields replaced (names of BatchHeader) and/or its records section
    replaced by ``body``; batchLength and (unless ``fix_crc`` is False) the CRC follow."""
    h = read_header(batch, 0)._asdict()
    h.update(fields)
    records = batch[HEADER_SIZE:] if body is None else body
    h["batch_length"] = HEADER_SIZE + len(records) - LOG_OVERHEAD if "batch_length" not in fields else h["batch_length"]
    buf = bytearray(HEADER.pack(*h.values()) + records)
    if fix_crc:
        struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


def read_log(log_dir: Path, topic: str, partition: int) -> list[tuple[int, list[Record]]]:
    """Every batch the partition's .log files hold, fully checked and decoded as a reader
    would: [(base offset, records)]. Raises on anything a consumer could not read."""
    out = []
    for path in sorted((Path(log_dir) / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        for pos, header in iter_batch_headers(data):
            h = check_batch(data, pos, pos + header.size)
            records = decode_records(h, batch_body(data, pos, h))
            assert [r.offset for r in records] == list(range(h.base_offset, h.next_offset)), "offsets not contiguous"
            out.append((h.base_offset, records))
    return out
