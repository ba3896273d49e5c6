"""Write windows (storage/file_records.py, storage/_write_window.c): appends to active segments
that hold no descriptor go through a writable mapping of the file that holds none either.

What they must keep: every byte readable at once and after a reload, no descriptor beyond the
budget, a zero tail only while the window lives (cut by roll, close, truncation and recovery),
nothing acknowledged lost to kill -9, a full disk an error for one partition (a SIGBUS turned
into OSError), and little memory (pages behind the end given back)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from storage_helpers import batch, check_consistent, open_log
from test_enospc import small_disk  # noqa: F401  (fixture)

from protocol.clock import MockTime
from protocol.errors import KafkaStorageError
from protocol.records import iter_batch_headers
from storage import LogConfig, LogManager, file_records
from storage.segment_budget import OpenSegmentBudget

REPO = Path(__file__).resolve().parents[2]
PAGE = file_records.PAGE_SIZE


def test_the_window_module_is_built():
    """make test-deps builds storage/_write_window.c (setup.py): without it appends without a
    descriptor open and close their file, and these tests would test that instead."""
    assert file_records.WINDOWS, "storage._write_window is not built: run `make test-deps`"


def fds_of(path: Path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            pass
    return n


def window_rss(path: Path) -> int | None:
    """Bytes of this process's RSS in its writable shared mapping of ``path`` (None: not mapped)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "rw-s" and fields[-1] == str(path):
            for follower in lines[i + 1:]:
                if follower.startswith("Rss:"):
                    return int(follower.split()[1]) * 1024
    return None


def test_a_window_holds_no_descriptor_bounds_its_writes_and_gives_pages_back(tmp_path):
    from storage._write_window import Window
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 16 * PAGE)
    window = Window(fd, 4 * PAGE, 8 * PAGE)
    os.close(fd)
    assert fds_of(path) == 0 and (window.offset, window.length) == (4 * PAGE, 8 * PAGE)
    window.write(10, b"hello")
    assert path.read_bytes()[4 * PAGE + 10:4 * PAGE + 15] == b"hello"  # the page cache: seen at once
    with pytest.raises(ValueError):
        window.write(8 * PAGE - 2, b"abc")
    with pytest.raises(ValueError):
        window.write(-1, b"a")
    for page in range(8):
        window.write(page * PAGE, bytes([page + 1]) * PAGE)
    assert window_rss(path) == 8 * PAGE
    window.release(6 * PAGE + 100)  # pages wholly below: given back, the data stays
    assert window_rss(path) == 2 * PAGE
    data = path.read_bytes()
    assert [data[(4 + p) * PAGE] for p in range(8)] == list(range(1, 9))
    window.close()
    window.close()
    assert window.closed and window_rss(path) is None
    with pytest.raises(ValueError):
        window.write(0, b"x")
    with pytest.raises(ValueError):
        Window(os.open(path, os.O_RDWR), 100, PAGE)  # not page aligned


def test_a_fault_inside_a_write_is_an_oserror_not_a_dead_process(tmp_path):
    """The file shrunk under the window: the store is a SIGBUS, turned into OSError(EIO); the
    window works again once the file is long enough; other faults are not swallowed (a child
    touching a shrunk mmap.mmap still dies of SIGBUS with the handler installed)."""
    from storage._write_window import Window
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 4 * PAGE)
    window = Window(fd, 0, 4 * PAGE)
    os.close(fd)
    os.truncate(path, 0)
    with pytest.raises(OSError) as exc:
        window.write(PAGE + 10, b"x" * 100)
    assert exc.value.errno == 5
    os.truncate(path, 4 * PAGE)
    window.write(PAGE + 10, b"y" * 100)
    assert path.read_bytes()[PAGE + 10:PAGE + 110] == b"y" * 100
    window.close()
    child = r"""
import mmap, os, sys
sys.path.insert(0, sys.argv[1])
from storage._write_window import Window
path = sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_CREAT)
os.ftruncate(fd, 8192)
Window(fd, 0, 4096).close()  # the handler is installed
m = mmap.mmap(fd, 8192)
os.ftruncate(fd, 0)
m[100] = 1
print("survived")
"""
    result = subprocess.run([sys.executable, "-c", child, str(REPO), str(tmp_path / "g")], capture_output=True,
                            text=True)
    assert result.returncode == -signal.SIGBUS and "survived" not in result.stdout


def windowed_logs(tmp_path, n=10, fds=2, max_windows=None, **config):
    """``n`` logs sharing a budget of ``fds`` descriptors, holding none at first (as after
    loading many): written round-robin, all but ``fds`` of them append through windows."""
    budget = OpenSegmentBudget(fds, max_windows=max_windows)
    logs = [open_log(tmp_path / f"t-{p}", budget=budget, **config) for p in range(n)]
    for log in logs:
        log.active_segment.close_files()
    return budget, logs


def test_round_robin_appends_go_through_windows_and_read_back_at_once(tmp_path):
    budget, logs = windowed_logs(tmp_path, segment_bytes=1 << 20)
    for _ in range(30):
        for log in logs:
            log.append_as_leader(batch(3, value_size=300), 0)
            assert budget.files.total <= 2
    windowed = [log for log in logs if log.active_segment._records.has_window]
    assert len(windowed) == 8 and budget.windows.total == 8
    for log in logs:  # a read sees the last append at once (the same page cache); then one more each
        headers = list(iter_batch_headers(log.read(log.log_end_offset - 3, 1 << 20).records))
        assert [h.base_offset for _p, h in headers] == [log.log_end_offset - 3]
        log.append_as_leader(batch(3, value_size=300), 0)
        headers = list(iter_batch_headers(log.read(log.log_end_offset - 3, 1 << 20).records))
        assert [h.base_offset for _p, h in headers] == [log.log_end_offset - 3]
        assert budget.files.total <= 2
    for log in windowed:
        segment = log.active_segment
        assert fds_of(segment.log_path) == segment.held()[0]  # what a read opened, counted: the window holds none
        assert os.path.getsize(segment.log_path) > segment.size  # the window's zero tail, while it lives
        assert window_rss(segment.log_path) <= file_records.WINDOW_RELEASE_BYTES + PAGE
    for log in logs:
        assert log.log_end_offset == 93
        check_consistent(log)
        log.close()
    for p in range(10):  # a clean close trims: a reload sees exactly the data, no recovery needed
        path = tmp_path / f"t-{p}"
        sizes = [os.path.getsize(f) for f in sorted(path.glob("*.log"))]
        log = open_log(path, segment_bytes=1 << 20)
        assert [s.size for s in log.segments] == sizes and log.log_end_offset == 93
        assert not log.recovery_report.bytes_truncated
        check_consistent(log)
        log.close()


def test_a_roll_trims_the_windowed_segment_and_the_next_one_gets_a_window(tmp_path):
    budget, logs = windowed_logs(tmp_path, n=4, fds=1, segment_bytes=8 * 1024)
    for _ in range(40):
        for log in logs:
            log.append_as_leader(batch(2, value_size=500), 0)
    for log in logs:
        assert log.num_segments > 3
        for segment in log.segments[:-1]:  # every rolled segment: exactly its data on disk, no window
            assert os.path.getsize(segment.log_path) == segment.size
            assert segment._records is None or not segment._records.has_window
        check_consistent(log)
    assert budget.windows.total == 3  # one per windowed log: the rolled segments' were unmapped
    for log in logs:
        log.close()
    assert budget.windows.total == 0


def test_truncation_unmaps_the_window_and_cuts_the_file(tmp_path):
    """A follower's truncation of a windowed active segment: the window goes before the file
    shrinks (a store past EOF would be a SIGBUS); appends go on after it."""
    _budget, logs = windowed_logs(tmp_path, n=3, fds=1, segment_bytes=1 << 20)
    for _ in range(10):
        for log in logs:
            log.append_as_leader(batch(2, value_size=200), 0)
    log = logs[-1]
    segment = log.active_segment
    assert segment._records.has_window
    log.truncate_to(7)
    assert log.log_end_offset == 6 and not segment._records.has_window  # the batch holding 7 starts at 6
    assert os.path.getsize(segment.log_path) == segment.size
    for _ in range(5):
        for each in logs:
            each.append_as_leader(batch(2, value_size=200), 0)
    assert log.log_end_offset == 16
    check_consistent(log)
    for each in logs:
        each.close()


def test_the_window_budget_unmaps_the_least_recently_used(tmp_path):
    budget, logs = windowed_logs(tmp_path, n=8, fds=1, max_windows=3, segment_bytes=1 << 20)
    for _ in range(6):
        for log in logs:
            log.append_as_leader(batch(2, value_size=100), 0)
            assert budget.windows.total <= 3
    assert sum(log.active_segment._records.has_window for log in logs if log.active_segment._records) <= 3
    for log in logs:
        assert log.log_end_offset == 12
        check_consistent(log)
        log.close()


def test_a_full_disk_under_a_window_is_a_storage_error_for_that_partition(small_disk, tmp_path):  # noqa: F811
    """A 1 MiB tmpfs: a window's store into a page that cannot be had is a SIGBUS, which must
    end as KAFKA_STORAGE_ERROR for that append (nothing of it in the log), not the process;
    the log stays consistent, and appends work again once there is room."""
    if small_disk is None:
        pytest.skip("cannot mount a tmpfs here (not root?): the fault path is covered by the test above")
    budget = OpenSegmentBudget(1)
    keeper = open_log(small_disk / "keeper-0", budget=budget, segment_bytes=1 << 20)  # holds the one descriptor
    keeper.append_as_leader(batch(1), 0)
    log = open_log(small_disk / "t-0", budget=budget, segment_bytes=1 << 20, segment_index_bytes=64 * 1024)
    log.active_segment.close_files()
    (small_disk / "ballast").write_bytes(bytes(256 * 1024))
    appended = 0
    with pytest.raises(KafkaStorageError):
        for _ in range(10_000):
            keeper.append_as_leader(batch(1), 0)  # keeps the descriptor: the log below stays windowed
            appended += log.append_as_leader(batch(4, value_size=1000), 0).record_count
    assert appended > 0 and log.log_end_offset == appended
    check_consistent(log)
    (small_disk / "ballast").unlink()
    log.append_as_leader(batch(4, value_size=1000), 0)
    assert log.log_end_offset == appended + 4
    check_consistent(log)
    log.close()
    keeper.close()
    again = open_log(small_disk / "t-0", segment_bytes=1 << 20, segment_index_bytes=64 * 1024)
    assert again.log_end_offset == appended + 4
    check_consistent(again)
    again.close()


CHILD = r"""
import random, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from protocol.clock import MockTime
from protocol.records import Record, build_batch
from storage import LogConfig, LogManager

config = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024, segment_index_bytes=16 * 1024)
manager = LogManager([Path(sys.argv[2])], config, time=MockTime())
manager.startup()
manager.segment_budget.files.budget = 2  # 12 partitions round-robin: 10 of them through windows
logs = [manager.get_or_create_log("w", p) for p in range(12)]
for log in logs:
    log.active_segment.close_files()
rng = random.Random(int(sys.argv[3]))
print("ready", flush=True)
while True:
    for p, log in enumerate(logs):
        leo = log.log_end_offset
        count = rng.randint(1, 5)
        records = [Record(timestamp=1_700_000_000_000 + leo + i, key=b"%d-%d" % (p, leo + i),
                          value=bytes(rng.randint(0, 1500))) for i in range(count)]
        log.append_as_leader(build_batch(records), leader_epoch=1)
        print("acked", p, log.log_end_offset, flush=True)
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_loses_nothing_appended_through_windows(tmp_path, seed):
    """A child appends round-robin to 12 logs with a budget of 2 descriptors (so mostly through
    windows, with segment rolls) and prints each acknowledged LEO (acks=1: in the page cache);
    SIGKILL at a random moment; the parent loads the directory (an unclean start): every
    acknowledged record is there, at its offset, and the zero tails are cut."""
    rng = random.Random(seed)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO), str(tmp_path), str(seed)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().split() == ["ready"]
    acked = {}
    for _ in range(rng.randint(300, 1500)):
        _word, p, leo = child.stdout.readline().split()
        acked[int(p)] = int(leo)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    assert child.returncode == -signal.SIGKILL
    tails = [f for f in tmp_path.glob("w-*/*.log") if os.path.getsize(f) >= file_records.WINDOW_BYTES]
    assert tails  # windows were live: files extended to their window's end (past segment.bytes)
    manager = LogManager([tmp_path], LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024,
                                               segment_index_bytes=16 * 1024), time=MockTime())
    manager.startup()
    for p, leo in acked.items():
        log = manager.get_log("w", p)
        assert log.log_end_offset >= leo
        offsets = [h.base_offset for s in log.segments
                   for _pos, h in iter_batch_headers(s.records.buffer(s.size), 0, s.size)]
        assert offsets == sorted(offsets) and offsets[0] == 0
        check_consistent(log)
        active = log.active_segment
        assert os.path.getsize(active.log_path) == active.size  # recovery cut the zero tail
    manager.shutdown()


def test_the_zero_tail_check_skips_holes_and_still_finds_data_after_them(tmp_path, monkeypatch):
    """Recovery's zero-tail check (FileRecords.is_zeros): a hole is not read, a nonzero byte after
    a hole (written, or only dirty in the page cache) is found; so on a file system without
    SEEK_DATA, where everything is read."""
    from storage._write_window import Window
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 64 * PAGE)  # all hole
    os.pwrite(fd, b"\1" * 10, 0)
    records = file_records.FileRecords(path)
    real_lseek = os.lseek

    def no_seek_data(fd, pos, how):
        if how in (os.SEEK_DATA, os.SEEK_HOLE):
            raise OSError(22, "Invalid argument (injected: no SEEK_DATA)")
        return real_lseek(fd, pos, how)
    for seek_data in (True, False):
        if not seek_data:
            monkeypatch.setattr(file_records.os, "lseek", no_seek_data)
        os.pwrite(fd, b"\0", 40 * PAGE + 100)
        assert records.is_zeros(10, 64 * PAGE) and not records.is_zeros(5, 64 * PAGE)
        os.pwrite(fd, b"\2", 40 * PAGE + 100)  # data after a hole, zeros before it in its page
        assert not records.is_zeros(10, 64 * PAGE)
        assert records.is_zeros(10, 40 * PAGE + 100) and records.is_zeros(40 * PAGE + 101, 64 * PAGE)
        window = Window(fd, 50 * PAGE, 4 * PAGE)  # only dirty in the page cache, through a mapping
        window.write(PAGE + 7, b"\3")
        assert not records.is_zeros(40 * PAGE + 101, 64 * PAGE)
        window.write(PAGE + 7, b"\0")
        window.close()
    records.close()
    os.close(fd)
