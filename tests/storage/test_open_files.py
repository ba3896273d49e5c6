"""What segments keep open: a non-active one one descriptor (the ``.log`` mapping) and
in-memory index copies, an active one its ``.log`` (descriptor and mapping) and in-memory
indexes, in two budgeted caches (descriptors sized from RLIMIT_NOFILE, active segments
included, so an idle partition gives its descriptors up; copies by bytes), and how those
copies stay consistent across roll, truncation, retention, recovery and reopening."""

from __future__ import annotations

import os
import resource

import pytest
from storage_helpers import START_MS, batch, check_consistent, open_log

from protocol.clock import MockTime
from protocol.records import iter_batch_headers
from storage import Log, LogConfig, LogManager
from storage import file_records
from storage import segment_budget as budget_module
from storage.index import COPY_MAX_BYTES
from storage.offset_index import OffsetIndex
from storage.segment_budget import ACTIVE_SEGMENT_FDS, BudgetCache, OpenSegmentBudget
from storage import fileio

CONFIG = dict(segment_bytes=600, index_interval_bytes=100)


def fill(log, n, **kw):
    for _ in range(n):
        log.append_as_leader(batch(2, value_size=100, **kw), 0)


def open_paths() -> list[str]:
    """Files this process has descriptors of (mappings hold theirs)."""
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return paths


def read_everything(log):
    """Every offset read once; returns the base offsets of the batches seen."""
    seen = []
    for offset in range(log.log_start_offset, log.log_end_offset):
        view = log.read(offset, 1).records
        seen.append(next(iter_batch_headers(view))[1].base_offset)
    return seen


def test_a_non_active_segment_holds_its_log_mapping_and_index_copies_only(tmp_path):
    log = open_log(tmp_path / "t-0", **CONFIG)
    fill(log, 20)
    assert log.num_segments > 3
    read_everything(log)
    old = log.segments[1]
    assert old.held() == (1, old.offset_index.held_bytes + old.time_index.held_bytes)
    assert old.offset_index.in_memory and old.offset_index.entries > 0
    paths = open_paths()
    assert paths.count(str(old.log_path)) == 1  # the mapping's own descriptor, not ours as well
    assert str(old.index_path) not in paths and str(old.time_index_path) not in paths
    active = log.active_segment
    assert active.held() == (ACTIVE_SEGMENT_FDS, 0) and paths.count(str(active.log_path)) <= ACTIVE_SEGMENT_FDS
    assert str(active.index_path) not in paths and str(active.time_index_path) not in paths  # in memory
    check_consistent(log)
    log.close()


def test_an_offset_read_does_not_open_the_time_index(tmp_path):
    log = open_log(tmp_path / "t-0", **CONFIG)
    fill(log, 20)
    log.close()
    log = open_log(tmp_path / "t-0", **CONFIG)
    old = log.segments[1]
    old.close_handles()  # as after an eviction: nothing open
    log.read(old.base_offset, 1)
    assert old._offset_index is not None and old._time_index is None
    log.close()


def test_the_descriptor_budget_keeps_index_copies_of_evicted_segments(tmp_path, monkeypatch):
    budget = OpenSegmentBudget(ACTIVE_SEGMENT_FDS + 3)  # the active segment's, 3 for the rest
    log = open_log(tmp_path / "t-0", budget=budget, **CONFIG)
    fill(log, 40)
    expected = read_everything(log)
    mapped = [s for s in log.segments if not s.active and s._records is not None]
    assert len(mapped) <= 3
    assert budget.files.total <= ACTIVE_SEGMENT_FDS + 3
    copies = [s for s in log.segments if not s.active and s._offset_index is not None]
    assert len(copies) == log.num_segments - 1  # copies outlive the mappings
    opened = []
    real_open = os.open
    monkeypatch.setattr(fileio, "open", lambda path, *a, **kw: opened.append(str(path)) or real_open(path, *a, **kw))
    assert read_everything(log) == expected
    assert opened and not [p for p in opened if p.endswith(".index")]  # a miss maps the .log only
    check_consistent(log)
    log.close()


def test_the_copy_budget_drops_the_oldest_copies(tmp_path):
    budget = OpenSegmentBudget(1000)
    log = open_log(tmp_path / "t-0", budget=budget, **CONFIG)
    fill(log, 40)
    read_everything(log)
    one_copy = log.segments[1].held()[1]
    budget.copies.budget = 3 * one_copy
    fill(log, 1)  # a roll hands the copies of the segment it closes to the cache
    log.roll()
    assert 0 < budget.copies.total <= 3 * one_copy
    copies = [s for s in log.segments if not s.active and s._offset_index is not None and s._offset_index.in_memory]
    assert 0 < len(copies) <= 3
    assert read_everything(log)[-1] == log.log_end_offset - 2
    check_consistent(log)
    log.close()


def test_copies_follow_truncation_into_a_cached_segment_then_roll_and_reopen(tmp_path):
    log = open_log(tmp_path / "t-0", **CONFIG)
    fill(log, 20)
    read_everything(log)  # every segment holds index copies
    middle = log.segments[2]
    target = middle.base_offset + 2
    assert middle.offset_index.read_only
    log.truncate_to(target)
    assert log.active_segment is middle and not middle.offset_index.read_only
    assert log.log_end_offset == target
    fill(log, 12, ts=1_800_000_000_000)
    expected = read_everything(log)
    assert expected == sorted(expected) and expected[-1] == log.log_end_offset - 2
    check_consistent(log)
    assert middle.offset_index.read_only  # rolled again: back to a copy, of the new entries
    assert middle.offset_index.entries == OffsetIndex(middle.index_path, middle.base_offset, read_only=True).entries
    log.close()
    reopened = open_log(tmp_path / "t-0", **CONFIG)
    assert not reopened.recovery_report.needed_recovery
    assert read_everything(reopened) == expected
    reopened.close()


def test_retention_and_delete_leave_nothing_in_the_caches(tmp_path):
    budget = OpenSegmentBudget(1000)
    log = open_log(tmp_path / "t-0", budget=budget, retention_bytes=1000, **CONFIG)
    fill(log, 30)
    read_everything(log)
    old = log.segments[:-1]
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() > 0
    deleted = [s for s in old if s not in log.segments]
    assert deleted and all(s not in budget.files._costs and s not in budget.copies._costs for s in deleted)
    assert all(s._records is None and s._offset_index is None for s in deleted)
    remaining = log.segments
    log.delete()
    assert all(s not in budget.files._costs and s not in budget.copies._costs for s in remaining)
    assert budget.files.total == 0 and budget.copies.total == 0


def test_recovery_of_non_active_segments_keeps_only_read_handles(tmp_path):
    log = open_log(tmp_path / "t-0", **CONFIG)
    fill(log, 20)
    del log  # unclean: recover everything from offset 0
    recovered = Log.open(tmp_path / "t-0", LogConfig(**CONFIG), time=MockTime(), recovery_point=0,
                         had_clean_shutdown=False)
    assert recovered.recovery_report.segments_recovered == recovered.num_segments
    for segment in recovered.segments[:-1]:
        for index in (segment._offset_index, segment._time_index):
            assert index is None or index.read_only
        assert segment.held()[0] <= 1
        assert os.path.getsize(segment.index_path) == segment.offset_index.entries * 8  # trimmed
    check_consistent(recovered)
    recovered.close()


def test_an_idle_active_segment_gives_its_descriptors_up_and_reopens_on_use(tmp_path):
    """Active segments are in the descriptor budget like the others: with room for one
    descriptor, logs take turns; each append or read reopens what the last user of another
    log closed (or opens its file for that write only), and nothing is lost or reordered."""
    budget = OpenSegmentBudget(1)
    logs = [open_log(tmp_path / f"t-{p}", budget=budget, **CONFIG) for p in range(5)]
    assert budget.files.total == 0  # loaded logs hold nothing until used
    for round_ in range(7):  # rolls too (segment_bytes 600)
        for log in logs:
            log.append_as_leader(batch(2, value_size=100, ts=1_700_000_000_000 + round_), 0)
            assert budget.files.total <= 1  # an appending active segment holds its .log descriptor only
            held = [other for other in logs if any(s.held()[0] for s in other.segments)]
            assert len(held) <= 1  # the others gave their descriptors up (or wrote without keeping one)
            assert sum(open_paths().count(str(s.log_path)) for other in logs for s in other.segments) <= 1
    paths = [p for p in open_paths() if p.startswith(str(tmp_path))]  # (not another test's leftover files)
    assert sum(paths.count(str(log.active_segment.log_path)) for log in logs) <= 1
    assert not [p for p in paths if p.endswith((".index", ".timeindex"))]
    for log in logs:
        assert log.log_end_offset == 14 and log.num_segments > 2
        assert read_everything(log) == [o - o % 2 for o in range(14)]
        check_consistent(log)
        log.flush()  # fsyncs the files of a closed active segment: opened for the flush only
        assert log.recovery_point == 14
    assert budget.files.total <= ACTIVE_SEGMENT_FDS  # the last read's: its .log descriptor and mapping
    for log in logs:
        log.close()
    reopened = [open_log(tmp_path / f"t-{p}", budget=budget, **CONFIG) for p in range(5)]
    assert all(not log.recovery_report.needed_recovery and log.log_end_offset == 14 for log in reopened)
    for log in reopened:
        check_consistent(log)
        log.close()


def test_a_mapping_still_read_when_its_segment_gives_its_files_up_is_closed_once_free(tmp_path):
    """A Fetch response may still hold a view of a segment's mapping when the budget closes
    that segment's files: the mapping (and its descriptor) goes once the view is gone, on the
    next opening of any segment, not only when that segment is used again."""
    budget = OpenSegmentBudget(ACTIVE_SEGMENT_FDS)
    first, second, third = (open_log(tmp_path / f"t-{p}", budget=budget, **CONFIG) for p in range(3))
    fill(first, 1)
    view = first.read(0, 1 << 20).records  # a response not yet written
    fill(second, 1)
    assert second.read(0, 1 << 20).records  # the budget closes first's files, but its mapping is still read
    assert first.active_segment.held() == (0, 0)
    path = str(first.active_segment.log_path)
    assert open_paths().count(path) == 1  # the mapping's descriptor, kept while the view lives
    assert bytes(view[:8]) == bytes(8)  # still readable: base offset 0
    del view
    fill(third, 1)
    assert third.read(0, 1 << 20).records  # an opening of another log: first's old mapping is closed now
    assert open_paths().count(path) == 0
    assert budget._retired == []
    for log in (first, second, third):
        check_consistent(log)
        log.close()


def test_index_files_come_with_entries_and_a_missing_active_index_is_an_empty_one(tmp_path, caplog):
    """Creating files costs (a partition is created with one file, not three): an index file
    appears with its first entry, a flush or a roll. A log closed before its active segment
    got an offset-index entry has no .index, and loads without a rebuild."""
    log = open_log(tmp_path / "t-0")  # index.interval.bytes 4096: a few small batches add no entry
    assert [p.name for p in log.dir.iterdir() if p.suffix != ".log"] == []
    fill(log, 3)
    log.close()
    names = {p.name for p in log.dir.iterdir()}
    assert "00000000000000000000.index" not in names
    assert "00000000000000000000.timeindex" in names  # the final entry: the largest timestamp
    reopened = open_log(tmp_path / "t-0")
    assert not reopened.recovery_report.needed_recovery and "rebuilding" not in caplog.text
    assert reopened.log_end_offset == 6 and reopened.active_segment.max_timestamp_so_far == START_MS + 1
    fill(reopened, 60)  # entries now, and rolls: every rolled segment has both files
    reopened.roll()
    assert all(s.index_path.exists() and s.time_index_path.exists() for s in reopened.segments[:-1])
    check_consistent(reopened)
    reopened.close()


def test_the_descriptor_budget_comes_from_rlimit_nofile(monkeypatch, tmp_path):
    maps = tmp_path / "max_map_count"
    maps.write_text("65530\n")
    monkeypatch.setattr(budget_module, "_MAX_MAP_COUNT", maps)
    limits = {"nofile": (20000, 20000)}
    monkeypatch.setattr(resource, "getrlimit", lambda _what: limits["nofile"])
    assert budget_module.open_files_budget() == 20000 - 2500  # an eighth stays for sockets and the rest
    limits["nofile"] = (1024, 4096)
    assert budget_module.open_files_budget() == 1024 - 256
    limits["nofile"] = (100, 100)
    assert budget_module.open_files_budget() == budget_module.MIN_OPEN_FILES_BUDGET
    limits["nofile"] = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    assert budget_module.open_files_budget() == 65530 // 2  # every cached descriptor is a mapping's
    maps.write_text("1000\n")
    limits["nofile"] = (20000, 20000)
    assert budget_module.open_files_budget() == 500
    maps.write_text("65530\n")
    assert budget_module.open_files_budget(1500) == 1500  # the broker's log.open.files.max
    limits["nofile"] = (1024, 1024)
    assert budget_module.open_files_budget(1500) == 1024 - 256  # the limit still bounds it


def test_startup_raises_the_soft_limit_to_the_hard_one(monkeypatch, tmp_path):
    limits = {"nofile": (1024, 8192)}
    monkeypatch.setattr(resource, "getrlimit", lambda _what: limits["nofile"])
    monkeypatch.setattr(resource, "setrlimit", lambda _what, value: limits.update(nofile=value))
    maps = tmp_path / "max_map_count"
    maps.write_text("65530\n")
    monkeypatch.setattr(budget_module, "_MAX_MAP_COUNT", maps)
    manager = LogManager([tmp_path / "logs"], LogConfig(), time=MockTime())
    assert manager.segment_budget.files.budget == 1024 - 256  # sized from the limit when created
    manager.startup()
    assert limits["nofile"] == (8192, 8192)
    assert manager.segment_budget.files.budget == 8192 - 1024
    manager.shutdown()
    capped = LogManager([tmp_path / "capped"], LogConfig(), time=MockTime(), max_open_files=1500)
    capped.startup()
    assert capped.segment_budget.files.budget == 1500  # log.open.files.max, under the raised limit
    capped.shutdown()


def test_the_log_manager_shares_its_budget_among_its_logs(tmp_path):
    manager = LogManager([tmp_path / "logs"], LogConfig(**CONFIG), time=MockTime())
    manager.startup()
    budget = manager.segment_budget
    logs = [manager.get_or_create_log("t", p) for p in range(2)]
    budget.files.budget = 3  # 3 descriptors for both logs' segments
    for log in logs:
        fill(log, 20)
    expected = [read_everything(log) for log in logs]
    assert all(s.budget is budget for log in logs for s in log.segments)
    mapped = [s for log in logs for s in log.segments if s._records is not None]
    assert len(mapped) <= 3 and budget.files.total <= 3
    assert [read_everything(log) for log in logs] == expected
    other = LogManager([tmp_path / "other"], LogConfig(**CONFIG), time=MockTime())
    assert other.segment_budget is not budget  # one budget per owner, nothing process-wide
    manager.shutdown()


def test_a_failed_raise_keeps_the_limit_and_logs(monkeypatch, caplog):
    monkeypatch.setattr(resource, "getrlimit", lambda _what: (1024, 4096))

    def refuse(_what, _value):
        raise ValueError("not allowed")
    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert budget_module.raise_open_files_limit() == 1024
    assert "cannot raise the open files limit" in caplog.text


def test_read_only_indexes(tmp_path):
    path = tmp_path / "x.index"
    writable = OffsetIndex(path, 100, 4096, writable=True)
    for i in range(10):
        writable.append(100 + 2 * i + 1, 50 * i)
    writable.trim_to_valid_size()
    copy = OffsetIndex(path, 100, read_only=True)
    assert copy.in_memory and copy.held_fds == 0 and copy.held_bytes == 80
    assert copy.lookup(108) == writable.lookup(108) and copy.last == writable.last
    with pytest.raises(ValueError):  # full: a copy has no room
        copy.append(200, 1000)
    with pytest.raises(ValueError, match="read-only"):
        copy.truncate_to(105)
    assert writable.make_read_only() and writable.read_only and writable.lookup(108) == copy.lookup(108)
    assert OffsetIndex(tmp_path / "missing.index", 0, read_only=True).entries == 0
    big = tmp_path / "big.index"
    index = OffsetIndex(big, 0, COPY_MAX_BYTES + 4096, writable=True)
    for i in range(COPY_MAX_BYTES // 8 + 10):
        index.append(i + 1, i)
    index.trim_to_valid_size()
    mapped = OffsetIndex(big, 0, read_only=True)
    assert not mapped.in_memory and mapped.held_fds == 1 and mapped.lookup(5000) == (5000, 4999)
    assert not index.make_read_only()  # too large to copy: stays as it was
    mapped.close()
    index.close()


def test_released_log_descriptor_reopens_for_writes(tmp_path):
    log = open_log(tmp_path / "t-0", **CONFIG)
    fill(log, 3)
    segment = log.active_segment
    records = segment.records
    records.release_fd()
    assert records.held_fds == 1  # the mapping's
    fill(log, 1)  # the append reopens the file
    assert records.held_fds == 2
    fds = segment.dup_fds()
    try:
        assert all(os.fstat(fd).st_size >= 0 for fd in fds)
    finally:
        for fd in fds:
            os.close(fd)
    check_consistent(log)
    log.close()


def test_truncating_a_non_active_segment_leaves_trimmed_read_only_indexes(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=1500, index_interval_bytes=100)
    for i in range(20):
        log.append_as_leader(batch(2, value_size=100, ts=1_700_000_000_000 + 10 * i), 0)
    segment = log.segments[1]
    read_everything(log)
    assert segment.time_index.entries >= 2
    cut = segment.base_offset + 4  # keeps two batches: the entries of the later ones go
    assert segment.truncate_to(cut) > 0
    assert segment.read_next_offset() == cut
    assert not segment.active and segment.offset_index.read_only and segment.time_index.read_only
    for index, size in ((segment.offset_index, 8), (segment.time_index, 12)):
        assert os.path.getsize(index.path) == index.entries * size
    # the time index ends on the largest timestamp kept, so a reload finds it there
    assert segment.time_index.last_entry() == (segment.max_timestamp_so_far, segment.offset_of_max_timestamp_so_far)
    assert segment.load_indexes(cut) is None
    log.close()


def test_budget_cache_releases_the_oldest_unused_first():
    class Seg:
        used = 0

    released = []
    cache = BudgetCache(3, 1, released.append)
    a, b, c, d = Seg(), Seg(), Seg(), Seg()
    for seg in (a, b, c):
        cache.set(seg, 1)
    a.used = b.used = c.used = 0
    b.used = 1  # a read of b: it gets a second chance
    cache.set(d, 1)
    assert released == [a] and cache.total == 3
    cache.set(a, 1)  # b still has its chance (the bit goes, b goes last), c has none
    assert released == [a, c] and list(cache._costs) == [d, a, b]
    cache.set(d, 4)  # over the budget on its own
    assert released == [a, c, b, a] and list(cache._costs) == [d]  # the one just set always stays
    assert cache.total == 4


def log_fds(logs) -> int:
    """Descriptors this process holds of the logs' segment files (/proc/self/fd)."""
    paths = open_paths()
    return sum(paths.count(str(s.log_path)) for log in logs for s in log.segments)


def test_an_active_segment_counts_what_it_really_holds(tmp_path):
    """An appending active segment holds its .log descriptor only and counts 1 (not 2, which
    would halve what the budget keeps open); a read adds the mapping, counted when made."""
    budget = OpenSegmentBudget(1000)
    log = open_log(tmp_path / "t-0", budget=budget, segment_bytes=1 << 20)
    fill(log, 2)
    active = log.active_segment
    assert active.held() == (1, 0) and budget.files.total == 1 and log_fds([log]) == 1
    assert log.read(0, 1 << 20).records
    assert active.held() == (2, 0) and budget.files.total == 2 and log_fds([log]) == 2
    active.close_files()  # as an eviction: nothing held, the next append reopens the .log only
    assert active.held() == (0, 0) and budget.files.total == 0 and log_fds([log]) == 0
    fill(log, 1)
    assert active.held() == (1, 0) and budget.files.total == 1 and log_fds([log]) == 1
    check_consistent(log)
    log.close()


def count_opens(monkeypatch, under) -> list[str]:
    """Every os.open of a path below ``under`` from now on (the session's threaded broker, on
    a thread of this process, opens its own files meanwhile)."""
    opened: list[str] = []
    real_open = os.open
    prefix = os.fspath(under) + os.sep

    def recording_open(path, *a, **kw):
        name = os.fspath(path)
        if name.startswith(prefix):
            opened.append(name)
        return real_open(path, *a, **kw)
    monkeypatch.setattr(fileio, "open", recording_open)
    return opened


def test_appends_round_robin_over_more_logs_than_the_budget_holds_evict_nothing(tmp_path, monkeypatch):
    """10 logs written in turn, 4 descriptors: keeping a reopened file would never pay (its next
    append comes after 9 others), so the logs that hold one keep it and the others append
    through write windows, mapped on their second miss (file_records.py: the first opens and
    closes the file; without the window module, every one does); descriptors stay within
    the budget throughout."""
    budget = OpenSegmentBudget(4)
    logs = [open_log(tmp_path / f"t-{p}", budget=budget, segment_bytes=1 << 20) for p in range(10)]
    for log in logs:
        log.active_segment.close_files()  # as after loading many logs: nothing held
    fill_round = lambda: [log.append_as_leader(batch(2, value_size=100), 0) for log in logs]  # noqa: E731
    fill_round()
    holders = [log for log in logs if log.active_segment.held()[0]]
    assert len(holders) == 4 and budget.files.total == 4
    opened = count_opens(monkeypatch, tmp_path)
    for _ in range(5):
        for log in logs:
            log.append_as_leader(batch(2, value_size=100), 0)
            assert budget.files.total <= 4 and log_fds(logs) <= 4
        assert [log for log in logs if log.active_segment.held()[0]] == holders  # no eviction
    if file_records.WINDOWS:  # one open each: their windows, mapped on their second miss
        assert sorted(opened) == sorted(str(log.active_segment.log_path) for log in logs if log not in holders)
        assert budget.windows.total == 6
    else:  # one open per append of the 6 others, none for the holders
        assert len(opened) == 5 * 6
    for log in logs:
        assert log.log_end_offset == 12 and read_everything(log) == [o - o % 2 for o in range(12)]
        check_consistent(log)
        log.close()


def test_logs_that_fit_the_budget_are_admitted_on_their_second_miss_then_hit(tmp_path, monkeypatch):
    budget = OpenSegmentBudget(4)
    logs = [open_log(tmp_path / f"t-{p}", budget=budget, segment_bytes=1 << 20) for p in range(10)]
    for log in logs:
        log.active_segment.close_files()
    for _ in range(2):
        for log in logs:
            log.append_as_leader(batch(2, value_size=100), 0)
    hot = [log for log in logs if not log.active_segment.held()[0]][:3]
    for log in hot:  # a first miss (a reuse distance over the budget): written, not kept
        log.append_as_leader(batch(2, value_size=100), 0)
        assert not log.active_segment.held()[0]
    for log in hot:  # a second one, 3 misses later: kept, evicting the oldest
        log.append_as_leader(batch(2, value_size=100), 0)
        assert log.active_segment.held() == (1, 0) and budget.files.total <= 4
    opened = count_opens(monkeypatch, tmp_path)
    for _ in range(5):
        for log in hot:
            log.append_as_leader(batch(2, value_size=100), 0)
    assert opened == [] and log_fds(logs) <= 4
    for log in logs:
        check_consistent(log)
        log.close()
