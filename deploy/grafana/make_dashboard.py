"""Writes deploy/grafana/kbroker.json, the Grafana dashboard (run it after editing the panels:
``python deploy/grafana/make_dashboard.py``). tests/metrics/test_dashboard.py checks that every
query names a metric kbroker exports."""

from __future__ import annotations

import json
from pathlib import Path

DS = {"type": "prometheus", "uid": "${datasource}"}

# (title, unit, [(expr, legend)], kind) in rows of two panels.
PANELS = [
    ("Messages in /s (per topic)", "short",
     [('sum by (topic) (rate(kafka_server_brokertopicmetrics_messagesin_total{topic!=""}[$__rate_interval]))',
       "{{topic}}")], "timeseries"),
    ("Bytes in / out /s (brokers)", "Bps",
     [('sum(rate(kafka_server_brokertopicmetrics_bytesin_total{topic=""}[$__rate_interval]))', "in"),
      ('sum(rate(kafka_server_brokertopicmetrics_bytesout_total{topic=""}[$__rate_interval]))', "out"),
      ('sum(rate(kafka_server_brokertopicmetrics_replicationbytesin_total[$__rate_interval]))', "replication in")],
     "timeseries"),
    ("Requests /s per API", "reqps",
     [("sum by (request) (rate(kafka_network_requestmetrics_requests_total[$__rate_interval]))", "{{request}}")],
     "timeseries"),
    ("p99 request time per API", "s",
     [("histogram_quantile(0.99, sum by (request, le) "
       "(rate(kafka_network_requestmetrics_totaltime_seconds_bucket[$__rate_interval])))", "{{request}}")],
     "timeseries"),
    ("p99 time in purgatory (remote) per API", "s",
     [("histogram_quantile(0.99, sum by (request, le) "
       "(rate(kafka_network_requestmetrics_remotetime_seconds_bucket[$__rate_interval])))", "{{request}}")],
     "timeseries"),
    ("Errors /s per API and code", "short",
     [("sum by (request, error) (rate(kafka_network_requestmetrics_errors_total[$__rate_interval]))",
       "{{request}} {{error}}")], "timeseries"),
    ("Under-replicated / under min ISR / offline partitions", "short",
     [("sum(kafka_server_replicamanager_underreplicatedpartitions)", "under-replicated"),
      ("sum(kafka_server_replicamanager_underminisrpartitioncount)", "under min ISR"),
      ("max(kafka_controller_kafkacontroller_offlinepartitionscount)", "offline")], "timeseries"),
    ("ISR churn /s", "short",
     [("sum(rate(kafka_server_replicamanager_isrshrinks_total[$__rate_interval]))", "shrinks"),
      ("sum(rate(kafka_server_replicamanager_isrexpands_total[$__rate_interval]))", "expands")], "timeseries"),
    ("Purgatory sizes", "short",
     [("sum by (instance, delayed_operation) (kafka_server_delayedoperationpurgatory_numdelayedoperations)",
       "{{instance}} {{delayed_operation}}")], "timeseries"),
    ("Follower lag (records)", "short",
     [("max by (topic, partition) (kafka_cluster_partition_replica_lag_records)", "{{topic}}-{{partition}}"),
      ("max(kafka_server_replicafetchermanager_maxlag)", "max (follower side)")], "timeseries"),
    ("Event-loop lag p99", "s",
     [("histogram_quantile(0.99, sum by (instance, le) (rate(kbroker_event_loop_lag_seconds_bucket[$__rate_interval])))",
       "{{instance}}")], "timeseries"),
    ("CPU per process", "percentunit",
     [("rate(process_cpu_seconds_total[$__rate_interval])", "{{instance}}")], "timeseries"),
    ("Active controllers", "short",
     [("sum(kafka_controller_kafkacontroller_activecontrollercount)", "active")], "stat"),
    ("Brokers: active / fenced", "short",
     [("max(kafka_controller_kafkacontroller_activebrokercount)", "active"),
      ("max(kafka_controller_kafkacontroller_fencedbrokercount)", "fenced")], "stat"),
    ("Controller event queue time p99", "s",
     [("histogram_quantile(0.99, sum by (le) "
       "(rate(kafka_controller_controllereventmanager_eventqueuetime_seconds_bucket[$__rate_interval])))", "p99")],
     "timeseries"),
    ("Reassignment: partitions moving, bytes copied", "short",
     [("max(kafka_controller_kafkacontroller_reassigningpartitions)", "partitions moving"),
      ("sum(kafka_server_replicamanager_reassigningpartitions)", "led partitions moving (brokers)"),
      ("sum by (instance) (kbroker_replicamanager_reassignment_adding_bytes)", "bytes held by new replicas {{instance}}"),
      ("sum(rate(kafka_server_brokertopicmetrics_replicationbytesin_total[$__rate_interval]))", "replication bytes in /s")],
     "timeseries"),
    ("Replication throttle: throttled replicas' rate and its bound", "Bps",
     [("sum by (instance) (kafka_server_leaderreplication_byte_rate)", "leader {{instance}}"),
      ("sum by (instance) (kafka_server_followerreplication_byte_rate)", "follower {{instance}}"),
      ("max(kafka_server_leaderreplication_throttled_rate)", "leader.replication.throttled.rate"),
      ("max(kafka_server_followerreplication_throttled_rate)", "follower.replication.throttled.rate")],
     "timeseries"),
    ("Autobalancer moves /s", "short",
     [("sum(rate(kbroker_controller_autobalancer_moves_total[$__rate_interval]))", "moves started"),
      ("max(kbroker_controller_autobalancer_pending)", "balance due")], "timeseries"),
    ("Quota throttle time (ms, last per entity)", "ms",
     [("max by (user, client_id) (kafka_server_produce_throttle_time)", "produce {{user}} {{client_id}}"),
      ("max by (user, client_id) (kafka_server_fetch_throttle_time)", "fetch {{user}} {{client_id}}"),
      ("max by (user, client_id) (kafka_server_request_throttle_time)", "request {{user}} {{client_id}}")],
     "timeseries"),
    ("Leader elections /s", "short",
     [("sum(rate(kafka_controller_controllerstats_leaderelections_total[$__rate_interval]))", "elections"),
      ("sum(rate(kafka_controller_controllerstats_uncleanleaderelections_total[$__rate_interval]))", "unclean")],
     "timeseries"),
]


def panel(i: int, title: str, unit: str, targets, kind: str) -> dict:
    return {
        "id": i + 1, "type": kind, "title": title, "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}} if kind == "timeseries" else {},
        "targets": [{"refId": chr(ord("A") + j), "datasource": DS, "expr": expr, "legendFormat": legend}
                    for j, (expr, legend) in enumerate(targets)],
    }


def dashboard() -> dict:
    return {
        "title": "kbroker", "uid": "kbroker", "tags": ["kafka", "kbroker"], "timezone": "browser",
        "schemaVersion": 38, "version": 1, "editable": True, "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus", "current": {}, "hide": 0}]},
        "annotations": {"list": []},
        "panels": [panel(i, *p) for i, p in enumerate(PANELS)],
    }


if __name__ == "__main__":
    out = Path(__file__).with_name("kbroker.json")
    out.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {out}")
