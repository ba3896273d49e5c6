"""Helpers of the resource tests (issue 12 §2-§5): raw frames over plain sockets, and what a
broker process holds, read from /proc (descriptors, RSS)."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time

from controller.launcher import read_exactly
from protocol.client import KafkaClient
from protocol.fast_codecs import (FetchPartition, FetchRequest, decode_produce_response, encode_fetch_request,
                                  encode_produce_request, encode_request_header)
from protocol.records import Record, build_batch


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def socket_count(pid: int) -> int:
    n = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """``field`` of /proc/<pid>/status in bytes: the RSS, or a part of it (RssAnon, RssFile)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field}")


def create_topics(bootstrap: str, topics: list[tuple[str, int]], configs: dict | None = None) -> None:
    async def create() -> None:
        async with KafkaClient(bootstrap, client_id="robustness-admin") as client:
            await client.create_topics([(name, n, -1, configs) for name, n in topics])
    asyncio.run(create())


def fetch_frame(topic: str, partition: int, offset: int, *, max_wait_ms: int, min_bytes: int = 1,
                correlation_id: int = 1, version: int = 4) -> bytes:
    req = FetchRequest(version, -1, max_wait_ms, min_bytes, 1 << 20, 0, 0, -1,
                       [(topic, [FetchPartition(partition, -1, offset, -1, 1 << 20)])], [], "")
    return encode_fetch_request(version, correlation_id, "robustness", req)


def produce_frame(topic: str, partition: int, value: bytes, correlation_id: int = 1, acks: int = 1) -> bytes:
    batch = build_batch([Record(value=value, timestamp=int(time.time() * 1000))])
    return b"".join(bytes(c) for c in encode_produce_request(7, correlation_id, "robustness", acks, 30000,
                                                             [(topic, [(partition, batch)])]))


def request_frame(api_key: int, version: int, body: bytes, correlation_id: int = 1, flexible: bool = False) -> bytes:
    raw = encode_request_header(api_key, version, correlation_id, "robustness", flexible) + body
    return struct.pack(">i", len(raw)) + raw


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", read_exactly(sock, 4))[0]
    return read_exactly(sock, size)


def produce(sock: socket.socket, topic: str, partition: int, value: bytes, correlation_id: int = 1) -> int:
    """One acks=1 produce on ``sock``; returns the partition's error code."""
    sock.sendall(produce_frame(topic, partition, value, correlation_id))
    resp = read_frame(sock)
    assert struct.unpack_from(">i", resp, 0)[0] == correlation_id
    return decode_produce_response(7, resp, 4)[0][1][0][1]


def closed_by_peer(sock: socket.socket, timeout_s: float) -> bool:
    """True once the broker closed ``sock`` (EOF or reset) within ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
