"""Client quota bookkeeping on a MockTime (broker/client_quota_manager.py): Kafka's quota
resolution order, its Rate over sampled windows, and the throttle time a violation earns
(checked against hand-computed values and against a client that honours it)."""

from __future__ import annotations

import pytest

from broker.client_quota_manager import ClientQuotaManager, SampledRate, resolve
from protocol.clock import MockTime

KEY = "producer_byte_rate"


def q(**levels):
    """Quotas of KEY: ``u_c``, ``u_dc``, ``u``, ``du_c``, ``du_dc``, ``du``, ``c``, ``dc`` (d: default)."""
    entities = {"u_c": (("user", "alice"), ("client-id", "app")), "u_dc": (("user", "alice"), ("client-id", None)),
                "u": (("user", "alice"),), "du_c": (("user", None), ("client-id", "app")),
                "du_dc": (("user", None), ("client-id", None)), "du": (("user", None),),
                "c": (("client-id", "app"),), "dc": (("client-id", None),)}
    return {frozenset(entities[name]): {KEY: value} for name, value in levels.items()}


@pytest.mark.parametrize("levels,expected", [
    (dict(u_c=1, u_dc=2, u=3, du_c=4, du_dc=5, du=6, c=7, dc=8), (1, ("alice", "app"))),
    (dict(u_dc=2, u=3, du_c=4, du_dc=5, du=6, c=7, dc=8), (2, ("alice", "app"))),
    (dict(u=3, du_c=4, du_dc=5, du=6, c=7, dc=8), (3, ("alice", ""))),
    (dict(du_c=4, du_dc=5, du=6, c=7, dc=8), (4, ("alice", "app"))),
    (dict(du_dc=5, du=6, c=7, dc=8), (5, ("alice", "app"))),
    (dict(du=6, c=7, dc=8), (6, ("alice", ""))),
    (dict(c=7, dc=8), (7, ("", "app"))),
    (dict(dc=8), (8, ("", "app"))),
    ({}, None),
])
def test_resolution_order(levels, expected):
    assert resolve(q(**levels), KEY, "alice", "app") == expected


def test_another_key_does_not_resolve():
    assert resolve(q(u=3), "consumer_byte_rate", "alice", "app") is None


def test_rate_window_is_at_least_samples_less_one_windows():
    rate = SampledRate(11, 1000)
    rate.record(20_000, 0)
    assert rate.window_size_ms(0) == 10_000 and rate.measure(0) == 2000.0
    rate.record(0, 10_500)  # the first sample is 10.5 s old: within the 11 windows, and over 10 full ones
    assert rate.window_size_ms(10_500) == 10_500 and rate.measure(10_500) == pytest.approx(20_000 / 10.5)
    assert rate.measure(25_000) == 0.0  # both samples are over 11 windows old


def test_throttle_time_is_kafkas_formula():
    time = MockTime()
    m = ClientQuotaManager(KEY, q(u=1000.0))
    now = time.milliseconds()
    assert m.record_and_get_throttle_time_ms("alice", "app", 5_000, now) == 0  # 500 B/s over the 10 s minimum
    # 20,000 more: 2,500 B/s over 10 s, bound 1,000: (2500 - 1000) / 1000 * 10 s
    assert m.record_and_get_throttle_time_ms("alice", "other-app", 20_000, now) == 15_000
    assert list(m.sensors) == [("alice", "")]  # a user quota: one sensor for all her clients


def test_default_client_quota_gives_each_client_its_own_sensor():
    m = ClientQuotaManager(KEY, q(dc=1000.0))
    assert m.record_and_get_throttle_time_ms("", "a", 9_000, 0) == 0
    assert m.record_and_get_throttle_time_ms("", "b", 9_000, 0) == 0
    assert sorted(m.sensors) == [("", "a"), ("", "b")]


def test_no_quota_no_bookkeeping():
    m = ClientQuotaManager(KEY, {})
    assert m.record_and_get_throttle_time_ms("alice", "app", 10**9, 0) == 0 and not m.sensors


@pytest.mark.parametrize("bound,chunk", [(1_000_000.0, 64 * 1024), (50_000.0, 16 * 1024)])
def test_a_client_that_waits_its_throttle_is_held_to_the_bound(bound, chunk):
    """A producer sending as fast as it may (its next request after the throttle it was given)
    is held near the bound over a minute, once past its start (a new sensor measures over at
    least quota.window.num - 1 windows, so a new client may first send that many windows'
    worth at once: Kafka's Rate; the first 20 s absorb it). Not below it by more than 5 %, and
    above it by at most 1 / (quota.window.num - 1) plus 1 %: a sample leaves the window whole,
    up to a window's worth of bytes recorded over its second at once (Kafka's SampledStat
    behaves so). Measured here: 64 KiB requests at 1 MB/s 1.0998 x, 16 KiB ones at 50 kB/s 0.967 x."""
    time = MockTime()
    m = ClientQuotaManager(KEY, q(u=bound))
    start = time.milliseconds()
    sent = 0
    while time.milliseconds() - start < 80_000:
        if time.milliseconds() - start >= 20_000 and not sent:
            sent, since = 1, time.milliseconds()
        throttle = m.record_and_get_throttle_time_ms("alice", "app", chunk, time.milliseconds())
        if sent:
            sent += chunk
        time.sleep(max(throttle, 1))  # ms
    rate = (sent - 1) / ((time.milliseconds() - since) / 1000.0)
    assert bound * 0.95 <= rate <= bound * (1 + 1 / (m.samples - 1) + 0.01), rate


def test_a_change_of_quotas_applies_to_the_next_request():
    quotas = q(u=1000.0)
    m = ClientQuotaManager(KEY, quotas)
    assert m.record_and_get_throttle_time_ms("alice", "app", 5_000, 0) == 0
    quotas.clear()
    quotas.update(q(u_c=100.0))
    m.quotas_changed()
    # now alice's app has its own sensor and a tenth of the bound: 5,000 B over 10 s is 5x it
    assert m.record_and_get_throttle_time_ms("alice", "app", 5_000, 0) == 40_000
    assert sorted(m.sensors) == [("alice", ""), ("alice", "app")]


def test_the_fast_path_agrees_with_kafkas_formula():
    """record_and_throttle_ms (the per-request path) against record, measure and window size
    (Kafka's Rate) on the same sequence of records."""
    import random

    rng = random.Random(7)
    fast, slow = SampledRate(11, 1000), SampledRate(11, 1000)
    now, bound = 0, 10_000.0
    for _ in range(5000):
        now += rng.choice((0, 1, 7, 100, 900, 3000, 15000))
        value = rng.randrange(1, 5000)
        got = fast.record_and_throttle_ms(value, now, bound)
        slow.record(value, now)
        rate = slow.measure(now)
        expected = 0 if rate <= bound else round((rate - bound) / bound * slow.window_size_ms(now))
        assert abs(got - expected) <= 1, (now, got, expected)


def test_the_manager_agrees_with_kafkas_formula():
    """The manager's inlined path against record, measure and window size (Kafka's Rate)."""
    import random

    rng = random.Random(11)
    m = ClientQuotaManager(KEY, q(u=10_000.0))
    slow = SampledRate(11, 1000)
    now = 0
    for _ in range(5000):
        now += rng.choice((0, 1, 7, 100, 900, 3000, 15000))
        value = rng.randrange(1, 5000)
        got = m.record_and_get_throttle_time_ms("alice", "app", value, now)
        slow.record(value, now)
        rate = slow.measure(now)
        expected = 0 if rate <= 10_000.0 else round((rate - 10_000.0) / 10_000.0 * slow.window_size_ms(now))
        assert abs(got - expected) <= 1, (now, got, expected)


def test_the_window_counts_the_current_partial_window_on_top_of_the_minimum():
    m = ClientQuotaManager(KEY, q(u=10_000.0))
    assert m.record_and_get_throttle_time_ms("alice", "app", 150_000, 0) == 5_000  # 15 s of quota over a 10 s window
    # 0.5 s later, the same sample: the window is 10.5 s (Kafka: elapsed plus the missing full windows)
    assert m.record_and_get_throttle_time_ms("alice", "app", 1, 500) == 4_500


# -- broker/_request_stats.c's SampledRate against its reference -----------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from broker import _request_stats  # noqa: E402  make test-deps builds it: not built is a failure, not a skip
from broker.client_quota_manager import PySampledRate  # noqa: E402


def test_the_manager_uses_the_c_rate():
    assert SampledRate is _request_stats.SampledRate


OPS = st.lists(st.tuples(st.sampled_from(["record", "throttle", "measure", "window"]),
                         st.integers(0, 3_000),  # ms since the previous operation
                         st.one_of(st.integers(-5_000, 2_000_000), st.floats(-1e6, 1e7, allow_nan=False)),
                         st.sampled_from([1.0, 7.5, 1000.0, 2000.0, 1e6, 123_456.7])),
               max_size=80)


@settings(max_examples=400, deadline=None)
@given(samples=st.integers(1, 12), window_ms=st.sampled_from([1, 7, 100, 1000]), start=st.integers(-10_000, 10**12),
       ops=OPS)
def test_c_sampled_rate_matches_the_reference(samples, window_ms, start, ops):
    c, py = _request_stats.SampledRate(samples, window_ms), PySampledRate(samples, window_ms)
    now = start
    for op, dt, value, bound in ops:
        now += dt
        if op == "record":
            assert c.record(value, now) is py.record(value, now) is None
        elif op == "throttle":
            a, b = c.record_and_throttle_ms(value, now, bound), py.record_and_throttle_ms(value, now, bound)
            assert a == b and type(a) is type(b) is int, (a, b)
        elif op == "measure":
            assert c.measure(now) == py.measure(now)
        else:
            assert c.window_size_ms(now) == py.window_size_ms(now)
        assert c._total == py._total
    assert (c.samples, c.window_ms) == (py.samples, py.window_ms)


@pytest.mark.parametrize("rate", [_request_stats.SampledRate, PySampledRate])
def test_a_throttle_time_half_way_rounds_to_even_as_pythons_round(rate):
    for value, expected in ((5, 2), (7, 4), (1, 0), (3, 2)):  # value * 1000 / 2000: 2.5, 3.5, 0.5, 1.5 ms
        assert rate(1, 1000).record_and_throttle_ms(value, 0, 2000.0) == expected


def test_c_sampled_rate_refuses_bad_arguments():
    with pytest.raises(ValueError):
        _request_stats.SampledRate(0, 1000)
    rate = _request_stats.SampledRate(2, 1000)
    with pytest.raises(TypeError):
        rate.record(1.0)
    with pytest.raises(TypeError):
        rate.record("x", 0)
    with pytest.raises(OverflowError):
        rate.measure(1 << 70)


@pytest.mark.parametrize("rate_type", [_request_stats.SampledRate, PySampledRate])
@pytest.mark.parametrize("samples,delay_ms", [(6, 0), (6, 3), (11, 1), (11, 8)])
def test_a_held_clients_rate_reads_up_to_samples_over_samples_less_one_of_the_bound(rate_type, samples, delay_ms):
    """What tests/cluster/test_client_quotas.py may assert of the byte-rate metric read at any
    moment (Kafka's Rate, MockTime): a client held by its throttles (each next request
    ``delay_ms`` after the one before was unmuted) reads up to samples / (samples - 1) x the bound,
    since the window steps down from samples to samples - 1 windows at each whole window (so a
    read against 1.2 x with 6 samples can fail), but never above that plus one request per
    window length (a request recorded at each step before its throttle)."""
    time = MockTime()
    bound, request = 1_000_000.0, 10_200
    rate = rate_type(samples, 1000)
    start = next_request = time.milliseconds()
    highest = 0.0
    while time.milliseconds() - start < 40_000:
        now = time.milliseconds()
        if now >= next_request:
            next_request = now + rate.record_and_throttle_ms(request, now, bound) + delay_ms
        highest = max(highest, rate.measure(now))
        time.sleep(1)
    assert bound * samples / (samples - 1) <= highest <= bound * samples / (samples - 1) + request, highest
