"""One Python Kafka client's produce and consume phases for bench/security_bench.py, in a process of
its own so that its CPU (time.process_time: every thread of this process, kafka-python's sender
thread with the rest) is its own and not mixed with the bench's.

    python bench/_security_client.py KIND SETTINGS_JSON      (KIND: kafka-python or aiokafka)

SETTINGS: bootstrap, topic, records, batch_size, linger_ms, and for SASL_SSL ca, username and
password (SCRAM-SHA-256). Talks with the bench over its standard streams, one line at a time:
"ready" once its producer (then its consumer) is connected and logged in (the producer has sent
one record, which the consumer skips); it waits for "go" on stdin, runs the phase and prints
{"wall": seconds, "cpu": seconds} as JSON. A bench prints numbers and never asserts: a client
error ends the process with a traceback, which the bench reports.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time

VALUE = b"x" * 1024


def handshake() -> None:
    print("ready", flush=True)
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise SystemExit(f"expected go, got {line!r}")


def result(wall: float, cpu: float) -> None:
    print(json.dumps({"wall": wall, "cpu": cpu}), flush=True)


def context(settings: dict) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=settings["ca"])
    ctx.check_hostname = False  # the broker's certificate names localhost; the bench dials 127.0.0.1
    return ctx


def kafka_python(settings: dict) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    security = ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                 "sasl_plain_username": settings["username"], "sasl_plain_password": settings["password"],
                 "ssl_context": context(settings)} if "ca" in settings else {})
    topic, n = settings["topic"], settings["records"]
    producer = KafkaProducer(bootstrap_servers=settings["bootstrap"], acks=1, batch_size=settings["batch_size"],
                             linger_ms=settings["linger_ms"], **security)
    producer.send(topic, VALUE, partition=0).get(60)
    handshake()
    t0, c0 = time.perf_counter(), time.process_time()
    futures = [producer.send(topic, VALUE, partition=0) for _ in range(n)]
    producer.flush(120)
    t1, c1 = time.perf_counter(), time.process_time()
    failed = [f for f in futures if not f.succeeded()]
    if failed:
        raise SystemExit(f"{len(failed)} records failed: {failed[0].exception!r}")
    result(t1 - t0, c1 - c0)
    producer.close()

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=settings["bootstrap"], group_id=None, enable_auto_commit=False,
                             **security)
    consumer.assign([tp])
    consumer.end_offsets([tp])  # connected and logged in to the leader before the phase
    consumer.seek(tp, 1)
    handshake()
    t0, c0 = time.perf_counter(), time.process_time()
    got = 0
    while got < n:
        got += sum(len(records) for records in consumer.poll(timeout_ms=1000, max_records=10000).values())
    t1, c1 = time.perf_counter(), time.process_time()
    result(t1 - t0, c1 - c0)
    consumer.close()


async def aiokafka(settings: dict) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    security = ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                 "sasl_plain_username": settings["username"], "sasl_plain_password": settings["password"],
                 "ssl_context": context(settings)} if "ca" in settings else {})
    topic, n = settings["topic"], settings["records"]
    loop = asyncio.get_running_loop()
    producer = AIOKafkaProducer(bootstrap_servers=settings["bootstrap"], acks=1, max_batch_size=settings["batch_size"],
                                linger_ms=settings["linger_ms"], **security)
    await producer.start()
    await producer.send_and_wait(topic, VALUE, partition=0)
    await loop.run_in_executor(None, handshake)
    t0, c0 = time.perf_counter(), time.process_time()
    futures = [await producer.send(topic, VALUE, partition=0) for _ in range(n)]
    await producer.flush()
    t1, c1 = time.perf_counter(), time.process_time()
    failed = [f for f in futures if not f.done() or f.exception()]
    if failed:
        raise SystemExit(f"{len(failed)} records failed")
    result(t1 - t0, c1 - c0)
    await producer.stop()

    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings["bootstrap"], group_id=None, enable_auto_commit=False,
                                **security)
    await consumer.start()
    consumer.assign([tp])
    await consumer.end_offsets([tp])  # connected and logged in to the leader before the phase
    consumer.seek(tp, 1)
    await loop.run_in_executor(None, handshake)
    t0, c0 = time.perf_counter(), time.process_time()
    got = 0
    while got < n:
        got += sum(len(records) for records in (await consumer.getmany(tp, timeout_ms=1000, max_records=10000)).values())
    t1, c1 = time.perf_counter(), time.process_time()
    result(t1 - t0, c1 - c0)
    await consumer.stop()


def main() -> None:
    kind, settings = sys.argv[1], json.loads(sys.argv[2])
    if kind == "kafka-python":
        kafka_python(settings)
    elif kind == "aiokafka":
        asyncio.run(aiokafka(settings))
    else:
        raise SystemExit(f"unknown client {kind!r}")


if __name__ == "__main__":
    main()
