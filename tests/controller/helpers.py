"""Helpers for the controller's unit tests: requests built from their schemas, a channel
that records what the controller sends, and a controller on a MockTime over a real
LocalMetadataStore in a temporary directory, or (``Harness.zookeeper`` set, as the
``metadata_store`` fixture of the controller tests does) over a ZooKeeperMetadataStore on a
real ZooKeeper server, in a chroot named after the directory."""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from collections import defaultdict

from controller.channel_manager import Barrier, LeaderAndIsrItem, StopReplicaItem, UpdateMetadataItem
from controller.metadata_store import LocalMetadataStore
from controller.quorum_controller import QuorumController, QuorumControllerConfig
from protocol.api_keys import ApiKey
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.messages import APIS

CLUSTER_ID = "test-cluster-id-0000000"


def request(api_key: int, version: int, **fields):
    """A request as the controller receives it: built and parsed with the API's schema."""
    msg = APIS[api_key].request
    return msg.parse(version, msg.build(version, fields))


def registration(broker_id: int, port: int | None = None, incarnation: uuid.UUID | None = None,
                 cluster_id: str = CLUSTER_ID, rack=None):
    return request(ApiKey.BROKER_REGISTRATION, 3, broker_id=broker_id, cluster_id=cluster_id,
                   incarnation_id=incarnation or uuid.UUID(int=broker_id), rack=rack,
                   listeners=[{"name": "PLAINTEXT", "host": "127.0.0.1", "port": port or 9000 + broker_id,
                               "security_protocol": 0}])


def heartbeat(broker_id: int, epoch: int, want_shut_down: bool = False, want_fence: bool = False):
    return request(ApiKey.BROKER_HEARTBEAT, 1, broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=0,
                   want_fence=want_fence, want_shut_down=want_shut_down)


def create_topics(*topics, validate_only=False):
    """``topics``: (name, partitions, replication factor[, configs dict[, assignments dict]])."""
    out = []
    for t in topics:
        name, n, rf = t[:3]
        configs = t[3] if len(t) > 3 else {}
        assignments = t[4] if len(t) > 4 else {}
        out.append({"name": name, "num_partitions": n, "replication_factor": rf,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                    "assignments": [{"partition_index": p, "broker_ids": b} for p, b in assignments.items()]})
    return request(ApiKey.CREATE_TOPICS, 7, topics=out, validate_only=validate_only)


class RecordingChannel:
    """Stands in for ControllerChannelManager: keeps every item per broker; full states are
    acknowledged at once unless ``auto_deliver`` is False (then ``deliver`` does it)."""

    def __init__(self) -> None:
        self.controller_epoch = -1
        self.queues: dict[int, list] = defaultdict(list)
        self.registered: dict[int, tuple[int, str, int]] = {}
        self.auto_deliver = True
        self.idle = True
        self.undelivered: dict[int, list] = defaultdict(list)
        # LeaderAndIsr answers, given to the controller at once (the error code per broker:
        # none listed answer NONE); barriers enqueued on their own run at once.
        self.on_leader_and_isr_answer = None
        self.leader_and_isr_errors: dict[int, int] = {}

    def add_broker(self, broker_id, epoch, host, port):
        self.registered[broker_id] = (epoch, host, port)
        self.queues[broker_id] = []
        self.undelivered[broker_id] = []

    def brokers(self):
        return sorted(self.registered)

    def enqueue(self, broker_id, item):
        if broker_id in self.registered:
            self.queues[broker_id].append(item)
            if isinstance(item, LeaderAndIsrItem) and self.on_leader_and_isr_answer is not None:
                code = self.leader_and_isr_errors.get(broker_id, ErrorCode.NONE)
                self.on_leader_and_isr_answer(broker_id, [(s.topic_id, s.partition, code)
                                                          for s in item.partitions.values()])
            elif isinstance(item, Barrier) and self.auto_deliver:
                item.callback()

    def enqueue_full_state(self, broker_id, um, lisr, on_delivered):
        self.enqueue(broker_id, um)
        self.enqueue(broker_id, lisr)
        if broker_id in self.registered:
            self.queues[broker_id].append(Barrier(on_delivered))
        if self.auto_deliver:
            on_delivered()
        else:
            self.undelivered[broker_id].append(on_delivered)

    def deliver(self, broker_id):
        for callback in self.undelivered.pop(broker_id, []):
            callback()

    def is_idle(self, broker_id):
        return self.idle

    def items(self, broker_id, kind=None):
        return [i for i in self.queues[broker_id] if kind is None or isinstance(i, kind)]

    def kinds(self, broker_id):
        names = {UpdateMetadataItem: "UM", LeaderAndIsrItem: "LISR", StopReplicaItem: "SR", Barrier: "B"}
        return [names[type(i)] + ("*" if getattr(i, "full", False) else "") for i in self.queues[broker_id]]

    def clear(self):
        for q in self.queues.values():
            q.clear()


def controller_config(**kw) -> QuorumControllerConfig:
    kw.setdefault("node_id", 3000)
    kw.setdefault("cluster_id", CLUSTER_ID)
    kw.setdefault("topic_defaults", {"retention.ms": "604800000", "segment.bytes": "1073741824",
                                     "min.insync.replicas": "1", "max.message.bytes": "1048588"})
    return QuorumControllerConfig(**kw)


class Harness:
    """A QuorumController on MockTime with a RecordingChannel, over a store in ``path`` (or, with
    ``zookeeper``, in ZooKeeper: elected first, as a controller process is)."""

    # zookeeper.connect (without chroot) of a running ZooKeeper: Harness then uses ZooKeeper.
    zookeeper: str | None = None

    def __init__(self, path, time: MockTime | None = None, seed: int = 1, bootstrap=(), **config) -> None:
        self.path = path
        self.bootstrap = list(bootstrap)  # kbroker storage format's records
        self.time = time or MockTime()
        self.channel = RecordingChannel()
        self.fatal: list[BaseException] = []
        self.coordinator = None
        self._config = controller_config(**config)
        self._seed = seed
        self.store = None if self.zookeeper else LocalMetadataStore(path, self.time)
        self.controller = None if self.zookeeper else self._controller()
        self.epochs: dict[int, int] = {}

    def _controller(self) -> QuorumController:
        return QuorumController(self._config, self.store, time=self.time, channel=self.channel,
                                rng=random.Random(self._seed), on_fatal=self.fatal.append, bootstrap=self.bootstrap)

    async def start(self) -> "Harness":
        if self.zookeeper:
            from controller.zookeeper_store import ZooKeeperCoordinator
            chroot = "/harness-" + hashlib.sha1(str(self.path).encode()).hexdigest()[:16]
            self.coordinator = ZooKeeperCoordinator(self.zookeeper + chroot, self._config.node_id, self.time,
                                                    session_timeout_ms=4000)
            await self.coordinator.start(CLUSTER_ID)
            term = await asyncio.wait_for(self.coordinator.campaign(), 30)
            self.store = self.coordinator.new_store(term)
            self.controller = self._controller()
        await self.controller.start()
        return self

    async def stop(self) -> None:
        await self.controller.stop()
        self.store.close()
        if self.coordinator is not None:
            await self.coordinator.resign()
            await asyncio.get_running_loop().run_in_executor(None, self.coordinator.close)

    async def settle(self) -> None:
        """Every event queued so far processed and durable (a read queued behind them answered)."""
        await self.controller.metadata([])

    async def advance(self, ms: float) -> None:
        """Move the clock (firing timers), then let the events they queued run."""
        self.time.sleep(ms)
        await self.settle()
        await asyncio.sleep(0)
        await self.settle()

    async def register(self, *broker_ids, **kw) -> dict[int, int]:
        for b in broker_ids:
            resp = await self.controller.register_broker(registration(b, **kw))
            assert resp["error_code"] == 0, resp
            self.epochs[b] = resp["broker_epoch"]
        return self.epochs

    async def heartbeat(self, broker_id, **kw):
        return await self.controller.broker_heartbeat(heartbeat(broker_id, self.epochs[broker_id], **kw))

    async def start_brokers(self, *broker_ids) -> None:
        """Register and unfence (the first heartbeat after the full state was acknowledged)."""
        await self.register(*broker_ids)
        for b in broker_ids:
            resp = await self.heartbeat(b)
            assert resp["is_fenced"] is False, resp

    async def heartbeat_all(self, *broker_ids) -> None:
        for b in broker_ids:
            await self.heartbeat(b)

    async def create(self, *topics, **kw):
        resp = await self.controller.create_topics(create_topics(*topics, **kw), 7)
        return resp["topics"]

    def partition(self, topic: str, pid: int):
        info = self.controller.replication.topic(topic)
        return info.parts[pid]

    def broker(self, broker_id: int):
        return self.controller.cluster.registration(broker_id)
