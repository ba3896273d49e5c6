"""Checkpoint files (Kafka's text format, atomic writes) and the leader epoch cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage import LeaderEpochFileCache, OffsetCheckpointFile
from storage.checkpoint import CheckpointFormatError


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


def test_leader_epoch_cache(tmp_path):
    leo = [100]
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path, lambda: leo[0])
    assert cache.latest_epoch() is None and cache.end_offset_for(3) == (-1, -1)
    assert cache.assign(1, 0) and cache.assign(3, 20) and cache.assign(5, 50)
    assert not cache.assign(5, 60) and not cache.assign(-1, 70)
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
    assert LeaderEpochFileCache(path, lambda: 0).entries() == [(3, 25)]
    cache.assign(7, 30)
    cache.assign(6, 28)  # an older epoch at an earlier offset replaces the newer entry, as Kafka
    assert cache.entries() == [(3, 25), (6, 28)]
    cache.clear()
    assert LeaderEpochFileCache(path, lambda: 0).entries() == []


def test_the_leader_epoch_checkpoint_is_created_in_place_then_replaced_atomically(tmp_path, monkeypatch):
    """The first entry (a new partition's first leader epoch) creates the file directly: one
    file created instead of a temp file renamed into place. An empty file, left by a process
    killed between creating and writing it, is the state before that write: no entries, no
    warning. Later changes replace the file through a temp file."""
    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (renamed.append(Path(dst).name), real_replace(src, dst)))
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path, lambda: 0)
    assert cache.assign(2, 0)
    assert renamed == [] and path.read_text() == "0\n1\n2 0\n"
    assert cache.assign(3, 10)
    assert renamed == ["leader-epoch-checkpoint"] and path.read_text() == "0\n2\n2 0\n3 10\n"
    empty = tmp_path / "empty" / "leader-epoch-checkpoint"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    cache = LeaderEpochFileCache(empty, lambda: 0)
    assert cache.entries() == [] and cache.assign(4, 0)
    assert renamed[-1] == "leader-epoch-checkpoint" and empty.read_text() == "0\n1\n4 0\n"
