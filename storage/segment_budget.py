"""OpenSegmentBudget: what the segments of a set of logs may hold open.

One budget per owner: the broker's ``LogManager`` creates one and hands it to every Log it
opens, which hands it to every LogSegment; a Log opened on its own (the controller's
metadata log, tools, tests) gets one of its own. Nothing here is process-wide except the
OS limit itself (``raise_open_files_limit``).

A segment opens what its appends and reads use, lazily (see segment.py), and reports what
it holds with ``update``. Three caches keep the totals bounded:

* ``files``: descriptors (an active segment's ``.log`` and its mapping, a non-active one's
  ``.log`` mapping and mapped indexes), sized from RLIMIT_NOFILE (``open_files_budget``).
  Active segments are in it like the others (their indexes hold none), so the descriptors
  of a broker are bounded by the budget whatever its number of partitions: an idle
  partition gives its up when others need them, and reopens its ``.log`` on next use;
* ``copies``: bytes of in-memory index copies of non-active segments (``INDEX_COPY_BYTES``),
  released independently of the mappings, so an index copy outlives its segment's mapping
  (a lookup that misses maps the ``.log`` only);
* ``windows``: write windows of active segments appended to without a descriptor
  (file_records.py, "Write windows"): mappings, not descriptors, so bounded by
  ``vm.max_map_count`` (``write_windows_budget``), one each.

The least recently used segments give theirs up first. Not thread-safe: the owner's thread.

An append to an active segment whose ``.log`` was closed does not always reopen it for good
(``admit``): when the budget is full, it is reopened for good (evicting the oldest) only if
the segment's previous miss is less than a budget's worth of misses ago, the reuse distance
at which keeping it would have paid; otherwise nothing is evicted and the write goes through
the segment's write window (no descriptor held; on the segment's first miss, the file is
opened for that write and closed instead, so a partition written once maps nothing). Appends
spread round-robin over more partitions than the budget holds (issue 12: 10,000 partitions,
~768 descriptors) would otherwise evict on every append and never hit; a set of partitions
that fits the budget is admitted on its second miss and then hits.
"""

from __future__ import annotations

import logging
import resource
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Protocol

from .file_records import Mapping, try_close

log = logging.getLogger("kbroker.storage.segment")

INDEX_COPY_BYTES = 64 << 20  # in-memory index copies non-active segments may hold in all
ACTIVE_SEGMENT_FDS = 2  # the most an active segment holds: its ``.log`` descriptor and mapping
MIN_OPEN_FILES_BUDGET = 64
_MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")
_NR_OPEN = Path("/proc/sys/fs/nr_open")

FILES, COPIES, WINDOWS = 1, 2, 4  # bits of a segment's ``used``, one per cache
USED = FILES | COPIES | WINDOWS  # what a read or an append sets: the segment was used, for every cache
MAX_WRITE_WINDOWS = 1 << 16
NEVER = -(1 << 62)  # a segment's ``last_miss`` before its first


class BudgetedSegment(Protocol):
    """What the budget needs of a segment (LogSegment is one)."""

    used: int  # the caches' bits, set on use, cleared by the cache (second chance)
    last_miss: int  # the budget's ``misses`` at this segment's last one (``admit``)

    def held(self) -> tuple[int, int]: ...  # (descriptors, bytes of index copies)

    def close_files(self) -> None: ...

    def drop_index_copies(self) -> None: ...

    def close_window(self) -> None: ...


def open_files_budget(max_fds: int | None = None) -> int:
    """Descriptors the segments may hold in all: the soft RLIMIT_NOFILE less an eighth (at
    least 256) kept for sockets and every other file, at most half of vm.max_map_count (a
    cached segment's descriptors are its mappings'), and at most ``max_fds`` (the broker's
    ``log.open.files.max``) when given; never below MIN_OPEN_FILES_BUDGET."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = 1 << 20 if soft == resource.RLIM_INFINITY else soft - max(256, soft // 8)
    if max_fds is not None:
        budget = min(budget, max_fds)
    try:
        budget = min(budget, int(_MAX_MAP_COUNT.read_text()) // 2)
    except (OSError, ValueError):
        pass
    return max(MIN_OPEN_FILES_BUDGET, budget)


def write_windows_budget() -> int:
    """Write windows the segments may hold in all: a quarter of vm.max_map_count (the
    descriptor budget's mappings take at most half, open_files_budget), at most
    MAX_WRITE_WINDOWS."""
    try:
        return max(MIN_OPEN_FILES_BUDGET, min(MAX_WRITE_WINDOWS, int(_MAX_MAP_COUNT.read_text()) // 4))
    except (OSError, ValueError):
        return MIN_OPEN_FILES_BUDGET


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force.
    The limit is the process's: the broker's ``LogManager`` calls this once at startup (Kafka
    asks operators for a large ``ulimit -n`` instead), then sizes its budget from it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # the kernel caps RLIMIT_NOFILE at fs.nr_open
        try:
            target = int(_NR_OPEN.read_text())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("raised the soft open files limit (RLIMIT_NOFILE) from %d to the hard limit %d", soft, target)
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, target, exc)
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class BudgetCache:
    """Segments holding a cost each; ``release(segment)`` frees the oldest while the costs
    exceed ``budget``.

    The order is CLOCK (second chance), an LRU approximation: a read only sets this cache's
    bit in the segment's ``used`` instead of reordering a structure shared by every
    segment, which would cost cache misses per lookup in a big log. The oldest segment is
    released unless its bit is set; then the bit is cleared and it goes to the back.
    """

    def __init__(self, budget: int, bit: int, release: Callable[[BudgetedSegment], None]) -> None:
        self.budget = budget
        self.total = 0
        self._bit = bit
        self._release = release
        self._costs: OrderedDict[BudgetedSegment, int] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        return len(self._costs)

    def set(self, segment: BudgetedSegment, cost: int) -> None:
        """``segment`` holds ``cost`` now (it leaves the cache at 0); others are released,
        oldest first, while over budget. ``segment`` goes last and counts as used."""
        self.discard(segment)
        if cost:
            self._costs[segment] = cost
            self.total += cost
            segment.used |= self._bit
        costs = self._costs
        while self.total > self.budget and len(costs) > 1:
            oldest = next(iter(costs))
            if oldest.used & self._bit:
                oldest.used &= ~self._bit
                costs.move_to_end(oldest)
                continue
            self.discard(oldest)
            self._release(oldest)

    def discard(self, segment: BudgetedSegment) -> None:
        self.total -= self._costs.pop(segment, 0)


class OpenSegmentBudget:
    """The three caches of the module docstring: ``files`` (descriptors), ``copies`` (bytes
    of in-memory index copies) and ``windows`` (write windows)."""

    def __init__(self, max_fds: int, max_copy_bytes: int = INDEX_COPY_BYTES, max_windows: int | None = None) -> None:
        self.files = BudgetCache(max_fds, FILES, lambda segment: segment.close_files())
        self.copies = BudgetCache(max_copy_bytes, COPIES, lambda segment: segment.drop_index_copies())
        self.windows = BudgetCache(write_windows_budget() if max_windows is None else max_windows, WINDOWS,
                                   lambda segment: segment.close_window())
        self.max_fds: int | None = None  # the cap ``resize_to_open_files_limit`` keeps
        # Mappings of closed segments that were still being read (a Fetch response not yet
        # written) when their segment gave its files up: each holds a descriptor until closed,
        # so they are closed here once their readers are done, not when (if ever) the segment
        # is used again. The lists are the segments' own (file_records.py), pruned in place.
        self._retired: list[list[Mapping]] = []
        self.misses = 0  # appends that found their active segment's .log closed (``admit``)

    @classmethod
    def from_open_files_limit(cls, max_fds: int | None = None) -> OpenSegmentBudget:
        """Descriptors sized from the soft RLIMIT_NOFILE in force, at most ``max_fds``
        (``open_files_budget``)."""
        budget = cls(open_files_budget(max_fds))
        budget.max_fds = max_fds
        return budget

    def resize_to_open_files_limit(self) -> None:
        """Resize the descriptor budget after the limit changed (``raise_open_files_limit``)."""
        self.files.budget = open_files_budget(self.max_fds)

    def admit(self, segment: BudgetedSegment) -> bool:
        """An append found ``segment``'s file closed: whether to reopen it for good (the
        module docstring) rather than for this write only."""
        self.misses = misses = self.misses + 1
        last, segment.last_miss = segment.last_miss, misses
        files = self.files
        return files.total < files.budget or misses - last <= files.budget

    def retired(self, maps: list[Mapping]) -> None:
        """A closed segment's mappings still exported: closed by a later ``update`` once free."""
        if maps and not any(listed is maps for listed in self._retired):
            self._retired.append(maps)

    def prune_retired(self) -> None:
        if self._retired:
            for maps in self._retired:
                maps[:] = [m for m in maps if not try_close(m)]
            self._retired = [maps for maps in self._retired if maps]

    def update(self, segment: BudgetedSegment) -> None:
        """``segment`` opened or closed handles: count what it holds now."""
        self.prune_retired()
        fds, nbytes = segment.held()
        self.files.set(segment, fds)
        self.copies.set(segment, nbytes)

    def discard(self, segment: BudgetedSegment) -> None:
        self.files.discard(segment)
        self.copies.discard(segment)
        self.windows.discard(segment)

    def __repr__(self) -> str:
        return (f"OpenSegmentBudget(files {self.files.total} of {self.files.budget}, "
                f"copies {self.copies.total} of {self.copies.budget} bytes, "
                f"windows {self.windows.total} of {self.windows.budget})")
