"""Transactional offset commits (TxnOffsetCommit, KIP-98 / KIP-447) in the group coordinator:
pending per producer until the marker, committed on COMMIT, dropped on ABORT, OffsetFetch
require_stable answering UNSTABLE_OFFSET_COMMIT meanwhile, zombie fencing by generation and
member, simple groups, and loading pending offsets on failover."""

from __future__ import annotations

from broker.coordinator.group_metadata_manager import TxnRecord
from protocol.messages import consumer_offsets as co

from .harness import Cluster, E


def errors(reply) -> dict:
    return {(t["name"], p["partition_index"]): p["error_code"] for t in reply["topics"] for p in t["partitions"]}


def stable_fetch(c, partitions, group="g") -> dict:
    reply = c.fetch(group, partitions, version=7, require_stable=True)
    assert reply.error == 0, reply.body
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["error_code"])
            for t in reply["topics"] for p in t["partitions"]}


def test_pending_until_the_commit_marker() -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 3})
    assert errors(c.txn_commit(offsets={("t", 0): 10, ("t", 1): 11})) == {("t", 0): 0, ("t", 1): 0}
    # pending: the committed view is unchanged, require_stable answers UNSTABLE_OFFSET_COMMIT
    assert c.committed(partitions=[("t", 0), ("t", 1)]) == {("t", 0): 3, ("t", 1): -1}
    assert stable_fetch(c, [("t", 0), ("t", 1), ("u", 0)]) == {
        ("t", 0): (-1, E.UNSTABLE_OFFSET_COMMIT), ("t", 1): (-1, E.UNSTABLE_OFFSET_COMMIT), ("u", 0): (-1, 0)}
    c.marker(commit=True)
    assert c.committed(partitions=[("t", 0), ("t", 1)]) == {("t", 0): 10, ("t", 1): 11}
    assert stable_fetch(c, [("t", 0), ("t", 1)]) == {("t", 0): (10, 0), ("t", 1): (11, 0)}


def test_dropped_on_the_abort_marker() -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 3})
    c.txn_commit(offsets={("t", 0): 10})
    c.marker(commit=False)
    assert stable_fetch(c, [("t", 0)]) == {("t", 0): (3, 0)}
    # a later marker of the same producer finds nothing to complete
    c.marker(commit=True)
    assert c.committed(partitions=[("t", 0)]) == {("t", 0): 3}


def test_markers_complete_only_their_producer() -> None:
    c = Cluster()
    c.txn_commit(offsets={("t", 0): 10}, producer_id=1)
    c.txn_commit(offsets={("t", 1): 20}, producer_id=2)
    c.marker(producer_id=2, commit=True)
    assert stable_fetch(c, [("t", 0), ("t", 1)]) == {("t", 0): (-1, E.UNSTABLE_OFFSET_COMMIT), ("t", 1): (20, 0)}


def test_the_record_is_transactional_and_written_with_the_producer() -> None:
    c = Cluster()
    c.txn_commit(offsets={("t", 0): 10}, producer_id=77, producer_epoch=3)
    partition, records = c.log.appends[-1]
    assert partition == c.coordinator.partition_for("g")
    (record,) = records
    assert isinstance(record, TxnRecord) and record.producer_id == 77
    assert co.read_message_key(record.key) == co.OffsetKey("g", "t", 0)
    assert co.read_offset_commit_value(record.value).offset == 10


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one() -> None:
    c = Cluster()
    c.txn_commit(offsets={("t", 0): 10})
    c.commit(offsets={("t", 0): 50})             # written after the transactional record
    c.marker(commit=True)
    assert c.committed(partitions=[("t", 0)]) == {("t", 0): 50}


def test_a_failed_append_leaves_nothing_pending() -> None:
    c = Cluster()
    c.log.error = E.NOT_ENOUGH_REPLICAS
    assert errors(c.txn_commit(offsets={("t", 0): 10})) == {("t", 0): E.COORDINATOR_NOT_AVAILABLE}
    c.log.error = E.NONE
    assert stable_fetch(c, [("t", 0)]) == {("t", 0): (-1, 0)}


def test_an_unknown_group_with_generation_minus_one_becomes_a_simple_group() -> None:
    c = Cluster()
    assert errors(c.txn_commit(group="new", offsets={("t", 0): 1})) == {("t", 0): 0}
    assert str(c.group("new").state) == "Empty" and c.group("new").protocol_type is None
    assert errors(c.txn_commit(group="other", offsets={("t", 0): 1}, generation=4, member_id="m")) == {
        ("t", 0): E.ILLEGAL_GENERATION}
    assert c.group("other") is None


def test_v3_fences_zombie_members() -> None:
    c = Cluster()
    (mid,) = c.stable_group(1)
    assert errors(c.txn_commit(offsets={("t", 0): 1}, generation=1, member_id=mid)) == {("t", 0): 0}
    assert errors(c.txn_commit(offsets={("t", 0): 2}, generation=0, member_id=mid)) == {("t", 0): E.ILLEGAL_GENERATION}
    assert errors(c.txn_commit(offsets={("t", 0): 3}, generation=1, member_id="gone")) == {
        ("t", 0): E.UNKNOWN_MEMBER_ID}
    # older versions carry no member or generation: taken while the group has members
    assert errors(c.txn_commit(offsets={("t", 0): 4}, version=2)) == {("t", 0): 0}


def test_v3_fences_a_replaced_static_member() -> None:
    c = Cluster()
    first = c.join_new(instance=None)
    del first
    reply = c.join(member_id="", instance="i-1")
    c.sleep_until(lambda: reply.done)
    old_member = reply["member_id"]
    c.sync(generation=reply["generation_id"], member_id=old_member, assignments={old_member: b""}, instance="i-1")
    again = c.join(member_id="", instance="i-1")   # the same instance rejoins: a new member id
    c.sleep_until(lambda: again.done)
    assert errors(c.txn_commit(offsets={("t", 0): 1}, generation=c.group("g").generation_id, member_id=old_member,
                               instance="i-1")) == {("t", 0): E.FENCED_INSTANCE_ID}


def test_unknown_partitions() -> None:
    c = Cluster(partition_exists=lambda t, p: t == "t")
    assert errors(c.txn_commit(offsets={("t", 0): 1, ("nope", 0): 1})) == {
        ("t", 0): 0, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_failover_loads_pending_committed_and_aborted_transactions() -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 1, ("t", 1): 1, ("t", 2): 1, ("t", 3): 1})
    c.txn_commit(offsets={("t", 0): 10}, producer_id=1)   # committed
    c.marker(producer_id=1, commit=True)
    c.txn_commit(offsets={("t", 1): 20}, producer_id=2)   # aborted
    c.marker(producer_id=2, commit=False)
    c.txn_commit(offsets={("t", 2): 30}, producer_id=3)   # still open
    c.txn_commit(offsets={("t", 3): 40}, producer_id=4)   # overtaken by a plain commit before its marker
    c.commit(offsets={("t", 3): 99})
    c.marker(producer_id=4, commit=True)
    c.txn_commit(group="only-txn", offsets={("t", 0): 5}, producer_id=5)   # a group known only from a pending commit

    c2 = Cluster(owned=[])
    c2.log.partitions = c.log.partitions
    for p in range(4):
        c2.elect(p)
    assert stable_fetch(c2, [("t", 0), ("t", 1), ("t", 2), ("t", 3)]) == {
        ("t", 0): (10, 0), ("t", 1): (1, 0), ("t", 2): (-1, E.UNSTABLE_OFFSET_COMMIT), ("t", 3): (99, 0)}
    assert stable_fetch(c2, [("t", 0)], group="only-txn") == {("t", 0): (-1, E.UNSTABLE_OFFSET_COMMIT)}
    # the open transaction completes on the new coordinator
    c2.marker(producer_id=3, commit=True)
    c2.marker(producer_id=5, commit=True, group="only-txn")
    assert c2.committed(partitions=[("t", 2)]) == {("t", 2): 30}
    assert c2.committed(group="only-txn", partitions=[("t", 0)]) == {("t", 0): 5}


def test_pending_offsets_are_not_expired_and_offset_delete_drops_them() -> None:
    c = Cluster()
    c.txn_commit(offsets={("t", 0): 10})
    g = c.group("g")
    assert g.has_offsets
    assert g.remove_expired_offsets(c.time.milliseconds() + 10**12, 1) == {}
    assert c.offset_delete(partitions=[("t", 0)]).body["error_code"] == 0
    c.marker(commit=True)
    assert c.committed(partitions=[("t", 0)]) == {("t", 0): -1}
