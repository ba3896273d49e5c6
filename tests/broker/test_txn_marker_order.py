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
