"""The controller's metrics, read from its state when scraped (Kafka's KafkaController,
ControllerStats and ControllerEventManager MBeans, in the JMX exporter's spelling)."""

from __future__ import annotations

from typing import Any, Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from broker.metrics import histogram_family
from protocol.errors import ErrorCode

PREFIX = "kafka_controller_kafkacontroller_"


class ControllerCollector:
    def __init__(self, controller: Callable[[], Any]) -> None:
        """``controller``: the running QuorumController (None once stopped)."""
        self.controller = controller

    def collect(self):
        controller = self.controller()
        if controller is None:
            return
        brokers = list(controller.cluster.brokers.values())
        partitions = list(controller.replication.all_partitions())

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(PREFIX + name, doc)
            family.add_metric([], value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            return family

        active = controller.active and controller.fatal_error is None
        yield gauge("activecontrollercount", "1 on the active controller (ActiveControllerCount)", 1 if active else 0)
        yield gauge("epoch", "The controller's epoch (its claimed term)", controller.epoch)
        yield gauge("activebrokercount", "Registered, unfenced brokers (ActiveBrokerCount)",
                    sum(1 for b in brokers if not b.fenced))
        yield gauge("fencedbrokercount", "Registered brokers that are fenced (FencedBrokerCount)",
                    sum(1 for b in brokers if b.fenced))
        yield gauge("globaltopiccount", "Topics (GlobalTopicCount)", len(controller.replication.topics))
        yield gauge("globalpartitioncount", "Partitions (GlobalPartitionCount)", len(partitions))
        yield gauge("offlinepartitionscount", "Partitions without a leader (OfflinePartitionsCount)",
                    controller.replication.offline_partition_count())
        yield gauge("reassigningpartitions", "Partitions being reassigned (the metadata's adding/removing replicas)",
                    sum(1 for _i, _p, part in partitions if part.is_reassigning))
        balancer = controller.autobalancer
        yield counter("kbroker_controller_autobalancer_moves", "Reassignments the partition autobalancer started "
                      "(partition.autobalancing.mode)", balancer.moves_started)
        yield GaugeMetricFamily("kbroker_controller_autobalancer_pending", "1 while a node_add balance is due or "
                                "in progress", value=1 if balancer.pending else 0)
        store = controller.store
        yield gauge("lastappliedrecordoffset", "The metadata log's last record (LastAppliedRecordOffset)",
                    store.end_offset - 1)
        size = getattr(store, "size_in_bytes", None)
        yield gauge("metadatalogsize_bytes", "Bytes of the metadata log on disk", size() if size is not None else 0)
        yield counter("kafka_controller_controllerstats_leaderelections", "Partition leader changes the controller "
                      "decided (LeaderElectionRateAndTimeMs' count)", controller.leader_elections)
        yield counter("kafka_controller_controllerstats_uncleanleaderelections", "Leaders elected from outside the "
                      "ISR (UncleanLeaderElectionsPerSec)", controller.replication.unclean_leader_elections)
        results = CounterMetricFamily("kafka_controller_alterpartition_results", "AlterPartition answers per "
                                      "partition, by error", labels=["error"])
        for code, n in sorted(controller.replication.alter_partition_results.items()):
            try:
                name = ErrorCode(code).name
            except ValueError:
                name = str(code)
            results.add_metric([name], n)
        yield results
        yield histogram_family("kafka_controller_controllereventmanager_eventqueuetime_seconds", "Time an event "
                               "waits in the controller's queue (EventQueueTimeMs)", [],
                               [((), controller.event_queue_time)])
        yield histogram_family("kafka_controller_controllereventmanager_eventqueueprocessingtime_seconds", "Time "
                               "an event takes to process (EventQueueProcessingTimeMs)", [],
                               [((), controller.event_processing_time)])
