"""Produce (0): the construct definition, which is the specification and the test oracle.

The broker decodes requests and encodes responses with the hand-written codecs in
``protocol/fast_codecs.py``; tests check those against these schemas. Versions 0-2 (message
format 0/1) are advertised for librdkafka 2.0.2's sake and answered UNSUPPORTED_VERSION;
their layout is v3's without the transactional id.
"""

from ..schema import Field as F, Message

REQUEST = Message("ProduceRequest", 0, "0-13", "9+", [
    F("transactional_id", "string", "3+", nullable="3+", default="null"),
    F("acks", "int16"),
    F("timeout_ms", "int32"),
    F("topic_data", "[]TopicProduceData", fields=[
        F("name", "string", "0-12"),
        F("topic_id", "uuid", "13+"),
        F("partition_data", "[]PartitionProduceData", fields=[
            F("index", "int32"),
            F("records", "records", nullable="0+"),
        ]),
    ]),
])

RESPONSE = Message("ProduceResponse", 0, "0-13", "9+", [
    F("responses", "[]TopicProduceResponse", fields=[
        F("name", "string", "0-12"),
        F("topic_id", "uuid", "13+"),
        F("partition_responses", "[]PartitionProduceResponse", fields=[
            F("index", "int32"),
            F("error_code", "int16"),
            F("base_offset", "int64"),
            F("log_append_time_ms", "int64", "2+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("record_errors", "[]BatchIndexAndErrorMessage", "8+", fields=[
                F("batch_index", "int32", "8+"),
                F("batch_index_error_message", "string", "8+", nullable="8+", default="null"),
            ]),
            F("error_message", "string", "8+", nullable="8+", default="null"),
            F("current_leader", "LeaderIdAndEpoch", "10+", tag=0, tagged="10+", fields=[
                F("leader_id", "int32", "10+", default=-1),
                F("leader_epoch", "int32", "10+", default=-1),
            ]),
        ]),
    ]),
    F("throttle_time_ms", "int32", "1+", default=0),
    F("node_endpoints", "[]NodeEndpoint", "10+", tag=0, tagged="10+", fields=[
        F("node_id", "int32", "10+"),
        F("host", "string", "10+"),
        F("port", "int32", "10+"),
        F("rack", "string", "10+", nullable="10+", default="null"),
    ]),
])
