"""``kbroker topics trim`` (DeleteRecords) and ``kbroker cluster log-dirs`` (DescribeLogDirs),
run as subprocesses against the test broker."""

from __future__ import annotations

import re
import time

from tests.cli.test_cli import kbroker


def earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    out = kbroker(bootstrap, "consume", "-t", topic, "-p", str(partition), "--from-beginning", "-n", "1",
                  "-f", r"%o\n").stdout
    return int(out.decode().strip() or -1)


def test_topics_trim_before_an_offset_and_a_time(bootstrap, topic_name):
    kbroker(bootstrap, "topics", "create", "-t", topic_name, "--partitions", "2")
    kbroker(bootstrap, "produce", "-t", topic_name, "-p", "0", input=b"".join(b"a%d\n" % i for i in range(20)))
    kbroker(bootstrap, "produce", "-t", topic_name, "-p", "1", input=b"".join(b"b%d\n" % i for i in range(20)))
    out = kbroker(bootstrap, "topics", "trim", "-t", topic_name, "-p", "0", "--before", "12").stdout.decode()
    assert f"partition: {topic_name}-0\tlow_watermark: 12" in out
    assert earliest(bootstrap, topic_name, 0) == 12 and earliest(bootstrap, topic_name, 1) == 0
    # beyond the high watermark: OFFSET_OUT_OF_RANGE, nothing changes
    bad = kbroker(bootstrap, "topics", "trim", "-t", topic_name, "-p", "0", "--before", "21", expect=1)
    assert b"OFFSET_OUT_OF_RANGE" in bad.stderr or b"out of range" in bad.stderr.lower(), bad.stderr
    assert earliest(bootstrap, topic_name, 0) == 12
    # --before-time: records older than now go, on every partition
    time.sleep(0.01)
    now_ms = int(time.time() * 1000)
    kbroker(bootstrap, "produce", "-t", topic_name, "-p", "1", input=b"late\n")
    out = kbroker(bootstrap, "topics", "trim", "-t", topic_name, "--before-time", str(now_ms)).stdout.decode()
    assert f"{topic_name}-0\tlow_watermark: 20" in out and f"{topic_name}-1\tlow_watermark: 20" in out, out
    assert earliest(bootstrap, topic_name, 1) == 20


def test_cluster_log_dirs_lists_each_partition_with_its_size(bootstrap, topic_name):
    kbroker(bootstrap, "topics", "create", "-t", topic_name, "--partitions", "2")
    kbroker(bootstrap, "produce", "-t", topic_name, "-p", "1", input=b"x" * 100 + b"\n")
    out = kbroker(bootstrap, "cluster", "log-dirs", "-t", topic_name).stdout.decode()
    sizes = dict(re.findall(rf"({re.escape(topic_name)}-\d)\s*│\s*(\d+)", out))
    assert sizes[f"{topic_name}-0"] == "0" and int(sizes[f"{topic_name}-1"]) > 100, out
