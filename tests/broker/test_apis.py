"""KafkaApis on its collaborators, without a KafkaServer: requests go in through a
KafkaConnection on a mock transport, the replica manager runs on real log files and a
MockTime; topic administration, forwarding and producer ids are deferred fakes (a controller
that answers later); the control plane (UpdateMetadata, LeaderAndIsr, StopReplica) is driven
by requests, as the controller sends them."""

from __future__ import annotations

import asyncio
import gc
import logging
import struct
import uuid

import pytest

from broker import heap
from broker.apis import LEADER_AND_ISR_SLICE, KafkaApis
from broker.config import KafkaConfig
from broker.config_repository import ConfigRepository
from broker.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache
from broker.network import KafkaConnection, SocketServer
from broker.replica_manager import ReplicaManager
from protocol.api_keys import ApiKey
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.fast_codecs import encode_request_header
from protocol.messages import APIS, request_is_flexible, response_is_flexible
from storage import LogManager

from .test_network import MockTransport

BROKER_ID = 1


class DeferredTopicAdmin:
    """A TopicAdmin whose answers come later, as a controller in another process would give them."""

    def __init__(self):
        self.created: list = []
        self.deleted: list = []

        self.auto_created: list = []

    def create_topics(self, topics, validate_only, callback, timeout_ms=30000):
        self.created.append((topics, validate_only, callback))

    def delete_topics(self, names, callback, timeout_ms=30000):
        self.deleted.append((names, callback))

    def maybe_auto_create_topic(self, name, allow):
        if allow:
            self.auto_created.append(name)
            return ErrorCode.LEADER_NOT_AVAILABLE
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class DeferredForwarding:
    """A Forwarding that keeps what it is asked to relay; the test answers for the controller."""

    def __init__(self):
        self.forwarded: list = []

    def forward(self, api_key, version, body, request, respond):
        self.forwarded.append((api_key, version, body, request, respond))


class DeferredProducerIds:
    def __init__(self):
        self.waiting: list = []

    def generate(self, callback):
        self.waiting.append(callback)


class Broker:
    """The collaborators KafkaApis gets, wired by hand, and one client connection to it."""

    def __init__(self, tmp_path, topic_admin=None, forwarding=None, broker_epoch=5, request_metrics=None):
        self.config = KafkaConfig({"broker.id": str(BROKER_ID), "log.dirs": str(tmp_path / "data"),
                                   "listeners": "PLAINTEXT://127.0.0.1:9092"})
        self.config.log_dirs[0].mkdir(parents=True, exist_ok=True)
        self.time = MockTime()
        self.cache = MetadataCache(BROKER_ID)
        self.cache.brokers[BROKER_ID] = BrokerInfo(BROKER_ID, {"PLAINTEXT": BrokerEndpoint("PLAINTEXT", "h", 9092)})
        self.configs = ConfigRepository(self.config, BROKER_ID, self.cache)
        self.logs = LogManager(self.config.log_dirs, self.configs.default_log_config(), time=self.time,
                               topic_config=self.configs.log_config_for)
        self.logs.startup()
        self.rm = ReplicaManager(broker_id=BROKER_ID, time=self.time, log_manager=self.logs, metadata_cache=self.cache,
                                 log_config_for=self.configs.log_config_for)
        self.topic_admin = topic_admin or DeferredTopicAdmin()
        self.forwarding = forwarding or DeferredForwarding()
        self.producer_ids = DeferredProducerIds()
        self.broker_epoch = broker_epoch
        self.apis = KafkaApis(replica_manager=self.rm, metadata_cache=self.cache, topic_admin=self.topic_admin,
                              config_repository=self.configs, producer_ids=self.producer_ids,
                              inter_broker_listener="PLAINTEXT", forwarding=self.forwarding,
                              broker_epoch=lambda: self.broker_epoch, request_metrics=request_metrics)
        server = SocketServer(self.apis, max_request_size=1 << 20, max_inflight=10, time=self.time)
        self.conn = KafkaConnection(server, "PLAINTEXT")
        self.transport = MockTransport()
        self.conn.connection_made(self.transport)
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: dict) -> int:
        self.correlation_id += 1
        raw = encode_request_header(api_key, version, self.correlation_id, "t", request_is_flexible(api_key, version))
        raw += APIS[api_key].request.build(version, body)
        self.conn.data_received(struct.pack(">i", len(raw)) + raw)
        return self.correlation_id

    def responses(self, api_key: int, version: int) -> list:
        out = []
        flexible = response_is_flexible(api_key, version)
        for frame in self.transport.written:
            size, _correlation_id = struct.unpack_from(">ii", frame)
            assert size == len(frame) - 4
            out.append(APIS[api_key].response.parse(version, frame, 9 if flexible else 8))
        self.transport.written.clear()
        return out

    # -- the controller's side ---------------------------------------------------------------
    def update_metadata(self, topics=(), brokers=(BROKER_ID,), controller_epoch=1, broker_epoch=5, full=False,
                        version=8) -> int:
        """UpdateMetadata: ``topics`` is [(name, topic_id, [(partition, leader, epoch, replicas)], configs)]."""
        self.send(ApiKey.UPDATE_METADATA, version, {
            "controller_id": 3000, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
            "type": 2 if full else 1,
            "topic_states": [{"topic_name": name, "topic_id": topic_id, "partition_states": [
                {"partition_index": p, "controller_epoch": controller_epoch, "leader": leader, "leader_epoch": epoch,
                 "isr": list(replicas), "zk_version": 0, "replicas": list(replicas), "offline_replicas": []}
                for p, leader, epoch, replicas in parts],
                "topic_configs": [{"name": k, "value": v} for k, v in sorted(configs.items())]}
                for name, topic_id, parts, configs in topics],
            "live_brokers": [{"id": b, "rack": None, "endpoints": [
                {"port": 9092, "host": f"h{b}", "listener": "PLAINTEXT", "security_protocol": 0}]} for b in brokers]})
        [response] = self.responses(ApiKey.UPDATE_METADATA, version)
        return response.error_code

    def leader_and_isr(self, topic, topic_id, parts, controller_epoch=1, broker_epoch=5, full=False):
        """LeaderAndIsr v7: ``parts`` is [(partition, leader, epoch, replicas)]."""
        self.send(ApiKey.LEADER_AND_ISR, 7, {
            "controller_id": 3000, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
            "type": 2 if full else 1,
            "topic_states": [{"topic_name": topic, "topic_id": topic_id, "partition_states": [
                {"partition_index": p, "controller_epoch": controller_epoch, "leader": leader, "leader_epoch": epoch,
                 "isr": list(replicas), "partition_epoch": 0, "replicas": list(replicas), "is_new": True}
                for p, leader, epoch, replicas in parts]}],
            "live_leaders": []})
        [response] = self.responses(ApiKey.LEADER_AND_ISR, 7)
        return response

    def send_leader_and_isr(self, topic, topic_id, parts, controller_epoch=1, broker_epoch=5) -> None:
        self.send(ApiKey.LEADER_AND_ISR, 7, {
            "controller_id": 3000, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch, "type": 1,
            "topic_states": [{"topic_name": topic, "topic_id": topic_id, "partition_states": [
                {"partition_index": p, "controller_epoch": controller_epoch, "leader": leader, "leader_epoch": epoch,
                 "isr": list(replicas), "partition_epoch": epoch, "replicas": list(replicas), "is_new": True}
                for p, leader, epoch, replicas in parts]}],
            "live_leaders": []})

    async def sliced_answer(self):
        """The answer to a LeaderAndIsr applied in slices: once the loop has turned enough."""
        for _ in range(100):
            if self.transport.written:
                break
            await asyncio.sleep(0)
        [response] = self.responses(ApiKey.LEADER_AND_ISR, 7)
        return response

    def create_online(self, topic, partitions=1, configs=None) -> uuid.UUID:
        """What the controller sends for a new topic this broker leads: UpdateMetadata, then LeaderAndIsr."""
        topic_id = uuid.uuid4()
        parts = [(p, BROKER_ID, 0, [BROKER_ID]) for p in range(partitions)]
        assert self.update_metadata([(topic, topic_id, parts, configs or {})]) == ErrorCode.NONE
        response = self.leader_and_isr(topic, topic_id, parts)
        assert response.error_code == ErrorCode.NONE
        return topic_id

    def close(self):
        self.logs.shutdown()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    yield b
    b.close()


def create_body(*names, validate_only=False, partitions=1):
    return {"topics": [{"name": n, "num_partitions": partitions, "replication_factor": -1, "assignments": [],
                        "configs": []} for n in names], "timeout_ms": 1000, "validate_only": validate_only}


def test_create_topics_answers_when_the_topic_admin_does_in_request_order(tmp_path):
    admin = DeferredTopicAdmin()
    b = Broker(tmp_path, topic_admin=admin)
    try:
        b.send(ApiKey.CREATE_TOPICS, 4, create_body("a", "a", "b", validate_only=True))
        [(topics, validate_only, callback)] = admin.created
        assert [t.name for t in topics] == ["a", "b"]  # the duplicate is answered by KafkaApis itself
        assert validate_only is True
        assert b.transport.written == []  # no answer before the admin's
        callback([(ErrorCode.NONE, None), (ErrorCode.TOPIC_ALREADY_EXISTS, "exists")])
        [response] = b.responses(ApiKey.CREATE_TOPICS, 4)
        assert [(t.name, t.error_code, t.error_message) for t in response.topics] == [
            ("a", ErrorCode.NONE, None), ("a", ErrorCode.INVALID_REQUEST, "topic listed twice"),
            ("b", ErrorCode.TOPIC_ALREADY_EXISTS, "exists")]
    finally:
        b.close()


def test_delete_topics_answers_when_the_topic_admin_does(tmp_path):
    admin = DeferredTopicAdmin()
    b = Broker(tmp_path, topic_admin=admin)
    try:
        b.send(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["x", "y"], "timeout_ms": 1000})
        [(names, callback)] = admin.deleted
        assert names == ["x", "y"] and b.transport.written == []
        callback([(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None), (ErrorCode.NONE, None)])
        [response] = b.responses(ApiKey.DELETE_TOPICS, 3)
        assert [(r.name, r.error_code) for r in response.responses] == [
            ("x", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ("y", ErrorCode.NONE)]
    finally:
        b.close()



def metadata(b: Broker, *topics: str, auto_create: bool = False, version: int = 8):
    b.send(ApiKey.METADATA, version, {"topics": [{"name": t} for t in topics] if topics else None,
                                      "allow_auto_topic_creation": auto_create})
    [response] = b.responses(ApiKey.METADATA, version)
    return response


def test_metadata_lists_the_live_brokers_and_the_controller_update_metadata_names(broker):
    assert broker.update_metadata(brokers=(1, 2, 3)) == ErrorCode.NONE
    response = metadata(broker)
    # The controller (3000) is no broker a client can reach: this broker names a live broker, as
    # Kafka's KRaft brokers do, so that admin requests go there and are forwarded; the lowest id,
    # the same answer from every broker.
    assert (sorted(b.node_id for b in response.brokers), response.controller_id) == ([1, 2, 3], 1)
    assert broker.cache.controller_id == 3000
    # Broker 2 fenced: the controller lists only the others, and so does this broker.
    assert broker.update_metadata(brokers=(1, 3)) == ErrorCode.NONE
    assert sorted(b.node_id for b in metadata(broker).brokers) == [1, 3]
    # Not itself when a lower id is live: every broker gives the same answer.
    assert broker.update_metadata(brokers=(0, 1, 3)) == ErrorCode.NONE
    assert metadata(broker).controller_id == 0
    # A combined node: the active controller is a live broker, named as it is.
    assert broker.update_metadata(brokers=(1, 3000)) == ErrorCode.NONE
    assert metadata(broker).controller_id == 3000


def test_metadata_auto_creation_answers_leader_not_available_while_the_controller_creates(broker):
    response = metadata(broker, "auto", auto_create=True)
    assert [(t.name, t.error_code) for t in response.topics] == [("auto", ErrorCode.LEADER_NOT_AVAILABLE)]
    assert broker.topic_admin.auto_created == ["auto"]
    response = metadata(broker, "other", auto_create=False)
    assert [(t.name, t.error_code) for t in response.topics] == [("other", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


def test_topic_configs_from_update_metadata_reach_describe_configs_and_the_live_logs(broker):
    topic_id = broker.create_online("cfg", 2, {"retention.ms": "60000"})
    logs = [broker.rm.get_partition("cfg", p).log for p in (0, 1)]
    assert all(log.config.retention_ms == 60000 for log in logs)
    default_max = logs[0].config.max_message_bytes
    # The controller changes the overrides: the whole set comes with the topic's partition states.
    parts = [(p, BROKER_ID, 0, [BROKER_ID]) for p in (0, 1)]
    assert broker.update_metadata([("cfg", topic_id, parts, {"max.message.bytes": "2000",
                                                             "min.insync.replicas": "2"})]) == ErrorCode.NONE
    for log in logs:
        assert (log.config.max_message_bytes, log.config.min_insync_replicas) == (2000, 2)
        assert log.config.retention_ms != 60000  # the override was removed: back to the default
    broker.send(ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [
        {"resource_type": 2, "resource_name": "cfg", "configuration_keys": ["max.message.bytes", "retention.ms"]}]})
    [response] = broker.responses(ApiKey.DESCRIBE_CONFIGS, 1)
    entries = {c.name: (c.value, c.config_source) for c in response.results[0].configs}
    assert entries == {"max.message.bytes": ("2000", 1), "retention.ms": (str(broker.config.retention_ms), 5)}
    # A batch over the new max.message.bytes is refused by the live log.
    from protocol.records import Record, build_batch
    big = build_batch([Record(value=b"x" * 3000, timestamp=1)])
    results = []
    broker.rm.append_records(1000, 1, False, [("cfg", [(0, big)])], results.append)
    assert results[0][0][1][0][1] == ErrorCode.MESSAGE_TOO_LARGE
    assert default_max > 3000


def test_a_full_update_metadata_forgets_topics_it_does_not_name(broker):
    broker.create_online("kept")
    broker.create_online("gone")
    kept_id = broker.cache.topics["kept"].topic_id
    assert broker.update_metadata([("kept", kept_id, [(0, BROKER_ID, 0, [BROKER_ID])], {})], full=True) == 0
    assert sorted(broker.cache.topics) == ["kept"]


def test_control_requests_from_an_older_controller_epoch_change_nothing(broker):
    topic_id = broker.create_online("fenced")
    assert broker.update_metadata(controller_epoch=5) == ErrorCode.NONE
    # A zombie controller (epoch 4) tries to change the brokers, lead elsewhere and delete the partition.
    assert broker.update_metadata(brokers=(7,), controller_epoch=4) == ErrorCode.STALE_CONTROLLER_EPOCH
    response = broker.leader_and_isr("fenced", topic_id, [(0, 2, 9, [BROKER_ID, 2])], controller_epoch=4)
    assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    broker.send(ApiKey.STOP_REPLICA, 4, {
        "controller_id": 3000, "controller_epoch": 4, "broker_epoch": 5, "topic_states": [
            {"topic_name": "fenced", "partition_states": [
                {"partition_index": 0, "leader_epoch": 9, "delete_partition": True}]}]})
    [stop] = broker.responses(ApiKey.STOP_REPLICA, 4)
    assert stop.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert [b.node_id for b in metadata(broker).brokers] == [BROKER_ID]
    partition = broker.rm.get_partition("fenced", 0)
    assert partition.is_leader and partition.leader_epoch == 0 and partition.log is not None


def test_control_requests_for_an_earlier_registration_of_this_broker_are_refused(broker):
    broker.broker_epoch = 10
    topic_id = uuid.uuid4()
    parts = [(0, BROKER_ID, 0, [BROKER_ID])]
    assert broker.update_metadata([("old", topic_id, parts, {})], broker_epoch=9) == ErrorCode.STALE_BROKER_EPOCH
    assert not broker.cache.contains_topic("old")
    assert broker.leader_and_isr("old", topic_id, parts, broker_epoch=9).error_code == ErrorCode.STALE_BROKER_EPOCH
    assert broker.rm.get_partition("old", 0) is None
    # The current epoch, and -1 (a sender that does not say), are accepted.
    assert broker.update_metadata([("old", topic_id, parts, {})], broker_epoch=10) == ErrorCode.NONE
    assert broker.leader_and_isr("old", topic_id, parts, broker_epoch=-1).error_code == ErrorCode.NONE


def test_control_requests_before_the_registration_wait_for_the_broker_epoch(broker):
    """The simulator's seed 24 (issue 28): a controller that had not seen this broker restart
    sent it the full state of its earlier registration before the new one was answered; the
    broker, not knowing its epoch yet (-1), applied it and led a partition at an old leader
    epoch with a log a power loss had emptied. Held until the registration is answered, such a
    request is refused; one for the new registration that overtook its answer is applied."""
    topic_id = uuid.uuid4()
    parts = [(0, BROKER_ID, 0, [BROKER_ID])]
    broker.broker_epoch = -1
    broker.apis.hold_until_registered()
    broker.send_leader_and_isr("old", topic_id, parts, broker_epoch=9)
    assert broker.responses(ApiKey.LEADER_AND_ISR, 7) == []
    assert broker.rm.get_partition("old", 0) is None
    broker.broker_epoch = 10
    broker.apis.registered()
    [stale] = broker.responses(ApiKey.LEADER_AND_ISR, 7)
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH and broker.rm.get_partition("old", 0) is None
    broker.broker_epoch = -1  # registering again (a new registration after being fenced)
    broker.apis.hold_until_registered()
    broker.send_leader_and_isr("new", topic_id, parts, broker_epoch=11)
    assert broker.responses(ApiKey.LEADER_AND_ISR, 7) == []
    broker.broker_epoch = 11
    broker.apis.registered()
    [applied] = broker.responses(ApiKey.LEADER_AND_ISR, 7)
    assert applied.error_code == ErrorCode.NONE and broker.rm.get_partition("new", 0).is_leader


def test_a_full_leader_and_isr_deletes_the_partitions_it_does_not_list(broker):
    """The simulator's seed 98 (issue 28): a topic deleted while a broker was cut off from the
    controller; the StopReplica was dropped with the broker's old registration, and its log
    stayed for ever. A FULL LeaderAndIsr lists every partition of the broker: the others are
    strays, deleted as Kafka deletes them (findStrayPartitionsFromLeaderAndIsr). An
    incremental one deletes nothing."""
    kept, gone = uuid.uuid4(), uuid.uuid4()
    assert broker.leader_and_isr("kept", kept, [(0, BROKER_ID, 0, [BROKER_ID])]).error_code == ErrorCode.NONE
    assert broker.leader_and_isr("gone", gone, [(0, BROKER_ID, 0, [BROKER_ID])]).error_code == ErrorCode.NONE
    assert broker.leader_and_isr("kept", kept, [(0, BROKER_ID, 0, [BROKER_ID])]).error_code == ErrorCode.NONE
    assert broker.logs.get_log("gone", 0) is not None
    response = broker.leader_and_isr("kept", kept, [(0, BROKER_ID, 1, [BROKER_ID])], full=True)
    assert response.error_code == ErrorCode.NONE
    assert broker.rm.get_partition("gone", 0) is None and broker.logs.get_log("gone", 0) is None
    assert broker.rm.get_partition("kept", 0).leader_epoch == 1 and broker.logs.get_log("kept", 0) is not None


def test_admin_requests_for_the_controller_are_relayed_as_they_came(broker):
    broker.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    [versions] = broker.responses(ApiKey.API_VERSIONS, 3)
    advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    for key in (ApiKey.CREATE_PARTITIONS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.ELECT_LEADERS):
        assert advertised[key] == (APIS[key].min_version, APIS[key].max_version)
    body = {"topics": [{"name": "grow", "count": 4, "assignments": None}], "timeout_ms": 500, "validate_only": False}
    correlation_id = broker.send(ApiKey.CREATE_PARTITIONS, 1, body)
    [(api_key, version, raw, request, respond)] = broker.forwarding.forwarded
    assert (api_key, version, raw) == (ApiKey.CREATE_PARTITIONS, 1, APIS[ApiKey.CREATE_PARTITIONS].request.build(1, body))
    assert request.topics[0].name == "grow"
    assert broker.transport.written == []  # answered when the controller answers
    answer = APIS[ApiKey.CREATE_PARTITIONS].response.build(1, {"throttle_time_ms": 0, "results": [
        {"name": "grow", "error_code": ErrorCode.INVALID_PARTITIONS, "error_message": "shrink"}]})
    respond(answer)
    [frame] = broker.transport.written
    assert struct.unpack_from(">i", frame, 4)[0] == correlation_id and frame[8:] == answer


def test_init_producer_id_answers_when_an_id_is_there(broker):
    broker.send(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 1000})
    assert broker.transport.written == []
    [first] = broker.producer_ids.waiting
    broker.send(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 1000})
    _, second = broker.producer_ids.waiting
    second(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)  # the responses still go in request order
    assert broker.transport.written == []
    first(ErrorCode.NONE, 4000)
    assert [(r.error_code, r.producer_id, r.producer_epoch) for r in broker.responses(ApiKey.INIT_PRODUCER_ID, 1)] == [
        (ErrorCode.NONE, 4000, 0), (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, -1)]


async def test_a_big_leader_and_isr_is_applied_in_slices_the_loop_turning_between(broker):
    """Creating a log costs milliseconds: a LeaderAndIsr of a thousand partitions applied in
    one go held the loop for seconds (no heartbeat left, the controller fenced the broker).
    It is applied in slices with the loop turning between them; the answer comes once all
    are applied, and a LeaderAndIsr sent meanwhile is applied after it, in order."""
    topic_id = uuid.uuid4()
    n = 2 * LEADER_AND_ISR_SLICE + 10
    parts = [(p, BROKER_ID, 0, [BROKER_ID]) for p in range(n)]
    assert broker.update_metadata([("big", topic_id, parts, {})]) == ErrorCode.NONE
    seen_by_other_work = []
    asyncio.get_running_loop().call_soon(lambda: seen_by_other_work.append(len(broker.rm.partitions)))
    broker.send_leader_and_isr("big", topic_id, parts)
    broker.send_leader_and_isr("big", topic_id, [(n - 1, BROKER_ID, 1, [BROKER_ID])])  # then a new leader epoch
    assert broker.transport.written == [] and len(broker.rm.partitions) == LEADER_AND_ISR_SLICE
    for _ in range(100):
        if len(broker.transport.written) == 2:
            break
        await asyncio.sleep(0)
    first, second = broker.responses(ApiKey.LEADER_AND_ISR, 7)
    assert seen_by_other_work == [LEADER_AND_ISR_SLICE]  # other callbacks ran after the first slice
    assert first.error_code == ErrorCode.NONE
    assert [(e.partition_index, e.error_code) for e in first.topics[0].partition_errors] == [
        (p, ErrorCode.NONE) for p in range(n)]
    assert second.error_code == ErrorCode.NONE and second.topics[0].partition_errors[0].error_code == ErrorCode.NONE
    assert len(broker.rm.partitions) == n and len(broker.logs.all_logs()) == n
    assert broker.rm.partitions[("big", n - 1)].leader_epoch == 1
    assert all(broker.rm.partitions[("big", p)].leader_epoch == 0 for p in range(n - 1))


async def test_controller_requests_behind_a_sliced_leader_and_isr_are_applied_after_it_in_order(broker):
    """Kafka applies a controller's requests in the order they came. An UpdateMetadata and a
    StopReplica arriving while a big LeaderAndIsr is still being applied slice by slice wait
    for it: otherwise the StopReplica of a partition the pending slices have not created yet
    would find nothing to stop, and the slice would create it afterwards."""
    topic_id = uuid.uuid4()
    n = 2 * LEADER_AND_ISR_SLICE + 10
    parts = [(p, BROKER_ID, 0, [BROKER_ID]) for p in range(n)]
    assert broker.update_metadata([("big", topic_id, parts, {})]) == ErrorCode.NONE
    broker.send_leader_and_isr("big", topic_id, parts)
    assert len(broker.rm.partitions) == LEADER_AND_ISR_SLICE  # the rest waits for the loop
    broker.send(ApiKey.UPDATE_METADATA, 8, {
        "controller_id": 3000, "controller_epoch": 1, "broker_epoch": 5, "type": 1, "topic_states": [],
        "live_brokers": [{"id": b, "rack": None, "endpoints": [
            {"port": 9092, "host": f"h{b}", "listener": "PLAINTEXT", "security_protocol": 0}]} for b in (BROKER_ID, 2)]})
    broker.send(ApiKey.STOP_REPLICA, 4, {
        "controller_id": 3000, "controller_epoch": 1, "broker_epoch": 5, "topic_states": [
            {"topic_name": "big", "partition_states": [
                {"partition_index": n - 1, "leader_epoch": 1, "delete_partition": True}]}]})
    assert set(broker.cache.brokers) == {BROKER_ID}  # not applied ahead of the LeaderAndIsr
    for _ in range(100):
        if len(broker.transport.written) == 3:
            break
        await asyncio.sleep(0)
    frames = list(broker.transport.written)
    broker.transport.written[:] = frames[:1]
    [leader_and_isr] = broker.responses(ApiKey.LEADER_AND_ISR, 7)
    broker.transport.written[:] = frames[1:2]
    [update] = broker.responses(ApiKey.UPDATE_METADATA, 8)
    broker.transport.written[:] = frames[2:]
    [stop] = broker.responses(ApiKey.STOP_REPLICA, 4)
    assert leader_and_isr.error_code == update.error_code == stop.error_code == ErrorCode.NONE
    assert [(e.partition_index, e.error_code) for e in stop.partition_errors] == [(n - 1, ErrorCode.NONE)]
    assert set(broker.cache.brokers) == {BROKER_ID, 2}
    assert broker.rm.get_partition("big", n - 1) is None and broker.logs.get_log("big", n - 1) is None
    assert len(broker.rm.partitions) == n - 1


async def test_a_leader_and_isr_is_logged_in_one_line_not_one_per_partition(broker, caplog):
    """A full state holds every partition (10,000 and more): the broker says what it applied in
    one INFO line, naming the first partitions; the per-partition lines are DEBUG."""
    topic_id = uuid.uuid4()
    n = 2 * LEADER_AND_ISR_SLICE + 10
    parts = [(p, BROKER_ID if p % 2 else 2, 0, [BROKER_ID, 2]) for p in range(n)]
    assert broker.update_metadata([("big", topic_id, parts, {})], brokers=(BROKER_ID, 2)) == ErrorCode.NONE
    with caplog.at_level(logging.DEBUG):
        broker.send_leader_and_isr("big", topic_id, parts)
        response = await broker.sliced_answer()
    assert response.error_code == ErrorCode.NONE
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and r.name == "kbroker.apis"]
    assert lines == [f"LeaderAndIsr applied for {n} partition(s): leading {n // 2} (big-1, big-3, big-5, big-7, "
                     f"big-9, big-11, big-13, big-15, big-17, big-19 and {n // 2 - 10} more); following {n // 2} "
                     f"(big-0, big-2, big-4, big-6, big-8, big-10, big-12, big-14, big-16, big-18 and {n // 2 - 10} "
                     f"more)"]
    per_partition = [r for r in caplog.records if r.levelno >= logging.INFO and r.name == "kbroker.partition"]
    assert per_partition == []
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG
            and r.name == "kbroker.partition"][:1] == ["big-1: leader at epoch 0 from offset 0, ISR [1, 2]"]


def test_log_configs_are_built_once_per_set_of_overrides(broker):
    """Thousands of partitions of a topic share one LogConfig; a change of the topic's
    overrides gives a new one."""
    configs = broker.configs
    topic_id = uuid.uuid4()
    assert broker.update_metadata([("a", topic_id, [(0, BROKER_ID, 0, [BROKER_ID])], {}),
                                   ("b", uuid.uuid4(), [(0, BROKER_ID, 0, [BROKER_ID])], {})]) == ErrorCode.NONE
    assert configs.log_config_for("a") is configs.log_config_for("b") is configs.default_log_config()
    assert broker.update_metadata([("a", topic_id, [(0, BROKER_ID, 0, [BROKER_ID])],
                                    {"retention.ms": "5000"})]) == ErrorCode.NONE
    changed = configs.log_config_for("a")
    assert changed.retention_ms == 5000 and changed is configs.log_config_for("a")
    assert configs.log_config_for("b").retention_ms == configs.default_log_config().retention_ms != 5000


def test_a_log_loaded_at_start_up_is_taken_without_a_config_lookup(broker):
    """The first LeaderAndIsr after a restart finds every log loaded: the topic's config is
    looked up only to create a log."""
    topic_id = uuid.uuid4()
    broker.logs.get_or_create_log("loaded", 0, broker.configs.default_log_config())
    assert broker.update_metadata([("loaded", topic_id, [(0, BROKER_ID, 0, [BROKER_ID]), (1, BROKER_ID, 0, [BROKER_ID])],
                                    {})]) == ErrorCode.NONE
    asked = []
    real = broker.rm.log_config_for
    broker.rm.log_config_for = lambda topic: (asked.append(topic), real(topic))[1]
    assert broker.leader_and_isr("loaded", topic_id, [(0, BROKER_ID, 0, [BROKER_ID]),
                                                      (1, BROKER_ID, 0, [BROKER_ID])]).error_code == ErrorCode.NONE
    assert asked == ["loaded"]  # partition 1 was created; partition 0's log was there
    assert broker.rm.partitions[("loaded", 0)].log is broker.logs.get_log("loaded", 0)


async def test_a_leader_and_isr_applied_during_the_start_leaves_the_heap_frozen(broker):
    """gc.unfreeze is global: the end of a sliced LeaderAndIsr must not unfreeze what the
    broker's start still holds (broker/heap.py); the start's end does."""
    gc.unfreeze()
    heap.hold()  # what KafkaServer.start_services takes until the broker is live
    try:
        topic_id = uuid.uuid4()
        parts = [(p, BROKER_ID, 0, [BROKER_ID]) for p in range(LEADER_AND_ISR_SLICE + 10)]
        assert broker.update_metadata([("during", topic_id, parts, {})]) == ErrorCode.NONE
        broker.send_leader_and_isr("during", topic_id, parts)
        assert (await broker.sliced_answer()).error_code == ErrorCode.NONE
        assert gc.get_freeze_count() > 0 and heap.holds() == 1
    finally:
        heap.release()
    assert gc.get_freeze_count() == 0 and heap.holds() == 0


async def test_the_heap_is_frozen_while_a_sliced_leader_and_isr_is_applied(broker):
    """Applying a big LeaderAndIsr creates objects by the ten thousand, and each full
    collection of the cyclic GC scanned the whole heap (every log) again: what exists is
    frozen from the first slice to the last, and unfrozen when the answer goes."""
    gc.unfreeze()
    topic_id = uuid.uuid4()
    parts = [(p, BROKER_ID, 0, [BROKER_ID]) for p in range(2 * LEADER_AND_ISR_SLICE + 10)]
    assert broker.update_metadata([("big", topic_id, parts, {})]) == ErrorCode.NONE
    between = []
    asyncio.get_running_loop().call_soon(lambda: between.append(gc.get_freeze_count()))
    broker.send_leader_and_isr("big", topic_id, parts)
    assert gc.get_freeze_count() > 0
    response = await broker.sliced_answer()
    assert response.error_code == ErrorCode.NONE
    assert between[0] > 0 and gc.get_freeze_count() == 0


# -- what an answered request leaves behind ---------------------------------------------------

def _answers(broker) -> dict[int, bytes]:
    """The frames written so far (several may share a write), by correlation id."""
    data = b"".join(broker.transport.written)
    broker.transport.written.clear()
    out = {}
    while data:
        size, correlation_id = struct.unpack_from(">ii", data)
        out[correlation_id], data = data[:4 + size], data[4 + size:]
    return out


def _produce(broker, topic: str, value: bytes) -> int:
    from protocol.records import Record, build_batch

    return broker.send(ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": build_batch([Record(value=value, timestamp=1)])}]}]})


def _fetch(broker, topic: str, offset: int, max_wait_ms: int) -> int:
    return broker.send(ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                                    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})


def _fetched(frame: bytes):
    [partition] = APIS[ApiKey.FETCH].response.parse(11, frame, 8).responses[0].partitions
    assert partition.error_code == ErrorCode.NONE
    return partition.records


def _descriptors_of(path) -> int:
    import os

    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            pass
    return count


@pytest.mark.parametrize("another_parked", [False, True], ids=["alone", "another-parked"])
def test_an_answered_long_poll_leaves_no_slice_of_the_log_alive(broker, another_parked):
    """A parked Fetch answered when a produce arrives: once its answer is written, nothing may
    hold the slices of the segment's mapping it was read from. Its request's slot kept the
    delayed operation's ``cancel`` after the answer, and the operation's callback kept the
    request context, hence the slot and its response: a cycle that only a full collection
    frees (fuzzing found the active ``.log`` held by 3-4 descriptors: the mappings a later read
    replaced could not close). The collector is off here, as it is in effect between full
    collections. With another fetch still parked on the partition, the purgatory keeps the
    answered one in its wake-up heap until it compacts (delayed_fetch.py), and with it the
    request's context: the answer must not be kept there either."""
    from storage.segment_budget import ACTIVE_SEGMENT_FDS

    broker.create_online("t")
    _produce(broker, "t", b"first" * 200)
    gc.disable()
    try:
        if another_parked:  # another client's, waiting for a MiB: stays parked throughout
            other = KafkaConnection(broker.conn.server, "PLAINTEXT")
            other.connection_made(MockTransport())
            raw = encode_request_header(ApiKey.FETCH, 11, 1, "t", False) + APIS[ApiKey.FETCH].request.build(11, {
                "replica_id": -1, "max_wait_ms": 60_000, "min_bytes": 1 << 20, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 1,
                                                          "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
            other.data_received(struct.pack(">i", len(raw)) + raw)
            assert broker.rm.fetch_purgatory.delayed() == 1
        parked = _fetch(broker, "t", 1, max_wait_ms=60_000)  # at the end: parks
        assert parked not in _answers(broker)
        _produce(broker, "t", b"second" * 200)  # answers the long-poll (a slice of the mapping: over 512 bytes)
        assert _fetched(_answers(broker)[parked])
        _produce(broker, "t", b"third" * 200)
        again = _fetch(broker, "t", 0, max_wait_ms=0)  # reads past the old mapping: the file is mapped again
        assert _fetched(_answers(broker)[again])
        active = broker.logs.get_log("t", 0).active_segment
        assert active.records._retired == [], "a replaced mapping is still exported"
        assert _descriptors_of(active.log_path) <= ACTIVE_SEGMENT_FDS
        assert broker.rm.fetch_purgatory.delayed() == another_parked
    finally:
        gc.enable()


# -- client quotas (KIP-13/124/219) ---------------------------------------------------------------

def _with_quota(broker, key: str, value: float):
    from broker.client_quota_manager import ClientQuotas

    quotas = broker.apis.quotas = ClientQuotas(broker.apis.security_metadata.client_quotas, broker.time)
    broker.apis.security_metadata.client_quotas[frozenset({("client-id", "t")})] = {key: value}
    quotas.quotas_changed()
    return quotas


def test_a_produce_over_its_quota_is_answered_with_its_throttle_and_the_connection_muted(broker):
    """Kafka's produce quota: the request's bytes over the window (at least 10 of the 11 one-second
    samples), (rate - bound) / bound * window of throttle, in the answer at once; then the
    connection reads nothing and the next request waits until the throttle has passed."""
    broker.create_online("q")
    _with_quota(broker, "producer_byte_rate", 1000)
    first = _produce(broker, "q", b"v" * 20_000)
    answers = _answers(broker)
    frame = answers[first]
    size = struct.unpack_from(">i", frame)[0]
    response = APIS[ApiKey.PRODUCE].response.parse(8, frame, 8)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    request_bytes = broker.apis.quotas.produce.sensors[("", "t")]._total
    assert response.throttle_time_ms == round(request_bytes - 10_000) > 0  # bytes / (1000 B/s) - 10 s
    assert broker.transport.paused and size
    second = _produce(broker, "q", b"w")
    assert _answers(broker) == {}
    broker.time.sleep(response.throttle_time_ms - 1)
    assert _answers(broker) == {} and broker.transport.paused
    broker.time.sleep(1)
    assert list(_answers(broker)) == [second]


def test_within_its_quota_a_produce_is_not_throttled(broker):
    broker.create_online("q")
    _with_quota(broker, "producer_byte_rate", 1_000_000)
    first = _produce(broker, "q", b"v" * 20_000)
    response = APIS[ApiKey.PRODUCE].response.parse(8, _answers(broker)[first], 8)
    assert response.throttle_time_ms == 0 and not broker.transport.paused


def test_a_consumer_fetch_over_its_quota_is_answered_empty_and_its_bytes_taken_back(broker):
    """Kafka: a throttled Fetch answers no partitions, with the throttle time, and unrecords
    the bytes it did not send; a follower's fetch is not a client's (not counted)."""
    broker.create_online("q")
    _produce(broker, "q", b"v" * 20_000)
    _answers(broker)
    quotas = _with_quota(broker, "consumer_byte_rate", 1000)
    cid = _fetch(broker, "q", 0, 0)
    response = APIS[ApiKey.FETCH].response.parse(11, _answers(broker)[cid], 8)
    assert response.throttle_time_ms > 0 and response.responses == []
    assert quotas.fetch.sensors[("", "t")]._total == 0
    assert broker.transport.paused


def test_request_time_over_a_request_percentage_quota_mutes_the_connection(broker):
    """request_percentage: the handler's time on the injected clock as a percentage of one
    thread; a handler that takes 2 s against 1 % of a thread over the 10 s minimum window:
    (2 s * 100 / 10 s - 1) / 1 * 10 s = 190 s of throttle."""
    broker.create_online("q")
    _with_quota(broker, "request_percentage", 1)
    handler = broker.apis.handlers[ApiKey.METADATA]

    def slow_handler(ctx):
        broker.time.sleep(2000)
        handler(ctx)
    broker.apis.handlers[ApiKey.METADATA] = slow_handler
    metadata(broker, "q")
    assert broker.transport.paused and broker.conn.throttled
    broker.time.sleep(189_999)
    assert broker.conn.throttled
    broker.time.sleep(1)
    assert not broker.conn.throttled and not broker.transport.paused
