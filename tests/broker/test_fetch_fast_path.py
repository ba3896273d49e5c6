"""The fetch path's lean cases against the general path, the reference (issue 29): the
ReplicaManager's follower parked at the LEO (fetch_messages) and its reader of
one partition (_read_one), and the fetch sessions' one-partition cases (FetchManager.new_context,
FetchContext.response). Two of each are driven through the same steps, one with ``lean`` off;
what they answer, park and keep must be the same."""

from __future__ import annotations

import contextlib
import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.fetch_session import INITIAL_EPOCH, MAX_EPOCH, FetchContext, FetchManager, FetchSessionCache
from broker.partition import LeaderAndIsrState
from broker.replica_manager import FetchParams, ReplicaManager
from broker.replication_quota import ReplicationQuotas
from protocol.clock import MockTime
from protocol.fast_codecs import FetchPartition, FetchPartitionData, FetchRequest
from protocol.records import Record, build_batch
from storage import LogConfig
from tests.broker.replica_manager_support import replica_manager


@contextlib.contextmanager
def _general(*objects):
    """``objects`` take the general path while inside."""
    saved = [(o, vars(o).get("lean")) for o in objects]  # (a class keeps its own attribute; an instance has none)
    for o in objects:
        o.lean = False
    try:
        yield
    finally:
        for o, value in saved:
            if value is None:
                del o.lean
            else:
                o.lean = value


# -- the replica manager ---------------------------------------------------------------------

_FETCH = st.tuples(st.just("fetch"), st.sampled_from([-1, 2, 3, 3, 2, 4]),
                   st.sampled_from([[("t", 0)], [("t", 0)], [("t", 0)], [("t", 1)], [("u", 0)], [("t", 0), ("t", 1)]]),
                   st.sampled_from(["leo", "leo", "leo", "leo-1", "leo-2", "hw", "zero", "past", "below"]),
                   st.sampled_from(["none", "current", "current", "old", "new"]),
                   st.sampled_from([0, 500, 500]), st.sampled_from([0, 1, 1, 60, 5000]),
                   st.sampled_from([1, 80, 1 << 20, 1 << 20]), st.sampled_from([1, 1 << 20, 1 << 20]),
                   st.sampled_from([0, 0, 1]))
# a follower's long-poll at the LEO, the lean path's case (most of the steps: rounds of acks=all produces)
_FOLLOWER = st.tuples(st.just("fetch"), st.sampled_from([2, 3]), st.just([("t", 0)]), st.just("leo"),
                      st.sampled_from(["current", "current", "none"]), st.just(500), st.sampled_from([1, 1, 60]),
                      st.sampled_from([80, 1 << 20, 1 << 20]), st.just(1 << 20), st.just(0))
# a consumer's long-poll at the high watermark, woken when a follower's fetch moves it
_CONSUMER = st.tuples(st.just("fetch"), st.just(-1), st.just([("t", 0)]), st.just("hw"), st.just("none"), st.just(500),
                      st.just(1), st.just(1 << 20), st.just(1 << 20), st.sampled_from([0, 1]))
_PRODUCE = st.tuples(st.just("produce"), st.integers(1, 3), st.sampled_from([1, -1, -1]))
_STEP = st.one_of(
    _FETCH, _FETCH, _FETCH, _FOLLOWER, _FOLLOWER, _FOLLOWER, _FOLLOWER, _PRODUCE, _PRODUCE, _CONSUMER,
    st.tuples(st.just("sleep"), st.sampled_from([100, 600])),
    # a new leader epoch: led here (broker 3 in the ISR or not), or by broker 2
    st.tuples(st.just("lead"), st.sampled_from([(1, (1, 2, 3)), (1, (1, 2)), (1, (1, 2)), (2, (1, 2, 3))])),
    # a transactional batch (the LSO stays below it), or its transaction's marker
    st.tuples(st.just("txn"), st.integers(1, 3)),
    st.tuples(st.just("marker"), st.booleans()),
    st.tuples(st.just("throttle"), st.booleans()),
    st.tuples(st.just("trim"),),
)


class _Side:
    def __init__(self, rm: ReplicaManager, time: MockTime) -> None:
        self.rm = rm
        self.time = time
        self.answers: list = []  # every callback's argument, in order
        self.parked: list = []  # what each fetch_messages returned
        self.epoch = 0
        self.sequence = 0  # the transactional producer's next

    def state(self) -> tuple:
        rm = self.rm
        p = rm.get_partition("t", 0)
        replicas = sorted((rid, r.log_end_offset, r.log_start_offset, r.last_caught_up_time_ms, r.last_fetch_time_ms,
                           r.last_fetch_leader_log_end_offset) for rid, r in p.remote_replicas.items())
        purgatory = rm.fetch_purgatory
        heaps = {k: sorted((e[0], e[1]) for e in h if not e[2].completed) for k, h in purgatory._heaps.items()}
        quotas = rm.replication_quotas
        return (replicas, p.log.high_watermark, p.log.log_end_offset, p.log.log_start_offset, sorted(p.isr),
                purgatory.delayed(), heaps, {k: len(v) for k, v in purgatory._unindexed.items()},
                rm.produce_purgatory.delayed(), quotas.leader.throttled_fetches if quotas is not None else None)

    def answered(self) -> list:
        out = []
        for answer in self.answers:
            if answer and isinstance(answer[0][1][0], FetchPartitionData):
                out.append([(t, [(pd.partition, pd.error_code, pd.high_watermark, pd.last_stable_offset,
                                  pd.log_start_offset, None if pd.records is None else bytes(pd.records),
                                  pd.aborted_transactions, pd.preferred_read_replica) for pd in parts])
                            for t, parts in answer])
            else:
                out.append(answer)  # a produce's
        return out

    def step(self, step) -> None:
        rm, kind = self.rm, step[0]
        p = rm.get_partition("t", 0)
        if kind == "produce":
            batch = bytearray(build_batch([Record(value=b"v" * 20, timestamp=1)] * step[1]))
            rm.append_records(1000, step[2], False, [("t", [(0, batch)])], self.answers.append)
        elif kind == "sleep":
            self.time.sleep(step[1])
        elif kind == "lead":
            self.epoch += 1
            leader, isr = step[1]
            rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 0, 1, leader, self.epoch, list(isr),
                                                                  self.epoch, [1, 2, 3])])
        elif kind == "txn":
            batch = bytearray(build_batch([Record(value=b"x" * 20, timestamp=1)] * step[1], producer_id=7,
                                          producer_epoch=0, base_sequence=self.sequence, transactional=True))
            rm.append_records(1000, 1, False, [("t", [(0, batch)])], self.answers.append)
            self.sequence += step[1]
        elif kind == "marker":
            rm.append_txn_markers(1000, [(7, 0, step[1], 0, [("t", 0)])], self.answers.append)
        elif kind == "throttle":
            if step[1]:
                quotas = rm.replication_quotas = ReplicationQuotas(1, self.time, leader_rate=1.0)
                quotas.topic_configs_changed({"t": {ReplicationQuotas.LEADER_KEY: "*"}})
                quotas.leader.record(1000)
            else:
                rm.replication_quotas = None
        elif kind == "trim":
            if p.log is not None and p.log.high_watermark > p.log.log_start_offset:
                p.log.maybe_increment_log_start_offset(p.log.high_watermark)
        else:
            _, replica_id, keys, offset_kind, epoch_kind, max_wait, min_bytes, pmax, max_bytes, isolation = step
            log_ = p.log
            offset = {"leo": log_.log_end_offset, "leo-1": max(0, log_.log_end_offset - 1),
                      "leo-2": max(0, log_.log_end_offset - 2),
                      "hw": log_.high_watermark, "zero": 0, "past": log_.log_end_offset + 1,
                      "below": log_.log_start_offset - 1}[offset_kind]
            epoch = {"none": -1, "current": p.leader_epoch, "old": p.leader_epoch - 1,
                     "new": p.leader_epoch + 1}[epoch_kind]
            topics: list = []
            for t, index in keys:
                if not topics or topics[-1][0] != t:
                    topics.append((t, []))
                # (a follower's log start offset: the leader's, which DeleteRecords and trims move)
                topics[-1][1].append(FetchPartition(index, epoch, offset, log_.log_start_offset, pmax))
            params = FetchParams(replica_id, max_wait, min_bytes, max_bytes, isolation)
            op = rm.fetch_messages(params, topics, self.answers.append)
            self.parked.append(None if op is None else [meta for _log, meta in op._positions])


def _pair(tmp: Path):
    stack = contextlib.ExitStack()
    sides = []
    for name in ("lean", "general"):
        time = MockTime()
        rm = stack.enter_context(replica_manager(tmp / name, time, LogConfig(min_insync_replicas=2,
                                                                                 segment_bytes=1000)))
        rm.become_leader_or_follower(0, 1, [LeaderAndIsrState("t", 0, 1, 1, 0, [1, 2, 3], 0, [1, 2, 3]),
                                            LeaderAndIsrState("t", 1, 1, 2, 0, [1, 2, 3], 0, [1, 2, 3])])
        sides.append(_Side(rm, time))
    return stack, sides


def _at_leo(replica_id: int, max_wait: int = 0) -> tuple:
    return ("fetch", replica_id, [("t", 0)], "leo", "current", max_wait, 1, 1 << 20, 1 << 20, 0)


# where the random steps start: as led; an aborted transaction and an open one below a high
# watermark at the LEO, read by a read_committed consumer (the LSO behind the HW); broker 3 out of
# the ISR, throttled (KIP-73), parked behind (its fetch tried, and kept, on each append)
_SCENARIOS = [[], [("produce", 2, 1), ("txn", 2), ("marker", False), ("txn", 1), _at_leo(2), _at_leo(3),
                   ("fetch", -1, [("t", 0)], "leo-2", "none", 0, 1, 1 << 20, 1 << 20, 1), ("produce", 1, 1)],
              [("lead", (1, (1, 2))), ("produce", 3, 1), _at_leo(2), ("throttle", True),
               ("fetch", 3, [("t", 0)], "zero", "current", 500, 1, 1 << 20, 1 << 20, 0), ("produce", 1, 1)]]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(scenario=st.sampled_from(_SCENARIOS), steps=st.lists(_STEP, min_size=1, max_size=25))
def test_the_lean_fetch_paths_answer_park_and_record_as_the_general_path(scenario, steps):
    with tempfile.TemporaryDirectory(prefix="kbroker-fetchlean-") as tmp:
        stack, (lean, general) = _pair(Path(tmp))
        with stack:
            for step in scenario + steps:
                lean.step(step)
                with _general(general.rm):
                    general.step(step)
                assert lean.answered() == general.answered(), step
                assert lean.parked == general.parked, step
                assert lean.state() == general.state(), step


def test_a_follower_at_the_leo_is_parked_by_the_lean_path_at_the_general_paths_wake_level(tmp_path):
    """The case the lean path exists for (a caught-up follower of an acks=all leader), checked
    to take it: parked untried, its wake-up level DelayedFetch.wake_level's."""
    stack, (lean, general) = _pair(tmp_path)
    with stack:
        for side in (lean, general):
            with _general(general.rm) if side is general else contextlib.nullcontext():
                side.step(("produce", 2, 1))
                side.step(("fetch", 2, [("t", 0)], "leo", "current", 500, 1, 1 << 20, 1 << 20, 0))
        calls = []
        lean.rm._fetch_messages = lambda *a: calls.append(a)  # the general path: not taken
        lean.step(("fetch", 3, [("t", 0)], "leo", "current", 500, 1, 1 << 20, 1 << 20, 0))
        with _general(general.rm):
            general.step(("fetch", 3, [("t", 0)], "leo", "current", 500, 1, 1 << 20, 1 << 20, 0))
        assert calls == [] and lean.parked[-1] is not None
        assert lean.state() == general.state()
        [(_threshold, _seq, op)] = [e for e in lean.rm.fetch_purgatory._heaps[(("t", 0), True)]
                                    if e[2].params.replica_id == 3]
        assert (("t", 0), True, _threshold) == op.wake_level()
        for side in (lean, general):
            side.step(("produce", 1, -1))  # wakes both parked fetches: read through _read_one
        assert lean.answered() == general.answered()
        assert len(lean.answered()[-1][0][1]) == 1 and lean.answered()[-1][0][1][0][5]  # records sent


# -- fetch sessions --------------------------------------------------------------------------

_SESSION_STEP = st.tuples(
    st.sampled_from(["incremental", "incremental", "incremental", "full", "wrong_epoch", "unknown"]),
    st.sampled_from([[0], [0], [0], [1], [0, 1], []]),  # partitions named
    st.sampled_from([[], [], [], [0], [1]]),  # forgotten
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0, 0, 6]), st.integers(0, 2), st.booleans(),
                       st.sampled_from([-1, -1, 2])), min_size=2, max_size=2),  # per partition: hw, error, ...
    st.booleans(),  # first answered as a quota would (update=False)
)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(start=st.sampled_from([[0], [0], [0, 1]]), steps=st.lists(_SESSION_STEP, min_size=1, max_size=12))
def test_the_lean_session_paths_answer_and_keep_as_the_general_path(start, steps):
    def run(general: bool) -> list:
        out: list = []
        time = MockTime()
        cache = FetchSessionCache(10, time)
        cache._random = random.Random(7)
        manager = FetchManager(cache)
        session_id, epoch = 0, INITIAL_EPOCH
        offset = 0
        with _general(manager, FetchContext) if general else contextlib.nullcontext():
            for kind, named, forgotten, per_partition, quota_first in [("full", start, [], [(0, 0, 0, False, -1)] * 2,
                                                                         False)] + steps:
                offset += 1
                parts = [FetchPartition(i, 0, offset, 0, 1 << 20) for i in named]
                if kind == "full":
                    request = FetchRequest(11, 2, 500, 1, 1 << 20, 0, session_id, INITIAL_EPOCH,
                                           [("t", parts)] if parts else [], [], "")
                else:
                    sent_epoch = {"incremental": epoch, "wrong_epoch": epoch + 5, "unknown": epoch}[kind]
                    request = FetchRequest(11, 2, 500, 1, 1 << 20, 0,
                                           session_id + (999 if kind == "unknown" else 0), sent_epoch,
                                           [("t", parts)] if parts else [], [("t", forgotten)] if forgotten else [], "")
                context = manager.new_context(request, True)
                out.append(("context", context.error, [(t, list(ps)) for t, ps in context.topics]))
                results = [(t, [FetchPartitionData(fp.partition, per_partition[fp.partition][1],
                                                   per_partition[fp.partition][0], 0, per_partition[fp.partition][2],
                                                   b"x" if per_partition[fp.partition][3] else b"", None,
                                                   per_partition[fp.partition][4]) for fp in ps])
                           for t, ps in context.topics]
                if quota_first:
                    out.append(("would send", context.response(results, update=False)))
                sent, new_id, error = context.response(results)
                out.append(("sent", sent, new_id, error))
                if not error and new_id:
                    if new_id != session_id:
                        session_id, epoch = new_id, 1
                    else:
                        epoch += 1
                elif kind == "full":
                    session_id, epoch = new_id, 1 if new_id else INITIAL_EPOCH
                session = cache.sessions.get(session_id)
                out.append(("session", None if session is None else (
                    session.epoch, [(k, c.fetch, c.high_watermark, c.log_start_offset)
                                    for k, c in session.partitions.items()])))
        return out

    assert run(False) == run(True)


def test_a_throttled_followers_fetch_reached_by_an_append_stays_parked_on_its_heap(tmp_path):
    """FetchPurgatory.check_appended's put-back: the fetch's level is reached, DelayedFetch.reached
    finds the follower throttled (KIP-73), so it waits on, and is tried again at the next append."""
    stack, (side, _general_side) = _pair(tmp_path)
    with stack:
        for step in _SCENARIOS[2][:-1]:
            side.step(step)
        heap = side.rm.fetch_purgatory._heaps[(("t", 0), True)]
        [(_level, _seq, op)] = heap
        for _ in range(2):
            side.step(("produce", 1, 1))
            assert [e[2] for e in heap] == [op] and not op.completed
        side.step(("throttle", False))
        side.step(("produce", 1, 1))
        assert op.completed and side.answered()[-2][0][1][0][5]  # then answered, with the records


def test_the_lean_session_path_wraps_the_epoch_after_its_largest_as_the_general_path():
    answers = []
    for general in (False, True):
        cache = FetchSessionCache(10, MockTime())
        manager = FetchManager(cache)
        parts = [FetchPartition(0, 0, 0, 0, 1 << 20)]
        context = manager.new_context(FetchRequest(11, 2, 500, 1, 1 << 20, 0, 0, INITIAL_EPOCH, [("t", parts)], [], ""),
                                      True)
        _, session_id, _ = context.response([("t", [FetchPartitionData(0, 0, 5, 5, 0, b"")])])
        cache.sessions[session_id].epoch = MAX_EPOCH
        with _general(manager, FetchContext) if general else contextlib.nullcontext():
            context = manager.new_context(FetchRequest(11, 2, 500, 1, 1 << 20, 0, session_id, MAX_EPOCH,
                                                       [("t", [FetchPartition(0, 0, 3, 0, 1 << 20)])], [], ""), True)
            sent = context.response([("t", [FetchPartitionData(0, 0, 6, 6, 0, b"")])])
        answers.append((cache.sessions[session_id].epoch, sent[1] == session_id, sent[2],
                        [(t, [pd.high_watermark for pd in ps]) for t, ps in sent[0]]))
    assert answers[0] == answers[1] == (1, True, 0, [("t", [6])])


def test_a_follower_parked_while_its_fetch_completes_a_produce_that_appends_again_is_woken(tmp_path):
    """A follower's fetch at the LEO moves the HW and so completes an acks=all produce whose
    callback appends to the same partition at once (the transaction coordinator's CompleteCommit
    after its PrepareCommit, markers acknowledged at once): parked at the fetch offset's position,
    the fetch is woken by that append's check at the read's end, on the lean path as on the
    general one; parked at the new LEO it waited for the next append or replica.fetch.wait.max.ms."""
    stack, sides = _pair(tmp_path)
    with stack:
        for name, side in zip(("lean", "general"), sides):
            with (_general(ReplicaManager, FetchContext, FetchManager) if name == "general" else contextlib.nullcontext()):
                rm = side.rm
                p = rm.get_partition("t", 0)

                def then_append(_results, rm=rm) -> None:
                    again = bytearray(build_batch([Record(value=b"B" * 20, timestamp=1)]))
                    rm.append_records(1000, 1, False, [("t", [(0, again)])], lambda _r: None)

                first = bytearray(build_batch([Record(value=b"A" * 20, timestamp=1)]))
                rm.append_records(1000, -1, False, [("t", [(0, first)])], then_append)
                answered: dict[int, list] = {}
                for replica in (2, 3):  # the second fetch moves the HW (ISR 1, 2, 3)
                    offset = p.log.log_end_offset
                    fetch = [("t", [FetchPartition(0, p.leader_epoch, offset, p.log.log_start_offset, 1 << 20)])]
                    rm.begin_read()
                    rm.fetch_messages(FetchParams(replica, 500, 1, 1 << 20, 0), fetch,
                                      lambda r, replica=replica: answered.setdefault(replica, r))
                    rm.end_read()
                assert p.log.high_watermark == 1 and p.log.log_end_offset == 2, name
                assert 3 in answered, f"{name}: the follower that completed the produce stays parked"
                (_topic, (pd,)), = answered[3]
                assert len(pd.records) > 0, name
