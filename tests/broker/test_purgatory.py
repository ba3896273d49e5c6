"""The purgatory contract on a MockTime: no sleeps, completion exactly once."""

from __future__ import annotations

import pytest

from broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from protocol.clock import MockTime


class Op(DelayedOperation):
    def __init__(self, delay_ms, ready=lambda: False):
        super().__init__(delay_ms)
        self.ready = ready
        self.completions = 0
        self.expirations = 0
        self.tries = 0

    def try_complete(self):
        self.tries += 1
        return self.force_complete() if self.ready() else False

    def on_complete(self):
        self.completions += 1

    def on_expiration(self):
        self.expirations += 1


@pytest.fixture
def time():
    return MockTime()


@pytest.fixture
def purgatory(time):
    return DelayedOperationPurgatory("test", time)


def test_completes_immediately_when_ready(purgatory, time):
    op = Op(1000, ready=lambda: True)
    assert purgatory.try_complete_else_watch(op, ["a"]) is True
    assert op.completions == 1
    assert purgatory.watched() == 0
    assert time.pending_timers() == 0


def test_watched_operation_completes_on_its_key_only(purgatory):
    state = {"ready": False}
    op = Op(1000, ready=lambda: state["ready"])
    assert purgatory.try_complete_else_watch(op, ["a", "b"]) is False
    assert purgatory.watched() == 2 and purgatory.delayed() == 1
    assert purgatory.check_and_complete("a") == 0  # not ready yet
    state["ready"] = True
    assert purgatory.check_and_complete("zzz") == 0
    assert op.completions == 0
    assert purgatory.check_and_complete("b") == 1
    assert op.completions == 1
    # unregistered from every key at once, timer cancelled
    assert purgatory.watched() == 0
    assert purgatory.check_and_complete("a") == 0


def test_expires_after_its_delay_exactly_once(purgatory, time):
    op = Op(500)
    purgatory.try_complete_else_watch(op, ["k"])
    time.sleep(499)
    assert op.completions == 0
    time.sleep(1)
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.expired == 1
    assert purgatory.watched() == 0
    time.sleep(10_000)
    assert (op.completions, op.expirations) == (1, 1)


def test_force_complete_wins_once_and_cancels_the_timer(purgatory, time):
    op = Op(100)
    purgatory.try_complete_else_watch(op, ["k"])
    assert op.force_complete() is True
    assert op.force_complete() is False
    time.sleep(1000)
    assert (op.completions, op.expirations) == (1, 0)
    assert time.pending_timers() == 0


def test_on_complete_that_completes_another_operation(purgatory):
    """Completion callbacks may trigger check_and_complete re-entrantly."""
    second = Op(1000, ready=lambda: True)
    first_ready = {"v": False}

    class Chain(Op):
        def on_complete(self):
            super().on_complete()
            purgatory.check_and_complete("k")

    first = Chain(1000, ready=lambda: first_ready["v"])
    purgatory.try_complete_else_watch(first, ["k"])
    second.ready = lambda: False
    purgatory.try_complete_else_watch(second, ["k"])
    second.ready = lambda: True
    first_ready["v"] = True
    assert purgatory.check_and_complete("k") >= 1
    assert first.completions == 1 and second.completions == 1
    assert purgatory.watched() == 0


def test_complete_all_answers_every_waiting_operation(purgatory, time):
    ops = [Op(1000) for _ in range(5)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [i % 2])
    assert purgatory.delayed() == 5
    assert purgatory.complete_all() == 5
    assert all(op.completions == 1 for op in ops)
    time.sleep(5000)
    assert all(op.expirations == 0 for op in ops)


def test_failing_callback_does_not_break_the_trigger(purgatory, caplog):
    class Boom(Op):
        def on_complete(self):
            raise RuntimeError("boom")

    op = Boom(100, ready=lambda: True)
    assert purgatory.try_complete_else_watch(op, ["k"]) is True
    assert "on_complete failed" in caplog.text


def test_a_waiting_operation_is_tried_once_before_it_is_watched(purgatory, time):
    # One loop, one thread: nothing can change between a try and the watch that follows it, so
    # Kafka's second try (for a state change on another thread in between) would be the same
    # answer at the price of a second check, per parked fetch and per acks=all produce.
    op = Op(1000)
    assert purgatory.try_complete_else_watch(op, ["a", "b"]) is False
    assert op.tries == 1 and purgatory.delayed() == 1 and time.pending_timers() == 1
    time.sleep(1000)
    assert op.completions == 1 and op.expirations == 1 and op.tries == 1


def test_watch_parks_without_a_try_and_times_the_operation(purgatory, time):
    state = {"ready": False}
    op = Op(300, ready=lambda: state["ready"])
    purgatory.watch(op, ["a"])
    assert op.tries == 0 and purgatory.delayed() == 1 and time.pending_timers() == 1
    state["ready"] = True
    assert purgatory.check_and_complete("a") == 1 and op.tries == 1 and op.completions == 1
    late = Op(300)
    purgatory.watch(late, ["b"])
    time.sleep(300)
    assert (late.tries, late.completions, late.expirations) == (0, 1, 1)


def test_the_operations_that_set_the_base_fields_themselves_set_every_one():
    """DelayedFetch and DelayedProduce write DelayedOperation.__init__'s fields out (no super()
    call on the hot path): a field added to the base must be set by them too."""
    from types import SimpleNamespace

    from broker.delayed_fetch import DelayedFetch
    from broker.delayed_produce import DelayedProduce
    from broker.fetch_params import FetchParams

    base = DelayedOperation(10)
    manager = SimpleNamespace(partitions={})
    ops = [DelayedFetch(10, FetchParams(-1, 10, 1, 1024, 0), [], manager, lambda result: None),
           DelayedProduce(10, [], manager, lambda: None)]
    for op in ops:
        for name in DelayedOperation.__slots__:
            assert getattr(op, name) == getattr(base, name), (type(op).__name__, name)
