"""Issue 12 §5: the soft RLIMIT_NOFILE is raised to the hard limit at start and logged;
running out of descriptors on accept never takes the listener down, nor does running out of
them while the controller commits. Real broker processes started under ``prlimit``."""

from __future__ import annotations

import socket
import struct

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import APIS
from tests.support import BrokerProcess, wait_until

from .frames import Raw, good_batch
from .resources_support import fd_count, read_frame, request_frame


def limited_broker(log_dir, nofile: str) -> BrokerProcess:
    """A broker process started with RLIMIT_NOFILE soft:hard (``prlimit``, util-linux)."""
    return BrokerProcess(log_dir, prefix=["prlimit", f"--nofile={nofile}", "--"])


def test_soft_open_files_limit_is_raised_to_the_hard_limit_and_logged(tmp_path):
    broker = limited_broker(tmp_path / "data", "1024:4096").start()
    try:
        limits = open(f"/proc/{broker.pid}/limits").read()
        line = next(row for row in limits.splitlines() if row.startswith("Max open files"))
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


def test_the_controller_out_of_descriptors_postpones_its_flush_and_the_topic_is_created_once_they_return(tmp_path):
    """A combined node at its open files limit when a CreateTopics commits: the metadata log
    cannot get the descriptors to fsync with. That is no failed fsync: the flush is retried
    (before, the controller stopped as on a failed fsync and took the whole process down),
    and once descriptors are back the topic is created and usable; the high watermark
    checkpoint task, failing meanwhile, recovers too."""
    limit = 200
    broker = limited_broker(tmp_path / "data", f"{limit}:{limit}").start()
    fillers: list[socket.socket] = []
    try:
        admin = Raw(broker.port, timeout=60)

        def create(name: str) -> list:
            body = APIS[ApiKey.CREATE_TOPICS].request.build(4, {"topics": [{
                "name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout_ms": 60000, "validate_only": False})
            admin.request(ApiKey.CREATE_TOPICS, 4, body)
            return lambda: [(t.name, t.error_code) for t in
                            APIS[ApiKey.CREATE_TOPICS].response.parse(4, admin.response(), 4).topics]
        # Every connection this needs (ours, the broker's to its controller) is made beforehand.
        assert create("warm-up")() == [("warm-up", ErrorCode.NONE)]
        for _ in range(limit + 50):
            fillers.append(socket.create_connection(("127.0.0.1", broker.port), timeout=5))
        wait_until(lambda: fd_count(broker.pid) >= limit, 15, what="the broker to run out of descriptors")
        # The high watermark checkpoint (every 5 s) cannot open its file meanwhile.
        wait_until(lambda: "background task highwatermark-checkpoint failed" in broker.log_text(), 15,
                   what="the checkpoint task to run out of descriptors")
        answer = create("squeezed")
        out = wait_until(lambda: any(m in broker.log_text() for m in ("flush postponed", "cannot go on")) and
                         broker.log_text(), 20, what="the metadata log flush to fail or wait")
        assert "cannot go on" not in out  # the controller giving up stops the whole process
        assert broker.proc.poll() is None
        for s in fillers:
            s.close()
        fillers.clear()
        assert answer() == [("squeezed", ErrorCode.NONE)]
        # The background task lived through it and works again.
        wait_until(lambda: "background task highwatermark-checkpoint succeeded after" in broker.log_text(), 15,
                   what="the checkpoint task to recover")
        producer = Raw(broker.port)
        assert producer.produce({("squeezed", 1): good_batch(2)}) == {("squeezed", 1): ErrorCode.NONE}
        producer.close()
        admin.close()
    finally:
        for s in fillers:
            s.close()
        broker.kill()
