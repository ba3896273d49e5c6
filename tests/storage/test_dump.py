"""The dump command: batches of a .log (with CRC validity), index entries, bad files."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from storage_helpers import batch, open_log

from storage.dump import dump

REPO = Path(__file__).resolve().parents[2]


def make_log(tmp_path):
    log = open_log(tmp_path / "t-0", index_interval_bytes=0, segment_index_bytes=1200)
    for i in range(4):
        log.append_as_leader(batch(3, value_size=10), leader_epoch=2)
    return log


def run(path, **kw):
    out = io.StringIO()
    code = dump(path, out, **kw)
    return code, out.getvalue()


def test_dump_log_index_and_timeindex(tmp_path):
    log = make_log(tmp_path)
    segment = log.active_segment
    code, text = run(segment.log_path, print_records=True)
    assert code == 0
    lines = text.splitlines()
    assert lines[1] == "Log starting offset: 0"
    assert lines[2].startswith("baseOffset: 0 lastOffset: 2 count: 3 ")
    assert "partitionLeaderEpoch: 2" in lines[2] and "position: 0" in lines[2] and "isvalid: true" in lines[2]
    assert lines[3].startswith("| offset: 0 CreateTime: ") and "payload: AAAAAAAAAA" in lines[3]
    assert sum(line.startswith("baseOffset:") for line in lines) == 4
    log.flush()  # an active segment's index entries reach its file behind (storage/index.py)
    code, text = run(segment.index_path)
    assert code == 0 and "offset: 5 position:" in text
    with open(segment.index_path, "ab") as f:  # as an older broker left it: preallocated, untrimmed
        f.write(bytes(800))
    code, text = run(segment.index_path)
    assert code == 0 and "offset: 5 position:" in text and "empty preallocated entries not shown" in text
    code, text = run(segment.time_index_path)
    assert code == 0 and text.splitlines()[1].startswith("timestamp: ")


def test_dump_flags_bad_crc_trailing_bytes_and_index_mismatch(tmp_path):
    log = make_log(tmp_path)
    segment = log.active_segment
    log.close()
    data = bytearray(segment.log_path.read_bytes())
    data[100] ^= 1
    segment.log_path.write_bytes(bytes(data) + b"\x01\x02\x03")
    code, text = run(segment.log_path)
    assert code == 1 and "isvalid: false" in text and "Found 3 invalid bytes at the end" in text
    index = bytearray(segment.index_path.read_bytes())
    index[7] ^= 1  # first entry's position
    segment.index_path.write_bytes(bytes(index))
    code, text = run(segment.index_path)
    assert code == 1 and "Index mismatch" in text


def test_dump_producer_snapshot(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(3, producer_id=7, producer_epoch=1, base_sequence=0), leader_epoch=0)
    log.close()
    path = log.dir / "00000000000000000003.snapshot"
    code, text = run(path)
    assert code == 0 and text.splitlines()[1:] == [
        "Producer state at offset: 3",
        "producerId: 7 producerEpoch: 1 lastTimestamp: 1700000000002 firstSequence: 0 lastSequence: 2 lastOffset: 2 "
        "offsetDelta: 2 timestamp: 1700000000002"]
    path.write_bytes(path.read_bytes()[:-1])
    code, text = run(path)
    assert code == 1 and "is corrupt" in text


def test_dump_unknown_file_and_cli(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    assert run(tmp_path / "notes.txt")[0] == 2
    log = make_log(tmp_path)
    result = subprocess.run([sys.executable, "-m", "storage", "dump", str(log.active_segment.log_path)],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0 and "baseOffset: 9 lastOffset: 11" in result.stdout
