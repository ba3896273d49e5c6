#!/usr/bin/env python3
"""Produce latency over SASL_SSL, one request at a time: librdkafka (confluent-kafka), 15 records of
1 KiB then flush(), 150 times a round, with Nagle on (librdkafka's default) and off
(socket.nagle.disable), against this tree's broker and ``--before``'s, alternating; p50/p90/p99/max
of the flushes. Numbers only.

librdkafka writes such a request as 31 TLS records, a write() each. With Nagle on, the first
leaves at once and the rest wait for its ACK; a broker that acknowledges late (Linux's delayed
ACK: 40 ms and more) makes every request wait that long (main before TCP_QUICKACK: p50 44 ms).

    python bench/tls_produce_latency.py --before ../main [--rounds 4] [--flushes 150]
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.security_bench import Broker  # noqa: E402
from cli.certs import make_certs  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--before", type=Path, required=True, help="another checkout, measured alongside")
parser.add_argument("--rounds", type=int, default=4)
parser.add_argument("--flushes", type=int, default=150)
args = parser.parse_args()

with tempfile.TemporaryDirectory() as tmp:
    d = Path(tmp)
    ks = make_certs(d / "certs", ["localhost"], [])
    ca = str(d / "certs" / "ca.pem")
    brokers = [Broker.start("this", REPO, d, ks["localhost"], ca),
               Broker.start("before", args.before.resolve(), d, ks["localhost"], ca)]
    try:
        res = {}
        for r in range(args.rounds):
            for b in (brokers if r % 2 == 0 else brokers[::-1]):
                for nagle in (False, True):
                    topic = f"lat-{r}-{nagle}"
                    for f in b.admin.create_topics([NewTopic(topic, 1, 1)]).values():
                        f.result(30)
                    p = Producer({**b.confs["SASL_SSL"], "acks": "1", "linger.ms": 0, "batch.size": 16384,
                                  "socket.nagle.disable": nagle})
                    p.produce(topic, b"x", partition=0)
                    p.flush(30)
                    times = []
                    for i in range(args.flushes):
                        t = time.perf_counter()
                        for _ in range(15):
                            p.produce(topic, b"x" * 1024, partition=0)
                        p.flush(30)
                        times.append((time.perf_counter() - t) * 1000)
                    res.setdefault((b.label, nagle), []).extend(times)
        for (label, nagle), t in sorted(res.items()):
            s = sorted(t)
            print(f"{label} nagle_off={nagle}: p50 {statistics.median(s):.2f} ms p90 {s[int(len(s)*0.9)]:.2f} "
                  f"p99 {s[int(len(s)*0.99)]:.2f} max {s[-1]:.2f} ({len(s)} flushes)")
    finally:
        for b in brokers:
            b.process.stop()
