"""LocalMetadataStore: the metadata log on a storage.Log, snapshots, torn tails, group commit,
and a kill -9 of a process writing records."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from controller.metadata_store import (LOCK_FILE, LOG_DIR_NAME, LocalMetadataStore, MetadataStoreError, encode_batches,
                                       snapshot_file_name)
from protocol.clock import MockTime
from protocol.messages.metadata_records import MetadataRecordType as T, make_record
from protocol.records import iter_batch_headers
from storage import fileio

REPO = Path(__file__).resolve().parents[2]


def topic(name: str):
    return make_record(T.TOPIC, name=name, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name))


def config(i: int):
    return make_record(T.CONFIG, resource_type=2, resource_name="t", name="retention.ms", value=str(i))


async def open_store(path, **kw):
    store = LocalMetadataStore(path, MockTime(), **kw)
    loaded = await store.load()
    return store, loaded


def log_files(path: Path) -> list[Path]:
    return sorted((path / LOG_DIR_NAME).glob("*.log"))


async def test_empty_store_then_append_and_reload(tmp_path):
    store, loaded = await open_store(tmp_path)
    assert (loaded.snapshot_records, loaded.log_records, loaded.last_epoch, loaded.end_offset) == ([], [], -1, 0)
    epoch = await store.claim_epoch()
    assert epoch == 0
    first = store.append([topic("a"), topic("b")], epoch)
    second = store.append([config(1)], epoch)
    assert (first, second) == (2, 3)  # offset 0 is the epoch's NoOpRecord
    assert await store.wait_durable(second) == second
    store.close()

    store, loaded = await open_store(tmp_path)
    assert [o for o, _ in loaded.log_records] == [0, 1, 2, 3]
    assert [r for _, r in loaded.log_records] == [make_record(T.NO_OP), topic("a"), topic("b"), config(1)]
    assert loaded.last_epoch == 0 and loaded.end_offset == 4
    assert await store.claim_epoch() == 1
    store.close()
    # Each batch's partition leader epoch is the controller epoch that wrote it.
    data = log_files(tmp_path)[0].read_bytes()
    assert [h.partition_leader_epoch for _p, h in iter_batch_headers(data)] == [0, 0, 0, 1]


async def test_epochs_only_grow(tmp_path):
    store, _ = await open_store(tmp_path)
    epoch = await store.claim_epoch()
    store.append([config(1)], epoch + 3)
    with pytest.raises(ValueError, match="older"):
        store.append([config(2)], epoch)
    store.close()
    store, loaded = await open_store(tmp_path)
    assert loaded.last_epoch == 3
    assert await store.claim_epoch() == 4
    store.close()


async def test_torn_tail_is_cut_and_appends_continue(tmp_path):
    store, _ = await open_store(tmp_path)
    epoch = await store.claim_epoch()
    for i in range(5):
        last = store.append([config(i)], epoch)
    await store.wait_durable(last)
    store.close()
    path = log_files(tmp_path)[-1]
    data = path.read_bytes()
    ends = [pos + h.size for pos, h in iter_batch_headers(data)]
    # Half of the last batch made it to disk, then garbage.
    torn = ends[-2] + (ends[-1] - ends[-2]) // 2
    path.write_bytes(data[:torn] + b"\x07" * 9)

    store, loaded = await open_store(tmp_path)
    assert [r for _, r in loaded.log_records][1:] == [config(i) for i in range(4)]
    assert loaded.end_offset == 5
    assert store.append([config(99)], epoch) == 5
    store.close()
    store, loaded = await open_store(tmp_path)
    assert loaded.log_records[-1] == (5, config(99))
    store.close()


async def test_a_last_batch_with_a_bad_crc_is_cut(tmp_path):
    store, _ = await open_store(tmp_path)
    epoch = await store.claim_epoch()
    for i in range(3):
        last = store.append([config(i)], epoch)
    await store.wait_durable(last)
    store.close()
    path = log_files(tmp_path)[-1]
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01  # inside the last record's value: the batch CRC no longer matches
    path.write_bytes(bytes(data))
    store, loaded = await open_store(tmp_path)
    assert [r for _, r in loaded.log_records][1:] == [config(0), config(1)]
    assert loaded.end_offset == 3
    store.close()


async def test_snapshot_plus_tail_and_old_segments_deleted(tmp_path):
    store, _ = await open_store(tmp_path, segment_bytes=300)
    epoch = await store.claim_epoch()
    for i in range(10):
        last = store.append([config(i)], epoch)
    await store.wait_durable(last)
    segments_before = len(log_files(tmp_path))
    assert segments_before > 3
    await store.snapshot([topic("snap-1")], store.end_offset, epoch)
    for i in range(10, 15):
        last = store.append([config(i)], epoch)
    await store.wait_durable(last)
    second = store.end_offset
    await store.snapshot([topic("snap-2")], second, epoch)
    assert store.snapshot_offsets() == [11, second]
    # Segments wholly below the older snapshot kept are gone; the rest stay.
    remaining = [int(p.stem) for p in log_files(tmp_path)]
    assert len(remaining) < segments_before and remaining[0] <= 11
    last = store.append([config(15)], epoch)
    await store.wait_durable(last)
    store.close()

    store, loaded = await open_store(tmp_path)
    assert loaded.snapshot_offset == second and loaded.snapshot_records == [topic("snap-2")]
    assert loaded.log_records == [(second, config(15))]
    store.close()


async def test_a_damaged_newest_snapshot_falls_back_to_the_older_one(tmp_path):
    store, _ = await open_store(tmp_path, segment_bytes=300)
    epoch = await store.claim_epoch()
    store.append([config(0)], epoch)
    await store.wait_durable(store.end_offset - 1)
    older = store.end_offset
    await store.snapshot([topic("older")], older, epoch)
    for i in range(1, 6):
        store.append([config(i)], epoch)
    await store.wait_durable(store.end_offset - 1)
    newest = store.end_offset
    await store.snapshot([topic("newest")], newest, epoch)
    store.close()
    path = tmp_path / snapshot_file_name(newest)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))

    store, loaded = await open_store(tmp_path)
    assert loaded.snapshot_offset == older and loaded.snapshot_records == [topic("older")]
    assert [r for _, r in loaded.log_records] == [config(i) for i in range(1, 6)]
    store.close()


async def test_a_snapshot_newer_than_the_log_restarts_the_log_there(tmp_path):
    store, _ = await open_store(tmp_path)
    epoch = await store.claim_epoch()
    store.append([config(0)], epoch)
    await store.wait_durable(1)
    await store.snapshot([topic("s")], 2, epoch)
    store.close()
    for p in (tmp_path / LOG_DIR_NAME).iterdir():
        p.unlink()
    store, loaded = await open_store(tmp_path)
    assert (loaded.snapshot_offset, loaded.end_offset, loaded.last_epoch) == (2, 2, 0)
    assert store.append([config(1)], 1) == 2
    store.close()


async def test_group_commit_resolves_after_the_fsync_and_a_failed_fsync_is_fatal(tmp_path, monkeypatch):
    store, _ = await open_store(tmp_path)
    epoch = await store.claim_epoch()
    offsets = [store.append([config(i)], epoch) for i in range(20)]
    assert store.durable_end_offset == 1
    futures = [store.wait_durable(o) for o in offsets]
    assert not any(f.done() for f in futures)
    assert [await f for f in futures] == offsets
    assert store.durable_end_offset == 21

    def broken_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fileio, "fsync", broken_fsync)
    offset = store.append([config(99)], epoch)
    with pytest.raises(MetadataStoreError, match="fsync failed"):
        await store.wait_durable(offset)
    with pytest.raises(MetadataStoreError):
        store.append([config(100)], epoch)
    monkeypatch.undo()
    store.close()


async def test_the_directory_is_locked(tmp_path):
    store, _ = await open_store(tmp_path)
    with pytest.raises(MetadataStoreError, match="in use"):
        await LocalMetadataStore(tmp_path, MockTime()).load()
    store.close()
    other, _ = await open_store(tmp_path)
    other.close()


def test_snapshot_batches_round_trip():
    from controller.metadata_store import decode_batches

    records = [config(i) for i in range(5)]
    data = encode_batches(records, 7, 0, per_batch=2)
    items, used = decode_batches(data, what="x")
    assert used == len(data) and [r for _o, _e, r in items] == records
    assert {e for _o, e, _r in items} == {7} and [o for o, _e, _r in items] == list(range(5))
    with pytest.raises(MetadataStoreError, match="bad batch"):
        decode_batches(data[:-1], what="x")


WRITER = textwrap.dedent("""
    import asyncio, sys
    from controller.metadata_store import LocalMetadataStore
    from protocol.client import SystemTime
    from protocol.messages.metadata_records import MetadataRecordType as T, make_record

    async def main(path):
        store = LocalMetadataStore(path, SystemTime(), segment_bytes=4096)
        await store.load()
        epoch = await store.claim_epoch()
        i = 0
        while True:
            offsets = []
            for _ in range(7):  # several appends share one fsync
                rec = make_record(T.CONFIG, resource_type=2, resource_name="t", name="n", value=str(i))
                offsets.append((store.append([rec], epoch), i))
                i += 1
            for offset, value in offsets:
                await store.wait_durable(offset)
                print(offset, value, flush=True)

    asyncio.run(main(sys.argv[1]))
""")


async def test_kill_9_keeps_every_record_whose_append_was_acknowledged(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), text=True)
    acknowledged = []
    try:
        for line in proc.stdout:
            acknowledged.append(tuple(int(x) for x in line.split()))
            if len(acknowledged) >= 400:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert len(acknowledged) >= 400, "the writer died early"
    store, loaded = await open_store(tmp_path)
    on_disk = {offset: record for offset, record in loaded.log_records}
    for offset, value in acknowledged:
        assert on_disk[offset].value == str(value), offset
    # Everything after the acknowledged prefix that survived is whole records too, in order.
    assert sorted(on_disk) == list(range(len(on_disk)))
    store.close()


async def test_a_flush_without_descriptors_is_retried_with_backoff_not_fatal(tmp_path, monkeypatch):
    """EMFILE while duplicating the descriptors to fsync is no failed fsync: the records stay
    pending (nobody is told they are durable) and the flush is tried again on the clock."""
    time = MockTime()
    store = LocalMetadataStore(tmp_path, time)
    await store.load()
    epoch = await store.claim_epoch()
    real_dup = os.dup
    refused = []

    def no_descriptors(fd):
        refused.append(time.monotonic_ms())
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(fileio, "dup", no_descriptors)
    offset = store.append([config(1)], epoch)
    durable = store.wait_durable(offset)
    time.sleep(10 + 20 + 40)
    await asyncio.sleep(0)
    assert not durable.done() and store.durable_end_offset <= offset
    assert [t - refused[0] for t in refused] == [0, 10, 30, 70]  # 10 ms doubling
    monkeypatch.setattr(fileio, "dup", real_dup)
    time.sleep(80)
    assert await durable == offset
    assert store.append([config(2)], epoch) == offset + 1  # the store goes on
    store.close()


async def test_a_failed_close_of_the_lock_descriptor_is_not_repeated(tmp_path, monkeypatch):
    """close(2) frees the descriptor even when it reports an error (Linux), so a store closed
    again must not close that number again: by then another file may have it (the simulator's
    "closing the metadata log failed: [Errno 9]" was such a second close)."""
    store, _ = await open_store(tmp_path)
    opened: dict[int, str] = {}
    closes: list[str] = []
    real_open, real_close = fileio.open, fileio.close

    def open_(path, flags, mode=0o777):
        fd = real_open(path, flags, mode)
        opened[fd] = Path(path).name
        return fd

    def close(fd):
        name = opened.get(fd, "?")
        closes.append(name)
        real_close(fd)
        if name == LOCK_FILE and closes.count(name) == 1:
            raise OSError(errno.EIO, "Input/output error")

    # (the lock's descriptor was opened before the patch: reopened here to know its number)
    store.close()
    monkeypatch.setattr(fileio, "open", open_)
    monkeypatch.setattr(fileio, "close", close)
    store, _ = await open_store(tmp_path)
    with pytest.raises(OSError, match="Input/output"):
        store.close()
    store.close()
    assert closes.count(LOCK_FILE) == 1


async def test_a_log_that_fails_to_close_still_releases_the_lock_and_is_not_closed_again(tmp_path, monkeypatch):
    from storage.log import Log
    store, _ = await open_store(tmp_path)
    epoch = await store.claim_epoch()
    await store.wait_durable(store.append([config(1)], epoch))
    real_close = Log.close
    calls = []

    def failing_close(log, **kw):
        calls.append(log)
        real_close(log, **kw)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Log, "close", failing_close)
    with pytest.raises(OSError, match="Input/output"):
        store.close()
    store.close()
    assert len(calls) == 1
    monkeypatch.undo()
    other, loaded = await open_store(tmp_path)  # the directory is not locked any more
    assert loaded.log_records[-1][1] == config(1)
    other.close()


async def test_close_while_a_flush_is_in_flight_fails_its_waiters_cleanly(tmp_path):
    """close() during a flush: the flush's completion, run by the loop after close() gave the log
    up, neither touches the closed log (an AttributeError on None, logged by the loop's handler) nor
    leaves its waiter hanging: the waiter fails with MetadataStoreError."""
    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        store, _ = await open_store(tmp_path)
        epoch = await store.claim_epoch()
        offset = store.append([config(1)], epoch)
        waiter = store.wait_durable(offset)  # starts a flush on the executor
        store.close()  # waits for the executor: the flush ran, its completion is still queued
        with pytest.raises(MetadataStoreError, match="closed"):
            await asyncio.wait_for(waiter, 5)
        for _ in range(3):
            await asyncio.sleep(0)
        assert errors == []
    finally:
        loop.set_exception_handler(None)
