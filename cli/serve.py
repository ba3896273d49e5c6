"""``kbroker serve``: run a broker in this process until SIGTERM or SIGINT.

The server side of the command line, and the only command module that imports broker/.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

import uvloop

from broker.config import ConfigError, KafkaConfig
from broker.server import KafkaServer


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        uvloop.run(_serve(KafkaConfig.load(args.config, args.override)))
    except ConfigError as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    return 0


async def _serve(config: KafkaConfig) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut it down gracefully."""
    server = KafkaServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.startup()
        await stop.wait()
        logging.getLogger("kbroker").info("signal received, shutting down")
    finally:
        await server.shutdown()

