"""broker/_request_stats.c against its Python reference, broker.metrics.PyRequestStats: the same
observations give the same buckets, sums and response bytes (hypothesis), and the broker uses
the C one where it is built (make test-deps builds it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import _request_stats  # make test-deps builds it: not built is a failure, not a skip
from broker import metrics
from broker.metrics import PHASES, ApiStats, PyRequestStats

NS = st.integers(min_value=0, max_value=2**62)
# Phases may come out negative (a clock stepping back, a test's fixed timestamps): Python's
# bit_length is that of the absolute value, and so is the helper's.
OBSERVATION = st.tuples(NS, NS, NS, NS, NS, st.integers(0, 2**40), st.integers(0, 2**40))


def test_the_broker_uses_the_c_helper():
    assert metrics.RequestStats is _request_stats.RequestStats


@settings(max_examples=300, deadline=None)
@given(st.lists(OBSERVATION, max_size=40))
def test_the_c_helper_agrees_with_the_reference(observations):
    c, py = _request_stats.RequestStats(), PyRequestStats()
    for o in observations:
        c.done(*o)
        py.done(*o)
    for phase in range(PHASES):
        assert c.counts(phase) == py.counts(phase)
        assert c.sum(phase) == py.sum(phase)
    assert c.response_bytes == py.response_bytes


@pytest.mark.parametrize("value", [0, 1, 2, 3, 2**31, 2**62, 2**63 - 1, -1, -2, -(2**63)])
def test_bucket_edges_are_python_s_bit_length(value):
    c, py = _request_stats.RequestStats(), PyRequestStats()
    for stats in (c, py):
        stats.done(0, 0, 0, 0, 0, value, 0)
    assert c.counts(5) == py.counts(5) and c.counts(5)[abs(value).bit_length()] == 1
    assert c.sum(5) == py.sum(5) == value


def test_bad_arguments_raise_and_count_nothing():
    c = _request_stats.RequestStats()
    with pytest.raises(TypeError):
        c.done(1, 2, 3)
    with pytest.raises(OverflowError):
        c.done(2**63, 0, 0, 0, 0, 0, 0)
    with pytest.raises(TypeError):
        c.done("1", 0, 0, 0, 0, 0, 0)
    with pytest.raises(IndexError):
        c.counts(PHASES)
    assert all(sum(c.counts(p)) == 0 for p in range(PHASES)) and c.response_bytes == 0


@pytest.mark.parametrize("stats_type", [_request_stats.RequestStats, PyRequestStats])
def test_api_stats_exports_the_same_histograms_either_way(stats_type):
    s = ApiStats("Produce", stats_type)
    s.done(1_000, 3_000, 50_000, 50_000, 60_000, 1_500, 80)
    s.done(2_000, 2_500, 9_000, 2_000_000, 2_001_000, 20_000, 80)
    assert s.response_bytes == 160
    assert s.total.count == 2 and s.total.sum == 59_000 + 1_999_000
    assert s.request_size.cumulative()[-1] == ("+Inf", 2)
    assert s.remote.sum == 1_991_000
    ref = ApiStats("Produce", PyRequestStats)
    ref.done(1_000, 3_000, 50_000, 50_000, 60_000, 1_500, 80)
    ref.done(2_000, 2_500, 9_000, 2_000_000, 2_001_000, 20_000, 80)
    for field in ("total", "queue", "local", "remote", "send", "request_size"):
        assert getattr(s, field).cumulative() == getattr(ref, field).cumulative()
        assert getattr(s, field).scaled_sum == getattr(ref, field).scaled_sum
