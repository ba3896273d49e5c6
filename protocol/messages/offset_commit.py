"""Committed offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47).

Field by field from Kafka's JSON message definitions (Kafka 4's floors: OffsetCommit 2+,
OffsetFetch 1+). OffsetFetch v8+ batches groups; OffsetCommit/OffsetFetch v10 name topics by
id (KIP-848) and exist here for completeness of the layout.
"""

from ..schema import Field as F, Message

OFFSET_COMMIT_REQUEST = Message("OffsetCommitRequest", 8, "2-10", "8+", [
    F("group_id", "string"),
    F("generation_id_or_member_epoch", "int32", "1+", default=-1),
    F("member_id", "string", "1+"),
    F("group_instance_id", "string", "7+", nullable="7+", default="null"),
    F("retention_time_ms", "int64", "2-4", default=-1),
    F("topics", "[]OffsetCommitRequestTopic", fields=[
        F("name", "string", "0-9"),
        F("topic_id", "uuid", "10+"),
        F("partitions", "[]OffsetCommitRequestPartition", fields=[
            F("partition_index", "int32"),
            F("committed_offset", "int64"),
            F("committed_leader_epoch", "int32", "6+", default=-1),
            F("commit_timestamp", "int64", "1", default=-1),
            F("committed_metadata", "string", nullable="0+"),
        ]),
    ]),
])

OFFSET_COMMIT_RESPONSE = Message("OffsetCommitResponse", 8, "2-10", "8+", [
    F("throttle_time_ms", "int32", "3+"),
    F("topics", "[]OffsetCommitResponseTopic", fields=[
        F("name", "string", "0-9"),
        F("topic_id", "uuid", "10+"),
        F("partitions", "[]OffsetCommitResponsePartition", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
        ]),
    ]),
])

OFFSET_FETCH_REQUEST = Message("OffsetFetchRequest", 9, "1-10", "6+", [
    F("group_id", "string", "0-7"),
    F("topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=[
        F("name", "string", "0-7"),
        F("partition_indexes", "[]int32", "0-7"),
    ]),
    F("groups", "[]OffsetFetchRequestGroup", "8+", fields=[
        F("group_id", "string", "8+"),
        F("member_id", "string", "9+", nullable="9+", default="null"),
        F("member_epoch", "int32", "9+", default=-1),
        F("topics", "[]OffsetFetchRequestTopics", "8+", nullable="8+", fields=[
            F("name", "string", "8-9"),
            F("topic_id", "uuid", "10+"),
            F("partition_indexes", "[]int32", "8+"),
        ]),
    ]),
    F("require_stable", "bool", "7+", default=False),
])

OFFSET_FETCH_RESPONSE = Message("OffsetFetchResponse", 9, "1-10", "6+", [
    F("throttle_time_ms", "int32", "3+"),
    F("topics", "[]OffsetFetchResponseTopic", "0-7", fields=[
        F("name", "string", "0-7"),
        F("partitions", "[]OffsetFetchResponsePartition", "0-7", fields=[
            F("partition_index", "int32", "0-7"),
            F("committed_offset", "int64", "0-7"),
            F("committed_leader_epoch", "int32", "5-7", default=-1),
            F("metadata", "string", "0-7", nullable="0-7"),
            F("error_code", "int16", "0-7"),
        ]),
    ]),
    F("error_code", "int16", "2-7", default=0),
    F("groups", "[]OffsetFetchResponseGroup", "8+", fields=[
        F("group_id", "string", "8+"),
        F("topics", "[]OffsetFetchResponseTopics", "8+", fields=[
            F("name", "string", "8-9"),
            F("topic_id", "uuid", "10+"),
            F("partitions", "[]OffsetFetchResponsePartitions", "8+", fields=[
                F("partition_index", "int32", "8+"),
                F("committed_offset", "int64", "8+"),
                F("committed_leader_epoch", "int32", "8+", default=-1),
                F("metadata", "string", "8+", nullable="8+"),
                F("error_code", "int16", "8+"),
            ]),
        ]),
        F("error_code", "int16", "8+", default=0),
    ]),
])

OFFSET_DELETE_REQUEST = Message("OffsetDeleteRequest", 47, "0", "none", [
    F("group_id", "string"),
    F("topics", "[]OffsetDeleteRequestTopic", fields=[
        F("name", "string"),
        F("partitions", "[]OffsetDeleteRequestPartition", fields=[
            F("partition_index", "int32"),
        ]),
    ]),
])

OFFSET_DELETE_RESPONSE = Message("OffsetDeleteResponse", 47, "0", "none", [
    F("error_code", "int16"),
    F("throttle_time_ms", "int32"),
    F("topics", "[]OffsetDeleteResponseTopic", fields=[
        F("name", "string"),
        F("partitions", "[]OffsetDeleteResponsePartition", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
        ]),
    ]),
])
