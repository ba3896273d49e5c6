"""OffsetForLeaderEpoch (23): the end offset of a leader epoch, for truncation (KIP-101)
and for clients validating their position (KIP-320)."""

from ..schema import Field as F, Message

REQUEST = Message("OffsetForLeaderEpochRequest", 23, "2-4", "4+", [
    F("replica_id", "int32", "3+", default=-2),
    F("topics", "[]OffsetForLeaderTopic", fields=[
        F("topic", "string"),
        F("partitions", "[]OffsetForLeaderPartition", fields=[
            F("partition", "int32"),
            F("current_leader_epoch", "int32", "2+", default=-1),
            F("leader_epoch", "int32"),
        ]),
    ]),
])

RESPONSE = Message("OffsetForLeaderEpochResponse", 23, "2-4", "4+", [
    F("throttle_time_ms", "int32", "2+"),
    F("topics", "[]OffsetForLeaderTopicResult", fields=[
        F("topic", "string"),
        F("partitions", "[]EpochEndOffset", fields=[
            F("error_code", "int16"),
            F("partition", "int32"),
            F("leader_epoch", "int32", "1+", default=-1),
            F("end_offset", "int64", default=-1),
        ]),
    ]),
])
