"""What the command modules share: the bootstrap default, the usage error, error names."""

from __future__ import annotations

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
