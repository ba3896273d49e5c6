"""A static controller: sends brokers UpdateMetadata, LeaderAndIsr and StopReplica for an
assignment it is given, as the controller process does — without elections, registration or
durable state. It drives brokers that have no controller of their own (``process.roles=broker``
without controller.quorum.bootstrap.servers), where the test must dictate every leader epoch,
ISR and stale request (tests/replication/test_replication.py), and gives
bench/replication_bench.py its static-assignment figure.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from protocol.api_keys import ApiKey
from protocol.client import DEFAULT_NETWORK, BrokerConnection, Network

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


def _by_topic(assignments, partition_body) -> list[dict]:
    topics: dict[str, dict] = {}
    for a in assignments:
        t = topics.setdefault(a.topic, {"topic_name": a.topic, "topic_id": a.topic_id, "partition_states": []})
        t["partition_states"].append(partition_body(a))
    return list(topics.values())


class StaticController:
    def __init__(self, brokers: dict[int, tuple[str, int]], *, controller_id: int = CONTROLLER_ID,
                 controller_epoch: int = 1, network: Network = DEFAULT_NETWORK, listener: str = "PLAINTEXT") -> None:
        self.brokers = dict(brokers)
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.network = network
        self.listener = listener
        self._conns: dict[int, BrokerConnection] = {}

    async def conn(self, broker_id: int) -> BrokerConnection:
        c = self._conns.get(broker_id)
        if c is None or not c.connected:
            host, port = self.brokers[broker_id]
            c = BrokerConnection(host, port, client_id=f"controller-{self.controller_id}", network=self.network,
                                 request_timeout_ms=15000)
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

    async def update_metadata(self, assignments: list[PartitionAssignment], to=None) -> list[int]:
        """UpdateMetadata v8 to ``to`` (default: every broker); returns their error codes."""
        epoch = self.controller_epoch
        body = {"controller_id": self.controller_id, "controller_epoch": epoch, "broker_epoch": -1,
                "topic_states": _by_topic(assignments, lambda a: {
                    "partition_index": a.partition, "controller_epoch": epoch, "leader": a.leader,
                    "leader_epoch": a.leader_epoch, "isr": a.isr, "zk_version": a.partition_epoch,
                    "replicas": a.replicas, "offline_replicas": []}),
                "live_brokers": [{"id": i, "rack": None, "endpoints": [
                    {"port": port, "host": host, "listener": self.listener, "security_protocol": 0}]}
                    for i, (host, port) in self.brokers.items()]}
        out = []
        for i in (to or self.brokers):
            out.append((await (await self.conn(i)).request(ApiKey.UPDATE_METADATA, body, version=8)).error_code)
        return out

    async def leader_and_isr(self, assignments: list[PartitionAssignment], to=None, controller_epoch=None) -> dict:
        """LeaderAndIsr v7 to ``to`` (default: every replica); returns {broker: response}."""
        epoch = self.controller_epoch if controller_epoch is None else controller_epoch
        leaders = {a.leader for a in assignments if a.leader in self.brokers}
        body = {"controller_id": self.controller_id, "controller_epoch": epoch, "broker_epoch": -1, "type": 0,
                "topic_states": _by_topic(assignments, lambda a: {
                    "partition_index": a.partition, "controller_epoch": epoch, "leader": a.leader,
                    "leader_epoch": a.leader_epoch, "isr": a.isr, "partition_epoch": a.partition_epoch,
                    "replicas": a.replicas, "is_new": False}),
                "live_leaders": [{"broker_id": i, "host_name": self.brokers[i][0], "port": self.brokers[i][1]}
                                 for i in sorted(leaders)]}
        out = {}
        for i in (to or sorted({r for a in assignments for r in a.replicas})):
            out[i] = await (await self.conn(i)).request(ApiKey.LEADER_AND_ISR, body, version=7)
        return out

    async def stop_replica(self, broker_id: int, topic: str, partition: int, leader_epoch: int, delete: bool = False):
        body = {"controller_id": self.controller_id, "controller_epoch": self.controller_epoch, "broker_epoch": -1,
                "topic_states": [{"topic_name": topic, "partition_states": [
                    {"partition_index": partition, "leader_epoch": leader_epoch, "delete_partition": delete}]}]}
        return await (await self.conn(broker_id)).request(ApiKey.STOP_REPLICA, body, version=4)

    async def assign(self, assignments: list[PartitionAssignment]) -> None:
        """UpdateMetadata to all, then LeaderAndIsr to every replica; raises on any error."""
        await self.update_metadata(assignments)
        for broker, resp in (await self.leader_and_isr(assignments)).items():
            errors = [p.error_code for t in resp.topics for p in t.partition_errors]
            if resp.error_code or any(errors):
                raise RuntimeError(f"LeaderAndIsr to broker {broker} failed: {resp}")
