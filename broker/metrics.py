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
from typing import Any, Iterable, Sequence

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


def log2_cumulative(counts: Sequence[int], exported: range, scale: float) -> list[tuple[str, float]]:
    """Cumulative buckets of a log2 histogram (bucket k holds values of bit length k, i.e.
    below 2**k), exported with upper bounds ``le = 2**k * scale`` for k in ``exported``."""
    out = []
    acc = 0
    k_done = 0
    for k in exported:
        acc += sum(counts[k_done:k + 1])  # bit_length ≤ k: value < 2**k
        k_done = k + 1
        out.append((_float_str(2 ** k * scale), acc))
    out.append(("+Inf", acc + sum(counts[k_done:])))
    return out


class Log2Histogram:
    """A histogram of non-negative ints (nanoseconds, bytes) for the hot path: a value's bucket
    is its ``bit_length()`` (no search), the sum an int. Exported with power-of-two upper
    bounds ``le = 2**k * scale`` for k in ``exported`` (each bucket k holds values below 2**k)."""

    __slots__ = ("counts", "sum", "exported", "scale")

    def __init__(self, exported: range, scale: float = 1.0) -> None:
        self.counts = [0] * 65
        self.sum = 0
        self.exported = exported
        self.scale = scale

    def observe(self, value: int) -> None:
        self.counts[value.bit_length()] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        return log2_cumulative(self.counts, self.exported, self.scale)

    @property
    def scaled_sum(self) -> float:
        return self.sum * self.scale


class PyRequestStats:
    """One API's request observations: the five phases of REQUEST_HISTOGRAMS and the request
    size as log2 histograms (65 buckets each, a value's bucket its bit length) with sums, the
    response bytes and the requests per version. The reference for broker/_request_stats.c's
    RequestStats, which the broker uses when it is built (C calls instead of ~200 bytecodes a
    request); the tests check that the two agree."""

    __slots__ = ("_counts", "_sums", "response_bytes", "_versions")

    def __init__(self) -> None:
        self._counts = [[0] * 65 for _ in range(PHASES)]
        self._sums = [0] * PHASES
        self.response_bytes = 0
        self._versions = [0] * MAX_VERSION

    def arrived(self, version: int) -> None:
        """A request read: counted by version (any int16; the last slot is "other")."""
        self._versions[version if 0 <= version < MAX_VERSION - 1 else MAX_VERSION - 1] += 1

    def done(self, t_read: int, t_start: int, t_local: int, t_ready: int, t_sent: int, request_size: int,
             response: Any, out: "PyCounter | None" = None) -> int | None:
        """A request answered: its phases, its size and the response (None, a buffer or a list
        of buffers); returns the response's size, or with a Counter ``out`` (a listener's bytes
        out) adds it there and returns None."""
        if response is None:
            size = 0
        elif isinstance(response, list):
            size = sum(map(len, response))
        else:
            size = len(response)
        if not t_local:  # answered while its handler ran: no remote time
            t_local = t_ready
        values = (t_sent - t_read, t_start - t_read, t_local - t_start, t_ready - t_local, t_sent - t_ready,
                  request_size)
        for phase, value in enumerate(values):
            self._counts[phase][value.bit_length()] += 1
            self._sums[phase] += value
        self.response_bytes += size
        if out is not None:
            out.add(size)
            return None
        return size

    def begin(self, slot: Any, version: int, t_read: int, t_start: int, frame: Any) -> None:
        """A request read: ``arrived(version)``, and its slot (a SlotTimes) given the read's and
        its start's clock readings (t_local and t_ready 0), its frame (whose length + 4 is its
        size) and these stats."""
        self.arrived(version)
        slot.t_read = t_read
        slot.t_start = t_start
        slot.t_local = slot.t_ready = 0  # not parked, not answered yet
        slot.request = frame
        slot.stats = self

    def finish(self, slot: Any, t_sent: int, response: Any, out: "PyCounter | None") -> int | None:
        """``done()`` with the slot's readings and its request's size (an int, or its frame)."""
        request = slot.request
        size = request if isinstance(request, int) else len(request) + 4
        return self.done(slot.t_read, slot.t_start, slot.t_local, slot.t_ready, t_sent, size, response, out)

    def counts(self, phase: int) -> list[int]:
        return list(self._counts[phase])

    def sum(self, phase: int) -> int:
        return self._sums[phase]

    def versions(self) -> list[int]:
        return list(self._versions)


class PyCounter:
    """A count that RequestStats.done adds response sizes to (a listener's bytes out, in the
    same call as the API's stats). The reference for broker/_request_stats.c's Counter."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> None:
        self.value += n


class PySlotTimes:
    """The base of a connection's request slot (broker/network.py RequestContext, which is its slot): its clock readings,
    its request (its size: an int, or its frame) and its API's RequestStats (``stats``), set by
    begin and read by finish (RequestStats' or Meter's). The reference for
    broker/_request_stats.c's SlotTimes, whose begin and finish reach them without an attribute
    access each (and keep the readings as C ints)."""

    __slots__ = ("t_read", "t_start", "t_local", "t_ready", "request", "stats")


class PyMeter:
    """A connection's request metrics (broker/network.py KafkaConnection._meter): its clock
    readings (the last read's, and the cursor: where the next request of the read starts), the
    API stats by key (RequestMetrics.request_stats) and its listener's byte counters.

    - ``read(data)``: a read; t_read = cursor = now, ``len(data)`` bytes in.
    - ``begin(slot, api_key, version, frame)``: the request's version counted on its API's
      stats and its slot given t_read, its start (the cursor), its frame and the stats.
    - ``parked(slot)``: handled without an answer (a purgatory): t_local = cursor = now.
    - ``ready(slot)``: answered: t_ready = cursor = now.
    - ``finish(slot, response)``: written, in the flush that follows a ready(): recorded with
      t_sent = the cursor, the response's size added to bytes out.

    ``now`` is the injected clock's nanoseconds. The reference for broker/_request_stats.c's
    Meter, which reads time.monotonic_ns' clock itself when ``now`` is that function."""

    __slots__ = ("stats", "bytes_in", "bytes_out", "now", "t_read", "t_cursor")

    def __init__(self, stats: list, bytes_in: "PyCounter", bytes_out: "PyCounter", now: Any) -> None:
        self.stats, self.bytes_in, self.bytes_out, self.now = stats, bytes_in, bytes_out, now
        self.t_read = self.t_cursor = 0

    def read(self, data: Any) -> None:
        self.t_read = self.t_cursor = self.now()
        self.bytes_in.add(len(data))

    def begin(self, slot: Any, api_key: int, version: int, frame: Any) -> None:
        self.stats[api_key].begin(slot, version, self.t_read, self.t_cursor, frame)

    def parked(self, slot: Any) -> None:
        slot.t_local = self.t_cursor = self.now()

    def ready(self, slot: Any) -> None:
        slot.t_ready = self.t_cursor = self.now()

    def finish(self, slot: Any, response: Any) -> None:
        slot.stats.finish(slot, self.t_cursor, response, self.bytes_out)


PHASES = 6  # total, queue, local, remote, send (REQUEST_HISTOGRAMS' order), then the request size
try:
    from ._request_stats import Counter, Meter, RequestStats, SlotTimes
except ModuleNotFoundError:  # not built (no compiler): the references, slower
    import logging as _logging

    _logging.getLogger("kbroker.metrics").debug("broker._request_stats is not built; request metrics in Python")
    RequestStats = PyRequestStats  # type: ignore[assignment,misc]
    Counter = PyCounter  # type: ignore[assignment,misc]
    SlotTimes = PySlotTimes  # type: ignore[assignment,misc]
    Meter = PyMeter  # type: ignore[assignment,misc]
except ImportError as _exc:
    # Built from an older source: it imports, but lacks a name this one needs ("cannot import
    # name ..."), an ImportError whose .name is the module's, as a missing one's is.
    import logging as _logging

    _logging.getLogger("kbroker.metrics").warning(
        "broker._request_stats is out of date (%s); request metrics run in Python: rebuild with "
        "`pip install -e .`", _exc)
    RequestStats = PyRequestStats  # type: ignore[assignment,misc]
    Counter = PyCounter  # type: ignore[assignment,misc]
    SlotTimes = PySlotTimes  # type: ignore[assignment,misc]
    Meter = PyMeter  # type: ignore[assignment,misc]


class PhaseHistogram:
    """One phase of a RequestStats, read at scrape time as a histogram."""

    __slots__ = ("stats", "phase", "exported", "scale")

    def __init__(self, stats: Any, phase: int, exported: range, scale: float = 1.0) -> None:
        self.stats, self.phase, self.exported, self.scale = stats, phase, exported, scale

    @property
    def counts(self) -> list[int]:
        return self.stats.counts(self.phase)

    @property
    def sum(self) -> int:
        return self.stats.sum(self.phase)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        return log2_cumulative(self.counts, self.exported, self.scale)

    @property
    def scaled_sum(self) -> float:
        return self.sum * self.scale


def _float_str(v: float) -> str:
    return repr(float(v))


def histogram_family(name: str, doc: str, labels: Sequence[str],
                     children: Iterable[tuple[Sequence[str], FastHistogram]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=list(labels))
    for values, h in children:
        family.add_metric(list(values), h.cumulative(), h.scaled_sum if isinstance(h, (Log2Histogram, PhaseHistogram)) else h.sum)
    return family


def add_sample(family, suffix: str, labels: dict[str, str], value: float) -> None:
    """A sample with its own label set (e.g. a broker total next to per-topic series)."""
    family.samples.append(Sample(family.name + suffix, labels, value))


# -- the data path: per topic (Kafka's BrokerTopicMetrics) ---------------------------------

class PyAppendCounter:
    """A topic's produce counters: ``appended(records, batch)`` for an append to a leader log,
    ``failed()`` for one refused. The reference for broker/_request_stats.c's AppendCounter (one
    C call per partition append); the tests check that the two agree."""

    __slots__ = ("requests", "messages", "bytes", "failed_appends")

    def __init__(self) -> None:
        self.requests = self.messages = self.bytes = self.failed_appends = 0

    def appended(self, records: int, batch: Any) -> None:
        self.requests += 1
        self.messages += records
        self.bytes += len(batch)

    def failed(self) -> None:
        self.requests += 1
        self.failed_appends += 1


def py_count_row_errors(results: Any, errors: dict[int, int]) -> None:
    """Every row's non-zero error code (a row's index 1) of ``results`` [(topic, [row, ...])]
    counted into ``errors``: a Produce response's partitions. The reference for
    broker/_request_stats.c's count_row_errors (one C call per response)."""
    for _topic, rows in results:
        for row in rows:
            code = row[1]
            if code:
                errors[code] = errors.get(code, 0) + 1


try:
    from ._request_stats import AppendCounter, count_row_errors
except ImportError:  # not built (no compiler): the references, slower
    AppendCounter = PyAppendCounter  # type: ignore[assignment,misc]
    count_row_errors = py_count_row_errors


class TopicStats:
    """One topic's BrokerTopicMetrics. The produce side lives in ``appends`` (an AppendCounter,
    whose bound methods a Partition keeps); the fetch side is counted here."""

    __slots__ = ("appends", "bytes_out", "fetch_requests", "failed_fetch", "replication_bytes_in",
                 "replication_bytes_out")
    FIELDS = ("messages_in", "bytes_in", "bytes_out", "produce_requests", "fetch_requests", "failed_produce",
              "failed_fetch", "replication_bytes_in", "replication_bytes_out")

    def __init__(self, counter_type: Any = None) -> None:
        self.appends = (counter_type or AppendCounter)()
        self.bytes_out = self.fetch_requests = self.failed_fetch = 0
        self.replication_bytes_in = self.replication_bytes_out = 0

    @property
    def messages_in(self) -> int:
        return self.appends.messages

    @property
    def bytes_in(self) -> int:
        return self.appends.bytes

    @property
    def produce_requests(self) -> int:
        return self.appends.requests

    @property
    def failed_produce(self) -> int:
        return self.appends.failed_appends

    def values(self) -> dict[str, int]:
        return {field: getattr(self, field) for field in self.FIELDS}


# (metric suffix, TopicStats field, help, per topic too)
TOPIC_COUNTERS = (
    ("messagesin", "messages_in", "Records appended to leader logs (MessagesInPerSec)", True),
    ("bytesin", "bytes_in", "Bytes of record batches produced to leader logs (BytesInPerSec)", True),
    ("bytesout", "bytes_out", "Bytes of records sent to consumers (BytesOutPerSec)", True),
    ("totalproducerequests", "produce_requests", "Partition appends requested by Produce (TotalProduceRequestsPerSec)",
     True),
    ("totalfetchrequests", "fetch_requests", "Partition reads requested by Fetch (TotalFetchRequestsPerSec)", True),
    ("failedproducerequests", "failed_produce", "Partition appends that failed (FailedProduceRequestsPerSec)", True),
    ("failedfetchrequests", "failed_fetch", "Partition reads that failed (FailedFetchRequestsPerSec)", True),
    ("replicationbytesin", "replication_bytes_in", "Bytes followers appended from leaders (ReplicationBytesInPerSec)",
     False),
    ("replicationbytesout", "replication_bytes_out", "Bytes sent to followers (ReplicationBytesOutPerSec)", False),
)


class BrokerTopicStats:
    """Kafka's BrokerTopicStats: a TopicStats per topic. The broker totals (Kafka's all-topics
    meters) are summed at scrape time (``all``), with what deleted topics had counted: the data
    path counts each event once, on its topic."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.removed = dict.fromkeys(TopicStats.FIELDS, 0)  # what deleted topics had counted: the totals keep it

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def remove(self, name: str) -> None:
        stats = self.topics.pop(name, None)
        if stats is not None:
            for field, value in stats.values().items():
                self.removed[field] += value

    @property
    def all(self) -> dict[str, int]:
        """The broker totals, summed now: {TopicStats field: value}."""
        total = dict(self.removed)
        for stats in self.topics.values():
            for field, value in stats.values().items():
                total[field] += value
        return total

    def append_failed(self, topic: str) -> None:
        self.topic(topic).appends.failed()

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        topics = sorted(self.topics.items())
        total = self.all
        for suffix, field, doc, per_topic in TOPIC_COUNTERS:
            name = "kafka_server_brokertopicmetrics_" + suffix
            family = CounterMetricFamily(name, doc + "; the series without a topic label is the broker total",
                                         labels=["topic"])
            if per_topic:
                for topic, stats in topics:
                    family.add_metric([topic], getattr(stats, field))
            add_sample(family, "_total", {}, total[field])
            yield family


# -- the data path: per request (Kafka's RequestMetrics) -----------------------------------

TIME_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0)
# Request phases in nanoseconds: le from 2**13 ns (8.2 µs) to 2**35 ns (34 s), doubling.
NS_BUCKETS = range(13, 36)
# Request sizes in bytes: le from 64 B to 64 MiB, ×4.
SIZE_BUCKETS = range(6, 27, 2)
MAX_VERSION = 64


class ApiStats:
    """One API's counters and histograms, bound once (the hot path indexes a list by API key).
    ``arrived(version)``: a request read; ``done(t_read, t_start, t_local, t_ready, t_sent,
    request_size, response) -> response size``: a request answered, its phases (nanoseconds of
    the injected clock; t_local 0 when answered while its handler ran) and sizes. Both are RequestStats' own methods
    (C calls where
    broker/_request_stats.c is built)."""

    __slots__ = ("name", "errors", "stats", "arrived", "done", "total", "queue", "local", "remote", "send",
                 "request_size")

    def __init__(self, name: str, stats_type: Any = None) -> None:
        self.name = name
        self.errors: dict[int, int] = {}
        self.stats = stats = (stats_type or RequestStats)()
        self.arrived = stats.arrived
        self.done = stats.done
        self.total = PhaseHistogram(stats, 0, NS_BUCKETS, 1e-9)
        self.queue = PhaseHistogram(stats, 1, NS_BUCKETS, 1e-9)
        self.local = PhaseHistogram(stats, 2, NS_BUCKETS, 1e-9)
        self.remote = PhaseHistogram(stats, 3, NS_BUCKETS, 1e-9)
        self.send = PhaseHistogram(stats, 4, NS_BUCKETS, 1e-9)
        self.request_size = PhaseHistogram(stats, 5, SIZE_BUCKETS)

    @property
    def response_bytes(self) -> int:
        return self.stats.response_bytes

    @property
    def versions(self) -> list[int]:
        """Requests read per version (a copy; the last slot: any version beyond)."""
        return self.stats.versions()

    def error(self, code: int, n: int = 1) -> None:
        self.errors[code] = self.errors.get(code, 0) + n


# (metric, ApiStats field, help)
REQUEST_HISTOGRAMS = (
    ("kafka_network_requestmetrics_totaltime_seconds", "total", "From the read of the request to its response "
     "handed to the socket (TotalTimeMs)"),
    ("kafka_network_requestmetrics_requestqueuetime_seconds", "queue", "From the read to the start of processing: "
     "requests read together wait for those before them (RequestQueueTimeMs)"),
    ("kafka_network_requestmetrics_localtime_seconds", "local", "Processing on the event loop until answered or "
     "parked (LocalTimeMs)"),
    ("kafka_network_requestmetrics_remotetime_seconds", "remote", "Waiting in a purgatory: a Fetch long-poll, an "
     "acks=all Produce (RemoteTimeMs)"),
    ("kafka_network_requestmetrics_responsesendtime_seconds", "send", "From the response being ready to it being "
     "handed to the socket, in request order (ResponseQueueTimeMs + ResponseSendTimeMs)"),
)


class RequestMetrics:
    """Per-API stats for a SocketServer and its dispatcher. ``api(key)`` is a list index."""

    def __init__(self) -> None:
        from protocol.messages import APIS

        self._names = {int(k): a.name for k, a in APIS.items()}
        self.by_key: list[ApiStats | None] = [None] * (max(self._names) + 1)
        # each ApiStats' RequestStats, by key: what a connection calls begin/finish of (a method
        # of a C type: no bound method to look up per request)
        self.request_stats: list[Any] = [None] * len(self.by_key)
        for key in self._names:  # bound up front: the hot path indexes by_key with a served key
            stats = self.by_key[key] = ApiStats(self._names[key])
            self.request_stats[key] = stats.stats

    def api(self, key: int) -> ApiStats:
        try:
            stats = self.by_key[key]
        except IndexError:
            stats = None
            self.by_key.extend([None] * (key + 1 - len(self.by_key)))
            self.request_stats.extend([None] * (len(self.by_key) - len(self.request_stats)))
        if stats is None:
            stats = self.by_key[key] = ApiStats(self._names.get(key, f"ApiKey{key}"))
            self.request_stats[key] = stats.stats
        return stats

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        from protocol.errors import ErrorCode

        apis = []  # the APIs that have been used (requests read or answered, errors counted)
        for s in self.by_key:
            if s is not None:
                versions = s.versions
                if any(versions) or s.errors or s.total.count:
                    apis.append((s, versions))
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests received, by API and "
                                       "version (RequestsPerSec)", labels=["request", "version"])
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors", "Error codes answered, per partition or "
                                     "resource where the response has one (ErrorsPerSec)", labels=["request", "error"])
        response_bytes = CounterMetricFamily("kafka_network_requestmetrics_responsebytes", "Bytes of responses",
                                             labels=["request"])
        for s, versions in apis:
            for version, n in enumerate(versions):
                if n:
                    requests.add_metric([s.name, str(version) if version < MAX_VERSION - 1 else "other"], n)
            for code, n in sorted(s.errors.items()):
                try:
                    ename = ErrorCode(code).name
                except ValueError:
                    ename = str(code)
                errors.add_metric([s.name, ename], n)
            response_bytes.add_metric([s.name], s.response_bytes)
        yield requests
        yield errors
        yield response_bytes
        apis = [s for s, _ in apis]
        for name, field, doc in REQUEST_HISTOGRAMS:
            yield histogram_family(name, doc, ["request"], [((s.name,), getattr(s, field)) for s in apis])
        yield histogram_family("kafka_network_requestmetrics_requestbytes", "Size of requests in bytes (RequestBytes)",
                               ["request"], [((s.name,), s.request_size) for s in apis])


def count_errors(body, stats: ApiStats) -> None:
    """Every non-zero ``error_code`` in a response body (construct containers or dicts)."""
    if isinstance(body, dict):
        code = body.get("error_code")
        if code:
            stats.error(code)
        for v in body.values():
            if isinstance(v, (list, dict)):
                count_errors(v, stats)
    elif isinstance(body, list):
        for v in body:
            if isinstance(v, (list, dict)):
                count_errors(v, stats)


# -- the network (Kafka's socket-server-metrics) --------------------------------------------

class ListenerStats:
    __slots__ = ("name", "accepted", "closed", "in_", "out", "read_paused_ns", "auth_succeeded",
                 "auth_failed", "reauth_succeeded")

    def __init__(self, name: str, counter_type: Any = None) -> None:
        self.name = name
        self.accepted = self.closed = self.read_paused_ns = 0
        # Bytes read and bytes of responses: a connection's Meter adds each read's size to
        # ``in_`` and each response's to ``out`` (Counters of the same module as the Meter: the
        # C ones, or the references).
        self.in_ = (counter_type or Counter)()
        self.out = (counter_type or Counter)()
        # Kafka's successful-authentication-total (every connection that became ready: PLAINTEXT
        # ones too, as Kafka counts them), failed-authentication-total (TLS handshakes and SASL
        # exchanges that failed), successful-reauthentication-total (KIP-368).
        self.auth_succeeded = self.auth_failed = self.reauth_succeeded = 0

    @property
    def bytes_in(self) -> int:
        return self.in_.value

    @property
    def bytes_out(self) -> int:
        return self.out.value


# -- what the broker holds, read at scrape time ---------------------------------------------

FLUSH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class BrokerCollector:
    """Replication, purgatories, logs and fetchers, computed from the broker's state when
    scraped (nothing of this is maintained on the data path)."""

    def __init__(self, server, per_partition: bool = True) -> None:
        self.server = server
        self.per_partition = per_partition
        self.log_flush = FastHistogram(FLUSH_BUCKETS)  # observed by the server's flush pass
        self.recovery_seconds = 0.0

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        server = self.server
        rm = server.replica_manager
        if rm is None:
            return
        now_ms = server.time.milliseconds()

        def gauge(name: str, doc: str, value: float, labels: dict | None = None) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=list(labels or {}))
            family.add_metric(list((labels or {}).values()), value)
            return family

        partitions = list(rm.partitions.values())
        leaders = [p for p in partitions if p.is_leader and p.log is not None]
        under_replicated = [p for p in leaders if len(p.isr) < len(p.replicas)]
        under_min = [p for p in leaders if len(p.isr) < p.min_insync_replicas]
        at_min = [p for p in leaders if len(p.isr) == p.min_insync_replicas]
        prefix = "kafka_server_replicamanager_"
        yield gauge(prefix + "partitioncount", "Partitions hosted on this broker (PartitionCount)", len(partitions))
        yield gauge(prefix + "leadercount", "Partitions this broker leads (LeaderCount)", len(leaders))
        yield gauge(prefix + "underreplicatedpartitions", "Led partitions whose ISR is smaller than their replica set "
                    "(UnderReplicatedPartitions)", len(under_replicated))
        yield gauge(prefix + "underminisrpartitioncount", "Led partitions whose ISR is below min.insync.replicas "
                    "(UnderMinIsrPartitionCount)", len(under_min))
        yield gauge(prefix + "atminisrpartitioncount", "Led partitions whose ISR is exactly min.insync.replicas "
                    "(AtMinIsrPartitionCount)", len(at_min))
        yield gauge(prefix + "reassigningpartitions", "Led partitions being reassigned (ReassigningPartitions)",
                    sum(1 for p in leaders if p.is_reassigning))
        yield gauge("kbroker_replicamanager_reassignment_adding_bytes", "Bytes held by the replicas this broker is "
                    "adding in reassignments in progress (what they copied so far)",
                    sum(p.log.size_in_bytes() for p in partitions
                        if p.log is not None and rm.broker_id in p.adding_replicas))
        for name, value, doc in (("isrshrinks", rm.isr_shrinks, "Committed ISR shrinks (IsrShrinksPerSec)"),
                                 ("isrexpands", rm.isr_expands, "Committed ISR expansions (IsrExpandsPerSec)")):
            family = CounterMetricFamily(prefix + name, doc)
            family.add_metric([], value)
            yield family

        # Purgatories (DelayedOperationPurgatory, DelayedFetchMetrics/DelayedProduceMetrics).
        size = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize", "Operations watched, once "
                                 "per key (PurgatorySize)", labels=["delayed_operation"])
        delayed = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_numdelayedoperations", "Operations "
                                    "waiting (NumDelayedOperations)", labels=["delayed_operation"])
        expired = CounterMetricFamily("kafka_server_delayedoperationpurgatory_expires", "Operations completed by "
                                      "their timeout (ExpiresPerSec)", labels=["delayed_operation"])
        for purgatory in (rm.produce_purgatory, rm.fetch_purgatory, rm.delete_records_purgatory):
            size.add_metric([purgatory.name], purgatory.watched())
            delayed.add_metric([purgatory.name], purgatory.delayed())
            expired.add_metric([purgatory.name], purgatory.expired)
        yield size
        yield delayed
        yield expired

        # Incremental fetch sessions (KIP-227; Kafka's FetchSessionCache metrics).
        apis = getattr(server, "apis", None)
        if apis is not None:
            cache = apis.fetch_manager.cache
            prefix = "kafka_server_fetchsessioncache_"
            yield gauge(prefix + "numincrementalfetchsessions", "Incremental fetch sessions held "
                        "(NumIncrementalFetchSessions)", len(cache))
            yield gauge(prefix + "numincrementalfetchpartitionscached", "Partitions in the incremental fetch "
                        "sessions held (NumIncrementalFetchPartitionsCached)", cache.total_partitions())
            family = CounterMetricFamily(prefix + "incrementalfetchsessionevictions", "Sessions evicted to make room "
                                         "for a new one (IncrementalFetchSessionEvictionsPerSec)")
            family.add_metric([], cache.evictions)
            yield family

        # The fetchers (follower side).
        fm = server.fetcher_manager
        states = {}
        connected = GaugeMetricFamily("kafka_server_replicafetcher_connected", "1 while this broker's fetcher has a "
                                      "connection to the leader", labels=["leader"])
        if fm is not None:
            for (source, _host, _port), fetcher in sorted(fm.fetchers.items()):
                conn = fetcher._conn
                connected.add_metric([str(source)], 1 if conn is not None and conn.connected else 0)
                states.update(fetcher.partitions)
        yield connected
        lags = [s.lag for s in states.values() if s.lag >= 0]
        yield gauge("kafka_server_replicafetchermanager_maxlag", "Largest follower lag in records of the partitions "
                    "this broker follows (MaxLag)", max(lags, default=0))

        # The transaction coordinator (Kafka's TransactionMarkerChannelManager and
        # transaction-coordinator-metrics).
        tc = getattr(server, "txn_coordinator", None)
        if tc is not None:
            open_txns = sum(1 for md in tc.txns.values() if md.state in (1, 2, 3, 7))
            yield gauge("kafka_server_transaction_coordinator_ongoing", "Transactions this broker coordinates that "
                        "are open or completing (Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence)", open_txns)
            for name, key, doc in (("commits", "commits", "Transactions committed (markers acknowledged)"),
                                   ("aborts", "aborts", "Transactions aborted (markers acknowledged)")):
                family = CounterMetricFamily("kafka_server_transaction_coordinator_" + name, doc)
                family.add_metric([], tc.stats[key])
                yield family
            latencies = sorted(tc.stats["marker_latency_ms"][-1000:])
            p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] / 1000.0 if latencies else 0.0
            yield gauge("kafka_server_transaction_marker_latency_p99_seconds", "99th percentile, over the last 1,000 "
                        "transactions, of the time from writing Prepare* to every marker acknowledged", p99)
            yield histogram_family("kafka_server_transaction_end_txn_to_markers_seconds", "Commit latency: from an "
                                   "EndTxn's arrival to every marker of its transaction acknowledged", [],
                                   [((), tc.end_txn_latency)])
            markers = getattr(server, "txn_markers", None)
            yield gauge("kafka_server_transaction_marker_pending", "Markers sent and not yet acknowledged "
                        "(TransactionMarkerChannelManager's queue)", markers.pending if markers is not None else 0)

        yield histogram_family("kafka_log_logflushstats_logflush_seconds", "Time to fsync a log "
                               "(LogFlushRateAndTimeMs)", [], [((), self.log_flush)])
        yield gauge("kafka_log_logmanager_recovery_seconds", "Time the logs took to load (and recover) at startup",
                    self.recovery_seconds)

        if not self.per_partition:
            return
        keys = ["topic", "partition"]
        leo = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset (LogEndOffset)", labels=keys)
        lso = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset (LogStartOffset)", labels=keys)
        hw = GaugeMetricFamily("kafka_cluster_partition_highwatermark", "High watermark", labels=keys)
        lso_lag = GaugeMetricFamily("kafka_cluster_partition_last_stable_offset_lag", "High watermark minus the last "
                                    "stable offset: records read_committed consumers wait for", labels=keys)
        size_b = GaugeMetricFamily("kafka_log_log_size_bytes", "Bytes on disk (Size)", labels=keys)
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments (NumLogSegments)", labels=keys)
        ur = GaugeMetricFamily("kafka_cluster_partition_underreplicated", "1 if this broker leads the partition and "
                               "its ISR is smaller than its replicas (UnderReplicated)", labels=keys)
        isr_count = GaugeMetricFamily("kafka_cluster_partition_insyncreplicascount", "ISR size, on the leader "
                                      "(InSyncReplicasCount)", labels=keys)
        lag_records = GaugeMetricFamily("kafka_server_fetcherlagmetrics_consumerlag", "Follower side: the leader's "
                                        "HW minus this replica's LEO at its last fetch (ConsumerLag)", labels=keys)
        replica_lag = GaugeMetricFamily("kafka_cluster_partition_replica_lag_records", "Leader side: the leader's "
                                        "LEO minus a follower's LEO", labels=keys + ["replica"])
        replica_lag_s = GaugeMetricFamily("kafka_cluster_partition_replica_lag_seconds", "Leader side: time since a "
                                          "follower was last caught up", labels=keys + ["replica"])
        for p in sorted(partitions, key=lambda p: p.key):
            log_ = p.log
            if log_ is None:
                continue
            labels = [p.topic, str(p.partition)]
            leo.add_metric(labels, log_.log_end_offset)
            lso.add_metric(labels, log_.log_start_offset)
            hw.add_metric(labels, log_.high_watermark)
            lso_lag.add_metric(labels, log_.high_watermark - log_.last_stable_offset)
            size_b.add_metric(labels, log_.size_in_bytes())
            segments.add_metric(labels, log_.num_segments)
            state = states.get(p.key)
            if state is not None and state.lag >= 0:
                lag_records.add_metric(labels, state.lag)
            if p.is_leader:
                ur.add_metric(labels, 1 if len(p.isr) < len(p.replicas) else 0)
                isr_count.add_metric(labels, len(p.isr))
                end = log_.log_end_offset
                for rid, replica in sorted(p.remote_replicas.items()):
                    rl = [p.topic, str(p.partition), str(rid)]
                    replica_lag.add_metric(rl, max(0, end - replica.log_end_offset) if replica.log_end_offset >= 0
                                           else end)
                    caught_up = rid in p.isr and replica.log_end_offset >= end
                    replica_lag_s.add_metric(rl, 0.0 if caught_up else
                                             max(0.0, (now_ms - replica.last_caught_up_time_ms) / 1000.0))
        yield from (leo, lso, hw, lso_lag, size_b, segments, ur, isr_count, lag_records, replica_lag, replica_lag_s)
