"""Client quota bookkeeping (Kafka's ClientQuotaManager with its DefaultQuotaCallback): which
quota applies to a request, the rate it is measured against, and the throttle time a
violation earns. Pure logic on the injected clock; nothing here mutes a connection or fills a
response (the caller does, KIP-219: ``throttle_time_ms`` in the answer, then the connection
muted that long).

Resolution (DefaultQuotaCallback, per quota key: ``producer_byte_rate``, ``consumer_byte_rate``,
``request_percentage``): for a request of ``user`` with ``client_id``, the first entity that
sets the key, in this order, gives the bound, and the tags of the sensor it is measured on:

    user=U, client-id=C          -> tags (U, C)
    user=U, client-id=<default>  -> tags (U, C)
    user=U                       -> tags (U, "")
    user=<default>, client-id=C  -> tags (U, C)
    user=<default>, client-id=<default> -> tags (U, C)
    user=<default>               -> tags (U, "")
    client-id=C                  -> tags ("", C)
    client-id=<default>          -> tags ("", C)
    none                         -> no quota

so a quota of user alice is shared by all her clients, and a default client-id quota gives
each client id its own.

Measurement (Kafka's Rate over a SampledStat): ``quota.window.num`` samples of
``quota.window.size.seconds`` each; a sample starts at the first record after the previous one
ended; samples older than the whole window are dropped. The rate is the samples' total over the
window size, the time since the oldest sample began, at least ``quota.window.num - 1`` full
windows (so a new client is not throttled for its first burst). A record that takes the rate
above the bound earns (rate - bound) / bound * window size of throttle (Kafka's
ClientQuotaManager.throttleTime), rounded to milliseconds.
"""

from __future__ import annotations

USER_TAG, CLIENT_TAG = "user", "client-id"


class PySampledRate:
    """Kafka's Rate (SampledStat of ``samples`` windows of ``window_ms``), per second. Keeps
    the samples' total as it goes (no sum per measure). The reference for broker/_request_stats.c's
    SampledRate (``SampledRate`` below is that one when it is built)."""

    __slots__ = ("samples", "window_ms", "_starts", "_values", "_total")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[int] = []  # oldest first
        self._values: list[float] = []
        self._total = 0.0

    def _purge(self, now_ms: int) -> None:
        expire_at = now_ms - self.samples * self.window_ms  # Kafka: now - start >= samples * window
        starts = self._starts
        while starts and starts[0] <= expire_at:
            del starts[0]
            self._total -= self._values.pop(0)
        if not starts:
            self._total = 0.0  # no float drift left behind

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        starts = self._starts
        if not starts or now_ms >= starts[-1] + self.window_ms:
            starts.append(now_ms)
            self._values.append(0.0)
            if len(starts) > self.samples:
                del starts[0]
                self._total -= self._values.pop(0)
        self._values[-1] += value
        self._total += value

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        return self._window(now_ms)

    def _window(self, now_ms: int) -> int:
        """Kafka's Rate.windowSize, the samples already purged."""
        w = self.window_ms
        elapsed = now_ms - self._starts[0] if self._starts else 0
        full = elapsed // w
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * w
        return elapsed

    def measure(self, now_ms: int) -> float:
        size = self.window_size_ms(now_ms)
        return self._total / (size / 1000.0) if size > 0 else 0.0

    def record_and_throttle_ms(self, value: float, now_ms: int, bound: float) -> int:
        """``record`` then the throttle time the rate earns against ``bound`` per second: 0
        within it, else (rate - bound) / bound * window size, which is total / bound - window
        size (ms), rounded. The per-request path: one purge check, no division unless over."""
        starts = self._starts
        if starts and starts[0] <= now_ms - self.samples * self.window_ms:
            self._purge(now_ms)
        if not starts or now_ms >= starts[-1] + self.window_ms:
            starts.append(now_ms)
            self._values.append(0.0)
            if len(starts) > self.samples:
                del starts[0]
                self._total -= self._values.pop(0)
        self._values[-1] += value
        total = self._total = self._total + value
        elapsed = now_ms - starts[0]
        w = self.window_ms
        full = elapsed // w
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * w
        if total * 1000.0 <= bound * elapsed:
            return 0
        return round(total * 1000.0 / bound - elapsed)


try:
    from ._request_stats import SampledRate  # the C helper (setup.py; optional)
except ImportError:  # pragma: no cover - built by make test-deps
    SampledRate = PySampledRate  # type: ignore[misc,assignment]


def resolve(quotas: dict[frozenset, dict[str, float]], key: str, user: str,
            client_id: str) -> tuple[float, tuple[str, str]] | None:
    """(bound, sensor tags (user, client-id)) of ``key`` for this user and client id, or None
    (no quota): the DefaultQuotaCallback order of the module docstring."""
    candidates = (
        ((("user", user), ("client-id", client_id)), (user, client_id)),
        ((("user", user), ("client-id", None)), (user, client_id)),
        ((("user", user),), (user, "")),
        ((("user", None), ("client-id", client_id)), (user, client_id)),
        ((("user", None), ("client-id", None)), (user, client_id)),
        ((("user", None),), (user, "")),
        ((("client-id", client_id),), ("", client_id)),
        ((("client-id", None),), ("", client_id)),
    )
    for pairs, tags in candidates:
        values = quotas.get(frozenset(pairs))
        if values is not None and key in values:
            return values[key], tags
    return None


class ClientQuotaManager:
    """One quota key's bookkeeping (Kafka has one manager per quota type): sensors by tags,
    each a SampledRate, and the throttle time they earn. ``quotas`` is the broker's current
    {entity: {key: value}} (ClientQuotaRecords applied); whoever changes it calls
    ``quotas_changed`` (each client's resolution is cached until then)."""

    def __init__(self, key: str, quotas: dict[frozenset, dict[str, float]], *, samples: int = 11,
                 window_seconds: int = 1) -> None:
        self.key = key
        self.quotas = quotas
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.sensors: dict[tuple[str, str], SampledRate] = {}
        self.throttle_time_ms: dict[tuple[str, str], int] = {}  # the last throttle earned per sensor (a metric)
        # (user, client id) -> (bound, its sensor) or None: resolved once per client, not per request
        self._resolved: dict[tuple[str, str], tuple[float, tuple[str, str], SampledRate] | None] = {}

    def quotas_changed(self) -> None:
        """The quotas changed: every client resolves again (its sensor is kept if its tags stay)."""
        self._resolved.clear()

    def _resolve(self, user: str, client_id: str) -> tuple[float, tuple[str, str], SampledRate] | None:
        found = resolve(self.quotas, self.key, user, client_id)
        if found is None:
            out = None
        else:
            bound, tags = found
            rate = self.sensors.get(tags)
            if rate is None:
                rate = self.sensors[tags] = SampledRate(self.samples, self.window_ms)
            out = (bound, tags, rate)
        self._resolved[(user, client_id)] = out
        return out

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` (bytes, or request-time percentage) for this client; the throttle
        time it earns (0 within its quota, or when none applies). This runs for every request
        of every client: one dict lookup and one C call when broker/_request_stats.c is built."""
        if not self.quotas:
            return 0
        try:
            found = self._resolved[(user, client_id)]
        except KeyError:
            found = self._resolve(user, client_id)
        if found is None:
            return 0
        bound, tags, rate = found
        throttle = rate.record_and_throttle_ms(value, now_ms, bound)
        if throttle:
            self.throttle_time_ms[tags] = throttle
        return throttle

    def _found(self, user: str, client_id: str):
        try:
            return self._resolved[(user, client_id)]
        except KeyError:
            return self._resolve(user, client_id)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back ``value`` recorded for this client (Kafka's unrecordQuotaSensor: a
        throttled Fetch is answered empty, its bytes were not sent)."""
        found = self._found(user, client_id) if self.quotas else None
        if found is not None:
            found[2].record(-value, now_ms)

    def throttle_time_now_ms(self, user: str, client_id: str, now_ms: int) -> int:
        """The throttle time this client's rate earns now, recording nothing (0 without a quota)."""
        found = self._found(user, client_id) if self.quotas else None
        if found is None:
            return 0
        bound, _tags, rate = found
        rate_now = rate.measure(now_ms)
        if rate_now <= bound:
            return 0
        return round((rate_now - bound) / bound * rate.window_size_ms(now_ms))

    def bound(self, user: str, client_id: str) -> float | None:
        found = self._found(user, client_id) if self.quotas else None
        return None if found is None else found[0]


PRODUCE_KEY, FETCH_KEY, REQUEST_KEY = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
# Kafka's ClientRequestQuotaManager: request time as a percentage of one thread per second.
NANOS_TO_PERCENT = 100.0 / 1e9


class ClientQuotas:
    """The three quota managers of a broker (Kafka's QuotaManagers: produce, fetch, request),
    all reading the broker's one {entity: {key: value}} (broker/security/metadata.py keeps it
    from the controller's ClientQuotaRecords), on the injected clock. KafkaApis asks them for
    the throttle time of each Produce and consumer Fetch, and of each request of any other
    non-exempt API; the network layer mutes the connection that long (KIP-219)."""

    def __init__(self, quotas: dict[frozenset, dict[str, float]], time, *, samples: int = 11,
                 window_seconds: int = 1) -> None:
        self.quotas = quotas
        self.time = time
        self.produce = ClientQuotaManager(PRODUCE_KEY, quotas, samples=samples, window_seconds=window_seconds)
        self.fetch = ClientQuotaManager(FETCH_KEY, quotas, samples=samples, window_seconds=window_seconds)
        self.request = ClientQuotaManager(REQUEST_KEY, quotas, samples=samples, window_seconds=window_seconds)
        self.managers = (self.produce, self.fetch, self.request)

    def quotas_changed(self) -> None:
        for m in self.managers:
            m.quotas_changed()

    def now_ms(self) -> int:
        return int(self.time.monotonic_ms())

    # -- metrics (Kafka's per-entity quota sensors: kafka.server:type=Produce|Fetch|Request,
    # user=U,client-id=C), one series per sensor a quota made ---------------------------------
    METRICS = (("produce", "byte_rate", "Bytes per second produced"),
               ("fetch", "byte_rate", "Bytes per second fetched by consumers"),
               ("request", "request_time", "Request handler time, percent of one thread"))

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        now = self.now_ms()
        for manager, (kind, rate_name, doc) in zip(self.managers, self.METRICS):
            labels = ["user", "client_id"]
            rate = GaugeMetricFamily(f"kafka_server_{kind}_{rate_name}", f"{doc} per quota entity, over the "
                                     "quota window (Kafka's quota sensor)", labels=labels)
            throttle = GaugeMetricFamily(f"kafka_server_{kind}_throttle_time", "The last throttle time (ms) this "
                                         "quota entity earned (Kafka's is the window's average)", labels=labels)
            for tags, sensor in manager.sensors.items():
                rate.add_metric(list(tags), sensor.measure(now))
                throttle.add_metric(list(tags), manager.throttle_time_ms.get(tags, 0))
            yield rate
            yield throttle
