"""KafkaApis on its collaborators, without a KafkaServer: requests go in through a
KafkaConnection on a mock transport, the replica manager runs on real log files and a
MockTime, topic administration is either a deferred fake (a controller that answers
later) or the embedded controller."""

from __future__ import annotations

import struct

import pytest

from broker.apis import KafkaApis
from broker.config import KafkaConfig
from broker.config_repository import ConfigRepository
from broker.embedded_controller import TOPICS_FILE, EmbeddedController
from broker.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache
from broker.network import KafkaConnection, SocketServer
from broker.producer_ids import ProducerIdManager
from broker.replica_manager import ReplicaManager
from protocol.api_keys import ApiKey
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.fast_codecs import encode_request_header
from protocol.messages import APIS
from storage import LogManager

from .test_network import MockTransport

BROKER_ID = 1


class DeferredTopicAdmin:
    """A TopicAdmin whose answers come later, as a controller in another process would give them."""

    def __init__(self):
        self.created: list = []
        self.deleted: list = []

    def create_topics(self, topics, validate_only, callback):
        self.created.append((topics, validate_only, callback))

    def delete_topics(self, names, callback):
        self.deleted.append((names, callback))

    def maybe_auto_create_topic(self, name, allow):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class FixedBlocks:
    def next_block(self):
        return 5000, 10


class Broker:
    """The collaborators KafkaApis gets, wired by hand, and one client connection to it."""

    def __init__(self, tmp_path, topic_admin=None):
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
        self.controller = None
        if topic_admin is None:
            topic_admin = self.controller = EmbeddedController(self.config, BROKER_ID, self.cache, self.rm)
            self.controller.start()
        self.apis = KafkaApis(replica_manager=self.rm, metadata_cache=self.cache, topic_admin=topic_admin,
                              config_repository=self.configs, producer_ids=ProducerIdManager(FixedBlocks()),
                              inter_broker_listener="PLAINTEXT")
        server = SocketServer(self.apis, max_request_size=1 << 20, max_inflight=10)
        self.conn = KafkaConnection(server, "PLAINTEXT")
        self.transport = MockTransport()
        self.conn.connection_made(self.transport)
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: dict) -> int:
        self.correlation_id += 1
        raw = encode_request_header(api_key, version, self.correlation_id, "t", False)
        raw += APIS[api_key].request.build(version, body)
        self.conn.data_received(struct.pack(">i", len(raw)) + raw)
        return self.correlation_id

    def responses(self, api_key: int, version: int) -> list:
        out = []
        for frame in self.transport.written:
            size, _correlation_id = struct.unpack_from(">ii", frame)
            assert size == len(frame) - 4
            out.append(APIS[api_key].response.parse(version, frame, 8))
        self.transport.written.clear()
        return out

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


def test_embedded_controller_brings_topics_online_through_the_controller_entry_points(tmp_path):
    broker = Broker(tmp_path)
    try:
        broker.send(ApiKey.CREATE_TOPICS, 4, create_body("orders", partitions=2))
        [response] = broker.responses(ApiKey.CREATE_TOPICS, 4)
        assert [(t.name, t.error_code) for t in response.topics] == [("orders", ErrorCode.NONE)]
        assert broker.cache.controller_id == BROKER_ID
        for p in (0, 1):
            assert broker.cache.partition_info("orders", p).leader == BROKER_ID
            assert broker.rm.get_partition("orders", p).is_leader
        assert (broker.config.log_dirs[0] / TOPICS_FILE).exists()
    finally:
        broker.close()
    # The same data again: the stored topic comes back online when the controller starts.
    again = Broker(tmp_path)
    try:
        assert sorted(again.cache.topics["orders"].partitions) == [0, 1]
        assert again.rm.get_partition("orders", 1).is_leader
    finally:
        again.close()


def test_metadata_auto_creates_through_the_topic_admin(broker):
    broker.send(ApiKey.METADATA, 4, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True})
    [response] = broker.responses(ApiKey.METADATA, 4)
    [topic] = response.topics
    assert (topic.name, topic.error_code, len(topic.partitions)) == ("auto", ErrorCode.NONE, 1)
    assert broker.rm.get_partition("auto", 0).is_leader


def test_delete_topics_through_the_embedded_controller(broker):
    broker.send(ApiKey.CREATE_TOPICS, 4, create_body("gone"))
    broker.responses(ApiKey.CREATE_TOPICS, 4)
    broker.send(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["gone", "never"], "timeout_ms": 1000})
    [response] = broker.responses(ApiKey.DELETE_TOPICS, 3)
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("gone", ErrorCode.NONE), ("never", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert broker.rm.get_partition("gone", 0) is None
    assert not broker.cache.contains_topic("gone")
