#!/usr/bin/env python3
"""What security costs (issue 25's performance section). One broker process with a PLAINTEXT,
a SASL_SSL (SCRAM-SHA-256) and an SSL listener; numbers only, never asserts.

1. Produce and consume records/s over SASL_SSL against PLAINTEXT in the same run, alternating
   per round (A B, then B A): confluent-kafka, 1 KiB records, batch.size 16 KiB, acks=1, one
   partition; each round produces ``--records`` and reads them back. Prints each side's median
   and range, and the ratio of the medians with the range of per-round ratios.
2. SCRAM login round trip (kbroker's client, 4,096 iterations): TCP connect, ApiVersions,
   SaslHandshake and the two SaslAuthenticate round trips, ``--logins`` times; median and p99.
3. A storm of ``--handshakes`` TLS handshakes (50 at a time) against the SSL listener while
   another connection sends Metadata every 5 ms on the PLAINTEXT listener: that connection's
   round-trip p50 / p99 / max before and during the storm.

    python bench/security_bench.py [--rounds 4] [--records 40000] [--logins 200] [--handshakes 500]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cli.certs import make_certs  # noqa: E402
from controller.launcher import BrokerProcess, free_port  # noqa: E402


def produce_consume(conf: dict, topic: str, n: int) -> tuple[float, float]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    value = b"x" * 1024
    producer = Producer({**conf, "acks": "1", "linger.ms": 5, "batch.size": 16384, "queue.buffering.max.messages": 200000})
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.001)
    assert producer.flush(120) == 0
    produced = n / (time.perf_counter() - start)
    consumer = Consumer({**conf, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < n:
        msgs = consumer.consume(10000, 1.0)
        got += sum(1 for m in msgs if not m.error())
    consumed = n / (time.perf_counter() - start)
    consumer.close()
    return produced, consumed


def summary(name: str, values: list[float], unit: str) -> str:
    return f"{name}: median {statistics.median(values):,.0f} {unit} (range {min(values):,.0f}-{max(values):,.0f})"


def ratio_line(what: str, a: list[float], b: list[float]) -> str:
    ratios = [x / y for x, y in zip(a, b)]
    return (f"{what} SASL_SSL / PLAINTEXT: {statistics.median(a) / statistics.median(b):.2f} "
            f"(per round {min(ratios):.2f}-{max(ratios):.2f})")


async def logins(port: int, n: int) -> list[float]:
    from protocol.client import BrokerConnection, Network
    from protocol.client.security import ClientSecurity

    security = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                               "sasl.username": "bench", "sasl.password": "bench-secret"})
    out = []
    for _ in range(n):
        start = time.perf_counter()
        conn = BrokerConnection("127.0.0.1", port, network=Network(security))
        await conn.connect()
        out.append((time.perf_counter() - start) * 1000)
        conn.close()
    return out


def storm_latency(plain_port: int, tls_port: int, handshakes: int) -> tuple[list[float], list[float]]:
    import struct

    from protocol.fast_codecs import encode_request_header
    from protocol.messages import APIS

    body = encode_request_header(3, 1, 7, "bench", False) + APIS[3].request.build(1, {"topics": []})
    request = struct.pack(">i", len(body)) + body
    sock = socket.create_connection(("127.0.0.1", plain_port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def round_trip() -> float:
        start = time.perf_counter()
        sock.sendall(request)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        sock.recv(size, socket.MSG_WAITALL)
        return (time.perf_counter() - start) * 1000

    before = []
    for _ in range(200):
        before.append(round_trip())
        time.sleep(0.005)
    during: list[float] = []
    done = threading.Event()

    def measure() -> None:
        while not done.is_set():
            during.append(round_trip())
            time.sleep(0.005)
    thread = threading.Thread(target=measure)
    thread.start()
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE

    def handshake(_: int) -> None:
        with socket.create_connection(("127.0.0.1", tls_port), timeout=30) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost"):
                pass
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(50) as pool:
        list(pool.map(handshake, range(handshakes)))
    done.set()
    thread.join()
    sock.close()
    return before, during


def percentiles(values: list[float]) -> str:
    s = sorted(values)
    return f"p50 {s[len(s) // 2]:.2f} ms, p99 {s[int(len(s) * 0.99)]:.2f} ms, max {s[-1]:.2f} ms ({len(s)} requests)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--records", type=int, default=40000)
    parser.add_argument("--logins", type=int, default=200)
    parser.add_argument("--handshakes", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="security-bench-") as tmp:
        directory = Path(tmp)
        keystores = make_certs(directory / "certs", ["localhost"], [])
        ca = str(directory / "certs" / "ca.pem")
        ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port(), "SSL": free_port(), "SASL_PLAINTEXT": free_port()}
        broker = BrokerProcess(directory / "data", ports["PLAINTEXT"], 1, {
            "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystores["localhost"])}).start(60)
        try:
            from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                               UserScramCredentialUpsertion)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bench-secret")]).values():
                f.result(10)
            time.sleep(1)
            plain = {"bootstrap.servers": broker.bootstrap}
            secure = {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "sasl_ssl",
                      "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench", "sasl.password": "bench-secret",
                      "ssl.ca.location": ca}
            results: dict[str, tuple[list[float], list[float]]] = {"PLAINTEXT": ([], []), "SASL_SSL": ([], [])}
            for r in range(args.rounds):
                order = [("PLAINTEXT", plain), ("SASL_SSL", secure)]
                if r % 2:
                    order.reverse()
                for name, conf in order:
                    topic = f"bench-{name.lower()}-{r}"
                    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
                        f.result(30)
                    produced, consumed = produce_consume(conf, topic, args.records)
                    results[name][0].append(produced)
                    results[name][1].append(consumed)
                    print(f"round {r + 1} {name}: produce {produced:,.0f} records/s, consume {consumed:,.0f} records/s")
            for name, (p, c) in results.items():
                print(summary(f"{name} produce", p, "records/s"))
                print(summary(f"{name} consume", c, "records/s"))
            print(ratio_line("produce", results["SASL_SSL"][0], results["PLAINTEXT"][0]))
            print(ratio_line("consume", results["SASL_SSL"][1], results["PLAINTEXT"][1]))
            times = asyncio.run(logins(ports["SASL_PLAINTEXT"], args.logins))
            s = sorted(times)
            print(f"SCRAM-SHA-256 login (4096 iterations, connect + ApiVersions + handshake + 2 authenticate): "
                  f"median {statistics.median(s):.2f} ms, p99 {s[int(len(s) * 0.99)]:.2f} ms ({len(s)} logins)")
            before, during = storm_latency(ports["PLAINTEXT"], ports["SSL"], args.handshakes)
            print(f"Metadata round trip before the storm: {percentiles(before)}")
            print(f"Metadata round trip during {args.handshakes} TLS handshakes: {percentiles(during)}")
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
