"""protocol/client/clock.py running_loop: asyncio.get_running_loop without a getpid() system
call per call, and still the loop running in the calling thread."""

import asyncio
import threading

import pytest

from protocol.client import clock
from protocol.client.clock import SYSTEM_TIME, running_loop


def counting_get_running_loop(monkeypatch) -> list[int]:
    calls = [0]
    real = asyncio.get_running_loop

    def counted():
        calls[0] += 1
        return real()
    monkeypatch.setattr(clock.asyncio, "get_running_loop", counted)
    return calls


def test_asks_asyncio_once_per_running_loop(monkeypatch):
    calls = counting_get_running_loop(monkeypatch)

    async def main():
        loops = {running_loop() for _ in range(100)}
        for _ in range(100):
            SYSTEM_TIME.schedule(1000, lambda: None).cancel()
        return loops
    assert asyncio.run(main()) and calls[0] == 1  # (was 200: each one a getpid() in CPython 3.11)


def test_the_loop_running_now_not_one_before():
    async def main():
        return running_loop(), asyncio.get_running_loop()
    first, expected = asyncio.run(main())
    assert first is expected
    second, expected = asyncio.run(main())
    assert second is expected and second is not first


def test_outside_a_running_loop_raises_as_asyncio_does():
    asyncio.run(asyncio.sleep(0))  # a loop found before, since stopped
    with pytest.raises(RuntimeError):
        running_loop()


def test_each_thread_its_own_loop():
    found = {}
    ready = threading.Barrier(2)

    def in_thread(name):
        async def main():
            ready.wait(5)  # both loops running at once
            found[name] = (running_loop(), asyncio.get_running_loop())
        asyncio.run(main())
    threads = [threading.Thread(target=in_thread, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert found["a"][0] is found["a"][1] and found["b"][0] is found["b"][1]
    assert found["a"][0] is not found["b"][0]
