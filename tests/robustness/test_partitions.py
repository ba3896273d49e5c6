"""Issue 12 §5 acceptance: many partitions on one broker whose descriptors are few.

A real broker process started under ``prlimit --nofile=1024:1024`` (soft and hard: nothing to
raise to), so its segment budget is 768 descriptors (segment_budget.py) and an open active
segment counts two: far fewer than the partitions it hosts. Descriptors must be bounded by
that budget, not by the number of partitions: every partition is produced to round-robin
(each Produce request covers 200 partitions) and read back, then the broker is stopped
cleanly and restarted, then killed with SIGKILL and restarted; each start loads every log
under the same limit, and everything acknowledged is read back, once, at its offset. The
client retries NOT_LEADER_OR_FOLLOWER as a client does (a restarted node serves a partition
only once its controller told it again that it leads it, and may briefly take it back after
a kill -9); any other error fails the test.

CI runs 2,000 partitions (2 topics of 1,000: about five times what the budget keeps open);
the full 10,000 (10 topics of 1,000) is the ``slow`` version (``make soak``). Topics have
1,000 partitions each so that one CreateTopics completes within the client's request timeout
on a loaded machine.
"""

from __future__ import annotations

import os

import pytest

from tests.support import BrokerProcess, wait_until

from .partitions_support import PartitionsClient
from .resources_support import create_topics, fd_count

NOFILE = 1024
SEGMENT_BUDGET = NOFILE - 256  # open_files_budget() at this limit
PER_TOPIC = 1000


def data_fds(broker: BrokerProcess) -> int:
    """Descriptors the broker holds of its partitions' files (segment files and their mappings;
    not the controller's metadata log, which has a budget of its own, nor a
    leader-epoch-checkpoint a flush may be writing at that moment: storage/epoch_cache.py)."""
    root, n = str(broker.log_dir) + "/", 0
    for name in os.listdir(f"/proc/{broker.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{broker.pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith(root) and "/" in target[len(root):] and "__cluster_metadata" not in target \
                and "/leader-epoch-checkpoint" not in target:
            n += 1
    return n


def produce_rounds(broker: BrokerProcess, topics: list[str], rounds: range, acked: dict) -> None:
    for topic in topics:
        with PartitionsClient(broker.port, topic, PER_TOPIC) as client:
            for r in rounds:
                assert client.produce_round(r, acked.setdefault(topic, {})) == PER_TOPIC
        # descriptors are bounded by the budget, not by the partitions produced to
        assert data_fds(broker) <= SEGMENT_BUDGET


def read_back(broker: BrokerProcess, topics: list[str], acked: dict) -> None:
    for topic in topics:
        with PartitionsClient(broker.port, topic, PER_TOPIC) as client:
            got = client.read_all()
        assert data_fds(broker) <= SEGMENT_BUDGET
        for partition in range(PER_TOPIC):
            assert got[partition] == acked[topic][partition], f"{topic}-{partition}"


def wait_served(broker: BrokerProcess, topics: list[str], timeout_s: float) -> None:
    """Until the (re)started broker serves every partition (it lists itself live before the
    controller's LeaderAndIsr for all of them has arrived)."""
    for topic in topics:
        with PartitionsClient(broker.port, topic, PER_TOPIC) as client:
            wait_until(lambda: not client.not_served(), timeout_s, interval_s=0.2, what=f"{topic} served")


def broker_lines(broker: BrokerProcess, n: int = 60) -> str:
    """The broker's last lines, without its one-per-partition ones."""
    per_partition = ("kbroker.partition:", "kbroker.fetcher:", "created log ", "recovered many")
    return "\n".join([line for line in broker.log_text().splitlines()
                      if not any(p in line for p in per_partition)][-n:])


def loads(broker: BrokerProcess) -> list[tuple[int, str]]:
    """(logs loaded, "clean" or "unclean") of every start so far, from the log manager's lines."""
    out = []
    for line in broker.log_text().splitlines():
        if "kbroker.storage.manager: loaded " in line:
            words = line.split("kbroker.storage.manager: loaded ")[1].split()
            out.append((int(words[0]), words[-2].lstrip("(")))
    return out


def many_partitions_survive_restarts(tmp_path, n_topics: int, rounds: int, start_timeout_s: float) -> None:
    broker = BrokerProcess(tmp_path / "data", prefix=["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--"]).start()
    topics = [f"many{i}" for i in range(n_topics)]
    total = n_topics * PER_TOPIC
    acked: dict = {}
    try:
        for topic in topics:
            create_topics(broker.bootstrap, [(topic, PER_TOPIC)])
        assert fd_count(broker.pid) < NOFILE
        produce_rounds(broker, topics, range(rounds), acked)
        read_back(broker, topics, acked)

        status = broker.stop(timeout_s=start_timeout_s)
        assert status == 0, f"exit status {status}:\n{broker_lines(broker)}"
        broker.start(timeout_s=start_timeout_s)
        wait_served(broker, topics, start_timeout_s)
        assert loads(broker)[-1] == (total, "clean")
        assert data_fds(broker) <= SEGMENT_BUDGET
        read_back(broker, topics, acked)
        produce_rounds(broker, topics, range(rounds, rounds + 1), acked)

        broker.kill()  # SIGKILL: an unclean shutdown, every log recovered
        broker.start(timeout_s=start_timeout_s)
        wait_served(broker, topics, start_timeout_s)
        assert loads(broker) == [(0, "unclean"), (total, "clean"), (total, "unclean")]
        read_back(broker, topics, acked)
        produce_rounds(broker, topics, range(rounds + 1, rounds + 2), acked)
        read_back(broker, topics, acked)
        assert "Too many open files" not in broker.log_text()
    finally:
        broker.kill()


@pytest.mark.timeout(900)
def test_two_thousand_partitions_under_a_1024_descriptor_limit(tmp_path):
    many_partitions_survive_restarts(tmp_path, n_topics=2, rounds=2, start_timeout_s=120)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_ten_thousand_partitions_under_a_1024_descriptor_limit(tmp_path):
    many_partitions_survive_restarts(tmp_path, n_topics=10, rounds=2, start_timeout_s=600)
