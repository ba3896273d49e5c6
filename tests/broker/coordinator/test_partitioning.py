"""Which ``__consumer_offsets`` partition holds a group: abs(String.hashCode) % partitions, with
Java's hashCode over UTF-16 code units and Kafka's Utils.abs (Integer.MIN_VALUE -> 0)."""

from __future__ import annotations

import pytest

from broker.coordinator import java_string_hashcode, partition_for
from broker.coordinator.group_metadata_manager import kafka_abs

# Values of String.hashCode() as the JVM computes them.
JAVA_HASHCODES = [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Hello World", -862545276),
    ("polygenelubricants", -2147483648),   # Integer.MIN_VALUE
    ("Aa", 2112),
    ("BB", 2112),
    ("\U0001F600", 1772899),               # a surrogate pair: two UTF-16 units
    ("é", 233),
]


@pytest.mark.parametrize("s,expected", JAVA_HASHCODES)
def test_java_string_hashcode(s, expected) -> None:
    assert java_string_hashcode(s) == expected


def test_kafka_abs_maps_int_min_to_zero() -> None:
    assert kafka_abs(-2147483648) == 0
    assert kafka_abs(-5) == 5 and kafka_abs(7) == 7


@pytest.mark.parametrize("group,partitions,expected", [
    ("polygenelubricants", 50, 0),     # abs(MIN_VALUE) is 0, not 2147483648 (which would give 48)
    ("Hello World", 50, 26),           # 862545276 % 50; masking the sign bit instead would give 22
    ("hello", 50, 22),
    ("a", 50, 47),
    ("", 50, 0),
    ("Hello World", 7, 862545276 % 7),
])
def test_partition_for(group, partitions, expected) -> None:
    assert partition_for(group, partitions) == expected
