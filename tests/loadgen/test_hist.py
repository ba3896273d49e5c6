"""The mergeable histograms: percentiles within the bucket precision of the exact ones, and a
merge of two histograms is the histogram of all their values together."""

from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from loadgen import hist

values = st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=300)


def exact(vs: list[int], q: float) -> int:
    s = sorted(vs)
    rank = max(1, -(-int(q * len(s) * 1_000_000) // 1_000_000))
    return s[rank - 1]


def build(vs: list[int]) -> dict[int, int]:
    h: dict[int, int] = {}
    for v in vs:
        hist.record(h, v)
    return h


@settings(max_examples=200, deadline=None)
@given(values, st.sampled_from([0.0, 0.5, 0.75, 0.99, 0.999, 1.0]))
def test_percentile_is_the_exact_one_rounded_up_to_its_bucket(vs, q):
    got = hist.percentile(build(vs), q)
    want = exact(vs, q)
    assert want <= got <= want + max(want, 1) / 128


@settings(max_examples=100, deadline=None)
@given(values, values)
def test_merge_is_the_histogram_of_all_the_values(a, b):
    assert hist.merge_hist(build(a), build(b)) == build(a + b)
    assert hist.merge({"x": build(a), "n": 1, "t_max": 3}, {"x": build(b), "n": 2, "t_max": 5}) == \
        {"x": build(a + b), "n": 3, "t_max": 5}


def test_every_value_maps_into_a_bucket_whose_top_is_at_most_one_percent_above():
    rng = random.Random(1)
    for v in list(range(3000)) + [rng.randrange(1 << 40) for _ in range(20000)]:
        b = hist.bucket(v)
        assert v <= hist.bucket_high(b) <= v + max(v, 1) / 128
        assert hist.bucket(hist.bucket_high(b)) == b


def test_empty_and_cdf():
    assert hist.percentile({}, 0.99) is None and hist.mean({}) is None and hist.cdf({}) == []
    h = build([1, 2, 2, 1000])
    assert hist.cdf(h)[-1][1] == 1.0 and hist.count(h) == 4 and hist.maximum(h) >= 1000
