"""``kbroker health``: an ApiVersions round trip, exit 0 or 1 — the Docker image's HEALTHCHECK."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from cli.entry import own_listener
from controller.launcher import ControllerProcess

KBROKER = str(Path(sys.executable).with_name("kbroker"))


def health(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KBROKER_")}
    return subprocess.run([KBROKER, "health", *args], capture_output=True, text=True, timeout=60,
                          env={**base, **(env or {})})


def test_a_broker_answering_is_healthy(bootstrap):
    result = health("-b", bootstrap)
    assert result.returncode == 0, result.stderr
    assert f"{bootstrap} answered ApiVersions" in result.stdout


def test_a_controller_answering_is_healthy(tmp_path):
    controller = ControllerProcess(tmp_path / "controller").start()
    try:
        result = health("-b", controller.address)
        assert result.returncode == 0, result.stderr
    finally:
        controller.stop()


def test_nothing_listening_is_unhealthy():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        result = health("-b", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert f"unhealthy: 127.0.0.1:{port}: cannot connect" in result.stderr


def test_a_listener_that_never_answers_is_unhealthy_after_the_timeout():
    """Accepting the connection is not enough: the ApiVersions answer must come."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        started = time.monotonic()
        result = health("-b", f"127.0.0.1:{port}", "--timeout-ms", "500")
        assert result.returncode == 1, result.stdout
        assert time.monotonic() - started < 30
        assert "unhealthy" in result.stderr


def test_one_answering_address_of_several_is_enough(bootstrap):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
        assert health("-b", f"{dead},{bootstrap}").returncode == 0


def test_without_an_address_it_asks_the_first_listener_of_the_process_configuration(bootstrap):
    port = bootstrap.rpartition(":")[2]
    result = health(env={"KBROKER_LISTENERS": f"PLAINTEXT://0.0.0.0:{port},EXTERNAL://0.0.0.0:1"})
    assert result.returncode == 0, result.stderr
    assert f"127.0.0.1:{port} answered" in result.stdout
    # $KBROKER_BOOTSTRAP_SERVER, like -b, wins over the listeners.
    assert health(env={"KBROKER_LISTENERS": f"PLAINTEXT://0.0.0.0:{port}",
                       "KBROKER_BOOTSTRAP_SERVER": "127.0.0.1:1"}).returncode == 1


def test_own_listener():
    assert own_listener({"KBROKER_LISTENERS": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092"}) == "127.0.0.1:9092"
    assert own_listener({"KBROKER_LISTENERS": "CONTROLLER://:9093"}) == "127.0.0.1:9093"
    assert own_listener({"KBROKER_LISTENERS": "PLAINTEXT://[::]:9094"}) == "127.0.0.1:9094"
    assert own_listener({"KBROKER_LISTENERS": "PLAINTEXT://broker-1:9092"}) == "broker-1:9092"
    assert own_listener({}) == "127.0.0.1:9092"
    assert own_listener({"KBROKER_LISTENERS": "nonsense"}) == "127.0.0.1:9092"


LIGHT = """
import sys
from cli.entry import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("cli.main", "protocol.client", "uvloop", "asyncio", "argparse") if m in sys.modules)
print("heavy:", heavy)
raise SystemExit(code)
"""


def test_the_plain_check_runs_on_the_standard_library_alone(bootstrap):
    """The image's HEALTHCHECK runs every few seconds in every container: through cli.main it
    cost ~0.4 CPU-seconds a check (argparse, uvloop, the asyncio client)."""
    result = subprocess.run([sys.executable, "-c", LIGHT, "health", "-b", bootstrap, "--timeout-ms=4000"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"{bootstrap} answered ApiVersions (" in result.stdout
    assert "heavy: []" in result.stdout
    # client properties (TLS, SASL) take the full path
    result = subprocess.run([sys.executable, "-c", LIGHT, "health", "-b", bootstrap, "-X", "security.protocol=PLAINTEXT"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "'protocol.client'" in result.stdout


def test_both_paths_count_the_same_apis(bootstrap):
    light = health("-b", bootstrap).stdout
    full = health("-b", bootstrap, "-X", "client.id=x").stdout
    assert light == full and "APIs)" in light


def test_a_frame_that_is_not_kafka_is_unhealthy():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(100)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        import threading
        thread = threading.Thread(target=answer)
        thread.start()
        result = health("-b", f"127.0.0.1:{port}", "--timeout-ms", "4000")
        thread.join()
    assert result.returncode == 1
    assert "not a Kafka answer" in result.stderr


def test_parse_light():
    from cli.entry import parse_light
    env = {"KBROKER_LISTENERS": "PLAINTEXT://0.0.0.0:9"}
    assert parse_light([], env) == ("127.0.0.1:9", 5000)
    assert parse_light(["-b", "h:1", "--timeout-ms", "10"], env) == ("h:1", 10)
    assert parse_light(["--bootstrap-server=h:2"], {"KBROKER_BOOTSTRAP_SERVER": "e:3"}) == ("h:2", 5000)
    assert parse_light([], {"KBROKER_BOOTSTRAP_SERVER": "e:3"}) == ("e:3", 5000)
    for full in (["-X", "security.protocol=SSL"], ["--command-config", "f"], ["-h"], ["--timeout-ms", "x"], ["-b"]):
        assert parse_light(full, env) is None, full


# deploy/docker/healthcheck.sh: the image's HEALTHCHECK (kbroker-healthcheck), `kbroker health` in
# bash, run here on the host against the same answers.
HEALTHCHECK_SH = str(Path(__file__).resolve().parents[2] / "deploy" / "docker" / "healthcheck.sh")


def healthcheck_sh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KBROKER_")}
    return subprocess.run(["bash", HEALTHCHECK_SH, *args], capture_output=True, text=True, timeout=60,
                          env={**base, **(env or {})})


def answering(reply: bytes):
    """A listener that reads one request and writes ``reply``; (port, the request it got)."""
    import threading
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    got: list[bytes] = []

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            got.append(conn.recv(100))
            conn.sendall(reply)
        server.close()

    threading.Thread(target=answer, daemon=True).start()
    return server.getsockname()[1], got


def test_the_shell_healthcheck_finds_a_broker_and_a_controller_healthy(bootstrap, tmp_path):
    result = healthcheck_sh(bootstrap)
    assert result.returncode == 0, result.stderr
    assert f"{bootstrap} answered ApiVersions" in result.stdout
    port = bootstrap.rpartition(":")[2]
    result = healthcheck_sh(env={"KBROKER_LISTENERS": f"INTERNAL://0.0.0.0:{port},EXTERNAL://0.0.0.0:1"})
    assert result.returncode == 0, result.stderr
    assert f"127.0.0.1:{port} answered" in result.stdout
    controller = ControllerProcess(tmp_path / "controller").start()
    try:
        assert healthcheck_sh(controller.address).returncode == 0
    finally:
        controller.stop()


def test_the_shell_healthcheck_sends_what_kbroker_health_sends():
    from cli.entry import REQUEST
    port, got = answering(b"\x00\x00\x00\x06\x00\x00\x00\x01\x00\x00")
    assert healthcheck_sh(f"127.0.0.1:{port}").returncode == 0
    assert got == [REQUEST]


def test_the_shell_healthcheck_finds_what_is_not_an_answer_unhealthy():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        result = healthcheck_sh(f"127.0.0.1:{port}")
    assert result.returncode == 1 and f"unhealthy: 127.0.0.1:{port}: cannot connect" in result.stderr
    for reply, why in ((b"HTTP/1.1 400 Bad Request\r\n\r\n", "not a Kafka answer"),
                       (b"\x00\x00\x00\x06\x00\x00\x00\x02\x00\x00", "not a Kafka answer"),  # another correlation id
                       (b"\x7f\x00\x00\x06\x00\x00\x00\x01\x00\x00", "not a Kafka answer"),  # a 2 GB frame
                       (b"\x00\x00\x00\x06\x00\x00\x00\x01\x00\x23", "error code 35"),
                       (b"\x00\x00\x00\x06\x00", "connection closed")):
        port, _ = answering(reply)
        result = healthcheck_sh(f"127.0.0.1:{port}")
        assert result.returncode == 1, (reply, result.stdout)
        assert why in result.stderr, (reply, result.stderr)


def test_the_shell_healthcheck_gives_up_on_a_listener_that_never_answers():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        result = healthcheck_sh(f"127.0.0.1:{server.getsockname()[1]}")
    assert result.returncode == 1
    assert "no ApiVersions answer within 4000 ms" in result.stderr
