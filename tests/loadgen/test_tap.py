"""``kbroker record`` is transparent: kcat, kafka-python and confluent-kafka produce and consume
through it with the same results as directly, and every request frame they send is recorded."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid


from loadgen.recording import read_all, read_manifest
from protocol.client import KafkaClient

N = 500


def create_topics(bootstrap: str, *names: str, partitions: int = 3) -> None:
    async def create() -> None:
        async with KafkaClient(bootstrap, client_id="test-admin") as client:
            await client.create_topics([(n, partitions, -1, None) for n in names])
    asyncio.run(create())


def rows_of(recording, client_id: str) -> list[dict]:
    return [r for r in read_all(recording).to_pylist() if r["client_id"] == client_id]


def assert_every_frame_recorded(rows: list[dict]) -> None:
    """Each client numbers its requests on a connection 0/1, 2, 3...: no gap means no frame was
    missed; and every request has its response's time and size (but the last of a connection:
    a consumer closes its connection with a Fetch still waiting)."""
    by_conn: dict[int, list[int]] = {}
    last = {r["connection_id"]: r for r in rows}
    for r in rows:
        by_conn.setdefault(r["connection_id"], []).append(r["correlation_id"])
        assert r["frame"][:2] == r["api_key"].to_bytes(2, "big")
        if r is not last[r["connection_id"]]:
            assert r["response_size"] is not None and r["response_time_us"] >= r["send_time_us"], r
    assert rows and by_conn
    for cid, ids in by_conn.items():
        assert ids == list(range(ids[0], ids[0] + len(ids))), (cid, ids)


def records_via_kcat(kcat_path: str, bootstrap: str, topic: str) -> list[str]:
    out = subprocess.run([kcat_path, "-b", bootstrap, "-C", "-t", topic, "-e", "-f", "%p|%o|%k|%s\n"],
                         capture_output=True, timeout=60, check=True).stdout.decode()
    return sorted(out.splitlines())


def test_kcat_through_the_tap_is_transparent(bootstrap, kcat_path, tap_factory):
    direct, tapped = f"kc-d-{uuid.uuid4().hex[:8]}", f"kc-t-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, direct, tapped)
    tap = tap_factory(bootstrap)
    lines = b"".join(b"k%d:v%d\n" % (i % 7, i) for i in range(N))
    for broker, topic in ((bootstrap, direct), (tap.bootstrap, tapped)):
        subprocess.run([kcat_path, "-b", broker, "-P", "-t", topic, "-K:", "-X", "client.id=kcat-tap",
                        "-X", "partitioner=murmur2_random"], input=lines, timeout=60, check=True)
    through_tap = records_via_kcat(kcat_path, tap.bootstrap, tapped)
    tap.stop()
    assert len(through_tap) == N
    assert through_tap == records_via_kcat(kcat_path, bootstrap, direct)

    rows = rows_of(tap.out, "kcat-tap")
    assert_every_frame_recorded(rows)
    # kcat went to the brokers through the proxy ports, not only the bootstrap address.
    assert any(r["broker_id"] >= 0 and r["api_key"] == 0 for r in rows)
    manifest = read_manifest(tap.out)
    assert tapped in manifest["topics"] and manifest["requests_per_api"]["Produce"] >= 1
    assert manifest["requests"] == len(read_all(tap.out))


def kafka_python_round_trip(bootstrap: str, topic: str) -> tuple[list[tuple], int]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="kp-tap", acks="all", linger_ms=5)
    for i in range(N):
        producer.send(topic, key=b"k%d" % (i % 7), value=b"v%d" % i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, client_id="kp-tap-consumer",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
    got = sorted((m.partition, m.offset, m.key, m.value) for m in consumer)
    consumer.close()
    return got, len(got)


def test_kafka_python_through_the_tap_is_transparent(bootstrap, tap_factory):
    direct, tapped = f"kp-d-{uuid.uuid4().hex[:8]}", f"kp-t-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, direct, tapped)
    tap = tap_factory(bootstrap)
    want, _ = kafka_python_round_trip(bootstrap, direct)
    got, n = kafka_python_round_trip(tap.bootstrap, tapped)
    tap.stop()
    assert n == N and got == want
    rows = rows_of(tap.out, "kp-tap")
    assert_every_frame_recorded(rows)
    assert_every_frame_recorded(rows_of(tap.out, "kp-tap-consumer"))
    assert {r["api_key"] for r in rows} >= {0, 3, 18}


def test_confluent_kafka_through_the_tap_is_transparent_and_every_request_is_recorded(bootstrap, tap_factory):
    from confluent_kafka import Consumer, Producer

    direct, tapped = f"ck-d-{uuid.uuid4().hex[:8]}", f"ck-t-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, direct, tapped)
    tap = tap_factory(bootstrap)

    def round_trip(broker: str, topic: str) -> tuple[list[tuple], int]:
        stats: list[dict] = []
        producer = Producer({"bootstrap.servers": broker, "client.id": f"ck-{topic}", "linger.ms": 5,
                             "statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s))})
        for i in range(N):
            producer.produce(topic, key=b"k%d" % (i % 7), value=b"v%d" % i)
        assert producer.flush(30) == 0
        # librdkafka's own count of the requests it sent to each broker ("tx": the bootstrap
        # connection's entry leaves the statistics once the brokers are known), once it stops changing.
        def sent() -> dict:
            return {b["nodeid"]: (b["tx"], b["req"]["Produce"]) for b in stats[-1]["brokers"].values()} if stats else {}
        # Under load the first statistics may come late: an empty count is not a stable one.
        last, stable, deadline = {}, 0, time.monotonic() + 60
        while stable < 3:
            assert time.monotonic() < deadline, f"librdkafka's statistics never settled: {last}"
            producer.poll(0.15)
            stable = stable + 1 if sent() == last and last else 0
            last = sent()
        consumer = Consumer({"bootstrap.servers": broker, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": "ck-c"})
        consumer.assign([__import__("confluent_kafka").TopicPartition(topic, p, 0) for p in range(3)])
        got = []
        while len(got) < N:
            m = consumer.poll(10)
            assert m is not None, f"only {len(got)} records"
            if m.error() is None:
                got.append((m.partition(), m.offset(), m.key(), m.value()))
        consumer.close()
        return sorted(got), last

    want, _ = round_trip(bootstrap, direct)
    got, sent = round_trip(tap.bootstrap, tapped)
    tap.stop()
    assert got == want
    rows = rows_of(tap.out, f"ck-{tapped}")
    assert_every_frame_recorded(rows)
    assert sent and all(node >= 0 for node in sent)
    recorded = {node: (sum(r["broker_id"] == node for r in rows), sum(r["broker_id"] == node and r["api_key"] == 0
                                                                      for r in rows)) for node in sent}
    assert recorded == sent
