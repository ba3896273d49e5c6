"""broker/_request_stats.c against its Python reference, broker.metrics.PyRequestStats: the same
observations give the same buckets, sums, response bytes and versions (hypothesis), and the
broker uses the C one where it is built (make test-deps builds it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import _request_stats  # make test-deps builds it: not built is a failure, not a skip
from broker import metrics
from broker.metrics import PHASES, ApiStats, PyRequestStats
from protocol.errors import ErrorCode

# Clock readings: ints of one, two or three 30-bit digits (the helper reads exact ints of up to
# two digits itself and leaves the rest to CPython).
NS = st.integers(min_value=0, max_value=2**62)
# Phases may come out negative (a clock stepping back, a test's fixed timestamps): Python's
# bit_length is that of the absolute value, and so is the helper's.
# A response: none, a buffer, or a list of buffers (what a connection writes).
BUFFER = st.one_of(st.binary(max_size=64), st.binary(max_size=64).map(bytearray),
                   st.binary(max_size=64).map(memoryview))
RESPONSE = st.one_of(st.none(), BUFFER, st.lists(BUFFER, max_size=4))
OBSERVATION = st.tuples(NS, NS, NS, NS, NS, st.integers(0, 2**40), RESPONSE)


def test_the_broker_uses_the_c_helper():
    assert metrics.RequestStats is _request_stats.RequestStats


def _metrics_importing(monkeypatch, request_stats):
    """broker/metrics.py run afresh (as broker._metrics_probe) with ``request_stats`` as its
    broker._request_stats (None: not built)."""
    import importlib.util
    import sys
    monkeypatch.setitem(sys.modules, "broker._request_stats", request_stats)
    spec = importlib.util.spec_from_file_location("broker._metrics_probe", metrics.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_helper_exports_its_six_types_under_their_names():
    for name in ("RequestStats", "AppendCounter", "SlotTimes", "Meter", "Counter", "SampledRate"):
        cls = getattr(_request_stats, name)
        assert isinstance(cls, type) and cls.__name__ == name and cls.__module__ == "broker._request_stats"


@pytest.mark.parametrize("name", ["RequestStats", "AppendCounter", "Counter"])
def test_the_types_made_without_arguments_refuse_them_by_name(name):
    cls = getattr(_request_stats, name)
    assert type(cls()) is cls
    for args, kwargs in (((1,), {}), ((), {"x": 1})):
        with pytest.raises(TypeError, match=rf"^{name}\(\) takes no arguments$"):
            cls(*args, **kwargs)


def test_a_stale_c_helper_is_warned_about_and_the_references_run(monkeypatch, caplog):
    """A helper built from an older source lacks a name this one imports: ImportError "cannot
    import name", whose .name is the module's as when it is not built. It warns (rebuild), as
    not built does not."""
    import logging
    import types
    stale = types.ModuleType("broker._request_stats")
    stale.RequestStats = _request_stats.RequestStats  # (no Counter, no SlotTimes: an older build)
    with caplog.at_level(logging.DEBUG, logger="kbroker.metrics"):
        probe = _metrics_importing(monkeypatch, stale)
    assert probe.RequestStats is probe.PyRequestStats and probe.SlotTimes is probe.PySlotTimes
    [record] = [r for r in caplog.records if r.name == "kbroker.metrics"]
    assert record.levelno == logging.WARNING and "out of date" in record.getMessage()
    assert "pip install -e ." in record.getMessage()

    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="kbroker.metrics"):
        probe = _metrics_importing(monkeypatch, None)  # not built: said at debug level only
    assert probe.RequestStats is probe.PyRequestStats and probe.Counter is probe.PyCounter
    [record] = [r for r in caplog.records if r.name == "kbroker.metrics"]
    assert record.levelno == logging.DEBUG and "not built" in record.getMessage()


@settings(max_examples=300, deadline=None)
@given(st.lists(OBSERVATION, max_size=40))
def test_the_c_helper_agrees_with_the_reference(observations):
    c, py = _request_stats.RequestStats(), PyRequestStats()
    for o in observations:
        assert c.done(*o) == py.done(*o)
    for phase in range(PHASES):
        assert c.counts(phase) == py.counts(phase)
        assert c.sum(phase) == py.sum(phase)
    assert c.response_bytes == py.response_bytes


@settings(max_examples=200, deadline=None)
@given(st.lists(OBSERVATION, max_size=40))
def test_done_adds_the_response_size_to_the_listener_counter_as_the_reference(observations):
    """A connection's done() also counts its listener's bytes out (ListenerStats.out), in the
    same call: both add the response's size and return None; without a counter, the size."""
    c, py = _request_stats.RequestStats(), PyRequestStats()
    c_out, py_out = _request_stats.Counter(), metrics.PyCounter()
    for o in observations:
        assert c.done(*o, c_out) is None and py.done(*o, py_out) is None
    assert c_out.value == py_out.value == c.response_bytes == py.response_bytes
    assert c.done(0, 0, 0, 0, 0, 0, b"abc", None) == py.done(0, 0, 0, 0, 0, 0, b"abc", None) == 3
    assert c_out.value == py_out.value  # None: no counter
    with pytest.raises(TypeError):
        c.done(0, 0, 0, 0, 0, 0, b"abc", py_out)  # the C stats take the C counter only
    assert c.response_bytes == py.response_bytes and metrics.Counter is _request_stats.Counter


class CSlot(_request_stats.SlotTimes):  # as broker/network.py's RequestContext: more slots of its own
    __slots__ = ("header",)


class PySlot(metrics.PySlotTimes):
    __slots__ = ("header",)


# A request as a connection sees it: version, t_read, t_start, t_local (0: answered while handled),
# t_ready, t_sent, its frame (a bytearray: its size is its length + 4) or its size, the response.
REQUEST = st.tuples(st.integers(-(2**15), 2**15 - 1), NS, NS, st.one_of(st.just(0), NS), NS, NS,
                    st.one_of(st.binary(max_size=64).map(bytearray), st.integers(0, 2**40)), RESPONSE)


@settings(max_examples=300, deadline=None)
@given(st.lists(REQUEST, max_size=30))
def test_begin_and_finish_agree_with_the_reference(requests):
    """The connection's two calls per request (network.py): begin(slot, version, t_read, t_start,
    frame) when read, finish(slot, t_sent, response, out) when answered, C against the reference,
    and both against done() given the same values."""
    c, py, ref = _request_stats.RequestStats(), PyRequestStats(), PyRequestStats()
    c_out, py_out, ref_out = _request_stats.Counter(), metrics.PyCounter(), metrics.PyCounter()
    for version, t_read, t_start, t_local, t_ready, t_sent, frame, response in requests:
        for stats, slot, out in ((c, CSlot(), c_out), (py, PySlot(), py_out)):
            stats.begin(slot, version, t_read, t_start, frame)
            assert (slot.t_read, slot.t_start, slot.request) == (t_read, t_start, frame)
            slot.t_local, slot.t_ready = t_local, t_ready
            assert stats.finish(slot, t_sent, response, out) is None
            assert stats.finish(slot, t_sent, response, None) == stats.done(
                t_read, t_start, t_local, t_ready, t_sent, frame if isinstance(frame, int) else len(frame) + 4,
                response)  # without a counter: the size; taken back out below
        ref.arrived(version)
        size = frame if isinstance(frame, int) else len(frame) + 4
        for _ in range(3):
            ref.done(t_read, t_start, t_local, t_ready, t_sent, size, response)
        ref_out.add(len(response) if isinstance(response, (bytes, bytearray, memoryview)) else
                    sum(map(len, response)) if isinstance(response, list) else 0)
    for phase in range(PHASES):
        assert c.counts(phase) == py.counts(phase) == ref.counts(phase)
        assert c.sum(phase) == py.sum(phase) == ref.sum(phase)
    assert c.versions() == py.versions() == ref.versions()
    assert c.response_bytes == py.response_bytes == ref.response_bytes
    assert c_out.value == py_out.value == ref_out.value


def test_finish_wants_a_begun_slot_and_counts_nothing_otherwise():
    c = _request_stats.RequestStats()
    with pytest.raises(AttributeError):
        c.finish(CSlot(), 5, b"x", None)  # never begun: no readings
    with pytest.raises(TypeError):
        c.finish(PySlot(), 5, b"x", None)  # not a SlotTimes
    with pytest.raises(TypeError):
        c.begin(PySlot(), 1, 0, 0, bytearray(3))
    assert c.response_bytes == 0 and not any(c.versions()) and not any(c.counts(0))
    slot = CSlot()
    c.begin(slot, 3, 10, 20, bytearray(6))
    slot.t_local = slot.t_ready = 0
    with pytest.raises(TypeError):
        c.finish(slot, 30, b"x", metrics.PyCounter())  # the C stats take the C counter
    assert c.response_bytes == 0 and not any(c.counts(0)) and c.versions()[3] == 1


def test_the_broker_s_slots_are_the_c_slot_times():
    from broker.network import RequestContext

    assert metrics.SlotTimes is _request_stats.SlotTimes and issubclass(RequestContext, _request_stats.SlotTimes)


def test_listener_bytes_out_reads_its_counter():
    stats = metrics.ListenerStats("PLAINTEXT")
    api = ApiStats("Produce")
    api.done(0, 1, 0, 2, 3, 10, [b"ab", b"cde"], stats.out)
    stats.out.add(4)
    assert stats.bytes_out == 9 and api.response_bytes == 5


@given(st.lists(st.integers(-(2**15), 2**15 - 1), max_size=60))
def test_versions_agree_with_the_reference(versions):
    c, py = _request_stats.RequestStats(), PyRequestStats()
    for v in versions:
        c.arrived(v)
        py.arrived(v)
    assert c.versions() == py.versions() and sum(c.versions()) == len(versions)


@pytest.mark.parametrize("value", [0, 1, 2, 3, 2**30 - 1, 2**30, 2**31, 2**60 - 1, 2**60, 2**62, 2**63 - 1,
                                   -1, -2, -(2**30), -(2**40), -(2**60), -(2**63)])
def test_bucket_edges_are_python_s_bit_length(value):
    c, py = _request_stats.RequestStats(), PyRequestStats()
    for stats in (c, py):
        stats.done(0, 0, 0, 0, 0, value, None)
    assert c.counts(5) == py.counts(5) and c.counts(5)[abs(value).bit_length()] == 1
    assert c.sum(5) == py.sum(5) == value


def test_bad_arguments_raise_and_count_nothing():
    c = _request_stats.RequestStats()
    with pytest.raises(TypeError):
        c.done(1, 2, 3)
    with pytest.raises(OverflowError):
        c.done(2**63, 0, 0, 0, 0, 0, None)
    with pytest.raises(TypeError):
        c.done("1", 0, 0, 0, 0, 0, None)
    with pytest.raises(TypeError):
        c.done(0, 0, 0, 0, 0, 0, 5)  # a response is a buffer, a list of them, or None
    with pytest.raises(TypeError):
        c.done(0, 0, 0, 0, 0, 0, [b"x", 5])
    with pytest.raises(IndexError):
        c.counts(PHASES)
    assert all(sum(c.counts(p)) == 0 for p in range(PHASES)) and c.response_bytes == 0


@pytest.mark.parametrize("stats_type", [_request_stats.RequestStats, PyRequestStats])
def test_api_stats_exports_the_same_histograms_either_way(stats_type):
    s = ApiStats("Produce", stats_type)
    assert s.done(1_000, 3_000, 50_000, 50_000, 60_000, 1_500, b"r" * 80) == 80
    assert s.done(2_000, 2_500, 9_000, 2_000_000, 2_001_000, 20_000, [b"r" * 30, memoryview(b"r" * 50)]) == 80
    assert s.response_bytes == 160
    assert s.total.count == 2 and s.total.sum == 59_000 + 1_999_000
    assert s.request_size.cumulative()[-1] == ("+Inf", 2)
    assert s.remote.sum == 1_991_000
    ref = ApiStats("Produce", PyRequestStats)
    ref.done(1_000, 3_000, 50_000, 50_000, 60_000, 1_500, b"r" * 80)
    ref.done(2_000, 2_500, 9_000, 2_000_000, 2_001_000, 20_000, [b"r" * 30, memoryview(b"r" * 50)])
    for field in ("total", "queue", "local", "remote", "send", "request_size"):
        assert getattr(s, field).cumulative() == getattr(ref, field).cumulative()
        assert getattr(s, field).scaled_sum == getattr(ref, field).scaled_sum


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.integers(0, 2**40), st.binary(max_size=64)), st.none()), max_size=40))
def test_the_append_counter_agrees_with_the_reference(appends):
    """A topic's produce counters (BrokerTopicMetrics): None is a failed append."""
    c, py = _request_stats.AppendCounter(), metrics.PyAppendCounter()
    for a in appends:
        for counter in (c, py):
            if a is None:
                counter.failed()
            else:
                counter.appended(a[0], a[1] if counter is py else memoryview(a[1]))
    assert (c.requests, c.messages, c.bytes, c.failed_appends) == (py.requests, py.messages, py.bytes, py.failed_appends)
    assert c.requests == len(appends)
    assert metrics.AppendCounter is _request_stats.AppendCounter


# Codes as the broker has them: plain ints and ErrorCode members (an IntEnum), zero or not; rows
# as lists (the replica manager's) or tuples, topics as tuples or lists.
CODE = st.sampled_from([0, 0, 0, 6, 7, 19, 87, ErrorCode.NONE, ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        ErrorCode.REQUEST_TIMED_OUT])
ROW = st.tuples(st.integers(0, 10), CODE, st.integers(-1, 100))
TOPIC = st.tuples(st.text(max_size=3), st.lists(st.one_of(ROW.map(list), ROW), max_size=5))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(TOPIC, TOPIC.map(list)), max_size=5),
       st.dictionaries(st.sampled_from([6, 7, 19]), st.integers(1, 2**62)))
def test_count_row_errors_agrees_with_the_reference(results, before):
    """A Produce response's error codes (index 1 of each partition's row) counted per code."""
    c, py = dict(before), dict(before)
    _request_stats.count_row_errors(results, c)
    metrics.py_count_row_errors(results, py)
    assert c == py
    assert sum(c.values()) - sum(before.values()) == sum(1 for _t, rows in results for r in rows if r[1])
    assert metrics.count_row_errors is _request_stats.count_row_errors


class _Clock:
    """The injected clock's nanoseconds: the given readings in turn (then the last again)."""

    def __init__(self, readings):
        self.readings, self.i = readings, 0

    def __call__(self):
        value = self.readings[min(self.i, len(self.readings) - 1)]
        self.i += 1
        return value


# A connection's requests as its Meter sees them: a read before it (its data) or not, its API key
# (of 3), version, frame (or size), parked in a purgatory or not, answered (ready) now or after the
# next request's begin, and its response (written in request order).
METERED = st.tuples(st.one_of(st.none(), BUFFER), st.integers(0, 2), st.integers(-(2**15), 2**15 - 1),
                    st.one_of(st.binary(max_size=64).map(bytearray), st.integers(0, 2**40)), st.booleans(),
                    st.booleans(), RESPONSE)


def _slot_state(slot, stats):
    return (slot.t_read, slot.t_start, slot.t_local, slot.t_ready, slot.request, stats.index(slot.stats))


@settings(max_examples=300, deadline=None)
@given(st.lists(METERED, min_size=1, max_size=30), st.lists(NS, min_size=1, max_size=80))
def test_the_meter_agrees_with_the_reference(requests, readings):
    """A connection's calls (network.py): read(data), begin(slot, key, version, frame), parked(slot),
    ready(slot), finish(slot, response), C against the reference on the same clock readings: the
    same slots, stats, listener bytes and cursor; and what the stats record is what done() records
    given the readings the reference says."""
    sides = []
    for meter_type, stats_type, counter_type, slot_type in (
            (_request_stats.Meter, _request_stats.RequestStats, _request_stats.Counter, CSlot),
            (metrics.PyMeter, PyRequestStats, metrics.PyCounter, PySlot)):
        stats = [stats_type() for _ in range(3)]
        meter = meter_type(stats, counter_type(), counter_type(), _Clock(readings))
        sides.append((meter, stats, slot_type))
    ref = [PyRequestStats() for _ in range(3)]
    ref_in = ref_out = 0
    pending = [[], []]  # per side: (slot, response) answered, not yet written
    for data, key, version, frame, parked, later, response in requests:
        states = []
        for side, (meter, stats, slot_type) in enumerate(sides):
            if data is not None:
                meter.read(data)
            slot = slot_type()
            meter.begin(slot, key, version, frame)  # t_local and t_ready too (0)
            if parked:
                meter.parked(slot)
            pending[side].append((slot, response))
            if not later:
                meter.ready(slot)
                for s, r in pending[side]:
                    if not s.t_ready:
                        meter.ready(s)
                    meter.finish(s, r)
                pending[side].clear()
            states.append((_slot_state(slot, stats), meter.t_read, meter.t_cursor, meter.bytes_in.value,
                           meter.bytes_out.value))
        assert states[0] == states[1]
        if data is not None:
            ref_in += len(data)
        ref[key].arrived(version)
    c_stats, py_stats = sides[0][1], sides[1][1]
    for c, py in zip(c_stats, py_stats):
        for phase in range(PHASES):
            assert c.counts(phase) == py.counts(phase)
            assert c.sum(phase) == py.sum(phase)
        assert c.versions() == py.versions() and c.response_bytes == py.response_bytes
    assert [s.versions() for s in c_stats] == [s.versions() for s in ref]
    assert sides[0][0].bytes_in.value == ref_in
    ref_out = sum(s.response_bytes for s in py_stats)
    assert sides[0][0].bytes_out.value == sides[1][0].bytes_out.value == ref_out


def test_the_meter_records_the_phases_of_its_readings():
    """Two requests in one read, the first parked, the second answered first (waiting to be
    written behind the first): each phase is the difference of the readings the calls made."""
    stats = [_request_stats.RequestStats()]
    bytes_in, bytes_out = _request_stats.Counter(), _request_stats.Counter()
    meter = _request_stats.Meter(stats, bytes_in, bytes_out, _Clock([100, 130, 170, 400, 1000]))
    assert not meter.system_clock
    meter.read(b"x" * 50)                  # t_read = cursor = 100
    first, second = CSlot(), CSlot()
    meter.begin(first, 0, 9, bytearray(20))
    meter.parked(first)                    # 130: first's t_local, second's start
    meter.begin(second, 0, 9, bytearray(26))
    meter.ready(second)                    # 170, not written: the first is not answered
    meter.ready(first)                     # 400: both written now, t_sent 400
    meter.finish(first, b"a" * 7)
    meter.finish(second, [b"b" * 3])
    s = stats[0]
    assert (first.t_read, first.t_start, first.t_local, first.t_ready) == (100, 100, 130, 400)
    assert (second.t_read, second.t_start, second.t_local, second.t_ready) == (100, 130, 0, 170)
    assert s.sum(0) == (400 - 100) * 2 and s.sum(1) == 0 + 30 and s.sum(2) == 30 + 40
    assert s.sum(3) == 270 + 0 and s.sum(4) == 0 + 230 and s.sum(5) == 24 + 30
    assert bytes_in.value == 50 and bytes_out.value == s.response_bytes == 10 and s.versions()[9] == 2


def test_the_meter_reads_the_system_clock_itself():
    """Given time.monotonic_ns (the broker's real clock, protocol.client.SystemTime), the C meter
    reads CLOCK_MONOTONIC itself: the same clock, between two readings of it."""
    import time

    from protocol.client import SYSTEM_TIME

    meter = _request_stats.Meter([_request_stats.RequestStats()], _request_stats.Counter(),
                                 _request_stats.Counter(), SYSTEM_TIME.nanoseconds)
    assert meter.system_clock
    for _ in range(100):
        before = time.monotonic_ns()
        meter.read(b"")
        slot = CSlot()
        meter.begin(slot, 0, 0, bytearray())
        meter.ready(slot)
        after = time.monotonic_ns()
        assert before <= meter.t_read <= slot.t_ready <= after


def test_the_meter_refuses_what_it_cannot_count():
    stats = [_request_stats.RequestStats(), None]
    meter = _request_stats.Meter(stats, _request_stats.Counter(), _request_stats.Counter(), _Clock([5]))
    with pytest.raises(KeyError):
        meter.begin(CSlot(), 1, 0, bytearray())  # no stats for the key
    with pytest.raises(KeyError):
        meter.begin(CSlot(), 7, 0, bytearray())
    with pytest.raises(TypeError):
        meter.begin(PySlot(), 0, 0, bytearray())  # not a SlotTimes
    with pytest.raises(TypeError):
        meter.finish(CSlot(), b"x")  # never begun
    with pytest.raises(TypeError):
        _request_stats.Meter(stats, metrics.PyCounter(), _request_stats.Counter(), _Clock([5]))
    with pytest.raises(TypeError):
        _request_stats.Meter(stats, _request_stats.Counter(), _request_stats.Counter(),
                             _Clock(["x"])).read(b"")  # the clock's reading must be an int
    assert not any(stats[0].versions()) and stats[0].response_bytes == 0
