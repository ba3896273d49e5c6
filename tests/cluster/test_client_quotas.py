"""Client quotas enforced (issue 27 item 7, KIP-13/124/219) on a real controller and broker:
quotas set with ``kbroker quotas set`` (AlterClientQuotas through the broker, forwarded to the
controller, back to the broker in its metadata) and shown by ``kbroker quotas describe``, then
three clients at once, each measuring what was acknowledged:

* a confluent-kafka producer with client id ``slow`` and a 1 MB/s producer_byte_rate quota is
  held to 1 MB/s +- 10 % after a warm-up, and sees throttle_time_ms > 0 (its throttle_cb);
* a raw-protocol client (``raw``, the same quota) that ignores throttle_time_ms and keeps four
  Produce requests in flight gains nothing: the broker mutes its connection (KIP-219);
* an unthrottled producer keeps its solo throughput (alone and beside them in turns, in the same
  run: the throttled clients paused and resumed; the medians compared);
* the broker's per-entity quota metrics show the slow client's byte rate and throttle time, and
  the broker's own byte counter (each client writes a topic of its own) holds both throttled
  clients to the quota over the measured whole windows.

A new client may burst up to quota.window.num - 1 seconds worth of its quota before it is held
(Kafka's Rate counts at least samples - 1 windows), so the measurement starts after that.
Kafka's SampledStat lets a whole sample leave the window at once, so a held client's rate is
periodic with the whole window (quota.window.num x quota.window.size.seconds): with Kafka's
defaults (11 x 1 s), over any 6 s it swings between ~0.1x and ~1.8x of the quota (the same in
Kafka; a MockTime replay of the bookkeeping shows it), over whole windows it is within ~10 %.
So the measurement spans whole windows: CI runs quota.window.num 6 and measures one window
(6 s); the slow version runs Kafka's 11 and measures three (33 s). The slow
producer sends small batches (batch.size 16 KiB), since a 1 MB request can itself be most of a
sample.

Exactly whole windows: a client sending as fast as it is let is taken in bursts, a whole
window's allowance at once each time the sample holding the last burst expires (throttles are
at most one sample long, Kafka's bound, so between bursts it gets a request a second): with 6
samples, ~5.9 MB within a tenth of a second every 6 s and then ~10 KB a second. The bursts are
at least a window apart, so [t1, t1 + whole windows) holds at most one window's worth per
window whatever their phase, but any longer span may hold one more: a CI run measured up to its
last metrics read, 0.7 s late on a loaded machine, and found 1.76 MB/s (two bursts over 6.7 s).
So the clients' acknowledgements are counted over exactly [t1, t1 + windows) for the upper
bound; the broker's counter is read around it: the reads within it bound its bytes from above,
those around it from below. They are also up to a sample more than a window apart (the burst
comes once the throttle given after the sample expired runs out), so whole windows may hold one
burst fewer than windows (three windows of 11 s held two bursts: 0.67 MB/s): the slow run's
lower bound is the rate from its first burst to its last one's start, whole periods.

The byte-rate metric is Kafka's Rate read at an arbitrary moment, and Kafka does not bound that
by the quota: the window it divides by is (samples - 1) whole windows plus the current one's
elapsed part, so it falls from samples to samples - 1 windows at each whole window (Rate.windowSize),
and a held client's rate reads samples / (samples - 1) x the quota just after (1.2x with 6
samples), plus the requests recorded before each throttle took hold (one per step, so at most
one request per window length). A single read against 1.2 x the quota failed at 1,200,454 B/s
(the client measured 0.988 MB/s). So the metric is read every SCRAPE_S through the measured
windows, every read within that bound; what over whole windows is held to the quota + 10 % is
the bytes the broker took (its BytesIn counter of the client's topic) as the clients measured.
(Held exactly, the reads' mean is samples x ln(samples / (samples - 1)) x the quota: 1.094x.)
"""

from __future__ import annotations

import asyncio
import statistics
import multiprocessing
import time
import urllib.request

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from controller.launcher import LocalCluster
from protocol.client import BrokerConnection, KafkaClient
from protocol.records import Record, build_batch
from tests.cli.test_cli import kbroker
from tests.support import wait_until

pytestmark = pytest.mark.timeout(240)

QUOTA = 1_000_000  # bytes/s
SOLO_S = 3.0
TURN_S = 1.0
# turns alone and beside them (strict runs); on this shared machine one turn's rate varies 2x and
# one pair's ratio 0.5-2.1: the median of 12 pairs read 0.88-1.01 over five runs of one day
ROUNDS = 24
ROUNDS_CI = 2  # the CI run asserts no ratio


def fmt(rates: list[float]) -> str:
    return "/".join(f"{r / 1e6:.0f}" for r in rates)
TOPIC = "quota"  # the unthrottled producer's; each throttled client writes a topic of its own
VALUE = 10_000  # bytes per record of the confluent-kafka producers (one record per batch at batch.size 16 KiB)
# The largest Produce request the slow producer sends: one batch of one VALUE record, with the
# batch's and the request's headers (well under 1 KiB).
SLOW_REQUEST = VALUE + 1024
SCRAPE_S = 0.25


def topic_of(client_id: str) -> str:
    return TOPIC if client_id == "fast" else f"{TOPIC}-{client_id}"


class Meter:
    """Bytes acknowledged, with when (CLOCK_MONOTONIC, the same in every process): the rate over
    any interval, measured by the client. A client runs in a process of its own (``spawn``) and
    hands its meter back when it stops: clients in threads of the test process shared its GIL,
    so the unthrottled producer's delivery callbacks waited on the throttled clients' loops."""

    def __init__(self) -> None:
        self.acks: list[tuple[float, int]] = []
        self.throttles: list[int] = []

    def add(self, n: int) -> None:
        self.acks.append((time.monotonic(), n))

    def rate(self, start: float, end: float) -> float:
        return sum(n for t, n in self.acks if start <= t < end) / (end - start)

    def bursts(self, start: float, end: float, least: float) -> list[float]:
        """When each burst in [start, end) began: an acknowledgement with at least ``least``
        bytes acknowledged within the second from it, over 2 s after the last burst began."""
        found: list[float] = []
        for t, _ in self.acks:  # (in the order acknowledged)
            if start <= t < end and (not found or t - found[-1] > 2.0) and self.rate(t, t + 1.0) >= least:
                found.append(t)
        return found


def run_producer(bootstrap: str, client_id: str, batch_size: int, queue_kb: int, paused, stop, first_ack,
                 results) -> None:
    """A confluent-kafka producer writing 10 KB values as fast as the broker takes them (a
    child process: ``paused``, ``stop``, ``first_ack`` are multiprocessing Events, ``results``
    the pipe its Meter goes back through)."""
    meter = Meter()
    value = b"x" * VALUE

    def delivered(err, msg) -> None:
        if err is None:
            meter.add(len(msg.value()))
            first_ack.set()

    def throttled(event) -> None:
        meter.throttles.append(int(event.throttle_time * 1000))

    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1,
                  "queue.buffering.max.kbytes": queue_kb, "batch.size": batch_size, "throttle_cb": throttled})
    while not stop.is_set():
        if paused is not None and paused.is_set():
            p.poll(0.02)
            continue
        try:
            p.produce(topic_of(client_id), value, on_delivery=delivered)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(30)
    results.send((meter.acks, meter.throttles))


def run_raw_client(port: int, paused, stop, first_ack, results, in_flight: int = 4) -> None:
    """Produce requests of 64 KiB on one connection, ``in_flight`` at a time, never waiting the
    throttle_time_ms it is given (kbroker's BrokerConnection does not read it)."""
    meter = Meter()
    batch_value = b"r" * 65_536

    async def main() -> None:
        conn = BrokerConnection("127.0.0.1", port, client_id="raw")
        await conn.connect()

        async def loop() -> None:
            while not stop.is_set():
                if paused.is_set():
                    await asyncio.sleep(0.02)
                    continue
                batch = build_batch([Record(value=batch_value)], now_ms=int(time.time() * 1000))
                result = await conn.produce(1, 30000, [(topic_of("raw"), [(0, batch)])])
                assert result is not None and result[0][1][0][1] == 0, result
                meter.add(len(batch_value))
                first_ack.set()
        try:
            await asyncio.gather(*(loop() for _ in range(in_flight)))
        finally:
            conn.close()
    asyncio.run(main())
    results.send((meter.acks, meter.throttles))


class Client:
    """A client process (run_producer or run_raw_client) and the Meter it hands back at stop()."""
    CONTEXT = multiprocessing.get_context("spawn")

    def __init__(self, target, *args) -> None:
        self.stop_event, self.first_ack = self.CONTEXT.Event(), self.CONTEXT.Event()
        self.receive, send = self.CONTEXT.Pipe(duplex=False)
        self.process = self.CONTEXT.Process(target=target, args=(*args, self.stop_event, self.first_ack, send),
                                            daemon=True)
        self.process.start()
        self.meter = Meter()

    def stop(self) -> Meter:
        self.stop_event.set()
        if self.receive.poll(60):
            self.meter.acks, self.meter.throttles = self.receive.recv()
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
        return self.meter


def set_quotas(bootstrap: str) -> None:
    """Through ``kbroker quotas`` (its bad input too: the controller's INVALID_REQUEST, nothing set)."""
    kbroker(bootstrap, "quotas", "set", "--client-id", "slow", "--add-config", f"producer_byte_rate={QUOTA}")
    kbroker(bootstrap, "quotas", "set", "--client-id", "raw", "--add-config",
            f"producer_byte_rate={QUOTA},consumer_byte_rate=5")
    kbroker(bootstrap, "quotas", "set", "--client-id", "raw", "--delete-config", "consumer_byte_rate")
    bad = kbroker(bootstrap, "quotas", "set", "--client-defaults", "--add-config", "producer_byte_rate=-1", expect=1)
    assert b"Quota producer_byte_rate must be greater than 0" in bad.stderr, bad.stderr  # Kafka's INVALID_REQUEST message
    out = kbroker(bootstrap, "quotas", "describe").stdout.decode()
    assert out.splitlines() == [f"Quota configs for client-id 'raw' are producer_byte_rate={float(QUOTA)}",
                                f"Quota configs for client-id 'slow' are producer_byte_rate={float(QUOTA)}"], out
    out = kbroker(bootstrap, "quotas", "describe", "--client-id", "slow").stdout.decode()
    assert out == f"Quota configs for client-id 'slow' are producer_byte_rate={float(QUOTA)}\n", out

    async def create() -> None:
        async with KafkaClient(bootstrap) as client:
            # The unthrottled producer writes as fast as the broker takes it, up to 1 GB/s: its log
            # keeps its last 256 MiB (it filled 12-18 GB of disk a run otherwise; three runs kept
            # by pytest and a test suite filled a 55 GB disk)
            await client.create_topics([(topic_of("fast"), 1, 1, {"segment.bytes": str(64 << 20),
                                                                  "retention.bytes": str(256 << 20),
                                                                  "file.delete.delay.ms": "1000"})])
            await client.create_topics([(topic_of(name), 1, 1, None) for name in ("slow", "raw")])
    asyncio.run(create())


def start(tmp_path, samples: int, metrics: bool) -> LocalCluster:
    cluster = LocalCluster(tmp_path, 1, metrics=metrics, broker_props={"broker.heartbeat.interval.ms": 500,
                                                      "quota.window.num": samples, "quota.window.size.seconds": 1,
                                                      "log.retention.check.interval.ms": 1000})
    try:
        cluster.start()
    except BaseException:
        cluster.kill()
        raise
    return cluster


def scrape(port: int) -> tuple[float, float, dict]:
    """(asked, answered, {(name, client_id or topic): value}) of the broker's /metrics page now:
    the values were read between ``asked`` and ``answered``."""
    asked = time.monotonic()
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    answered = time.monotonic()
    series = {(s.name, s.labels.get("client_id", s.labels.get("topic"))): s.value
              for family in text_string_to_metric_families(page.decode()) for s in family.samples}
    return asked, answered, series


def check_metrics(scrapes: list, t1: float, measure_s: float, samples: int, bursts: list[float] | None) -> None:
    """The slow client's quota metrics, read through the measured whole windows [t1, t1 +
    measure_s), and both throttled clients' bytes as the broker counted them (their topics'
    BytesIn) over those windows. Kafka's bounds (quota.window.size.seconds 1): the bytes over
    whole windows are the quota's (+ 10 %, as the clients measured them); every read of the rate
    is at most samples / (samples - 1) x the quota plus one request per second (the module
    docstring). ``scrapes``: (asked, answered, series), the first answered before t1, one asked
    at t1, the last asked at t1 + measure_s or later. ``bursts`` (the strict run): when the slow
    client's bursts began; its bytes as the broker counted them from before the first within the
    windows to before the last are held to at least 0.9 x the quota (whole periods, as the
    client's own measure)."""
    t2 = t1 + measure_s
    inside = [s for s in scrapes if s[0] >= t1 and s[1] <= t2]  # read within the windows
    assert len(inside) >= 3, [s[:2] for s in scrapes]  # at t1, through them (4 a second when the machine keeps up)
    assert scrapes[0][1] <= t1 and scrapes[-1][0] >= t2, [s[:2] for s in scrapes]

    def bytes_in(name: str, a: dict, b: dict) -> float:
        key = ("kafka_server_brokertopicmetrics_bytesin_total", topic_of(name))
        return (b[key] - a[key]) / measure_s

    # bytes over part of the windows (an upper bound), over a span holding them (a lower one)
    within = {name: bytes_in(name, inside[0][2], inside[-1][2]) for name in ("slow", "raw")}
    around = {name: bytes_in(name, scrapes[0][2], scrapes[-1][2]) for name in ("slow", "raw")}
    rates = [series[("kafka_server_produce_byte_rate", "slow")] for _, _, series in scrapes[1:]]
    last = scrapes[-1][2]
    momentary = QUOTA * samples / (samples - 1) + SLOW_REQUEST
    print(f"slow's byte rate metric: {len(rates)} reads over {scrapes[-1][1] - scrapes[1][0]:.1f} s, mean "
          f"{statistics.mean(rates) / 1e6:.3f} max {max(rates) / 1e6:.4f} (bound {momentary / 1e6:.4f}) min "
          f"{min(rates) / 1e6:.3f} MB/s; broker's BytesIn over {measure_s:.0f} s, counted within "
          f"{inside[-1][1] - inside[0][0]:.2f} s / around {scrapes[-1][1] - scrapes[0][0]:.2f} s of it: slow "
          f"{within['slow'] / 1e6:.3f}/{around['slow'] / 1e6:.3f}, raw {within['raw'] / 1e6:.3f}/"
          f"{around['raw'] / 1e6:.3f} MB/s; last throttle {last[('kafka_server_produce_throttle_time', 'slow')]} ms")
    assert all(0 < r <= momentary for r in rates), rates
    assert within["slow"] <= 1.1 * QUOTA and within["raw"] <= 1.1 * QUOTA, within
    if bursts is not None:
        inner = [b for b in bursts if t1 <= b < t2]
        assert len(inner) >= 2, (bursts, t1, t2)  # (33 s of periods of at most 12 s)
        # read before the first burst (its bytes counted), and before the last (its not): over
        # the span from asking the one to the answer of the other, at most the periods' length
        a = max((r for r in scrapes if r[1] <= inner[0]), key=lambda r: r[1])
        b = max((r for r in scrapes if r[1] <= inner[-1]), key=lambda r: r[1])
        key = ("kafka_server_brokertopicmetrics_bytesin_total", topic_of("slow"))
        held = (b[2][key] - a[2][key]) / (b[1] - a[0])
        print(f"slow's BytesIn from before its burst at {inner[0] - t1:.1f} s to before the one at "
              f"{inner[-1] - t1:.1f} s: {held / 1e6:.3f} MB/s")
        assert held >= 0.9 * QUOTA, (held, around)
    assert last[("kafka_server_produce_throttle_time", "slow")] > 0
    assert all(("kafka_server_produce_byte_rate", "fast") not in series for _, _, series in scrapes)  # no quota, no sensor


def check_quotas(tmp_path, samples: int, windows: int, metrics: bool = True, strict: bool = True) -> None:
    """quota.window.num ``samples`` of 1 s; measured over ``windows`` whole quota windows after
    the first burst (samples - 1 seconds) is over. ``strict``: also the issue's accuracy (the
    held producer at 1 MB/s ± 10 %) and the unthrottled producer's ≥ 0.9 of its rate alone.
    Without it, the enforcement alone: nobody held gets above the quota + 10 %, throttles are
    answered and counted. On a loaded 2-core machine a 6 s window is too short for the rest: a
    CPU-starved held producer fell to 0.67 MB/s and the neighbour's ratio to 0.64 in runs
    beside a full test suite (the slow test, three whole 11 s windows, keeps them)."""
    warm_up_s, measure_s = samples + 1.0, float(samples * windows)
    cluster = start(tmp_path, samples, metrics)
    [broker] = cluster.brokers.values()
    clients: dict[str, Client] = {}
    paused = Client.CONTEXT.Event()  # the throttled clients send nothing while it is set
    try:
        set_quotas(cluster.bootstrap)
        clients["fast"] = Client(run_producer, cluster.bootstrap, "fast", 1 << 20, 8192, None)
        wait_until(clients["fast"].first_ack.is_set, 30, what="the unthrottled producer's first acknowledgement")
        t0 = time.monotonic()
        time.sleep(SOLO_S)
        solo_turns = [(t0 + 0.5, time.monotonic())]
        clients["slow"] = Client(run_producer, cluster.bootstrap, "slow", 16384, 256, paused)
        clients["raw"] = Client(run_raw_client, broker.port, paused)
        # The burst a new client may take (samples - 1 seconds of quota) is counted from its first
        # request, not from its process's start: a client spawned slowly (a loaded machine) burst
        # into the measured window (1.82 MB/s measured in a full make test).
        for name in ("slow", "raw"):
            wait_until(clients[name].first_ack.is_set, 30, what=f"the {name} client's first acknowledgement")
        time.sleep(warm_up_s)
        # (asked, answered, series): one answered before t1, then through the measured windows
        # every SCRAPE_S from t1, and the last asked at t2 or after
        scrapes = [scrape(broker.metrics_port)] if metrics else []
        t1 = time.monotonic()
        t2 = t1 + measure_s  # exactly whole windows (the module docstring): not when a read ends
        if metrics:
            while time.monotonic() < t2:
                scrapes.append(scrape(broker.metrics_port))
                time.sleep(max(0.0, min(SCRAPE_S, t2 - time.monotonic())))
            scrapes.append(scrape(broker.metrics_port))
        else:
            time.sleep(measure_s)
        beside_turns = [(t1, t2)]
        # The machine is shared: the unthrottled producer alone and beside them, in turns (the
        # throttled clients paused and resumed; resumed, they may burst again), medians compared.
        for _ in range(ROUNDS if strict else ROUNDS_CI):
            paused.set()
            time.sleep(0.5)  # what the slow producer had queued drains (256 KB at 1 MB/s)
            a = time.monotonic()
            time.sleep(TURN_S)
            solo_turns.append((a, time.monotonic()))
            paused.clear()
            a = time.monotonic()
            time.sleep(TURN_S)
            beside_turns.append((a, time.monotonic()))
        fast, slow, raw = (clients.pop(name).stop() for name in ("fast", "slow", "raw"))
        solos = [fast.rate(a, b) for a, b in solo_turns]
        besides = [fast.rate(a, b) for a, b in beside_turns]
        slow_rate, raw_rate = slow.rate(t1, t2), raw.rate(t1, t2)
        # each turn beside them against the turn alone just before it: the load of the machine's
        # other users drifts slower than a turn
        ratio = statistics.median(b / a for a, b in zip(solos[1:], besides[1:]))
        print(f"quota {QUOTA / 1e6:.2f} MB/s over {measure_s:.0f} s: slow {slow_rate / 1e6:.3f} MB/s, "
              f"raw (ignores throttle) {raw_rate / 1e6:.3f} MB/s; unthrottled alone {fmt(solos)} MB/s, "
              f"beside them {fmt(besides)} MB/s: median of the turns' ratios {ratio:.2f}x; "
              f"throttle_time_ms seen by slow: {len(slow.throttles)} (max {max(slow.throttles, default=0)})")
        print("slow's acknowledged MB per second from t1 - warm-up to t2 (the module docstring's bursts): "
              + " ".join(f"{slow.rate(t1 + s, t1 + s + 1) / 1e6:.2f}" for s in range(-int(warm_up_s), int(measure_s))))
        assert slow_rate <= 1.1 * QUOTA
        assert slow.throttles and max(slow.throttles) > 0
        assert raw_rate <= 1.1 * QUOTA
        # Held, over whole periods of its bursts: from the first burst to the last one's start.
        # Each comes when the sample of the last expired and the throttle then given (at most a
        # sample) ran out: a period is a window and up to a sample, 11-12 s here, so exactly
        # whole windows [t1, t2) held three bursts or two by their phase (0.67 MB/s measured,
        # 0.95 from burst to burst in the same run); the upper bounds hold either way.
        bursts = slow.bursts(t1 - samples, t2, least=(samples - 1) * QUOTA / 2)
        if strict:
            assert len(bursts) >= 3, bursts
            held = slow.rate(bursts[0], bursts[-1])
            print(f"slow's bursts at {[round(b - t1, 1) for b in bursts]} s from t1: {held / 1e6:.3f} MB/s "
                  f"from the first to the last")
            assert 0.9 * QUOTA <= held <= 1.1 * QUOTA
            assert ratio >= 0.9
        if metrics:
            check_metrics(scrapes, t1, measure_s, samples, bursts if strict else None)
    finally:
        for client in clients.values():
            client.stop()
        cluster.stop()


def test_client_quotas_hold_a_producer_and_ignoring_throttles_gains_nothing(tmp_path):
    check_quotas(tmp_path, samples=6, windows=1, strict=False)


@pytest.mark.slow
def test_client_quotas_over_30_seconds(tmp_path):
    check_quotas(tmp_path, samples=11, windows=3)
