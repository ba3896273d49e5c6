"""Three broker processes in external-controller mode, and a stand-in controller that sends
them UpdateMetadata / LeaderAndIsr / StopReplica exactly as the controller process will."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection
from protocol.hotpath import FetchPartition, FetchRequest
from protocol.records import iter_batch_headers
from tests.support import BrokerProcess

CONTROLLER_ID = 3000


@dataclass
class PartitionAssignment:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    partition_epoch: int = 0
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)


class Cluster:
    def __init__(self, broker_process, ids=(1, 2, 3), **overrides):
        props = {"kbroker.controller.mode": "external", "replica.fetch.backoff.ms": 200}
        props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        self.brokers: dict[int, BrokerProcess] = {i: broker_process(broker_id=i, overrides=props) for i in ids}
        self.controller_epoch = 1
        self._conns: dict[int, BrokerConnection] = {}

    def start(self) -> "Cluster":
        for b in self.brokers.values():
            b.start()
        return self

    async def conn(self, broker_id: int) -> BrokerConnection:
        c = self._conns.get(broker_id)
        if c is None or not c.connected:
            b = self.brokers[broker_id]
            c = BrokerConnection("127.0.0.1", b.port, client_id="test-controller", request_timeout_ms=15000)
            await c.connect()
            self._conns[broker_id] = c
        return c

    def drop_conn(self, broker_id: int) -> None:
        c = self._conns.pop(broker_id, None)
        if c is not None:
            c.close()

    async def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # -- control plane ----------------------------------------------------------------------
    async def update_metadata(self, assignments: list[PartitionAssignment], to=None) -> list[int]:
        live = [{"id": i, "endpoints": [{"port": b.port, "host": "127.0.0.1", "listener": "PLAINTEXT",
                                         "security_protocol": 0}], "rack": None}
                for i, b in self.brokers.items()]
        body = {"controller_id": CONTROLLER_ID, "controller_epoch": self.controller_epoch, "broker_epoch": -1,
                "topic_states": _by_topic(assignments, lambda a: {
                    "partition_index": a.partition, "controller_epoch": self.controller_epoch, "leader": a.leader,
                    "leader_epoch": a.leader_epoch, "isr": a.isr, "zk_version": a.partition_epoch,
                    "replicas": a.replicas, "offline_replicas": []}),
                "live_brokers": live}
        out = []
        for i in (to or self.brokers):
            resp = await (await self.conn(i)).request(ApiKey.UPDATE_METADATA, body, version=8)
            out.append(resp.error_code)
        return out

    async def leader_and_isr(self, assignments: list[PartitionAssignment], to=None, controller_epoch=None):
        """Send LeaderAndIsr (v7) to ``to`` (default: every replica); returns {broker: response}."""
        epoch = self.controller_epoch if controller_epoch is None else controller_epoch
        leaders = {a.leader for a in assignments}
        body = {"controller_id": CONTROLLER_ID, "controller_epoch": epoch, "broker_epoch": -1, "type": 0,
                "topic_states": _by_topic(assignments, lambda a: {
                    "partition_index": a.partition, "controller_epoch": epoch, "leader": a.leader,
                    "leader_epoch": a.leader_epoch, "isr": a.isr, "partition_epoch": a.partition_epoch,
                    "replicas": a.replicas, "is_new": False}),
                "live_leaders": [{"broker_id": i, "host_name": "127.0.0.1", "port": self.brokers[i].port}
                                 for i in leaders if i in self.brokers]}
        targets = to or sorted({r for a in assignments for r in a.replicas})
        out = {}
        for i in targets:
            out[i] = await (await self.conn(i)).request(ApiKey.LEADER_AND_ISR, body, version=7)
        return out

    async def stop_replica(self, broker_id: int, topic: str, partition: int, leader_epoch: int, delete=False):
        body = {"controller_id": CONTROLLER_ID, "controller_epoch": self.controller_epoch, "broker_epoch": -1,
                "topic_states": [{"topic_name": topic, "partition_states": [
                    {"partition_index": partition, "leader_epoch": leader_epoch, "delete_partition": delete}]}]}
        return await (await self.conn(broker_id)).request(ApiKey.STOP_REPLICA, body, version=4)

    async def assign(self, assignments: list[PartitionAssignment]) -> None:
        await self.update_metadata(assignments)
        responses = await self.leader_and_isr(assignments)
        for broker, resp in responses.items():
            assert resp.error_code == 0, (broker, resp)
            for t in resp.topics:
                assert all(p.error_code == 0 for p in t.partition_errors), (broker, resp)

    # -- observing ----------------------------------------------------------------------------
    async def log_end_offset(self, broker_id: int, topic: str, partition: int) -> int:
        """The replica's LEO (ListOffsets latest with the debugging replica id -2)."""
        resp = await (await self.conn(broker_id)).request(ApiKey.LIST_OFFSETS, {
            "replica_id": -2, "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "timestamp": -1}]}]}, version=1)
        p = resp.topics[0].partitions[0]
        assert p.error_code == 0, p
        return p.offset

    async def isr(self, broker_id: int, topic: str, partition: int) -> list[int]:
        """The ISR as the given broker's metadata says (the leader's own view when it leads)."""
        resp = await (await self.conn(broker_id)).request(ApiKey.METADATA, {"topics": [{"name": topic}],
                                                                           "allow_auto_topic_creation": False},
                                                          version=8)
        for t in resp.topics:
            for p in t.partitions:
                if p.partition_index == partition:
                    return sorted(p.isr_nodes)
        raise AssertionError(f"{topic}-{partition} not in metadata of broker {broker_id}")

    async def wait_for(self, predicate, timeout_s=30.0, what="condition"):
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            value = await predicate()
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            await asyncio.sleep(0.05)

    async def wait_replicas_caught_up(self, topic, partition, brokers, timeout_s=60.0) -> int:
        async def same():
            leos = [await self.log_end_offset(b, topic, partition) for b in brokers]
            return leos[0] if len(set(leos)) == 1 else None
        return await self.wait_for(same, timeout_s, f"{topic}-{partition} LEOs to agree on {brokers}")

    async def fetch_as_consumer(self, broker_id, topic, partition, offset, max_wait_ms=100):
        req = FetchRequest(11, -1, max_wait_ms, 1, 1 << 20, 0, 0, -1,
                           [(topic, [FetchPartition(partition, -1, offset, -1, 1 << 20)])], [], "")
        resp = await (await self.conn(broker_id)).fetch(req)
        return resp.responses[0][1][0]


def _by_topic(assignments, partition_body):
    topics: dict[str, dict] = {}
    for a in assignments:
        t = topics.setdefault(a.topic, {"topic_name": a.topic, "topic_id": a.topic_id, "partition_states": []})
        t["partition_states"].append(partition_body(a))
    return list(topics.values())


def log_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """The partition's valid batches, concatenated across segments, as stored on disk."""
    out = []
    for path in sorted((broker.log_dir / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        end = 0
        for pos, header in iter_batch_headers(data):
            end = pos + header.size
        out.append(data[:end])
    return b"".join(out)
