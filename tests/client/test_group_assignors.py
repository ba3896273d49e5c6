"""The client's assignors, Kafka's RangeAssignor and RoundRobinAssignor, on plain inputs."""

from __future__ import annotations

from protocol.client import TopicPartition as TP, range_assign, roundrobin_assign


def test_range_gives_contiguous_ranges_per_topic_the_first_members_one_more():
    subs = {"b": ["t", "u"], "a": ["t", "u"], "c": ["t"]}
    out = range_assign(subs, {"t": 7, "u": 3})
    assert out["a"] == [TP("t", 0), TP("t", 1), TP("t", 2), TP("u", 0), TP("u", 1)]
    assert out["b"] == [TP("t", 3), TP("t", 4), TP("u", 2)]
    assert out["c"] == [TP("t", 5), TP("t", 6)]


def test_roundrobin_deals_partitions_in_turn_skipping_members_not_subscribed():
    subs = {"m1": ["t"], "m2": ["t"], "m3": ["t"]}
    out = roundrobin_assign(subs, {"t": 6})
    assert {m: [tp.partition for tp in tps] for m, tps in out.items()} == {"m1": [0, 3], "m2": [1, 4], "m3": [2, 5]}
    out = roundrobin_assign({"a": ["t", "u"], "b": ["u"]}, {"t": 2, "u": 2})
    assert out == {"a": [TP("t", 0), TP("t", 1), TP("u", 1)], "b": [TP("u", 0)]}


def test_every_partition_once_whatever_the_members():
    for n_members in range(1, 6):
        subs = {f"m{i}": ["t", "u"] for i in range(n_members)}
        for assign in (range_assign, roundrobin_assign):
            out = assign(subs, {"t": 6, "u": 5})
            got = sorted(tp for tps in out.values() for tp in tps)
            assert got == sorted([TP("t", p) for p in range(6)] + [TP("u", p) for p in range(5)])
            sizes = [len(tps) for tps in out.values()]
            assert max(sizes) - min(sizes) <= (2 if assign is range_assign else 1)
