"""Reading a kbroker metrics endpoint (``metrics.listener``) from the client side: ``/health``
and ``/metrics`` over plain HTTP/1.1 on the caller's event loop, the page parsed with
prometheus-client's parser, and a summary of what an operator looks at first (what
``kbroker metadata --metrics`` prints; ``kbroker cluster status`` may use it too)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


@dataclass
class EndpointStatus:
    address: str
    health: str  # "serving", "starting", "shutting down", or why it could not be read
    serving: bool
    samples: dict[str, dict[Labels, float]] = field(default_factory=dict)

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get(name, {}).get(tuple(sorted(labels.items())))

    def total(self, name: str) -> float | None:
        series = self.samples.get(name)
        return sum(series.values()) if series else None


def _split_address(address: str) -> tuple[str, int]:
    spec = address.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = spec.rpartition(":")
    return host or "127.0.0.1", int(port)


async def http_get(address: str, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of a GET; raises OSError or asyncio.TimeoutError when unreachable."""
    host, port = _split_address(address)

    async def exchange() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        try:
            status = int(head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise OSError(f"{address}: not an HTTP response") from None
        return status, body

    return await asyncio.wait_for(exchange(), timeout_s)


def parse_metrics(text: str) -> dict[str, dict[Labels, float]]:
    out: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


async def read_endpoint(address: str, timeout_s: float = 5.0) -> EndpointStatus:
    """/health, then /metrics when it answers; never raises for an unreachable endpoint."""
    try:
        status, body = await http_get(address, "/health", timeout_s)
    except (OSError, asyncio.TimeoutError, ValueError) as exc:
        return EndpointStatus(address, f"unreachable ({exc.__class__.__name__})", False)
    result = EndpointStatus(address, body.decode(errors="replace").strip() or str(status), status == 200)
    try:
        status, body = await http_get(address, "/metrics", timeout_s)
        if status == 200:
            result.samples = parse_metrics(body.decode())
    except (OSError, asyncio.TimeoutError, ValueError):
        pass
    return result


def histogram_quantile(status: EndpointStatus, name: str, q: float) -> float | None:
    """An upper bound of the q-quantile of a label-less histogram (the first bucket holding it)."""
    buckets = status.samples.get(name + "_bucket")
    if not buckets:
        return None
    pairs = sorted((float(dict(labels)["le"]), count) for labels, count in buckets.items())
    total = pairs[-1][1]
    if not total:
        return 0.0
    for bound, count in pairs:
        if count >= q * total:
            return bound
    return None


def summary(status: EndpointStatus) -> dict[str, float | None]:
    """What an operator checks first: for a broker its partitions, leaders, under-replicated and
    under-min-ISR partitions; for a controller whether it is active, fenced brokers and offline
    partitions; for any process the event loop's p99 lag (an upper bound)."""
    return {
        "partitions": status.total("kafka_server_replicamanager_partitioncount"),
        "leaders": status.total("kafka_server_replicamanager_leadercount"),
        "under_replicated": status.total("kafka_server_replicamanager_underreplicatedpartitions"),
        "under_min_isr": status.total("kafka_server_replicamanager_underminisrpartitioncount"),
        "active_controller": status.total("kafka_controller_kafkacontroller_activecontrollercount"),
        "fenced_brokers": status.total("kafka_controller_kafkacontroller_fencedbrokercount"),
        "offline_partitions": status.total("kafka_controller_kafkacontroller_offlinepartitionscount"),
        "event_loop_lag_p99_s": histogram_quantile(status, "kbroker_event_loop_lag_seconds", 0.99),
    }
