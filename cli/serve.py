"""``kbroker serve``: run this process's roles (process.roles: broker, controller, or both —
the default, a single-node cluster) until SIGTERM or SIGINT.

The server side of the command line: with ``cli.controller`` the only command modules that
import broker/ or controller/.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

import uvloop

from broker.config import ConfigError, KafkaConfig
from controller.kafka_raft_server import KafkaRaftServer
from controller.metadata_store import MetadataStoreError


def set_logger_levels(levels) -> None:
    """``--logger NAME=LEVEL``: a logger's own level (a log4j.logger line in Kafka's log4j.properties)."""
    for name, level in levels:
        if level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise SystemExit(f"kbroker: --logger {name}={level}: the level is DEBUG, INFO, WARNING or ERROR")
        logging.getLogger(name).setLevel(level.upper())


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    set_logger_levels(getattr(args, "logger", []))
    try:
        return uvloop.run(serve(KafkaConfig.load(args.config, args.override)))
    except (ConfigError, MetadataStoreError) as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2


async def serve(config: KafkaConfig) -> int:
    """Run until SIGTERM or SIGINT (exit 0) or a fatal controller failure (exit 1); a signal
    during startup (a broker waiting for its controller) stops it too."""
    server = KafkaRaftServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # kbroker's extension (Kafka has none): SIGHUP reloads the TLS listeners' key stores.
    loop.add_signal_handler(signal.SIGHUP, server.reload_key_stores)
    log = logging.getLogger("kbroker")
    try:
        starting = asyncio.ensure_future(server.startup())
        stopping = asyncio.ensure_future(stop.wait())
        failed = asyncio.ensure_future(server.stopped.wait())
        try:
            await asyncio.wait({starting, stopping, failed}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                starting.result()  # a startup error ends the process here
                await asyncio.wait({stopping, failed}, return_when=asyncio.FIRST_COMPLETED)
            else:
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
        finally:
            for task in (starting, stopping, failed):
                task.cancel()
        if server.failure is None:
            log.info("signal received, shutting down")
    finally:
        await server.shutdown()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
    return 0 if server.failure is None else 1
