"""protocol/ is sans-I/O: every module of it except the client package imports in a process
where ``asyncio`` and ``socket`` cannot be imported.

The modules are discovered by walking the package on disk (without importing anything), so
a new module is covered as soon as it exists.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import protocol

ROOT = Path(protocol.__file__).resolve().parents[1]
IO_SIDE = "protocol.client"  # the one asyncio client, with the asyncio-backed clock

# The third-party libraries protocol/ uses are imported before the block: what they pull in is
# theirs (crc32c reads its version through importlib.metadata, which imports email and socket).
THIRD_PARTY = ("construct", "cramjam", "crc32c")

_IMPORT_ALL = """
import importlib, json, sys
for dep in json.loads(sys.argv[2]):
    importlib.import_module(dep)
sys.modules["asyncio"] = None  # "import asyncio" now raises ImportError
sys.modules["socket"] = None
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ImportError as exc:
        sys.exit(f"{name}: {exc}")
print("imported", len(json.loads(sys.argv[1])))
"""


def _modules(path: list[str], prefix: str) -> list[str]:
    names = []
    for info in pkgutil.iter_modules(path, prefix):
        if info.name == IO_SIDE:
            continue
        names.append(info.name)
        if info.ispkg:
            names += _modules([os.path.join(path[0], info.name.rpartition(".")[2])], info.name + ".")
    return names


def core_modules() -> list[str]:
    return ["protocol"] + _modules(list(protocol.__path__), "protocol.")


def import_blocked(names: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _IMPORT_ALL, json.dumps(names), json.dumps(THIRD_PARTY)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_discovery_finds_the_core_modules_and_skips_the_client() -> None:
    names = core_modules()
    for expected in ("protocol.errors", "protocol.clock", "protocol.fast_codecs", "protocol.records",
                     "protocol.messages", "protocol.messages.produce"):
        assert expected in names
    assert not [n for n in names if n == IO_SIDE or n.startswith(IO_SIDE + ".")]


def test_core_modules_import_without_asyncio_or_socket() -> None:
    names = core_modules()
    result = import_blocked(names)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"imported {len(names)}"


def test_the_blocking_works() -> None:
    """The client package needs asyncio: importing it in the same blocked process fails."""
    result = import_blocked([IO_SIDE])
    assert result.returncode != 0 and "asyncio" in result.stderr
