"""Broker metrics: cheap counters on the data path, everything else read at scrape time.

The hot path (one event loop, one thread) only adds to plain ints and to ``FastHistogram``
lists held by objects bound once per (API, version) or per topic — no label lookup, no lock
per request. Gauges (partition counts, under-replicated, HW/LEO, purgatory sizes, ...) are
not maintained at all: collectors compute them from the broker's own state when Prometheus
scrapes. Names mirror the JMX exporter's spelling of Kafka's MBeans in Prometheus' base
units (README.md, "Metrics", has the table).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterable, Sequence

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.samples import Sample


class FastHistogram:
    """A histogram for one thread: counts per bucket (``le`` upper bounds) and a sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        out = []
        acc = 0
        for bound, n in zip(self.bounds, self.counts):
            acc += n
            out.append((_float_str(bound), acc))
        out.append(("+Inf", acc + self.counts[-1]))
        return out


def _float_str(v: float) -> str:
    return repr(float(v))


def histogram_family(name: str, doc: str, labels: Sequence[str],
                     children: Iterable[tuple[Sequence[str], FastHistogram]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=list(labels))
    for values, h in children:
        family.add_metric(list(values), h.cumulative(), h.sum)
    return family


def add_sample(family, suffix: str, labels: dict[str, str], value: float) -> None:
    """A sample with its own label set (e.g. a broker total next to per-topic series)."""
    family.samples.append(Sample(family.name + suffix, labels, value))
