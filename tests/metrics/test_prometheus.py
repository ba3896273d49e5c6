"""A real Prometheus (Debian's package, installed by ``make test-deps``) scrapes a controller
and three brokers (LocalCluster processes) every half second; the test asks Prometheus'
HTTP API what it saw: messages-in rate > 0 after producing with kcat, one under-replicated
partition while a follower is SIGSTOPped (replica.lag.time.max.ms=1500) and none once it is
SIGCONTed; and promtool accepts every endpoint's page."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request

from controller.launcher import LocalCluster, free_port, port_open
from protocol.client import KafkaClient
from tests.support import wait_until

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
TOPIC = "scraped"


def scrape_config(targets: list[str], interval: str = "500ms") -> str:
    return (f"global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n"
            "scrape_configs:\n  - job_name: kbroker\n    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n")


class Prometheus:
    def __init__(self, directory, targets: list[str]) -> None:
        self.directory = directory
        self.port = free_port()
        config = directory / "prometheus.yml"
        config.write_text(scrape_config(targets))
        self.output = open(directory / "prometheus.out", "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={directory / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
            stdout=self.output, stderr=subprocess.STDOUT)
        wait_until(lambda: self.proc.poll() is not None or (port_open(self.port) and self._ready()), 60,
                   what="prometheus to be ready")
        assert self.proc.poll() is None, (directory / "prometheus.out").read_text()[-3000:]

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.output.close()


def produce(bootstrap: str, n: int, start: int = 0) -> None:
    lines = "".join(f"m-{i}\n" for i in range(start, start + n)).encode()
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", TOPIC, "-p", "0", "-X", "acks=1"], input=lines, check=True,
                   timeout=60)


async def create_topic_and_find_leader(bootstrap: str) -> tuple[int, list[int]]:
    async with KafkaClient(bootstrap) as client:
        await client.create_topics([(TOPIC, 1, 3, None)])
        md = await client.refresh_metadata([TOPIC])
        p = md.topics[TOPIC].partitions[0]
        return p.leader, list(p.replicas)


def test_prometheus_scrapes_a_three_broker_cluster(tmp_path):
    assert PROMETHEUS and PROMTOOL, "Debian's prometheus package is missing: make test-deps installs it"
    cluster = LocalCluster(tmp_path / "cluster", brokers=3, metrics=True, broker_props={
        "replica.lag.time.max.ms": 1500, "replica.fetch.wait.max.ms": 100,
        # a stopped follower leaves the ISR through its leader's shrink, not through fencing
        "broker.session.timeout.ms": 120000})
    cluster.start()
    prometheus = None
    stopped = None
    try:
        for target in cluster.metrics_targets:
            with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as resp:
                page = resp.read()
            check = subprocess.run([PROMTOOL, "check", "metrics"], input=page, capture_output=True)
            assert check.returncode == 0, (target, check.stdout + check.stderr)
        (tmp_path / "prom").mkdir()
        prometheus = Prometheus(tmp_path / "prom", cluster.metrics_targets)
        wait_until(lambda: prometheus.value('count(up{job="kbroker"} == 1)') == 4, 30, 0.2, what="4 targets up")

        leader, replicas = asyncio.run(create_topic_and_find_leader(cluster.bootstrap))
        follower = next(r for r in replicas if r != leader)
        produced = [0]

        def producing_and_rate_seen() -> bool:
            # The counter needs two scrapes that differ: keep producing until Prometheus sees a rate.
            produce(cluster.bootstrap, 20, produced[0])
            produced[0] += 20
            rate = prometheus.value(f'sum(rate(kafka_server_brokertopicmetrics_messagesin_total{{topic="{TOPIC}"}}'
                                    '[30s]))')
            return (rate or 0) > 0

        wait_until(producing_and_rate_seen, 30, 0.3, what="rate(messages in) > 0")
        total = f'sum(kafka_server_brokertopicmetrics_messagesin_total{{topic="{TOPIC}"}})'
        wait_until(lambda: prometheus.value(total) == produced[0], 10, 0.2, what="every message counted")
        under = "sum(kafka_server_replicamanager_underreplicatedpartitions)"
        wait_until(lambda: prometheus.value(under) == 0, 30, 0.2, what="no under-replicated partition")

        stopped = cluster.brokers[follower]
        os.kill(stopped.pid, signal.SIGSTOP)
        produce(cluster.bootstrap, 10, produced[0])  # the stopped follower falls behind
        wait_until(lambda: prometheus.value(under) == 1, 30, 0.2, what="one under-replicated partition")
        assert prometheus.value(f'kafka_cluster_partition_underreplicated{{topic="{TOPIC}"}} == 1') == 1
        assert (prometheus.value("sum(kafka_server_replicamanager_isrshrinks_total)") or 0) >= 1
        os.kill(stopped.pid, signal.SIGCONT)
        stopped = None
        wait_until(lambda: prometheus.value(under) == 0, 30, 0.2, what="back to no under-replicated partition")
        assert (prometheus.value("sum(kafka_server_replicamanager_isrexpands_total)") or 0) >= 1
        # Every query of the Grafana dashboard is one Prometheus evaluates.
        from tests.metrics.test_dashboard import dashboard_queries
        for title, expr in dashboard_queries():
            prometheus.query(expr.replace("$__rate_interval", "5s"))
    finally:
        if stopped is not None:
            os.kill(stopped.pid, signal.SIGCONT)
        if prometheus is not None:
            prometheus.stop()
        cluster.kill()
