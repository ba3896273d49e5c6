"""``kbroker controller -c controller.properties``: run a controller-only process (its
controller role, whatever else process.roles names) until SIGTERM or SIGINT.

With ``cli.serve``, the only command modules that import controller/ (or broker/).
"""

from __future__ import annotations

import argparse

from controller.server import run as run_controller


def run(args: argparse.Namespace) -> int:
    return run_controller(args.config, args.override, args.log_level, args.logger)
