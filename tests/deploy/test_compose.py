"""docker-compose.yml with the Docker engine: a controller, three brokers and Prometheus in
containers on a bridge network, driven from the host by kcat and confluent-kafka through the
EXTERNAL listeners. One compose project (unique name, free host ports) for the module, torn
down (volumes too) at the end; the tests run in file order and the last one restarts the whole
stack to check the records of the earlier ones survived.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.deploy.compose import BROKERS, HA_FILE, ComposeCluster, compose_commands, docker, running, wait_for

# What earlier tests wrote and the last one reads back after `down` + `up`: topic -> values.
WRITTEN: dict[str, set[bytes]] = {}


@pytest.fixture(scope="module")
def cluster() -> Iterator[ComposeCluster]:
    with running(ComposeCluster()) as stack:
        yield stack


def create_topic(cluster: ComposeCluster, partitions: int = 3) -> str:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(timeout=30)
    wait_for(lambda: all(p.leader >= 0 for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()),
             30, f"leaders of {topic}")
    return topic


def partition_state(cluster: ComposeCluster, topic: str, partition: int = 0) -> tuple[int, list[int]]:
    """(leader, ISR) of a partition, as a fresh metadata request shows them."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    p = admin.list_topics(topic, timeout=10).topics[topic].partitions[partition]
    return p.leader, sorted(p.isrs)


def consume_all(cluster: ComposeCluster, topic: str, partitions: int, expected: int | None = None,
                timeout_s: float = 60) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record of the topic, read with confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])  # from offset 0, no group join
        out: list[tuple[int, int, bytes]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(msg.partition())
                    if len(at_end) == partitions and (expected is None or len(out) >= expected):
                        break
                    continue
                raise KafkaException(msg.error())
            at_end.discard(msg.partition())
            out.append((msg.partition(), msg.offset(), msg.value()))
        return out
    finally:
        consumer.close()


class BackgroundProducer:
    """An idempotent acks=all confluent-kafka producer writing 0, 1, 2, ... to one partition
    from a thread until stopped (or for at most ``limit_s``); every acknowledged value is kept."""

    def __init__(self, cluster: ComposeCluster, topic: str, partition: int = 0, limit_s: float = 240) -> None:
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 120000})
        self.topic, self.partition, self.limit_s = topic, partition, limit_s
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append(msg.value())

    def _run(self) -> None:
        deadline = time.monotonic() + self.limit_s
        n = 0
        while not self.stop_flag.is_set() and time.monotonic() < deadline:
            if len(self.producer) < 500:  # a bounded number in flight
                self.producer.produce(self.topic, str(n).encode(), partition=self.partition, on_delivery=self._delivered)
                n += 1
            self.producer.poll(0.005)
        self.producer.flush(150)

    def __enter__(self) -> "BackgroundProducer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_flag.set()
        self.thread.join(180)

    def wait_acked(self, count: int, timeout_s: float = 60) -> None:
        wait_for(lambda: len(self.acked) >= count or self.errors, timeout_s, f"{count} acknowledged records",
                 interval_s=0.1)
        assert not self.errors, self.errors[:5]


def check_nothing_acked_lost(cluster: ComposeCluster, topic: str, producer: BackgroundProducer,
                             partitions: int = 3) -> None:
    assert not producer.errors, producer.errors[:5]
    values = [v for p, _o, v in consume_all(cluster, topic, partitions, expected=len(producer.acked))
              if p == producer.partition]
    assert set(producer.acked) <= set(values), f"lost {len(set(producer.acked) - set(values))} acknowledged records"
    numbers = [int(v) for v in values]
    assert numbers == sorted(set(numbers)), "duplicates or reordering in an idempotent producer's partition"
    WRITTEN[topic] = set(values)


# ---------------------------------------------------------------------------------------------

def test_compose_config_validates():
    for command in compose_commands():
        stack = ComposeCluster(command=command)
        result = stack.compose("config", "-q")
        assert result.returncode == 0
        assert set(stack.services()) == {"controller", *BROKERS, "prometheus"}
        ha = ComposeCluster(command=command, files=(HA_FILE,))
        assert ha.compose("config", "-q").returncode == 0
        assert set(ha.services()) == {"zookeeper", "controller", "controller-2", "controller-3", *BROKERS, "prometheus"}


def test_all_services_healthy_and_kcat_lists_three_brokers_at_their_external_addresses(cluster):
    assert all(cluster.healthy(s) for s in cluster.services())
    listing = subprocess.run(["kcat", "-b", cluster.external(1), "-L"], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert " 3 brokers:" in listing.stdout
    for i in (1, 2, 3):
        assert f"broker {i} at {cluster.external(i)}" in listing.stdout, listing.stdout


def test_the_health_checks_are_the_shell_round_trip_and_it_answers_in_every_container(cluster):
    """kbroker-healthcheck (deploy/docker/healthcheck.sh), not a Python start, every 2 s."""
    for service in ("controller", *BROKERS):
        container = cluster.container(service)
        check = json.loads(docker("inspect", "-f", "{{json .Config.Healthcheck.Test}}", container).stdout)
        assert check == ["CMD", "kbroker-healthcheck"], (service, check)
        log = json.loads(docker("inspect", "-f", "{{json .State.Health.Log}}", container).stdout)
        assert "answered ApiVersions" in log[-1]["Output"], (service, log[-1])
        result = docker("exec", container, "kbroker-healthcheck", check=False)
        assert result.returncode == 0 and "127.0.0.1:" in result.stdout, (service, result.stdout, result.stderr)


def test_kcat_and_confluent_kafka_produce_10000_records_to_an_rf3_topic_and_consume_them_back(cluster):
    topic = create_topic(cluster)
    kcat_values = [f"kcat-{i}" for i in range(5000)]
    # Both producers idempotent: a retried batch (a slow, loaded machine) is written once, so
    # exactly the 10,000 records must come back.
    produced = subprocess.run(["kcat", "-b", cluster.external(2), "-P", "-t", topic, "-X", "acks=all",
                               "-X", "enable.idempotence=true"],
                              input="\n".join(kcat_values) + "\n", capture_output=True, text=True, timeout=120)
    assert produced.returncode == 0 and "failed" not in produced.stderr, produced.stderr
    producer = Producer({"bootstrap.servers": cluster.external(3), "acks": "all", "enable.idempotence": True})
    errors: list[str] = []
    for i in range(5000):
        producer.produce(topic, f"ck-{i}".encode(), on_delivery=lambda err, _m: err and errors.append(str(err)))
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:5]

    expected = {v.encode() for v in kcat_values} | {f"ck-{i}".encode() for i in range(5000)}
    records = consume_all(cluster, topic, 3, expected=10000)
    offsets: dict[bytes, list[tuple[int, int]]] = {}
    for p, o, v in records:
        offsets.setdefault(v, []).append((p, o))
    duplicated = {v: at for v, at in offsets.items() if len(at) > 1}
    assert not duplicated, f"{len(duplicated)} values written more than once, e.g. {list(duplicated.items())[:3]}"
    assert sorted(v for _p, _o, v in records) == sorted(expected)
    consumed = subprocess.run(["kcat", "-b", cluster.external(1), "-C", "-t", topic, "-e", "-q", "-f", "%s\\n"],
                              capture_output=True, timeout=120)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split(b"\n")[:-1]) == sorted(expected)
    for p in range(3):
        assert partition_state(cluster, topic, p)[1] == [1, 2, 3]  # RF=3, every replica in sync
    WRITTEN[topic] = expected


def test_killing_the_leader_container_loses_no_acknowledged_record_and_it_rejoins_the_isr(cluster):
    """``docker kill`` of the leader of the partition an idempotent acks=all producer writes to:
    the producer goes on with the new leader. Docker counts ``docker kill`` as a manual stop
    (no restart policy), so ``up -d`` brings it back; then the new leader's process is killed
    from the host (kill -9: a crash), which the restart policy restarts by itself. Both times
    the broker rejoins the ISR and nothing acknowledged is lost."""
    topic = create_topic(cluster)
    with BackgroundProducer(cluster, topic) as producer:
        producer.wait_acked(1000)
        first, isr = partition_state(cluster, topic)
        assert isr == [1, 2, 3]
        docker("kill", cluster.container(f"broker-{first}"))
        acked = len(producer.acked)
        producer.wait_acked(acked + 2000, timeout_s=90)  # the producer goes on
        assert partition_state(cluster, topic)[0] != first

        cluster.compose("up", "-d")
        cluster.wait_healthy([f"broker-{first}"], timeout_s=120)
        wait_for(lambda: partition_state(cluster, topic)[1] == [1, 2, 3], 120, f"broker {first} back in the ISR")

        second = partition_state(cluster, topic)[0]
        restarts = cluster.restart_count(f"broker-{second}")
        pid = cluster.state(f"broker-{second}")["Pid"]
        subprocess.run(["kill", "-9", str(pid)], check=True)
        wait_for(lambda: cluster.restart_count(f"broker-{second}") > restarts, 60, "the restart policy")
        acked = len(producer.acked)
        producer.wait_acked(acked + 2000, timeout_s=90)
        cluster.wait_healthy([f"broker-{second}"], timeout_s=120)
        wait_for(lambda: partition_state(cluster, topic)[1] == [1, 2, 3], 120, f"broker {second} back in the ISR")
        producer.wait_acked(len(producer.acked) + 500)
    check_nothing_acked_lost(cluster, topic, producer)


def under_replicated(cluster: ComposeCluster) -> dict[str, float]:
    """UnderReplicatedPartitions per scraped broker, read through Prometheus' HTTP API."""
    return {r["metric"]["instance"]: float(r["value"][1])
            for r in cluster.prometheus_query('kafka_server_replicamanager_underreplicatedpartitions{job="kbroker"}')}


def test_a_disconnected_broker_loses_nothing_acknowledged_and_the_cluster_heals(cluster):
    """``docker network disconnect`` of the leader of the partition an idempotent acks=all
    producer writes to: a real partition (the other brokers, the controller and the host's
    clients lose it). The producer goes on with a new leader; Prometheus (scraping the brokers
    inside the compose network) sees under-replicated partitions, and 0 again once the broker
    is reconnected and has caught up; nothing acknowledged is lost."""
    wait_for(lambda: len(under_replicated(cluster)) == 3, 60, "three brokers' series in Prometheus")
    topic = create_topic(cluster)
    with BackgroundProducer(cluster, topic) as producer:
        producer.wait_acked(1000)
        leader, isr = partition_state(cluster, topic)
        assert isr == [1, 2, 3]
        victim = cluster.container(f"broker-{leader}")
        docker("network", "disconnect", cluster.network, victim)
        try:
            acked = len(producer.acked)
            producer.wait_acked(acked + 2000, timeout_s=90)
            wait_for(lambda: sum(v for i, v in under_replicated(cluster).items() if not i.startswith(f"broker-{leader}:"))
                     > 0, 60, "Prometheus to see under-replicated partitions")
        finally:
            # Back on the network under its service name (what the other brokers resolve).
            docker("network", "connect", "--alias", f"broker-{leader}", cluster.network, victim)
        wait_for(lambda: partition_state(cluster, topic)[1] == [1, 2, 3], 120, f"broker {leader} back in the ISR")
        wait_for(lambda: (lambda u: len(u) == 3 and sum(u.values()) == 0)(under_replicated(cluster)), 120,
                 "under-replicated partitions back to 0 on all three brokers (Prometheus)")
        producer.wait_acked(len(producer.acked) + 500)
    check_nothing_acked_lost(cluster, topic, producer)
    # The reconnected broker serves the host's clients again at its external address.
    listing = subprocess.run(["kcat", "-b", cluster.external(leader), "-L", "-t", topic], capture_output=True,
                             text=True, timeout=60)
    assert listing.returncode == 0 and " 3 brokers:" in listing.stdout, listing.stderr


def test_down_then_up_keeps_every_record(cluster):
    assert WRITTEN, "the earlier tests wrote nothing"
    cluster.down(volumes=False)
    cluster.up()
    for topic, values in WRITTEN.items():
        records = consume_all(cluster, topic, 3, expected=len(values))
        assert {v for _p, _o, v in records} >= values, topic
