"""The ``kbroker`` console script, run as a subprocess against the test broker (``bootstrap``,
in tests/conftest.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import free_port, port_open, wait_until

KBROKER = str(Path(sys.executable).with_name("kbroker"))


def kbroker(bootstrap: str, *args: str, input: bytes | None = None, expect: int = 0
            ) -> subprocess.CompletedProcess:
    """Run ``kbroker ARGS`` with $KBROKER_BOOTSTRAP_SERVER set; check its exit status."""
    env = dict(os.environ, KBROKER_BOOTSTRAP_SERVER=bootstrap, COLUMNS="200")
    result = subprocess.run([KBROKER, *args], input=input, capture_output=True, env=env, timeout=120)
    assert result.returncode == expect, (result.returncode, result.stderr.decode(errors="replace"))
    return result


def serve_env() -> dict[str, str]:
    """The environment minus KBROKER_* variables, which the broker reads as configuration."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KBROKER_")}


def test_produce_file_then_consume_from_beginning_round_trip(bootstrap, topic_name, tmp_path):
    kbroker(bootstrap, "topics", "create", "-t", topic_name)
    lines = [f"key{i % 50}:value {i}\twith ünïcode" for i in range(3000)] + ["no separator", ":empty key", "k:"]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n")
    started_ms = time.time() * 1000
    produced = kbroker(bootstrap, "produce", "-t", topic_name, "-f", str(source), "-K", ":",
                       "-H", "origin=cli", "-H", "n=1", "-z", "zstd", "--linger-ms", "10")
    assert re.search(rb"^3003 records in [\d.]+ s \([\d,]+ records/s\)$", produced.stderr, re.M), produced.stderr

    consumed = kbroker(bootstrap, "consume", "-t", topic_name, "--from-beginning", "-e", "-f", r"%k:%s\n")
    # A line without the separator has a null key, which %k prints as nothing.
    assert consumed.stdout.decode().split("\n") == [line if ":" in line else ":" + line for line in lines] + [""]

    tail = kbroker(bootstrap, "consume", "-t", topic_name, "--offset", "3000", "-n", "3",
                   "-f", r"%t/%p/%o|%K|%S|%h|%T%%\n")
    rows = [row.split("|") for row in tail.stdout.decode().splitlines()]
    assert [row[:4] for row in rows] == [[f"{topic_name}/0/3000", "-1", "12", "origin=cli,n=1"],
                                         [f"{topic_name}/0/3001", "0", "9", "origin=cli,n=1"],
                                         [f"{topic_name}/0/3002", "1", "0", "origin=cli,n=1"]]
    assert all(started_ms <= int(row[4].rstrip("%")) <= time.time() * 1000 for row in rows)


def test_produce_stdin_to_one_partition(bootstrap, topic_name):
    kbroker(bootstrap, "topics", "create", "-t", topic_name, "--partitions", "3")
    kbroker(bootstrap, "produce", "-t", topic_name, "-p", "2", "--acks", "1", input=b"a\nb\n\nc")
    assert kbroker(bootstrap, "consume", "-t", topic_name, "-p", "2", "--from-beginning", "-e").stdout == b"a\nb\n\nc\n"
    assert kbroker(bootstrap, "consume", "-t", topic_name, "-p", "0", "--from-beginning", "-e").stdout == b""
    assert kbroker(bootstrap, "consume", "-t", topic_name, "--from-beginning", "-n", "2").stdout == b"a\nb\n"
    idle = kbroker(bootstrap, "consume", "-t", topic_name, "--timeout-ms", "300")  # from the end: nothing comes
    assert idle.stdout == b"" and b"consumed 0 messages" in idle.stderr

    refused = kbroker(bootstrap, "produce", "-t", topic_name, "--idempotent", "--acks", "1", input=b"x\n", expect=1)
    assert refused.stderr.startswith(b"kbroker: ") and b"acks" in refused.stderr
    bad_format = kbroker(bootstrap, "consume", "-t", topic_name, "-f", "%x", expect=2)
    assert bad_format.stderr == b"kbroker: --format: unknown token '%x'\n"


def test_topics_create_describe_list_delete(bootstrap, topic_name):
    created = kbroker(bootstrap, "topics", "create", "-t", topic_name, "--partitions", "2",
                      "--config", "retention.ms=3600000")
    assert created.stdout == f"Created topic {topic_name}.\n".encode()
    again = kbroker(bootstrap, "topics", "create", "-t", topic_name, expect=1)
    assert again.stderr.startswith(f"kbroker: {topic_name}: ".encode())
    kbroker(bootstrap, "topics", "create", "-t", topic_name, "--if-not-exists")
    assert topic_name in kbroker(bootstrap, "topics", "list").stdout.decode().splitlines()

    described = kbroker(bootstrap, "topics", "describe", "-t", topic_name).stdout.decode()
    assert f"Topic: {topic_name}  partitions: 2  replication factor: 1" in described
    assert re.search(r"│ retention\.ms\s+│ 3600000\s+│ topic\s+│", described), described
    assert len(re.findall(rf"│ {topic_name}\s+│ [01]\s+│ \d+\s+│", described)) == 2, described

    assert kbroker(bootstrap, "topics", "delete", "-t", topic_name).stdout == f"Deleted topic {topic_name}.\n".encode()
    wait_until(lambda: topic_name not in kbroker(bootstrap, "topics", "list").stdout.decode().splitlines(),
               what="the deleted topic to leave the list")
    kbroker(bootstrap, "topics", "describe", "-t", topic_name, expect=1)


def test_metadata_shows_brokers_controller_and_partitions(bootstrap, topic_name):
    kbroker(bootstrap, "topics", "create", "-t", topic_name, "--partitions", "2")
    shown = kbroker(bootstrap, "metadata", "-t", topic_name).stdout.decode()
    controller = re.search(r"controller: (\d+)", shown).group(1)
    assert re.search(rf"│ {controller} \(controller\)\s+│ [\w.:]+\s+│ {bootstrap.rsplit(':', 1)[1]}\s+│", shown), shown
    assert len(re.findall(rf"│ {topic_name}\s+│ [01]\s+│ \d+\s+│", shown)) == 2, shown


def test_serve_runs_a_broker_until_sigterm(tmp_path):
    port = free_port()
    data = tmp_path / "data"
    server = subprocess.Popen([KBROKER, "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                               "--override", f"log.dirs={data}"], stderr=subprocess.PIPE, env=serve_env())
    try:
        wait_until(lambda: port_open(port) or server.poll() is not None, what="the broker to listen")
        bootstrap = f"127.0.0.1:{port}"
        kbroker(bootstrap, "topics", "create", "-t", "served")
        kbroker(bootstrap, "produce", "-t", "served", input=b"hello\nworld\n")
        assert kbroker(bootstrap, "consume", "-t", "served", "--from-beginning", "-e").stdout == b"hello\nworld\n"
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
    finally:
        server.kill()
        log = server.stderr.read().decode()
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO ", log, re.M), log

    segment = data / "served-0" / "00000000000000000000.log"
    dumped = kbroker("unused:9092", "dump-log", str(segment), "--print-records")
    assert b"hello" in dumped.stdout and b"world" in dumped.stdout


def test_serve_rejects_a_bad_configuration_in_one_line():
    result = subprocess.run([KBROKER, "serve", "--override", "num.partitions=many"], capture_output=True,
                            env=serve_env(), timeout=60)
    assert result.returncode == 2
    assert re.fullmatch(rb"kbroker: [^\n]*num\.partitions[^\n]*\n", result.stderr), result.stderr


def test_python_dash_m_cli_and_broker_are_the_kbroker_command():
    """``python -m cli`` and the ``python -m broker`` alias (which scripts and the launcher use to
    run ``serve``) are the same command as the console script."""
    expected = subprocess.run([KBROKER, "--help"], capture_output=True, timeout=60, env=serve_env())
    assert expected.returncode == 0 and b"dump-log" in expected.stdout, expected
    for module in ("cli", "broker"):
        result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, timeout=60,
                                env=serve_env())
        assert (result.returncode, result.stdout) == (0, expected.stdout), (module, result)
