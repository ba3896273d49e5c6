"""A scripted controller for the broker's unit tests: it keeps each request the broker sends and
answers when the test says (a response body, or an exception such as a lost connection).
Responses are real decoded bodies (built and parsed with the API's schema), so the code under
test reads them exactly as it reads a controller's answer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from protocol.messages import APIS


def response(api_key: int, body: dict, version: int | None = None) -> Any:
    """``body`` as the broker would decode it off the wire."""
    api = APIS[api_key]
    v = api.max_version if version is None else version
    return api.response.parse(v, api.response.build(v, body))


@dataclass
class Sent:
    api_key: int
    body: dict
    version: int | None
    max_version: int | None
    future: asyncio.Future

    def answer(self, body: dict, version: int | None = None) -> None:
        self.future.set_result(response(self.api_key, body, version))

    def fail(self, exc: BaseException) -> None:
        self.future.set_exception(exc)

    def answer_raw(self, body: dict) -> None:
        """For a relayed request: the encoded response body, at the request's version."""
        assert self.version is not None
        self.future.set_result(memoryview(APIS[self.api_key].response.build(self.version, body)))


class ScriptedController:
    """A ControllerChannel stand-in: ``send`` waits until the test answers ``pending``."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    async def send(self, api_key: int, body: dict, version: int | None = None, max_version: int | None = None) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.sent.append(Sent(api_key, body, version, max_version, future))
        return await future

    async def send_raw(self, api_key: int, version: int, body: bytes) -> memoryview:
        future = asyncio.get_running_loop().create_future()
        self.sent.append(Sent(api_key, {"raw": bytes(body)}, version, None, future))
        return await future

    @property
    def pending(self) -> list[Sent]:
        return [s for s in self.sent if not s.future.done()]

    def only_pending(self) -> Sent:
        [one] = self.pending
        return one


async def settle(rounds: int = 10) -> None:
    """Let the event loop run the tasks that are ready (sends, answers, callbacks); time does not move."""
    for _ in range(rounds):
        await asyncio.sleep(0)
