"""The checks at the end of a run, once the faults healed: liveness, then Jepsen's checks.

Liveness (within ``LIVENESS_S`` simulated seconds of the heal): every node runs and every
broker is registered and unfenced; every partition of the workload's topics and of
__consumer_offsets has a leader and its full replica set in the ISR, on the controller and
on every replica (the leader epoch applied); leader and followers agree on the log end,
and the high watermark reached it on each of them; deleted topics are gone from every broker.

Then, from the replicas' logs as they are (ground truth, read through storage.Log):

* replicas agree: every offset holds the same record on every replica;
* no acknowledged acks=all write is lost: its offset holds its value, unless the partition
  was *exposed* after the acknowledgment (sim/runner.py: every member of its ISR had lost
  unsynced bytes of it in a power loss: Kafka does not fsync, so that is its bound);
* no value of an idempotent producer appears twice;
* every offset holds the value anyone saw there (producers' acks=all acknowledgments,
  consumers' polls; checked as they happen, the replicas' logs added here);
* committed group offsets are not ahead of the high watermark (unless the partition was
  exposed after the first commit above it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from protocol.client import KafkaClient
from protocol.client.group import GroupAdmin
from protocol.errors import KafkaError
from protocol.records import batch_body, decode_records, iter_batch_headers

LIVENESS_S = 90.0

Key = tuple[str, int]


def liveness_problems(sim: Any, topics: dict[str, int], deleted: list[str]) -> list[str]:
    """What keeps the cluster from being settled (empty: settled)."""
    cluster = sim.cluster
    problems = []
    for node in cluster.nodes:
        if not node.ready:
            problems.append(f"{node.name} is not running")
    if problems:
        return problems
    controller = cluster.controller.server.controller
    if controller is None or not controller.active:
        return ["no active controller"]
    for broker_id in cluster.brokers:
        reg = controller.cluster.registration(broker_id)
        if reg is None or reg.fenced or reg.in_controlled_shutdown:
            problems.append(f"broker {broker_id} is not registered and unfenced")
    if problems:
        return problems
    wanted = dict(topics)
    for info in controller.replication.topics.values():
        if info.name in ("__consumer_offsets", "__transaction_state"):
            wanted[info.name] = len(info.parts)
    for name in deleted:
        if controller.replication.topic(name) is not None:
            problems.append(f"deleted topic {name} is still in the controller's state")
        for node in cluster.brokers.values():
            rm = node.server.replica_manager
            if any(t == name for t, _p in rm.partitions) or any(t == name for t, _p in rm.log_manager.all_logs()):
                problems.append(f"deleted topic {name} is still on {node.name}")
    for topic, count in sorted(wanted.items()):
        info = controller.replication.topic(topic)
        if info is None:
            problems.append(f"topic {topic} is missing")
            continue
        for pid in range(count):
            part = info.parts.get(pid)
            if part is None:
                problems.append(f"{topic}-{pid} is missing")
                continue
            if part.leader < 0:
                problems.append(f"{topic}-{pid} has no leader")
                continue
            if sorted(part.isr) != sorted(part.replicas):
                problems.append(f"{topic}-{pid}: ISR {list(part.isr)} of replicas {list(part.replicas)}")
                continue
            leo = None
            for r in part.replicas:
                p = cluster.brokers[r].server.replica_manager.partitions.get((topic, pid))
                if p is None or p.log is None or p.leader_epoch != part.leader_epoch or p.leader_id != part.leader:
                    problems.append(f"{topic}-{pid}: broker {r} has not applied leader {part.leader} epoch "
                                    f"{part.leader_epoch}")
                    break
                if r == part.leader:
                    if p.isr != frozenset(part.isr):
                        problems.append(f"{topic}-{pid}: the leader's ISR {sorted(p.isr)} is not the controller's")
                        break
                    if p.log.high_watermark != p.log.log_end_offset:
                        problems.append(f"{topic}-{pid}: high watermark {p.log.high_watermark} below the log end "
                                        f"{p.log.log_end_offset}")
                        break
                elif p.log.high_watermark != p.log.log_end_offset:
                    problems.append(f"{topic}-{pid}: broker {r}'s high watermark {p.log.high_watermark} below its "
                                    f"log end {p.log.log_end_offset}")
                    break
                if leo is None:
                    leo = p.log.log_end_offset
                elif leo != p.log.log_end_offset:
                    problems.append(f"{topic}-{pid}: replicas' log ends differ")
                    break
    return problems


def read_log(log_: Any) -> dict[int, bytes | None]:
    """Every record's value by offset, from the log start to its end."""
    out: dict[int, bytes | None] = {}
    offset = log_.log_start_offset
    end = log_.log_end_offset
    while offset < end:
        data = log_.read(offset, 1 << 20)
        view = data.records
        if not len(view):
            break
        last = offset
        for pos, header in iter_batch_headers(view):
            for record in decode_records(header, batch_body(view, pos, header)):
                if record.offset >= offset:
                    out[record.offset] = record.value
            last = header.last_offset
        offset = max(offset, last + 1)
    return out


async def final_checks(sim: Any, topics: dict[str, int]) -> None:
    """Jepsen's checks over the settled cluster (liveness_problems() was empty)."""
    cluster = sim.cluster
    history = sim.history
    controller = cluster.controller.server.controller
    logs: dict[Key, dict[int, bytes | None]] = {}
    starts: dict[Key, int] = {}
    hws: dict[Key, int] = {}
    for topic, count in sorted(topics.items()):
        info = controller.replication.topic(topic)
        for pid in range(count):
            key = (topic, pid)
            part = info.parts[pid]
            leader_records: dict[int, bytes | None] | None = None
            for r in part.replicas:
                node = cluster.brokers[r]
                p = node.server.replica_manager.partitions[key]
                records = read_log(p.log)
                who = f"log of {node.process.key}"
                for offset, value in records.items():
                    sim.observe(topic, pid, offset, value, who)
                if r == part.leader:
                    leader_records = records
                    starts[key] = p.log.log_start_offset
                    hws[key] = p.log.high_watermark
            assert leader_records is not None
            logs[key] = leader_records
    # lost writes, duplicates
    counts: dict[bytes, int] = {}
    for records in logs.values():
        for value in records.values():
            if value is not None:
                counts[value] = counts.get(value, 0) + 1
    for write in history.writes:
        if write.status != "ok":
            continue
        key = (write.topic, write.partition)
        if write.idempotent and counts.get(write.value, 0) > 1:
            sim.violation("duplicate", f"{write.value.decode()} (idempotent, acknowledged at {key[0]}-{key[1]}@"
                          f"{write.offset}) appears {counts[write.value]} times")
        if write.acks != -1 or key not in logs or write.offset < 0 or write.offset < starts.get(key, 0):
            continue
        if logs[key].get(write.offset) != write.value:
            exposed = sim.exposed_since(key, write.acked_at)
            found = logs[key].get(write.offset)
            detail = (f"{write.value.decode()} acknowledged at {key[0]}-{key[1]}@{write.offset} "
                      f"(t={write.acked_at:.6f}); the log holds {found!r} there")
            if exposed is not None:
                sim.trace.event("check", "lost-write-exempt", f"{detail}; exposed at {exposed:.6f}")
                sim.exempt += 1
            else:
                sim.violation("lost-write", detail)
    # committed offsets
    await _check_committed_offsets(sim, hws)


async def committed_offsets(sim: Any, name: str, groups: list[str]) -> dict[str, dict[Key, int]]:
    """Each group's committed offsets, asked by a client process ``name``."""
    async def fetch(client: KafkaClient) -> dict[str, dict[Key, int]]:
        admin = GroupAdmin(client)
        return {g: {(tp.topic, tp.partition): o for tp, o in (await admin.committed(g)).items()} for g in groups}
    return await sim.with_client(name, fetch)


async def _check_committed_offsets(sim: Any, hws: dict[Key, int]) -> None:
    groups = sorted({g for g, _t, _p in sim.history.committed})
    if not groups:
        return
    try:
        committed = await committed_offsets(sim, "verifier", groups)
    except (KafkaError, asyncio.TimeoutError) as exc:
        sim.violation("liveness", f"cannot fetch the groups' committed offsets: {type(exc).__name__}: {exc}")
        return
    for group, offsets in sorted(committed.items()):
        for key, offset in sorted(offsets.items()):
            hw = hws.get(key)
            if hw is not None and offset > hw:
                # Excused if every ISR member lost unsynced records after the first commit above
                # the final high watermark (the records it counted were lost: Kafka's bound).
                first = min((when for g, t, p, o, when in sim.history.commits if (g, t, p) == (group, *key) and o > hw),
                            default=None)
                exposed = sim.exposed_since(key, first) if first is not None else None
                if exposed is not None:
                    sim.exempt += 1
                    sim.trace.event("check", "committed-offset-exempt", f"group {group} committed {key[0]}-{key[1]}@"
                                    f"{offset}, above the high watermark {hw}; exposed at {exposed:.6f}")
                    continue
                sim.violation("committed-offset", f"group {group} committed {key[0]}-{key[1]}@{offset}, above the "
                              f"high watermark {hw}")
