"""What the command modules share: the bootstrap default, the usage error, error names."""

from __future__ import annotations

import sys

from protocol.client import Network
from protocol.client.security import SECURITY_PROPERTIES, ClientSecurity, SecurityConfigError, read_client_properties
from protocol.errors import ErrorCode

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "KBROKER_BOOTSTRAP_SERVER"


class UsageError(Exception):
    """A bad argument that argparse cannot catch; printed as ``kbroker: <message>``, exit 2."""


def error_name(code: int) -> str:
    """Kafka's name of an error code (``UNKNOWN_TOPIC_OR_PARTITION``), or the number if unknown."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def client_properties(args) -> dict[str, str]:
    """Kafka client properties from ``--command-config FILE`` then ``-X key=value`` (kcat's
    option; later ones win)."""
    props: dict[str, str] = {}
    path = getattr(args, "command_config", None)
    if path:
        try:
            props.update(read_client_properties(path))
        except OSError as exc:
            raise UsageError(f"--command-config {path}: {exc.strerror}") from None
    for key, value in getattr(args, "property", None) or []:
        props[key] = value
    return props


def client_network(args) -> Network:
    """The network a client command connects through: TLS and SASL as its properties say."""
    props = client_properties(args)
    ignored = sorted(k for k in props if k not in SECURITY_PROPERTIES and k not in ("bootstrap.servers", "client.id"))
    if ignored:
        print(f"kbroker: client properties not used here: {', '.join(ignored)}", file=sys.stderr)
    try:
        return Network(ClientSecurity.from_properties(props))
    except SecurityConfigError as exc:
        raise UsageError(str(exc)) from None
