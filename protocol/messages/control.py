"""Controller-to-broker APIs in their Kafka 3.x layouts (ZooKeeper-mode control plane, which
kbroker's controller speaks): LeaderAndIsr (4) v0-7, StopReplica (5) v0-4, UpdateMetadata (6)
v0-8, field for field as Kafka 3.9's JSON (3.4+: isKRaftController, KIP-866).

Two extensions of kbroker's own, in the protocol's own extension mechanism (tagged fields, so
Kafka's fields stay byte-exact and other parsers skip them), both flexible versions 6+:

* UpdateMetadata's TopicState carries ``topic_configs`` (tag 10000), the topic's complete set
  of config overrides as [{name, value}]. The controller always sends the whole set with every
  topic state, so a broker replaces what it had: an absent tag means the topic has no overrides.
* UpdateMetadata carries ``metadata_records`` (tag 10001): the controller's security records
  (AccessControlEntryRecord, RemoveAccessControlEntryRecord, UserScramCredentialRecord,
  RemoveUserScramCredentialRecord), each framed as in the metadata log
  (metadata_records.encode_record). A FULL request (type 2) holds the whole set and replaces
  what the broker had (an absent tag: none at all); an incremental one holds the records of
  the changes since, replayed in order.

Tags from 10000 up are kbroker's; Kafka numbers its own tags from 0.
"""

from ..schema import Field as F, Message

# The first tag number kbroker uses for its own tagged fields (Kafka numbers its tags from 0).
KBROKER_TOPIC_CONFIGS_TAG = 10000
KBROKER_METADATA_RECORDS_TAG = 10001

_LEADER_AND_ISR_PARTITION = [
    F("topic_name", "string", "0-1"),
    F("partition_index", "int32"),
    F("controller_epoch", "int32"),
    F("leader", "int32"),
    F("leader_epoch", "int32"),
    F("isr", "[]int32"),
    F("partition_epoch", "int32"),  # "ZkVersion" in the 2.x schemas
    F("replicas", "[]int32"),
    F("adding_replicas", "[]int32", "3+"),
    F("removing_replicas", "[]int32", "3+"),
    F("is_new", "bool", "1+", default=False),
    F("leader_recovery_state", "int8", "6+", default=0),
]

LEADER_AND_ISR_REQUEST = Message("LeaderAndIsrRequest", 4, "0-7", "4+", [
    F("controller_id", "int32"),
    F("is_kraft_controller", "bool", "7+", default=False),
    F("controller_epoch", "int32"),
    F("broker_epoch", "int64", "2+", default=-1),
    F("type", "int8", "5+"),
    F("ungrouped_partition_states", "[]LeaderAndIsrPartitionState", "0-1", fields=_LEADER_AND_ISR_PARTITION),
    F("topic_states", "[]LeaderAndIsrTopicState", "2+", fields=[
        F("topic_name", "string", "2+"),
        F("topic_id", "uuid", "5+"),
        F("partition_states", "[]LeaderAndIsrPartitionState", "2+", fields=_LEADER_AND_ISR_PARTITION),
    ]),
    F("live_leaders", "[]LeaderAndIsrLiveLeader", fields=[
        F("broker_id", "int32"),
        F("host_name", "string"),
        F("port", "int32"),
    ]),
])

_PARTITION_ERROR = [
    F("topic_name", "string", "0-4"),
    F("partition_index", "int32"),
    F("error_code", "int16"),
]

LEADER_AND_ISR_RESPONSE = Message("LeaderAndIsrResponse", 4, "0-7", "4+", [
    F("error_code", "int16"),
    F("partition_errors", "[]LeaderAndIsrPartitionError", "0-4", fields=_PARTITION_ERROR),
    F("topics", "[]LeaderAndIsrTopicError", "5+", fields=[
        F("topic_id", "uuid", "5+"),
        F("partition_errors", "[]LeaderAndIsrPartitionError", "5+", fields=_PARTITION_ERROR),
    ]),
])

STOP_REPLICA_REQUEST = Message("StopReplicaRequest", 5, "0-4", "2+", [
    F("controller_id", "int32"),
    F("is_kraft_controller", "bool", "4+", default=False),
    F("controller_epoch", "int32"),
    F("broker_epoch", "int64", "1+", default=-1),
    F("delete_partitions", "bool", "0-2"),
    F("ungrouped_partitions", "[]StopReplicaPartitionV0", "0", fields=[
        F("topic_name", "string", "0"),
        F("partition_index", "int32", "0"),
    ]),
    F("topics", "[]StopReplicaTopicV1", "1-2", fields=[
        F("name", "string", "1-2"),
        F("partition_indexes", "[]int32", "1-2"),
    ]),
    F("topic_states", "[]StopReplicaTopicState", "3+", fields=[
        F("topic_name", "string", "3+"),
        F("partition_states", "[]StopReplicaPartitionState", "3+", fields=[
            F("partition_index", "int32", "3+"),
            F("leader_epoch", "int32", "3+", default=-1),
            F("delete_partition", "bool", "3+"),
        ]),
    ]),
])

STOP_REPLICA_RESPONSE = Message("StopReplicaResponse", 5, "0-4", "2+", [
    F("error_code", "int16"),
    F("partition_errors", "[]StopReplicaPartitionError", fields=[
        F("topic_name", "string"),
        F("partition_index", "int32"),
        F("error_code", "int16"),
    ]),
])

_UPDATE_METADATA_PARTITION = [
    F("topic_name", "string", "0-4"),
    F("partition_index", "int32"),
    F("controller_epoch", "int32"),
    F("leader", "int32"),
    F("leader_epoch", "int32"),
    F("isr", "[]int32"),
    F("zk_version", "int32"),
    F("replicas", "[]int32"),
    F("offline_replicas", "[]int32", "4+"),
]

UPDATE_METADATA_REQUEST = Message("UpdateMetadataRequest", 6, "0-8", "6+", [
    F("controller_id", "int32"),
    F("is_kraft_controller", "bool", "8+", default=False),
    F("type", "int8", "8+", tag=0, tagged="8+", default=0),
    F("controller_epoch", "int32"),
    F("broker_epoch", "int64", "5+", default=-1),
    F("ungrouped_partition_states", "[]UpdateMetadataPartitionState", "0-4", fields=_UPDATE_METADATA_PARTITION),
    F("topic_states", "[]UpdateMetadataTopicState", "5+", fields=[
        F("topic_name", "string", "5+"),
        F("topic_id", "uuid", "7+"),
        F("partition_states", "[]UpdateMetadataPartitionState", "5+", fields=_UPDATE_METADATA_PARTITION),
        # kbroker's extension (see the module docstring): the topic's config overrides.
        F("topic_configs", "[]UpdateMetadataTopicConfig", "6+", tag=KBROKER_TOPIC_CONFIGS_TAG, tagged="6+", fields=[
            F("name", "string", "6+"),
            F("value", "string", "6+"),
        ]),
    ]),
    F("live_brokers", "[]UpdateMetadataBroker", fields=[
        F("id", "int32"),
        F("v0_host", "string", "0"),
        F("v0_port", "int32", "0"),
        F("endpoints", "[]UpdateMetadataEndpoint", "1+", fields=[
            F("port", "int32", "1+"),
            F("host", "string", "1+"),
            F("listener", "string", "3+"),
            F("security_protocol", "int16", "1+"),
        ]),
        F("rack", "string", "2+", nullable="0+"),
    ]),
    # kbroker's extension (see the module docstring): the controller's security records.
    F("metadata_records", "[]UpdateMetadataRecord", "6+", tag=KBROKER_METADATA_RECORDS_TAG, tagged="6+", fields=[
        F("record", "bytes", "6+"),
    ]),
])

UPDATE_METADATA_RESPONSE = Message("UpdateMetadataResponse", 6, "0-8", "6+", [
    F("error_code", "int16"),
])
