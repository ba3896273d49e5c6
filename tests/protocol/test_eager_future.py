"""protocol/client/eager.py: a task awaiting an EagerFuture resumes inside ``set_result`` when
the result comes from a loop callback (a protocol's ``data_received``), and one loop turn later,
as with an asyncio.Future, when a task delivers it (no task can be stepped inside another);
exceptions and cancellation keep asyncio's scheduling. Each on asyncio's loop and on uvloop's
(the broker's)."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from protocol.client.eager import EagerFuture
from tests.support import on_both_loops

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


async def _parked(fut: EagerFuture, seen: list) -> asyncio.Task:
    async def waiter() -> None:
        VAR.set("waiter's")
        try:
            seen.append(await fut)
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise
        seen.append(VAR.get())  # resumed in its own context
    task = asyncio.get_running_loop().create_task(waiter())
    await asyncio.sleep(0)  # it reaches the await
    assert seen == []
    return task


@on_both_loops
async def test_a_result_from_a_loop_callback_resumes_the_task_inside_set_result() -> None:
    loop = asyncio.get_running_loop()
    fut: EagerFuture[int] = EagerFuture(loop)
    seen: list = []
    task = await _parked(fut, seen)
    at_return = loop.create_future()

    def data_received() -> None:  # as a protocol callback: no task is running
        fut.set_result(7)
        at_return.set_result(list(seen))
    loop.call_soon(data_received)
    assert await at_return == [7, "waiter's"]
    await task


@on_both_loops
async def test_a_result_set_by_a_task_resumes_the_waiter_one_turn_later() -> None:
    loop = asyncio.get_running_loop()
    fut: EagerFuture[int] = EagerFuture(loop)
    seen: list = []
    task = await _parked(fut, seen)
    fut.set_result(8)  # this test's own task is running: no RuntimeError, scheduled instead
    assert seen == []
    await asyncio.sleep(0)  # one turn: the waiter's wake-up was queued before this task's
    assert seen == [8, "waiter's"]  # (stepped inside this task instead, it would never resume)
    await task


@on_both_loops
async def test_an_exception_is_raised_in_the_waiter_one_turn_later() -> None:
    loop = asyncio.get_running_loop()
    fut: EagerFuture[int] = EagerFuture(loop)
    seen: list = []
    task = await _parked(fut, seen)
    at_return = loop.create_future()

    def fail() -> None:
        fut.set_exception(ConnectionError("lost"))
        at_return.set_result(list(seen))
    loop.call_soon(fail)
    assert await at_return == []
    with pytest.raises(ConnectionError, match="lost"):
        await task
    assert seen == ["ConnectionError"]
    with pytest.raises(asyncio.InvalidStateError):
        fut.set_result(1)


@on_both_loops
async def test_cancelling_the_waiting_task_cancels_the_future() -> None:
    loop = asyncio.get_running_loop()
    fut: EagerFuture[int] = EagerFuture(loop)
    seen: list = []
    task = await _parked(fut, seen)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fut.cancelled() and seen == ["CancelledError"]
    with pytest.raises(asyncio.InvalidStateError):
        fut.set_result(1)  # a late response finds it done: BrokerConnection checks done() first


@on_both_loops
async def test_asyncio_wait_accepts_it() -> None:
    loop = asyncio.get_running_loop()
    fut: EagerFuture[int] = EagerFuture(loop)
    loop.call_soon(fut.set_result, 3)
    done, pending = await asyncio.wait([fut])  # type: ignore[type-var]
    assert done == {fut} and not pending and fut.result() == 3


@on_both_loops
async def test_a_wake_up_whose_context_is_already_entered_is_scheduled_not_lost() -> None:
    """set_result inside a callback's own context (as in a task's, when a callback runs in
    it): entering it again raises RuntimeError, which reported alone lost the callback (a task's
    wake-up: a fetcher parked for ever). It runs a turn later instead, in its context. (A plain
    callback stands for the task's wake-up: a lost wake-up would hang the test's loop.)"""
    loop = asyncio.get_running_loop()
    fut: EagerFuture[int] = EagerFuture(loop)
    seen: list = []
    context = contextvars.copy_context()
    context.run(VAR.set, "callback's")
    fut.add_done_callback(lambda f: seen.append((f.result(), VAR.get())), context=context)
    errors: list = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    at_return = loop.create_future()

    def data_received() -> None:  # runs in the callback's context
        fut.set_result(9)
        at_return.set_result(list(seen))
    loop.call_soon(data_received, context=context)
    assert await at_return == []  # (it could not run inside: scheduled)
    await asyncio.sleep(0)
    assert seen == [(9, "callback's")] and errors == []


@on_both_loops
async def test_a_callback_added_without_a_context_runs_in_a_copy_of_its_adders() -> None:
    """As with asyncio.Future: the context is copied at add_done_callback, not the one that
    happens to run set_result."""
    loop = asyncio.get_running_loop()
    fut: EagerFuture[int] = EagerFuture(loop)
    seen: list = []

    def add() -> None:
        VAR.set("adder's")
        fut.add_done_callback(lambda f: seen.append(VAR.get()))
    contextvars.copy_context().run(add)

    def data_received() -> None:
        VAR.set("reader's")
        fut.set_result(1)
    done = loop.create_future()
    loop.call_soon(lambda: (data_received(), done.set_result(None)))
    await done
    assert seen == ["adder's"]
