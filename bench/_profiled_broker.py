"""Runs ``python -m ...`` (the rest of the command line) with cProfile toggled by signals:
SIGUSR1 starts it, SIGUSR2 stops it and writes the stats to $KBROKER_PROFILE_OUT. With
KBROKER_PROFILE_MODE=opcodes, a trace function counts the bytecodes each Python function runs
instead (a JSON list of [file, line, function, count]). For
bench/replication_instructions.py --profile (which functions a produce's round trip calls:
callgrind sees only the interpreter, Debian's python3.11 is stripped).

    python bench/_profiled_broker.py [PYTHON] -m broker serve ...   (PYTHON: ignored, a launcher's prefix)
"""

import collections
import cProfile
import json
import os
import signal
import sys

from _wrapper import checkout_first, run_module_from_argv  # (bench/, the script's directory, is on sys.path)

checkout_first()  # (before anything of the project is imported)

profile = cProfile.Profile()
opcodes: collections.Counter = collections.Counter()  # (file, first line, name) -> bytecodes run


def _trace(frame, event, arg):
    # per bytecode instruction (f_trace_opcodes) of every Python frame: its own count, callees
    # apart — a deterministic proxy for the interpreter's instructions, function by function
    frame.f_trace_opcodes = True
    if event == "opcode":
        code = frame.f_code
        opcodes[code.co_filename, code.co_firstlineno, code.co_name] += 1
    return _trace


def _start(*_) -> None:
    if os.environ.get("KBROKER_PROFILE_MODE") == "opcodes":
        sys.settrace(_trace)
    else:
        profile.enable()


def _stop(*_) -> None:
    if os.environ.get("KBROKER_PROFILE_MODE") == "opcodes":
        sys.settrace(None)
        with open(os.environ["KBROKER_PROFILE_OUT"], "w") as f:
            json.dump([[*key, n] for key, n in opcodes.most_common()], f)
        return
    profile.disable()
    profile.dump_stats(os.environ["KBROKER_PROFILE_OUT"])


signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
run_module_from_argv()
