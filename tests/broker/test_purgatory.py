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


# -- timer_per_delay: one timer per delay_ms, not per operation (Produce and Fetch, issue 29) --------

@pytest.fixture
def shared(time):
    return DelayedOperationPurgatory("shared", time, timer_per_delay=True)


def _expiry_times(time, ops, until):
    """Step the clock 1 ms at a time; when each op expired (monotonic ms), None if it did not."""
    when = {}
    start = time.monotonic_ms()
    while time.monotonic_ms() < start + until:
        time.sleep(1)
        for op in ops:
            if op.expirations and op not in when:
                when[op] = time.monotonic_ms()
    return [when.get(op) for op in ops]


def test_shared_timers_expire_each_operation_exactly_at_its_deadline(shared, time):
    t0 = time.monotonic_ms()
    a, c = Op(100), Op(50)
    shared.watch(a, ["k"])                  # due t0+100
    time.sleep(10)
    shared.watch(c, ["k"])                  # due t0+60, another delay
    time.sleep(20)
    b, d = Op(100), Op(100)
    shared.watch(b, ["j"])                  # due t0+130
    shared.watch(d, ["j"])                  # due t0+130 too
    assert time.pending_timers() == 2       # one per delay, not one per operation
    got = _expiry_times(time, [a, b, c, d], 200)
    assert got == [t0 + 100, t0 + 130, t0 + 60, t0 + 130]
    assert all((op.completions, op.expirations) == (1, 1) for op in (a, b, c, d))
    assert shared.expired == 4 and shared.watched() == 0
    assert time.pending_timers() == 0 and shared.delay_queue_entries() == 0


def test_shared_timer_skips_completed_and_cancelled_heads(shared, time):
    t0 = time.monotonic_ms()
    first, second, third = Op(100), Op(100), Op(100)
    shared.watch(first, ["k"])
    time.sleep(10)
    shared.watch(second, ["k"])
    time.sleep(10)
    shared.watch(third, ["k"])
    assert first.force_complete() is True
    assert second.cancel() is True and shared.cancelled == 1
    got = _expiry_times(time, [first, second, third], 300)
    assert got == [None, None, t0 + 120]     # the armed head was done: re-armed for the live one
    assert (first.completions, first.expirations) == (1, 0)
    assert (second.completions, second.expirations) == (0, 0)
    assert (third.completions, third.expirations) == (1, 1)
    assert shared.expired == 1 and time.pending_timers() == 0


def test_shared_timer_expires_many_operations_of_mixed_delays_in_deadline_order(shared, time):
    ops, due, expired_at = [], {}, {}

    class Recorded(Op):
        def on_expiration(self):
            super().on_expiration()
            expired_at[self] = time.monotonic_ms()

    for i in range(300):
        op = Recorded((30, 70, 500)[i % 3])
        shared.watch(op, [i % 7])
        due[op] = time.monotonic_ms() + op.delay_ms
        ops.append(op)
        if i % 4 == 0:
            op.force_complete()             # completed: never expires
        if i % 5 == 0:
            time.sleep(1)                   # (the 30 ms ones start expiring meanwhile)
    time.sleep(1000)
    live = [op for i, op in enumerate(ops) if i % 4]
    assert {op: due[op] for op in live} == expired_at
    order = list(expired_at)
    assert [due[op] for op in order] == sorted(due[op] for op in order)
    assert time.pending_timers() == 0 and shared.delay_queue_entries() == 0


def test_an_expiration_that_watches_another_operation_of_the_same_delay(shared, time):
    t0 = time.monotonic_ms()
    later = Op(100)

    class Chain(Op):
        def on_expiration(self):
            super().on_expiration()
            shared.watch(later, ["k"])

    first = Chain(100)
    shared.watch(first, ["k"])
    time.sleep(100)
    assert first.expirations == 1 and time.pending_timers() == 1  # armed once, by the firing
    got = _expiry_times(time, [later], 200)
    assert got == [t0 + 200]
    assert time.pending_timers() == 0


def test_completed_operations_do_not_pile_up_in_the_delay_queue(shared, time):
    stuck = Op(30_000)
    shared.watch(stuck, ["stuck"])          # a live head that holds its queue for 30 s
    for i in range(10_000):
        op = Op(30_000, ready=lambda: True)
        shared.watch(op, [i])
        assert shared.check_and_complete(i) == 1
        assert shared.delay_queue_entries() <= 2 * 2 + 64 + 1  # (at most 2 waiting at once)
    assert shared.delayed() == 1 and time.pending_timers() == 1
    stuck.force_complete()
    for i in range(1_000):                  # completed in order, the heads leave on each append
        op = Op(30_000, ready=lambda: True)
        shared.watch(op, [i])
        shared.check_and_complete(i)
    assert shared.delay_queue_entries() <= 2


def test_past_max_delay_queues_an_operation_arms_its_own_timer(shared, time):
    t0 = time.monotonic_ms()
    ops = [Op(100 + i) for i in range(DelayedOperationPurgatory.MAX_DELAY_QUEUES + 5)]
    for op in ops:
        shared.watch(op, ["k"])
    assert len(shared._delay_queues) == DelayedOperationPurgatory.MAX_DELAY_QUEUES
    assert time.pending_timers() == len(ops)
    got = _expiry_times(time, ops, 200)
    assert got == [t0 + op.delay_ms for op in ops]
    assert not shared._delay_queues and time.pending_timers() == 0


def test_complete_all_leaves_no_shared_timer(shared, time):
    ops = [Op(1000) for _ in range(5)] + [Op(500)]
    for i, op in enumerate(ops):
        shared.watch(op, [i % 2])
    assert time.pending_timers() == 2
    assert shared.complete_all() == 6
    assert time.pending_timers() == 0 and shared.delay_queue_entries() == 0
    time.sleep(5000)
    assert all(op.expirations == 0 for op in ops)


class CountingTime(MockTime):
    """A MockTime that counts its schedules, and whose clock can read ``lag`` ms behind."""

    def __init__(self) -> None:
        super().__init__()
        self.schedules = 0
        self.lag = 0.0

    def monotonic_ms(self):
        return super().monotonic_ms() - self.lag

    def schedule(self, delay_ms, callback):
        self.schedules += 1
        return super().schedule(delay_ms, callback)


def test_the_armed_head_expires_even_if_the_clock_reads_a_hair_early():
    # A loop's timer may fire before the clock reads its deadline (uvloop's timers count from
    # the loop's cached time, a simulated clock rounds): the head it was armed for expires on
    # that firing, not on a re-armed ~0 ms timer after another.
    time = CountingTime()
    purgatory = DelayedOperationPurgatory("early", time, timer_per_delay=True)
    op = Op(100)
    purgatory.watch(op, ["k"])
    time.lag = 1e-6
    time.sleep(100)
    assert op.expirations == 1 and time.schedules == 1 and time.pending_timers() == 0


def test_one_firing_drops_a_completed_head_and_expires_the_live_one_due_with_it():
    time = CountingTime()
    purgatory = DelayedOperationPurgatory("same", time, timer_per_delay=True)
    done, live = Op(100), Op(100)
    purgatory.watch(done, ["k"])
    purgatory.watch(live, ["k"])            # the same deadline
    done.force_complete()
    time.sleep(100)
    assert live.expirations == 1 and time.schedules == 1 and time.pending_timers() == 0
