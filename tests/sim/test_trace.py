"""sim/trace.py: events and deliveries in order in the tail, deliveries formatted when shown."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

from sim.loop import Process
from sim.trace import Trace


def test_the_tail_shows_events_and_deliveries_in_order_and_the_hash_covers_only_the_events_and_bytes():
    clock = SimpleNamespace(_now=1.5)
    trace = Trace(clock, tail=3)
    broker = Process("broker-1", "broker-1", 2)
    trace.event("sim", "start", "broker")
    trace.data(broker, 7, b"abc")
    clock._now = 2.25
    trace.note("broker-1#2", "INFO kbroker: hello")
    trace.data(None, 8, b"de")
    assert trace.last(10) == [f"1.500000 broker-1#2 recv conn 7 3B crc {zlib.crc32(b'abc'):08x}",
                              "2.250000 broker-1#2 INFO kbroker: hello",
                              f"2.250000 sim recv conn 8 2B crc {zlib.crc32(b'de'):08x}"]
    assert trace.events == 3  # (a note is not an event)
    again = Trace(SimpleNamespace(_now=1.5))
    again.event("sim", "start", "broker")
    again.data(broker, 7, b"abc")
    again._clock._now = 2.25
    again.data(None, 8, b"de")
    assert again.hexdigest() == trace.hexdigest()
