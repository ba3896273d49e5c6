#!/usr/bin/env python3
"""Replicated produce: three brokers on this machine, RF=3, acks=all, min.insync.replicas=2.

Three broker processes without a controller of their own (process.roles=broker) get a
4-partition topic from the static controller (leaders spread over the brokers), then shared/bench/kafka_load.py produces
100-byte records in ~16 KiB batches with acks=-1:

1. at full load (4 connections, depth 8): records/s, p50/p99, each broker's CPU µs per
   request (``--server-pid`` of the broker leading the most partitions; all three are
   sampled for CPU here from /proc);
2. open loop at half that rate (bench/paced_load.py: the same requests, sent on a fixed
   schedule at half the round's full-load request rate over 4 connections, whatever comes
   back; latency from each request's scheduled time, so a stall counts for every request it
   held up): p50/p99/max, the machine's busy cores, each broker's CPU per request;
3. closed loop at about half that rate (fewer requests in flight: kafka_load.py has no rate
   limit, so concurrency is stepped down until the rate is nearest half): p50/p99. Not half
   the machine's load: CPU per request rises as concurrency falls (fewer requests per read,
   per follower fetch, per wake-up), so the closed loop at "half rate" keeps the cores busy.
Steps 2 and 3 each run twice: alone (the load's own latency, CPU and the goal's p99), then with
the end-to-end probe (producer send -> consumer receive) alongside; step 3's second run repeats
the concurrency found nearest half.

Every step also reads each broker's run-queue wait (/proc/PID/task/*/schedstat: time its
threads were runnable but not running, ms per s of wall time) beside its CPU: on 2 cores
shared by 3 brokers and the load, waiting for a core is what a latency tail is made of; and
each broker's read and write system calls (a log append's pwrite among the writes) and
voluntary context switches (the event loop's wake-ups) per produce request of the load
(/proc/PID/io, /proc/PID/task/*/status): what a request costs rises with these, not its bytes.

End-to-end latency: kafka_load.py builds its batches once, before the run, so its records carry
no send time. During the second run of each half-rate step a probe therefore runs alongside it in this process:
a confluent-kafka (librdkafka) producer, acks=all, linger.ms=0, sends one 100-byte record every
millisecond to a second topic on the same three brokers (3 partitions, RF=3, one led by each
broker), the value holding the send time (CLOCK_MONOTONIC, ns); a confluent-kafka consumer
(fetch defaults: fetch.wait.max.ms=500, fetch.min.bytes=1) reads that topic concurrently and
takes arrival - send for every probe record (the first second, the clients' start, not counted).
The probe adds 1,000 rec/s to a half load of ~350 k rec/s on a quiet machine, but up to
1,000 requests/s to its ~2,900 (one record each while none waits: linger.ms=0), each
replicated on its own, a follower round trip per record: alone it took ~0.2 cores per broker
on a loaded machine (busy cores 1.30 -> 1.80 with it at an open-loop half step): which is why each
half step is measured without it first. The probed steps' CPU per request (the brokers' CPU over the load's
requests) holds the probe's cost too; a second figure counts its records as requests. Its
send -> acknowledgement is printed too (p50, p99, p99.9, and the worst 1 s window's p99, the
statistic of librdkafka's rtt figure beside it: a max of ~24 p99s, a rarer quantile than the
p99 of all): the share of the replicated produce in the end-to-end figure.

Before each round, bench/vcpu_steadiness.py runs a bare loop per core on the idle machine for
3 s and prints the share of 100 ms windows in which every core ran >= 1.4x slower at once: the
closed-loop half step's p99 is made of such cluster-wide windows (every partition's latency
rises together, the brokers' CPU unchanged, their throughput halved), which the bare loop shows
with no broker running: a round's tail is read beside that figure.

Memory: on a VM whose host takes back the guest's free memory (free page reporting,
/sys/module/page_reporting: reported_kib grows), a page the brokers' page cache grows into costs
a host fault on first touch: measured here, a bare 16 KiB append loop cost ~10 µs a pwrite for its
first ~3.5 GiB of page cache and 35-45 µs after (anonymous memory: ~3 µs a page for the first ~6
GiB, ~9 after). A round writes ~10 GiB of page cache (three copies of every record), so most of its
appends pay that; each round prints how much memory the host took back during it. The brokers'
``kbroker.log.page.cache.retain.bytes`` (with ``kbroker.log.writeback.bytes``) keeps their page
cache small so its pages are reused warm: ``--after-config`` measures it.

During each run every follower's lag (leader LEO - follower LEO, via ListOffsets with the
debugging replica id) is sampled every 100 ms. Prints medians over rounds; never asserts.

``--before PATH`` runs the same rounds against the brokers of another checkout too
(``git worktree add /tmp/before <commit>``), before and after alternating within each round,
and prints both with the after/before ratio of each figure's medians: a same-run A/B, since
figures taken minutes apart on this machine differ by up to 40 %. Each broker's CPU is also
given per produce request of the whole run (its CPU seconds / the load's requests): every broker
leads some partitions and follows others, so it is the cluster's cost spread per broker.

``--broker-config KEY=VALUE`` sets a broker setting for both trees; ``--after-config KEY=VALUE``
for the after tree only, so ``--before`` naming this same checkout measures a setting alone
(``--after-config log.preallocate=true``: segment files reserved on disk, storage/file_records.py).

    python bench/replication_bench.py [--rounds 3] [--duration 8] [--before PATH] [--closed-steps 2x4,2x2,1x2,1x1]
                                      [--broker-config KEY=VALUE] [--after-config KEY=VALUE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.launcher import BrokerProcess, free_port  # noqa: E402
from controller.static import PartitionAssignment, StaticController  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402

import vcpu_steadiness  # noqa: E402  (bench/, the script's directory, is on sys.path)

LOAD = REPO.parent / "shared" / "bench" / "kafka_load.py"
PACED = Path(__file__).resolve().parent / "paced_load.py"  # this tree's, for both sides of --before
TOPIC = "rbench"
PARTITIONS = 4
OPEN_CONNECTIONS = 4  # the open loop's (paced_load.py), replication_tail's open@RATE too
PROBE_TOPIC = "rbench-e2e"
PROBE_PARTITIONS = 3
PROBE_INTERVAL_S = 0.001
STEADINESS_S = 3.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


def rf3(topic: str, partitions: int) -> list[PartitionAssignment]:
    """``topic`` on brokers 1-3, RF=3, leaders spread."""
    return [PartitionAssignment(topic, p, leader=1 + p % 3, leader_epoch=0,
                                isr=[1 + (p + k) % 3 for k in range(3)], replicas=[1 + (p + k) % 3 for k in range(3)])
            for p in range(partitions)]


async def assign_rf3(brokers: dict[int, tuple[str, int]]) -> None:
    """The bench's topics, RF=3 (``rf3``), sent as a static controller's LeaderAndIsr."""
    ctrl = StaticController(brokers)
    try:
        await ctrl.assign(rf3(TOPIC, PARTITIONS) + rf3(PROBE_TOPIC, PROBE_PARTITIONS))
    finally:
        await ctrl.close()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores, every process: /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def run_queue_wait_seconds(pid: int) -> float:
    """Seconds the process's threads spent runnable, waiting for a core (schedstat's second
    field, summed over /proc/PID/task/*)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def events(pid: int) -> tuple[int, int, int]:
    """(read syscalls, write syscalls, voluntary context switches) of the whole process so far:
    /proc/PID/io's syscr/syscw (socket reads and writes, a log append's pwrite) and the
    voluntary switches of /proc/PID/task/*/status (a thread going to sleep: for the event
    loop's thread, one wake-up each)."""
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    switches += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return int(io["syscr"]), int(io["syscw"]), switches


def paced(bootstrap: str, pid: int, duration: float, rate: float, connections: int, slow_out: Path | None = None) -> dict:
    """bench/paced_load.py: the open-loop step (see the module doc); ``slow_out``: its --slow-out."""
    cmd = [sys.executable, str(PACED), "--bootstrap", bootstrap, "--topic", TOPIC, "--partitions", str(PARTITIONS),
           "--connections", str(connections), "--rate", str(rate), "--acks", "-1", "--record-size", "100",
           "--records-per-batch", "148", "--duration", str(duration), "--server-pid", str(pid), "--uvloop"]
    if slow_out is not None:
        cmd += ["--slow-out", str(slow_out)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * 6 + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"paced_load.py failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


def load(bootstrap: str, pid: int, duration: float, connections: int, depth: int) -> dict:
    cmd = [sys.executable, str(LOAD), "--mode", "produce", "--bootstrap", bootstrap, "--topic", TOPIC,
           "--no-create", "--partitions", str(PARTITIONS), "--connections", str(connections), "--depth", str(depth),
           "--acks", "-1", "--record-size", "100", "--records-per-batch", "148", "--duration", str(duration),
           "--server-pid", str(pid), "--uvloop"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * 6 + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"kafka_load.py failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


async def leo(ctrl: StaticController, broker: int) -> dict[int, int]:
    resp = await (await ctrl.conn(broker)).request(ApiKey.LIST_OFFSETS, {"replica_id": -2, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": p, "timestamp": -1} for p in range(PARTITIONS)]}]},
        version=1)
    return {p.partition_index: p.offset for p in resp.topics[0].partitions if p.error_code == 0}


class LagSampler:
    """Samples follower lag every 100 ms on its own thread and event loop."""

    def __init__(self, brokers: dict[int, tuple[str, int]], assignments: list[PartitionAssignment]) -> None:
        self.brokers = brokers
        self.assignments = assignments
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        ctrl = StaticController(self.brokers)
        try:
            while not self._stop.is_set():
                leos = {b: await leo(ctrl, b) for b in self.brokers}
                for a in self.assignments:
                    lead = leos[a.leader].get(a.partition)
                    for f in a.replicas:
                        if f != a.leader and lead is not None and a.partition in leos[f]:
                            self.samples.append(lead - leos[f][a.partition])
                await asyncio.sleep(0.1)
        finally:
            await ctrl.close()

    def __enter__(self) -> "LagSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


class EndToEndProbe:
    """Producer send -> consumer receive, per record, for one load step (see the module doc).

    Each record's value is (step, send time in ns), padded to 100 bytes; the consumer reads the
    probe topic from the beginning and keeps only this step's records, so the steps of a round
    can share the topic."""

    VALUE = struct.Struct(">qq")

    def __init__(self, bootstrap: str, step: int, interval_s: float = PROBE_INTERVAL_S) -> None:
        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.step = step
        self.latencies_ns: list[int] = []
        self.acks_ns: list[int] = []
        self.ack_sent_ns: list[int] = []  # the send time of each of acks_ns (for its per-second p99s)
        self.warm_until_ns = 0
        self.counted = 0  # send -> acks=all acknowledgement, the producer's share
        self.sent = 0
        self.errors = 0
        self._stop_sending = threading.Event()
        self._stop_reading = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]
        self._subscribed = threading.Event()
        # librdkafka's own view (statistics.interval.ms), per broker and 1 s window: its
        # ProduceRequest round trip (rtt: written -> response read, on its C broker thread) and
        # the time records wait in the producer before that (int_latency + outbuf_latency)
        self.rtt_windows: list[tuple[float, float]] = []  # (p50, p99) in ms
        self.queue_p99_ms: list[float] = []

    def _produce(self) -> None:
        from confluent_kafka import Producer
        def stats(raw: str) -> None:
            now = time.monotonic_ns()
            if now < self.warm_until_ns:
                return
            for b in json.loads(raw).get("brokers", {}).values():
                if b.get("nodeid", -1) < 0 or not b.get("rtt", {}).get("cnt"):
                    continue
                self.rtt_windows.append((b["rtt"]["p50"] / 1e3, b["rtt"]["p99"] / 1e3))
                self.queue_p99_ms.append((b["int_latency"]["p99"] + b["outbuf_latency"]["p99"]) / 1e3)

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0,
                             "enable.idempotence": False, "socket.nagle.disable": True,
                             "statistics.interval.ms": 1000, "stats_cb": stats})

        def delivered(err, msg) -> None:
            if err is not None:
                self.errors += 1
            else:
                sent = self.VALUE.unpack_from(msg.value())[1]
                if sent >= self.warm_until_ns:
                    self.acks_ns.append(time.monotonic_ns() - sent)
                    self.ack_sent_ns.append(sent)
        pad = b"\0" * (100 - self.VALUE.size)
        next_at = time.monotonic()
        i = 0
        while not self._stop_sending.is_set():
            # Waiting in poll, not sleep: an acknowledgement is taken when it arrives (its
            # delivery callback runs in poll); after a sleep it was taken up to one interval late.
            # (confluent-kafka truncates the timeout to whole milliseconds: a wait under 1 ms is
            # poll(0), which spun here at the 1 ms interval; under 1 ms left, poll once and sleep)
            now = time.monotonic()
            while now < next_at:
                if next_at - now >= 0.001:
                    producer.poll(next_at - now)
                else:
                    producer.poll(0)
                    time.sleep(next_at - now)
                now = time.monotonic()
            next_at += self.interval_s
            stamp = time.monotonic_ns()
            self.counted += stamp >= self.warm_until_ns
            producer.produce(PROBE_TOPIC, self.VALUE.pack(self.step, stamp) + pad,
                             partition=i % PROBE_PARTITIONS, on_delivery=delivered)
            producer.poll(0)
            i += 1
        self.sent = i
        producer.flush(10)

    def _consume(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"rbench-e2e-{os.getpid()}",
                             "enable.auto.commit": False, "socket.nagle.disable": True})
        consumer.assign([TopicPartition(PROBE_TOPIC, p, OFFSET_BEGINNING) for p in range(PROBE_PARTITIONS)])
        self._subscribed.set()
        try:
            idle_since = None
            while True:
                # poll, not consume(num_messages=N): that one waits for N messages or its timeout
                m = consumer.poll(0.1)
                arrived = time.monotonic_ns()
                msgs = [m] if m is not None else []
                for m in msgs:
                    if m.error() is None:
                        step, sent = self.VALUE.unpack_from(m.value())
                        if step == self.step and sent >= self.warm_until_ns:
                            self.latencies_ns.append(arrived - sent)
                if self._stop_reading.is_set():
                    # after the producer stopped: read until everything sent arrived, or 5 s idle
                    if len(self.latencies_ns) >= self.counted:
                        break
                    if msgs:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > 5:
                        break
        finally:
            consumer.close()

    def __enter__(self) -> "EndToEndProbe":
        # Records sent in the first second are not counted: the clients' start (metadata,
        # connections, the consumer's first offsets) is in their latency, as in kafka_load's
        # warm-up second.
        self.warm_until_ns = time.monotonic_ns() + 1_000_000_000
        self._threads[1].start()
        self._subscribed.wait(10)
        self._threads[0].start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop_sending.set()
        self._threads[0].join(20)
        self._stop_reading.set()
        self._threads[1].join(20)

    def summary(self) -> dict:
        def pct(values: list[int], q: float) -> float | None:
            values = sorted(values)
            return values[min(len(values) - 1, int(q * len(values)))] / 1e6 if values else None
        # librdkafka's rtt figure is the worst of its per-second, per-broker p99s (about 24 windows
        # in an 8 s step): a much rarer quantile than the p99 of all. The same statistic over the
        # probe's own send -> ack times (per second, all brokers), and their p99.9, to compare.
        by_second: dict[int, list[int]] = {}
        for sent, ack in zip(self.ack_sent_ns, self.acks_ns):
            by_second.setdefault(sent // 1_000_000_000, []).append(ack)
        worst_second = max((pct(v, 0.99) or 0.0 for v in by_second.values() if len(v) >= 100), default=None)
        return {"e2e_p50_ms": pct(self.latencies_ns, 0.50), "e2e_p99_ms": pct(self.latencies_ns, 0.99),
                "e2e_max_ms": pct(self.latencies_ns, 1.0), "e2e_records": len(self.latencies_ns),
                "e2e_sent": self.counted, "e2e_errors": self.errors,
                "ack_p50_ms": pct(self.acks_ns, 0.50), "ack_p99_ms": pct(self.acks_ns, 0.99),
                "ack_p999_ms": pct(self.acks_ns, 0.999), "ack_worst_second_p99_ms": worst_second,
                # librdkafka's figures: the median window's p50, the worst window's p99
                "rtt_p50_ms": statistics.median(w[0] for w in self.rtt_windows) if self.rtt_windows else None,
                "rtt_p99_ms": max(w[1] for w in self.rtt_windows) if self.rtt_windows else None,
                "queue_p99_ms": max(self.queue_p99_ms) if self.queue_p99_ms else None}


def add_config_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting for every broker of both trees (repeatable)")
    ap.add_argument("--after-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting for the after tree's brokers only: with --before naming this same "
                         "checkout, an A/B of the setting alone (e.g. log.preallocate=true)")


def broker_overrides(args, name: str) -> dict:
    """The brokers' settings of one tree ("before" or "after"): the bench's, then --broker-config,
    then (after only) --after-config."""
    overrides: dict = {"process.roles": "broker", "min.insync.replicas": 2, "log.retention.check.interval.ms": 3600000}
    for item in args.broker_config + (args.after_config if name == "after" else []):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{item!r} is not KEY=VALUE")
        overrides[key.strip()] = value.strip()
    return overrides


def one_step(args, procs: dict, brokers: dict, out: dict, step: int, label: str, connections: int, depth: int,
             probed: bool) -> dict:
    """One step of a round: the load at this concurrency (depth 0: the open loop at half the full
    step's request rate), with the end-to-end probe alongside when ``probed``."""
    bootstrap = procs[1].bootstrap
    all_bootstrap = ",".join(p.bootstrap for p in procs.values())
    before = {i: cpu_seconds(p.pid) for i, p in procs.items()}
    waited = {i: run_queue_wait_seconds(p.pid) for i, p in procs.items()}
    counted = {i: events(p.pid) for i, p in procs.items()}
    busy_before, wall_before = machine_busy_seconds(), time.monotonic()
    e2e = (EndToEndProbe(all_bootstrap, step, args.probe_interval_ms / 1000) if probed
           else contextlib.nullcontext())
    with LagSampler(brokers, rf3(TOPIC, PARTITIONS)) as lag, e2e:
        if label.startswith("open"):  # half the full step's request rate, on a schedule
            res = paced(bootstrap, procs[1].pid, args.duration, out["full"][0]["requests_per_s"] / 2,
                        connections)
        else:
            res = load(bootstrap, procs[1].pid, args.duration, connections, depth)
    if probed:
        res.update(e2e.summary())
    waited = {i: run_queue_wait_seconds(p.pid) - waited[i] for i, p in procs.items()}
    counted = {i: tuple(b - a for a, b in zip(counted[i], events(p.pid))) for i, p in procs.items()}
    after = {i: cpu_seconds(p.pid) for i, p in procs.items()}
    # the cores the machine had busy (brokers, load, probe, and anything else running here)
    res["machine_busy_cores"] = round((machine_busy_seconds() - busy_before) / (time.monotonic() - wall_before), 2)
    window = args.duration + 1.0  # the tool's warm-up second is in the CPU window too
    res["cpu_util_per_broker"] = {i: round((after[i] - before[i]) / window, 2) for i in procs}
    res["runq_wait_ms_per_s"] = {i: round(waited[i] / window * 1e3) for i in procs}
    # per produce request of the load (the probe's, when it runs, are not in the denominator:
    # see cpu_us_per_request_per_broker_incl_probe), the window's warm-up second included
    # in the counts as in the CPU figures: reads, writes, wake-ups per broker
    n = max(1, res.get("requests_total") or res.get("requests") or 0)
    res["events_per_request_per_broker"] = {
        i: "/".join(f"{c / n:.2f}" for c in counted[i]) for i in procs}
    res["cpu_us_per_request_per_broker"] = {
        i: round((after[i] - before[i]) / max(1, res.get("requests") or 0) * 1e6, 1) for i in procs}
    if probed:
        # the probe's records are produce requests too (linger.ms=0, one record each but
        # when one waits behind another), each replicated on its own: its CPU is in the
        # brokers' figures above, its requests not in their denominator
        n = max(1, (res.get("requests") or 0) + (e2e.sent or 0))
        res["cpu_us_per_request_per_broker_incl_probe"] = {
            i: round((after[i] - before[i]) / n * 1e6, 1) for i in procs}
    res["lag_max"] = max(lag.samples) if lag.samples else None
    res["lag_median"] = statistics.median(lag.samples) if lag.samples else None
    res["concurrency"] = f"{connections}x{depth}" if depth else f"open loop, {res['connections']} connections"
    return res


def nearest_half(out: dict[str, list[dict]]) -> dict:
    """The closed-loop step whose rate is nearest half the full step's."""
    target = out["full"][0]["records_per_s"] / 2
    return min(out["half"], key=lambda x: abs(x["records_per_s"] - target))


def one_round(args, repo: Path = REPO, name: str = "after") -> dict:
    root = Path(tempfile.mkdtemp(prefix="kbroker-rbench-"))
    procs = {i: BrokerProcess(root / f"data{i}", port=free_port(), broker_id=i, repo=repo,
                              overrides=broker_overrides(args, name)) for i in (1, 2, 3)}
    try:
        for p in procs.values():
            p.start()
        brokers = {i: ("127.0.0.1", p.port) for i, p in procs.items()}
        asyncio.run(assign_rf3(brokers))
        out: dict[str, list[dict]] = {}
        # the open-loop step twice: alone (its latency and CPU per request are the load's own), then
        # with the end-to-end probe, whose ~1,000 single-record requests/s cost the brokers more
        # than the load's own at half rate does on a quiet machine (see the module doc)
        steps = [("full", 4, 8, False), ("open", OPEN_CONNECTIONS, 0, False), ("open-e2e", OPEN_CONNECTIONS, 0, True)] + [
            ("half", c, d, False) for c, d in args.half_steps]
        for step, (label, connections, depth, probed) in enumerate(steps):
            out.setdefault(label, []).append(
                one_step(args, procs, brokers, out, step, label, connections, depth, probed))
        # so too the closed-loop step nearest half the full rate: alone (the load's own latency),
        # then once more with the probe (end-to-end latency)
        connections, depth = (int(v) for v in nearest_half(out)["concurrency"].split("x"))
        out["half-e2e"] = [one_step(args, procs, brokers, out, len(steps), "half-e2e", connections, depth, True)]
        return out
    finally:
        for p in procs.values():
            p.stop()
        shutil.rmtree(root, ignore_errors=True)


def fmt(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms:.2f}"


def tree(path: Path) -> str:
    out = subprocess.run(["git", "-C", str(path), "log", "-1", "--format=%h %s"], capture_output=True, text=True)
    return f"{path} ({out.stdout.strip()[:80]})"


def e2e_line(x: dict) -> str:
    return (f"end-to-end p50 {fmt(x['e2e_p50_ms'])} p99 {fmt(x['e2e_p99_ms'])} max {fmt(x.get('e2e_max_ms'))} ms "
            f"({x['e2e_records']} of {x['e2e_sent']} probe records; send -> ack p50 {fmt(x['ack_p50_ms'])} p99 "
            f"{fmt(x['ack_p99_ms'])} p99.9 {fmt(x['ack_p999_ms'])} worst-second p99 "
            f"{fmt(x['ack_worst_second_p99_ms'])} ms; librdkafka rtt p50 {fmt(x['rtt_p50_ms'])} worst-second p99 "
            f"{fmt(x['rtt_p99_ms'])} ms, queued p99 {fmt(x['queue_p99_ms'])} ms)")


Steps = tuple[list[dict], list[dict], list[dict], list[dict], list[dict]]


def reported_gib() -> float | None:
    """What the host has taken back of this VM's free memory so far (free page reporting), GiB;
    None where the kernel does not report free pages."""
    try:
        return int(Path("/sys/module/page_reporting/parameters/reported_kib").read_text()) / (1 << 20)
    except (OSError, ValueError):
        return None


def run_rounds(args, trees: dict[str, Path], steadiness: dict[str, list[dict]]) -> dict[str, Steps]:
    """Per tree: the full-load, open-loop (alone, then with the probe) and nearest-half
    closed-loop step (alone, then with the probe) of each round; ``steadiness`` gets, per tree,
    the vcpu_steadiness figure taken before each of its rounds."""
    results: dict[str, Steps] = {name: ([], [], [], [], []) for name in trees}
    for r in range(args.rounds):
        for name, repo in trees.items():
            # the idle machine's own slow windows just before the round (vcpu_steadiness: a round
            # taken while the host slows every core now and then has a worse tail, whatever the broker)
            steady = vcpu_steadiness.measure(STEADINESS_S)
            steadiness.setdefault(name, []).append(steady)
            print(f"round {r + 1} {name}: {vcpu_steadiness.line(steady)}", flush=True)
            taken = reported_gib()
            res = one_round(args, repo, name)
            if taken is not None:
                print(f"round {r + 1} {name}: free memory the host took back from this VM during the round "
                      f"(free page reporting): {reported_gib() - taken:.1f} GiB", flush=True)
            full, opens, probed, halves, halves_e2e = results[name]
            f, o, oe, half, he = res["full"][0], res["open"][0], res["open-e2e"][0], nearest_half(res), res["half-e2e"][0]
            full.append(f)
            opens.append(o)
            probed.append(oe)
            halves.append(half)
            halves_e2e.append(he)
            print(f"round {r + 1} {name}: full {f['records_per_s']:>9,.0f} rec/s p50 {f['p50_ms']:.2f} p99 "
                  f"{f['p99_ms']:.2f} ms cpu/req(leader of p1,p4) {f['server_cpu_us_per_request']:.0f} µs, cpu µs/req "
                  f"per broker {f['cpu_us_per_request_per_broker']}, cpu util {f['cpu_util_per_broker']}, run-queue "
                  f"wait ms/s {f['runq_wait_ms_per_s']}, reads/writes/wake-ups per request per broker "
                  f"{f['events_per_request_per_broker']}, busy cores {f['machine_busy_cores']}, "
                  f"lag max {f['lag_max']} median {f['lag_median']}", flush=True)
            print(f"  open loop at {o['target_requests_per_s']:,.0f} req/s: {o['records_per_s']:>9,.0f} rec/s p50 "
                  f"{o['p50_ms']:.2f} p99 {o['p99_ms']:.2f} max {o['max_ms']:.2f} ms from the schedule (send -> "
                  f"response p99 {o['send_p99_ms']:.2f}, sent late p99 {o['late_p99_ms']:.2f} ms, backlog max "
                  f"{o['behind_max']}), cpu µs/req per broker {o['cpu_us_per_request_per_broker']}, cpu util "
                  f"{o['cpu_util_per_broker']}, run-queue wait ms/s {o['runq_wait_ms_per_s']}, reads/writes/wake-ups "
                  f"per request per broker {o['events_per_request_per_broker']}, busy cores "
                  f"{o['machine_busy_cores']} (load client {o.get('client_cpu_util')})", flush=True)
            print(f"  open loop again with the probe: p50 {oe['p50_ms']:.2f} p99 {oe['p99_ms']:.2f} max "
                  f"{oe['max_ms']:.2f} ms, cpu µs/req per broker {oe['cpu_us_per_request_per_broker']} (counting the "
                  f"probe's records as requests {oe['cpu_us_per_request_per_broker_incl_probe']}), run-queue wait ms/s "
                  f"{oe['runq_wait_ms_per_s']}, busy cores {oe['machine_busy_cores']}; {e2e_line(oe)}", flush=True)
            print(f"  closed loop nearest half ({half['concurrency']}): {half['records_per_s']:>9,.0f} rec/s p50 "
                  f"{half['p50_ms']:.2f} p99 {half['p99_ms']:.2f} ms, cpu µs/req per broker "
                  f"{half['cpu_us_per_request_per_broker']}, run-queue wait ms/s {half['runq_wait_ms_per_s']}, "
                  f"reads/writes/wake-ups per request per broker {half['events_per_request_per_broker']}, "
                  f"lag max {half['lag_max']}, busy cores {half['machine_busy_cores']} (load client "
                  f"{half.get('client_cpu_util')})", flush=True)
            print(f"  closed loop {he['concurrency']} again with the probe: {he['records_per_s']:>9,.0f} rec/s p50 "
                  f"{he['p50_ms']:.2f} p99 {he['p99_ms']:.2f} ms, cpu µs/req per broker "
                  f"{he['cpu_us_per_request_per_broker']} (counting the probe's records as requests "
                  f"{he['cpu_us_per_request_per_broker_incl_probe']}), run-queue wait ms/s {he['runq_wait_ms_per_s']}, "
                  f"busy cores {he['machine_busy_cores']}; {e2e_line(he)}", flush=True)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--probe-interval-ms", type=float, default=PROBE_INTERVAL_S * 1000,
                    help="the end-to-end probe's interval between records (default 1 ms)")
    ap.add_argument("--before", type=Path, metavar="PATH", help="also run the brokers of this checkout (same-run A/B)")
    ap.add_argument("--closed-steps", default="2x4,2x2,1x2,1x1", metavar="CxD,...",
                    help="the closed-loop steps tried for ~half rate, connections x depth (default %(default)s)")
    add_config_options(ap)
    args = ap.parse_args()
    args.half_steps = [tuple(int(v) for v in step.split("x")) for step in args.closed_steps.split(",")]
    trees = {"after": REPO}
    if args.before is not None:
        before = args.before.resolve()
        if not (before / "broker" / "__main__.py").exists():
            print(f"{before} is not a kbroker checkout", file=sys.stderr)
            return 2
        trees = {"before": before, "after": REPO}
        print(f"before: {tree(before)}\nafter:  {tree(REPO)}", flush=True)
    steadiness: dict[str, list[dict]] = {}
    results = run_rounds(args, trees, steadiness)
    med = statistics.median

    def spread(values) -> str:
        values = [v for v in values if v is not None]
        if not values:
            return "n/a"
        return f"{med(values):6.2f} [{min(values):.2f}-{max(values):.2f}]"

    def big(values) -> str:
        values = list(values)
        return f"{med(values):>10,.0f} [{min(values):,.0f}-{max(values):,.0f}]"
    print()
    print(f"medians [range] over {args.rounds} rounds: RF=3, acks=all, min.insync.replicas=2, 4 partitions, "
          f"100-byte records, 148/batch")
    rows: dict[str, dict[str, float]] = {}

    def per_broker(xs: list[dict], field: str) -> str:
        return ", ".join(f"{b}: {spread(x[field][b] for x in xs)}" for b in xs[0][field])

    def probed_lines(label: str, xs: list[dict]) -> None:
        """A step run with the end-to-end probe: the load's figures, then the probe's."""
        print(f"  {label}: records/s {big(x['records_per_s'] for x in xs)}   p50 {spread(x['p50_ms'] for x in xs)} ms"
              f"   p99 {spread(x['p99_ms'] for x in xs)} ms   max {spread(x.get('max_ms') for x in xs)} ms; CPU µs per "
              f"request per broker " + per_broker(xs, "cpu_us_per_request_per_broker") + "; counting the probe's "
              "records as requests " + per_broker(xs, "cpu_us_per_request_per_broker_incl_probe"))
        print(f"  {label}: end-to-end p50 {spread(x['e2e_p50_ms'] for x in xs)} ms   p99 "
              f"{spread(x['e2e_p99_ms'] for x in xs)} ms; probe send -> ack p50 {spread(x['ack_p50_ms'] for x in xs)} ms"
              f"   p99 {spread(x['ack_p99_ms'] for x in xs)} ms   p99.9 {spread(x['ack_p999_ms'] for x in xs)} ms   "
              f"worst-second p99 {spread(x['ack_worst_second_p99_ms'] for x in xs)} ms; librdkafka rtt p50 "
              f"{spread(x['rtt_p50_ms'] for x in xs)} ms   worst-second p99 {spread(x['rtt_p99_ms'] for x in xs)} ms")
    for name, (full, opens, probed, halves, halves_e2e) in results.items():
        m = rows[name] = {}
        m["full records/s"] = med(x["records_per_s"] for x in full)
        m["full p99 ms"] = med(x["p99_ms"] for x in full)
        m["open p99 ms"] = med(x["p99_ms"] for x in opens)
        m["open max ms"] = med(x["max_ms"] for x in opens)
        m["closed half p99 ms"] = med(x["p99_ms"] for x in halves)
        e2e = [x["e2e_p99_ms"] for x in probed if x["e2e_p99_ms"] is not None]
        m["open e2e p99 ms"] = med(e2e) if e2e else float("nan")
        e2e = [x["e2e_p99_ms"] for x in halves_e2e if x["e2e_p99_ms"] is not None]
        m["closed half e2e p99 ms"] = med(e2e) if e2e else float("nan")
        m["broker-1 cpu µs/req"] = med(x["server_cpu_us_per_request"] for x in full)
        m["open broker-1 cpu µs/req"] = med(x["server_cpu_us_per_request"] for x in opens)
        print(f"[{name}]")
        print(f"  full load (closed loop 4x8)   records/s {big(x['records_per_s'] for x in full)}   p50 "
              f"{spread(x['p50_ms'] for x in full)} ms   p99 {spread(x['p99_ms'] for x in full)} ms")
        print(f"  full load   CPU µs per produce request: broker 1 (kafka_load's --server-pid) "
              f"{spread(x['server_cpu_us_per_request'] for x in full)}; per broker (its CPU / all requests) "
              + per_broker(full, "cpu_us_per_request_per_broker"))
        print("  full load   run-queue wait ms/s per broker: " + per_broker(full, "runq_wait_ms_per_s"))
        print(f"  OPEN LOOP at half the full request rate: records/s {big(x['records_per_s'] for x in opens)}   "
              f"from the scheduled send: p50 {spread(x['p50_ms'] for x in opens)} ms   p99 "
              f"{spread(x['p99_ms'] for x in opens)} ms   max {spread(x['max_ms'] for x in opens)} ms")
        print(f"  open loop   written -> response p99 {spread(x['send_p99_ms'] for x in opens)} ms   sent late p99 "
              f"{spread(x['late_p99_ms'] for x in opens)} ms")
        print("  open loop   CPU µs per produce request per broker: " + per_broker(opens, "cpu_us_per_request_per_broker"))
        print("  open loop   run-queue wait ms/s per broker: " + per_broker(opens, "runq_wait_ms_per_s"))
        probed_lines("open loop + probe", probed)
        print(f"  closed loop ~half rate (concurrency stepped down) records/s {big(x['records_per_s'] for x in halves)}"
              f"   p50 {spread(x['p50_ms'] for x in halves)} ms   p99 {spread(x['p99_ms'] for x in halves)} ms")
        print("  closed loop ~half: CPU µs per produce request per broker: "
              + per_broker(halves, "cpu_us_per_request_per_broker"))
        print("  closed loop ~half: run-queue wait ms/s per broker: " + per_broker(halves, "runq_wait_ms_per_s"))
        probed_lines("closed loop ~half + probe", halves_e2e)
        print(f"  reads/writes/wake-ups per produce request per broker, by round: full "
              f"{[x['events_per_request_per_broker'] for x in full]}; open loop "
              f"{[x['events_per_request_per_broker'] for x in opens]}; closed ~half "
              f"{[x['events_per_request_per_broker'] for x in halves]}")
        print(f"  busy cores of the machine (all processes): full {spread(x['machine_busy_cores'] for x in full)}"
              f"   open loop {spread(x['machine_busy_cores'] for x in opens)}"
              f"   open loop + probe {spread(x['machine_busy_cores'] for x in probed)}"
              f"   closed ~half {spread(x['machine_busy_cores'] for x in halves)}"
              f"   closed ~half + probe {spread(x['machine_busy_cores'] for x in halves_e2e)}")
        print(f"  follower lag (records) at full load: median of medians {med(x['lag_median'] for x in full)}, "
              f"max of maxima {max(x['lag_max'] for x in full)}")
        steady_rounds = steadiness.get(name, [])
        if steady_rounds:
            print(f"  machine steadiness before each round (idle, a bare loop per core): 100 ms windows slower on "
                  f"all cores at once {spread(x['all_slow_window_share'] * 100 for x in steady_rounds)} %, worst "
                  f"window {spread(x['worst_window_slowdown'] for x in steady_rounds)}x")
    if len(rows) == 2:
        print("after/before (ratio of medians): " + ", ".join(
            f"{k} {rows['after'][k] / rows['before'][k]:.3f}" for k in rows["after"] if rows["before"][k]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
