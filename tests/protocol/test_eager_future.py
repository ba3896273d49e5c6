"""protocol/client/eager.py: a task awaiting an EagerFuture resumes inside ``set_result`` when
the result comes from a loop callback (a protocol's ``data_received``), and one loop turn later,
as with an asyncio.Future, when a task delivers it (no task can be stepped inside another);
exceptions and cancellation keep asyncio's scheduling."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from protocol.client.eager import EagerFuture

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


async def test_asyncio_wait_accepts_it() -> None:
    loop = asyncio.get_running_loop()
    fut: EagerFuture[int] = EagerFuture(loop)
    loop.call_soon(fut.set_result, 3)
    done, pending = await asyncio.wait([fut])  # type: ignore[type-var]
    assert done == {fut} and not pending and fut.result() == 3
