"""A controller process and three broker processes (``process.roles=broker``) wired to it, driven by
real clients: kcat, confluent-kafka's Producer and AdminClient, and kbroker's own client.

Sessions are shortened (broker.session.timeout.ms 3000, heartbeats every 500 ms) so that a killed
leader is replaced within seconds; the Kafka defaults (9000 / 2000) would only make the test slower.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic, ResourceType)

from controller.launcher import LocalCluster, metadata
from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection, KafkaClient

from .helpers import NumberedProducer, resolved, admin, partitions_of, read_all, topic_metadata, wait_for, wait_futures

pytestmark = pytest.mark.timeout(240)

SESSION_MS = 3000
HEARTBEAT_MS = 500
CONTROLLER_ID = 3000


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, 3, controller_id=CONTROLLER_ID,
                     broker_props={"broker.heartbeat.interval.ms": HEARTBEAT_MS, "replica.fetch.backoff.ms": 200,
                                   "replica.lag.time.max.ms": 10000},
                     controller_props={"broker.session.timeout.ms": SESSION_MS, "default.replication.factor": 3})
    try:
        c.start()
        yield c
    finally:
        c.kill()


def kcat_metadata(kcat_path: str, bootstrap: str) -> dict:
    out = subprocess.run([kcat_path, "-b", bootstrap, "-L", "-J"], capture_output=True, timeout=60, check=True)
    return json.loads(out.stdout)


async def test_three_brokers_and_a_controller(cluster, kcat_path):
    md = kcat_metadata(kcat_path, cluster.brokers[2].bootstrap)
    assert sorted(b["id"] for b in md["brokers"]) == [1, 2, 3]
    # The controller (3000) is no broker clients can reach, so brokers name a live broker, as Kafka's
    # KRaft brokers do: admin requests sent "to the controller" reach a broker, which forwards them.
    # Every broker names the same one, the lowest live id. The brokers know the active controller
    # from UpdateMetadata.
    assert md["controllerid"] == 1
    assert kcat_metadata(kcat_path, cluster.brokers[3].bootstrap)["controllerid"] == 1
    plain = subprocess.run([kcat_path, "-b", cluster.brokers[2].bootstrap, "-L"], capture_output=True, text=True,
                           timeout=60, check=True).stdout
    assert " 3 brokers:" in plain and len(re.findall(r"broker \d+ at 127\.0\.0\.1:\d+", plain)) == 3, plain
    assert re.search(rf"broker 1 at 127\.0\.0\.1:{cluster.brokers[1].port} \(controller\)", plain), plain
    assert cluster.controller.live_brokers() == {1, 2, 3}
    assert metadata(cluster.controller.port).controller_id == CONTROLLER_ID
    client = admin(cluster)  # referenced until its futures resolve (a destroyed handle fails them)
    wait_futures(client.create_topics([NewTopic("spread", 6, 3, config={"min.insync.replicas": "2"})]))
    # Every broker knows the topic: 2 leaders each (the placement spreads them), every replica in sync.
    for b in cluster.brokers.values():
        async def settled(port=b.port):
            _md, t = await topic_metadata(port, "spread")
            parts = t.partitions
            return len(parts) == 6 and all(sorted(p.isr_nodes) == sorted(p.replica_nodes) for p in parts) and t
        t = await wait_for(settled, 20, f"broker {b.broker_id} to see the topic in sync")
        leaders = [p.leader_id for p in t.partitions]
        assert sorted(leaders.count(i) for i in (1, 2, 3)) == [2, 2, 2], leaders
        assert all(sorted(p.replica_nodes) == [1, 2, 3] for p in t.partitions)


async def failover_under_load(cluster, kills: int) -> None:
    """The Kafka promise (RF=3, min.insync.replicas=2, acks=all, no unclean election): the
    leader of one partition after another is kill -9'd while an idempotent producer writes;
    a new leader is elected within broker.session.timeout.ms + 2 s, the producer goes on,
    the old broker restarts and rejoins every ISR; at the end a consumer reads every
    acknowledged record exactly once and in order, on every partition."""
    partitions = 3
    client = admin(cluster)
    wait_futures(client.create_topics([NewTopic("failover", partitions, 3, config={"min.insync.replicas": "2"})]))
    elections = []
    with NumberedProducer(cluster.bootstrap, "failover", partitions) as producer:
        await wait_for(lambda: resolved(producer.count > 500), 30, "records to flow")
        for k in range(kills):
            target = k % partitions
            any_live = next(b for b in cluster.brokers.values() if b.running)
            old_leader = (await partitions_of(any_live.port, "failover"))[target].leader_id
            assert old_leader in cluster.brokers
            victim = cluster.brokers[old_leader]
            victim.signal(signal.SIGKILL)
            killed_at = time.monotonic()
            victim.proc.wait(10)
            survivor = next(b for i, b in cluster.brokers.items() if i != old_leader)

            async def new_leader():
                p = (await partitions_of(survivor.port, "failover"))[target]
                return p.leader_id not in (-1, old_leader) and p.leader_id
            await wait_for(new_leader, (SESSION_MS + 2000) / 1000 + 10, "a new leader")
            elections.append(time.monotonic() - killed_at)
            assert elections[-1] <= (SESSION_MS + 2000) / 1000, elections
            count = producer.count
            await wait_for(lambda: resolved(producer.count > count + 300), 60, "the producer to go on")
            victim.start(60)

            async def rejoined():
                parts = await partitions_of(survivor.port, "failover")
                return all(sorted(p.isr_nodes) == [1, 2, 3] for p in parts.values())
            await wait_for(rejoined, 60, f"broker {old_leader} back in every ISR")
            assert not producer.errors, producer.errors
    assert producer.unflushed == 0 and producer.errors == []
    print(f"{kills} kills; new leader after {sorted(round(e, 2) for e in elections)} s; {producer.count} acked")
    read = read_all(cluster.bootstrap, "failover", partitions)
    for p in range(partitions):
        acked = producer.acked[p]
        assert acked == sorted(acked), f"partition {p}: acknowledged out of order"
        assert read[p] == acked, (f"partition {p}: {len(read[p])} read, {len(acked)} acked; lost "
                                  f"{sorted(set(acked) - set(read[p]))[:10]}, extra {sorted(set(read[p]) - set(acked))[:10]}")


async def test_failover_under_load_loses_no_acknowledged_record(cluster):
    await failover_under_load(cluster, kills=5)


@pytest.mark.slow
@pytest.mark.timeout(3600)
async def test_failover_soak_100_kills(cluster):
    await failover_under_load(cluster, kills=100)


async def test_sigterm_moves_the_leaderships_away_before_the_broker_exits(cluster):
    client = admin(cluster)
    wait_futures(client.create_topics([NewTopic("cs", 3, 3, config={"min.insync.replicas": "2"})]))
    _md, t = await topic_metadata(cluster.brokers[1].port, "cs")
    led_by_2 = [p.partition_index for p in t.partitions if p.leader_id == 2]
    assert led_by_2  # the placement gives every broker a leadership
    delivered: list[int] = []
    errors: list = []
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.brokers[1].bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5})

        def on_delivery(err, msg):
            (errors.append(err) if err is not None else delivered.append(msg.partition()))
        i = 0
        while not stop.is_set() and i < 100_000:
            producer.produce("cs", value=b"%d" % i, partition=i % 3, on_delivery=on_delivery)
            producer.poll(0.002)
            i += 1
        assert producer.flush(60) == 0

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        await wait_for(lambda: resolved(len(delivered) > 300), 30, "records to flow")
        b2 = cluster.brokers[2]
        b2.signal(signal.SIGTERM)
        assert b2.proc.wait(30) == 0
        # Before it exited, the controller had moved its leaderships (nobody waited for a session to lapse).
        assert "controlled shutdown complete (the controller lets it shut down)" in b2.log_text()
        _md, t = await topic_metadata(cluster.controller.port, "cs")
        assert all(p.leader_id in (1, 3) for p in t.partitions), [p.leader_id for p in t.partitions]

        async def moved_on_broker_1():  # it learns them from the controller, maybe a moment later
            _md, t = await topic_metadata(cluster.brokers[1].port, "cs")
            return all(p.leader_id in (1, 3) for p in t.partitions)
        await wait_for(moved_on_broker_1, 20, "broker 1 to see the leaderships moved")
        count = len(delivered)
        await wait_for(lambda: resolved(len(delivered) > count + 300), 30, "the producer to go on")
    finally:
        stop.set()
        thread.join(90)
    assert errors == []
    assert {p for p in delivered} == {0, 1, 2}


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
async def test_topic_config_changes_reach_every_broker_and_its_logs(cluster):
    client = admin(cluster)
    wait_futures(client.create_topics([NewTopic("cfg", 3, 3)]))
    resource = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    wait_futures(client.incremental_alter_configs([resource]))

    async def described(port: int) -> dict:
        conn = BrokerConnection("127.0.0.1", port, client_id="test")
        await conn.connect()
        try:
            resp = await conn.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": 2, "resource_name": "cfg", "configuration_keys": None}]}, version=1)
        finally:
            conn.close()
        return {c.name: c.value for c in resp.results[0].configs}

    for b in cluster.brokers.values():
        async def applied(port=b.port):
            configs = await described(port)
            return configs["max.message.bytes"] == "1000" and configs["retention.ms"] == "123456"
        await wait_for(applied, 20, f"broker {b.broker_id} to describe the new configs")
    # The logs act on it: a record over max.message.bytes is refused by the leader of every partition.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.max.bytes": 100_000,
                         "retries": 0})
    errors = {}

    def on_delivery(err, msg):
        errors[msg.partition()] = err
    for p in range(3):
        producer.produce("cfg", value=b"x" * 5000, partition=p, on_delivery=on_delivery)
    producer.flush(30)
    assert sorted(errors) == [0, 1, 2]
    assert all(e is not None and e.name() == "MSG_SIZE_TOO_LARGE" for e in errors.values()), errors
    # AlterConfigs (the legacy API) replaces the whole set of overrides.
    wait_futures(client.alter_configs([ConfigResource(ResourceType.TOPIC, "cfg", set_config={"retention.ms": "777"})]))
    for b in cluster.brokers.values():
        async def replaced(port=b.port):
            configs = await described(port)
            return configs["retention.ms"] == "777" and configs["max.message.bytes"] != "1000"
        await wait_for(replaced, 20, f"broker {b.broker_id} to describe the replaced configs")


async def test_create_partitions_grows_a_topic_and_refuses_to_shrink_it(cluster):
    client = admin(cluster)
    wait_futures(client.create_topics([NewTopic("grow", 2, 2)]))
    # Answered once the broker that forwarded it knows the 5 partitions; the others learn them from
    # the controller a moment later, and the client below may ask any of them.
    wait_futures(client.create_partitions([NewPartitions("grow", 5)]))
    for b in cluster.brokers.values():
        async def grown(port=b.port):
            _md, t = await topic_metadata(port, "grow")
            return len(t.partitions) == 5 and all(p.leader_id >= 0 for p in t.partitions)
        await wait_for(grown, 20, f"broker {b.broker_id} to see 5 partitions")
    async with KafkaClient(cluster.bootstrap) as kc:
        assert await kc.partitions_for("grow") == [0, 1, 2, 3, 4]
    with pytest.raises(KafkaException) as shrink:
        wait_futures(client.create_partitions([NewPartitions("grow", 3)]))
    assert shrink.value.args[0].name() == "INVALID_PARTITIONS"
