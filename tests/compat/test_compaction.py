"""The log cleaner runs off the event loop: a broker (its own event loop in a thread of this
process) answers a real producer and consumer while a compaction pass is held mid-clean by a
hook in the cleaner thread, then swaps the pass in and the topic reads back one record per key."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import ThreadedBroker, wait_until

KEYS = 50


def consume_all(bootstrap: str, topic: str, timeout_s: float = 60) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    out = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = c.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    return out
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"not at the end after {timeout_s} s ({len(out)} records)")
    finally:
        c.close()


def test_the_broker_answers_produce_and_fetch_while_a_compaction_pass_is_mid_clean(tmp_path):
    broker = ThreadedBroker(tmp_path / "data", overrides={"listeners": "PLAINTEXT://127.0.0.1:0",
                                                           "log.cleaner.backoff.ms": "50"}).start()
    try:
        cleaner = broker.server.cleaner_threads
        paused, release = threading.Event(), threading.Event()

        def hold(task, group: int) -> None:  # on the cleaner thread, after it wrote a cleaned segment
            if not paused.is_set():
                paused.set()
                release.wait(120)
        cleaner.on_group_cleaned = hold
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {"cleanup.policy": "compact", "segment.bytes": "50000", "min.cleanable.dirty.ratio": "0.01"}
        for f in admin.create_topics([NewTopic("compacted", 1, 1, config=configs)], operation_timeout=30).values():
            f.result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 16384})
        for i in range(3000):  # 60 versions of 50 keys, ~14 segments
            producer.produce("compacted", key=b"k%d" % (i % KEYS), value=b"v%d-" % i + b"x" * 200)
            if i % 500 == 0:
                producer.flush(30)
        assert producer.flush(30) == 0
        assert paused.wait(60), "no compaction pass started"
        [task] = broker.call(lambda: cleaner.running)
        assert not task.done  # held in the middle of its pass
        # the event loop is free: a produce is acknowledged and a fetch answered meanwhile
        acked = []
        producer.produce("compacted", key=b"during", value=b"the pass", on_delivery=lambda err, msg: acked.append(err))
        assert producer.flush(30) == 0 and acked == [None]
        during = consume_all(broker.bootstrap, "compacted")
        assert during[-1][1:] == (b"during", b"the pass") and len(during) == 3001
        assert broker.call(lambda: cleaner.running) == [task] and not task.done
        release.set()
        wait_until(lambda: broker.call(lambda: broker.server.log_cleaner.passes >= 1 and not cleaner.running), 60,
                   what="the pass swapped in")
        after = consume_all(broker.bootstrap, "compacted")
        newest = {}
        for offset, key, value in during:
            newest[key] = (offset, value)
        assert len(after) < len(during)
        assert {k: (o, v) for o, k, v in after} == newest  # the newest of each key survives, same offsets
        assert sorted(o for o, _k, _v in after) == [o for o, _k, _v in after]
    finally:
        release.set()
        broker.stop()
