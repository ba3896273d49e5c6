"""``python -m storage dump [--print-records] FILE...``: see storage/dump.py."""

from __future__ import annotations

import argparse
import sys

from .dump import dump


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m storage", description="Inspect kbroker/Kafka segment files.")
    commands = parser.add_subparsers(dest="command", required=True)
    dump_cmd = commands.add_parser("dump", help="print a .log, .index or .timeindex file")
    dump_cmd.add_argument("files", nargs="+")
    dump_cmd.add_argument("--print-records", action="store_true", help="also print every record of each batch")
    args = parser.parse_args(argv)
    return max(dump(path, sys.stdout, args.print_records) for path in args.files)


if __name__ == "__main__":
    sys.exit(main())
