"""Jepsen-style exactly-once checks over the transactions workload (sim/workload_txn.py).

At the end of a run, once the cluster settled, from the transactions as the clients saw them,
what the read_committed observer read, the leaders' final logs and the groups' committed
offsets:

* ``txn-aborted-read``: no value of a transaction that could only abort (no commit was ever
  asked for, or EndTxn(abort) answered) is read by read_committed;
* ``txn-committed-unread``: every value of a transaction the client saw committed is read;
* ``txn-partial``: a transaction is read all or nothing (one whose commit answer never came
  included);
* ``txn-read-before-marker``: a record read by read_committed is followed in its partition's
  log by its producer's COMMIT marker, and that marker was already in the log (below the
  largest log end offset of a live replica) when the record was read (when its fetch answer
  arrived, not when the observer's poll handed it out: seed 4390): read_committed never passes
  the LSO;
* ``txn-offsets``: a group's offsets committed inside transactions appear iff their
  transaction committed: the final committed offset is that of the last transaction with
  offsets that committed, or of a later one whose answer never came; never an aborted one's.

Records lost by every ISR member in a power loss are Kafka's durability bound: a partition
exposed (sim/runner.py) after the transaction began excuses the checks on it: one of its
partitions or its __transaction_state partition (its commit decision) for the first four,
its group's __consumer_offsets partition or __transaction_state partition for the last. And
a record the observer skipped: written again at an offset its position had passed before a
loss (records it read, or markers and aborted batches it passed).

Liveness (``lso_problems``, part of the settled condition): no transaction stays open once
the producers stopped and transaction.timeout.ms passed: the LSO reached the high
watermark on every partition of the workload's topics. A transaction left hanging by a loss
is excused on its own partition only (``hanging_excuse``): the one open at the LSO, if that
partition or its id's __transaction_state partition was exposed after it began.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable

from protocol.errors import KafkaError
from protocol.records import batch_body, decode_records, iter_batch_headers

from .verify import committed_offsets
from .workload_txn import Txn, TxnHistory

Key = tuple[str, int]


@dataclass(frozen=True)
class LogEntry:
    offset: int
    producer_id: int
    value: bytes | None
    marker: str | None = None  # "commit" / "abort" for a control record


def read_entries(log_: Any) -> list[LogEntry]:
    """The log's records and transaction markers in offset order, each with its producer id."""
    out: list[LogEntry] = []
    offset = log_.log_start_offset
    end = log_.log_end_offset
    while offset < end:
        view = log_.read(offset, 1 << 20).records
        if not len(view):
            break
        last = offset
        for pos, header in iter_batch_headers(view):
            for record in decode_records(header, batch_body(view, pos, header)):
                if record.offset < offset:
                    continue
                if header.is_control:
                    kind = int.from_bytes(bytes(record.key or b"\0\0\0\0")[2:4], "big")
                    out.append(LogEntry(record.offset, header.producer_id, None, "commit" if kind == 1 else "abort"))
                else:
                    out.append(LogEntry(record.offset, header.producer_id, record.value))
            last = header.last_offset
        offset = max(offset, last + 1)
    return out


def _entry_at(log_: Any, offset: int) -> LogEntry | None:
    """The record at ``offset`` of the log (its first batch from there), with its producer id."""
    view = log_.read(offset, 1 << 16).records
    for pos, header in iter_batch_headers(view):
        if header.is_control:
            continue
        for record in decode_records(header, batch_body(view, pos, header)):
            if record.offset >= offset:
                return LogEntry(record.offset, header.producer_id, record.value)
    return None


def hanging_excuse(sim: Any, history: TxnHistory, key: Key, log_: Any) -> str | None:
    """Why the partition's LSO may stay below its high watermark, or None (a transaction that
    stays open: a violation). Excused: the transaction open at the LSO (its producer id in the
    leader's producer state, its first record there; the history's transaction of that
    record) was left hanging by a loss of Kafka's durability bound: its partition (the marker)
    or its id's __transaction_state partition (the coordinator's state) was exposed after it
    began. Seed 714. Another id's loss excuses nothing: a marker or timeout bug stays seen."""
    lso = log_.last_stable_offset
    state = log_.producer_state
    producer_id = state.ongoing_txns.get(lso)
    pending = state.unreplicated_txns.get(lso)  # (its marker written, not yet below the high watermark)
    if producer_id is None and pending is not None:
        producer_id = pending[0]
    entry = None
    if producer_id is None:
        entry = _entry_at(log_, lso)
        producer_id = entry.producer_id if entry is not None else None
    candidates = [t for t in history.txns if t.producer_id == producer_id]
    if not any(sim.exposures.get(k) for k in (key, *(t.state_key for t in candidates))):
        return None  # (no loss that could excuse it: the log is not read, the run's state stays as it was)
    entry = entry or _entry_at(log_, lso)
    txn = history.by_value.get(entry.value) if entry is not None and entry.value is not None else None
    if txn is not None:  # (the transaction of its first record; else every one of the producer id)
        candidates = [txn]
    for t in candidates:
        for k in (key, t.state_key):
            at = sim.exposed_since(k, t.started_at)
            if at is not None:
                return f"{t.describe()} open at {lso}; {k[0]}-{k[1]} exposed at {at:.6f}"
    return None


def lso_problems(sim: Any, history: TxnHistory) -> list[str]:
    """Partitions whose last stable offset is below the high watermark on their leader, unless
    ``hanging_excuse`` excuses it: a transaction whose coordinator lost its state, or whose
    partition lost its marker, in a power loss of every ISR member is left hanging, as in Kafka
    (Kafka's bound; its remedy is kbroker transactions abort, KIP-664)."""
    problems = []
    for topic, count in sorted(history.topics.items()):
        for pid in range(count):
            p = sim.leader_partition((topic, pid))
            if p is None:
                problems.append(f"{topic}-{pid}: no leader log")
                continue
            lso, hw = p.log.last_stable_offset, p.log.high_watermark
            if lso != hw and hanging_excuse(sim, history, (topic, pid), p.log) is None:
                problems.append(f"{topic}-{pid}: LSO {lso} below the high watermark {hw} (a transaction stays open)")
    return problems


def check_transactions(history: TxnHistory, logs: dict[Key, list[LogEntry]], committed: dict[str, dict[Key, int]],
                       exposed_since: Callable[[Key, float], float | None],
                       exposures: dict[Key, list[float]] | None = None,
                       hanging: dict[Key, int] | None = None) -> list[tuple[str, str]]:
    """The violations (check, detail) of the run's transactions; ``exposed_since(key, t)``:
    when the partition was exposed after ``t`` (None: never); ``exposures``: when each
    partition was exposed; ``hanging``: the LSO of partitions left below their high
    watermark by a hanging transaction after a loss (lso_problems excused them): nothing at or
    above it can be read committed."""
    out: list[tuple[str, str]] = []
    read: dict[bytes, list[Any]] = {}
    for r in history.reads:
        if r.value is not None:
            read.setdefault(r.value, []).append(r)
    # A partition exposed after the observer's position reached offset P lost records below P;
    # the offsets below P are written again after the loss, and the observer, its position past
    # them, skips what lands there (Kafka's bound, as for a plain consumer): excused. P counts
    # the markers and aborted batches read_committed passes without a read (seed 1029).
    skip_below: dict[Key, int] = {}
    for key, times in (exposures or {}).items():
        for t in times:
            before = [r.offset for r in history.reads if (r.topic, r.partition) == key and r.at <= t]
            before += [p.position - 1 for p in history.positions if (p.topic, p.partition) == key and p.at <= t]
            if before:
                skip_below[key] = max(skip_below.get(key, -1), max(before))
    final_offset = {e.value: (k, e.offset) for k, es in logs.items() for e in es if e.value is not None}

    def skipped(v: bytes) -> bool:
        where = final_offset.get(v)
        return where is not None and (where[1] <= skip_below.get(where[0], -1)
                                      or where[1] >= (hanging or {}).get(where[0], 1 << 62))

    def excused(txn: Txn, keys: Any) -> bool:
        # (its partitions, or the __transaction_state partition holding its commit decision)
        return any(exposed_since(k, txn.started_at) is not None for k in [*keys, txn.state_key])

    for txn in history.txns:
        values = [(k, v) for k, vs in sorted(txn.values.items()) for v in vs]
        seen = [(k, v) for k, v in values if v in read]
        may_commit = txn.commit_requested and txn.outcome != "aborted"
        if seen and not may_commit:
            k, v = seen[0]
            out.append(("txn-aborted-read", f"{txn.describe()} ended {txn.outcome} without a commit, yet "
                        f"read_committed read {v.decode()} at {k[0]}-{k[1]}@{read[v][0].offset}"))
            continue
        if excused(txn, txn.values):
            continue
        if any(skipped(v) for k, v in values if v not in read):
            continue
        if txn.outcome == "committed" and len(seen) < len(values):
            missing = [v.decode() for k, v in values if v not in read]
            out.append(("txn-committed-unread", f"{txn.describe()} committed; read_committed never read "
                        f"{', '.join(missing[:4])} ({len(missing)} of {len(values)})"))
        elif seen and len(seen) < len(values):
            missing = [v.decode() for k, v in values if v not in read]
            out.append(("txn-partial", f"{txn.describe()} ({txn.outcome}) partly visible to read_committed: "
                        f"{len(seen)} of {len(values)} values read, not {', '.join(missing[:4])}"))
    # the commit marker follows each record read, and was in the log when it was read
    index: dict[Key, list[LogEntry]] = logs
    positions: dict[Key, dict[int, int]] = {k: {e.offset: i for i, e in enumerate(es)} for k, es in index.items()}
    for r in history.reads:
        key = (r.topic, r.partition)
        txn = history.by_value.get(r.value) if r.value is not None else None
        entries = index.get(key)
        if txn is None or entries is None or excused(txn, [key]):
            continue
        i = positions[key].get(r.offset)
        if i is None or entries[i].value != r.value:
            continue  # (the replicas' agreement is checked elsewhere)
        pid = entries[i].producer_id
        marker = next((e for e in entries[i + 1:] if e.producer_id == pid and e.marker is not None), None)
        if marker is None or marker.marker != "commit":
            out.append(("txn-read-before-marker", f"read_committed read {r.value!r} at {key[0]}-{key[1]}@{r.offset} "
                        f"(t={r.at:.6f}) of {txn.describe()}, and the log holds "
                        + ("no marker of it after" if marker is None else f"an ABORT marker at {marker.offset}")))
        elif marker.offset >= r.max_leo:
            out.append(("txn-read-before-marker", f"read_committed read {r.value!r} at {key[0]}-{key[1]}@{r.offset} "
                        f"(t={r.at:.6f}) of {txn.describe()} before its COMMIT marker at {marker.offset} was in any "
                        f"live replica's log (log ends up to {r.max_leo})"))
    # offsets committed in transactions
    groups = sorted({t.group for t in history.txns if t.group is not None})
    for group in groups:
        with_offsets = [t for t in history.txns if t.group == group and t.offsets]
        keys = sorted({k for t in with_offsets for k in t.offsets})
        final = committed.get(group, {})
        for key in keys:
            txns = [t for t in with_offsets if key in t.offsets]
            # The group's offsets (__consumer_offsets) or the ids' commit decisions
            # (__transaction_state) lost in a power loss at t: what was committed before t may be
            # gone (Kafka's bound); the transactions begun after the last such loss still count.
            lost_at = max((x for t in txns for k in (t.offsets_key, t.state_key) for x in (exposures or {}).get(k, ())),
                          default=None)
            got = final.get(key)
            if lost_at is not None:
                if got is not None and any(got == t.offsets[key] for t in txns if t.started_at <= lost_at):
                    continue  # (an offset of before the loss: whatever became of it is excused)
                txns = [t for t in txns if t.started_at > lost_at]
            last_committed = max((t.offsets[key] for t in txns if t.outcome == "committed"), default=None)
            allowed = {t.offsets[key] for t in txns if t.commit_requested and t.outcome != "aborted"
                       and (last_committed is None or t.offsets[key] >= last_committed)}
            aborted = {t.offsets[key] for t in txns if not (t.commit_requested and t.outcome != "aborted")}
            if got is None:
                if last_committed is not None:
                    out.append(("txn-offsets", f"group {group} has no offset for {key[0]}-{key[1]}; a transaction "
                                f"committed {last_committed}"))
            elif got in aborted:
                out.append(("txn-offsets", f"group {group} committed {key[0]}-{key[1]}@{got}, the offset of an "
                            f"aborted transaction"))
            elif got not in allowed:
                out.append(("txn-offsets", f"group {group} committed {key[0]}-{key[1]}@{got}; the last transaction "
                            f"that committed offsets there committed {last_committed}"))
    return out


async def final_txn_checks(sim: Any, history: TxnHistory) -> None:
    """The checks over the settled cluster: the leaders' logs, the groups' offsets."""
    logs: dict[Key, list[LogEntry]] = {}
    hanging: dict[Key, int] = {}
    for topic, count in sorted(history.topics.items()):
        for pid in range(count):
            p = sim.leader_partition((topic, pid))
            if p is None:  # (the cluster settled: every partition had a leader with its log)
                sim.violation("liveness", f"{topic}-{pid}: no leader log for the transactions' checks")
                continue
            log_ = p.log
            logs[(topic, pid)] = read_entries(log_)
            excuse = hanging_excuse(sim, history, (topic, pid), log_) if log_.last_stable_offset < log_.high_watermark \
                else None
            if excuse is not None:  # (lso_problems excused it too; one it did not failed the settled condition)
                hanging[(topic, pid)] = log_.last_stable_offset
                sim.trace.event("check", "hanging-transaction-exempt", f"{topic}-{pid}: LSO {log_.last_stable_offset} "
                                f"below the high watermark {log_.high_watermark}: {excuse}")
                sim.exempt += 1
    groups = sorted({t.group for t in history.txns if t.group is not None})
    committed: dict[str, dict[Key, int]] = {}
    if groups:
        try:
            committed = await committed_offsets(sim, "txn-verifier", groups)
        except (KafkaError, asyncio.TimeoutError) as exc:
            sim.violation("liveness", f"cannot fetch the transactional groups' offsets: {type(exc).__name__}: {exc}")
            return
    counts: dict[str, int] = {}
    for t in history.txns:
        counts[t.outcome] = counts.get(t.outcome, 0) + 1
    sim.trace.event("check", "txn-summary", f"{len(history.txns)} transactions "
                    + " ".join(f"{k}:{v}" for k, v in sorted(counts.items())) + f", {len(history.reads)} reads")
    for check, detail in check_transactions(history, logs, committed, sim.exposed_since, sim.exposures, hanging):
        sim.violation(check, detail)
