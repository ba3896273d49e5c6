"""AlterPartition (56) v0-3, a partition leader to the controller (KIP-497, KIP-841, KIP-903).

The leader proposes a new ISR for the partitions it leads, naming the leader epoch and
partition epoch it acts on; the controller answers with the partition's committed state.
v2 names topics by id instead of name; v3 gives each proposed ISR member with its broker
epoch (``new_isr_with_epochs``) instead of ``new_isr``.
"""

from ..schema import Field as F, Message

REQUEST = Message("AlterPartitionRequest", 56, "0-3", "0+", [
    F("broker_id", "int32"),
    F("broker_epoch", "int64", default=-1),
    F("topics", "[]TopicData", fields=[
        F("topic_name", "string", "0-1"),
        F("topic_id", "uuid", "2+"),
        F("partitions", "[]PartitionData", fields=[
            F("partition_index", "int32"),
            F("leader_epoch", "int32"),
            F("new_isr", "[]int32", "0-2"),
            F("new_isr_with_epochs", "[]BrokerState", "3+", fields=[
                F("broker_id", "int32", "3+"),
                F("broker_epoch", "int64", "3+", default=-1),
            ]),
            F("leader_recovery_state", "int8", "1+", default=0),
            F("partition_epoch", "int32"),
        ]),
    ]),
])

RESPONSE = Message("AlterPartitionResponse", 56, "0-3", "0+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("topics", "[]TopicData", fields=[
        F("topic_name", "string", "0-1"),
        F("topic_id", "uuid", "2+"),
        F("partitions", "[]PartitionData", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("leader_id", "int32"),
            F("leader_epoch", "int32"),
            F("isr", "[]int32"),
            F("leader_recovery_state", "int8", "1+", default=0),
            F("partition_epoch", "int32"),
        ]),
    ]),
])
