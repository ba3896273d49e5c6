"""Three broker processes without a controller of their own (``process.roles=broker``, no
controller.quorum.bootstrap.servers), driven by the static controller — the test decides every
leader, epoch and ISR the way a controller would — plus what the tests observe of them. (The
same brokers under the real controller: test_replication_with_controller.py.)"""

from __future__ import annotations

import asyncio

from controller.static import PartitionAssignment, StaticController  # noqa: F401  (re-exported)
from protocol.api_keys import ApiKey
from protocol.fast_codecs import FetchPartition, FetchRequest
from protocol.records import iter_batch_headers
from tests.support import BrokerProcess


class Cluster(StaticController):
    def __init__(self, broker_process, ids=(1, 2, 3), **overrides):
        props = {"process.roles": "broker", "replica.fetch.backoff.ms": 200}
        props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        self.processes: dict[int, BrokerProcess] = {i: broker_process(broker_id=i, overrides=props) for i in ids}
        super().__init__({i: ("127.0.0.1", p.port) for i, p in self.processes.items()})

    def start(self) -> "Cluster":
        for b in self.processes.values():
            b.start()
        return self

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
