"""The APIs kbroker speaks, with the version ranges it supports and advertises.

The ranges are one table that serves every client we test against (kcat / librdkafka
2.0.2, confluent-kafka, kafka-python and aiokafka): each of them finds the versions it
negotiates in it. ``APIS`` is the single list:
ApiVersions responses and the client's version negotiation are both derived from it (a server
advertises the APIs of this list that it handles: the broker and the controller handle different
ones).
"""

from __future__ import annotations

from ..api_keys import ApiKey
from ..schema import Api, Message
from . import (acls, alter_partition, api_versions, configs, control, coordinator, fetch, groups, leader_epoch,
               lifecycle, list_offsets, metadata, offset_commit, produce, producer, sasl, scram, topics, transactions)
from . import cluster_ops

APIS: dict[int, Api] = {a.key: a for a in (
    # Produce 0-2 (message format 0/1) are advertised but answered UNSUPPORTED_VERSION, as Kafka 4
    # does (KAFKA-18659): librdkafka 2.0.2 sends compressed batches uncompressed unless Produce ∋ 0.
    Api(ApiKey.PRODUCE, "Produce", produce.REQUEST, produce.RESPONSE, 3, 8, advertised_min=0),
    Api(ApiKey.FETCH, "Fetch", fetch.REQUEST, fetch.RESPONSE, 4, 11),
    Api(ApiKey.LIST_OFFSETS, "ListOffsets", list_offsets.REQUEST, list_offsets.RESPONSE, 1, 5),
    Api(ApiKey.METADATA, "Metadata", metadata.REQUEST, metadata.RESPONSE, 0, 8),
    Api(ApiKey.FIND_COORDINATOR, "FindCoordinator", coordinator.FIND_COORDINATOR_REQUEST,
        coordinator.FIND_COORDINATOR_RESPONSE, 0, 4),
    Api(ApiKey.API_VERSIONS, "ApiVersions", api_versions.REQUEST, api_versions.RESPONSE, 0, 4),
    # Authentication on SASL listeners (broker/security/sasl_server.py); elsewhere ILLEGAL_SASL_STATE.
    Api(ApiKey.SASL_HANDSHAKE, "SaslHandshake", sasl.SASL_HANDSHAKE_REQUEST, sasl.SASL_HANDSHAKE_RESPONSE, 0, 1),
    Api(ApiKey.SASL_AUTHENTICATE, "SaslAuthenticate", sasl.SASL_AUTHENTICATE_REQUEST, sasl.SASL_AUTHENTICATE_RESPONSE,
        0, 2),
    Api(ApiKey.CREATE_TOPICS, "CreateTopics", topics.CREATE_TOPICS_REQUEST, topics.CREATE_TOPICS_RESPONSE, 2, 4),
    Api(ApiKey.DELETE_TOPICS, "DeleteTopics", topics.DELETE_TOPICS_REQUEST, topics.DELETE_TOPICS_RESPONSE, 1, 3),
    # v3+ carries the producer's id and epoch (KIP-360: an epoch bump), v4 answers PRODUCER_FENCED.
    Api(ApiKey.INIT_PRODUCER_ID, "InitProducerId", producer.INIT_PRODUCER_ID_REQUEST,
        producer.INIT_PRODUCER_ID_RESPONSE, 0, 4),
    # Transactions (broker/transaction): the producer's APIs, the coordinator's markers, the
    # admin APIs. Versions that need transaction version 2 (KIP-890 part 2) are not advertised.
    Api(ApiKey.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", transactions.ADD_PARTITIONS_TO_TXN_REQUEST,
        transactions.ADD_PARTITIONS_TO_TXN_RESPONSE, 0, 4),
    Api(ApiKey.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", transactions.ADD_OFFSETS_TO_TXN_REQUEST,
        transactions.ADD_OFFSETS_TO_TXN_RESPONSE, 0, 3),
    Api(ApiKey.END_TXN, "EndTxn", transactions.END_TXN_REQUEST, transactions.END_TXN_RESPONSE, 0, 3),
    Api(ApiKey.WRITE_TXN_MARKERS, "WriteTxnMarkers", transactions.WRITE_TXN_MARKERS_REQUEST,
        transactions.WRITE_TXN_MARKERS_RESPONSE, 1, 1),
    Api(ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit", transactions.TXN_OFFSET_COMMIT_REQUEST,
        transactions.TXN_OFFSET_COMMIT_RESPONSE, 0, 3),
    Api(ApiKey.DESCRIBE_PRODUCERS, "DescribeProducers", transactions.DESCRIBE_PRODUCERS_REQUEST,
        transactions.DESCRIBE_PRODUCERS_RESPONSE, 0, 0),
    Api(ApiKey.DESCRIBE_TRANSACTIONS, "DescribeTransactions", transactions.DESCRIBE_TRANSACTIONS_REQUEST,
        transactions.DESCRIBE_TRANSACTIONS_RESPONSE, 0, 0),
    Api(ApiKey.LIST_TRANSACTIONS, "ListTransactions", transactions.LIST_TRANSACTIONS_REQUEST,
        transactions.LIST_TRANSACTIONS_RESPONSE, 0, 1),
    Api(ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", leader_epoch.REQUEST, leader_epoch.RESPONSE, 2, 3),
    Api(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", topics.DESCRIBE_CONFIGS_REQUEST,
        topics.DESCRIBE_CONFIGS_RESPONSE, 1, 3),
    # Consumer groups (the classic protocol; broker/coordinator). FindCoordinator v4+ asks for several keys at once.
    Api(ApiKey.OFFSET_COMMIT, "OffsetCommit", offset_commit.OFFSET_COMMIT_REQUEST, offset_commit.OFFSET_COMMIT_RESPONSE, 2, 7),
    Api(ApiKey.OFFSET_FETCH, "OffsetFetch", offset_commit.OFFSET_FETCH_REQUEST, offset_commit.OFFSET_FETCH_RESPONSE, 1, 7),
    Api(ApiKey.JOIN_GROUP, "JoinGroup", groups.JOIN_GROUP_REQUEST, groups.JOIN_GROUP_RESPONSE, 0, 5),
    Api(ApiKey.HEARTBEAT, "Heartbeat", groups.HEARTBEAT_REQUEST, groups.HEARTBEAT_RESPONSE, 0, 3),
    Api(ApiKey.LEAVE_GROUP, "LeaveGroup", groups.LEAVE_GROUP_REQUEST, groups.LEAVE_GROUP_RESPONSE, 0, 3),
    Api(ApiKey.SYNC_GROUP, "SyncGroup", groups.SYNC_GROUP_REQUEST, groups.SYNC_GROUP_RESPONSE, 0, 3),
    Api(ApiKey.DESCRIBE_GROUPS, "DescribeGroups", groups.DESCRIBE_GROUPS_REQUEST, groups.DESCRIBE_GROUPS_RESPONSE, 0, 5),
    Api(ApiKey.LIST_GROUPS, "ListGroups", groups.LIST_GROUPS_REQUEST, groups.LIST_GROUPS_RESPONSE, 0, 4),
    Api(ApiKey.DELETE_GROUPS, "DeleteGroups", groups.DELETE_GROUPS_REQUEST, groups.DELETE_GROUPS_RESPONSE, 0, 2),
    Api(ApiKey.OFFSET_DELETE, "OffsetDelete", offset_commit.OFFSET_DELETE_REQUEST, offset_commit.OFFSET_DELETE_RESPONSE, 0, 0),
    # The controller-to-broker control plane (Kafka 3.x layouts; see messages/control.py).
    Api(ApiKey.LEADER_AND_ISR, "LeaderAndIsr", control.LEADER_AND_ISR_REQUEST, control.LEADER_AND_ISR_RESPONSE, 0, 7),
    Api(ApiKey.STOP_REPLICA, "StopReplica", control.STOP_REPLICA_REQUEST, control.STOP_REPLICA_RESPONSE, 0, 4),
    Api(ApiKey.UPDATE_METADATA, "UpdateMetadata", control.UPDATE_METADATA_REQUEST, control.UPDATE_METADATA_RESPONSE,
        0, 8),
    # Brokers to the controller (Kafka 3.9 layouts; see messages/lifecycle.py, alter_partition.py).
    Api(ApiKey.CONTROLLED_SHUTDOWN, "ControlledShutdown", lifecycle.CONTROLLED_SHUTDOWN_REQUEST,
        lifecycle.CONTROLLED_SHUTDOWN_RESPONSE, 1, 3),
    Api(ApiKey.ALTER_PARTITION, "AlterPartition", alter_partition.REQUEST, alter_partition.RESPONSE, 0, 3),
    Api(ApiKey.BROKER_REGISTRATION, "BrokerRegistration", lifecycle.BROKER_REGISTRATION_REQUEST,
        lifecycle.BROKER_REGISTRATION_RESPONSE, 0, 4),
    Api(ApiKey.BROKER_HEARTBEAT, "BrokerHeartbeat", lifecycle.BROKER_HEARTBEAT_REQUEST,
        lifecycle.BROKER_HEARTBEAT_RESPONSE, 0, 1),
    Api(ApiKey.ALLOCATE_PRODUCER_IDS, "AllocateProducerIds", producer.ALLOCATE_PRODUCER_IDS_REQUEST,
        producer.ALLOCATE_PRODUCER_IDS_RESPONSE, 0, 0),
    # Admin requests a broker forwards to the controller.
    Api(ApiKey.ALTER_CONFIGS, "AlterConfigs", configs.ALTER_CONFIGS_REQUEST, configs.ALTER_CONFIGS_RESPONSE, 0, 2),
    Api(ApiKey.CREATE_PARTITIONS, "CreatePartitions", topics.CREATE_PARTITIONS_REQUEST,
        topics.CREATE_PARTITIONS_RESPONSE, 0, 3),
    Api(ApiKey.ELECT_LEADERS, "ElectLeaders", topics.ELECT_LEADERS_REQUEST, topics.ELECT_LEADERS_RESPONSE, 0, 2),
    Api(ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", configs.INCREMENTAL_ALTER_CONFIGS_REQUEST,
        configs.INCREMENTAL_ALTER_CONFIGS_RESPONSE, 0, 1),
    # Authorization and SCRAM credentials (broker/security): CreateAcls, DeleteAcls and
    # AlterUserScramCredentials are forwarded to the controller; the Describe APIs are answered
    # from the broker's own copy of the controller's records.
    Api(ApiKey.DESCRIBE_ACLS, "DescribeAcls", acls.DESCRIBE_ACLS_REQUEST, acls.DESCRIBE_ACLS_RESPONSE, 0, 3),
    Api(ApiKey.CREATE_ACLS, "CreateAcls", acls.CREATE_ACLS_REQUEST, acls.CREATE_ACLS_RESPONSE, 0, 3),
    Api(ApiKey.DELETE_ACLS, "DeleteAcls", acls.DELETE_ACLS_REQUEST, acls.DELETE_ACLS_RESPONSE, 0, 3),
    Api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials",
        scram.DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST, scram.DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE, 0, 0),
    Api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", scram.ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
        scram.ALTER_USER_SCRAM_CREDENTIALS_RESPONSE, 0, 0),
    # Running a cluster (issue 27; messages/cluster_ops.py): reassignment, client quotas and
    # UnregisterBroker go to the controller (forwarded by brokers); DeleteRecords, DescribeLogDirs
    # and DescribeCluster are answered by each broker.
    Api(ApiKey.ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignments",
        cluster_ops.ALTER_PARTITION_REASSIGNMENTS_REQUEST, cluster_ops.ALTER_PARTITION_REASSIGNMENTS_RESPONSE, 0, 1),
    Api(ApiKey.LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignments",
        cluster_ops.LIST_PARTITION_REASSIGNMENTS_REQUEST, cluster_ops.LIST_PARTITION_REASSIGNMENTS_RESPONSE, 0, 0),
    Api(ApiKey.DELETE_RECORDS, "DeleteRecords", cluster_ops.DELETE_RECORDS_REQUEST, cluster_ops.DELETE_RECORDS_RESPONSE,
        0, 2),
    Api(ApiKey.DESCRIBE_LOG_DIRS, "DescribeLogDirs", cluster_ops.DESCRIBE_LOG_DIRS_REQUEST,
        cluster_ops.DESCRIBE_LOG_DIRS_RESPONSE, 1, 4),
    Api(ApiKey.DESCRIBE_CLUSTER, "DescribeCluster", cluster_ops.DESCRIBE_CLUSTER_REQUEST,
        cluster_ops.DESCRIBE_CLUSTER_RESPONSE, 0, 2),
    Api(ApiKey.DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", cluster_ops.DESCRIBE_CLIENT_QUOTAS_REQUEST,
        cluster_ops.DESCRIBE_CLIENT_QUOTAS_RESPONSE, 0, 1),
    Api(ApiKey.ALTER_CLIENT_QUOTAS, "AlterClientQuotas", cluster_ops.ALTER_CLIENT_QUOTAS_REQUEST,
        cluster_ops.ALTER_CLIENT_QUOTAS_RESPONSE, 0, 1),
    Api(ApiKey.UNREGISTER_BROKER, "UnregisterBroker", cluster_ops.UNREGISTER_BROKER_REQUEST,
        cluster_ops.UNREGISTER_BROKER_RESPONSE, 0, 0),
)}


# api key -> the request's (lowest valid, highest valid, lowest flexible, highest flexible)
# version: read for every request's header, so looked up once, not through the schema.
_REQUEST_FLEXIBLE = {key: (*api.request.valid, *api.request.flexible_range) for key, api in APIS.items()}


def request_is_flexible(api_key: int, api_version: int) -> bool:
    """Whether a request uses header v2 (and compact encodings): from the API's schema."""
    ranges = _REQUEST_FLEXIBLE.get(api_key)
    if ranges is None:
        return False
    return ranges[0] <= api_version <= ranges[1] and ranges[2] <= api_version <= ranges[3]


# The (api key, version) pairs whose request uses header v2: request_is_flexible's answers as a
# set, for the broker's header parse (fast_codecs.parse_request_header's ``flexible_versions``).
REQUEST_FLEXIBLE_VERSIONS = frozenset((key, version) for key, (low, high, flex_low, flex_high) in _REQUEST_FLEXIBLE.items()
                                      for version in range(max(low, flex_low), min(high, flex_high) + 1))


def response_is_flexible(api_key: int, api_version: int) -> bool:
    """Whether the response header is v1. ApiVersions always answers with header v0."""
    if api_key == ApiKey.API_VERSIONS:
        return False
    return request_is_flexible(api_key, api_version)


def request_message(api_key: int) -> Message:
    return APIS[api_key].request


def response_message(api_key: int) -> Message:
    return APIS[api_key].response
