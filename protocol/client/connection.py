"""Connections to brokers.

* ``Network`` opens TCP connections. It is the one place the client does; everything above
  takes a ``network=`` so a simulated network can stand in for it.
* ``BrokerConnection`` is an ``asyncio.Protocol`` over ``Framer`` (aiokafka's conn.py
  shape): requests are pipelined and matched to responses in FIFO order through a deque of
  (correlation id, future); a mismatch means the stream is out of sync and the connection
  is closed. It negotiates versions with ApiVersions on connect (KIP-511 fallback
  included). Long-tail APIs go through the construct schemas (``request``); Produce and
  Fetch go through the hand-written codecs of ``protocol.fast_codecs``.

Request timeouts are scheduled on the injected clock (``protocol.clock.Time``).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import importlib.metadata
import itertools
import random
import socket
import ssl
import struct
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Literal, Mapping, NamedTuple, Sequence, cast, overload

from .. import fast_codecs
from ..api_keys import ApiKey
from ..clock import Time, TimerHandle
from ..errors import ErrorCode, KafkaError, RequestTimedOutError, UnsupportedVersionError, error_for
from ..framing import Framer, FrameTooLarge, NegativeFrameSize
from ..messages import APIS, request_is_flexible, response_is_flexible
from .clock import SYSTEM_TIME, running_loop
from .eager import EagerFuture
from .sasl import SaslError, SaslMechanism, mechanism_for
from .security import PLAINTEXT, ClientSecurity

if TYPE_CHECKING:
    from ..fast_codecs import ProduceResults, Records

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# A response length above this is garbage on the wire, not a response (Fetch max_bytes is 50 MiB by default).
MAX_RESPONSE_BYTES = 1 << 30
# ApiVersions is first sent at v3, as librdkafka does: v3 is the first flexible version (it
# carries our software name); v4 changes nothing we read.
_FIRST_API_VERSIONS_VERSION = 3
try:
    _SOFTWARE_VERSION = importlib.metadata.version("kbroker")
except importlib.metadata.PackageNotFoundError:  # running from a source tree that is not installed
    _SOFTWARE_VERSION = "0"



# True in the task running a SASL exchange: its own requests pass a re-authentication's gate,
# everyone else's wait (a request sent between SaslHandshake and the last SaslAuthenticate is
# ILLEGAL_SASL_STATE, and the broker closes the connection).
_IN_SASL_EXCHANGE: contextvars.ContextVar[bool] = contextvars.ContextVar("kbroker_in_sasl_exchange", default=False)

class KafkaConnectionError(KafkaError):
    """A connection to a broker could not be opened, or was lost. Retriable (after a
    metadata refresh), like Kafka's NETWORK_EXCEPTION whose code it carries."""

    error_code = ErrorCode.NETWORK_EXCEPTION
    retriable = True
    invalid_metadata = True


class AuthenticationError(KafkaError):
    """TLS or SASL authentication with a broker failed (Kafka's SaslAuthenticationException /
    SslAuthenticationException): not retriable, the configuration must change."""

    error_code = ErrorCode.SASL_AUTHENTICATION_FAILED
    retriable = False


def wire_error(code: int, what: str, message: str | None = None) -> KafkaError:
    """The KafkaError subclass for ``code``, with a message naming what failed."""
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error code {code}"
    return error_for(code, f"{what}: {message or name}")


class Network:
    """Opens outgoing TCP connections: the one place the client creates sockets, so that a
    simulated network can replace it (pass ``network=`` to any class below).

    ``security`` (protocol.client.security): every connection it opens speaks TLS when the
    security protocol is SSL or SASL_SSL (the server's certificate checked against the
    truststore, and its host name unless ssl.endpoint.identification.algorithm is empty), and
    ``BrokerConnection`` authenticates with SASL when it is SASL_PLAINTEXT or SASL_SSL."""

    def __init__(self, security: ClientSecurity | None = None) -> None:
        self.security = security or PLAINTEXT

    async def open_connection(self, host: str, port: int, protocol_factory: Callable[[], asyncio.BaseProtocol],
                              timeout_s: float) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        loop = asyncio.get_running_loop()
        security = getattr(self, "security", PLAINTEXT)
        async with asyncio.timeout(timeout_s):
            if security.ssl_context is not None:
                return await loop.create_connection(protocol_factory, host, port, ssl=security.ssl_context,
                                                    server_hostname=host, ssl_handshake_timeout=timeout_s)
            return await loop.create_connection(protocol_factory, host, port)


DEFAULT_NETWORK = Network()


_tuple_new = tuple.__new__


class _InFlight(NamedTuple):
    correlation_id: int
    future: asyncio.Future[bytearray] | EagerFuture[bytearray]  # resolves to the response frame
    timer: TimerHandle


class BrokerConnection(asyncio.BufferedProtocol):
    """One TCP connection to one broker, single use: ``await connect()``, then any number of
    concurrent ``request``/``produce``/``fetch`` calls, then ``close()``.

    Requests are written in call order and their responses matched in the same order, by
    correlation id. Each request has a timeout on the injected clock; when it expires the
    request fails with RequestTimedOutError and the connection is closed (its later
    responses could no longer be matched). Losing the connection fails every pending request
    with ``KafkaConnectionError``.
    """

    def __init__(self, host: str, port: int, *, client_id: str | None = "kbroker",
                 network: Network = DEFAULT_NETWORK, time: Time = SYSTEM_TIME,
                 request_timeout_ms: int = 30000) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.api_versions: dict[int, tuple[int, int]] = {}  # the broker's ranges, from ApiVersions
        self._fetch_version: tuple[dict[int, tuple[int, int]], int] | None = None  # (api_versions, Fetch's)
        self._network = network
        self._time = time
        self._transport: asyncio.Transport | None = None
        self._framer = Framer(MAX_RESPONSE_BYTES, gather=True)  # responses: each byte copied once
        self._inflight: collections.deque[_InFlight] = collections.deque()
        self._correlation_ids = itertools.count()
        self._writable = asyncio.Event()
        self._closed: KafkaConnectionError | None = None
        self.session_lifetime_ms = 0  # SASL (KIP-368): the broker ends the session after this long (0: never)
        self.reauthentications = 0
        self._auth_gate: asyncio.Event | None = None  # holds new requests while re-authenticating
        self._reauth_timer: TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._closed is None

    async def connect(self) -> None:
        """Open the connection and negotiate API versions."""
        try:
            await self._network.open_connection(self.host, self.port, lambda: self, self.request_timeout_ms / 1000)
        except ssl.SSLError as exc:
            raise AuthenticationError(f"TLS handshake with {self.host}:{self.port} failed: {exc}") from exc
        except (OSError, TimeoutError) as exc:
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {exc or 'timed out'}") from exc
        try:
            await self._negotiate_api_versions()
            security = getattr(self._network, "security", PLAINTEXT)
            if security.uses_sasl:
                await self.authenticate(security)
        except BaseException:
            self.close()
            raise

    async def authenticate(self, security: ClientSecurity) -> None:
        """SASL: SaslHandshake v1 naming the mechanism, then its messages in SaslAuthenticate
        requests until both sides are done (KIP-152). A refusal raises the broker's error:
        UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED (with its message), ..."""
        assert security.mechanism is not None
        token = _IN_SASL_EXCHANGE.set(True)
        try:
            await self._authenticate(security)
        finally:
            _IN_SASL_EXCHANGE.reset(token)
        if self.session_lifetime_ms > 0:
            # KIP-368: re-authenticate before the session ends, at 85-95% of it as Kafka's clients do.
            delay = self.session_lifetime_ms * random.uniform(0.85, 0.95)
            self._reauth_timer = self._time.schedule(delay, lambda: self._start_reauthentication(security))

    def _start_reauthentication(self, security: ClientSecurity) -> None:
        self._reauth_timer = None
        if self._closed is None and self._transport is not None:
            task = asyncio.get_running_loop().create_task(self._reauthenticate(security))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _reauthenticate(self, security: ClientSecurity) -> None:
        """New requests wait; those in flight are answered; then SaslHandshake and the exchange
        again on this connection (the broker answers them in order, between requests)."""
        self._auth_gate = gate = asyncio.Event()
        try:
            while self._inflight and self._closed is None:
                # (an EagerFuture is waited for as a Future is: wait only adds and removes a callback)
                await asyncio.wait([cast("asyncio.Future[bytearray]", self._inflight[-1].future)])
            if self._closed is None:
                await self.authenticate(security)
                self.reauthentications += 1
        except Exception as exc:  # noqa: BLE001 - any failure ends the session, as the broker would
            self.close(KafkaConnectionError(f"re-authentication with {self.host}:{self.port} failed: {exc}"))
        finally:
            self._auth_gate = None
            gate.set()

    async def _authenticate(self, security: ClientSecurity) -> None:
        assert security.mechanism is not None
        version = self.version_for(ApiKey.SASL_HANDSHAKE, min_v=1)
        response = await self.request(ApiKey.SASL_HANDSHAKE, {"mechanism": security.mechanism}, version)
        if response.error_code:
            raise wire_error(response.error_code, f"SaslHandshake with {self.host}:{self.port}",
                             f"{security.mechanism} is not enabled (the broker enables {', '.join(response.mechanisms)})"
                             if response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM else None)
        try:
            mechanism: SaslMechanism = mechanism_for(security.mechanism, security.username, security.password,
                                                     security.jaas_options, self._time.milliseconds)
            message: bytes | None = mechanism.initial()
            auth_version = self.version_for(ApiKey.SASL_AUTHENTICATE)
            lifetime = 0
            while message is not None:
                answer = await self.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": message}, auth_version)
                if answer.error_code:
                    raise wire_error(answer.error_code, f"SASL {security.mechanism} with {self.host}:{self.port}",
                                     answer.error_message)
                lifetime = getattr(answer, "session_lifetime_ms", 0) or 0
                message = mechanism.evaluate(bytes(answer.auth_bytes))
                if message is None and not mechanism.complete:
                    raise SaslError(f"{security.mechanism}: the exchange ended before it completed")
        except SaslError as exc:
            raise AuthenticationError(f"{self.host}:{self.port}: {exc}") from None
        self.session_lifetime_ms = lifetime

    async def _negotiate_api_versions(self) -> None:
        version = _FIRST_API_VERSIONS_VERSION
        api = APIS[ApiKey.API_VERSIONS]
        while True:
            body = api.request.build(version, {"client_software_name": "kbroker",
                                               "client_software_version": _SOFTWARE_VERSION})
            frame = await self._send(self._encoder(ApiKey.API_VERSIONS, version, body), True, self.request_timeout_ms)
            # The response header is v0 even for flexible versions. A broker that does not
            # speak ``version`` answers UNSUPPORTED_VERSION with a v0 body listing the
            # versions of ApiVersions it does speak (KIP-511).
            (error,) = _I16.unpack_from(frame, 4)
            unsupported = error == ErrorCode.UNSUPPORTED_VERSION
            response = api.response.parse(0 if unsupported else version, frame, 4)
            if unsupported and version > 0:
                lo, hi = {k.api_key: (k.min_version, k.max_version)
                          for k in response.api_keys}.get(ApiKey.API_VERSIONS, (0, 0))
                if hi < 0 or lo > hi:  # a range no request can be sent in
                    raise UnsupportedVersionError(f"{self.host}:{self.port} refused ApiVersions v{version} and "
                                                  f"lists ApiVersions v{lo}-{hi}")
                version = min(version - 1, hi)
                continue
            if response.error_code:
                raise wire_error(response.error_code, f"ApiVersions v{version} to {self.host}:{self.port}")
            self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            return

    def version_for(self, api_key: int, min_v: int | None = None, max_v: int | None = None) -> int:
        """The highest version of ``api_key`` both sides speak (within [min_v, max_v] if given)."""
        api = APIS.get(api_key)
        theirs = self.api_versions.get(api_key)
        name = api.name if api is not None else f"API key {api_key}"
        if api is None or theirs is None:
            side = "kbroker's client" if api is None else f"the broker at {self.host}:{self.port}"
            raise UnsupportedVersionError(f"{side} does not support {name}")
        lo = max(api.min_version, theirs[0], 0 if min_v is None else min_v)
        hi = min(api.max_version, theirs[1], api.max_version if max_v is None else max_v)
        if lo > hi:
            raise UnsupportedVersionError(
                f"no common version of {name}: the client speaks {api.min_version}-{api.max_version}"
                f"{'' if min_v is None and max_v is None else f' (here {min_v}-{max_v})'}, "
                f"the broker at {self.host}:{self.port} {theirs[0]}-{theirs[1]}")
        return hi

    async def request(self, api_key: int, body: Mapping[str, Any], version: int | None = None) -> Any:
        """Send a long-tail request built from its construct schema; returns the parsed
        response body (a construct ``Container``, hence ``Any``)."""
        api = APIS[api_key]
        if version is None:
            version = self.version_for(api_key)
        frame = await self._send(self._encoder(api_key, version, api.request.build(version, body)), True,
                                 self.request_timeout_ms)
        pos = fast_codecs.skip_tagged_fields(frame, 4) if response_is_flexible(api_key, version) else 4
        return api.response.parse(version, frame, pos)

    async def request_raw(self, api_key: int, version: int, body: bytes | bytearray | memoryview,
                          timeout_ms: float | None = None) -> memoryview:
        """Send a request whose body is already encoded (a broker relaying a client's request
        to the controller); returns the response body, after the response header."""
        frame = await self._send(self._encoder(api_key, version, bytes(body)), True,
                                 self.request_timeout_ms if timeout_ms is None else timeout_ms)
        pos = fast_codecs.skip_tagged_fields(frame, 4) if response_is_flexible(api_key, version) else 4
        return memoryview(frame)[pos:]

    async def produce(self, acks: int, timeout_ms: int, topics: Sequence[tuple[str, Sequence[tuple[int, Records | None]]]],
                      version: int | None = None, transactional_id: str | None = None) -> ProduceResults | None:
        """Send a Produce request; ``topics`` is [(topic, [(partition, record batch bytes)])]
        (transactional batches with their ``transactional_id``).

        Returns [(topic, [(partition, error, base_offset, log_append_time, log_start_offset)])],
        or None with acks=0, which the broker never answers: it returns once written.
        """
        if version is None:
            version = self.version_for(ApiKey.PRODUCE, max_v=fast_codecs.PRODUCE_VERSIONS[1])
        frame = await self._send(
            lambda cid: fast_codecs.encode_produce_request(version, cid, self.client_id, acks, timeout_ms, topics,
                                                           transactional_id),
            acks != 0, self.request_timeout_ms + timeout_ms)
        return None if frame is None else fast_codecs.decode_produce_response(version, frame, 4)

    async def fetch(self, request: fast_codecs.FetchRequest, version: int | None = None,
                    eager: bool = False) -> fast_codecs.FetchResponse:
        """Send a Fetch request; the records of the response are memoryviews of its frame.
        ``eager``: the awaiting task resumes inside the read of the response, not one loop turn
        later (protocol/client/eager.py: a follower's fetcher sends its next Fetch at once)."""
        if version is None:
            version = self.fetch_version()
        frame = await self._send(lambda cid: (fast_codecs.encode_fetch_request(version, cid, self.client_id, request),),
                                 True, self.request_timeout_ms + request.max_wait_ms, eager)
        return fast_codecs.decode_fetch_response(version, memoryview(frame), 4)

    def fetch_version(self) -> int:
        """The version ``fetch`` sends: version_for's answer, asked once per ApiVersions answer
        (a follower fetches for ever)."""
        cached = self._fetch_version
        if cached is not None and cached[0] is self.api_versions:
            return cached[1]
        version = self.version_for(ApiKey.FETCH, max_v=fast_codecs.FETCH_VERSIONS[1])
        self._fetch_version = (self.api_versions, version)
        return version

    def send_fetch(self, encode: Callable[[int], Sequence[Records]], max_wait_ms: float) -> Coroutine[Any, Any, bytearray]:
        """``fetch`` of a request already encoded, eagerly (a follower's steady state, broker/fetcher.py):
        ``encode(correlation_id)`` gives the frame of a Fetch at ``fetch_version()``, with
        ``max_wait_ms`` its max_wait_ms; awaited, the response frame, undecoded (the response
        body from byte 4). A function returning ``_send``'s coroutine: no coroutine of its own."""
        return self._send(encode, True, self.request_timeout_ms + max_wait_ms, True)

    def close(self, error: KafkaConnectionError | None = None) -> None:
        """Close the connection; pending requests fail with ``error`` (default: "closed")."""
        self._fail_pending(error or KafkaConnectionError(f"connection to {self.host}:{self.port} closed"))
        if self._transport is not None:
            self._transport.close()

    # -- request plumbing ------------------------------------------------------------------

    def _encoder(self, api_key: int, version: int, body: bytes) -> Callable[[int], tuple[bytes, bytes, bytes]]:
        flexible = request_is_flexible(api_key, version)

        def encode(correlation_id: int) -> tuple[bytes, bytes, bytes]:
            header = fast_codecs.encode_request_header(api_key, version, correlation_id, self.client_id, flexible)
            return _I32.pack(len(header) + len(body)), header, body
        return encode

    @overload
    async def _send(self, encode: Callable[[int], Sequence[Records]], expect_response: Literal[True],
                    timeout_ms: float, eager: bool = False) -> bytearray: ...
    @overload
    async def _send(self, encode: Callable[[int], Sequence[Records]], expect_response: bool,
                    timeout_ms: float, eager: bool = False) -> bytearray | None: ...

    async def _send(self, encode: Callable[[int], Sequence[Records]], expect_response: bool,
                    timeout_ms: float, eager: bool = False) -> bytearray | None:
        """Write the frame ``encode(correlation_id)`` gives; return the response frame (or
        None without one). Waits first while the transport's buffer is full. ``eager``: the
        response resumes the caller in the read that completes it (an EagerFuture)."""
        while True:
            gate = self._auth_gate
            if gate is not None and not _IN_SASL_EXCHANGE.get():
                await gate.wait()  # a re-authentication is under way
            elif not self._writable.is_set():
                await self._writable.wait()
            else:
                break  # checked again after each wait: a re-authentication may have begun meanwhile
        if self._closed is not None or self._transport is None:
            raise KafkaConnectionError(str(self._closed or f"{self} is not connected"))
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        self._transport.writelines(encode(correlation_id))
        if not expect_response:
            return None
        loop = running_loop()
        future: asyncio.Future[bytearray] | EagerFuture[bytearray] = EagerFuture(loop) if eager else loop.create_future()
        timer = self._time.schedule(timeout_ms, lambda: self._on_timeout(future, timeout_ms))
        self._inflight.append(_tuple_new(_InFlight, (correlation_id, future, timer)))  # (no NamedTuple __new__)
        return await future

    def _on_timeout(self, future: asyncio.Future[bytearray] | EagerFuture[bytearray], timeout_ms: float) -> None:
        if not future.done():
            future.set_exception(RequestTimedOutError(f"{self.host}:{self.port} sent no response within {timeout_ms:g} ms"))
            self.close(KafkaConnectionError(f"connection to {self.host}:{self.port} closed after a request timed out"))

    def _fail_pending(self, error: KafkaConnectionError) -> None:
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        if self._closed is None:
            self._closed = error
        self._writable.set()  # wake writers, who then see the connection is closed
        while self._inflight:
            entry = self._inflight.popleft()
            entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_exception(error)

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # create_connection (the only way this protocol is used) always gives a stream transport.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writable.set()

    # Reads go into the framer (asyncio.BufferedProtocol): a response read whole is copied once
    # out of its read buffer, the rest of a large one read straight into its frame (framing.py);
    # data_received (a transport that hands chunks) is the same with ``feed``.
    def get_buffer(self, sizehint: int) -> memoryview:
        return self._framer.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._framer.filled(nbytes)
        except (FrameTooLarge, NegativeFrameSize) as exc:
            self.close(KafkaConnectionError(f"{self.host}:{self.port} sent a bad response size: {exc}"))
            return
        if frames:
            self._responses(frames)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._framer.feed(data)
        except (FrameTooLarge, NegativeFrameSize) as exc:
            self.close(KafkaConnectionError(f"{self.host}:{self.port} sent a bad response size: {exc}"))
            return
        self._responses(frames)

    def _responses(self, frames: list[bytearray]) -> None:
        for frame in frames:
            got = _I32.unpack_from(frame)[0] if len(frame) >= 4 else None
            expected = self._inflight[0].correlation_id if self._inflight else None
            if got is None or got != expected:
                self.close(KafkaConnectionError(
                    f"connection to {self.host}:{self.port} out of sync: response for correlation id {got}, "
                    f"expected {expected}"))
                return
            entry = self._inflight.popleft()
            entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_pending(KafkaConnectionError(
            f"connection to {self.host}:{self.port} lost" + (f": {exc}" if exc else "")))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()
