"""``kbroker health``: is the broker or controller at an address answering? One ApiVersions
round trip (the first request every Kafka client sends), exit 0 if it got an answer, 1 if not.

It is the HEALTHCHECK of the Docker image, where it must find the process it runs next to
with no arguments: without ``-b`` and ``$KBROKER_BOOTSTRAP_SERVER`` it asks the first listener
of ``$KBROKER_LISTENERS`` (the configuration the process in the container reads), a wildcard
host (``0.0.0.0``, ``::`` or none) meaning 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from cli.common import client_network
from protocol.client import BrokerConnection

FALLBACK = "127.0.0.1:9092"
LISTENERS_ENV = "KBROKER_LISTENERS"
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def own_listener(environ: Mapping[str, str]) -> str:
    """host:port of the first listener in ``$KBROKER_LISTENERS`` (``NAME://host:port,...``),
    wildcard hosts replaced by 127.0.0.1; the fallback if there is none."""
    first = environ.get(LISTENERS_ENV, "").split(",")[0].strip()
    _scheme, sep, address = first.partition("://")
    if not sep:
        return FALLBACK
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit():
        return FALLBACK
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    return f"{host}:{port}"


def _address(server: str) -> tuple[str, int]:
    host, sep, port = server.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected host:port, got {server!r}")
    return host.strip("[]"), int(port)


async def run(args: argparse.Namespace) -> int:
    """Ask each address in turn (``-b`` may list several); healthy if one answers."""
    failures = []
    network = client_network(args)
    for server in args.bootstrap_server.split(","):
        host, port = _address(server)
        conn = BrokerConnection(host, port, client_id="kbroker-health", request_timeout_ms=args.timeout_ms,
                                network=network)
        try:
            await conn.connect()
        except Exception as exc:  # any failure is "not healthy", said in one line
            failures.append(f"{host}:{port}: {exc}")
            continue
        finally:
            conn.close()
        print(f"{host}:{port} answered ApiVersions ({len(conn.api_versions)} APIs)")
        return 0
    for failure in failures:
        print(f"kbroker: unhealthy: {failure}", file=sys.stderr)
    return 1
