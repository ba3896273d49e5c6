"""controller.launcher.free_port: the port a harness picks for a process that binds it later
comes from below the kernel's ephemeral range, which the kernel never hands to bind(0) or to an
outgoing connection in between (the "address already in use" of two suite runs side by side)."""

from __future__ import annotations

import itertools
import socket

from controller import launcher
from controller.launcher import ephemeral_port_range, free_port


def test_ports_are_below_the_ephemeral_range_bindable_and_never_given_twice():
    low, high = ephemeral_port_range()
    assert 0 < low <= high
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(launcher._PORT_FLOOR <= p < low for p in ports)
    for port in ports[:20]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_given(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    draws = itertools.chain([busy, busy], range(20000, 30000))

    class Draw:
        def randrange(self, start, stop):
            return next(draws)

    monkeypatch.setattr(launcher, "_port_choice", Draw())
    monkeypatch.setattr(launcher, "ephemeral_port_range", lambda: (65000, 65535))
    monkeypatch.setattr(launcher, "_ports_given", set())
    try:
        assert free_port() != busy
    finally:
        taken.close()


def test_no_room_below_the_range_falls_back_to_the_kernels_pick(monkeypatch):
    monkeypatch.setattr(launcher, "ephemeral_port_range", lambda: (10500, 60999))
    port = free_port()
    assert port >= 10500
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
