"""docker-compose.yml + docker-compose.ha.yml: ZooKeeper and three controllers (one active, two
standbys elected through ZooKeeper). ``docker kill`` of the active controller: a standby takes
over, the brokers stay registered, an idempotent acks=all producer loses nothing acknowledged,
and admin requests (forwarded to the new active controller) work."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from tests.deploy.compose import HA_FILE, ComposeCluster, docker, running, wait_for
from tests.deploy.test_compose import BackgroundProducer, check_nothing_acked_lost, create_topic, partition_state

CONTROLLERS = {"controller": 100, "controller-2": 101, "controller-3": 102}


@pytest.fixture(scope="module")
def ha_cluster() -> Iterator[ComposeCluster]:
    if subprocess.run(["docker", "image", "inspect", "kbroker-zookeeper:latest"], capture_output=True).returncode:
        pytest.fail("image kbroker-zookeeper:latest not built: `make test` builds it with `make image`")
    with running(ComposeCluster(files=(HA_FILE,)), timeout_s=240) as stack:
        yield stack


def controller_id_seen_by(cluster: ComposeCluster, service: str) -> int | None:
    """The controller id in the Metadata a controller answers itself (from inside its container)."""
    result = docker("exec", cluster.container(service), "kbroker", "metadata", "-b", "127.0.0.1:9093",
                    check=False, timeout=30)
    found = re.search(r"controller: (-?\d+)", result.stdout)
    return int(found.group(1)) if result.returncode == 0 and found else None


def active_controller(cluster: ComposeCluster, exclude: str | None = None) -> str | None:
    for service, node_id in CONTROLLERS.items():
        if service != exclude and cluster.state(service).get("Running") and \
                controller_id_seen_by(cluster, service) == node_id:
            return service
    return None


def test_ha_config_validates(ha_cluster):
    assert set(ha_cluster.services()) == {"zookeeper", *CONTROLLERS, "broker-1", "broker-2", "broker-3", "prometheus"}


def test_killing_the_active_controller_hands_over_to_a_standby(ha_cluster):
    cluster = ha_cluster
    first = wait_for(lambda: active_controller(cluster), 60, "an active controller")
    topic = create_topic(cluster)
    with BackgroundProducer(cluster, topic) as producer:
        producer.wait_acked(1000)
        docker("kill", cluster.container(first))
        second = wait_for(lambda: active_controller(cluster, exclude=first), 90, "a standby to take over")
        assert second != first
        producer.wait_acked(len(producer.acked) + 2000, timeout_s=90)
        # The new active controller serves: a topic created through a broker (forwarded), and
        # the brokers stay registered (the session timeout passes while we wait for it).
        later = create_topic(cluster)
        assert partition_state(cluster, later)[1] == [1, 2, 3]
        listing = subprocess.run(["kcat", "-b", cluster.external(1), "-L"], capture_output=True, text=True, timeout=60)
        assert " 3 brokers:" in listing.stdout, listing.stdout
        producer.wait_acked(len(producer.acked) + 500)
    check_nothing_acked_lost(cluster, topic, producer)
