"""Replica placement: Kafka's rack-unaware assignment (AdminUtils.assignReplicasToBrokersRackUnaware).

Brokers are sorted by id. Partition p's first replica is broker ``(p + start_index) % n``;
its other replicas follow at a shift of ``1 + (replica_shift + j) % (n - 1)`` from it, and
the shift grows by one each time p passes a multiple of n. A random start index spreads
the first partition of every topic, and the random shift keeps the followers of one
leader from always being the same brokers, so leaders and replicas spread evenly.
"""

from __future__ import annotations

import random
from typing import Sequence


class PlacementError(ValueError):
    """Not enough brokers for the replication factor (Kafka's INVALID_REPLICATION_FACTOR)."""


def _replica_index(first_replica_index: int, replica_shift: int, j: int, n: int) -> int:
    shift = 1 + (replica_shift + j) % (n - 1)
    return (first_replica_index + shift) % n


def assign_replicas_to_brokers(num_partitions: int, replication_factor: int, brokers: Sequence[int], *,
                               fixed_start_index: int = -1, start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """{partition: replicas} for ``num_partitions`` partitions numbered from
    ``max(0, start_partition_id)``. ``fixed_start_index`` (>= 0) replaces both random choices,
    as in Kafka (tests and CreatePartitions use it)."""
    if num_partitions <= 0:
        raise ValueError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise PlacementError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise PlacementError(f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    rng = rng or random.Random()
    ids = sorted(brokers)
    n = len(ids)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition = max(0, start_partition_id)
    out: dict[int, list[int]] = {}
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            replica_shift += 1
        first = (partition + start_index) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[_replica_index(first, replica_shift, j, n)])
        out[partition] = replicas
        partition += 1
    return out
