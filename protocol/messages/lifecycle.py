"""Broker lifecycle APIs, brokers to the controller: BrokerRegistration (62) v0-4, BrokerHeartbeat
(63) v0-1 and ControlledShutdown (7) v0-3, in their Kafka 3.9 layouts.

A broker registers once per process start (its incarnation id) and is given a broker epoch;
it then heartbeats with that epoch. ControlledShutdown v0 has a non-standard request header
without a client id (Kafka's RequestHeader.json), so only v1-3 are spoken.
"""

from ..schema import Field as F, Message

BROKER_REGISTRATION_REQUEST = Message("BrokerRegistrationRequest", 62, "0-4", "0+", [
    F("broker_id", "int32"),
    F("cluster_id", "string"),
    F("incarnation_id", "uuid"),
    F("listeners", "[]Listener", fields=[
        F("name", "string"),
        F("host", "string"),
        F("port", "uint16"),
        F("security_protocol", "int16"),
    ]),
    F("features", "[]Feature", fields=[
        F("name", "string"),
        F("min_supported_version", "int16"),
        F("max_supported_version", "int16"),
    ]),
    F("rack", "string", nullable="0+"),
    F("is_migrating_zk_broker", "bool", "1+", default=False),
    F("log_dirs", "[]uuid", "2+"),
    F("previous_broker_epoch", "int64", "3+", default=-1),
])

BROKER_REGISTRATION_RESPONSE = Message("BrokerRegistrationResponse", 62, "0-4", "0+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("broker_epoch", "int64", default=-1),
])

BROKER_HEARTBEAT_REQUEST = Message("BrokerHeartbeatRequest", 63, "0-1", "0+", [
    F("broker_id", "int32"),
    F("broker_epoch", "int64", default=-1),
    F("current_metadata_offset", "int64"),
    F("want_fence", "bool"),
    F("want_shut_down", "bool"),
    F("offline_log_dirs", "[]uuid", "1+", tag=0, tagged="1+"),
    # kbroker's own (not in Kafka's schema; Kafka ignores unknown tags): the file system usage of
    # each log dir, for the controller's partition autobalancer (as Redpanda's health report), in
    # the order of log.dirs (no paths: the bytes on the wire stay the same from run to run).
    F("log_dir_usage", "[]LogDirUsage", "0+", tag=10000, tagged="0+", fields=[
        F("total_bytes", "int64"),
        F("used_bytes", "int64"),
    ]),
])

BROKER_HEARTBEAT_RESPONSE = Message("BrokerHeartbeatResponse", 63, "0-1", "0+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("is_caught_up", "bool", default=False),
    F("is_fenced", "bool", default=True),
    F("should_shut_down", "bool"),
])

CONTROLLED_SHUTDOWN_REQUEST = Message("ControlledShutdownRequest", 7, "0-3", "3+", [
    F("broker_id", "int32"),
    F("broker_epoch", "int64", "2+", default=-1),
])

CONTROLLED_SHUTDOWN_RESPONSE = Message("ControlledShutdownResponse", 7, "0-3", "3+", [
    F("error_code", "int16"),
    F("remaining_partitions", "[]RemainingPartition", fields=[
        F("topic_name", "string"),
        F("partition_index", "int32"),
    ]),
])
