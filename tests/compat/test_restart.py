"""Restarts of a broker process: SIGTERM keeps every acknowledged record; kill -9 leaves a
valid prefix and the broker comes back by itself (recovery on start)."""

from __future__ import annotations

import signal

from confluent_kafka import Producer

from protocol.records import check_batch, iter_batch_headers

from .helpers import consume_to_end, stored_batches


def produce_acked(bootstrap: str, topic: str, n: int, acks: str = "1") -> list[int]:
    acked: list[int] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2})
    for i in range(n):
        p.produce(topic, value=str(i).encode(),
                  on_delivery=lambda err, msg: err is None and acked.append(int(msg.value())))
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return acked


def consume_all(bootstrap: str, topic: str) -> list[bytes]:
    return consume_to_end(bootstrap, topic, "restart")


def test_sigterm_keeps_every_acknowledged_record(broker_process):
    broker = broker_process().start()
    acked = produce_acked(broker.bootstrap, "durable", 20_000)
    assert len(acked) == 20_000
    assert broker.stop() == 0
    log = broker.log_text()
    assert "shut down cleanly" in log
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()
    broker.start()
    assert [int(v) for v in consume_all(broker.bootstrap, "durable")] == list(range(20_000))
    assert "needed recovery" not in broker.log_text().split("shut down cleanly")[-1]
    broker.stop()


def test_kill_9_leaves_a_valid_prefix_and_the_broker_recovers(broker_process):
    broker = broker_process().start()
    produce_acked(broker.bootstrap, "crashy", 5_000)
    broker.signal(signal.SIGKILL)
    broker.proc.wait(10)
    assert not (broker.log_dir / ".kafka_cleanshutdown").exists()
    # Tear the tail the way a crash mid-write would: half a batch of garbage after the data.
    segment = sorted((broker.log_dir / "crashy-0").glob("*.log"))[-1]
    with open(segment, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x13\x88\x00\x00\x01\x00" + b"\xab" * 300)
    broker.start()
    values = [int(v) for v in consume_all(broker.bootstrap, "crashy")]
    assert values == list(range(len(values))) and len(values) == 5_000
    batches = stored_batches(broker.log_dir, "crashy", 0)
    offsets = [(b.base_offset, b.last_offset) for b in batches]
    assert all(a[1] + 1 == b[0] for a, b in zip(offsets, offsets[1:]))
    data = segment.read_bytes()
    end = 0
    for pos, h in iter_batch_headers(data):
        check_batch(data, pos, pos + h.size)
        end = pos + h.size
    assert end == len(data), "the torn tail was cut off by recovery"
    # and the broker takes new writes after the recovered prefix
    more = produce_acked(broker.bootstrap, "crashy", 10)
    assert len(more) == 10
    assert stored_batches(broker.log_dir, "crashy", 0)[-1].last_offset == 5_009
    broker.stop()
