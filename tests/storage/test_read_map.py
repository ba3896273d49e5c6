"""Read mappings past EOF (storage/file_records.py "Reading", storage/_write_window.c ReadMap).

A FileRecords read after an append used to map the file again (mmap.mmap cannot reach past
EOF): every tail fetch of a leader paid an mmap and a munmap (issue 29). A ReadMap maps
headroom past the data and exports only the written bytes. What must hold: the bytes read are
the file's, at once after each append (the same as the mmap.mmap reference, hypothesis); no
new mapping while the headroom lasts; nothing exported past the written length (a page wholly
past EOF is a SIGBUS); close refuses while views live, as mmap's does, so retiring still works;
and truncation still shrinks the file when no live view reaches past the cut."""

from __future__ import annotations

import contextlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import file_records
from storage.file_records import FileRecords

PAGE = file_records.PAGE_SIZE

pytestmark = pytest.mark.skipif(not file_records.read_maps, reason="storage._write_window is not built")


def test_reads_after_appends_use_one_mapping_while_the_headroom_lasts(tmp_path):
    records = FileRecords(tmp_path / "0.log")
    records.append(b"a" * 100)
    first = records.buffer(100)
    assert type(first) is file_records.ReadMap and len(first) == 100
    assert first.capacity >= 100 + file_records.READ_HEADROOM_MIN
    for i in range(1, 50):
        records.append(bytes([97 + i % 26]) * 1000)
        assert records.buffer(records.size) is first, "a read after an append mapped the file again"
        assert len(first) == records.size
    assert bytes(records.slice(100, 1100)) == b"b" * 1000
    # past the headroom: a new, longer mapping; the old one, unexported, is closed
    records.append(b"z" * first.capacity)
    second = records.buffer(records.size)
    assert second is not first and first.closed and second.capacity > records.size
    assert bytes(records.slice(records.size - 3, records.size)) == b"zzz"
    records.close()


def test_nothing_past_the_written_bytes_is_exported(tmp_path):
    records = FileRecords(tmp_path / "0.log")
    records.append(b"x" * 10)
    m = records.buffer(10)
    assert m.capacity > PAGE  # the pages past EOF are mapped, never exported
    view = memoryview(m)
    assert len(view) == 10 and view.readonly
    assert m[9] == ord("x") and m[5:20] == b"x" * 5
    with pytest.raises(IndexError):
        m[10]
    with pytest.raises(ValueError):
        m.extend(m.capacity + 1)
    view.release()
    records.close()


def test_close_refuses_while_views_live_and_the_file_keeps_their_bytes(tmp_path):
    records = FileRecords(tmp_path / "0.log")
    records.append(b"a" * 5000)
    view = records.slice(0, 5000)
    m = records.buffer(5000)
    with pytest.raises(BufferError):
        m.close()
    assert not file_records.try_close(m)
    # a truncation under a live view zeroes instead of shrinking (the view stays readable) ...
    records.truncate_to(1000)
    assert os.path.getsize(records.path) == 5000 and bytes(view[4990:]) == b"\0" * 10
    del view
    # ... and shrinks once the views are gone (retired mapping closed)
    records.append(b"b" * 10)
    records.truncate_to(500)
    assert os.path.getsize(records.path) == 500
    assert bytes(records.slice(0, 500)) == b"a" * 500
    records.close()


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3 * PAGE)),
    st.tuples(st.just("read"), st.integers(0, 1 << 30), st.integers(0, 1 << 30)),
    st.tuples(st.just("hold"), st.integers(0, 1 << 30), st.integers(0, 1 << 30)),
    st.tuples(st.just("drop"), st.integers(0, 10)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 30)),
    st.tuples(st.just("release"),),
), max_size=40)


@contextlib.contextmanager
def reading_with(read_maps: bool):
    saved, file_records.read_maps = file_records.read_maps, read_maps
    try:
        yield
    finally:
        file_records.read_maps = saved


def apply(records: FileRecords, op: tuple, model: bytearray, held: list[memoryview]) -> None:
    """``op`` on ``records``; ``model`` is what the file holds before it."""
    if op[0] == "append":
        records.append(bytes([(len(model) + i) % 251 for i in range(op[1])]))
    elif op[0] in ("read", "hold"):
        start, end = sorted(x % (len(model) + 1) for x in op[1:])
        view = records.slice(start, end)
        assert bytes(view) == bytes(model[start:end]), op
        if op[0] == "hold":
            held.append(view)
    elif op[0] == "drop":
        if held:
            held.pop(op[1] % len(held))  # dropped (the view goes with its last reference)
    elif op[0] == "truncate":
        records.truncate_to(op[1] % (len(model) + 1))
    elif op[0] == "release":
        records.release_fd()


@settings(max_examples=60, deadline=None)
@given(ops=ops)
def test_a_read_map_reads_what_the_mmap_reference_reads(tmp_path_factory, ops):
    """The same operations on two files, one read through ReadMaps and one through mmap.mmap
    (``read_maps`` off, the reference): every read gives the model's bytes, views held across
    appends and truncations never reach past the file (that would be a SIGBUS)."""
    base = tmp_path_factory.mktemp("rm")
    files = {flag: FileRecords(base / f"{flag}.log") for flag in (True, False)}
    held: dict[bool, list[memoryview]] = {True: [], False: []}
    model = bytearray()
    for op in ops:
        for flag, records in files.items():
            with reading_with(flag):
                apply(records, op, model, held[flag])
        if op[0] == "append":
            model += bytes([(len(model) + i) % 251 for i in range(op[1])])
        elif op[0] == "truncate":
            del model[op[1] % (len(model) + 1):]
        for flag, records in files.items():
            with reading_with(flag):
                assert records.size == len(model)
                assert bytes(records.slice(0, len(model))) == bytes(model), flag
                assert all(len(view) <= os.path.getsize(records.path) for view in held[flag])
    held.clear()
    for records in files.values():
        records.close()


def test_an_empty_read_released_by_its_caller_leaves_later_empty_reads_whole(tmp_path):
    """An empty read is a view of its own: a caller releasing it (as the fetch path may, once
    its answer is sent) does not release the next caller's."""
    records = FileRecords(tmp_path / "0.log")
    records.append(b"a" * 10)
    for empty in (lambda: records.buffer(0), lambda: records.slice(5, 5)):
        first = empty()
        first.release()
        assert bytes(empty()) == b"" and len(empty()) == 0
    records.close()


def test_a_read_map_refused_for_address_space_falls_back_to_a_plain_mapping(tmp_path):
    """Under ``ulimit -v`` the headroom's address space may be refused (ENOMEM): the read maps
    the file as it is, as without the C module, instead of failing the fetch."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import mmap, resource
        from storage import file_records
        from storage.file_records import FileRecords
        records = FileRecords(__import__("pathlib").Path({str(tmp_path / "0.log")!r}))
        records.append(b"q" * (40 << 20))
        vm = int(open("/proc/self/statm").read().split()[0]) * mmap.PAGESIZE
        resource.setrlimit(resource.RLIMIT_AS, (vm + (60 << 20), resource.RLIM_INFINITY))
        view = records.slice((40 << 20) - 3, 40 << 20)  # a ReadMap would need 80 MiB
        assert bytes(view) == b"qqq", bytes(view)
        print(type(records._map).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "mmap"
