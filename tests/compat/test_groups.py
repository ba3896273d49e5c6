"""Consumer groups with real clients against a single combined node (a broker process): each
client subscribes with a group id, consumes a 6-partition topic to the end and commits; a
restarted consumer goes on exactly after its committed offsets, across a broker restart too."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 6
# Kafka's development setting (config/server.properties): a new group's first rebalance does not wait.
GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def node(broker_process):
    return broker_process(overrides=GROUP_OVERRIDES).start()


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30).values():
        future.result(30)


def produce_per_partition(kcat_path: str, bootstrap: str, topic: str, start: int, count: int) -> None:
    """``count`` records into every partition, values "p:i" for i in [start, start + count)."""
    for p in range(PARTITIONS):
        lines = b"".join(f"{p}:{i}\n".encode() for i in range(start, start + count))
        subprocess.run([kcat_path, "-b", bootstrap, "-P", "-t", topic, "-p", str(p)], input=lines, check=True,
                       capture_output=True, timeout=60)


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                                              timeout=30)}
    finally:
        c.close()


def kcat_group_consume(kcat_path: str, bootstrap: str, group: str, topic: str) -> list[tuple[int, int, str]]:
    """kcat -G: subscribe, consume until every assigned partition is at its end, commit on close."""
    proc = subprocess.run([kcat_path, "-b", bootstrap, "-G", group, topic, "-e", "-q", "-f", "%p %o %s\n",
                           "-X", "auto.offset.reset=earliest"], capture_output=True, timeout=90)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    rows = []
    for line in proc.stdout.decode().splitlines():
        p, o, v = line.split(" ", 2)
        rows.append((int(p), int(o), v))
    return rows


def test_kcat_group_consumes_commits_and_resumes_after_a_broker_restart(node, kcat_path):
    create_topic(node.bootstrap, "kg")
    produce_per_partition(kcat_path, node.bootstrap, "kg", 0, 100)
    rows = kcat_group_consume(kcat_path, node.bootstrap, "kgroup", "kg")
    assert sorted(rows) == [(p, i, f"{p}:{i}") for p in range(PARTITIONS) for i in range(100)]
    assert committed(node.bootstrap, "kgroup", "kg") == {p: 100 for p in range(PARTITIONS)}

    produce_per_partition(kcat_path, node.bootstrap, "kg", 100, 10)
    assert node.stop() == 0
    node.start()
    assert committed(node.bootstrap, "kgroup", "kg") == {p: 100 for p in range(PARTITIONS)}
    rows = kcat_group_consume(kcat_path, node.bootstrap, "kgroup", "kg")
    assert sorted(rows) == [(p, i, f"{p}:{i}") for p in range(PARTITIONS) for i in range(100, 110)]
    assert committed(node.bootstrap, "kgroup", "kg") == {p: 110 for p in range(PARTITIONS)}


# -- members as processes ------------------------------------------------------------------------
MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")
CLIENTS = ("kafka-python", "confluent", "aiokafka")


class Member:
    """A group member process (tests/compat/group_member.py) and the events it printed."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str) -> None:
        self.client = client
        self.proc = subprocess.Popen([sys.executable, str(MEMBER_SCRIPT), client, bootstrap, group, topic],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def records(self) -> list[tuple[int, int]]:
        return [(int(p), int(o)) for _, p, o in (line.split() for line in list(self.lines) if line.startswith("R "))]

    @property
    def assignment(self) -> list[int] | None:
        """The latest assignment it printed."""
        for line in reversed(list(self.lines)):
            if line.startswith("A"):
                return [int(p) for p in line[1:].strip().split(",") if p]
        return None

    def close(self) -> None:
        """SIGTERM: commit, LeaveGroup, exit."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self.reader.join(10)
        assert self.lines and self.lines[-1] == "X", f"{self.client} did not close cleanly: {self.stderr()}"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(running)"
        return self.proc.stderr.read()[-3000:] if self.proc.stderr else ""

    def check_alive(self) -> None:
        assert self.proc.poll() is None, f"{self.client} exited: {self.stderr()}"


def wait_for(condition, members, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        for m in members:
            m.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}: "
                                 + "; ".join(f"{m.client}: assignment {m.assignment}, {len(m.records)} records"
                                             for m in members))
        time.sleep(0.05)


def all_offsets(start: int, count: int) -> set[tuple[int, int]]:
    return {(p, i) for p in range(PARTITIONS) for i in range(start, start + count)}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_client_consumes_to_the_end_commits_and_a_restarted_member_resumes(node, kcat_path, client):
    topic, group = f"one-{client}", f"g-{client}"
    create_topic(node.bootstrap, topic)
    produce_per_partition(kcat_path, node.bootstrap, topic, 0, 50)
    member = Member(client, node.bootstrap, group, topic)
    wait_for(lambda: set(member.records) == all_offsets(0, 50), [member], 60, "all 300 records")
    member.close()
    assert sorted(member.records) == sorted(all_offsets(0, 50))  # each once
    assert committed(node.bootstrap, group, topic) == {p: 50 for p in range(PARTITIONS)}

    produce_per_partition(kcat_path, node.bootstrap, topic, 50, 5)
    again = Member(client, node.bootstrap, group, topic)
    wait_for(lambda: len(again.records) >= 30, [again], 60, "the 30 new records")
    again.close()
    assert sorted(again.records) == sorted(all_offsets(50, 5))  # exactly after the committed offsets
    assert committed(node.bootstrap, group, topic) == {p: 55 for p in range(PARTITIONS)}


def test_three_clients_share_six_partitions_and_a_clean_leave_loses_and_repeats_nothing(node, kcat_path):
    create_topic(node.bootstrap, "shared")
    produce_per_partition(kcat_path, node.bootstrap, "shared", 0, 50)
    members = [Member(c, node.bootstrap, "trio", "shared") for c in CLIENTS]
    try:
        def balanced() -> bool:
            parts = [m.assignment for m in members]
            return all(p is not None and len(p) == 2 for p in parts) and \
                sorted(x for p in parts for x in p) == list(range(PARTITIONS))
        wait_for(balanced, members, 60, "a 2/2/2 assignment")
        wait_for(lambda: {r for m in members for r in m.records} == all_offsets(0, 50), members, 60, "300 records")

        # records keep arriving while one member leaves: its partitions move, nothing twice, nothing lost
        producer = threading.Thread(target=produce_per_partition, args=(kcat_path, node.bootstrap, "shared", 50, 50))
        producer.start()
        leaving, staying = members[2], members[:2]
        leaving.close()
        wait_for(lambda: "through explicit LeaveGroup" in node.log_text(), staying, 30, "the leave in the broker's log")
        producer.join(60)
        wait_for(lambda: sorted(x for m in staying for x in (m.assignment or [])) == list(range(PARTITIONS)),
                 staying, 60, "the leaver's partitions reassigned")
        wait_for(lambda: {r for m in members for r in m.records} >= all_offsets(0, 100), staying, 60, "600 records")
        consumed = [r for m in members for r in m.records]
        assert len(consumed) == len(set(consumed)) == 600, "a record was consumed twice across the rebalance"
        for m in staying:
            m.close()
        assert committed(node.bootstrap, "trio", "shared") == {p: 100 for p in range(PARTITIONS)}
    finally:
        for m in members:
            m.kill()


def test_a_killed_member_s_partitions_move_after_its_session_timeout(node, kcat_path):
    create_topic(node.bootstrap, "crash")
    produce_per_partition(kcat_path, node.bootstrap, "crash", 0, 20)
    members = [Member(c, node.bootstrap, "crashers", "crash") for c in ("confluent", "kafka-python", "confluent")]
    try:
        wait_for(lambda: all(m.assignment and len(m.assignment) == 2 for m in members), members, 60, "2/2/2")
        wait_for(lambda: {r for m in members for r in m.records} == all_offsets(0, 20), members, 60, "120 records")
        victim, survivors = members[0], members[1:]
        victim.kill()
        killed_at = time.monotonic()
        produce_per_partition(kcat_path, node.bootstrap, "crash", 20, 20)
        wait_for(lambda: sorted(x for m in survivors for x in (m.assignment or [])) == list(range(PARTITIONS)),
                 survivors, 60, "the killed member's partitions reassigned")
        # not before its session (6 s) ran out: the coordinator did not drop it early
        assert time.monotonic() - killed_at >= 5.0
        wait_for(lambda: {r for m in survivors for r in m.records} >= all_offsets(20, 20), survivors, 60,
                 "the records produced after the kill")
        for m in survivors:
            m.close()
        assert committed(node.bootstrap, "crashers", "crash") == {p: 40 for p in range(PARTITIONS)}
    finally:
        for m in members:
            m.kill()


# -- bad input, over the wire --------------------------------------------------------------------
def test_bad_group_requests_get_kafkas_error_codes_and_disturb_nothing(node):
    from protocol.api_keys import ApiKey as K
    from protocol.client import KafkaClient
    from protocol.errors import ErrorCode as E

    create_topic(node.bootstrap, "bad-t", 1)

    async def scenario() -> None:
        async with KafkaClient(node.bootstrap, client_id="bad-input") as client:
            conn = await client.any_connection()

            async def coordinator_ready(group: str) -> None:
                for _ in range(300):
                    r = await conn.request(K.FIND_COORDINATOR, {"key": group, "key_type": 0}, 2)
                    if r.error_code == E.NONE:
                        assert r.port == node.port
                        return
                    assert r.error_code in (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS)
                    await asyncio.sleep(0.05)
                raise AssertionError("no coordinator")

            def join_body(group, member_id="", protocol_type="consumer"):
                return {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                        "member_id": member_id, "group_instance_id": None, "protocol_type": protocol_type,
                        "protocols": [{"name": "range", "metadata": b""}]}

            async def join(group, protocol_type="consumer"):
                first = await conn.request(K.JOIN_GROUP, join_body(group, "", protocol_type), 5)
                if first.error_code != E.MEMBER_ID_REQUIRED:
                    return first
                return await conn.request(K.JOIN_GROUP, join_body(group, first.member_id, protocol_type), 5)

            async def heartbeat(group, generation, member):
                r = await conn.request(K.HEARTBEAT, {"group_id": group, "generation_id": generation,
                                                      "member_id": member, "group_instance_id": None}, 3)
                return r.error_code

            async def commit(group, generation, member, offset):
                r = await conn.request(K.OFFSET_COMMIT, {
                    "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                    "topics": [{"name": "bad-t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                 "committed_metadata": ""}]}]}, 7)
                return r.topics[0].partitions[0].error_code

            await coordinator_ready("bad")
            joined = await join("bad")
            assert joined.error_code == E.NONE and joined.generation_id == 1
            member, generation = joined.member_id, joined.generation_id
            sync = await conn.request(K.SYNC_GROUP, {"group_id": "bad", "generation_id": generation, "member_id": member,
                                                     "assignments": [{"member_id": member, "assignment": b""}]}, 3)
            assert sync.error_code == E.NONE

            # a member with another protocol type: INCONSISTENT_GROUP_PROTOCOL
            assert (await join("bad", protocol_type="not-a-consumer")).error_code == E.INCONSISTENT_GROUP_PROTOCOL
            # an older generation: ILLEGAL_GENERATION, for heartbeats and commits
            assert await heartbeat("bad", generation - 1, member) == E.ILLEGAL_GENERATION
            assert await commit("bad", generation - 1, member, 5) == E.ILLEGAL_GENERATION
            # a member the group does not have: UNKNOWN_MEMBER_ID
            assert await heartbeat("bad", generation, "nobody") == E.UNKNOWN_MEMBER_ID
            assert await commit("bad", generation, "nobody", 5) == E.UNKNOWN_MEMBER_ID
            # an empty group id: INVALID_GROUP_ID
            assert (await conn.request(K.JOIN_GROUP, join_body(""), 5)).error_code == E.INVALID_GROUP_ID
            # nothing else disturbed: the member is still in generation 1 and commits
            assert await heartbeat("bad", generation, member) == E.NONE
            assert await commit("bad", generation, member, 7) == E.NONE

            # a group id of 300 characters is a valid group id for Kafka (no length limit): it works
            long_group = "g" * 300
            await coordinator_ready(long_group)
            joined = await join(long_group)
            assert joined.error_code == E.NONE
            # before the leader's SyncGroup the group is completing its rebalance
            assert await commit(long_group, joined.generation_id, joined.member_id, 3) == E.REBALANCE_IN_PROGRESS
            sync = await conn.request(K.SYNC_GROUP, {"group_id": long_group, "generation_id": joined.generation_id,
                                                     "member_id": joined.member_id, "assignments": []}, 3)
            assert sync.error_code == E.NONE
            assert await commit(long_group, joined.generation_id, joined.member_id, 3) == E.NONE
            fetched = await conn.request(K.OFFSET_FETCH, {"group_id": long_group, "topics": None}, 5)
            assert fetched.error_code == E.NONE
            assert [(t.name, p.partition_index, p.committed_offset) for t in fetched.topics for p in t.partitions] == \
                [("bad-t", 0, 3)]

    asyncio.run(scenario())
    assert committed(node.bootstrap, "bad", "bad-t")[0] == 7
    assert node.running


# -- compaction of __consumer_offsets ------------------------------------------------------------
def offsets_log_records(log_dir: Path, partition: int) -> list[list[bytes]]:
    """The keys of __consumer_offsets-``partition``, segment by segment, read from its files.

    The broker's cleaner swaps segments while this reads (the old ones renamed ``.deleted``,
    the cleaned one renamed in): a ``.log`` listed but renamed before it was read means the
    listing is stale, so the directory is read again."""
    from protocol.records import batch_body, decode_records, iter_batch_headers

    while True:
        out = []
        try:
            for path in sorted((log_dir / f"__consumer_offsets-{partition}").glob("*.log")):
                data = path.read_bytes()
                out.append([r.key for pos, h in iter_batch_headers(data) if not h.is_control
                            for r in decode_records(h, batch_body(data, pos, h))])
        except FileNotFoundError:
            continue
        return out


def test_the_cleaner_keeps_one_offset_record_per_key_and_offsets_read_back_after_a_restart(broker_process):
    from protocol.api_keys import ApiKey as K
    from protocol.client import KafkaClient

    node = broker_process(overrides={**GROUP_OVERRIDES, "offsets.topic.num.partitions": 1,
                                     "offsets.topic.segment.bytes": 4096, "log.cleaner.backoff.ms": 100}).start()
    create_topic(node.bootstrap, "ct", 5)
    last: dict[int, int] = {}

    async def commit_many() -> None:
        async with KafkaClient(node.bootstrap, client_id="committer") as client:
            conn = await client.any_connection()
            while (await conn.request(K.FIND_COORDINATOR, {"key": "cg", "key_type": 0}, 2)).error_code:
                await asyncio.sleep(0.05)
            for i in range(400):  # 400 commits of 5 partitions each, to the same 5 keys
                body = {"group_id": "cg", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
                    {"name": "ct", "partitions": [{"partition_index": p, "committed_offset": i * 10 + p,
                                                   "committed_metadata": ""} for p in range(5)]}]}
                r = await conn.request(K.OFFSET_COMMIT, body, 7)
                assert all(p.error_code == 0 for t in r.topics for p in t.partitions)
                last.update({p: i * 10 + p for p in range(5)})

    asyncio.run(commit_many())

    def cleaned() -> bool:
        segments = offsets_log_records(node.log_dir, 0)
        head = [k for seg in segments[:-1] for k in seg]
        return len(segments) > 1 and len(head) == len(set(head)) == 5
    deadline = time.monotonic() + 30
    while not cleaned():
        assert time.monotonic() < deadline, f"not compacted: {[len(s) for s in offsets_log_records(node.log_dir, 0)]}"
        time.sleep(0.1)
    assert "__consumer_offsets-0: cleaned up to offset" in node.log_text()
    assert sum(len(s) for s in offsets_log_records(node.log_dir, 0)) < 2000 / 4  # was 2000 records

    assert node.stop() == 0
    node.start()
    assert committed(node.bootstrap, "cg", "ct") == {p: last[p] for p in range(5)} | {5: -1001}


def test_deleting_a_topic_drops_its_committed_offsets(node):
    from confluent_kafka import Consumer as CKConsumer

    create_topic(node.bootstrap, "gone", 2)
    create_topic(node.bootstrap, "stays", 1)
    c = CKConsumer({"bootstrap.servers": node.bootstrap, "group.id": "dg", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("gone", 0, 5), TopicPartition("gone", 1, 6), TopicPartition("stays", 0, 7)],
                 asynchronous=False)
        assert [tp.offset for tp in c.committed([TopicPartition("gone", 0), TopicPartition("stays", 0)], 30)] == [5, 7]
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        for f in admin.delete_topics(["gone"], operation_timeout=30).values():
            f.result(30)
        deadline = time.monotonic() + 30
        while c.committed([TopicPartition("gone", 0)], 30)[0].offset != -1001:
            assert time.monotonic() < deadline, "the deleted topic's offsets are still committed"
            time.sleep(0.1)
        assert c.committed([TopicPartition("stays", 0)], 30)[0].offset == 7
    finally:
        c.close()
    assert "Removed 2 offsets associated with deleted partitions" in node.log_text()
