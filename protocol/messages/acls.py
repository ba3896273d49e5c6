"""ACLs (KIP-140, KIP-290): DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v0-3.

Codes are Kafka's: resource type (2 topic, 3 group, 4 cluster, 5 transactional id, 6
delegation token, 7 user; 1 ANY in filters), pattern type (3 LITERAL, 4 PREFIXED; 1 ANY and
2 MATCH in filters; v0 has no pattern type: LITERAL), operation (2 ALL, 3 READ ... 14
DESCRIBE_TOKENS; 1 ANY in filters) and permission (2 DENY, 3 ALLOW; 1 ANY in filters).
Kafka 4 dropped v0; Kafka 3.9, whose clients we serve, still speaks it.
"""

from ..schema import Field as F, Message

DESCRIBE_ACLS_REQUEST = Message("DescribeAclsRequest", 29, "0-3", "2+", [
    F("resource_type_filter", "int8"),
    F("resource_name_filter", "string", nullable="0+"),
    F("pattern_type_filter", "int8", "1+", default=3),
    F("principal_filter", "string", nullable="0+"),
    F("host_filter", "string", nullable="0+"),
    F("operation", "int8"),
    F("permission_type", "int8"),
])

DESCRIBE_ACLS_RESPONSE = Message("DescribeAclsResponse", 29, "0-3", "2+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
    F("resources", "[]DescribeAclsResource", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("pattern_type", "int8", "1+", default=3),
        F("acls", "[]AclDescription", fields=[
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ]),
])

CREATE_ACLS_REQUEST = Message("CreateAclsRequest", 30, "0-3", "2+", [
    F("creations", "[]AclCreation", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("resource_pattern_type", "int8", "1+", default=3),
        F("principal", "string"),
        F("host", "string"),
        F("operation", "int8"),
        F("permission_type", "int8"),
    ]),
])

CREATE_ACLS_RESPONSE = Message("CreateAclsResponse", 30, "0-3", "2+", [
    F("throttle_time_ms", "int32"),
    F("results", "[]AclCreationResult", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ]),
])

DELETE_ACLS_REQUEST = Message("DeleteAclsRequest", 31, "0-3", "2+", [
    F("filters", "[]DeleteAclsFilter", fields=[
        F("resource_type_filter", "int8"),
        F("resource_name_filter", "string", nullable="0+"),
        F("pattern_type_filter", "int8", "1+", default=3),
        F("principal_filter", "string", nullable="0+"),
        F("host_filter", "string", nullable="0+"),
        F("operation", "int8"),
        F("permission_type", "int8"),
    ]),
])

DELETE_ACLS_RESPONSE = Message("DeleteAclsResponse", 31, "0-3", "2+", [
    F("throttle_time_ms", "int32"),
    F("filter_results", "[]DeleteAclsFilterResult", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("matching_acls", "[]DeleteAclsMatchingAcl", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("pattern_type", "int8", "1+", default=3),
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ]),
])
