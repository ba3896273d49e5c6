"""Issue 12 §5 (the parts that hold today): the soft RLIMIT_NOFILE is raised to the hard
limit at start and logged; running out of descriptors on accept never takes the listener
down. Real broker processes started under ``prlimit``."""

from __future__ import annotations

import socket
import struct

from protocol.api_keys import ApiKey
from tests.support import BrokerProcess, wait_until

from .resources_support import fd_count, read_frame, request_frame


def limited_broker(log_dir, nofile: str) -> BrokerProcess:
    """A broker process started with RLIMIT_NOFILE soft:hard (``prlimit``, util-linux)."""
    return BrokerProcess(log_dir, prefix=["prlimit", f"--nofile={nofile}", "--"])


def test_soft_open_files_limit_is_raised_to_the_hard_limit_and_logged(tmp_path):
    broker = limited_broker(tmp_path / "data", "1024:4096").start()
    try:
        limits = open(f"/proc/{broker.pid}/limits").read()
        line = next(l for l in limits.splitlines() if l.startswith("Max open files"))
        assert line.split()[3:5] == ["4096", "4096"]
        assert "from 1024 to the hard limit 4096" in broker.log_text()
    finally:
        broker.kill()


def test_emfile_on_accept_never_takes_the_listener_down(tmp_path):
    broker = limited_broker(tmp_path / "data", "256:256").start()
    try:
        socks = [socket.create_connection(("127.0.0.1", broker.port), timeout=5) for _ in range(400)]
        wait_until(lambda: fd_count(broker.pid) >= 250, 10, what="the broker to run out of descriptors")
        for s in socks:
            s.close()
        wait_until(lambda: fd_count(broker.pid) < 100, 15, what="descriptors given back")
        assert broker.proc.poll() is None
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        s.sendall(request_frame(ApiKey.API_VERSIONS, 0, b"", correlation_id=5))
        assert struct.unpack_from(">i", read_frame(s), 0)[0] == 5
        s.close()
    finally:
        broker.kill()
