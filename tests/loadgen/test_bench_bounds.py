"""bench/loadgen_bench.py's part 4: its frame_server (a sink that stops by itself) outlives every
replay the part runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "loadgen_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("loadgen_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_part4s_frame_server_lives_as_long_as_its_replays_may_take():
    """Every round replays every scale twice (paced, unpaced): 3 rounds x 3 scales of a 20 s
    recording is 18 replays; the sink must not stop at a fixed 1200 s part way through, and
    grows with the rounds, the scales and the recording."""
    bench = _bench()
    seconds = bench.frame_server_seconds(3, [1, 5, 20], 20.0)
    assert seconds >= 3 * 3 * 2 * (20.0 + bench.REPLAY_BOUND_S)
    assert bench.frame_server_seconds(6, [1, 5, 20], 20.0) > seconds
    assert bench.frame_server_seconds(3, [1, 5, 20, 50], 20.0) > seconds
    assert bench.frame_server_seconds(3, [1, 5, 20], 60.0) > seconds
