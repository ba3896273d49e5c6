"""Each broker metric moves when its event happens, on a MockTime and real log files: a
produce moves messages/bytes in, a Fetch long-poll fills the fetch purgatory, a follower
that stops fetching makes its partition under-replicated and back, a flush and the request
phases land in their histograms. Read through a prometheus-client registry, as a scrape
reads them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from broker.metadata_cache import MetadataCache
from broker.metrics import BrokerCollector, BrokerTopicStats, FastHistogram, Log2Histogram, RequestMetrics
from broker.partition import LeaderAndIsrState
from broker.replica_manager import FetchParams, ReplicaManager
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.fast_codecs import FetchPartition
from protocol.records import Record, build_batch
from storage import LogConfig, LogManager

LAG_MS = 10_000


@pytest.fixture
def time():
    return MockTime()


@pytest.fixture
def broker(tmp_path, time):
    """A ReplicaManager with its topic stats and the collector over it, in a registry."""
    config = LogConfig(min_insync_replicas=2)
    logs = LogManager([tmp_path], config, time=time)
    logs.startup()
    stats = BrokerTopicStats()
    rm = ReplicaManager(broker_id=1, time=time, log_manager=logs, metadata_cache=MetadataCache(1),
                        log_config_for=lambda topic: config, replica_lag_time_max_ms=LAG_MS, topic_stats=stats)
    server = SimpleNamespace(replica_manager=rm, fetcher_manager=None, time=time)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(stats)
    collector = BrokerCollector(server)
    registry.register(collector)
    yield SimpleNamespace(rm=rm, registry=registry, collector=collector)
    logs.shutdown()


def value(b, name, **labels):
    v = b.registry.get_sample_value(name, labels)
    return 0 if v is None else v


def lead(rm, isr=(1, 2, 3)):
    rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 0, 1, 1, 0, list(isr), 0, [1, 2, 3])])
    return rm.get_partition("t", 0)


def produce(rm, n=3, acks=1, topic="t", partition=0):
    out = []
    batch = bytearray(build_batch([Record(value=b"v", timestamp=1)] * n))
    rm.append_records(1000, acks, False, [(topic, [(partition, batch)])], out.append)
    return out, len(batch)


def follower_fetch(rm, replica_id, offset):
    out = []
    rm.fetch_messages(FetchParams(replica_id, 0, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, offset, 0, 1 << 20)])],
                      out.append)


def test_produce_moves_messages_and_bytes_in_per_topic_and_in_total(broker):
    lead(broker.rm)
    _, size = produce(broker.rm, 3)
    _, size2 = produce(broker.rm, 5)
    assert value(broker, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 8
    assert value(broker, "kafka_server_brokertopicmetrics_messagesin_total") == 8
    assert value(broker, "kafka_server_brokertopicmetrics_bytesin_total", topic="t") == size + size2
    assert value(broker, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic="t") == 2
    assert value(broker, "kafka_server_brokertopicmetrics_failedproducerequests_total") == 0
    # A partition this broker does not host: a failed produce, no messages in.
    out, _ = produce(broker.rm, 2, topic="t", partition=7)
    assert out[0][0][1][0][1] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert value(broker, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="t") == 1
    assert value(broker, "kafka_server_brokertopicmetrics_messagesin_total") == 8
    # Per-partition series: the LEO moved, the HW waits for the followers.
    assert value(broker, "kafka_log_log_logendoffset", topic="t", partition="0") == 8
    assert value(broker, "kafka_cluster_partition_highwatermark", topic="t", partition="0") == 0
    assert value(broker, "kafka_cluster_partition_replica_lag_records", topic="t", partition="0", replica="2") == 8


def test_a_fetch_long_poll_fills_the_fetch_purgatory_until_data_arrives(broker, time):
    p = lead(broker.rm)
    out = []
    broker.rm.fetch_messages(FetchParams(-1, 5000, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 0, -1, 1 << 20)])],
                             out.append)
    assert out == []
    assert value(broker, "kafka_server_delayedoperationpurgatory_purgatorysize", delayed_operation="Fetch") == 1
    assert value(broker, "kafka_server_delayedoperationpurgatory_numdelayedoperations", delayed_operation="Fetch") == 1
    produce(broker.rm, 3)
    follower_fetch(broker.rm, 2, 3)
    follower_fetch(broker.rm, 3, 3)
    assert p.high_watermark == 3 and len(out) == 1
    assert value(broker, "kafka_server_delayedoperationpurgatory_purgatorysize", delayed_operation="Fetch") == 0
    # One that expires is counted as such.
    broker.rm.fetch_messages(FetchParams(-1, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, 3, -1, 1 << 20)])],
                             out.append)
    time.sleep(500)
    assert len(out) == 2
    assert value(broker, "kafka_server_delayedoperationpurgatory_expires_total", delayed_operation="Fetch") == 1


def test_an_acks_all_produce_waits_in_the_produce_purgatory(broker):
    lead(broker.rm)
    out, _ = produce(broker.rm, 3, acks=-1)
    assert out == []
    assert value(broker, "kafka_server_delayedoperationpurgatory_numdelayedoperations", delayed_operation="Produce") == 1
    follower_fetch(broker.rm, 2, 3)
    follower_fetch(broker.rm, 3, 3)
    assert len(out) == 1
    assert value(broker, "kafka_server_delayedoperationpurgatory_numdelayedoperations", delayed_operation="Produce") == 0


def test_a_stopped_follower_makes_the_partition_under_replicated_and_back(broker, time):
    p = lead(broker.rm)
    produce(broker.rm, 3)
    follower_fetch(broker.rm, 2, 3)
    follower_fetch(broker.rm, 3, 3)
    assert value(broker, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(broker, "kafka_server_replicamanager_leadercount") == 1
    assert value(broker, "kafka_server_replicamanager_partitioncount") == 1
    produce(broker.rm, 2)
    time.sleep(LAG_MS // 2)
    follower_fetch(broker.rm, 2, 5)  # broker 3 stops fetching
    time.sleep(LAG_MS // 2 + 1)
    follower_fetch(broker.rm, 2, 5)
    broker.rm.maybe_shrink_isr()
    assert p.isr == {1, 2}
    assert value(broker, "kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert value(broker, "kafka_cluster_partition_underreplicated", topic="t", partition="0") == 1
    assert value(broker, "kafka_server_replicamanager_isrshrinks_total") == 1
    assert value(broker, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert value(broker, "kafka_server_replicamanager_atminisrpartitioncount") == 1
    assert value(broker, "kafka_cluster_partition_replica_lag_records", topic="t", partition="0", replica="3") == 2
    assert value(broker, "kafka_cluster_partition_replica_lag_seconds", topic="t", partition="0",
                 replica="3") == pytest.approx((LAG_MS + 1) / 1000)
    follower_fetch(broker.rm, 3, 5)  # back, caught up
    assert p.isr == {1, 2, 3}
    assert value(broker, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(broker, "kafka_server_replicamanager_isrexpands_total") == 1
    assert value(broker, "kafka_cluster_partition_replica_lag_seconds", topic="t", partition="0", replica="3") == 0


def test_per_partition_series_can_be_dropped(broker):
    lead(broker.rm)
    produce(broker.rm, 1)
    broker.collector.per_partition = False
    text = generate_latest(broker.registry).decode()
    assert "kafka_log_log_logendoffset" not in text and 'partition="0"' not in text
    assert value(broker, "kafka_server_replicamanager_partitioncount") == 1


def test_a_deleted_topic_loses_its_series(broker):
    lead(broker.rm)
    produce(broker.rm, 1)
    broker.rm.stop_replicas([("t", 0)], delete=True)
    assert broker.registry.get_sample_value("kafka_server_brokertopicmetrics_messagesin_total", {"topic": "t"}) is None
    assert value(broker, "kafka_server_brokertopicmetrics_messagesin_total") == 1


def test_request_phases_and_sizes_land_in_their_api_histograms():
    metrics = RequestMetrics()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    produce = metrics.api(0)
    assert metrics.api(0) is produce  # bound once
    produce.arrived(9)
    # read at 0, started at 1 ms, handler returned at 3 ms, ready at 503 ms (a purgatory), sent at 504 ms
    produce.done(0, 1_000_000, 3_000_000, 503_000_000, 504_000_000, 100, b"r" * 60)
    produce.error(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def v(name, **labels):
        return registry.get_sample_value(name, labels)

    assert v("kafka_network_requestmetrics_requests_total", request="Produce", version="9") == 1
    assert v("kafka_network_requestmetrics_errors_total", request="Produce", error="NOT_LEADER_OR_FOLLOWER") == 1
    assert v("kafka_network_requestmetrics_totaltime_seconds_sum", request="Produce") == pytest.approx(0.504)
    assert v("kafka_network_requestmetrics_requestqueuetime_seconds_sum", request="Produce") == pytest.approx(0.001)
    assert v("kafka_network_requestmetrics_localtime_seconds_sum", request="Produce") == pytest.approx(0.002)
    assert v("kafka_network_requestmetrics_remotetime_seconds_sum", request="Produce") == pytest.approx(0.5)
    # power-of-two buckets: 0.5 s lies between 2**28 ns and 2**29 ns
    assert v("kafka_network_requestmetrics_remotetime_seconds_bucket", request="Produce", le=repr(2**28 * 1e-9)) == 0
    assert v("kafka_network_requestmetrics_remotetime_seconds_bucket", request="Produce", le=repr(2**29 * 1e-9)) == 1
    assert v("kafka_network_requestmetrics_remotetime_seconds_count", request="Produce") == 1
    assert v("kafka_network_requestmetrics_responsesendtime_seconds_sum", request="Produce") == pytest.approx(0.001)
    assert v("kafka_network_requestmetrics_requestbytes_bucket", request="Produce", le="256.0") == 1
    assert v("kafka_network_requestmetrics_responsebytes_total", request="Produce") == 60


def test_log2_histogram_buckets_hold_values_below_their_bound():
    h = Log2Histogram(range(1, 4))  # le 2, 4, 8
    for x in (0, 1, 2, 3, 4, 7, 8, 100):
        h.observe(x)
    assert h.cumulative() == [("2.0", 2), ("4.0", 4), ("8.0", 6), ("+Inf", 8)]
    assert h.sum == 125


def test_fast_histogram_buckets_are_upper_bounds_inclusive():
    h = FastHistogram((1.0, 2.0))
    for x in (0.5, 1.0, 1.5, 2.0, 3.0):
        h.observe(x)
    assert h.cumulative() == [("1.0", 2), ("2.0", 4), ("+Inf", 5)]
    assert h.sum == 8.0


def test_an_isr_change_told_by_leader_and_isr_first_is_counted_once(broker, time):
    """The controller's LeaderAndIsr with the committed ISR can overtake the AlterPartition
    answer: the shrink is counted then, and the answer that follows changes nothing."""
    p = lead(broker.rm)
    broker.rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 0, 1, 1, 0, [1, 2], 1, [1, 2, 3])])
    assert p.isr == {1, 2}
    assert value(broker, "kafka_server_replicamanager_isrshrinks_total") == 1
    assert value(broker, "kafka_server_replicamanager_underreplicatedpartitions") == 1
    broker.rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 0, 1, 1, 0, [1, 2], 1, [1, 2, 3])])
    assert value(broker, "kafka_server_replicamanager_isrshrinks_total") == 1  # the same state again
    broker.rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 0, 1, 1, 0, [1, 2, 3], 2, [1, 2, 3])])
    assert value(broker, "kafka_server_replicamanager_isrexpands_total") == 1
    # A new leader epoch is no ISR change of this leader's.
    broker.rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 0, 1, 1, 1, [1], 3, [1, 2, 3])])
    assert value(broker, "kafka_server_replicamanager_isrshrinks_total") == 1
