"""The ``kbroker`` console script: ``kbroker health`` without options other than ``-b`` and
``--timeout-ms`` runs here on the standard library alone; everything else goes to ``cli.main``.

``kbroker health`` is the Docker image's HEALTHCHECK, run every few seconds in every container.
Through ``cli.main`` it imports argparse, uvloop and the asyncio client first (~0.4 CPU-seconds
a check), which made an idle compose cluster cost ~0.4 cores and its checks time out
("container unhealthy") when the machine was busy. Here a check is one blocking socket, an
ApiVersions v0 request and its answer (~0.05 CPU-seconds, the interpreter's start).

Anything this path does not parse (``-X``, ``--command-config``: TLS or SASL properties, ``-h``)
takes the full path, whose behaviour and messages this path repeats: "HOST:PORT answered
ApiVersions (N APIs)" and exit 0, or one "kbroker: unhealthy: HOST:PORT: why" line per address
and exit 1.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time
from collections.abc import Mapping

FALLBACK = "127.0.0.1:9092"
BOOTSTRAP_ENV = "KBROKER_BOOTSTRAP_SERVER"
LISTENERS_ENV = "KBROKER_LISTENERS"
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
DEFAULT_TIMEOUT_MS = 5000

API_VERSIONS, CORRELATION_ID, CLIENT_ID = 18, 1, b"kbroker-health"
# size, api key, version 0, correlation id, client id; ApiVersions v0 has an empty body
REQUEST = struct.pack(">ihhih", 2 + 2 + 4 + 2 + len(CLIENT_ID), API_VERSIONS, 0, CORRELATION_ID,
                      len(CLIENT_ID)) + CLIENT_ID
MAX_ANSWER = 1 << 20


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


def address(server: str) -> tuple[str, int]:
    host, sep, port = server.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected host:port, got {server!r}")
    return host.strip("[]"), int(port)


def parse_light(args: list[str], environ: Mapping[str, str]) -> tuple[str, int] | None:
    """(bootstrap servers, timeout ms) of ``health``'s arguments, or None when they need the full
    parser (any other option, a bad value, a missing one)."""
    servers = environ.get(BOOTSTRAP_ENV) or own_listener(environ)
    timeout_ms = DEFAULT_TIMEOUT_MS
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if not eq:
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
            i += 1
        i += 1
        if name in ("-b", "--bootstrap-server"):
            servers = value
        elif name == "--timeout-ms" and value.isdigit():
            timeout_ms = int(value)
        else:
            return None
    return servers, timeout_ms


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed before the answer")
        data += chunk
    return bytes(data)


def ask_api_versions(host: str, port: int, timeout_s: float) -> int:
    """The number of APIs the server at host:port lists in its ApiVersions v0 answer; raises
    OSError (a reason) when it cannot be asked or does not answer in time."""
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise OSError(f"cannot connect: {exc.strerror or exc}") from None
    with sock:
        try:
            sock.sendall(REQUEST)
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            (size,) = struct.unpack(">i", _read_exactly(sock, 4))
            if not 6 <= size <= MAX_ANSWER:
                raise OSError(f"not a Kafka answer (a {size}-byte frame)")
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            answer = _read_exactly(sock, size)
        except socket.timeout:
            raise OSError(f"no ApiVersions answer within {timeout_s * 1000:.0f} ms") from None
    correlation_id, error_code = struct.unpack_from(">ih", answer)
    if correlation_id != CORRELATION_ID:
        raise OSError(f"not a Kafka answer (correlation id {correlation_id})")
    if error_code != 0:
        raise OSError(f"ApiVersions answered error code {error_code}")
    if len(answer) < 10:
        raise OSError("a truncated ApiVersions answer")
    (count,) = struct.unpack_from(">i", answer, 6)
    return count


def health(servers: str, timeout_ms: int) -> int:
    """Ask each address in turn; healthy (0) if one answers, else 1."""
    failures = []
    for server in servers.split(","):
        try:
            host, port = address(server)
            count = ask_api_versions(host, port, timeout_ms / 1000)
        except (OSError, ValueError) as exc:
            failures.append(f"{server.strip()}: {exc}")
            continue
        print(f"{host}:{port} answered ApiVersions ({count} APIs)")
        return 0
    for failure in failures:
        print(f"kbroker: unhealthy: {failure}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["health"]:
        light = parse_light(argv[1:], os.environ)
        if light is not None:
            return health(*light)
    from cli.main import main as full_main
    return full_main(argv)
