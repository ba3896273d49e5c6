"""``kbroker loadgen demo`` (``make loadtest``): the whole load-testing loop on this machine.

Starts a controller and three brokers (controller/launcher.py's LocalCluster), records
``--record-seconds`` (20) of traffic from a small real client workload — kafka-python producing
and consuming, kcat producing — through the tap (``kbroker record``), replays it ×``--scale`` (10)
at ``--speed max`` with acks=all on Spark (``kbroker loadgen replay``), and leaves the report under
``--dir``. A server-side command like ``serve``: it starts brokers; the replay itself is a client.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from cli.common import UsageError

TOPIC = "demo"


def _kbroker() -> str:
    return str(Path(sys.executable).with_name("kbroker"))


def run(args: argparse.Namespace) -> int:
    try:
        import kafka  # noqa: F401  (the demo drives it)
    except ImportError:
        raise UsageError("the demo drives kafka-python: pip install kafka-python (make loadtest installs it)") from None
    kcat = shutil.which("kcat")
    if kcat is None:
        raise UsageError("the demo drives kcat: apt-get install kcat (make loadtest installs it)")
    from controller.launcher import LocalCluster, free_port, port_open

    base = Path(args.dir or Path("loadgen-demo") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    base.mkdir(parents=True, exist_ok=True)
    say = lambda text: print(f"demo: {text}", file=sys.stderr, flush=True)  # noqa: E731
    say(f"starting a controller and three brokers under {base / 'cluster'}")
    cluster = LocalCluster(base / "cluster", 3)
    cluster.start()
    tap_proc = None
    try:
        first = next(iter(cluster.brokers.values())).bootstrap
        port = free_port()
        say(f"recording through the tap on 127.0.0.1:{port} for {args.record_seconds:g} s")
        tap_proc = subprocess.Popen([_kbroker(), "record", "--listen", f"127.0.0.1:{port}", "--upstream", first,
                                     "--out", str(base / "traffic"), "--log-level", "WARNING"])
        deadline = time.monotonic() + 30
        while not port_open(port):
            if time.monotonic() > deadline or tap_proc.poll() is not None:
                raise UsageError("the tap did not start")
            time.sleep(0.05)
        _client_workload(f"127.0.0.1:{port}", kcat, args.record_seconds, args.rate)
        tap_proc.send_signal(signal.SIGTERM)
        tap_proc.wait(30)
        say(f"replaying the recording x{args.scale} at --speed max, acks=all, RF=3")
        out = base / "report"
        code = subprocess.run([_kbroker(), "loadgen", "replay", "--master", args.master, "--recording",
                               str(base / "traffic"), "--bootstrap", cluster.bootstrap, "--scale", str(args.scale),
                               "--speed", "max", "--acks", "all", "--replication-factor", "3",
                               "--topic-map", f"{TOPIC}={TOPIC}-replayed", "--out", str(out)],
                              env=dict(os.environ, PYSPARK_PYTHON=sys.executable)).returncode
        say(f"report: {out / 'report.html'}")
        return code
    finally:
        if tap_proc is not None and tap_proc.poll() is None:
            tap_proc.kill()
        cluster.stop()


def _client_workload(bootstrap: str, kcat: str, seconds: float, rate: float) -> None:
    """kafka-python produces (acks=all, keyed) and consumes, kcat produces lines: ``seconds`` long."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="demo-admin")
    try:
        admin.create_topics([NewTopic(TOPIC, 6, 3)])
    except Exception as exc:  # TopicAlreadyExistsError on a second run into the same --dir
        print(f"demo: {exc}", file=sys.stderr)
    admin.close()
    stop = threading.Event()

    def consume() -> None:
        consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, client_id="demo-consumer", group_id=None,
                                 auto_offset_reset="earliest", consumer_timeout_ms=500)
        while not stop.is_set():
            for _ in consumer:
                pass
        consumer.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    lines = subprocess.Popen([kcat, "-b", bootstrap, "-P", "-t", TOPIC, "-X", "client.id=demo-kcat", "-X", "linger.ms=20"],
                             stdin=subprocess.PIPE)
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="demo-kafka-python", acks="all", linger_ms=10)
    start = time.monotonic()
    i = 0
    assert lines.stdin is not None
    while (now := time.monotonic() - start) < seconds:
        due = int(now * rate)
        while i < due:
            producer.send(TOPIC, key=b"user-%d" % (i % 97), value=b"event %d " % i + b"x" * 180)
            if i % 4 == 0:
                lines.stdin.write(b"kcat line %d\n" % i)
            i += 1
        lines.stdin.flush()
        time.sleep(0.01)
    producer.flush()
    producer.close()
    lines.stdin.close()
    lines.wait(60)
    stop.set()
    reader.join(10)
