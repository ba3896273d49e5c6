"""The marker sender's order of a transaction's partitions does not depend on PYTHONHASHSEED
(issue 28: the simulator replays a seed bit for bit under any hash seed)."""

from __future__ import annotations

from types import SimpleNamespace

from broker.transaction.markers import TxnMarkerChannel
from protocol.clock import MockTime


class _ReplicaManager:
    def __init__(self) -> None:
        self.markers: list = []

    def append_txn_markers(self, timeout_ms, markers, done) -> None:
        self.markers.extend(markers)


def test_a_transactions_partitions_go_to_their_leader_in_sorted_order():
    """Red with the set of (topic, partition) iterated as given (an order of str hashes)."""
    topics = [f"topic-{i}" for i in range(20)]
    cache = SimpleNamespace(topics={t: SimpleNamespace(partitions={0: SimpleNamespace(leader=1)}) for t in topics})
    rm = _ReplicaManager()
    channel = TxnMarkerChannel(broker_id=1, time=MockTime(), metadata_cache=cache, replica_manager=rm,  # type: ignore[arg-type]
                               network=None, listener_name="PLAINTEXT")  # type: ignore[arg-type]
    channel.send("tid", 7, 0, True, 0, frozenset((t, 0) for t in reversed(topics)), lambda: None)
    [(_pid, _epoch, _commit, _ce, tps)] = rm.markers
    assert tps == sorted((t, 0) for t in topics)


async def test_callers_get_the_connection_in_the_order_they_asked_for_it(monkeypatch):
    """KIP-890 verifications of a producer's pipelined requests share the connection to the
    coordinator: one that comes once it is open, while earlier callers still wait on the connect
    lock, must queue behind them (red with the open connection returned at once: its request
    reached the coordinator first)."""
    import asyncio

    import broker.transaction.markers as markers

    gate: asyncio.Future = asyncio.get_running_loop().create_future()

    class FakeConnection:
        def __init__(self, host, port, **kw) -> None:
            self.connected = False

        async def connect(self) -> None:
            await gate
            self.connected = True

        def close(self) -> None:
            self.connected = False

    monkeypatch.setattr(markers, "BrokerConnection", FakeConnection)
    cache = SimpleNamespace(broker_endpoint=lambda broker_id, listener: SimpleNamespace(host="h", port=1))
    channel = TxnMarkerChannel(broker_id=1, time=MockTime(), metadata_cache=cache, replica_manager=None,  # type: ignore[arg-type]
                               network=None, listener_name="PLAINTEXT")  # type: ignore[arg-type]
    order: list[int] = []

    async def ask(tag: int) -> None:
        await channel.connection(2)
        order.append(tag)

    tasks = [asyncio.ensure_future(ask(tag)) for tag in range(5)]  # while the connect is under way
    for _ in range(3):
        await asyncio.sleep(0)
    gate.set_result(None)
    while 2 not in channel._connections:
        await asyncio.sleep(0)
    tasks.append(asyncio.ensure_future(ask(5)))  # the connection is open, 1..4 still wait
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4, 5]
    assert len({id(c) for c in channel._connections.values()}) == 1
    await ask(6)  # nobody waits: straight through
    assert order[-1] == 6 and channel._connect_queued[2] == 0
