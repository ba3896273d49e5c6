#!/usr/bin/env python3
"""What security costs (issue 25's performance section). One broker process with a PLAINTEXT,
a SASL_SSL (SCRAM-SHA-256) and an SSL listener; numbers only, never asserts.

1. Produce and consume over SASL_SSL against PLAINTEXT in the same run, with each client of
   ``--clients`` (default: all but whole):
   * librdkafka: confluent-kafka, batch.size 16 KiB (``--batch-size``), in this process;
   * librdkafka-default: the same with librdkafka's own default batch.size (1,000,000);
   * kafka-python and aiokafka: batch size ``--batch-size``, each in a process of its own
     (bench/_security_client.py) so that its CPU is its own, not mixed with the bench's;
   * whole (or ``--whole``): kbroker's client writing whole requests, produce only (below).
   All with 1 KiB records, linger 5 ms, acks=1, one partition, SCRAM-SHA-256 over SASL_SSL; each
   round produces ``--records`` and reads them back, each client connected and logged in before
   its phase starts. Rounds alternate A B, B A, ... (the listeners, and the clients' order) so
   that neither side always runs first while the machine's load drifts. Per phase it records:
   * records/s (wall clock): what the goal names; but on this 2-core machine the client
     (librdkafka encrypts too) and the broker share the cores, with whatever else runs;
   * the broker's CPU seconds (its threads' run time, /proc/<pid>/task/*/schedstat), and so its records per CPU
     second: what the broker would do with a core of its own, the client's CPU left out;
   * the client's CPU seconds (this process: librdkafka's threads run in it; a Python client's
     process, all its threads, measured by itself around its phase), and so the records
     per CPU second of client and broker together: on this machine, where they share two cores
     with whatever else runs, a steadier view of what bounds records/s than the wall clock;
   * the 1-minute load average when the phase starts.
   It prints each side's medians and ranges, and the SASL_SSL / PLAINTEXT ratios: of the
   medians, and the median and range of the per-round ratios (each SASL_SSL phase against the
   PLAINTEXT phase of its round).
   First numbers (--rounds 6 --whole, 30 Nov 2026, load 1.8-2.1), produce records/s SASL_SSL /
   PLAINTEXT per round, median (range): librdkafka 0.22 (0.19-0.28), librdkafka-default 0.58
   (0.35-0.67), kafka-python 1.00 (0.95-1.07), aiokafka 1.00 (0.94-1.07), whole 0.88 (0.74-1.05);
   consume 0.85, 0.75, 0.94, 0.86. kafka-python and aiokafka write each request whole (one send,
   one TLS record of 15 records) and are bound by their own CPU (31 and 12 µs a record either
   way); the broker spent 3.5 / 4.0 CPU-µs a record on kafka-python's, 2.8 / 3.7 on aiokafka's,
   which keeps one request in flight: a wake-up and a read per request, over TLS an answer's record
   per request (bench/security_instructions.py --clients).
2. SCRAM login round trip (kbroker's client, 4,096 iterations): TCP connect, ApiVersions,
   SaslHandshake and the two SaslAuthenticate round trips, ``--logins`` times; median and p99.
3. A storm of ``--handshakes`` TLS handshakes (50 at a time) against the SSL listener while
   another connection sends Metadata every 5 ms on the PLAINTEXT listener: that connection's
   round-trip p50 / p99 / max before and during the storm.

    python bench/security_bench.py [--rounds 8] [--records 40000] [--logins 200] [--handshakes 500]
                                   [--batch-size 16384] [--batch-messages N] [--whole [--depth 5]] [--nagle-off]
                                   [--in-flight N] [--clients librdkafka,librdkafka-default,kafka-python,aiokafka,whole]
                                   [--repo CHECKOUT] [--before CHECKOUT] [--no-logins] [--no-storm]

``--batch-size``: the producers' batch.size, the same on both listeners. 16 KiB (Kafka's Java
default, what issue 25's goal names) is where librdkafka's TLS is at its worst: it copies a
message's value into the request's buffer only when the buffer's segments already have room for
it, and a request starts with a segment of a few hundred bytes that grows only after about
seventeen messages, so each 1 KiB value of a 16 KiB batch is a segment of its own, hence an
SSL_write, a TLS record and a write() of its own, beside its header's (31 records a request).
With librdkafka's default, 1,000,000, most values are copied and a request takes a few records.
Counted with strace on the producer (20,000 records over SASL_SSL, librdkafka 2.16): batch.size
16384 and batch.num.messages 15 (``--batch-messages``, default batch.size) alike send 15 records
a request in 31 writes of TLS records; message.copy.max.bytes 0 the same (the copy is refused by
the room left in the buffer, not by that limit); librdkafka's defaults 952 records a request in
553 writes (0.58 a record against 2.07); compression.type lz4 2 writes (one segment: the
compressed batch). Over PLAINTEXT every request is one sendmsg (31 iovecs).

``--whole``: another producer kind, measured like the clients (in their rotation): kbroker's
client writing each Produce request in one piece (one SSL_write: one TLS record for 15 records,
as a client that serializes a request before writing it sends it), a 16 KiB batch built once and
sent again and again (as shared/bench/kafka_load.py does), ``--depth`` requests in flight
(Java's default, 5), produce only. The report gives its own ratios, so that what the broker pays
for TLS itself is seen apart from what librdkafka's write pattern adds.

``--nagle-off`` (``--in-flight`` too: both librdkafka lines; ``--batch-messages``: the first only):
the producers with librdkafka's ``socket.nagle.disable`` (its default is Nagle on): each of a
request's 31 TLS records then leaves in a TCP segment of its own, and a broker that
read every segment as it came woke, read and ran the loop's TLS 31 times a request (issue 25's
finding: 7.46 CPU-µs per record against 3.20 with Nagle on); with SO_RCVLOWAT set while a request
is incomplete (broker/network.py) it wakes a few times a request. That shows when the broker is
idle while a request arrives: on a machine busy enough the segments have piled up before it runs
(``--in-flight 1``, a request at a time, keeps it idle between requests). The report gives the
broker's read syscalls and wake-ups (voluntary context switches) per 1,000 records produced.

``--repo``: run the broker from another checkout. ``--before CHECKOUT``: a second broker, from
that checkout (main before a change), runs beside the first; every round measures both (their
order alternating too), and the report adds each phase's per-round ratio this / before: a
before/after comparison under the same load, which on this shared machine moves 2x in minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: confluent-kafka is the bench extra's
    from confluent_kafka.admin import AdminClient

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cli.certs import make_certs  # noqa: E402
from controller.launcher import BrokerProcess, free_port  # noqa: E402


@dataclass
class Broker:
    """One broker process with a PLAINTEXT, a SASL_SSL, an SSL and a SASL_PLAINTEXT listener, the
    SCRAM user ``bench``, and the client settings of its two measured listeners."""
    label: str
    process: BrokerProcess
    ports: dict[str, int]
    admin: "AdminClient"
    confs: dict[str, dict]
    sides: dict[tuple[str, str], "Side"]  # (client, listener) -> its phases

    @classmethod
    def start(cls, label: str, repo: Path, directory: Path, keystore: Path, ca: str) -> "Broker":
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port(), "SSL": free_port(), "SASL_PLAINTEXT": free_port()}
        process = BrokerProcess(directory / label / "data", ports["PLAINTEXT"], 1, {
            "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}, repo=repo).start(60)
        try:
            admin = AdminClient({"bootstrap.servers": process.bootstrap})
            for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bench-secret")]).values():
                f.result(10)
        except BaseException:
            process.stop()
            raise
        confs = {"PLAINTEXT": {"bootstrap.servers": process.bootstrap},
                 "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "sasl_ssl",
                              "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench",
                              "sasl.password": "bench-secret", "ssl.ca.location": ca}}
        return cls(label, process, ports, admin, confs, collections.defaultdict(Side))


def broker_cpu(pid: int) -> float:
    """CPU seconds the process has run (user and system), summed over its threads: the first
    field of /proc/<pid>/task/<tid>/schedstat, in ns (/proc/<pid>/stat's ticks are 10 ms,
    too coarse for a phase of a second). A thread that ended takes its share with it."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def broker_events(pid: int) -> tuple[int, int]:
    """(read syscalls, voluntary context switches) of the broker process so far: /proc/PID/io's
    syscr (its socket reads, and a log's reads) and /proc/PID/task/*/status's voluntary switches
    (for the event loop's thread, a wake-up each), as bench/replication_bench.py counts them."""
    try:
        io = dict(line.split(": ") for line in open(f"/proc/{pid}/io").read().splitlines())
    except OSError:
        return 0, 0
    switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        switches += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return int(io["syscr"]), switches


@dataclass
class Phase:
    records: int
    wall_s: float
    broker_cpu_s: float
    client_cpu_s: float
    load: float
    broker_reads: int = 0  # read syscalls of the broker during the phase
    broker_wakeups: int = 0  # its voluntary context switches

    @property
    def reads_per_k(self) -> float:
        """Broker read syscalls per 1,000 records."""
        return self.broker_reads * 1000 / self.records

    @property
    def wakeups_per_k(self) -> float:
        return self.broker_wakeups * 1000 / self.records

    @property
    def rate(self) -> float:
        return self.records / self.wall_s

    @property
    def broker_rate(self) -> float:
        """Records per broker CPU second."""
        return self.records / max(self.broker_cpu_s, 1e-9)

    @property
    def client_us(self) -> float:
        return self.client_cpu_s / self.records * 1e6

    @property
    def total_rate(self) -> float:
        """Records per CPU second of the client and the broker together: what records/s would be
        with both on cores of their own to share, whatever else runs on this machine's."""
        return self.records / max(self.broker_cpu_s + self.client_cpu_s, 1e-9)


@dataclass
class Side:
    produce: list[Phase] = field(default_factory=list)
    consume: list[Phase] = field(default_factory=list)


def measured(pid: int, records: int, run) -> Phase:
    load = os.getloadavg()[0]
    (r0, w0), c0, p0, t0 = broker_events(pid), broker_cpu(pid), time.process_time(), time.perf_counter()
    run()
    t1, p1, c1, (r1, w1) = time.perf_counter(), time.process_time(), broker_cpu(pid), broker_events(pid)
    return Phase(records, t1 - t0, c1 - c0, p1 - p0, load, r1 - r0, w1 - w0)


def produce_consume(conf: dict, topic: str, n: int, pid: int, batch_size: int = 16384,
                    batch_messages: int = 0, nagle_off: bool = False, in_flight: int = 0) -> tuple[Phase, Phase]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    value = b"x" * 1024
    # batch_messages: batches of that many records under librdkafka's default batch.size instead
    # (see --batch-messages); batch_size 0: librdkafka's default batch.size (1,000,000)
    sizing = ({"batch.num.messages": batch_messages} if batch_messages
              else {"batch.size": batch_size} if batch_size else {})
    # nagle_off (--nagle-off): each write() of librdkafka leaves as a segment of its own
    producer = Producer({**conf, "acks": "1", "linger.ms": 5, **sizing,
                         "queue.buffering.max.messages": 200000,
                         **({"socket.nagle.disable": True} if nagle_off else {}),
                         # in_flight (--in-flight): librdkafka's max.in.flight per connection
                         **({"max.in.flight.requests.per.connection": in_flight} if in_flight else {})})

    def produce() -> None:
        for _ in range(n):
            while True:
                try:
                    producer.produce(topic, value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.001)
        assert producer.flush(120) == 0
    # Each client's connections (TLS handshakes, SCRAM logins, metadata) are made before its phase
    # is measured, on either listener: a SASL_SSL producer's first record took 8-11 ms of client
    # CPU, 3-5 ms of the broker's and 19-49 ms of wall clock (PLAINTEXT: 1, 1 and 3-10 ms), 2-4%
    # of a 40,000-record phase, and logins are the --logins part's to measure, not throughput's.
    # The producer writes one record first, which the consumer skips; the consumer asks the
    # leader for the partition's offsets (on the connection its fetches use) before it is assigned.
    producer.produce(topic, value, partition=0)
    assert producer.flush(60) == 0
    produced = measured(pid, n, produce)
    consumer = Consumer({**conf, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=60)
    consumer.assign([TopicPartition(topic, 0, 1)])

    def consume() -> None:
        got = 0
        while got < n:
            msgs = consumer.consume(10000, 1.0)
            got += sum(1 for m in msgs if not m.error())
    consumed = measured(pid, n, consume)
    consumer.close()
    return produced, consumed


PYTHON_CLIENTS = ("kafka-python", "aiokafka")


def produce_consume_child(kind: str, conf: dict, topic: str, n: int, pid: int, batch_size: int = 16384,
                          linger_ms: int = 5, measure=None) -> tuple[Phase, Phase]:
    """The produce and consume phases of a Python client (``kind``: kafka-python or aiokafka), run
    by bench/_security_client.py in a process of its own: the client's CPU is that process's, the
    broker's is measured here between the "go" this process sends and the result it reads back.
    The same settings as the librdkafka phase: 1 KiB records, acks=1, ``batch_size``, linger 5 ms,
    SCRAM-SHA-256 over SASL_SSL; the rest the client's defaults. ``measure(pid, records, run)``, when
    given, is called around each phase instead (bench/security_instructions.py: callgrind's counts)."""
    import json
    import subprocess

    settings = {"bootstrap": conf["bootstrap.servers"], "topic": topic, "records": n, "batch_size": batch_size,
                "linger_ms": linger_ms}
    if conf.get("security.protocol") == "sasl_ssl":
        settings.update(ca=conf["ssl.ca.location"], username=conf["sasl.username"], password=conf["sasl.password"])
    with tempfile.TemporaryFile("w+") as errors:
        child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_security_client.py")), kind,
                                  json.dumps(settings)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=errors, text=True)
        assert child.stdin is not None and child.stdout is not None

        def line() -> str:
            got = child.stdout.readline()
            if not got:
                child.wait(30)
                errors.seek(0)
                raise RuntimeError(f"{kind} exited {child.returncode}: {errors.read()[-2000:]}")
            return got.strip()

        def run() -> dict:
            child.stdin.write("go\n")
            child.stdin.flush()
            return json.loads(line())

        def phase() -> Phase:
            if (ready := line()) != "ready":
                raise RuntimeError(f"{kind} said {ready!r}")
            if measure is not None:
                measure(pid, n, run)
                return Phase(n, 1, 0, 0, 0)
            load = os.getloadavg()[0]
            (r0, w0), c0 = broker_events(pid), broker_cpu(pid)
            done = run()
            c1, (r1, w1) = broker_cpu(pid), broker_events(pid)
            return Phase(n, done["wall"], c1 - c0, done["cpu"], load, r1 - r0, w1 - w0)
        try:
            produced = phase()
            consumed = phase()
            child.wait(60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    return produced, consumed


class _WholeWrites:
    """A transport whose ``writelines`` hands the buffers to ``write`` joined: one SSL_write per
    request (TLS records of 16 KiB), as a client that serializes a request before writing it
    sends it, where kbroker's client (like librdkafka) writes each buffer on its own."""

    def __init__(self, transport) -> None:
        self._transport = transport

    def writelines(self, buffers) -> None:
        self._transport.write(b"".join(buffers))

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


def whole_batch(batch_size: int, now_ms: int) -> tuple[bytes, int]:
    """The largest batch of 1 KiB records that fits ``batch_size`` (librdkafka's and Java's rule:
    15 records for 16 KiB), and its record count."""
    from protocol.records import Record, build_batch

    count = 1
    while len(build_batch([Record(value=b"x" * 1024)] * (count + 1), now_ms=now_ms)) <= batch_size:
        count += 1
    return build_batch([Record(value=b"x" * 1024)] * count, now_ms=now_ms), count


def produce_whole(bootstrap: str, conf: dict, topic: str, n: int, pid: int, batch_size: int = 16384,
                  depth: int = 5, warmup: int = 1, measure=measured) -> Phase:
    """The second producer kind (``--whole``): kbroker's asyncio client (protocol/client) with each
    Produce request written in one piece (``_WholeWrites``): a batch of 1 KiB records filling
    ``batch_size`` (built once, sent again and again, as shared/bench/kafka_load.py does), acks=1,
    ``depth`` requests in flight (Java's max.in.flight.requests.per.connection), on uvloop. Its
    connection (TLS handshake, SCRAM login, ApiVersions) is made and ``warmup`` requests sent before
    the phase is measured, by ``measure(pid, records, run)`` (``measured``)."""
    from protocol.client import BrokerConnection, Network
    from protocol.client.security import ClientSecurity

    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    secure = conf.get("security.protocol") == "sasl_ssl"
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": conf["sasl.mechanism"], "sasl.username": conf["sasl.username"],
        "sasl.password": conf["sasl.password"], "ssl.truststore.type": "PEM",
        "ssl.truststore.location": conf["ssl.ca.location"], "ssl.endpoint.identification.algorithm": ""}
        if secure else {})

    class Connection(BrokerConnection):
        def connection_made(self, transport) -> None:
            super().connection_made(_WholeWrites(transport))

    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), network=Network(security))
    batch, per_batch = whole_batch(batch_size, int(time.time() * 1000))
    requests = -(-n // per_batch)

    async def produce(count: int) -> None:
        import collections
        pending: collections.deque = collections.deque()
        for _ in range(count):
            if len(pending) >= depth:
                check(await pending.popleft())
            pending.append(asyncio.ensure_future(conn.produce(1, 30000, [(topic, [(0, batch)])])))
        while pending:
            check(await pending.popleft())

    def check(results) -> None:
        error = results[0][1][0][1]
        if error:
            raise RuntimeError(f"Produce answered error {error}")

    try:
        loop.run_until_complete(conn.connect())
        loop.run_until_complete(produce(warmup))  # no metadata needed: one partition, on this broker
        phase = measure(pid, requests * per_batch, lambda: loop.run_until_complete(produce(requests)))
    finally:
        conn.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    return phase


CLIENTS = ("librdkafka", "librdkafka-default", "kafka-python", "aiokafka", "whole")


def client_labels(args: argparse.Namespace) -> dict[str, str]:
    """What each of CLIENTS is, with its version and settings, for the report."""
    from importlib.metadata import version

    import confluent_kafka
    librdkafka = (f"confluent-kafka {version('confluent-kafka')} (librdkafka {confluent_kafka.libversion()[0]})"
                  f"{', socket.nagle.disable' if args.nagle_off else ''}"
                  f"{f', max.in.flight {args.in_flight}' if args.in_flight else ''}, in this process")
    sizing = (f"batch.num.messages {args.batch_messages:,} (batch.size librdkafka's default)" if args.batch_messages
              else f"batch.size {args.batch_size:,}")
    return {"librdkafka": f"{librdkafka}, {sizing}",
            "librdkafka-default": f"{librdkafka}, librdkafka's default batch.size (1,000,000)",
            "kafka-python": f"kafka-python {version('kafka-python')}, batch_size {args.batch_size:,}, "
                            "in a process of its own",
            "aiokafka": f"aiokafka {version('aiokafka')}, max_batch_size {args.batch_size:,}, in a process of its own",
            "whole": f"kbroker's client writing each request whole, a {args.batch_size:,}-byte batch, "
                     f"{args.depth} in flight, produce only, in this process"}


def spread(values: list[float], fmt: str = ",.0f") -> str:
    return f"median {statistics.median(values):{fmt}} (range {min(values):{fmt}}-{max(values):{fmt}})"


def report(what: str, secure: list[Phase], plain: list[Phase]) -> list[str]:
    out = []
    for name, phases in (("PLAINTEXT", plain), ("SASL_SSL", secure)):
        out.append(f"{what} {name}: {spread([p.rate for p in phases])} records/s; broker "
                   f"{spread([p.broker_rate for p in phases])} records per CPU-s "
                   f"({spread([1e6 / p.broker_rate for p in phases], '.2f')} CPU-µs per record); client "
                   f"{spread([p.client_us for p in phases], '.1f')} CPU-µs per record; broker reads "
                   f"{spread([p.reads_per_k for p in phases])}, wake-ups {spread([p.wakeups_per_k for p in phases])} "
                   f"per 1,000 records")
    for label, attr in (("records/s (wall)", "rate"), ("broker records per CPU-s", "broker_rate"),
                        ("records per CPU-s of client and broker together", "total_rate")):
        pairs = [getattr(s, attr) / getattr(p, attr) for s, p in zip(secure, plain)]
        medians = (statistics.median(getattr(s, attr) for s in secure)
                   / statistics.median(getattr(p, attr) for p in plain))
        out.append(f"{what} SASL_SSL / PLAINTEXT, {label}: {medians:.2f} of the medians; per round "
                   f"{spread(pairs, '.2f')}")
    return out


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
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--records", type=int, default=40000)
    parser.add_argument("--logins", type=int, default=200)
    parser.add_argument("--handshakes", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=16384, help="the producers' batch.size (both listeners)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose broker runs (default: this one)")
    parser.add_argument("--before", type=Path, help="another checkout (main before a change): its broker runs beside "
                        "this one's, every round on both, and the report compares them (logins and storm: this one's)")
    parser.add_argument("--batch-messages", type=int, default=0, metavar="N",
                        help="batches of N records (batch.num.messages) under librdkafka's default batch.size instead")
    parser.add_argument("--whole", action="store_true",
                        help="also produce with kbroker's client writing each request whole (after each phase)")
    parser.add_argument("--depth", type=int, default=5, help="--whole: requests in flight")
    parser.add_argument("--nagle-off", action="store_true",
                        help="the producers (both listeners) with librdkafka's socket.nagle.disable: every write a "
                        "segment of its own (over SASL_SSL, a TLS record each: 31 a request)")
    parser.add_argument("--in-flight", type=int, default=0, metavar="N",
                        help="the producers' max.in.flight.requests.per.connection (librdkafka's default: 1,000,000); "
                        "1: a request at a time, the broker idle while the next one arrives")
    parser.add_argument("--clients", default=",".join(CLIENTS[:-1]), metavar="LIST",
                        help=f"which producers and consumers, comma-separated, from {', '.join(CLIENTS)} "
                        "(default: all but whole)")
    parser.add_argument("--no-logins", action="store_true")
    parser.add_argument("--no-storm", action="store_true")
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    if args.whole and "whole" not in clients:
        clients.append("whole")
    if unknown := set(clients) - set(CLIENTS):
        parser.error(f"unknown clients {', '.join(sorted(unknown))} (from {', '.join(CLIENTS)})")
    from confluent_kafka.admin import NewTopic

    trees = [("this", args.repo)] + ([("before", args.before.resolve())] if args.before else [])
    with tempfile.TemporaryDirectory(prefix="security-bench-") as tmp:
        directory = Path(tmp)
        keystores = make_certs(directory / "certs", ["localhost"], [])
        ca = str(directory / "certs" / "ca.pem")
        brokers: list[Broker] = []
        try:
            for label, repo in trees:
                brokers.append(Broker.start(label, repo, directory, keystores["localhost"], ca))
                print(f"{label}: broker from {repo} (pid {brokers[-1].process.pid})", flush=True)
            labels = client_labels(args)
            print(f"{args.rounds} rounds of {args.records:,} records (1 KiB), acks=1, linger 5 ms; "
                  f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}", flush=True)
            for client in clients:
                print(f"{client}: {labels[client]}", flush=True)
            time.sleep(1)
            loads = []
            for r in range(args.rounds):
                # A B, B A, ... between the protocols, between the clients, and between the brokers
                # with --before
                for client in (clients if r % 2 == 0 else clients[::-1]):
                    order = [(b, name) for b in (brokers if r % 2 == 0 else brokers[::-1])
                             for name in (("PLAINTEXT", "SASL_SSL") if r % 2 == 0 else ("SASL_SSL", "PLAINTEXT"))]
                    for broker, name in order:
                        topic = f"bench-{client}-{name.lower()}-{r}"
                        for f in broker.admin.create_topics([NewTopic(topic, 1, 1)]).values():
                            f.result(30)
                        side, conf, pid = broker.sides[client, name], broker.confs[name], broker.process.pid
                        if client == "whole":
                            w = produce_whole(conf["bootstrap.servers"], conf, topic, args.records, pid,
                                              args.batch_size, args.depth)
                            side.produce.append(w)
                            loads.append(w.load)
                            print(f"round {r + 1}{' ' + broker.label if len(brokers) > 1 else ''} {client} {name}: "
                                  f"produce {w.rate:,.0f} records/s (broker {w.broker_rate:,.0f} per CPU-s, "
                                  f"{1e6 / w.broker_rate:.2f} CPU-µs per record; client {w.client_us:.1f} CPU-µs "
                                  f"per record); load {w.load:.2f}", flush=True)
                            continue
                        if client in PYTHON_CLIENTS:
                            produced, consumed = produce_consume_child(client, conf, topic, args.records, pid,
                                                                       args.batch_size)
                        else:
                            produced, consumed = produce_consume(conf, topic, args.records, pid,
                                                                 args.batch_size if client == "librdkafka" else 0,
                                                                 args.batch_messages if client == "librdkafka" else 0,
                                                                 args.nagle_off, args.in_flight)
                        side.produce.append(produced)
                        side.consume.append(consumed)
                        loads += [produced.load, consumed.load]
                        print(f"round {r + 1}{' ' + broker.label if len(brokers) > 1 else ''} {client} {name}: "
                              f"produce {produced.rate:,.0f} records/s (broker {produced.broker_rate:,.0f} per CPU-s, "
                              f"{1e6 / produced.broker_rate:.2f} CPU-µs, {produced.reads_per_k:,.0f} reads and "
                              f"{produced.wakeups_per_k:,.0f} wake-ups per 1,000 records; client "
                              f"{produced.client_us:.1f} CPU-µs per record), consume {consumed.rate:,.0f} records/s "
                              f"(broker {consumed.broker_rate:,.0f} per CPU-s, {1e6 / consumed.broker_rate:.2f} "
                              f"CPU-µs per record; client {consumed.client_us:.1f} CPU-µs per record); "
                              f"load {produced.load:.2f}", flush=True)
            for broker in brokers:
                prefix = f"{broker.label}: " if len(brokers) > 1 else ""
                for client in clients:
                    print(f"{prefix}{client}: {labels[client]}")
                    for what in ("produce",) if client == "whole" else ("produce", "consume"):
                        for line in report(f"{client} {what}", getattr(broker.sides[client, "SASL_SSL"], what),
                                           getattr(broker.sides[client, "PLAINTEXT"], what)):
                            print(prefix + line)
            if len(brokers) > 1:
                this, before = brokers
                for client in clients:
                    for what in ("produce",) if client == "whole" else ("produce", "consume"):
                        for name in ("SASL_SSL", "PLAINTEXT"):
                            for label, attr in (("records/s (wall)", "rate"), ("broker records per CPU-s", "broker_rate"),
                                                ("records per CPU-s of client and broker", "total_rate")):
                                pairs = [getattr(a, attr) / getattr(b, attr) for a, b in
                                         zip(getattr(this.sides[client, name], what),
                                             getattr(before.sides[client, name], what))]
                                print(f"{client} {what} {name} this / before, {label}: per round {spread(pairs, '.2f')}")
            print(f"load average (1 min) at the phases' starts: {spread(loads, '.2f')}")
            first = brokers[0]
            if not args.no_logins:
                times = asyncio.run(logins(first.ports["SASL_PLAINTEXT"], args.logins))
                s = sorted(times)
                print(f"SCRAM-SHA-256 login (4096 iterations, connect + ApiVersions + handshake + 2 authenticate): "
                      f"median {statistics.median(s):.2f} ms, p99 {s[int(len(s) * 0.99)]:.2f} ms ({len(s)} logins)")
            if not args.no_storm:
                before, during = storm_latency(first.ports["PLAINTEXT"], first.ports["SSL"], args.handshakes)
                print(f"Metadata round trip before the storm: {percentiles(before)}")
                print(f"Metadata round trip during {args.handshakes} TLS handshakes: {percentiles(during)}")
        finally:
            for broker in brokers:
                broker.process.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
