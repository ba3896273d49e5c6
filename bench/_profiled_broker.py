"""Runs ``python -m ...`` (the rest of the command line) with cProfile toggled by signals:
SIGUSR1 starts it, SIGUSR2 stops it and writes the stats to $KBROKER_PROFILE_OUT. For
bench/replication_instructions.py --profile (which functions a produce's round trip calls:
callgrind sees only the interpreter, Debian's python3.11 is stripped).

    python bench/_profiled_broker.py [PYTHON] -m broker serve ...   (PYTHON: ignored, a launcher's prefix)
"""

import cProfile
import os
import runpy
import signal
import sys

profile = cProfile.Profile()
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())


def _stop(*_) -> None:
    profile.disable()
    profile.dump_stats(os.environ["KBROKER_PROFILE_OUT"])


signal.signal(signal.SIGUSR2, _stop)
args = sys.argv[1:]
if args and args[0] != "-m":
    args = args[1:]
if len(args) < 2 or args[0] != "-m":
    raise SystemExit("usage: _profiled_broker.py -m MODULE ARGS")
module = args[1]
sys.argv = [sys.argv[0], *args[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
