"""docker-compose.host.yml with the Docker engine: the same cluster as docker-compose.yml with
every container on the host's network (the fast path: no docker-proxy, no NAT), each listener a
free port of 127.0.0.1. One compose project for the module, torn down (volumes too) at the end.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from tests.deploy.compose import BROKERS, HOST_FILE, ComposeCluster, compose_commands, docker, running, wait_for
from tests.deploy.test_compose import consume_all, create_topic, partition_state


@pytest.fixture(scope="module")
def cluster() -> Iterator[ComposeCluster]:
    with running(ComposeCluster(base=HOST_FILE)) as stack:
        yield stack


def test_host_compose_config_validates_without_published_ports():
    for command in compose_commands():
        stack = ComposeCluster(command=command, base=HOST_FILE)
        assert set(stack.services()) == {"controller", *BROKERS, "prometheus"}
        config = stack.compose("config").stdout
        assert "network_mode: host" in config and "ports:" not in config, config


def test_host_network_brokers_serve_an_rf3_topic_at_their_loopback_addresses(cluster):
    for service in cluster.services():
        mode = docker("inspect", "-f", "{{.HostConfig.NetworkMode}}", cluster.container(service)).stdout.strip()
        assert mode == "host", (service, mode)
    listing = subprocess.run(["kcat", "-b", cluster.external(1), "-L"], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    for i in (1, 2, 3):
        assert f"broker {i} at {cluster.external(i)}" in listing.stdout, listing.stdout

    topic = create_topic(cluster)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list[str] = []
    for i in range(3000):
        producer.produce(topic, f"h-{i}".encode(), on_delivery=lambda err, _m: err and errors.append(str(err)))
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:5]
    values = sorted(v for _p, _o, v in consume_all(cluster, topic, 3, expected=3000))
    assert values == sorted(f"h-{i}".encode() for i in range(3000))
    for p in range(3):
        assert partition_state(cluster, topic, p)[1] == [1, 2, 3]  # replication over the INTERNAL loopback ports


def test_prometheus_on_the_host_network_scrapes_every_kbroker_process(cluster):
    def targets_up():
        up = cluster.prometheus_query("up")
        return len(up) == 4 and all(r["value"][1] == "1" for r in up) and up
    up = wait_for(targets_up, 60, "Prometheus scraping the controller and three brokers")
    assert {r["metric"]["job"] for r in up} == {"kbroker", "kbroker-controller"}
