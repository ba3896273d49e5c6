"""kcat (Debian's, librdkafka 2.0.2) against the broker: metadata, produce, consume, keys,
partitions, compression."""

from __future__ import annotations

import subprocess

import pytest

from protocol.compression import Compression

from .helpers import create_topic, stored_batches


def kcat(path, broker, *args, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run([path, "-b", broker.bootstrap, *args], input=stdin, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc


def test_metadata(threaded_broker, kcat_path):
    create_topic(threaded_broker, "meta", partitions=3)
    out = kcat(kcat_path, threaded_broker, "-L").stdout.decode()
    assert f"broker 0 at 127.0.0.1:{threaded_broker.port} (controller)" in out
    assert 'topic "meta" with 3 partitions' in out
    for p in range(3):
        assert f"partition {p}, leader 0, replicas: 0, isrs: 0" in out


def test_10000_lines_round_trip_in_order(threaded_broker, kcat_path, tmp_path):
    lines = [f"line-{i:05d}-{'x' * (i % 50)}".encode() for i in range(10_000)]
    kcat(kcat_path, threaded_broker, "-P", "-t", "t1", stdin=b"\n".join(lines) + b"\n")
    out = kcat(kcat_path, threaded_broker, "-C", "-t", "t1", "-e").stdout
    assert out.split(b"\n")[:-1] == lines
    batches = stored_batches(tmp_path / "data", "t1", 0)
    assert sum(b.records_count for b in batches) == 10_000
    assert [b.base_offset for b in batches] == sorted(b.base_offset for b in batches)


def test_keys_and_a_chosen_partition(threaded_broker, kcat_path):
    create_topic(threaded_broker, "keyed", partitions=3)
    rows = [f"k{i % 7}:value {i}".encode() for i in range(1000)]
    kcat(kcat_path, threaded_broker, "-P", "-t", "keyed", "-K:", "-p", "2", stdin=b"\n".join(rows) + b"\n")
    out = kcat(kcat_path, threaded_broker, "-C", "-t", "keyed", "-p", "2", "-e", "-f", "%k|%s|%o\n").stdout
    got = [line.split(b"|") for line in out.split(b"\n")[:-1]]
    assert [k + b":" + v for k, v, _ in got] == rows
    assert [int(o) for _, _, o in got] == list(range(1000))
    for other in (0, 1):
        empty = kcat(kcat_path, threaded_broker, "-C", "-t", "keyed", "-p", str(other), "-e").stdout
        assert empty == b""


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_stored_as_sent(threaded_broker, kcat_path, tmp_path, codec):
    topic = f"z-{codec}"
    rows = [f"compressible {codec} row {i} ".encode() * 4 for i in range(2000)]
    kcat(kcat_path, threaded_broker, "-P", "-t", topic, "-z", codec, stdin=b"\n".join(rows) + b"\n")
    batches = stored_batches(tmp_path / "data", topic, 0)
    assert batches and all(b.compression == Compression[codec.upper()] for b in batches)
    out = kcat(kcat_path, threaded_broker, "-C", "-t", topic, "-e").stdout
    assert out.split(b"\n")[:-1] == rows
