"""Loading groups and offsets from ``__consumer_offsets`` records when elected, and unloading
them when resigning: log order, tombstones, records in any order between a group's metadata and
its offsets, epochs of racing elections, requests parked at the moment of resignation."""

from __future__ import annotations

import asyncio

from broker.coordinator import GroupCoordinatorAdapter, GroupCoordinatorConfig
from broker.coordinator import group_coordinator as gc_module
from protocol.client.clock import SYSTEM_TIME
from protocol.messages import consumer_offsets as co

from .harness import Cluster, E, subscription


def offset_record(group, topic, partition, offset, metadata="", commit_ts=1000, epoch=-1):
    return (co.offset_commit_key(group, topic, partition), co.offset_commit_value(offset, epoch, metadata, commit_ts))


def group_record(group, generation, members=(), protocol="range", leader=None, version=3):
    value = {"protocol_type": "consumer", "generation": generation, "protocol": protocol if members else None,
             "leader": leader if members else None, "current_state_timestamp": 500,
             "members": [{"member_id": m, "group_instance_id": None, "client_id": "c", "client_host": "/h",
                          "rebalance_timeout": 40000, "session_timeout": 10000, "subscription": subscription("t"),
                          "assignment": b"A-" + m.encode()} for m in members]}
    return (co.group_metadata_key(group), co.group_metadata_value(value, version))


def cluster_with(records_by_partition: dict, **kw) -> Cluster:
    c = Cluster(owned=[], **kw)
    for p, recs in records_by_partition.items():
        c.log.partitions[p].extend(recs)
    for p in range(c.config.offsets_topic_num_partitions):
        c.elect(p)
    return c


def test_load_from_records_in_log_order() -> None:
    probe = Cluster(start=False)
    pa = probe.coordinator.partition_for("a")
    recs = {pa: [
        offset_record("a", "t", 0, 5, "m", epoch=2),          # offsets before the group's metadata
        offset_record("a", "t", 1, 6),
        group_record("a", 3, members=["m1", "m2"], leader="m1"),
        offset_record("a", "t", 1, 7),                       # a later commit wins
        offset_record("a", "t", 9, 1),
        (co.offset_commit_key("a", "t", 9), None),           # tombstone
    ]}
    c = cluster_with(recs)
    g = c.group("a")
    assert (str(g.state), g.generation_id, g.protocol_name, g.leader_id, g.protocol_type) == (
        "Stable", 3, "range", "m1", "consumer")
    assert g.get("m2").assignment == b"A-m2" and g.get("m1").rebalance_timeout_ms == 40000
    assert g.subscribed_topics == {"t"} and g.current_state_timestamp == 500
    assert c.committed("a", partitions=None) == {("t", 0): 5, ("t", 1): 7}
    assert c.fetch("a", partitions=[("t", 0)])["topics"][0]["partitions"][0]["committed_leader_epoch"] == 2
    # the loaded members heartbeat on
    assert c.heartbeat("a", generation=3, member_id="m1").error == 0


def test_group_tombstones_offsets_only_groups_and_bad_records() -> None:
    probe = Cluster(start=False)
    part = {g: probe.coordinator.partition_for(g) for g in ("gone", "simple", "back", "empty")}
    recs: dict = {}
    for g, rs in {
        "gone": [group_record("gone", 1, ["x"], leader="x"), (co.group_metadata_key("gone"), None)],
        "simple": [offset_record("simple", "t", 0, 11)],
        "back": [group_record("back", 1, ["x"], leader="x"), (co.group_metadata_key("back"), None),
                 group_record("back", 4)],
        "empty": [group_record("empty", 2), (b"\x00\x07junk", b"whatever"), (co.group_metadata_key("bad"), b"\x00\x09"),
                  offset_record("empty", "t", 0, 3)],
    }.items():
        recs.setdefault(part[g], []).extend(rs)
    c = cluster_with(recs)
    assert c.group("gone") is None
    simple = c.group("simple")
    assert str(simple.state) == "Empty" and simple.protocol_type is None and simple.generation_id == 0
    assert c.committed("simple", partitions=None) == {("t", 0): 11}
    back = c.group("back")
    assert (str(back.state), back.generation_id, back.size) == ("Empty", 4, 0)
    assert c.committed("empty", partitions=None) == {("t", 0): 3}
    assert c.group("bad") is None


def test_group_metadata_value_v0_uses_the_session_timeout_as_rebalance_timeout() -> None:
    value = {"protocol_type": "consumer", "generation": 1, "protocol": "range", "leader": "m",
             "members": [{"member_id": "m", "client_id": "c", "client_host": "h", "session_timeout": 7000,
                          "subscription": b"", "assignment": b""}]}
    probe = Cluster(start=False)
    c = cluster_with({probe.coordinator.partition_for("g"): [(co.group_metadata_key("g"),
                                                               co.group_metadata_value(value, 0))]})
    m = c.group("g").get("m")
    assert (m.session_timeout_ms, m.rebalance_timeout_ms) == (7000, 7000)
    assert c.group("g").current_state_timestamp is None


def test_a_group_survives_failover_to_a_coordinator_reading_the_same_log() -> None:
    c = Cluster()
    leader, follower = c.stable_group(2)
    c.commit(offsets={("t", 0): 42, ("t", 1): 43}, generation=1, member_id=leader)
    c2 = Cluster(owned=[])
    c2.log.partitions = c.log.partitions         # the same replicated log, read by the new leader
    for p in range(4):
        c2.elect(p)
    g = c2.group("g")
    assert str(g.state) == "Stable" and g.generation_id == 1 and g.leader_id == leader
    assert set(g.members) == {leader, follower}
    assert c2.committed(partitions=None) == {("t", 0): 42, ("t", 1): 43}
    described = {m["member_id"]: m["member_assignment"] for m in c2.describe("g")["groups"][0]["members"]}
    assert described == {m: c.group("g").get(m).assignment for m in (leader, follower)}
    # the loaded members' sessions run: the one that stays silent expires, and the group rebalances
    for _ in range(3):
        c2.sleep(3000)
        assert c2.heartbeat(generation=1, member_id=leader).error == 0
    c2.sleep(900)
    assert g.has(follower)
    c2.sleep(100)
    assert not g.has(follower) and str(g.state) == "PreparingRebalance"


def test_resigning_unloads_and_answers_parked_requests_not_coordinator() -> None:
    c = Cluster()
    leader, follower = c.stable_group(2)
    parked_join = c.join(member_id=leader)        # PreparingRebalance, waiting for the follower
    c.stable_group(2, group="h")
    h = c.group("h")
    hj = [c.join(group="h", member_id=m) for m in list(h.members)]
    c.sleep_until(lambda: all(j.done for j in hj))
    parked_sync = c.sync(group="h", generation=2, member_id=next(m for m in h.members if not h.is_leader(m)))
    assert not parked_join.done and not parked_sync.done
    for p in {c.coordinator.partition_for("g"), c.coordinator.partition_for("h")}:
        c.coordinator.on_resigned(p)
    assert parked_join.error == E.NOT_COORDINATOR and parked_sync.error == E.NOT_COORDINATOR
    assert c.group("g") is None and c.group("h") is None
    assert c.heartbeat(member_id=follower).error == E.NOT_COORDINATOR
    c.sleep(60_000)                               # no timer of theirs does anything any more
    assert c.group("g") is None


def test_a_commit_completing_after_resignation_does_not_resurrect_the_group() -> None:
    c = Cluster()
    c.commit(offsets={("t", 0): 1})
    g = c.group("g")
    c.log.hold = True
    reply = c.commit(offsets={("t", 0): 2})
    c.coordinator.on_resigned(c.coordinator.partition_for("g"))
    c.log.release(error=E.NOT_LEADER_OR_FOLLOWER)
    assert reply["topics"][0]["partitions"][0]["error_code"] == E.NOT_COORDINATOR
    assert str(g.state) == "Dead" and g.offset(("t", 0)).offset == 1


def test_loading_is_asynchronous_and_stale_loads_are_discarded() -> None:
    c = Cluster(owned=[])
    p = c.coordinator.partition_for("g")
    c.log.partitions[p].append(offset_record("g", "t", 0, 9))
    c.log.deferred_reads = []
    c.elect(p, epoch=1)
    assert c.join().error == E.COORDINATOR_LOAD_IN_PROGRESS
    c.coordinator.on_resigned(p, epoch=1)
    (_, done), = c.log.deferred_reads
    done(list(c.log.partitions[p]))               # the read finishes after the resignation
    assert c.join().error == E.NOT_COORDINATOR and c.group("g") is None
    c.log.deferred_reads = None
    c.elect(p, epoch=2)
    assert c.committed(partitions=None) == {("t", 0): 9}


def test_leadership_changes_from_older_epochs_are_ignored() -> None:
    c = Cluster(owned=[])
    p = c.coordinator.partition_for("g")
    c.elect(p, epoch=5)
    c.commit(offsets={("t", 0): 1})
    c.coordinator.on_resigned(p, epoch=4)          # stale
    assert c.committed(partitions=None) == {("t", 0): 1}
    c.coordinator.on_resigned(p, epoch=6)
    assert c.group("g") is None
    c.elect(p, epoch=5)                             # stale
    assert c.join().error == E.NOT_COORDINATOR
    c.elect(p, epoch=7)
    assert c.committed(partitions=None) == {("t", 0): 1}


def test_a_failed_read_leaves_the_partition_owned_and_empty() -> None:
    c = Cluster(owned=[])
    p = c.coordinator.partition_for("g")

    def broken(partition, done):
        raise OSError("disk gone")

    c.log.read_partition = broken
    c.elect(p)
    assert c.join().error == E.MEMBER_ID_REQUIRED


def test_a_loaded_group_over_the_size_limit_rebalances() -> None:
    probe = Cluster(start=False)
    c = cluster_with({probe.coordinator.partition_for("g"): [group_record("g", 2, ["a", "b", "c"], leader="a")]},
                     config=GroupCoordinatorConfig(offsets_topic_num_partitions=4, group_max_size=2))
    assert str(c.group("g").state) == "PreparingRebalance"


def test_an_empty_loaded_group_continues_its_generations() -> None:
    probe = Cluster(start=False)
    c = cluster_with({probe.coordinator.partition_for("g"): [group_record("g", 6)]})
    join = c.join(member_id=c.join_new())
    c.sleep(3000)
    assert join["generation_id"] == 7


# -- loading in slices, off the event loop's critical path ----------------------------------

SLICE = gc_module.LOAD_SLICE_RECORDS


class CountingRecords:
    """A partition's records handed out lazily, counting how many were taken, and whether the
    reader was closed (a discarded load stops reading)."""

    def __init__(self, records) -> None:
        self.records = list(records)
        self.taken = 0
        self.closed = False

    def __iter__(self):
        try:
            for r in self.records:
                self.taken += 1
                yield r
        finally:
            self.closed = True


def big_partition(c: Cluster, group="g", n=3 * SLICE + 10):
    p = c.coordinator.partition_for(group)
    c.log.partitions[p].extend(offset_record(group, "t", i % 97, i) for i in range(n))
    readers: list[CountingRecords] = []

    def read(partition, done):
        readers.append(CountingRecords(c.log.partitions[partition]))
        done(iter(readers[-1]))

    c.log.read_partition = read
    return p, readers


def test_a_large_partition_loads_in_slices_answering_load_in_progress_meanwhile() -> None:
    c = Cluster(owned=[])
    p, readers = big_partition(c)
    c.elect(p, epoch=1)
    assert readers[0].taken <= SLICE + 1           # one slice, then the loop gets a turn
    assert c.join().error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.fetch(partitions=[("t", 0)])["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.core.handle_list_groups()[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    slices = 1
    while c.core.group_manager.is_partition_loading(p):
        taken = readers[0].taken
        c.time.schedule(0, lambda: None)           # another callback interleaves with the slices
        _run_one(c)
        assert readers[0].taken - taken <= SLICE + 1
        slices += 1
        assert slices < 10
    assert slices >= 3
    assert c.committed(partitions=[("t", 0)]) == {("t", 0): 3 * SLICE + 10 - 1 - (3 * SLICE + 9) % 97}
    assert c.group("g").num_offsets == 97


def _run_one(c: Cluster) -> None:
    """Fire the timers due now that were scheduled before this call (one turn of the loop)."""
    due = [t for t in c.time._timers if t.deadline <= c.time.monotonic_ms() and not t.cancelled]
    for t in due:
        t.cancel()
    for t in sorted(due):
        t.callback()


def test_a_resignation_mid_load_discards_the_load_and_stops_reading() -> None:
    c = Cluster(owned=[])
    p, readers = big_partition(c)
    c.elect(p, epoch=1)
    c.coordinator.on_resigned(p, epoch=1)
    c.time.sleep(0)
    assert readers[0].closed and readers[0].taken <= SLICE + 1
    assert c.join().error == E.NOT_COORDINATOR and c.group("g") is None
    assert not c.core.group_manager.is_partition_loading(p)
    c.elect(p, epoch=2)
    c.time.sleep(0)
    assert c.group("g").num_offsets == 97 and readers[1].taken == len(readers[1].records)


def test_a_newer_election_mid_load_restarts_the_load() -> None:
    c = Cluster(owned=[])
    p, readers = big_partition(c)
    c.elect(p, epoch=1)
    c.coordinator.on_resigned(p, epoch=1)
    c.elect(p, epoch=2)                            # resigned and elected again before the next slice
    c.elect(p, epoch=3)                            # and elected once more, in a newer epoch
    assert len(readers) == 3
    loaded = []
    c.core.group_manager.add_group = _recording(c.core.group_manager.add_group, loaded)
    c.time.sleep(0)
    assert readers[0].closed and readers[1].closed and readers[0].taken <= SLICE + 1
    assert readers[2].taken == len(readers[2].records)
    assert loaded == ["g"]                          # installed once, by the current load only
    assert c.core.group_manager.is_partition_owned(p) and c.group("g").num_offsets == 97


def _recording(add_group, loaded):
    def add(group):
        loaded.append(group.group_id)
        return add_group(group)
    return add


def test_the_event_loop_runs_between_slices() -> None:
    """On the real loop (SystemTime): a coroutine ticking on the loop makes progress while a
    large partition loads; loading it in one go would leave it no turn at all."""

    async def main() -> tuple[int, int]:
        c = Cluster(owned=[])
        c.time = SYSTEM_TIME
        c.coordinator = GroupCoordinatorAdapter(c.config, SYSTEM_TIME, lambda *a: c.log.append(*a),
                                                lambda *a: c.log.read_partition(*a))
        c.coordinator.startup(enable_metadata_expiration=False)
        p, readers = big_partition(c, n=10 * SLICE)
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        c.coordinator.on_elected(p, 1)
        at_election = ticks
        manager = c.core.group_manager
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while manager.is_partition_loading(p) and loop.time() < deadline:
            await asyncio.sleep(0)
        during = ticks - at_election
        stop = True
        await task
        assert manager.is_partition_owned(p) and manager.get_group("g").num_offsets == 97
        c.coordinator.shutdown()
        return during, readers[0].taken

    during, taken = asyncio.run(main())
    assert taken == 10 * SLICE
    assert during >= 5
