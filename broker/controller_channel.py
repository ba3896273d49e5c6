"""ControllerChannel (Kafka's NodeToControllerChannelManager): a broker's requests to the active controller.

A broker finds its controller through ``controller.quorum.bootstrap.servers`` (host:port,
tried in order). The channel keeps one connection, through ``protocol.client`` on the
injected network, to the address it believes is the active controller. A request that
cannot be delivered (connection refused or lost, timed out) or that the controller answers
with NOT_CONTROLLER moves the channel to the next address and is tried there, each address
at most once per ``send``; the caller decides when to try again (the lifecycle manager on its
heartbeat schedule, the AlterPartition manager after its backoff, forwarding until its
deadline).

Each user gets its own channel (heartbeats are not queued behind a slow CreateTopics on the
same connection), as Kafka gives each its own channel manager.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Sequence

from protocol.client import DEFAULT_NETWORK, BrokerConnection, KafkaConnectionError, Network
from protocol.clock import Time
from protocol.errors import ErrorCode, KafkaError, NotControllerError, RequestTimedOutError, UnsupportedVersionError
from protocol.messages import APIS

log = logging.getLogger("kbroker.controller_channel")


def mentions_not_controller(value: Any) -> bool:
    """Whether a decoded response carries NOT_CONTROLLER anywhere (top level or per resource):
    the sign that the request reached a controller that is not (or no longer) the active one."""
    if isinstance(value, dict):
        if value.get("error_code") == ErrorCode.NOT_CONTROLLER:
            return True
        return any(mentions_not_controller(v) for k, v in value.items() if isinstance(v, (list, dict)) and k != "_io")
    if isinstance(value, list):
        return any(mentions_not_controller(v) for v in value)
    return False


class ControllerChannel:
    def __init__(self, servers: Sequence[tuple[str, int]], *, broker_id: int, purpose: str, time: Time,
                 network: Network = DEFAULT_NETWORK, request_timeout_ms: int = 30000) -> None:
        if not servers:
            raise ValueError("a controller channel needs at least one controller address")
        self.servers = list(servers)
        self.broker_id = broker_id
        self.purpose = purpose
        self.time = time
        self.network = network
        self.request_timeout_ms = request_timeout_ms
        self._index = 0
        self._conn: BrokerConnection | None = None
        self._connect_lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        host, port = self.current
        return f"<ControllerChannel {self.purpose} -> {host}:{port}>"

    @property
    def current(self) -> tuple[str, int]:
        """The address believed to be the active controller's."""
        return self.servers[self._index]

    def rotate(self, index: int, why: str) -> None:
        """Move on from address ``index`` (only if it is still the current one: several requests
        failing on the same connection move the channel once)."""
        if index != self._index:
            return
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._index = (self._index + 1) % len(self.servers)
        if len(self.servers) > 1:
            host, port = self.current
            log.info("%s channel of broker %d: %s; trying the controller at %s:%d", self.purpose, self.broker_id, why,
                     host, port)

    async def _connection(self) -> tuple[int, BrokerConnection]:
        async with self._connect_lock:
            if self._closed:
                raise KafkaConnectionError("the controller channel is closed")
            if self._conn is None or not self._conn.connected:
                index = self._index
                host, port = self.servers[index]
                conn = BrokerConnection(host, port, client_id=f"broker-{self.broker_id}-{self.purpose}",
                                        network=self.network, time=self.time,
                                        request_timeout_ms=self.request_timeout_ms)
                try:
                    await conn.connect()
                except KafkaError:
                    self.rotate(index, f"cannot connect to {host}:{port}")
                    raise
                self._conn = conn
            return self._index, self._conn

    async def send(self, api_key: int, body: dict, version: int | None = None,
                   max_version: int | None = None) -> Any:
        """The response of the active controller to one request (at ``version``, else the
        highest both sides speak up to ``max_version``); raises the last failure
        (KafkaConnectionError, RequestTimedOutError, NotControllerError) once every known
        controller was tried."""
        async def exchange(conn: BrokerConnection) -> tuple[Any, Any]:
            v = version if version is not None else conn.version_for(api_key, max_v=max_version)
            response = await conn.request(api_key, body, v)
            return response, response
        return await self._with_active_controller(api_key, exchange)

    async def send_raw(self, api_key: int, version: int, body: bytes | memoryview) -> memoryview:
        """Relay an encoded request body; returns the encoded response body. Failures and
        NOT_CONTROLLER move on to the next controller as ``send`` does."""
        api = APIS[api_key]

        async def exchange(conn: BrokerConnection) -> tuple[Any, Any]:
            lo, hi = conn.api_versions.get(api_key, (0, -1))
            if not lo <= version <= hi:
                raise UnsupportedVersionError(f"the controller does not speak {api.name} v{version} ({lo}-{hi})")
            data = await conn.request_raw(api_key, version, body)
            return data, api.response.parse(version, data)
        result: memoryview = await self._with_active_controller(api_key, exchange)
        return result

    async def _with_active_controller(self, api_key: int,
                                      exchange: Callable[[BrokerConnection], Awaitable[tuple[Any, Any]]]) -> Any:
        """``exchange(conn)`` -> (result, decoded response) with each address at most once,
        from the current one: a failed connection or a NOT_CONTROLLER anywhere in the decoded
        response moves on to the next."""
        last: Exception | None = None
        for _ in range(len(self.servers)):
            try:
                index, conn = await self._connection()
            except KafkaError as exc:
                last = exc
                continue
            try:
                result, decoded = await exchange(conn)
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                last = exc
                self.rotate(index, str(exc))
                continue
            if mentions_not_controller(decoded):
                host, port = self.servers[index]
                last = NotControllerError(f"{APIS[api_key].name}: {host}:{port} is not the active controller")
                self.rotate(index, "NOT_CONTROLLER")
                continue
            return result
        assert last is not None
        raise last

    def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None
