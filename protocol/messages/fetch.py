"""Fetch (1): the construct definition (specification and test oracle of protocol/fast_codecs.py)."""

from ..schema import Field as F, Message

REQUEST = Message("FetchRequest", 1, "4-18", "12+", [
    F("cluster_id", "string", "12+", nullable="12+", default="null", tag=0, tagged="12+"),
    F("replica_id", "int32", "0-14", default=-1),
    F("replica_state", "ReplicaState", "15+", tag=1, tagged="15+", fields=[
        F("replica_id", "int32", "15+", default=-1),
        F("replica_epoch", "int64", "15+", default=-1),
    ]),
    F("max_wait_ms", "int32"),
    F("min_bytes", "int32"),
    F("max_bytes", "int32", "3+", default=0x7FFFFFFF),
    F("isolation_level", "int8", "4+", default=0),
    F("session_id", "int32", "7+", default=0),
    F("session_epoch", "int32", "7+", default=-1),
    F("topics", "[]FetchTopic", fields=[
        F("topic", "string", "0-12"),
        F("topic_id", "uuid", "13+"),
        F("partitions", "[]FetchPartition", fields=[
            F("partition", "int32"),
            F("current_leader_epoch", "int32", "9+", default=-1),
            F("fetch_offset", "int64"),
            F("last_fetched_epoch", "int32", "12+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("partition_max_bytes", "int32"),
            F("replica_directory_id", "uuid", "17+", tag=0, tagged="17+"),
            F("high_watermark", "int64", "18+", default=0x7FFFFFFFFFFFFFFF, tag=1, tagged="18+"),
        ]),
    ]),
    F("forgotten_topics_data", "[]ForgottenTopic", "7+", fields=[
        F("topic", "string", "7-12"),
        F("topic_id", "uuid", "13+"),
        F("partitions", "[]int32", "7+"),
    ]),
    F("rack_id", "string", "11+", default=""),
])

RESPONSE = Message("FetchResponse", 1, "4-18", "12+", [
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "7+"),
    F("session_id", "int32", "7+", default=0),
    F("responses", "[]FetchableTopicResponse", fields=[
        F("topic", "string", "0-12"),
        F("topic_id", "uuid", "13+"),
        F("partitions", "[]PartitionData", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("high_watermark", "int64"),
            F("last_stable_offset", "int64", "4+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("diverging_epoch", "EpochEndOffset", "12+", tag=0, tagged="12+", fields=[
                F("epoch", "int32", "12+", default=-1),
                F("end_offset", "int64", "12+", default=-1),
            ]),
            F("current_leader", "LeaderIdAndEpoch", "12+", tag=1, tagged="12+", fields=[
                F("leader_id", "int32", "12+", default=-1),
                F("leader_epoch", "int32", "12+", default=-1),
            ]),
            F("snapshot_id", "SnapshotId", "12+", tag=2, tagged="12+", fields=[
                F("end_offset", "int64", default=-1),
                F("epoch", "int32", default=-1),
            ]),
            F("aborted_transactions", "[]AbortedTransaction", "4+", nullable="4+", fields=[
                F("producer_id", "int64", "4+"),
                F("first_offset", "int64", "4+"),
            ]),
            F("preferred_read_replica", "int32", "11+", default=-1),
            F("records", "records", nullable="0+"),
        ]),
    ]),
    F("node_endpoints", "[]NodeEndpoint", "16+", tag=0, tagged="16+", fields=[
        F("node_id", "int32", "16+"),
        F("host", "string", "16+"),
        F("port", "int32", "16+"),
        F("rack", "string", "16+", nullable="16+", default="null"),
    ]),
])
