"""Random sequences of append / read / truncate / roll / reopen / timestamp lookups,
checked against a simple in-memory model of the log (hypothesis state machine)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from storage_helpers import START_MS, check_consistent

from protocol.clock import MockTime
from protocol.records import Record, build_batch, iter_batch_headers
from storage import Log, LogConfig

CONFIG = LogConfig(segment_bytes=1600, index_interval_bytes=64, segment_index_bytes=96)


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="logmodel-"))
        self.time = MockTime()
        self.log = Log.open(self.tmp / "p-0", CONFIG, time=self.time)
        self.batches: list[tuple[int, bytes, list[int]]] = []  # (base offset, bytes as stored, record timestamps)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def leo(self) -> int:
        return self.batches[-1][0] + len(self.batches[-1][2]) if self.batches else 0

    @rule(stamps=st.lists(st.integers(0, 500), min_size=1, max_size=6), value_size=st.integers(0, 150),
          epoch=st.integers(0, 3))
    def append(self, stamps, value_size, epoch):
        buf = bytearray(build_batch([Record(timestamp=START_MS + s, value=b"v" * value_size) for s in stamps]))
        info = self.log.append_as_leader(buf, epoch)
        assert info.first_offset == self.leo
        self.batches.append((info.first_offset, bytes(buf), [START_MS + s for s in stamps]))

    @precondition(lambda self: self.batches)
    @rule(data=st.data(), max_bytes=st.integers(1, 3000), min_one=st.booleans())
    def read(self, data, max_bytes, min_one):
        offset = data.draw(st.integers(0, self.leo))
        got = bytes(self.log.read(offset, max_bytes, min_one_batch=min_one).records)
        start = next((i for i, (base, _b, stamps) in enumerate(self.batches) if base + len(stamps) > offset), None)
        if start is None:
            assert got == b""
            return
        expected = b"".join(b for _base, b, _s in self.batches[start:])
        assert expected.startswith(got)
        returned = [h.base_offset for _, h in iter_batch_headers(got)]
        assert sum(h.size for _, h in iter_batch_headers(got)) == len(got)  # whole batches only
        first_size = len(self.batches[start][1])
        if first_size > max_bytes:
            assert len(got) == (first_size if min_one else 0)
        else:
            assert 0 < len(got) <= max_bytes
            after = start + len(returned)
            if after < len(self.batches):  # stopped early: at max_bytes or at a segment's end
                bases = {s.base_offset for s in self.log.segments}
                assert (len(got) + len(self.batches[after][1]) > max_bytes or self.batches[after][0] in bases)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(0, self.leo))
        self.log.truncate_to(offset)
        self.batches = [b for b in self.batches if b[0] + len(b[2]) <= offset]
        assert self.log.log_end_offset == self.leo

    @rule()
    def roll(self):
        self.log.roll()

    @rule(clean=st.booleans(), data=st.data())
    def reopen(self, clean, data):
        recovery_point = data.draw(st.integers(0, self.leo))
        if clean:
            self.log.close()
        self.log = Log.open(self.tmp / "p-0", CONFIG, time=self.time, recovery_point=recovery_point,
                            had_clean_shutdown=clean)
        assert not self.log.recovery_report.truncation

    @rule(target_ts=st.integers(START_MS - 5, START_MS + 505))
    def offset_for_timestamp(self, target_ts):
        expected = next(((ts, base + i) for base, _b, stamps in self.batches for i, ts in enumerate(stamps)
                         if ts >= target_ts), None)
        found = self.log.offset_for_timestamp(target_ts)
        assert (found.timestamp, found.offset) == expected if expected else found is None

    @invariant()
    def consistent(self):
        assert self.log.log_end_offset == self.leo
        headers = check_consistent(self.log)
        assert [h.base_offset for h in headers] == [base for base, _b, _s in self.batches]


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
