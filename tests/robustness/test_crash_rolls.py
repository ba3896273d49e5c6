"""kill -9 under load with segments rolling and retention deleting (issue 12 acceptance): the
librdkafka idempotent-producer restart test of tests/compat/test_idempotence.py, on a broker
whose segments roll every 64 KiB and whose retention keeps only the newest ~512 KiB, killed
three times: once at a random moment after a few rolls, then twice right after retention was
seen deleting the oldest segment (retention runs every 50 ms and deletes one or more
segments at a time while the producer writes; kbroker unlinks a segment's three files in
one synchronous step, so the kill lands in that phase, not deterministically between two
unlinks). After the restarts every acknowledged record at or above the log start offset is
present exactly once, offsets are contiguous and every batch decodes."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from confluent_kafka import Producer

from tests.compat.helpers import consume_to_end

from .frames import read_log

TOPIC = "rolling"
N = 24_000
VALUE = b"x" * 180


def segment_files(broker) -> set[str]:
    return {p.name for p in (broker.log_dir / f"{TOPIC}-0").glob("*.log")}


def consume_all(bootstrap: str, topic: str) -> list[bytes]:
    """Everything from the log start offset (offset 0 is gone: retention) to the end."""
    return consume_to_end(bootstrap, topic, "crash", **{"auto.offset.reset": "earliest"})


@pytest.mark.timeout(240)
def test_kill_9_during_rolls_and_retention_deletion(broker_process):
    broker = broker_process(overrides={
        "log.segment.bytes": 64 * 1024, "log.retention.bytes": 512 * 1024,
        "log.retention.check.interval.ms": 50,
        "log.index.interval.bytes": 1024}).start()
    delivered: list[int] = []
    errors: list = []
    kills = threading.Event()

    def produce():
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                      "message.timeout.ms": 120000, "reconnect.backoff.max.ms": 500,
                      "batch.size": 16384})  # batches well under a segment
        for i in range(N):
            while True:
                try:
                    p.produce(TOPIC, value=b"%d:" % i + VALUE, partition=0,
                              on_delivery=lambda err, msg: errors.append(err) if err else delivered.append(
                                  int(msg.value().split(b":")[0])))
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 100 == 0:
                p.poll(0)
                if not kills.is_set():
                    time.sleep(0.04)  # ~2,500 records/s: the stream spans the three kills and restarts
        assert p.flush(120) == 0

    thread = threading.Thread(target=produce)
    thread.start()
    # kill 1: at a random moment under load, once a few segments rolled
    deadline = time.monotonic() + 60
    while len(segment_files(broker)) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    broker.signal(signal.SIGKILL)
    broker.proc.wait(10)
    broker.start()
    # kills 2 and 3: the moment the oldest segment is seen gone (retention deleting)
    for _ in range(2):
        oldest = min(segment_files(broker))
        deadline = time.monotonic() + 90
        while oldest in segment_files(broker) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert oldest not in segment_files(broker), "retention never deleted a segment"
        broker.signal(signal.SIGKILL)
        broker.proc.wait(10)
        if _ == 0:
            broker.start()
    broker.start()
    kills.set()
    thread.join(180)
    assert not thread.is_alive()
    assert errors == []
    assert sorted(delivered) == list(range(N))
    values = [int(v.split(b":")[0]) for v in consume_all(broker.bootstrap, TOPIC)]
    assert values and values == list(range(values[0], N)), "duplicates or gaps after the kills"
    assert values[0] > 0, "retention deleted nothing"
    # every batch on disk decodes, offsets contiguous from the log start offset
    batches = read_log(broker.log_dir, TOPIC, 0)
    for (base, records), (nxt, _) in zip(batches, batches[1:]):
        assert base + len(records) == nxt
    broker.stop()
