"""docker-compose.yml + docker-compose.scale.yml: three brokers with a topic, then broker-4
started (`up -d broker-4`): it registers, Prometheus scrapes it, and `kbroker cluster balance
--execute` from the host (or the controller's node_add autobalancer, whichever comes first)
gives it its share: replica counts within one, every record written before still there."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.cli.test_cli import KBROKER
from tests.deploy.compose import SCALE_FILE, ComposeCluster, wait_for
from tests.deploy.test_compose import consume_all, create_topic


def replica_counts(cluster: ComposeCluster, topic: str) -> Counter:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    return Counter(b for p in parts for b in p.replicas)


def test_broker_4_joins_and_gets_its_share():
    cluster = ComposeCluster(files=(SCALE_FILE,))
    try:
        cluster.compose("up", "-d", "--scale", "broker-4=0", timeout=180)
        cluster.wait_healthy(["controller", "broker-1", "broker-2", "broker-3"], timeout_s=120)
        topic = create_topic(cluster, partitions=8)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(800):
            producer.produce(topic, value=str(i).encode(), partition=i % 8)
        assert producer.flush(60) == 0
        assert replica_counts(cluster, topic) == {1: 8, 2: 8, 3: 8}

        cluster.compose("up", "-d", "broker-4", timeout=120)
        cluster.wait_healthy(["broker-4"], timeout_s=90)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_for(lambda: 4 in admin.list_topics(timeout=10).brokers, 60, "broker 4 in the metadata")
        env = dict(os.environ, COLUMNS="200")
        out = subprocess.run([KBROKER, "cluster", "balance", "-b", cluster.bootstrap, "--execute", "--timeout", "60",
                              "-t", topic], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, (out.stdout, out.stderr)

        def even() -> bool:
            counts = replica_counts(cluster, topic)
            return set(counts) == {1, 2, 3, 4} and max(counts.values()) - min(counts.values()) <= 1
        wait_for(even, 60, "replica counts within one over four brokers")
        values = sorted(int(v) for _p, _o, v in consume_all(cluster, topic, 8, expected=800))
        assert values == list(range(800))
        # Prometheus (deploy/compose/prometheus-scale.yml) scrapes broker-4 too
        wait_for(lambda: any(r["metric"].get("instance") == "broker-4:9404" and r["value"][1] == "1"
                             for r in cluster.prometheus_query('up{job="kbroker"}')), 60, "broker-4 scraped")
        print(json.dumps(dict(replica_counts(cluster, topic))))
    finally:
        cluster.down()
