"""Replica placement plans: which partitions should move where so that replicas and preferred
leaders are even across brokers, racks are kept apart, brokers being emptied are left, and as
little data as possible moves. Pure (no I/O): ``kbroker cluster balance`` / ``reassign
--generate`` / ``decommission`` compute plans with it from a client's view of the cluster, and
the controller's partition autobalancer from its own.

``plan_balance`` works in phases, each a greedy pass that never makes an earlier one worse:

1. **evacuate**: every replica on a broker that is excluded (being decommissioned) or gone
   (not among ``brokers``) moves to an eligible broker that holds no replica of the
   partition: one of a rack the partition does not use yet if there is one, then the one
   with the fewest replicas (then the lowest id);
2. **racks**: a partition with two replicas in one rack, where an eligible broker of an unused
   rack exists that is not fuller than the replica's own broker, moves one of them there;
3. **even out**: while the fullest and the emptiest eligible broker differ by more than one
   replica, a replica moves from the fullest to the emptiest (the next emptiest when none
   fits) that does not hold the partition yet and keeps its racks apart; the smallest
   partition that fits goes first (``sizes``: bytes per partition), so the least data moves.
   Counts are per broker over every partition given (all topics together, not per topic).
   When racks let no replica go from a fuller broker straight to one two or more below it,
   a replica moves along the shortest chain of brokers instead (full -> x -> ... -> empty,
   one partition per step, each step keeping its partition's racks apart): the ends change
   by one, the brokers between keep their counts, at the cost of a move per extra step;
4. **leaders**: the preferred leader is the first replica; replicas are reordered along
   chains of partitions (X leads one Y holds, Y leads one Z holds, ...) from a broker leading
   more to one leading at least two fewer, until no such chain is left: the spread of
   preferred leaders is then the smallest the replica sets allow (no data moves; a preferred
   election then moves the leadership).

A replica keeps its position in the list when it moves, so a partition's leader stays first
unless the leader's own replica moves. Nothing moves for partitions ``movable`` refuses.
Counts are replicas, not bytes (Redpanda's and Kafka's tools count the same way).
"""

from __future__ import annotations

from typing import Callable, Collection, Hashable, Mapping, Sequence, TypeVar

K = TypeVar("K", bound=Hashable)


def _rack_of(brokers: Mapping[int, str | None], broker: int) -> str:
    rack = brokers.get(broker)
    return f"<no rack {broker}>" if rack is None else rack


def plan_balance(brokers: Mapping[int, str | None], assignment: Mapping[K, Sequence[int]], *,
                 exclude: Collection[int] = (), sizes: Mapping[K, int] | None = None,
                 movable: Callable[[K], bool] | None = None, leaders: bool = True,
                 even: bool = True, closed: Collection[int] = ()) -> dict[K, list[int]]:
    """The new replica list of every partition whose list changes (set or order).

    ``brokers``: the broker ids that may hold replicas, with their racks (None: no rack; such
    brokers count as a rack each). ``assignment``: each partition's replicas now.
    ``exclude``: brokers to empty. ``sizes``: partition sizes (bytes), to move small ones first.
    ``movable(key)``: False keeps a partition where it is (e.g. a reassignment in progress).
    ``even``: False skips phase 3 (only evacuate and fix racks). ``leaders``: False skips phase 4.
    ``closed``: brokers that keep their replicas (and count) but take no new ones (a full disk).
    """
    eligible = sorted(b for b in brokers if b not in exclude)
    sizes = sizes or {}
    current: dict[K, list[int]] = {k: list(v) for k, v in assignment.items()}
    fixed = {k for k in current if movable is not None and not movable(k)}
    counts = {b: 0 for b in eligible}
    on_broker: dict[int, set[K]] = {b: set() for b in eligible}
    for k, replicas in current.items():
        for r in replicas:
            if r in counts:
                counts[r] += 1
                on_broker[r].add(k)
    if not eligible:
        return {}
    racks_known = any(brokers.get(b) is not None for b in eligible)

    def rack(b: int) -> str:
        return _rack_of(brokers, b)

    def move(k: K, frm: int, to: int) -> None:
        replicas = current[k]
        replicas[replicas.index(frm)] = to
        if frm in counts:
            counts[frm] -= 1
            on_broker[frm].discard(k)
        counts[to] += 1
        on_broker[to].add(k)

    def destination(k: K, frm: int) -> int | None:
        replicas = current[k]
        used_racks = {rack(r) for r in replicas if r != frm}
        best: tuple[int, int, int] | None = None
        for b in eligible:
            if b in replicas or b in closed:
                continue
            key = (1 if racks_known and rack(b) in used_racks else 0, counts[b], b)
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    # 1. evacuate excluded and unknown brokers
    for k in sorted(current, key=lambda k: (sizes.get(k, 0), repr(k))):
        if k in fixed:
            continue
        for r in list(current[k]):
            if r not in counts:
                to = destination(k, r)
                if to is not None:
                    move(k, r, to)

    # 2. keep racks apart where a broker of an unused rack has room
    if racks_known:
        all_racks = {rack(b) for b in eligible}
        for k in sorted(current, key=lambda k: (sizes.get(k, 0), repr(k))):
            if k in fixed:
                continue
            replicas = current[k]
            seen: set[str] = set()
            for r in list(replicas):
                if rack(r) not in seen:
                    seen.add(rack(r))
                    continue
                if r not in counts or not (all_racks - {rack(x) for x in replicas}):
                    continue
                to = destination(k, r)
                if to is not None and rack(to) not in {rack(x) for x in replicas}:
                    move(k, r, to)
                    seen.add(rack(to))

    # 3. even out replica counts, smallest partitions first
    if even and len(eligible) > 1:
        def fits(k: K, frm: int, to: int) -> bool:
            replicas = current[k]
            if to in replicas or k in fixed or to in closed:
                return False
            if not racks_known:
                return True
            # the move may not leave the partition on fewer racks than it uses now
            others = [rack(r) for r in replicas if r != frm]
            return len(set(others) | {rack(to)}) >= len({rack(r) for r in replicas})

        # Each broker's partitions, smallest (then not led by it) first, sorted once: a move only
        # takes partitions away from the fullest broker; one it gains is looked at when sorted again.
        ranked: dict[int, list[K]] = {}

        def candidates(b: int) -> list[K]:
            found = ranked.get(b)
            if found is None or len(found) < len(on_broker[b]):
                found = ranked[b] = sorted(on_broker[b], key=lambda k: (sizes.get(k, 0), current[k][0] == b, repr(k)))
            return found

        def chain(by_count: list[int]) -> bool:
            """No replica fits from a fuller broker straight to one two or more below it (racks
            hold it there: e.g. every partition it holds would get two replicas in the
            emptiest broker's rack): move one along a chain instead, full -> x -> ... -> empty,
            each step a different partition that fits, so the ends change by one and the
            brokers between keep their counts (shortest chain first: the fewest extra moves).
            False if there is none."""
            for start in reversed(by_count):
                parent: dict[int, tuple[int, K] | None] = {start: None}
                queue = [start]
                end = None
                for x in queue:
                    for y in by_count:
                        if y in parent:
                            continue
                        k = next((k for k in candidates(x) if k in on_broker[x] and fits(k, x, y)), None)
                        if k is None:
                            continue
                        parent[y] = (x, k)
                        if counts[y] <= counts[start] - 2:
                            end = y
                            break
                        queue.append(y)
                    if end is not None:
                        break
                if end is None:
                    continue
                steps: list[tuple[K, int, int]] = []
                y = end
                while parent[y] is not None:
                    x, k = parent[y]  # type: ignore[misc]
                    steps.append((k, x, y))
                    y = x
                steps.reverse()
                done: list[tuple[K, int, int]] = []
                for k, x, y in steps:  # checked again as applied: one partition may be on two steps
                    if k not in on_broker[x] or not fits(k, x, y):
                        for k2, x2, y2 in reversed(done):
                            move(k2, y2, x2)
                        break
                    move(k, x, y)
                    done.append((k, x, y))
                else:
                    return True
            return False

        budget = sum(counts.values()) * 2 + 10  # a bound: every move narrows the spread
        while budget > 0:
            budget -= 1
            by_count = sorted(eligible, key=lambda b: (counts[b], b))
            if counts[by_count[-1]] - counts[by_count[0]] <= 1:
                break
            moved = False
            for frm in reversed(by_count):
                ranked_frm = [k for k in candidates(frm) if k in on_broker[frm]]
                ranked[frm] = ranked_frm
                for to in by_count:
                    if counts[frm] - counts[to] <= 1:
                        break
                    chosen = next((k for k in ranked_frm if fits(k, frm, to)), None)
                    if chosen is not None:
                        move(chosen, frm, to)
                        moved = True
                        break
                if moved:
                    break
            if not moved and not chain(by_count):
                break

    # 4. preferred leaders: reorder replicas (no data moves)
    if leaders:
        _balance_leaders(current, fixed, eligible)

    return {k: v for k, v in current.items() if list(assignment[k]) != v}


def _balance_leaders(current: dict[K, list[int]], fixed: set[K], eligible: list[int]) -> None:
    """Reorder replicas so that the preferred leaders (first replicas) are as even as the
    replica sets allow; each partition's other replicas keep their order.

    Augmenting paths (the semi-matching argument): while some broker X leads a partition that
    Y holds, Y leads one that Z holds, ..., ending at a broker leading at least two fewer than
    X, the leaderships shift one step along that chain (X one fewer, the end one more, the
    others unchanged). When no such chain is left, no reordering can lower the most-leading
    broker or raise the least-leading one, so the spread is the smallest there is; only
    partitions on a chain are reordered."""
    lead = {b: 0 for b in eligible}
    led_by: dict[int, list[K]] = {b: [] for b in eligible}
    for k in sorted(current, key=repr):
        replicas = current[k]
        if replicas and replicas[0] in lead:
            lead[replicas[0]] += 1
            if k not in fixed:
                led_by[replicas[0]].append(k)

    def shift_from(start: int) -> bool:
        """One chain from ``start`` to a broker leading <= lead[start] - 2, applied."""
        parent: dict[int, tuple[int, K] | None] = {start: None}
        queue = [start]
        best: int | None = None
        for x in queue:
            for k in led_by[x]:
                for y in current[k][1:]:
                    if y in lead and y not in parent:
                        parent[y] = (x, k)
                        queue.append(y)
                        if lead[y] <= lead[start] - 2 and (best is None or lead[y] < lead[best]):
                            best = y
        if best is None:
            return False
        y = best
        while parent[y] is not None:
            x, k = parent[y]  # type: ignore[misc]
            replicas = current[k]
            replicas.remove(y)
            replicas.insert(0, y)
            led_by[x].remove(k)
            led_by[y].append(k)
            y = x
        lead[start] -= 1
        lead[best] += 1
        return True

    for _ in range(len(current) ** 2 + 1):  # each shift lowers sum(lead^2) by 2 or more: bounded
        if not any(shift_from(x) for x in sorted(lead, key=lambda b: (-lead[b], b))):
            break


def replica_counts(assignment: Mapping[K, Sequence[int]], brokers: Collection[int] = ()) -> dict[int, int]:
    """Replicas per broker (every broker of ``brokers`` listed, with 0 if it holds none)."""
    out = {b: 0 for b in brokers}
    for replicas in assignment.values():
        for r in replicas:
            out[r] = out.get(r, 0) + 1
    return out


def leader_counts(assignment: Mapping[K, Sequence[int]], brokers: Collection[int] = ()) -> dict[int, int]:
    """Preferred leaders (first replicas) per broker."""
    out = {b: 0 for b in brokers}
    for replicas in assignment.values():
        if replicas:
            out[replicas[0]] = out.get(replicas[0], 0) + 1
    return out
