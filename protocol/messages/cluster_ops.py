"""Running a cluster (issue 27): partition reassignment (KIP-455) AlterPartitionReassignments (45)
v0-1 and ListPartitionReassignments (46) v0, DeleteRecords (21) v0-2, DescribeLogDirs (35) v1-4 (the layouts to v5),
DescribeCluster (60) v0-2, client quotas (KIP-546) DescribeClientQuotas (48) v0-1 and
AlterClientQuotas (49) v0-1, and UnregisterBroker (64) v0. Kafka's layouts (the JSON files in
shared/kafka-protocol/schemas; UnregisterBroker's from apache/kafka's clients resources)."""

from ..schema import Field as F, Message

ALTER_PARTITION_REASSIGNMENTS_REQUEST = Message("AlterPartitionReassignmentsRequest", 45, "0-1", "0+", [
    F("timeout_ms", "int32", default=60000),
    F("allow_replication_factor_change", "bool", "1+", default=True),
    F("topics", "[]ReassignableTopic", fields=[
        F("name", "string"),
        F("partitions", "[]ReassignablePartition", fields=[
            F("partition_index", "int32"),
            F("replicas", "[]int32", nullable="0+", default="null"),
        ]),
    ]),
])

ALTER_PARTITION_REASSIGNMENTS_RESPONSE = Message("AlterPartitionReassignmentsResponse", 45, "0-1", "0+", [
    F("throttle_time_ms", "int32"),
    F("allow_replication_factor_change", "bool", "1+", default=True),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
    F("responses", "[]ReassignableTopicResponse", fields=[
        F("name", "string"),
        F("partitions", "[]ReassignablePartitionResponse", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ]),
])

LIST_PARTITION_REASSIGNMENTS_REQUEST = Message("ListPartitionReassignmentsRequest", 46, "0", "0+", [
    F("timeout_ms", "int32", default=60000),
    F("topics", "[]ListPartitionReassignmentsTopics", nullable="0+", default="null", fields=[
        F("name", "string"),
        F("partition_indexes", "[]int32"),
    ]),
])

LIST_PARTITION_REASSIGNMENTS_RESPONSE = Message("ListPartitionReassignmentsResponse", 46, "0", "0+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
    F("topics", "[]OngoingTopicReassignment", fields=[
        F("name", "string"),
        F("partitions", "[]OngoingPartitionReassignment", fields=[
            F("partition_index", "int32"),
            F("replicas", "[]int32"),
            F("adding_replicas", "[]int32"),
            F("removing_replicas", "[]int32"),
        ]),
    ]),
])

DELETE_RECORDS_REQUEST = Message("DeleteRecordsRequest", 21, "0-2", "2+", [
    F("topics", "[]DeleteRecordsTopic", fields=[
        F("name", "string"),
        F("partitions", "[]DeleteRecordsPartition", fields=[
            F("partition_index", "int32"),
            F("offset", "int64"),
        ]),
    ]),
    F("timeout_ms", "int32"),
])

DELETE_RECORDS_RESPONSE = Message("DeleteRecordsResponse", 21, "0-2", "2+", [
    F("throttle_time_ms", "int32"),
    F("topics", "[]DeleteRecordsTopicResult", fields=[
        F("name", "string"),
        F("partitions", "[]DeleteRecordsPartitionResult", fields=[
            F("partition_index", "int32"),
            F("low_watermark", "int64"),
            F("error_code", "int16"),
        ]),
    ]),
])

DESCRIBE_LOG_DIRS_REQUEST = Message("DescribeLogDirsRequest", 35, "1-5", "2+", [
    F("topics", "[]DescribableLogDirTopic", nullable="0+", fields=[
        F("topic", "string"),
        F("partitions", "[]int32"),
    ]),
])

DESCRIBE_LOG_DIRS_RESPONSE = Message("DescribeLogDirsResponse", 35, "1-5", "2+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16", "3+"),
    F("results", "[]DescribeLogDirsResult", fields=[
        F("error_code", "int16"),
        F("log_dir", "string"),
        F("topics", "[]DescribeLogDirsTopic", fields=[
            F("name", "string"),
            F("partitions", "[]DescribeLogDirsPartition", fields=[
                F("partition_index", "int32"),
                F("partition_size", "int64"),
                F("offset_lag", "int64"),
                F("is_future_key", "bool"),
            ]),
        ]),
        F("total_bytes", "int64", "4+", default=-1),
        F("usable_bytes", "int64", "4+", default=-1),
        F("is_cordoned", "bool", "5+"),
    ]),
])

DESCRIBE_CLUSTER_REQUEST = Message("DescribeClusterRequest", 60, "0-2", "0+", [
    F("include_cluster_authorized_operations", "bool"),
    F("endpoint_type", "int8", "1+", default=1),
    F("include_fenced_brokers", "bool", "2+"),
])

DESCRIBE_CLUSTER_RESPONSE = Message("DescribeClusterResponse", 60, "0-2", "0+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+", default="null"),
    F("endpoint_type", "int8", "1+", default=1),
    F("cluster_id", "string"),
    F("controller_id", "int32", default=-1),
    F("brokers", "[]DescribeClusterBroker", fields=[
        F("broker_id", "int32"),
        F("host", "string"),
        F("port", "int32"),
        F("rack", "string", nullable="0+", default="null"),
        F("is_fenced", "bool", "2+"),
    ]),
    F("cluster_authorized_operations", "int32", default=-2147483648),
])

_ENTITY = [
    F("entity_type", "string"),
    F("entity_name", "string", nullable="0+"),
]

DESCRIBE_CLIENT_QUOTAS_REQUEST = Message("DescribeClientQuotasRequest", 48, "0-1", "1+", [
    F("components", "[]ComponentData", fields=[
        F("entity_type", "string"),
        F("match_type", "int8"),
        F("match", "string", nullable="0+"),
    ]),
    F("strict", "bool"),
])

DESCRIBE_CLIENT_QUOTAS_RESPONSE = Message("DescribeClientQuotasResponse", 48, "0-1", "1+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
    F("entries", "[]EntryData", nullable="0+", fields=[
        F("entity", "[]EntityData", fields=_ENTITY),
        F("values", "[]ValueData", fields=[
            F("key", "string"),
            F("value", "float64"),
        ]),
    ]),
])

ALTER_CLIENT_QUOTAS_REQUEST = Message("AlterClientQuotasRequest", 49, "0-1", "1+", [
    F("entries", "[]EntryData", fields=[
        F("entity", "[]EntityData", fields=_ENTITY),
        F("ops", "[]OpData", fields=[
            F("key", "string"),
            F("value", "float64"),
            F("remove", "bool"),
        ]),
    ]),
    F("validate_only", "bool"),
])

ALTER_CLIENT_QUOTAS_RESPONSE = Message("AlterClientQuotasResponse", 49, "0-1", "1+", [
    F("throttle_time_ms", "int32"),
    F("entries", "[]EntryData", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("entity", "[]EntityData", fields=_ENTITY),
    ]),
])

UNREGISTER_BROKER_REQUEST = Message("UnregisterBrokerRequest", 64, "0", "0+", [
    F("broker_id", "int32"),
])

UNREGISTER_BROKER_RESPONSE = Message("UnregisterBrokerResponse", 64, "0", "0+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
])
