"""``kbroker health``: is the broker or controller at an address answering? One ApiVersions
round trip (the first request every Kafka client sends), exit 0 if it got an answer, 1 if not.

The options here are those of a TLS or SASL listener (``-X``, ``--command-config``); the
plain check runs in ``cli.entry`` on the standard library alone. It is the HEALTHCHECK of
the Docker image, where it must find the process it runs next to
with no arguments: without ``-b`` and ``$KBROKER_BOOTSTRAP_SERVER`` it asks the first listener
of ``$KBROKER_LISTENERS`` (the configuration the process in the container reads), a wildcard
host (``0.0.0.0``, ``::`` or none) meaning 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys

from cli.common import client_network
from cli.entry import address as _address
from protocol.client import BrokerConnection


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
