"""CreateTopics (19), DeleteTopics (20), DescribeConfigs (32), CreatePartitions (37) and
ElectLeaders (43: election type 0 = preferred, 1 = unclean)."""

from ..schema import Field as F, Message

CREATE_TOPICS_REQUEST = Message("CreateTopicsRequest", 19, "2-7", "5+", [
    F("topics", "[]CreatableTopic", fields=[
        F("name", "string"),
        F("num_partitions", "int32"),
        F("replication_factor", "int16"),
        F("assignments", "[]CreatableReplicaAssignment", fields=[
            F("partition_index", "int32"),
            F("broker_ids", "[]int32"),
        ]),
        F("configs", "[]CreatableTopicConfig", fields=[
            F("name", "string"),
            F("value", "string", nullable="0+"),
        ]),
    ]),
    F("timeout_ms", "int32", default=60000),
    F("validate_only", "bool", "1+", default=False),
])

CREATE_TOPICS_RESPONSE = Message("CreateTopicsResponse", 19, "2-7", "5+", [
    F("throttle_time_ms", "int32", "2+"),
    F("topics", "[]CreatableTopicResult", fields=[
        F("name", "string"),
        F("topic_id", "uuid", "7+"),
        F("error_code", "int16"),
        F("error_message", "string", "1+", nullable="0+"),
        F("topic_config_error_code", "int16", "5+", tag=0, tagged="5+"),
        F("num_partitions", "int32", "5+", default=-1),
        F("replication_factor", "int16", "5+", default=-1),
        F("configs", "[]CreatableTopicConfigs", "5+", nullable="5+", fields=[
            F("name", "string", "5+"),
            F("value", "string", "5+", nullable="5+"),
            F("read_only", "bool", "5+"),
            F("config_source", "int8", "5+", default=-1),
            F("is_sensitive", "bool", "5+"),
        ]),
    ]),
])

DELETE_TOPICS_REQUEST = Message("DeleteTopicsRequest", 20, "1-6", "4+", [
    F("topics", "[]DeleteTopicState", "6+", fields=[
        F("name", "string", "6+", nullable="6+", default="null"),
        F("topic_id", "uuid", "6+"),
    ]),
    F("topic_names", "[]string", "0-5"),
    F("timeout_ms", "int32"),
])

DELETE_TOPICS_RESPONSE = Message("DeleteTopicsResponse", 20, "1-6", "4+", [
    F("throttle_time_ms", "int32", "1+"),
    F("responses", "[]DeletableTopicResult", fields=[
        F("name", "string", nullable="6+"),
        F("topic_id", "uuid", "6+"),
        F("error_code", "int16"),
        F("error_message", "string", "5+", nullable="5+", default="null"),
    ]),
])

DESCRIBE_CONFIGS_REQUEST = Message("DescribeConfigsRequest", 32, "1-4", "4+", [
    F("resources", "[]DescribeConfigsResource", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("configuration_keys", "[]string", nullable="0+"),
    ]),
    F("include_synonyms", "bool", "1+", default=False),
    F("include_documentation", "bool", "3+", default=False),
])

DESCRIBE_CONFIGS_RESPONSE = Message("DescribeConfigsResponse", 32, "1-4", "4+", [
    F("throttle_time_ms", "int32"),
    F("results", "[]DescribeConfigsResult", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("configs", "[]DescribeConfigsResourceResult", fields=[
            F("name", "string"),
            F("value", "string", nullable="0+"),
            F("read_only", "bool"),
            F("config_source", "int8", "1+", default=-1),
            F("is_default", "bool", "0"),
            F("is_sensitive", "bool"),
            F("synonyms", "[]DescribeConfigsSynonym", "1+", fields=[
                F("name", "string", "1+"),
                F("value", "string", "1+", nullable="0+"),
                F("source", "int8", "1+"),
            ]),
            F("config_type", "int8", "3+", default=0),
            F("documentation", "string", "3+", nullable="0+"),
        ]),
    ]),
])

CREATE_PARTITIONS_REQUEST = Message("CreatePartitionsRequest", 37, "0-3", "2+", [
    F("topics", "[]CreatePartitionsTopic", fields=[
        F("name", "string"),
        F("count", "int32"),
        F("assignments", "[]CreatePartitionsAssignment", nullable="0+", fields=[
            F("broker_ids", "[]int32"),
        ]),
    ]),
    F("timeout_ms", "int32"),
    F("validate_only", "bool"),
])

CREATE_PARTITIONS_RESPONSE = Message("CreatePartitionsResponse", 37, "0-3", "2+", [
    F("throttle_time_ms", "int32"),
    F("results", "[]CreatePartitionsTopicResult", fields=[
        F("name", "string"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default="null"),
    ]),
])

ELECT_LEADERS_REQUEST = Message("ElectLeadersRequest", 43, "0-2", "2+", [
    F("election_type", "int8", "1+"),
    F("topic_partitions", "[]TopicPartitions", nullable="0+", fields=[
        F("topic", "string"),
        F("partitions", "[]int32"),
    ]),
    F("timeout_ms", "int32", default=60000),
])

ELECT_LEADERS_RESPONSE = Message("ElectLeadersResponse", 43, "0-2", "2+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16", "1+"),
    F("replica_election_results", "[]ReplicaElectionResult", fields=[
        F("topic", "string"),
        F("partition_result", "[]PartitionResult", fields=[
            F("partition_id", "int32"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ]),
])
