"""LogSegment.read's short cut from the last append's first batch (a follower's fetch woken by
that append, issue 29) against its general path (``lean`` off), the reference: every read of a
log built by random appends (one or several batches each, as leader and as follower), rolls and
truncations answers the same bytes and first offset either way."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import batch, follower_batch, open_log

from storage.segment import LogSegment

_STEP = st.one_of(
    st.tuples(st.just("leader"), st.lists(st.integers(1, 4), min_size=1, max_size=3)),  # records per batch
    st.tuples(st.just("follower"), st.lists(st.integers(1, 4), min_size=1, max_size=3)),
    st.tuples(st.just("truncate"), st.integers(1, 3)),  # by this many offsets
)


def _reads(log) -> list:
    """Every offset from the log start to the LEO, each with max sizes around the tail's length."""
    out = []
    for offset in range(log.log_start_offset, log.log_end_offset + 1):
        for max_bytes in (1, 60, 100, 200, 300, 1 << 20):
            for max_offset in (None, log.log_end_offset, offset + 1):
                info = log.read(offset, max_bytes, max_offset)
                out.append((offset, max_bytes, max_offset, info.first_batch_offset, bytes(info.records)))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(_STEP, min_size=1, max_size=12))
def test_a_read_at_the_tail_is_the_general_paths_read(steps):
    with tempfile.TemporaryDirectory(prefix="kbroker-tailread-") as tmp:
        log = open_log(Path(tmp) / "t-0", segment_bytes=1000)  # (> the largest append, 759 bytes: rolls still come)
        try:
            for kind, arg in steps:
                if kind == "leader":
                    log.append_as_leader(b"".join(batch(n, value_size=10 * n) for n in arg), leader_epoch=0)
                elif kind == "follower":
                    data = b""
                    offset = log.log_end_offset
                    for n in arg:
                        data += follower_batch(offset, n)
                        offset += n
                    log.append_as_follower(data)
                elif log.log_end_offset > arg:
                    log.truncate_to(log.log_end_offset - arg)
                lean = _reads(log)
                LogSegment.lean = False
                try:
                    general = _reads(log)
                finally:
                    LogSegment.lean = True
                assert lean == general
        finally:
            log.close()


def test_a_follower_woken_by_an_append_reads_it_through_the_short_cut(tmp_path, monkeypatch):
    """The case it is for, checked to take it: no offset translation for the append just made,
    whether it fits the max size (its batches) or not (the general path's first batch)."""
    log = open_log(tmp_path / "t-0")
    try:
        log.append_as_leader(batch(3), leader_epoch=0)
        first, second = batch(2), batch(4)
        log.append_as_leader(first + second, leader_epoch=0)
        expected = bytes(log.read(3, 1 << 20).records)  # (stamped: base offsets and epochs)
        assert len(expected) == len(first) + len(second)
        calls = []
        translate = LogSegment.translate_offset
        monkeypatch.setattr(LogSegment, "translate_offset", lambda self, *a: calls.append(a) or translate(self, *a))
        info = log.read(3, 1 << 20)
        assert (info.first_batch_offset, bytes(info.records), calls) == (3, expected, [])
        info = log.read(3, len(expected) - 1)  # too large: the general path, its first batch
        assert (info.first_batch_offset, bytes(info.records), len(calls)) == (3, expected[:len(first)], 1)
    finally:
        log.close()
