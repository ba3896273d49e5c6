"""``kbroker dump-log``: print a broker's segment files (.log, .index, .timeindex), like
kafka-dump-log.

A local tool, not a client: it reads the files directly through ``storage.dump``. It is the
only command of the client side that uses storage/; the protocol client commands never do.
"""

from __future__ import annotations

import argparse
import sys

from storage.dump import dump


def run(args: argparse.Namespace) -> int:
    return dump(args.file, out=sys.stdout, print_records=args.print_records)
