"""Issue 28 over issue 26: the transactions workload (sim/workload_txn.py) and its
exactly-once checks (sim/verify_txn.py). A seeded run with commits, aborts, offsets committed
in transactions and a fenced producer passes them; each check reports a history that breaks
its rule; a broker whose read_committed fetches pass the LSO is reported by a run."""

from __future__ import annotations

import storage.log
from protocol.clock import MockTime
from protocol.records import Record, build_batch
from sim.runner import Options, Simulation
from sim.verify_txn import LogEntry, check_transactions, hanging_excuse
from storage import Log, LogConfig
from sim.workload_txn import Txn, TxnHistory, TxnRead, TxnWorkload

SEED = 2  # (runs the workload: two transactional ids over tx0x3, the second one taken over, fencing)


def _run(seed: int, **options) -> Simulation:
    sim = Simulation(seed, Options(**options))
    sim.result = sim.run()
    return sim


def test_the_seed_decides_with_its_own_stream_whether_it_runs_transactions():
    chosen = [s for s in range(1, 41) if TxnWorkload.maybe(_Stub(s)) is not None]
    assert 10 < len(chosen) < 30
    assert SEED in chosen


class _Stub:
    def __init__(self, seed: int) -> None:
        import random
        self.seed = seed
        self.options = Options()
        self.rng_for = lambda name: random.Random(f"{name}-{seed}")
        self._clients = 0

    def client_process(self, name):
        from sim.loop import Process
        self._clients += 1
        return Process(name, f"client-{self._clients}", 1)


def test_a_seeded_run_commits_aborts_fences_and_passes_the_checks():
    sim = _run(SEED, duration_s=10.0)
    assert sim.result.ok, ([(v.check, v.detail) for v in sim.result.violations], sim.result.tail[-30:])
    history = sim.txn_history
    outcomes = {t.outcome for t in history.txns}
    assert {"committed", "aborted"} <= outcomes
    assert any(t.offsets and t.outcome == "committed" for t in history.txns)
    assert any(t.offsets and t.outcome == "aborted" for t in history.txns)
    assert history.fenced == ["txn-1"]  # (by txn-1b's InitProducerId for tid-1)
    committed_values = {v for t in history.txns if t.outcome == "committed" for vs in t.values.values() for v in vs}
    assert committed_values and committed_values <= {r.value for r in history.reads}


def test_a_broker_whose_read_committed_fetches_pass_the_lso_is_reported(monkeypatch):
    """The LSO made the high watermark (read_committed reads ongoing transactions): the run
    reports records of aborted transactions read, and records read before their commit
    marker. Red-green pair: the same seed is clean without the patch (test above)."""
    monkeypatch.setattr(storage.log.Log, "last_stable_offset", property(lambda self: self.high_watermark))
    sim = _run(SEED, duration_s=10.0)
    found = {v.check for v in sim.result.violations}
    assert {"txn-aborted-read", "txn-read-before-marker"} <= found, sorted(found)


def test_a_transaction_left_open_is_reported_when_the_coordinator_never_times_it_out(monkeypatch):
    """A producer that stops in the middle of a transaction (EndTxn never sent): the
    coordinator aborts it after transaction.timeout.ms, and the run is clean; with the
    coordinator's timeout abort switched off, the LSO stays below the high watermark and the
    liveness check reports it."""
    import sim.workload_txn as workload_txn
    from broker.transaction.coordinator import TransactionCoordinator

    async def never(self, commit):
        await __import__("asyncio").Event().wait()
    monkeypatch.setattr(workload_txn.TransactionalActor, "end", never)
    clean = _run(SEED, duration_s=6.0, faults=False)
    assert clean.result.ok, [(v.check, v.detail) for v in clean.result.violations]
    monkeypatch.setattr(TransactionCoordinator, "abort_timed_out_transactions", lambda self: None)
    stuck = _run(SEED, duration_s=6.0, faults=False)
    details = [v.detail for v in stuck.result.violations if v.check == "liveness"]
    assert details and "LSO" in details[0], [(v.check, v.detail) for v in stuck.result.violations]


# -- the checks over doctored histories -------------------------------------------------------

def _history() -> tuple[TxnHistory, dict, dict]:
    """Two transactions of one producer (pid 7) on t-0: #0 committed with offsets 1, #1 aborted
    with offsets 2; the log, the reads and the group's offset as a correct run leaves them."""
    h = TxnHistory(topics={"t": 1})
    a = Txn("p", "tid", 0, 1.0, {("t", 0): [b"a0", b"a1"]}, "g", {("t", 0): 1}, True, "committed", 7, 0)
    b = Txn("p", "tid", 1, 2.0, {("t", 0): [b"b0"]}, "g", {("t", 0): 2}, False, "aborted", 7, 0)
    h.txns += [a, b]
    for t in (a, b):
        for vs in t.values.values():
            for v in vs:
                h.by_value[v] = t
    logs = {("t", 0): [LogEntry(0, 7, b"a0"), LogEntry(1, 7, b"a1"), LogEntry(2, 7, None, "commit"),
                       LogEntry(3, 7, b"b0"), LogEntry(4, 7, None, "abort")]}
    h.reads += [TxnRead("t", 0, 0, b"a0", 3.0, 5), TxnRead("t", 0, 1, b"a1", 3.0, 5)]
    return h, logs, {"g": {("t", 0): 1}}


def _checks(h, logs, committed, exposed=None) -> set[str]:
    return {c for c, _d in check_transactions(h, logs, committed, exposed or (lambda key, t: None))}


def test_a_correct_history_passes():
    assert _checks(*_history()) == set()


def test_a_read_of_an_aborted_transaction_is_reported():
    h, logs, committed = _history()
    h.reads.append(TxnRead("t", 0, 3, b"b0", 4.0, 5))
    assert "txn-aborted-read" in _checks(h, logs, committed)
    h.txns[1].outcome, h.txns[1].commit_requested = "unknown", False  # (no commit asked: still aborted)
    assert "txn-aborted-read" in _checks(h, logs, committed)


def test_a_committed_transaction_not_read_is_reported_unless_its_partition_was_exposed():
    h, logs, committed = _history()
    del h.reads[1]
    assert _checks(h, logs, committed) == {"txn-committed-unread"}
    assert _checks(h, logs, committed, lambda key, t: 2.5) == set()


def test_a_transaction_partly_visible_is_reported():
    h, logs, committed = _history()
    h.txns[0].outcome = "unknown"  # (the commit's answer never came: all or nothing)
    assert _checks(h, logs, committed) == set()
    del h.reads[0]
    assert _checks(h, logs, committed) == {"txn-partial"}
    h.reads.clear()
    committed["g"].clear()  # (nothing of it visible, its offsets neither: aborted after all)
    assert _checks(h, logs, committed) == set()


def test_a_record_read_before_its_commit_marker_was_written_is_reported():
    h, logs, committed = _history()
    h.reads[0] = TxnRead("t", 0, 0, b"a0", 1.5, 2)  # (the log ended at 2 then: the marker at 2 not in)
    assert _checks(h, logs, committed) == {"txn-read-before-marker"}


def test_a_record_read_whose_marker_is_an_abort_is_reported():
    h, logs, committed = _history()
    logs[("t", 0)][2] = LogEntry(2, 7, None, "abort")
    assert "txn-read-before-marker" in _checks(h, logs, committed)


def test_offsets_of_an_aborted_transaction_or_a_lost_commit_are_reported():
    h, logs, committed = _history()
    assert _checks(h, logs, {"g": {("t", 0): 2}}) == {"txn-offsets"}  # the aborted one's
    assert _checks(h, logs, {"g": {}}) == {"txn-offsets"}  # the committed one's lost
    h.txns[1].outcome, h.txns[1].commit_requested = "committed", True
    h.reads.append(TxnRead("t", 0, 3, b"b0", 4.0, 5))
    logs[("t", 0)][4] = LogEntry(4, 7, None, "commit")
    assert _checks(h, logs, {"g": {("t", 0): 1}}) == {"txn-offsets"}  # stale: a later commit's lost
    assert _checks(h, logs, {"g": {("t", 0): 2}}) == set()


def test_offsets_lost_with_their_consumer_offsets_partition_are_excused():
    """Seeds 43, 277: every ISR member of the group's __consumer_offsets partition (and the
    id's __transaction_state partition) lost unsynced records in power losses after the
    commits: the offsets are gone (Kafka does not fsync). Offsets committed after the last such
    loss still count."""
    h, logs, committed = _history()

    def found(got, exposures):
        return {c for c, _d in check_transactions(h, logs, {"g": got}, lambda key, t: None, exposures)}
    assert found({}, {}) == {"txn-offsets"}
    offsets_key, state_key = h.txns[0].offsets_key, h.txns[0].state_key
    assert found({}, {offsets_key: [5.0]}) == set()
    assert found({}, {state_key: [5.0]}) == set()
    assert found({}, {("__consumer_offsets", 9): [5.0]}) == {"txn-offsets"}
    assert found({("t", 0): 2}, {offsets_key: [5.0]}) == set()  # (the aborted one's, before the loss)
    assert found({}, {offsets_key: [0.5]}) == {"txn-offsets"}  # (the loss before the commit)
    assert found({("t", 0): 2}, {offsets_key: [0.5]}) == {"txn-offsets"}


def test_a_record_skipped_after_a_loss_below_the_observers_position_is_excused():
    """Seed 182: every ISR member of tx0-0 lost unsynced records (exposed at 6.3 s) after the
    observer had read up to some offset; a later transaction committed records at the reused
    offsets below its position, which it never read again. Excused only below that position."""
    h, logs, committed = _history()
    c = Txn("p", "tid", 2, 5.0, {("t", 0): [b"c0"]}, None, {}, True, "committed", 7, 0)
    h.txns.append(c)
    h.by_value[b"c0"] = c
    logs[("t", 0)] += [LogEntry(5, 7, b"c0"), LogEntry(6, 7, None, "commit")]
    assert _checks(h, logs, committed) == {"txn-committed-unread"}
    h.reads.append(TxnRead("t", 0, 5, b"lost", 3.5, 7))  # read at 5 before the loss at 4.0
    found = {c for c, _d in check_transactions(h, logs, committed, lambda key, t: None, {("t", 0): [4.0]})}
    assert found == set()
    found = {c for c, _d in check_transactions(h, logs, committed, lambda key, t: None, {("t", 0): [3.0]})}
    assert found == {"txn-committed-unread"}  # (the loss came before the observer read that far)


def test_a_record_skipped_below_a_position_past_markers_and_aborted_batches_is_excused():
    """Seed 1029: the observer had read tx0-1@0-1 (a committed transaction), then passed its
    COMMIT marker at 2, an aborted transaction at 3-4 and its ABORT marker at 5: position 6, with
    no record read above 1. Every ISR member lost tx0-1's unsynced records (exposed at 11.95 s),
    the log started over at 0, and a committed transaction landed at 5-6; the observer, at 6,
    read 6 only. Its position before the loss counts, not just the offsets it read."""
    from sim.workload_txn import TxnPosition
    h, logs, committed = _history()
    # (before the loss the observer passed b's aborted batch at 3 and its ABORT marker at 4)
    h.positions += [TxnPosition("t", 0, 2, 3.0), TxnPosition("t", 0, 5, 3.5)]
    c = Txn("p", "tid", 2, 5.0, {("t", 0): [b"c0", b"c1"]}, None, {}, True, "committed", 7, 0)
    h.txns.append(c)
    h.by_value[b"c0"] = h.by_value[b"c1"] = c
    # (the loss took 3-4 (b, aborted anyway); c landed at 3-4, its marker at 5, past which the observer read)
    logs[("t", 0)][3:] = [LogEntry(3, 7, b"c0"), LogEntry(4, 7, b"c1"), LogEntry(5, 7, None, "commit")]

    def found(exposures):
        return {c for c, _d in check_transactions(h, logs, committed, lambda key, t: None, exposures)}
    assert found({}) == {"txn-committed-unread"}
    assert found({("t", 0): [4.0]}) == set()
    assert found({("t", 0): [3.2]}) == {"txn-committed-unread"}  # (its position was 2 then: below c)
    h.reads.append(TxnRead("t", 0, 4, b"c1", 6.0, 6))
    assert found({}) == {"txn-committed-unread"}  # (c0 never read: 1 of 2, as at seed 1029)
    assert found({("t", 0): [4.0]}) == set()


def test_records_behind_a_hanging_transaction_after_a_loss_are_excused():
    """Seed 714: __transaction_state-0 and tx1-2 lost unsynced records in power losses; a
    transaction's marker and its coordinator's state were lost, so it hangs (LSO 0) as in Kafka,
    and the later committed records behind it cannot be read committed. Excused at and above
    that LSO only."""
    h, logs, committed = _history()
    del h.reads[1]
    found = {c for c, _d in check_transactions(h, logs, committed, lambda key, t: None, {}, {("t", 0): 1})}
    assert found == set()
    found = {c for c, _d in check_transactions(h, logs, committed, lambda key, t: None, {}, {("t", 0): 2})}
    assert found == {"txn-committed-unread"}


class _Exposed:
    """The Simulation's exposures alone (what hanging_excuse asks of it)."""

    exposed_since = Simulation.exposed_since

    def __init__(self, exposures: dict) -> None:
        self.exposures = exposures


def test_a_hanging_transaction_is_excused_only_by_a_loss_of_its_partition_or_of_its_ids_state(tmp_path):
    """The excuse is the hanging transaction's own (not any loss anywhere): tid-0's transaction
    (pid 7) is open at t-0's LSO, tid-1's (pid 8) committed behind it. Only t-0 or tid-0's
    __transaction_state partition exposed after it began excuses it; tid-1's state partition
    or another partition exposed must not (a marker or timeout-abort bug would pass)."""
    h = TxnHistory(topics={"t": 2})
    mine = Txn("p", "tid-0", 0, 1.0, {("t", 0): [b"a0"]}, None, {}, True, "unknown", 7, 0,
               state_key=("__transaction_state", 3))
    other = Txn("q", "tid-1", 0, 1.5, {("t", 0): [b"q0"]}, None, {}, True, "committed", 8, 0,
                state_key=("__transaction_state", 5))
    h.txns += [mine, other]
    h.by_value.update({b"a0": mine, b"q0": other})
    log = Log.open(tmp_path / "t-0", LogConfig(), time=MockTime())
    try:
        log.append_as_leader(build_batch([Record(timestamp=0, key=b"x", value=b"x")]), 0)  # 0: not transactional
        for pid, value in ((7, b"a0"), (8, b"q0")):  # 1: pid 7 opens; 2: pid 8
            log.append_as_leader(build_batch([Record(timestamp=0, key=value, value=value)], producer_id=pid,
                                             producer_epoch=0, base_sequence=0, transactional=True), 0)
        log.append_end_txn_marker(8, 0, 0, True, 0)  # 3: pid 8 commits
        log.update_high_watermark(log.log_end_offset)
        assert (log.last_stable_offset, log.high_watermark) == (1, 4)

        def excuse(exposures: dict) -> str | None:
            return hanging_excuse(_Exposed(exposures), h, ("t", 0), log)
        assert excuse({}) is None
        assert excuse({("__transaction_state", 5): [2.0]}) is None  # (tid-1's coordinator state)
        assert excuse({("t", 1): [2.0]}) is None  # (another partition)
        assert excuse({("__transaction_state", 3): [0.5]}) is None  # (before it began)
        assert excuse({("t", 0): [0.5]}) is None
        assert "tid-0#0" in (excuse({("__transaction_state", 3): [2.0]}) or "")
        assert "tid-0#0" in (excuse({("t", 0): [2.0], ("__transaction_state", 5): [2.0]}) or "")
    finally:
        log.close()


def test_a_transactional_record_prefetched_before_a_loss_and_handed_out_after_it_is_excused(tmp_path):
    """Seed 1876: the read_committed observer fetched tx1-2@10 (a committed transaction begun at
    3.7 s, below the HW and the LSO) at 4.0 s, but its poll waited on a fetch from a crashed broker
    and handed it out only at 14.5 s. Every ISR member of tx1-2 had lost its unsynced records at
    11.4 s; the log started over and another transaction took offset 10. The excuse of
    Simulation.observe (the partition exposed after the older record was written) must know when
    transactional records were written (TxnHistory: their transaction's start), as it knows the
    producers' (History.by_value)."""
    sim = Simulation(1, Options(), root=tmp_path)
    h = sim.txn_history = TxnHistory({"tx1": 3})
    old = Txn("txn-1", "tid-1", 5, 3.7, {("tx1", 2): [b"old"]}, None, {}, True, "committed", 1000, 0)
    new = Txn("txn-0", "tid-0", 10, 17.6, {("tx1", 2): [b"new"]}, None, {}, True, "committed", 6000, 0)
    h.txns += [old, new]
    h.by_value.update({b"old": old, b"new": new})
    sim.exposures[("tx1", 2)] = [11.4]
    sim.loop._now = 14.5
    sim.observe("tx1", 2, 10, b"old", "rc-observer#1")
    sim.loop._now = 17.7
    sim.observe("tx1", 2, 10, b"new", "rc-observer#1")
    assert [v.check for v in sim.violations] == [] and sim.exempt == 1
    # Not excused when the loss came before the older transaction began: a real replacement.
    sim.exposures[("tx1", 2)] = [3.0]
    sim.loop._now = 18.0
    sim.observe("tx1", 2, 10, b"old", "rc-observer#1")
    assert [v.check for v in sim.violations] == ["inconsistent-offset"]


def _observer_with_fake_leaders(leaders):
    """A read_committed observer of t-0 and t-1 (positions 0, leaders per ``leaders``) over one
    broker whose replica of t-0 has log end 3 (a0, a1 and the COMMIT marker at 2), as
    _history() has them; its clock, and the broker, for the test to move."""
    from types import SimpleNamespace

    from sim.loop import Process
    from sim.workload_txn import AnswerSamplingConsumer, ReadCommittedObserver

    clock = SimpleNamespace(now=1.0)
    log_ = SimpleNamespace(log_end_offset=3)
    broker = SimpleNamespace(ready=True, log=log_, server=SimpleNamespace(
        replica_manager=SimpleNamespace(partitions={("t", 0): SimpleNamespace(log=log_)})))
    sim = SimpleNamespace(loop=SimpleNamespace(time=lambda: clock.now), cluster=SimpleNamespace(brokers={1: broker}),
                          history=SimpleNamespace(polls=0), observe=lambda *args: None,
                          client_process=lambda name: Process(name, "client-1", 1))
    h, logs, committed = _history()
    h.reads.clear()
    observer = ReadCommittedObserver(sim, "rc-observer", h)
    epochs = dict.fromkeys(leaders, 0)

    async def refresh_metadata(topics):
        return None
    client = SimpleNamespace(time=MockTime(), refresh_metadata=refresh_metadata, cluster=SimpleNamespace(
        leader=lambda topic, p: leaders[(topic, p)],
        partition=lambda topic, p: SimpleNamespace(leader_epoch=epochs[(topic, p)])))
    consumer = observer.consumer = AnswerSamplingConsumer(sim, client, isolation_level=1)
    consumer.assign(leaders)
    for tp in leaders:
        consumer.seek(tp, 0)
    return SimpleNamespace(clock=clock, broker=broker, observer=observer, consumer=consumer, epochs=epochs,
                           history=(h, logs, committed))


def _answer(topic, partition, records):
    """A FetchResponse with ``records`` ((offset, value)s) of topic-partition, or none."""
    from protocol.fast_codecs import FetchPartitionData, FetchResponse

    buf = b"".join(build_batch([Record(timestamp=0, key=None, value=v)], base_offset=o) for o, v in records)
    return FetchResponse(0, 0, 0, [(topic, [FetchPartitionData(partition, 0, 3, 3, 0, memoryview(buf), [])])])


async def _until(condition):
    import asyncio

    for _ in range(50):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


def test_the_observer_reads_when_an_answer_arrives_not_when_its_poll_hands_it_out(monkeypatch):
    """Seed 4390 (a bug of the checks): an answer with committed records (their COMMIT markers in
    the log: the log end past them) arrived at 4.86 s, but the observer's poll handed them out
    only at 14.38 s, when every broker was down (there, the poll waited on a fetch from a broker
    never ready; with fetches in flight across polls an answer waits in the same way for the
    next poll). The live replicas' log ends sampled at hand-out were none (-1):
    txn-read-before-marker flagged the records. A read is the answer's arrival: its time and the
    log ends then."""
    import asyncio

    from protocol.client.connection import KafkaConnectionError
    from protocol.client.consumer import Consumer
    from protocol.client.metadata import TopicPartition

    f = _observer_with_fake_leaders({("t", 0): 1, ("t", 1): 2})
    h, logs, committed = f.history
    answer, fail = asyncio.Event(), asyncio.Event()

    async def fetch_from(self, node, offsets):
        if node == 1 and not answer.is_set():
            await answer.wait()
            return _answer("t", 0, [(0, b"a0"), (1, b"a1")])
        await fail.wait()  # (and the next Fetch to broker 1 waits)
        raise KafkaConnectionError("closed by the broker's shutdown")
    monkeypatch.setattr(Consumer, "_fetch_from", fetch_from)

    async def polls():
        consumer = f.consumer
        assert await consumer.getmany(0) == {}  # (sends a Fetch to each leader)
        f.clock.now = 4.86
        answer.set()
        await _until(lambda: consumer._inflight[1][1].done())
        f.clock.now, f.broker.ready = 14.38, False  # (every broker down)
        fail.set()
        await _until(lambda: consumer._inflight[2][1].done())
        batch = await consumer.getmany(0)
        assert list(batch) == [TopicPartition("t", 0)]
        f.observer.record_reads(batch)  # (as its main loop: no wait after the poll)
    asyncio.run(polls())
    assert [(r.offset, r.value, r.at, r.max_leo) for r in h.reads] == [(0, b"a0", 4.86, 3), (1, b"a1", 4.86, 3)]
    assert _checks(h, logs, committed) == set()
    # The check itself still reports a record whose marker was past every log end at its read.
    h.reads[0].max_leo = 2
    assert _checks(h, logs, committed) == {"txn-read-before-marker"}


def test_an_answer_the_observers_consumer_drops_leaves_no_sample_for_the_records_of_another(monkeypatch):
    """The leader of t-0 moved from broker 1 to broker 2 (a new leader epoch) while a Fetch to
    broker 1 was in flight: the consumer fetches t-0 from broker 2 too, whose answer (a0, a1)
    arrives at 4.86 s, log end 3; broker 1's comes later, at 9.0 s (log end 5), and is dropped
    (asked under the old epoch). The records read are broker 2's: read at 4.86 s with log end 3,
    not at the arrival of the answer dropped."""
    import asyncio

    from protocol.client.consumer import Consumer

    leaders = {("t", 0): 1}
    f = _observer_with_fake_leaders(leaders)
    h, _logs, _committed = f.history
    answers = {1: asyncio.Event(), 2: asyncio.Event()}

    async def fetch_from(self, node, offsets):
        await answers[node].wait()
        return _answer("t", 0, [(0, b"a0"), (1, b"a1")])
    monkeypatch.setattr(Consumer, "_fetch_from", fetch_from)

    async def polls():
        consumer = f.consumer
        assert await consumer.getmany(0) == {}  # (a Fetch to broker 1)
        leaders[("t", 0)], f.epochs[("t", 0)] = 2, 1
        assert await consumer.getmany(0) == {}  # (and one to broker 2)
        assert sorted(consumer._inflight) == [1, 2]
        f.clock.now = 4.86
        answers[2].set()
        await _until(lambda: consumer._inflight[2][1].done())
        f.clock.now, f.broker.log.log_end_offset = 9.0, 5
        answers[1].set()
        await _until(lambda: consumer._inflight[1][1].done())
        f.observer.record_reads(await consumer.getmany(0))
    asyncio.run(polls())
    assert [(r.offset, r.value, r.at, r.max_leo) for r in h.reads] == [(0, b"a0", 4.86, 3), (1, b"a1", 4.86, 3)]
