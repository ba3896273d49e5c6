"""``kbroker consume -g`` and ``kbroker groups`` as subprocesses against a broker process:
group consumption that resumes from commits, two CLI members sharing a topic, list, describe
(committed offset, log end offset, lag, member), reset-offsets (dry run, --execute, every
--to-*), delete."""

from __future__ import annotations

import subprocess
import time

from tests.cli.test_cli import KBROKER, kbroker

GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


def table_rows(text: str) -> list[list[str]]:
    """The body rows of a rich table printed by the CLI."""
    return [[c.strip() for c in line.strip().strip("│").split("│")] for line in text.splitlines()
            if line.startswith("│")]


def describe(bootstrap: str, group: str) -> dict[int, tuple[str, str, str, str]]:
    """partition -> (current offset, log end offset, lag, consumer id)."""
    out = kbroker(bootstrap, "groups", "describe", "-g", group).stdout.decode()
    return {int(r[2]): (r[3], r[4], r[5], r[6]) for r in table_rows(out)}


def consume(bootstrap: str, group: str, *extra: str) -> list[str]:
    out = kbroker(bootstrap, "consume", "-t", "gt", "-g", group, "--timeout-ms", "3000", "-f", r"%p:%o:%s\n", *extra)
    return out.stdout.decode().splitlines()


def test_group_consume_describe_reset_and_delete(broker_process):
    node = broker_process(overrides=GROUP_OVERRIDES).start()
    b = node.bootstrap
    kbroker(b, "topics", "create", "-t", "gt", "--partitions", "3")
    kbroker(b, "produce", "-t", "gt", "-K", ":", input="".join(f"k{i}:v{i}\n" for i in range(30)).encode())

    first = consume(b, "g1", "--from-beginning")
    assert sorted(line.split(":")[2] for line in first) == sorted(f"v{i}" for i in range(30))
    assert "g1" in kbroker(b, "groups", "list").stdout.decode().split()
    rows = describe(b, "g1")
    assert sorted(rows) == [0, 1, 2]
    ends = {p: int(end) for p, (_cur, end, _lag, _m) in rows.items()}
    assert sum(ends.values()) == 30
    assert all(cur == end and lag == "0" and member == "-" for cur, end, lag, member in rows.values())

    kbroker(b, "produce", "-t", "gt", "-K", ":", input="".join(f"k{i}:w{i}\n" for i in range(6)).encode())
    assert sum(int(lag) for _c, _e, lag, _m in describe(b, "g1").values()) == 6
    assert sorted(line.split(":")[2] for line in consume(b, "g1")) == sorted(f"w{i}" for i in range(6))  # resumes

    dry = kbroker(b, "groups", "reset-offsets", "-g", "g1", "-t", "gt", "--to-earliest")
    assert "Dry run" in dry.stdout.decode()
    assert all(lag == "0" for _c, _e, lag, _m in describe(b, "g1").values())
    kbroker(b, "groups", "reset-offsets", "-g", "g1", "-t", "gt", "--to-earliest", "--execute")
    assert all(cur == "0" for cur, _e, _l, _m in describe(b, "g1").values())
    assert len(consume(b, "g1")) == 36  # everything again
    kbroker(b, "groups", "reset-offsets", "-g", "g1", "-t", "gt", "--to-offset", "2", "--execute")
    assert all(cur == str(min(2, int(end))) for cur, end, _l, _m in describe(b, "g1").values())  # clamped to the end
    kbroker(b, "groups", "reset-offsets", "-g", "g1", "-t", "gt", "--to-datetime", "2000-01-01T00:00:00", "--execute")
    assert all(cur == "0" for cur, *_rest in describe(b, "g1").values())
    kbroker(b, "groups", "reset-offsets", "-g", "g1", "-t", "gt", "--to-latest", "--execute")
    assert all(lag == "0" for _c, _e, lag, _m in describe(b, "g1").values())

    kbroker(b, "groups", "delete", "-g", "g1")
    assert "g1" not in kbroker(b, "groups", "list").stdout.decode().split()


def test_two_cli_members_share_the_partitions_and_an_active_group_is_not_reset(broker_process):
    import os

    node = broker_process(overrides=GROUP_OVERRIDES).start()
    b = node.bootstrap
    kbroker(b, "topics", "create", "-t", "gt", "--partitions", "4")
    kbroker(b, "produce", "-t", "gt", "-K", ":", input="".join(f"k{i}:v{i}\n" for i in range(40)).encode())
    env = dict(os.environ, KBROKER_BOOTSTRAP_SERVER=b)
    members = [subprocess.Popen([KBROKER, "consume", "-t", "gt", "-g", "pair", "--from-beginning", "--timeout-ms", "15000",
                                 "-f", r"%p:%s\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
               for _ in range(2)]
    # while they run the group is active: no reset, no delete
    deadline_rows = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run([KBROKER, "groups", "describe", "-g", "pair"], capture_output=True, env=env, timeout=60)
        rows = table_rows(out.stdout.decode())
        if out.returncode == 0 and len({r[6] for r in rows if r[6] != "-"}) == 2:
            deadline_rows = rows
            break
        time.sleep(0.1)
    assert deadline_rows is not None, "two members never showed in describe"
    kbroker(b, "groups", "reset-offsets", "-g", "pair", "-t", "gt", "--to-earliest", "--execute", expect=2)
    outputs = [m.communicate(timeout=60)[0].decode().splitlines() for m in members]
    assert all(m.returncode == 0 for m in members)
    values = [line.split(":")[1] for out in outputs for line in out]
    assert sorted(values) == sorted(f"v{i}" for i in range(40))  # all, once, across the two
    by_member = [{line.split(":")[0] for line in out} for out in outputs]
    assert not by_member[0] & by_member[1]  # disjoint partitions


def test_group_consume_exits_at_the_end_and_reads_committed(broker_process):
    """-e with -g stops once the assigned partitions are read to their ends (it was ignored: the
    command never ended), and --isolation-level with -g reaches the fetches (it was ignored: a
    group member read aborted records)."""
    from confluent_kafka import Producer

    node = broker_process(overrides={**GROUP_OVERRIDES, "transaction.state.log.replication.factor": "1",
                                     "transaction.state.log.min.isr": "1"}).start()
    b = node.bootstrap
    kbroker(b, "topics", "create", "-t", "gt", "--partitions", "2")
    p = Producer({"bootstrap.servers": b, "transactional.id": "cli-group-rc", "partitioner": "murmur2_random"})
    p.init_transactions(30)
    for values, commit in ((["c0", "c1", "c2"], True), (["a0", "a1"], False), (["c3"], True)):
        p.begin_transaction()
        for i, v in enumerate(values):
            p.produce("gt", key=b"k%d" % i, value=v.encode())
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    del p  # the handle's threads go now, not after the broker is killed

    started = time.monotonic()
    out = kbroker(b, "consume", "-t", "gt", "-g", "rc", "--from-beginning", "-e", "--isolation-level", "read_committed",
                  "--timeout-ms", "40000", "-f", r"%s\n").stdout.decode().split()
    assert sorted(out) == ["c0", "c1", "c2", "c3"]
    assert time.monotonic() - started < 30  # it ended at the end, not 40 s after the last record
    everything = kbroker(b, "consume", "-t", "gt", "-g", "ru", "--from-beginning", "-e", "-f", r"%s\n")
    assert sorted(everything.stdout.decode().split()) == ["a0", "a1", "c0", "c1", "c2", "c3"]
    # the group's commits hold its place: nothing new, it ends at once with nothing
    assert kbroker(b, "consume", "-t", "gt", "-g", "rc", "-e", "-f", r"%s\n").stdout.decode() == ""
