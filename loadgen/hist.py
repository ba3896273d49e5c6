"""Mergeable latency histograms (log-linear buckets, HdrHistogram's layout) and the statistics
a replay task returns.

A value v ≥ 0 (microseconds) falls in a bucket of relative width at most 2^-SUB_BITS (under 1 %
with SUB_BITS = 7): below 2^(SUB_BITS+1) every value has its own bucket; above, the top
SUB_BITS + 1 bits of v pick the bucket within its power of two. Histograms are plain ``{bucket: count}`` dicts, so a
Spark task can return them and ``merge`` adds them (counts add, bucket by bucket): the merged
percentiles are those of all the values together, which averaging per-task percentiles is not.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

SUB_BITS = 7
SUB = 1 << SUB_BITS

Hist = dict[int, int]


def bucket(v: int) -> int:
    if v < 2 * SUB:
        return max(v, 0)
    shift = v.bit_length() - SUB_BITS - 1
    return (shift << SUB_BITS) + (v >> shift)


def bucket_high(b: int) -> int:
    """The highest value of bucket ``b`` (what percentiles report: never below the true value)."""
    if b < 2 * SUB:
        return b
    shift = (b >> SUB_BITS) - 1
    top = b - (shift << SUB_BITS)
    return ((top + 1) << shift) - 1


def record(h: Hist, v: int, n: int = 1) -> None:
    b = bucket(int(v))
    h[b] = h.get(b, 0) + n


def merge_hist(a: Mapping[int, int], b: Mapping[int, int]) -> Hist:
    out = dict(a)
    for k, n in b.items():
        out[k] = out.get(k, 0) + n
    return out


def count(h: Mapping[int, int]) -> int:
    return sum(h.values())


def percentile(h: Mapping[int, int], q: float) -> float | None:
    """The value at quantile ``q`` (0..1), None for an empty histogram."""
    total = count(h)
    if not total:
        return None
    rank = max(1, -(-int(q * total * 1_000_000) // 1_000_000))  # ceil(q * total), at least the first value
    seen = 0
    for b in sorted(h):
        seen += h[b]
        if seen >= rank:
            return float(bucket_high(b))
    return float(bucket_high(max(h)))


def mean(h: Mapping[int, int]) -> float | None:
    total = count(h)
    if not total:
        return None
    return sum(bucket_high(b) * n for b, n in h.items()) / total


def maximum(h: Mapping[int, int]) -> float | None:
    return float(bucket_high(max(h))) if h else None


def cdf(h: Mapping[int, int]) -> list[tuple[float, float]]:
    """[(value, fraction of values ≤ value)] over the non-empty buckets."""
    total = count(h)
    out, seen = [], 0
    for b in sorted(h):
        seen += h[b]
        out.append((float(bucket_high(b)), seen / total))
    return out


def merge(a: Any, b: Any) -> Any:
    """Merge two task statistics of the same shape: numbers add (keys ending in ``_max`` take the
    larger, ``_min`` the smaller), histograms (dicts of int -> int) add, other dicts recurse."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            if k not in out:
                out[k] = v
            elif isinstance(k, str) and k.endswith("_max"):
                out[k] = max(out[k], v)
            elif isinstance(k, str) and k.endswith("_min"):
                out[k] = min(out[k], v)
            else:
                out[k] = merge(out[k], v)
        return out
    return a + b


def merge_all(items: Iterable[Any]) -> Any:
    out: Any = None
    for item in items:
        out = item if out is None else merge(out, item)
    return out
