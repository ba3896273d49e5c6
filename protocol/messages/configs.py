"""AlterConfigs (33) v0-2 and IncrementalAlterConfigs (44) v0-1 (DescribeConfigs is in
topics.py). Resource types are Kafka's ConfigResource.Type: 2 = topic, 4 = broker;
IncrementalAlterConfigs operations: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT."""

from ..schema import Field as F, Message

ALTER_CONFIGS_REQUEST = Message("AlterConfigsRequest", 33, "0-2", "2+", [
    F("resources", "[]AlterConfigsResource", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("configs", "[]AlterableConfig", fields=[
            F("name", "string"),
            F("value", "string", nullable="0+"),
        ]),
    ]),
    F("validate_only", "bool"),
])

ALTER_CONFIGS_RESPONSE = Message("AlterConfigsResponse", 33, "0-2", "2+", [
    F("throttle_time_ms", "int32"),
    F("responses", "[]AlterConfigsResourceResponse", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resource_type", "int8"),
        F("resource_name", "string"),
    ]),
])

INCREMENTAL_ALTER_CONFIGS_REQUEST = Message("IncrementalAlterConfigsRequest", 44, "0-1", "1+", [
    F("resources", "[]AlterConfigsResource", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("configs", "[]AlterableConfig", fields=[
            F("name", "string"),
            F("config_operation", "int8"),
            F("value", "string", nullable="0+"),
        ]),
    ]),
    F("validate_only", "bool"),
])

INCREMENTAL_ALTER_CONFIGS_RESPONSE = Message("IncrementalAlterConfigsResponse", 44, "0-1", "1+", [
    F("throttle_time_ms", "int32"),
    F("responses", "[]AlterConfigsResourceResponse", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resource_type", "int8"),
        F("resource_name", "string"),
    ]),
])
