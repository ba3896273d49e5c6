"""``kbroker loadgen synth WORKLOAD.yaml --out traffic/``: a recording made from an
OpenMessaging Benchmark workload file, without any client or broker.

OMB's own workload keys are read as they are: ``name``, ``topics``, ``partitionsPerTopic``,
``messageSize``, ``payloadFile`` (resolved against the workload folder's parent, as OMB resolves
it against its checkout; used when the file exists, otherwise random bytes of ``messageSize`` and
one warning line), ``useRandomizedPayloads``/``randomBytesRatio``/``randomizedPayloadPoolSize``,
``keyDistributor`` (NO_KEY, KEY_ROUND_ROBIN, RANDOM_NANO), ``producersPerTopic``,
``producerRate`` (messages/s for the whole workload; 0: as fast as possible), ``subscriptionsPerTopic``,
``consumerPerSubscription``, ``testDurationMinutes``; OMB keys that only steer OMB's own run
(``consumerBacklogSizeGB``, ``warmupDurationMinutes``, ...) are accepted and kept in the manifest.
Optional keys of ours: ``compression`` (none, gzip, snappy, lz4, zstd), ``acks`` (all, 1, 0),
``batchSize`` (bytes, Kafka's batch.size, default 16384), ``lingerMs`` (default 5),
``maxRecords`` (a bound on the records written, for ``producerRate: 0``; default 1,000,000).

One recorded connection per producer (topics × producersPerTopic). A producer sends
``producerRate / producers`` records per second; records go to partitions as a Kafka producer
would (murmur2 of the key, or in turn without keys) and into batches that close when full
(``batchSize``) or after ``lingerMs``; each batch is one Produce v7 request, timed at the moment
the batch closes.
"""

from __future__ import annotations

import collections
import logging
import random
import re
from pathlib import Path
from typing import Any

import yaml

from protocol.client import murmur2_partition
from protocol.compression import Compression
from protocol.fast_codecs import encode_produce_request
from protocol.records import Record, build_batch

from .recording import ConnectionWriter, summarize, write_manifest

log = logging.getLogger("kbroker.loadgen")

PRODUCE_VERSION = 7
OMB_KEYS = {"name", "topics", "partitionsPerTopic", "messageSize", "payloadFile", "useRandomizedPayloads",
            "randomBytesRatio", "randomizedPayloadPoolSize", "keyDistributor", "subscriptionsPerTopic",
            "consumerPerSubscription", "producersPerTopic", "producerRate", "consumerBacklogSizeGB",
            "backlogDrainRatio", "testDurationMinutes", "warmupDurationMinutes"}
OUR_KEYS = {"compression", "acks", "batchSize", "lingerMs", "maxRecords"}
ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}


class WorkloadError(ValueError):
    pass


def load_workload(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{path}: not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"{path}: a workload is a mapping of keys")
    unknown = set(data) - OMB_KEYS - OUR_KEYS
    if unknown:
        log.warning("%s: ignoring unknown workload keys %s", path, ", ".join(sorted(unknown)))
    for key in ("topics", "partitionsPerTopic", "messageSize"):
        if not isinstance(data.get(key), int) or data[key] < 1:
            raise WorkloadError(f"{path}: {key} must be a positive integer")
    return data


def payloads(workload: dict[str, Any], workload_path: Path, rng: random.Random) -> list[bytes]:
    size = int(workload["messageSize"])
    if workload.get("useRandomizedPayloads"):
        ratio = float(workload.get("randomBytesRatio", 0.0))
        pool = int(workload.get("randomizedPayloadPoolSize", 1000))
        n_random = int(size * ratio)
        return [rng.randbytes(n_random) + bytes(size - n_random) for _ in range(max(pool, 1))]
    name = workload.get("payloadFile")
    if name:
        for base in (workload_path.parent.parent, workload_path.parent, Path.cwd()):
            candidate = base / name
            if candidate.is_file():
                return [candidate.read_bytes()]
        log.warning("payloadFile %s not found (looked next to %s's folder): random bytes of messageSize %d instead",
                    name, workload_path, size)
    return [rng.randbytes(size)]


def _key_source(kind: str, rng: random.Random):
    kind = (kind or "NO_KEY").upper()
    if kind == "NO_KEY":
        return None
    if kind == "KEY_ROUND_ROBIN":
        counter = iter(range(1 << 62))
        return lambda: str(next(counter) % 10_000).encode()
    if kind == "RANDOM_NANO":
        return lambda: str(rng.getrandbits(63)).encode()
    raise WorkloadError(f"keyDistributor {kind}: expected NO_KEY, KEY_ROUND_ROBIN or RANDOM_NANO")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:40] or "workload"


def synthesize(workload_path: Path, out: Path, *, duration_s: float | None = None, topic_prefix: str | None = None,
               seed: int = 0, max_records: int | None = None) -> dict[str, Any]:
    """Write the recording of ``workload_path`` into ``out``; returns its manifest."""
    workload_path = Path(workload_path)
    w = load_workload(workload_path)
    rng = random.Random(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    duration = float(duration_s if duration_s is not None else float(w.get("testDurationMinutes", 15)) * 60)
    if duration <= 0:
        raise WorkloadError("the duration must be positive")
    n_topics, n_parts = int(w["topics"]), int(w["partitionsPerTopic"])
    producers_per_topic = int(w.get("producersPerTopic", 1))
    rate = float(w.get("producerRate", 0) or 0)
    acks = ACKS.get(str(w.get("acks", "all")).lower())
    if acks is None:
        raise WorkloadError(f"acks {w.get('acks')!r}: expected all, 1 or 0")
    try:
        compression = Compression[str(w.get("compression", "none")).upper()]
    except KeyError:
        raise WorkloadError(f"compression {w.get('compression')!r}: expected none, gzip, snappy, lz4 or zstd") from None
    batch_size = int(w.get("batchSize", 16384))
    linger_s = float(w.get("lingerMs", 5)) / 1000
    prefix = topic_prefix or f"loadgen-{slug(str(w.get('name', workload_path.stem)))}"
    topics = [f"{prefix}-{i:04d}" for i in range(n_topics)]
    pool = payloads(w, workload_path, rng)
    size = int(w["messageSize"])
    n_producers = n_topics * producers_per_topic
    if rate > 0:
        per_producer = max(1, int(rate * duration / n_producers))
    else:
        limit = max_records if max_records is not None else int(w.get("maxRecords", 1_000_000))
        per_producer = max(1, limit // n_producers)
    per_producer_rate = rate / n_producers if rate > 0 else 0.0
    # Records per batch: as many as batch.size holds, fewer when linger closes the batch first.
    per_batch_cap = max(1, batch_size // (size + 12))
    api_counts: collections.Counter[int] = collections.Counter()
    connections: dict[str, Any] = {}
    total_records = 0
    cid = 0
    for t_index, topic in enumerate(topics):
        for p_index in range(producers_per_topic):
            client_id = f"loadgen-synth-{cid}"
            writer = ConnectionWriter(out, cid)
            next_key = _key_source(str(w.get("keyDistributor", "NO_KEY")), rng)
            pending: dict[int, list[Record]] = collections.defaultdict(list)
            opened: dict[int, float] = {}
            corr = 0
            sticky = (p_index + t_index) % n_parts

            def emit(partition: int, at_s: float) -> None:
                nonlocal corr
                batch = build_batch(pending.pop(partition), compression=compression, now_ms=0)
                opened.pop(partition, None)
                chunks = encode_produce_request(PRODUCE_VERSION, corr, client_id, acks, 30000, [(topic, [(partition, batch)])])
                frame = b"".join(bytes(c) for c in chunks)[4:]
                writer.add({"client_id": client_id, "upstream": None, "broker_id": -1,
                            "send_time_us": int(at_s * 1e6), "api_key": 0, "api_version": PRODUCE_VERSION,
                            "correlation_id": corr, "frame": frame, "response_time_us": None, "response_size": None})
                corr += 1
                api_counts[0] += 1

            for i in range(per_producer):
                at = i / per_producer_rate if per_producer_rate else 0.0
                key = next_key() if next_key else None
                if key is None:
                    partition = sticky
                else:
                    partition = murmur2_partition(key, n_parts)
                # Linger: batches opened longer ago than lingerMs close before this record
                # (``opened`` is in opening order, so only its head needs looking at).
                while opened:
                    p, t0 = next(iter(opened.items()))
                    if at - t0 < linger_s:
                        break
                    emit(p, t0 + linger_s)
                    if key is None and p == sticky:
                        sticky = (sticky + 1) % n_parts
                opened.setdefault(partition, at)
                pending[partition].append(Record(timestamp=int(at * 1000), key=key, value=pool[i % len(pool)]))
                if len(pending[partition]) >= per_batch_cap:
                    emit(partition, at)
                    if key is None:
                        sticky = (sticky + 1) % n_parts
            for p in sorted(pending, key=lambda p: opened.get(p, 0.0)):
                emit(p, opened.get(p, 0.0) + (linger_s if per_producer_rate else 0.0))
            writer.close()
            connections[str(cid)] = {"client_id": client_id, "upstream": None, "broker_id": -1, "requests": writer.rows,
                                     "topic": topic, "records": per_producer}
            total_records += per_producer
            cid += 1
    consumers = int(w.get("subscriptionsPerTopic", 1)) * int(w.get("consumerPerSubscription", 1))
    manifest = {
        "source": "synth",
        "workload": {k: w[k] for k in sorted(w)},
        "workload_file": str(workload_path),
        "duration_s": duration if per_producer_rate else 0.0,
        "requests": sum(api_counts.values()),
        "requests_per_api": summarize(api_counts.items()),
        "records": total_records,
        "message_size": size,
        "topics": topics,
        "partitions": {t: n_parts for t in topics},
        "consumers_per_topic": consumers,
        "acks": acks,
        "compression": compression.name.lower(),
        "connections": connections,
    }
    write_manifest(out, manifest)
    return manifest

