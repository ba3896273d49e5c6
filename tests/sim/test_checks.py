"""sim/checks.py's instrumentation: which changes mark a partition for checking."""

from __future__ import annotations

import uuid
import weakref
from types import SimpleNamespace
from typing import Any

from protocol.clock import MockTime
from protocol.records import Record, build_batch
from sim.checks import Checker
from storage.log import Log, LogConfig


class _Partition:
    """What the high watermark hook reads of the Partition that last took a log on."""

    def __init__(self, log: Log, is_leader: bool) -> None:
        self.log = log
        self.is_leader = is_leader


def test_a_followers_high_watermark_moves_are_not_checked_a_leaders_are(tmp_path):
    """Every fetch answer moves a follower's HW, which no check reads: such a move marks
    nothing. A leader's move, a log never seen under make_leader/make_follower, and a log its
    partition no longer holds are marked."""
    log = Log.open(tmp_path / "t-0", LogConfig(), time=MockTime())
    log.append_as_leader(build_batch([Record(timestamp=0, key=None, value=b"v")] * 10), 0)
    checker = Checker(sim=None)
    checker.install()
    try:
        def moved_to(hw: int) -> bool:
            checker.dirty.clear()
            log.update_high_watermark(hw)
            assert log.high_watermark == hw
            return ("t", 0) in checker.dirty

        assert moved_to(1)  # never seen: counts as a leader's
        follower = _Partition(log, is_leader=False)
        log._sim_partition = weakref.ref(follower)
        assert not moved_to(2)
        follower.is_leader = True  # (what make_leader makes it)
        assert moved_to(3)
        follower.is_leader = False
        assert not moved_to(4)
        assert not moved_to(4)  # (unmoved: nothing either way)
        follower.log = None  # the partition let the log go (a deletion, a replica moved away)
        assert moved_to(5)
        del follower  # gone: the log counts as a leader's again
        assert moved_to(6)
    finally:
        checker.uninstall()
        log.close()


def _node(node_id: int, partition: Any, topic_id: uuid.UUID) -> SimpleNamespace:
    server = SimpleNamespace(replica_manager=SimpleNamespace(partitions={("t", 0): partition}),
                             metadata_cache=SimpleNamespace(topics={"t": SimpleNamespace(topic_id=topic_id)}))
    return SimpleNamespace(node_id=node_id, name=f"broker-{node_id}", alive=True, started_at=0.0, server=server,
                           process=SimpleNamespace(incarnation=1, key=f"broker-{node_id}#1"))


def test_a_replaced_isr_members_log_is_excused_only_under_a_leader_the_controller_moved_past():
    """Seed 475: a stale leader (cut off, at an epoch the controller has moved past) still counts
    a member whose log a reassignment deleted and created again (no restart) since it joined:
    its HW above that new log's end is excused. Under the controller's current leader epoch the
    same state is a violation (hw-le-isr-leo): the leader must have dropped the member."""
    topic_id = uuid.uuid4()
    for controller_epoch, expected in ((3, ["hw-le-isr-leo"]), (4, [])):
        found: list[str] = []
        now = [1.0]
        log = SimpleNamespace(high_watermark=10, log_end_offset=10)
        leader = SimpleNamespace(is_leader=True, leader_epoch=3, log=log, isr=frozenset({1, 2}),
                                 partition_state=SimpleNamespace(isr=frozenset({1, 2})))
        follower = SimpleNamespace(is_leader=False, log=SimpleNamespace(log_end_offset=10))
        sim = SimpleNamespace(cluster=SimpleNamespace(brokers={1: _node(1, leader, topic_id),
                                                               2: _node(2, follower, topic_id)},
                                                      controller=SimpleNamespace(alive=False, server=None)),
                              loop=SimpleNamespace(time=lambda: now[0]), isr_entered={}, topic_ids={},
                              violation=lambda check, _detail: found.append(check))
        checker = Checker(sim)
        part = SimpleNamespace(leader_epoch=controller_epoch)
        checker.shadow = SimpleNamespace(replication=SimpleNamespace(  # type: ignore[assignment]
            topic=lambda name: SimpleNamespace(topic_id=topic_id, parts={0: part})))
        checker.check_partition(("t", 0))  # broker 2 joins the ISR of epoch 3 at 1.0
        assert found == []
        now[0] = 2.0
        follower.log = SimpleNamespace(log_end_offset=0)  # deleted and created again, no restart
        checker.check_partition(("t", 0))
        assert found == expected, controller_epoch


def _loaded_with_isr(topic: str, topic_id: uuid.UUID, isr: list[int]) -> Any:
    from controller.metadata_store import LoadedMetadata
    from protocol.messages.metadata_records import MetadataRecordType, make_record

    records = [make_record(MetadataRecordType.TOPIC, name=topic, topic_id=topic_id),
               make_record(MetadataRecordType.PARTITION, partition_id=0, topic_id=topic_id, replicas=[1, 2, 3],
                           isr=isr, leader=isr[0], leader_epoch=0, partition_epoch=0)]
    return LoadedMetadata(log_records=list(enumerate(records)), end_offset=len(records))


def test_a_broker_a_lost_controller_record_had_dropped_is_back_in_a_loaded_isr_without_rejoining(tmp_path):
    """Seed 5875's history, doctored: the controller dropped broker 2 from t0-0's ISR in a record
    it never synced, and broker 2 lost unsynced records of t0-0 in a power loss. The controller,
    back from its own power loss, loads ISR [1, 2, 3]: broker 2 did not rejoin anything, it stays
    tainted, so once controlled shutdowns leave ISR [2] the partition is exposed (acknowledged
    records it lacks are exempt, not lost writes). A broker that really rejoins (an ISR change
    the controller makes) is whole again."""
    from sim.runner import Simulation

    topic_id = uuid.uuid4()
    key = ("t0", 0)
    sim = Simulation(1, root=tmp_path)
    broker_2 = SimpleNamespace(kind="broker", node_id=2)
    store = object()
    sim.isr_changed(key, frozenset({1, 2, 3}), topic_id)
    sim.isr_changed(key, frozenset({1, 3}), topic_id)  # the record the controller never synced
    sim.on_crashed(broker_2, True, [f"{tmp_path}/broker-2/data/t0-0/00000000000000000000.log"])
    assert sim.tainted[key] == {2}
    sim.checker.controller_loaded(store, _loaded_with_isr("t0", topic_id, [1, 2, 3]))  # type: ignore[arg-type]
    assert sim.tainted[key] == {2}, "a broker loaded back into an ISR counts as rejoined"
    assert sim.exposed_since(key, 0.0) is None
    sim.isr_changed(key, frozenset({2}), topic_id)  # brokers 1 and 3 shut down (controlled)
    assert sim.exposed_since(key, 0.0) is not None
    # the same broker really rejoining: the controller's own ISR change, not a load
    sim.isr_changed(key, frozenset({1, 3}), topic_id)
    sim.isr_changed(key, frozenset({1, 2, 3}), topic_id)
    assert not sim.tainted[key]
