"""The classic group membership APIs: JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42).

Field by field from Kafka's JSON message definitions. The member metadata and assignment
bytes are opaque here; for protocol type "consumer" they hold ConsumerProtocolSubscription
and ConsumerProtocolAssignment (messages/consumer_protocol.py).
"""

from ..schema import Field as F, Message

JOIN_GROUP_REQUEST = Message("JoinGroupRequest", 11, "0-9", "6+", [
    F("group_id", "string"),
    F("session_timeout_ms", "int32"),
    F("rebalance_timeout_ms", "int32", "1+", default=-1),
    F("member_id", "string"),
    F("group_instance_id", "string", "5+", nullable="5+", default="null"),
    F("protocol_type", "string"),
    F("protocols", "[]JoinGroupRequestProtocol", fields=[
        F("name", "string"),
        F("metadata", "bytes"),
    ]),
    F("reason", "string", "8+", nullable="8+", default="null"),
])

JOIN_GROUP_RESPONSE = Message("JoinGroupResponse", 11, "0-9", "6+", [
    F("throttle_time_ms", "int32", "2+"),
    F("error_code", "int16"),
    F("generation_id", "int32", default=-1),
    F("protocol_type", "string", "7+", nullable="7+", default="null"),
    F("protocol_name", "string", nullable="7+"),
    F("leader", "string"),
    F("skip_assignment", "bool", "9+", default=False),
    F("member_id", "string"),
    F("members", "[]JoinGroupResponseMember", fields=[
        F("member_id", "string"),
        F("group_instance_id", "string", "5+", nullable="5+", default="null"),
        F("metadata", "bytes"),
    ]),
])

HEARTBEAT_REQUEST = Message("HeartbeatRequest", 12, "0-4", "4+", [
    F("group_id", "string"),
    F("generation_id", "int32"),
    F("member_id", "string"),
    F("group_instance_id", "string", "3+", nullable="3+", default="null"),
])

HEARTBEAT_RESPONSE = Message("HeartbeatResponse", 12, "0-4", "4+", [
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16"),
])

LEAVE_GROUP_REQUEST = Message("LeaveGroupRequest", 13, "0-5", "4+", [
    F("group_id", "string"),
    F("member_id", "string", "0-2"),
    F("members", "[]MemberIdentity", "3+", fields=[
        F("member_id", "string", "3+"),
        F("group_instance_id", "string", "3+", nullable="3+", default="null"),
        F("reason", "string", "5+", nullable="5+", default="null"),
    ]),
])

LEAVE_GROUP_RESPONSE = Message("LeaveGroupResponse", 13, "0-5", "4+", [
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16"),
    F("members", "[]MemberResponse", "3+", fields=[
        F("member_id", "string", "3+"),
        F("group_instance_id", "string", "3+", nullable="3+"),
        F("error_code", "int16", "3+"),
    ]),
])

SYNC_GROUP_REQUEST = Message("SyncGroupRequest", 14, "0-5", "4+", [
    F("group_id", "string"),
    F("generation_id", "int32"),
    F("member_id", "string"),
    F("group_instance_id", "string", "3+", nullable="3+", default="null"),
    F("protocol_type", "string", "5+", nullable="5+", default="null"),
    F("protocol_name", "string", "5+", nullable="5+", default="null"),
    F("assignments", "[]SyncGroupRequestAssignment", fields=[
        F("member_id", "string"),
        F("assignment", "bytes"),
    ]),
])

SYNC_GROUP_RESPONSE = Message("SyncGroupResponse", 14, "0-5", "4+", [
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16"),
    F("protocol_type", "string", "5+", nullable="5+", default="null"),
    F("protocol_name", "string", "5+", nullable="5+", default="null"),
    F("assignment", "bytes"),
])

DESCRIBE_GROUPS_REQUEST = Message("DescribeGroupsRequest", 15, "0-5", "5+", [
    F("groups", "[]string"),
    F("include_authorized_operations", "bool", "3+"),
])

DESCRIBE_GROUPS_RESPONSE = Message("DescribeGroupsResponse", 15, "0-5", "5+", [
    F("throttle_time_ms", "int32", "1+"),
    F("groups", "[]DescribedGroup", fields=[
        F("error_code", "int16"),
        F("group_id", "string"),
        F("group_state", "string"),
        F("protocol_type", "string"),
        F("protocol_data", "string"),
        F("members", "[]DescribedGroupMember", fields=[
            F("member_id", "string"),
            F("group_instance_id", "string", "4+", nullable="4+", default="null"),
            F("client_id", "string"),
            F("client_host", "string"),
            F("member_metadata", "bytes"),
            F("member_assignment", "bytes"),
        ]),
        F("authorized_operations", "int32", "3+", default=-2147483648),
    ]),
])

LIST_GROUPS_REQUEST = Message("ListGroupsRequest", 16, "0-5", "3+", [
    F("states_filter", "[]string", "4+"),
    F("types_filter", "[]string", "5+"),
])

LIST_GROUPS_RESPONSE = Message("ListGroupsResponse", 16, "0-5", "3+", [
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16"),
    F("groups", "[]ListedGroup", fields=[
        F("group_id", "string"),
        F("protocol_type", "string"),
        F("group_state", "string", "4+"),
        F("group_type", "string", "5+"),
    ]),
])

DELETE_GROUPS_REQUEST = Message("DeleteGroupsRequest", 42, "0-2", "2+", [
    F("groups_names", "[]string"),
])

DELETE_GROUPS_RESPONSE = Message("DeleteGroupsResponse", 42, "0-2", "2+", [
    F("throttle_time_ms", "int32"),
    F("results", "[]DeletableGroupResult", fields=[
        F("group_id", "string"),
        F("error_code", "int16"),
    ]),
])
