"""Checkpoint files (Kafka's text format, atomic writes) and the leader epoch cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage import LeaderEpochFileCache, OffsetCheckpointFile
from storage.checkpoint import CheckpointFormatError
from storage import fileio


def test_offset_checkpoint_round_trip_and_format(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    assert checkpoint.read() == {}
    checkpoint.write({("b", 1): 7, ("a-x", 0): 42})
    assert path.read_text() == "0\n2\na-x 0 42\nb 1 7\n"
    assert checkpoint.read() == {("a-x", 0): 42, ("b", 1): 7}
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\na 0 1\n", "0\n1\na zero 1\n", "", "0\n1\na 0\n"])
def test_malformed_checkpoint(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointFormatError):
        OffsetCheckpointFile(path).read()


def test_a_checkpoint_that_is_not_utf8_is_malformed(tmp_path):
    """A crash can leave any bytes: they are a CheckpointFormatError (which the leader-epoch
    cache and the log manager handle), not a UnicodeDecodeError that stops the broker."""
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\n\xff\xfe 0 1\n")
    with pytest.raises(CheckpointFormatError):
        OffsetCheckpointFile(path).read()
    path.write_bytes(b"0\n1\n0 \xc3\n")
    assert LeaderEpochFileCache(path, lambda: 0).latest_epoch() is None  # warned, and starts empty


def test_leader_epoch_cache(tmp_path):
    leo = [100]
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path, lambda: leo[0])
    assert cache.latest_epoch() is None and cache.end_offset_for(3) == (-1, -1)
    assert cache.assign(1, 0) and cache.assign(3, 20) and cache.assign(5, 50)
    assert not cache.assign(5, 60) and not cache.assign(-1, 70)
    cache.write()
    assert path.read_text() == "0\n3\n1 0\n3 20\n5 50\n"
    assert cache.end_offset_for(5) == (5, 100)
    assert cache.end_offset_for(3) == (3, 50)
    assert cache.end_offset_for(4) == (3, 50)
    assert cache.end_offset_for(0) == (0, 0)
    assert cache.end_offset_for(9) == (-1, -1)
    assert cache.epoch_for_offset(25) == 3 and cache.epoch_for_offset(50) == 5
    cache.truncate_from_end(50)
    assert cache.entries() == [(1, 0), (3, 20)]
    cache.truncate_from_start(25)
    assert cache.entries() == [(3, 25)]
    cache.write()
    assert LeaderEpochFileCache(path, lambda: 0).entries() == [(3, 25)]
    cache.assign(7, 30)
    cache.assign(6, 28)  # an older epoch at an earlier offset replaces the newer entry, as Kafka
    assert cache.entries() == [(3, 25), (6, 28)]
    cache.clear()  # written at once
    assert LeaderEpochFileCache(path, lambda: 0).entries() == []


def test_the_leader_epoch_checkpoint_is_created_in_place_then_replaced_atomically(tmp_path, monkeypatch):
    """The first write (a new partition's first leader epoch) creates the file directly: one
    file created instead of a temp file renamed into place. An empty file, left by a process
    killed between creating and writing it, is the state before that write: no entries, no
    warning. Later writes replace the file through a temp file."""
    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(fileio, "replace", lambda src, dst: (renamed.append(Path(dst).name), real_replace(src, dst)))
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path, lambda: 0)
    assert cache.assign(2, 0)
    cache.write()
    assert renamed == [] and path.read_text() == "0\n1\n2 0\n"
    assert cache.assign(3, 10)
    cache.write()
    assert renamed == ["leader-epoch-checkpoint"] and path.read_text() == "0\n2\n2 0\n3 10\n"
    empty = tmp_path / "empty" / "leader-epoch-checkpoint"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    cache = LeaderEpochFileCache(empty, lambda: 0)
    assert cache.entries() == [] and cache.assign(4, 0)
    cache.write()
    assert renamed[-1] == "leader-epoch-checkpoint" and empty.read_text() == "0\n1\n4 0\n"


def test_leader_epoch_changes_stay_in_memory_and_an_epoch_at_the_log_end_never_asks_for_a_write(tmp_path):
    """A change only changes the entries in memory; a write is needed once the entries starting
    below the LEO differ from the file's. An entry at the LEO (a leader that appended nothing)
    is not worth a write: loading drops it anyway (epoch_cache.py)."""
    leo = [10]
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path, lambda: leo[0])
    cache.assign(1, 0)
    assert not path.exists() and cache.write_needed() and cache.sync_needed()
    cache.write()
    assert path.read_text() == "0\n1\n1 0\n" and not cache.write_needed() and cache.sync_needed()
    cache.assign(2, 10)  # Partition.make_leader at the LEO
    assert cache.dirty and not cache.write_needed() and not cache.write_needed(below=10)
    assert cache.write_needed(below=11)
    assert path.read_text() == "0\n1\n1 0\n"
    leo[0] = 12  # the epoch's first batch: now the entry matters
    assert cache.write_needed()
    cache.truncate_from_end(10)  # a follower's truncation back to 10 makes it moot again
    leo[0] = 10
    assert not cache.write_needed() and cache.entries() == [(1, 0)]
    cache.truncate_from_start(4)  # the log start moved: the head differs
    assert cache.write_needed()
    cache.write(sync=True)
    assert path.read_text() == "0\n1\n1 4\n" and not cache.sync_needed() and not cache.dirty


def test_a_leader_epoch_write_never_replaces_the_file_with_an_older_state(tmp_path):
    """A write made earlier (a clean shutdown's, run on another thread) that runs after a
    newer one leaves the newer file in place (Kafka's KAFKA-17142 problem)."""
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path, lambda: 100)
    cache.assign(1, 0)
    older = cache.pending_write()
    cache.assign(2, 50)
    newer = cache.pending_write()
    newer.run()
    older.run()
    assert path.read_text() == "0\n2\n1 0\n2 50\n"
    assert cache.pending_write() is None and not cache.dirty
    older.run(sync=True)  # fsyncs what the file holds, a newer state: still no rewrite
    assert path.read_text() == "0\n2\n1 0\n2 50\n"
