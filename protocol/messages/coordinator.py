"""FindCoordinator (10): where a group's coordinator is (key type 0; 1 is a transactional id).
From v4 one request asks for several keys (``coordinator_keys``) and the answer lists one
coordinator per key. librdkafka 2.0.2 also needs it advertised to enable lz4 and groups."""

from ..schema import Field as F, Message

FIND_COORDINATOR_REQUEST = Message("FindCoordinatorRequest", 10, "0-6", "3+", [
    F("key", "string", "0-3"),
    F("key_type", "int8", "1+", default=0),
    F("coordinator_keys", "[]string", "4+"),
])

FIND_COORDINATOR_RESPONSE = Message("FindCoordinatorResponse", 10, "0-6", "3+", [
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "0-3"),
    F("error_message", "string", "1-3", nullable="1-3"),
    F("node_id", "int32", "0-3"),
    F("host", "string", "0-3"),
    F("port", "int32", "0-3"),
    F("coordinators", "[]Coordinator", "4+", fields=[
        F("key", "string", "4+"),
        F("node_id", "int32", "4+"),
        F("host", "string", "4+"),
        F("port", "int32", "4+"),
        F("error_code", "int16", "4+"),
        F("error_message", "string", "4+", nullable="4+"),
    ]),
])
