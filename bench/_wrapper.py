"""The command line of the broker wrappers (bench/_diag_broker.py, bench/_profiled_broker.py):
each installs its recorders, then runs the module the rest of its command line names. Nothing
here runs at import: a wrapper's setup stays its own.

    python bench/_WRAPPER.py [PYTHON] -m MODULE ARGS   (PYTHON: ignored, a launcher's prefix)
"""

import os
import runpy
import sys


def checkout_first() -> None:
    """The working directory first on sys.path, as ``python -m`` has it (here the script's
    directory, bench/, is there): a launcher starts a wrapper in the checkout to run
    (controller/launcher.py's cwd=repo), whose code must come from there, not from wherever
    the package is installed (another checkout's editable install, for a worktree sharing that
    checkout's .venv). Called by each wrapper before it imports anything of the project."""
    if not sys.path or sys.path[0] != os.getcwd():
        sys.path.insert(0, os.getcwd())


def run_module_from_argv() -> None:
    """Run ``-m MODULE ARGS`` from sys.argv as ``python -m MODULE ARGS`` would (after an
    optional first word, the launcher's interpreter)."""
    args = sys.argv[1:]
    if args and args[0] != "-m":
        args = args[1:]
    if len(args) < 2 or args[0] != "-m":
        raise SystemExit(f"usage: {sys.argv[0]} [PYTHON] -m MODULE ARGS")
    module = args[1]
    sys.argv = [sys.argv[0], *args[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
