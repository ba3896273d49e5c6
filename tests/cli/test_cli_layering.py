"""The client commands of ``kbroker`` are Kafka clients: they, and the client package under
them, never reach broker/, storage/ or controller/. Checked twice: statically, by walking the
imports of their source (module level and inside functions alike), and at run time, by running
the commands in a fresh interpreter and looking at ``sys.modules`` afterwards.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVER_SIDE = ("broker", "storage", "controller")

# The command-line modules a client command loads (besides its own command module, which
# client_command_modules() finds in the parser).
CLI_CLIENT_MODULES = ["cli", "cli.__main__", "cli.main", "cli.common", "cli.render",
                      "cli.topics", "cli.produce", "cli.consume", "cli.metadata", "cli.elect_leaders"]
# Local commands that may use the server side, named one by one: serve runs a broker, controller
# a controller, and cluster up/down/status start, stop and look at such processes (through
# controller/launcher.py), as does loadgen demo. dump-log reads segment files through storage.dump;
# certs uses only cryptography.
SERVER_COMMANDS = {("serve",), ("controller",), ("cluster", "up"), ("cluster", "down"), ("cluster", "status"),
                   ("loadgen", "demo"),  # the load-testing demo starts a cluster of its own
                   ("storage", "format"), ("storage", "random-uuid")}  # a node's directories, from its configuration


@functools.cache
def module_file(name: str) -> Path | None:
    """The source file of the repository's module ``name``, or None if it is not one of ours."""
    path = REPO.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def client_package_modules() -> list[str]:
    """Every module of the client package, whether it is one file (protocol/client.py) or a
    package (protocol/client/...)."""
    paths: list[Path] = []
    for path in sorted((REPO / "protocol").glob("client*")):
        if path.is_dir():
            paths += sorted(path.rglob("*.py"))
        elif path.suffix == ".py":
            paths.append(path)
    return [module_name(p) for p in paths]


@functools.cache  # (every server-side command reaches most of the repository: each file is parsed once)
def imports_of(name: str) -> frozenset[str]:
    """The repository modules that importing ``name`` can load: every import statement anywhere
    in its source (functions included), ``importlib.import_module("literal")`` calls, and the
    packages an import of ``a.b.c`` runs on the way (``a``, ``a.b``)."""
    path = module_file(name)
    assert path is not None, name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # ``from X import Y`` loads X, and X.Y too when Y is a submodule.
            targets += [stem] + [f"{stem}.{alias.name}" for alias in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            targets.append(node.args[0].value)
    found = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if module_file(prefix) is not None:
                found.add(prefix)
    return frozenset(found)


def reachable(start: list[str]) -> dict[str, list[str]]:
    """Every repository module reachable from ``start`` through imports, with the chain that reaches it."""
    chains = {name: [name] for name in start}
    queue = list(start)
    while queue:
        name = queue.pop()
        for imported in sorted(imports_of(name)):
            if imported not in chains:
                chains[imported] = chains[name] + [imported]
                queue.append(imported)
    return chains


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command words, the parser's defaults) of every runnable command of ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, path + (name,))
    if "run" in parser._defaults:
        yield path, parser._defaults


def command_table() -> list[tuple[tuple[str, ...], str, bool]]:
    """(words, module, is a client command) for every command ``kbroker`` has."""
    from cli.main import build_parser
    return [(words, defaults["run"].partition(":")[0], defaults["client"]) for words, defaults in commands(build_parser())]


def violations(chains: dict[str, list[str]], forbidden: tuple[str, ...]) -> list[str]:
    return [" -> ".join(chain) for name, chain in sorted(chains.items()) if name.partition(".")[0] in forbidden]


def test_client_commands_and_the_client_package_import_nothing_of_the_server_side():
    client = client_package_modules()
    assert client, "found no client package under protocol/ (protocol/client.py or protocol/client/)"
    table = command_table()
    client_commands = {module for _words, module, is_client in table if is_client}
    assert {"cli.topics", "cli.produce", "cli.consume", "cli.metadata", "cli.elect_leaders"} <= client_commands, table
    start = CLI_CLIENT_MODULES + sorted(client_commands) + client
    for name in start:
        assert module_file(name) is not None, f"{name} is not a module of the repository"

    chains = reachable(start)
    assert {"protocol.errors", "cli.render"} <= chains.keys()  # the walk follows imports at all
    assert violations(chains, SERVER_SIDE) == []


def is_loadgen(words: tuple[str, ...]) -> bool:
    return words[0] in ("record", "loadgen") and words not in SERVER_COMMANDS


def test_the_server_side_commands_are_the_listed_ones_and_local():
    server_side = {words for words, module, is_client in command_table()
                   if violations(reachable([module]), ("broker", "controller"))}
    assert server_side == SERVER_COMMANDS
    assert all(not is_client for words, _module, is_client in command_table() if words in SERVER_COMMANDS)


def test_local_commands_other_than_serve_do_not_reach_broker_or_controller():
    local = [(words, module) for words, module, is_client in command_table()
             if not is_client and words not in SERVER_COMMANDS and not is_loadgen(words)]
    assert [words for words, _ in local] == [("dump-log",), ("certs",)]  # certs: cryptography only
    chains = reachable([module for _, module in local])
    assert "storage.dump" in chains
    assert violations(chains, ("broker", "controller")) == []


def test_the_load_testing_commands_are_clients_too():
    """``kbroker record`` and ``kbroker loadgen ...`` (but the demo, which starts a cluster) reach
    nothing of the server side: a recording or a replay runs where only the client is installed."""
    loadgen = sorted({module for words, module, _ in command_table() if is_loadgen(words)})
    assert "cli.loadgen" in loadgen
    chains = reachable(loadgen + ["loadgen.tap", "loadgen.recording"])
    assert "protocol.fast_codecs" in chains
    assert violations(chains, SERVER_SIDE) == []


RUN_CLIENT_COMMANDS = """
import json, sys
from cli.main import main

bootstrap, topic, report = sys.argv[1:]
codes = [main([*argv, "-b", bootstrap]) for argv in (
    ["topics", "create", "-t", topic, "--partitions", "2"],
    ["produce", "-t", topic, "-p", "1"],
    ["consume", "-t", topic, "--from-beginning", "-e"],
    ["metadata", "-t", topic],
    ["topics", "list"],
    ["topics", "describe", "-t", topic],
    ["cluster", "elect-leaders", "-t", topic],
    ["topics", "delete", "-t", topic],
)]
server_side = sorted(m for m in sys.modules if m.partition(".")[0] in ("broker", "storage", "controller"))
with open(report, "w") as out:
    json.dump({"codes": codes, "server_side": server_side}, out)
"""


def test_running_the_client_commands_loads_nothing_of_the_server_side(bootstrap, topic_name, tmp_path):
    report = tmp_path / "report.json"
    result = subprocess.run([sys.executable, "-c", RUN_CLIENT_COMMANDS, bootstrap, topic_name, str(report)],
                            input=b"first\nsecond\n", capture_output=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    found = json.loads(report.read_text())
    assert found["codes"] == [0] * 8, result.stderr.decode(errors="replace")
    assert b"first\nsecond\n" in result.stdout and topic_name.encode() in result.stdout
    assert found["server_side"] == []
