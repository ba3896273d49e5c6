"""The Spark replay against a real three-broker cluster (controller/launcher.py's LocalCluster),
of traffic that real clients (confluent-kafka's idempotent producer, kcat) sent through the tap."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from loadgen import replay, report
from loadgen.recording import read_manifest
from protocol.client import KafkaClient
from tests.loadgen.conftest import Tap, cli_replay
from tests.support import wait_until

pytestmark = pytest.mark.timeout(600)
SOURCE = "recorded"
IDEMPOTENT, PLAIN = 1000, 300


def consume_count(kcat_path: str, bootstrap: str, topic: str) -> int:
    """Records in the topic, counted by consuming all of it (kcat: librdkafka)."""
    out = subprocess.run([kcat_path, "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%o\n"],
                         capture_output=True, timeout=120, check=True).stdout
    return len(out.splitlines())


async def _admin(bootstrap: str, fn):
    async with KafkaClient(bootstrap, client_id="test-admin") as client:
        return await fn(client)


@pytest.fixture(scope="module")
def recording(cluster, tmp_path_factory, kcat_path):
    """A recording through the tap: confluent-kafka's idempotent producer and kcat, acks=all."""
    from confluent_kafka import Producer

    asyncio.run(_admin(cluster.bootstrap, lambda c: c.create_topics([(SOURCE, 3, 3, None)])))
    out = tmp_path_factory.mktemp("rec") / "traffic"
    tap = Tap(cluster.brokers[1].bootstrap, out)
    try:
        producer = Producer({"bootstrap.servers": tap.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                             "client.id": "recorded-idempotent"})
        for i in range(IDEMPOTENT):
            producer.produce(SOURCE, key=b"k%d" % (i % 11), value=b"v%05d" % i)
            producer.poll(0)
        assert producer.flush(60) == 0
        subprocess.run([kcat_path, "-b", tap.bootstrap, "-P", "-t", SOURCE, "-X", "client.id=recorded-kcat"],
                       input=b"".join(b"line %d\n" % i for i in range(PLAIN)), timeout=60, check=True)
        del producer
    finally:
        tap.stop()
    assert consume_count(kcat_path, cluster.bootstrap, SOURCE) == IDEMPOTENT + PLAIN
    return out


def args_for(recording: Path, bootstrap: str, out: Path, *extra: str):
    return replay.parse_args(["--recording", str(recording), "--bootstrap", bootstrap, "--out", str(out),
                              "--no-progress", *extra])


def test_replay_x10_acks_all_rf3_puts_every_record_in_the_log(cluster, recording, kcat_path, tmp_path):
    """Through the command users run: kbroker loadgen replay --master local[2] (spark-submit)."""
    target = f"replayed-{uuid.uuid4().hex[:6]}"
    result = cli_replay("local[2]", recording, cluster.bootstrap, tmp_path / "out", "--scale", "10", "--speed", "max",
                        "--acks", "all", "--replication-factor", "3", "--topic-map", f"{SOURCE}={target}", "--window", "1")
    run = result["kbroker"]["run"]
    print({k: v for k, v in run.items() if k.endswith("_s")})
    written = {name: tmp_path / "out" / f"{name}.png" for name in ("throughput", "latency", "cdf")}
    written["html"] = tmp_path / "out" / "report.html"

    expected = 10 * (IDEMPOTENT + PLAIN)
    assert run["recorded_records"] == IDEMPOTENT + PLAIN and run["master"] == "local[2]"
    # 2 recorded connections x 10 and a consumer, all at once on local[2]'s two slots: two tasks
    assert (run["tasks"], run["slots"]) == (2, 2) and "WARNING" not in run["plan"], run["plan"]
    assert consume_count(kcat_path, cluster.bootstrap, target) == expected
    assert result["kbroker"]["errors"] == {} and result["kbroker"]["errorCount"] == 0
    totals = result["kbroker"]["totals"]
    assert totals["records"] == totals["records_acked"] == totals["consumed"] == expected
    # One task per (recorded connection with Produce frames x copy), plus the consumer.
    assert run["producer_tasks"] % 10 == 0 and run["consumer_tasks"] == 1
    replicas = asyncio.run(_admin(cluster.bootstrap, lambda c: c.refresh_metadata([target])))
    assert {len(p.replicas) for p in replicas.topics[target].partitions.values()} == {3}
    # The brokers all took a share: the per-broker breakdown names the three.
    assert set(result["kbroker"]["perBroker"]) == {"1", "2", "3"}
    assert sum(b["records"] for b in result["kbroker"]["perBroker"].values()) == expected
    assert result["kbroker"]["perApi"]["Produce"]["records"] == expected

    # OMB's fields, consistent with each other and with the log.
    for name in ("publishRate", "publishErrorRate", "consumeRate", "backlog", "publishLatency50pct", "publishLatency99pct",
                 "publishLatency999pct", "publishLatencyMax", "endToEndLatency99pct", "aggregatedPublishLatency50pct",
                 "aggregatedPublishLatency99pct", "aggregatedPublishLatency999pct", "aggregatedPublishLatencyMax",
                 "aggregatedEndToEndLatency99pct", "aggregatedPublishLatencyQuantiles", "aggregatedEndToEndLatencyQuantiles"):
        assert name in result, name
    # (A window's latencies are those of the responses that arrived in it.)
    busy = [i for i, top in enumerate(result["publishLatencyMax"]) if top > 0]
    assert busy
    p99s = [result["publishLatency99pct"][i] for i in busy]
    assert min(p99s) <= result["aggregatedPublishLatency99pct"] <= max(p99s)
    assert result["aggregatedPublishLatency50pct"] <= result["aggregatedPublishLatency99pct"] <= \
        result["aggregatedPublishLatencyMax"]
    assert round(sum(result["publishRate"]) * 1.0) == expected  # 1 s windows: rates sum to the count
    assert round(sum(result["consumeRate"])) == expected and result["backlog"][-1] == 0
    for name in ("throughput", "latency", "cdf"):
        assert written[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = written["html"].read_text()
    assert page.count("data:image/png;base64,") == 3 and "<script" not in page


def _largest_unread(port: int) -> int:
    """The most bytes waiting unread in one established socket of 127.0.0.1:``port``
    (/proc/net/tcp's rx_queue)."""
    largest = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                largest = max(largest, int(queues.split(":")[1], 16))
    return largest


def _stop_with_a_produce_request_unread(victim, thread: threading.Thread, timeout_s: float = 60.0,
                                        look_s: float = 0.5, run_s: float = 0.2) -> int:
    """SIGSTOP ``victim`` until a produce request waits unread in its socket (the victim is left
    stopped, or the replay ``thread`` has ended); returns the stops it took.

    A stop can come when the producer's connection has its whole window (--depth 5) in flight and
    already read: the broker reads every pipelined request at once (queued.max.requests 500), and
    acks=all keeps them waiting for the followers, so nothing more is sent to a stopped broker and
    its socket stays empty. Such a stop is undone (SIGCONT) after ``look_s`` and tried again
    ``run_s`` later: short stops, well under replica.lag.time.max.ms (2 s) and the controller's
    broker.session.timeout.ms (3 s), so the victim stays the leader and in the ISR meanwhile."""
    deadline = time.monotonic() + timeout_s
    stops = 0
    while True:
        os.kill(victim.pid, signal.SIGSTOP)
        stops += 1
        look_until = time.monotonic() + look_s
        while time.monotonic() < look_until:
            if _largest_unread(victim.port) >= 1024 or not thread.is_alive():
                return stops
            time.sleep(0.01)
        os.kill(victim.pid, signal.SIGCONT)
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s ({stops} stops) waiting for a produce request "
                               "waiting in the stopped leader's socket")
        time.sleep(run_s)


def test_leader_killed_mid_replay_errors_are_counted_by_code(spark, cluster, kcat_path, tmp_path):
    from loadgen.synth import synthesize

    target = f"killed-{uuid.uuid4().hex[:6]}"
    # 5 s at 6000 records/s from one producer, replayed at the recorded pace: long enough to kill
    # a leader while requests are in flight to it.
    workload = tmp_path / "w.yaml"
    workload.write_text("name: kill\ntopics: 1\npartitionsPerTopic: 3\nmessageSize: 100\nproducerRate: 6000\n"
                        "lingerMs: 2\n")
    synthesize(workload, tmp_path / "rec", duration_s=5, topic_prefix="kill")
    args = args_for(tmp_path / "rec", cluster.bootstrap, tmp_path / "out", "--speed", "1", "--acks", "all",
                    "--replication-factor", "3", "--topic-map", f"kill-0000={target}", "--window", "1",
                    "--idle-timeout", "5")
    done: dict = {}

    def run() -> None:
        try:
            done["raw"] = replay.run_replay(spark, args)
        except BaseException as exc:  # reported below
            done["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()

    def written() -> int:
        try:
            found = asyncio.run(_admin(cluster.bootstrap, lambda c: c.offsets_for_times(
                {(target, p): -1 for p in range(3)})))
        except Exception:
            return 0
        return sum(v[0] for v in found.values() if v)

    wait_until(lambda: written() > 3000 or not thread.is_alive(), 180, interval_s=0.1, what="the replay to write")
    assert thread.is_alive(), done
    meta = asyncio.run(_admin(cluster.bootstrap, lambda c: c.refresh_metadata([target])))
    leader = meta.topics[target].partitions[0].leader
    victim = cluster.brokers[leader]
    # The kill must find a request in flight to it (the test is about what a lost connection's
    # requests count as): fast answers leave the producer's connection idle most of the time, so
    # the leader is stopped first and killed once a produce request waits unread in its socket
    # (a follower's fetch request is a few hundred bytes; this replay's produce requests
    # alternate 1433 and 234 bytes). A stop that catches the producer's window full of requests
    # the broker has read is undone and tried again (_stop_with_a_produce_request_unread).
    try:
        stops = _stop_with_a_produce_request_unread(victim, thread)
        print("stops before the kill:", stops)
    finally:
        victim.kill()
    assert thread.is_alive(), done
    try:
        thread.join(300)
        assert not thread.is_alive()
        assert "error" not in done, done.get("error")
        raw = done["raw"]
        result = report.build_result(raw)
        errors = result["kbroker"]["errors"]
        print("errors by code after the kill:", errors, "acked", raw["totals"]["records_acked"], "of", raw["totals"]["records"])
        assert errors, "a leader died mid-replay and no error was counted"
        assert set(errors) <= {"NETWORK_EXCEPTION", "NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT",
                               "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "LEADER_NOT_AVAILABLE",
                               "OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_TOPIC_OR_PARTITION"}, errors
        assert result["kbroker"]["errorCount"] == sum(errors.values()) == raw["totals"]["errors"]
        assert sum(result["publishErrorRate"]) > 0
        assert str(leader) in result["kbroker"]["perBroker"] and result["kbroker"]["perBroker"][str(leader)]["errors"] > 0
        # Nothing acknowledged is missing (acks=all, RF=3, two replicas alive).
        in_log = consume_count(kcat_path, cluster.bootstrap, target)
        assert raw["totals"]["records_acked"] <= in_log <= raw["totals"]["records"]
    finally:
        victim.start()
        cluster.wait_live()


def test_recording_manifest_and_topics(recording):
    m = read_manifest(recording)
    assert SOURCE in m["topics"] and m["requests_per_api"]["Produce"] >= 2
    assert {"recorded-idempotent", "recorded-kcat"} <= {c["client_id"] for c in m["connections"].values()}


def test_the_replays_spark_session_bounds_the_barrier_wait(monkeypatch, tmp_path):
    """Spark's spark.barrier.sync.timeout defaults to 365 days: a task hung before the barrier
    (engine.run_many's prepare) would hold the replay forever. main() builds its session with a
    timeout of minutes (past it the barrier, hence the stage, fails). No JVM: the builder is a
    stand-in that records its settings and stops at getOrCreate."""
    import pyspark.sql

    settings: dict[str, str] = {}

    class Stop(Exception):
        pass

    class Builder:
        def appName(self, _name):
            return self

        def config(self, key, value):
            settings[key] = value
            return self

        def getOrCreate(self):
            raise Stop

    monkeypatch.setattr(pyspark.sql, "SparkSession", type("SparkSession", (), {"builder": Builder()}))
    with pytest.raises(Stop):
        replay.main(["--recording", str(tmp_path / "none"), "--bootstrap", "127.0.0.1:1", "--out", str(tmp_path / "o")])
    timeout = settings.get("spark.barrier.sync.timeout", "365d")
    assert timeout.endswith("s") and 0 < int(timeout[:-1]) <= 3600, settings
    assert settings["spark.task.maxFailures"] == "1"  # (a failed barrier fails the stage, not retried)
