"""``kbroker loadgen synth`` takes OpenMessaging Benchmark workload files unchanged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loadgen.recording import read_all, read_manifest
from loadgen.synth import synthesize
from protocol.fast_codecs import decode_produce_request, parse_request_header
from protocol.records import iter_records
from tests.loadgen.conftest import KBROKER

OMB = Path("/work/shared/omb")
WORKLOADS = sorted((OMB / "workloads").glob("*.yaml")) if OMB.is_dir() else []


def records_of(recording: Path) -> list[tuple[str, int, bytes | None, bytes | None]]:
    out = []
    for row in read_all(recording).to_pylist():
        frame = row["frame"]
        header = parse_request_header(frame, False)
        request = decode_produce_request(row["api_version"], memoryview(frame), header.size)
        for topic, parts in request.topics:
            for partition, data in parts:
                out += [(topic, partition, r.key, r.value) for r in iter_records(bytes(data))]
    return out


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda p: p.stem)
def test_every_omb_workload_file_synthesizes_unchanged(workload, tmp_path):
    m = synthesize(workload, tmp_path / "rec", duration_s=0.2, max_records=30_000)
    assert read_manifest(tmp_path / "rec") == {**m, "format": "kbroker-recording", "version": 1}
    assert m["requests"] == len(read_all(tmp_path / "rec"))
    assert len(m["connections"]) == m["workload"]["topics"] * m["workload"].get("producersPerTopic", 1)
    records = records_of(tmp_path / "rec")
    assert len(records) == m["records"]
    assert {t for t, _p, _k, _v in records} == set(m["topics"])
    assert all(0 <= p < m["workload"]["partitionsPerTopic"] and len(v) == m["message_size"] for _t, p, _k, v in records)


def test_rate_payload_file_keys_and_our_keys(tmp_path):
    (tmp_path / "payload").mkdir()
    (tmp_path / "payload" / "p.data").write_bytes(b"P" * 64)
    (tmp_path / "workloads").mkdir()
    workload = tmp_path / "workloads" / "w.yaml"
    workload.write_text("name: keyed\ntopics: 2\npartitionsPerTopic: 4\nmessageSize: 64\n"
                        "payloadFile: payload/p.data\nkeyDistributor: KEY_ROUND_ROBIN\nproducersPerTopic: 2\n"
                        "producerRate: 4000\nsubscriptionsPerTopic: 1\nconsumerPerSubscription: 1\n"
                        "testDurationMinutes: 1\ncompression: zstd\nacks: 1\n")
    m = synthesize(workload, tmp_path / "rec", duration_s=2)
    assert m["records"] == 4000 * 2 and m["compression"] == "zstd" and m["acks"] == 1
    records = records_of(tmp_path / "rec")
    assert len(records) == 8000 and {v for *_, v in records} == {b"P" * 64}
    from protocol.client import murmur2_partition
    assert all(p == murmur2_partition(k, 4) for _t, p, k, _v in records)
    rows = read_all(tmp_path / "rec").to_pylist()
    # Sends follow the rate: the last Produce of each producer goes out near the end of the 2 s.
    assert 1.9e6 <= max(r["send_time_us"] for r in rows) <= 2.1e6
    assert all(r["frame"][:2] == b"\x00\x00" for r in rows)


def test_cli_missing_payload_file_warns_once_and_uses_random_bytes(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text("name: x\ntopics: 1\npartitionsPerTopic: 1\nmessageSize: 10\npayloadFile: payload/none.data\n"
                        "producerRate: 100\n")
    result = subprocess.run([KBROKER, "loadgen", "synth", str(workload), "--out", str(tmp_path / "rec"), "--duration", "1"],
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(b"random bytes") == 1, result.stderr
    assert b"100 records" in result.stderr
    values = {v for *_, v in records_of(tmp_path / "rec")}
    assert all(len(v) == 10 for v in values)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntopics: 0\n")
    result = subprocess.run([KBROKER, "loadgen", "synth", str(bad), "--out", str(tmp_path / "r2")], capture_output=True)
    assert result.returncode == 2 and b"topics must be a positive integer" in result.stderr
