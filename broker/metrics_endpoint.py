"""The process's metrics endpoint: ``/metrics`` (Prometheus' text format, rendered by
prometheus-client's ``generate_latest``) and ``/health``, served on the process's own event
loop — an asyncio server, no thread per scrape, no thread at all.

``metrics.listener`` says where (``http://0.0.0.0:9404``; port 0 picks a free port, logged).
``/health`` answers 200 while the process serves and 503 while it starts or shuts down (the
Docker healthcheck and load balancers read it). Anything else: 404; a method other than GET
or HEAD: 405. Each connection carries one request (``Connection: close``); a client that
sends no complete request head within ``REQUEST_TIMEOUT_MS`` (injected clock) is dropped.

``ProcessMetrics`` is what a process (a broker, a controller, or both in one) owns: the
registry its roles add their collectors to, the process collectors (CPU, RSS, open fds), the
event-loop lag monitor and the endpoint.
"""

from __future__ import annotations

import asyncio
import logging
import time as _time  # thread CPU time of the loop thread (a cost metric; logic uses the injected clock)
import urllib.parse
from typing import Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.process_collector import ProcessCollector

from protocol.clock import Time, TimerHandle

from .config import ConfigError

log = logging.getLogger("kbroker.metrics")

# The text format generate_latest writes (newer prometheus-client label it 1.0.0; every
# Prometheus reads 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT_MS = 10_000
MAX_HEAD_BYTES = 16 * 1024

STARTING, SERVING, STOPPING = "starting", "serving", "shutting down"


def parse_metrics_listener(value: str) -> tuple[str, int]:
    """``http://host:port`` (or ``host:port``) → (host, port); host may be empty (all addresses)."""
    spec = value.strip()
    if "://" not in spec:
        spec = "http://" + spec
    parsed = urllib.parse.urlsplit(spec)
    if parsed.scheme != "http":
        raise ConfigError(f"metrics.listener: {value!r}: only http:// is served")
    try:
        port = parsed.port
    except ValueError:
        port = None
    if port is None or parsed.path not in ("", "/", "/metrics"):
        raise ConfigError(f"metrics.listener: {value!r} is not http://host:port")
    return parsed.hostname or "", port


class EventLoopLagMonitor:
    """A timer on the injected clock every ``interval_ms``; how late it fires (the event loop
    was busy: a long callback, a slow disk call on the loop) goes into a histogram."""

    BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

    def __init__(self, time: Time, interval_ms: float = 100.0) -> None:
        from .metrics import FastHistogram

        self.time = time
        self.interval_ms = interval_ms
        self.histogram = FastHistogram(self.BUCKETS)
        self.last_lag_s = 0.0
        self._timer: TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        self._due = self.time.monotonic_ms() + self.interval_ms
        self._timer = self.time.schedule(self.interval_ms, self._fire)

    def _fire(self) -> None:
        now = self.time.monotonic_ms()
        self.last_lag_s = lag = max(0.0, now - self._due) / 1000.0
        self.histogram.observe(lag)
        self._due = now + self.interval_ms
        self._timer = self.time.schedule(self.interval_ms, self._fire)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def collect(self):
        from .metrics import histogram_family

        yield histogram_family("kbroker_event_loop_lag_seconds",
                               "How late a timer on the event loop fires (the loop was busy)", [], [((), self.histogram)])


class _OneFamily:
    """A registry of one metric family, for generate_latest."""

    __slots__ = ("family",)

    def __init__(self, family) -> None:
        self.family = family

    def collect(self):
        return [self.family]


async def _yield_to_the_loop() -> None:
    """Let other callbacks (requests) run before continuing."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    loop.call_soon(future.set_result, None)
    await future


class ScrapeStats:
    """What serving /metrics costs: scrapes, the event loop thread's CPU spent collecting and
    formatting (thread CPU time, so what runs between the pieces is not counted) and the size
    of the last page. Exported by the endpoint itself."""

    def __init__(self) -> None:
        self.scrapes = 0
        self.cpu_ns = 0
        self.page_bytes = 0

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        scrapes = CounterMetricFamily("kbroker_metrics_scrapes", "Pages of /metrics served")
        scrapes.add_metric([], self.scrapes)
        cpu = CounterMetricFamily("kbroker_metrics_scrape_cpu_seconds", "Event loop thread CPU spent collecting and "
                                  "formatting /metrics pages")
        cpu.add_metric([], self.cpu_ns / 1e9)
        page = GaugeMetricFamily("kbroker_metrics_page_bytes", "Size of the last /metrics page")
        page.add_metric([], self.page_bytes)
        return [scrapes, cpu, page]


async def render(registry: CollectorRegistry, stats: ScrapeStats | None = None) -> bytes:
    """The page generate_latest(registry) writes, rendered a family at a time with the event
    loop free between families: the collectors run once (a consistent snapshot; cheap, they
    only copy numbers), formatting — most of the cost with thousands of per-partition
    series — is spread out, so a scrape never holds requests back for the whole page."""
    cpu = _time.thread_time_ns
    started = cpu()
    families = list(registry.collect())
    spent = cpu() - started
    parts = []
    for family in families:
        started = cpu()
        parts.append(generate_latest(_OneFamily(family)))  # type: ignore[arg-type]
        spent += cpu() - started
        await _yield_to_the_loop()
    page = b"".join(parts)
    if stats is not None:
        stats.scrapes += 1
        stats.cpu_ns += spent
        stats.page_bytes = len(page)
    return page


class MetricsEndpoint:
    def __init__(self, registry: CollectorRegistry, host: str, port: int, *, time: Time,
                 health: Callable[[], str]) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.time = time
        self.health = health
        self.server: asyncio.AbstractServer | None = None
        self.stats = ScrapeStats()
        registry.register(self.stats)  # type: ignore[arg-type]

    async def start(self) -> int:
        try:
            self.server = await asyncio.start_server(self._serve, self.host or None, self.port, reuse_address=True)
        except OSError as exc:
            raise ConfigError(f"metrics.listener: cannot listen on {self.host or '0.0.0.0'}:{self.port}: "
                              f"{exc.strerror or exc}") from None
        self.port = self.server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics (health: /health)", self.host or "0.0.0.0", self.port)
        return self.port

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        timer = self.time.schedule(REQUEST_TIMEOUT_MS, writer.close)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
            writer.close()
            return
        finally:
            timer.cancel()
        if len(head) > MAX_HEAD_BYTES:
            await self._respond(writer, 431, b"request head too large\n")
            return
        try:
            method, target, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        except ValueError:
            await self._respond(writer, 400, b"bad request\n")
            return
        path = target.split("?", 1)[0]
        body_wanted = method != "HEAD"
        if method not in ("GET", "HEAD"):
            await self._respond(writer, 405, b"method not allowed\n", extra=b"Allow: GET, HEAD\r\n")
        elif path == "/metrics":
            try:
                payload = await render(self.registry, self.stats)
            except Exception:
                log.exception("rendering /metrics failed")
                await self._respond(writer, 500, b"internal error\n")
                return
            await self._respond(writer, 200, payload, CONTENT_TYPE, body_wanted)
        elif path == "/health":
            state = self.health()
            await self._respond(writer, 200 if state == SERVING else 503, (state + "\n").encode(), body=body_wanted)
        elif path == "/":
            await self._respond(writer, 200, b"kbroker: /metrics /health\n", body=body_wanted)
        else:
            await self._respond(writer, 404, b"not found\n", body=body_wanted)

    async def _respond(self, writer: asyncio.StreamWriter, status: int, payload: bytes,
                       content_type: str = "text/plain; charset=utf-8", body: bool = True, extra: bytes = b"") -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 431:
                  "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}[status]
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n"
                "Connection: close\r\n").encode() + extra + b"\r\n"
        try:
            writer.write(head + payload if body else head)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


class ProcessMetrics:
    """What one process owns for its metrics (see the module doc). With metrics.enabled=false
    it is inert: ``enabled`` is False and roles add nothing."""

    def __init__(self, config, time: Time, serve: bool = True) -> None:
        """``serve=False``: a registry only (a role built on its own, in tests)."""
        self.enabled: bool = config["metrics.enabled"]
        self.time = time
        self.state = STARTING
        self.registry = CollectorRegistry(auto_describe=False)
        self.endpoint: MetricsEndpoint | None = None
        self.loop_lag: EventLoopLagMonitor | None = None
        self.per_partition: bool = config["metrics.partition.series.enabled"]
        self._authorizer_metrics = None
        if not self.enabled or not serve:
            return
        ProcessCollector(registry=self.registry)
        self.loop_lag = EventLoopLagMonitor(time)
        self.registry.register(self.loop_lag)  # type: ignore[arg-type]
        listener = config["metrics.listener"]
        if listener:
            host, port = parse_metrics_listener(listener)
            self.endpoint = MetricsEndpoint(self.registry, host, port, time=time, health=lambda: self.state)

    def authorizer_metrics(self):
        """The process's AuthorizerMetrics (denials per operation, bindings loaded), shared by
        its broker and controller authorizers; registered on first use when metrics are on."""
        if self._authorizer_metrics is None:
            from .security.authorizer import AuthorizerMetrics
            self._authorizer_metrics = AuthorizerMetrics()
            if self.enabled:
                self.registry.register(self._authorizer_metrics)  # type: ignore[arg-type]
        return self._authorizer_metrics

    @property
    def port(self) -> int | None:
        return self.endpoint.port if self.endpoint is not None else None

    async def start(self) -> None:
        """Before the roles start: /health says 503 until ``serving()``."""
        if self.loop_lag is not None:
            self.loop_lag.start()
        if self.endpoint is not None:
            await self.endpoint.start()

    def serving(self) -> None:
        self.state = SERVING

    def stopping(self) -> None:
        self.state = STOPPING

    async def close(self) -> None:
        self.state = STOPPING
        if self.loop_lag is not None:
            self.loop_lag.stop()
        if self.endpoint is not None:
            await self.endpoint.close()
