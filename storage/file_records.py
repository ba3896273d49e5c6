"""FileRecords: the ``.log`` file of one segment (Kafka's ``FileRecords``).

Appends go through ``os.pwrite``, reads are slices of a read-only ``MAP_SHARED`` mapping.

Why pwrite rather than writing through the mapping. Copying into a mapping of a file
pre-extended with ftruncate is not reliably faster than a plain write (the page cache's
state decides, run to run; bench/storage_bench.py "append" measures both), and the time of
an append is dominated by the per-batch Python work and the CRC check, not by the data
write. Whatever the mapping might gain is not worth what it costs: the file must be
extended ahead of the data (a zero tail to manage on every roll, close and crash), and a
store into a page whose block cannot be allocated (ENOSPC) is a SIGBUS that kills the
broker, where pwrite returns an OSError that becomes KAFKA_STORAGE_ERROR for one partition.

The file keeps its real size. Preallocation (``log.preallocate``, ``preallocate``) reserves a
new active segment's blocks up to segment.bytes with fallocate's FALLOC_FL_KEEP_SIZE: beyond
the end of the file, so nothing that reads the file (recovery, a mapping's length, the dump
tool) sees it. It matters on ext4, where an append into blocks not yet allocated takes the
inode's i_data_sem, which writeback holds while it allocates (reading block bitmaps, issuing
discards): appends then stall for 10-50 ms about once a second under sustained writes
(bench/replication_tail.py's pwrite figures); into reserved blocks they do not. The reserve is
given back (ftruncate to the size) when the segment rolls (``release_reserved``); a closing
log keeps it (a restart reserves the same blocks again, at no cost), a truncation's ftruncate
frees it and the next append reserves again. A mapping covers the file as it was when
mapped; a read past it maps the current size again. Mappings handed out as memoryviews
may outlive any of this: ``mmap.close()`` raises BufferError while exports exist, so an old
mapping is only *retired* (kept in a list and closed once its exports are gone), and the
file is never shrunk below the length of a mapping that may still be read (a read past
EOF through a mapping is SIGBUS). Truncation therefore shrinks the file when it can and
otherwise overwrites the dropped bytes with zeros, which recovery treats as the end of
the data, and leaves the shrink for later (``trim``).

Writeback (``kbroker.log.writeback.bytes``, ``write_back_every``; the broker's default 1 MiB,
this class's off). Every that many bytes appended, the active segment starts the writeback of
the whole pages it appended since (sync_file_range SYNC_FILE_RANGE_WRITE, on fileio's writeback
thread: the write is queued, nothing waits for it, nothing is made durable: flush.ms /
flush.messages still fsync). Dirty pages then leave steadily instead of in the kernel's bursts
once ~10 % of memory is dirty; and the blocks of what was appended are allocated a step at a
time on that thread, not by the kernel's flusher in one go while it holds the file's allocation
lock, which on ext4 (delayed allocation) held an append on the event loop for 5-80 ms a few
times a second under sustained writes (bench/replication_tail.py's pwrite stalls). With
``kbroker.log.page.cache.retain.bytes`` >= 0 the writeback stops that far behind the end, and what
lies beyond is dropped from the page cache once written (the thread waits for
its writeback, then POSIX_FADV_DONTNEED; pages a read mapping holds are left, and the next steps
ask again for a while). A rolled segment's tail is dropped once the next segment holds the
retained bytes. At most one job per file is queued: while one waits, the next covers more. Windowed
appends (segments beyond the descriptor budget, below) take no part. The pages freed are the next
appends' pages, so the page cache does not grow with the log. On a VM whose
host takes back the guest's free memory (free page reporting), each page the page cache grows
into costs a host fault on first touch: an append there costs 35-45 µs of CPU per 16 KiB
instead of ~10 (bench/replication_bench.py's memory figure). A consumer or follower reading
more than the retained bytes behind the end reads from the disk. A failed call is logged once
and the segment goes on without; a platform without it (no sync_file_range, a thread that
cannot start, a call a seccomp profile forbids) is logged once and no segment tries again.

A mapping holds a descriptor of its own (CPython's mmap dup()s the one it is given), so a
segment that only serves reads can close ours (``release_fd``): it then costs one
descriptor, not two. The next write, truncation or larger mapping reopens the file.
``close_fds`` gives both up but keeps the object (its sizes): an active segment evicted
from the descriptor budget reopens with one ``open`` on its next append (no ``fstat``, no
new object). ``on_open``, when set, is called after every descriptor or mapping this opens
after construction, so the owner's budget counts what is really held.

Write windows (``append_windowed``). An active segment whose ``.log`` the descriptor budget
did not admit (segment_budget.py: appends spread over more partitions than the budget holds)
would open and close its file on every append: with 10,000 partitions written round-robin
that open/close (path walk, file setup, release) was most of what an append costs beyond a
held descriptor's (issue 12, bench/partitions_bench.py). Such appends instead copy into a
*write window*: a writable shared mapping of ``WINDOW_BYTES`` of the file from the page that
holds the end on (storage/_write_window.c), which holds no descriptor (CPython's mmap dup()s
one) and costs one open/ftruncate/mmap/close per window, not per append. Where the module
is not built, ``append_windowed`` is ``append_closing``. What this changes, and why each is
safe:

* the file is extended (sparse, ftruncate) to the window's end ahead of the data: a zero
  tail, as a truncation may leave one. Loading re-reads the active segment's last batches
  after a clean shutdown and re-validates from the recovery point after a crash, and cuts a
  zero tail either way (log_loader.py); a roll, a close and a clean shutdown ``trim`` it, and
  ``_drop_tail`` unmaps the window before it shrinks the file (a store past EOF would be a
  SIGBUS);
* a store into a page that cannot be had (no space for a page of the sparse file, an I/O
  error reading one back, a file shrunk by someone else) is a SIGBUS: the module turns a
  fault inside its copy into OSError(EIO), so it ends like a failed pwrite (the bytes of the
  failed write are cut, KAFKA_STORAGE_ERROR for that partition), never the broker's death;
* durability is unchanged: a store into a MAP_SHARED page dirties the page cache page, and
  the flush's fsync of the file writes it like any written page; ``kill -9`` loses nothing
  a pwrite would have kept;
* memory: pages wholly behind the end are given back every ``WINDOW_RELEASE_BYTES``
  (madvise: only this process's mapping of them, the page cache keeps them), so a window
  adds a page or two to the RSS; ``vm.max_map_count`` bounds the number of windows (the budget's
  ``windows`` cache, least recently used first).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Union

from . import fileio

if TYPE_CHECKING:
    from protocol.records import Buffer

try:
    from ._write_window import ReadMap, Window
except ImportError:  # not built (setup.py): appends without a descriptor open and close the file
    Window = ReadMap = None  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

_ZERO_CHUNK = 1 << 20
_NO_RESERVE = sys.maxsize  # an append never reaches this: nothing to reserve
_NO_WRITEBACK = sys.maxsize  # nor this: no writeback started by us ("Writeback")
# How far below the retained tail a drop reaches again: pages a read mapping held when an
# earlier drop passed (mapped pages are not dropped) are dropped once the mapping is gone
# (read mappings are replaced at least every READ_HEADROOM_MAX of growth)
_REDROP_BYTES = 256 << 20
# Set once the writeback proved unavailable on this machine rather than for one file: no C
# library function, no system call, or not allowed (a seccomp profile); from then on every
# segment stops at its next step ("Writeback")
_writeback_unavailable = False
_UNAVAILABLE_ERRNOS = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM})


def _unavailable_here(exc: BaseException) -> bool:
    """The writeback cannot work on this machine at all: before any job ever ran, a thread that
    cannot start, or a call the platform lacks or forbids (once one worked, an error is that
    file's: a network file system's EPERM, say)."""
    if fileio.writeback_thread.worked:
        return False
    return isinstance(exc, RuntimeError) or (isinstance(exc, OSError) and exc.errno in _UNAVAILABLE_ERRNOS)


_NOTHING = b""  # an empty read: a new view of it each time (a caller may release what it gets)
WINDOWS = Window is not None
PAGE_SIZE = mmap.PAGESIZE
WINDOW_BYTES = 256 << 10  # the file range one write window maps (module docstring)
WINDOW_RELEASE_BYTES = 4 << 10  # written pages behind a window's end are given back this often (a page)
READ_HEADROOM_MIN = 1 << 20  # a read mapping reaches this far past the data at least ("Reading" below)
READ_HEADROOM_MAX = 64 << 20  # and at most this far (else as far as the data is long)
read_maps = ReadMap is not None  # False: mmap.mmap of the file's size, the reference (tests flip it)
Mapping = Union[mmap.mmap, "ReadMap"]  # a read mapping of a .log ("Reading" below)


def try_close(m: Mapping) -> bool:
    """Close ``m`` unless memoryviews of it are alive; True when it is closed."""
    try:
        m.close()
        return True
    except BufferError:
        return False


class FileRecords:
    """Not thread-safe."""

    def __init__(self, path: Path, size: int | None = None, retired: list[Mapping] | None = None) -> None:
        self.path = path
        self._path = os.fspath(path)  # opened on many appends (issue 12): converted once
        self._fd = fileio.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        self._closed = False
        self.file_size = os.fstat(self._fd).st_size
        self.size = self.file_size if size is None else min(size, self.file_size)
        self._map: Mapping | None = None
        self._retired: list[Mapping] = retired if retired is not None else []
        self.on_open: Callable[[], None] | None = None  # see the module docstring
        self._window: Window | None = None  # see "Write windows"
        self._released = 0  # file position below which the window's pages were given back
        self.on_window: Callable[[bool], None] | None = None  # told when a window is mapped (True) or unmapped
        # Preallocation (module docstring): the append that reaches past ``_reserved`` first
        # reserves up to ``_reserve_to``; never again for this file once tried.
        self._reserved = _NO_RESERVE
        self._reserve_to = 0
        # Writeback (module docstring): the append that reaches ``_writeback_at`` starts the
        # writeback of the whole pages from _written_back up to the retained tail (the end
        # without one) and drops the cache below that tail
        self._writeback_at = _NO_WRITEBACK
        self._writeback_step = 0
        self._written_back = 0
        self._retain = -1
        self._dropped = 0
        self._writeback_job = fileio.WritebackJob()
        # a rolled segment's tail (path, start, end): dropped once this one holds the retained bytes
        self._previous: tuple[str, int, int] | None = None

    # -- writing -------------------------------------------------------------------------

    def append(self, data: Buffer) -> int:
        """Write ``data`` at the end; returns the position it starts at.

        On OSError nothing is appended: what a partial write left is zeroed (or cut off)
        and the error propagates.
        """
        position, n = self.size, len(data)
        done = 0
        fd = self._fd if self._fd >= 0 else self._file()
        if position + n > self._reserved:
            self._reserve(fd, position + n)
        try:
            done = fileio.pwrite(fd, data, position)
            while done < n:  # a short write: go on from where it stopped
                done += fileio.pwrite(fd, memoryview(data)[done:], position + done)
        except OSError:
            self.file_size = max(self.file_size, position + done)
            self._drop_tail(position, position + done)
            raise
        self.size = position + n
        if self.size > self.file_size:
            self.file_size = self.size
        if self.size >= self._writeback_at:
            self._write_back()
        return position

    def write_back_every(self, step: int, retain: int = -1, previous: tuple[str, int, int] | None = None) -> None:
        """From the current end on, start the writeback of every ``step`` bytes appended (0:
        never), up to ``retain`` bytes behind the end, and drop the cache of what is further
        behind (-1: write back all, drop nothing); ``previous``: the tail of the segment this one
        follows (``retire_write_back``), dropped once this one holds ``retain`` bytes. Module
        docstring, "Writeback"."""
        self._writeback_step, self._retain = step, retain
        self._written_back = self.size
        self._dropped = min(self._dropped, self.size)
        self._writeback_at = self.size + step if step > 0 else _NO_WRITEBACK
        self._previous = previous if step > 0 and retain >= 0 else None

    def retire_write_back(self) -> tuple[str, int, int] | None:
        """The segment stops being active: writeback is left to the kernel from now on. Returns
        what of it the next active segment should drop once it holds the retained bytes (its
        tail, which readers at the end are still reading); a tail handed to this one before
        is dropped now (a whole segment behind)."""
        tail = None
        if self._writeback_step and self._retain >= 0:
            tail = (self._path, max(0, self._dropped - _REDROP_BYTES), self.size)
            if self._previous is not None:
                self._submit_previous()
        self.write_back_every(0)
        return tail

    def _submit_previous(self) -> None:
        path, start, end = self._previous  # type: ignore[misc]
        self._previous = None
        if end > start:  # its own state: advisory, its failure only stops nothing else
            fileio.writeback_thread.submit(fileio.WritebackJob(), path, None, (start, end - start))

    def _write_back(self) -> None:
        """Queued for fileio's writeback thread, by path (the thread opens the file for the job:
        a queued job holds no descriptor the budget does not count, and its calls' errors are
        its own descriptor's, never this file's, whose fsync must still see them): the writeback
        of what was appended since, up to the retained tail, and the drop of what lies beyond
        that tail. One job of this file at a time: while one is queued, the next step's range
        grows instead."""
        global _writeback_unavailable
        self._writeback_at = self.size + self._writeback_step
        job = self._writeback_job
        try:
            if _writeback_unavailable:  # found out by this segment or another
                self.write_back_every(0)
                return
            if job.failed is not None:  # an earlier job's: logged once, then off
                failed, job.failed = job.failed, None
                raise failed
            if job.pending:
                return
            start = self._written_back
            # whole pages only: a partial last page written back now would be written again once
            # the next append fills it (and where the device wants stable pages, that append
            # would wait for the first write)
            end = (self.size if self._retain < 0 else self.size - self._retain) & ~(PAGE_SIZE - 1)
            write = (start, end - start) if end > start else None
            drop = None
            # all beyond the retained tail (the thread writes it back and waits first), never the tail
            if self._retain >= 0 and end > self._dropped:
                low = max(0, min(self._dropped, end - _REDROP_BYTES))
                drop = (low, end - low)
            if write is not None or drop is not None:
                fileio.writeback_thread.submit(job, self._path, write, drop)
                self._written_back = max(start, end)
                if drop is not None:
                    self._dropped = end
            if self._previous is not None and self.size >= self._retain:
                self._submit_previous()
        except Exception as exc:  # noqa: BLE001 - advisory: the kernel writes it back as it would anyway
            if _unavailable_here(exc):
                if not _writeback_unavailable:  # said once for the process
                    _writeback_unavailable = True
                    log.warning("kbroker.log.writeback.bytes: not available here (%s); left to the kernel for "
                                "every segment", exc)
            else:
                log.warning("kbroker.log.writeback.bytes: %s: %s; this segment goes on without", self._path, exc)
            self.write_back_every(0)

    def preallocate(self, end: int) -> None:
        """Reserve the file's blocks up to ``end`` on the next append (module docstring)."""
        if end > self.size:
            self._reserve_to = end
            self._reserved = self.size

    def _reserve(self, fd: int, end: int) -> None:
        """Once per segment (and after a truncation): a failure is logged and not tried again."""
        self._reserved = _NO_RESERVE
        end = max(end, self._reserve_to)
        try:
            fileio.fallocate(fd, self.size, end - self.size)
        except OSError as exc:  # advisory: the append goes on without it
            log.warning("log.preallocate: cannot reserve %d bytes for %s (%s); this segment goes on without",
                        end - self.size, self._path, exc)
            self.release_reserved()  # what a fallocate stopped by ENOSPC did reserve is kept: give it back

    def release_reserved(self) -> None:
        """Give back what ``preallocate`` reserved past the end (ftruncate to the size frees the
        blocks past it): the segment is no longer appended to."""
        self._reserved = _NO_RESERVE
        if self._reserve_to:
            self._reserve_to = 0
            if self.file_size <= self.size:  # else a zero tail: ``trim`` shrinks the file
                try:
                    fileio.ftruncate(self._file(), self.file_size)
                except OSError as exc:  # only disk space kept until the segment is deleted
                    log.warning("log.preallocate: cannot give back what %s reserved: %s", self._path, exc)

    def append_closing(self, data: Buffer) -> int:
        """``append``, with the file opened for this write only when our descriptor is closed
        (``on_open`` is not told: the descriptor is not held after the call)."""
        if self._fd >= 0:
            return self.append(data)
        self._fd = fileio.open(self._path, os.O_RDWR)
        try:
            return self.append(data)
        finally:
            fd, self._fd = self._fd, -1
            fileio.close(fd)

    def append_windowed(self, data: Buffer) -> int:
        """``append`` through the write window (module docstring), which is mapped first when
        the data does not fit the current one; no descriptor is held after the call.
        ``append_closing`` where the window module is not built, or ``fileio.write_windows``
        is off (a simulated disk sees only what goes through fileio)."""
        if Window is None or not fileio.write_windows:
            return self.append_closing(data)
        position, n = self.size, len(data)
        window = self._window
        if window is None or position + n > window.offset + window.length:
            window = self._map_window(position + n)
        try:
            window.write(position - window.offset, data)
        except OSError:
            self._drop_tail(position, position + n)  # unmaps the window first
            raise
        self.size = end = position + n
        if end - self._released >= WINDOW_RELEASE_BYTES:
            window.release(end - window.offset)
            self._released = end - end % PAGE_SIZE
        return position

    def _map_window(self, end: int) -> Window:
        """A window from the page holding ``size`` to at least ``end`` (WINDOW_BYTES or more),
        the file extended to its end when shorter."""
        self.close_window()
        start = self.size - self.size % PAGE_SIZE
        stop = start + max(WINDOW_BYTES, -(-(end - start) // PAGE_SIZE) * PAGE_SIZE)
        fd = self._fd if self._fd >= 0 else fileio.open(self._path, os.O_RDWR)
        try:
            if self.file_size < stop:
                fileio.ftruncate(fd, stop)
                self.file_size = stop
            window = Window(fd, start, stop - start)
        finally:
            if fd != self._fd:
                fileio.close(fd)
        self._window, self._released = window, start
        if self.on_window is not None:
            self.on_window(True)
        return window

    def close_window(self) -> None:
        """Unmap the write window, if any (what a later append needs is mapped again)."""
        window = self._window
        if window is not None:
            self._window = None
            window.close()
            if self.on_window is not None:
                self.on_window(False)

    @property
    def has_window(self) -> bool:
        return self._window is not None

    def truncate_to(self, new_size: int) -> int:
        """Drop the bytes from ``new_size`` on; returns how many were dropped."""
        if new_size >= self.size:
            return 0
        dropped = self.size - new_size
        self._drop_tail(new_size, self.size)
        self.size = new_size
        if self._writeback_step:  # writeback goes on from the new end
            self.write_back_every(self._writeback_step, self._retain, self._previous)
        return dropped

    def _drop_tail(self, start: int, end: int) -> None:
        """Make [start, end) unreadable to recovery: shrink the file to ``start`` when no
        live mapping reaches past it, else overwrite the range with zeros."""
        self.close_window()  # never a store past EOF (module docstring)
        if self._map is not None and len(self._map) > start:
            self._retire_map(self._map)
        self._prune_retired()
        fd = self._file()
        if all(len(m) <= start for m in self._retired):
            fileio.ftruncate(fd, start)  # which frees a log.preallocate reservation too:
            self.file_size = start
            if self._reserve_to:
                self._reserved = start  # the next append reserves again
            return
        try:
            while start < end:
                start += fileio.pwrite(fd, bytes(min(end - start, _ZERO_CHUNK)), start)
        except OSError:
            pass  # best effort: the caller is already handling a failed write

    def trim(self) -> None:
        """Unmap the write window and shrink the file to ``size`` if a window or a truncation
        left a zero tail."""
        self.close_window()
        if self.file_size > self.size:
            self._drop_tail(self.size, self.file_size)

    # -- reading -------------------------------------------------------------------------

    # Reading. A mapping made with mmap.mmap covers the file as it is (CPython refuses a length
    # past EOF), so every read after an append mapped the file again: on a leader, every
    # follower fetch and every consumer fetch at the tail paid an mmap, a munmap and the page
    # faults of a fresh mapping (issue 29). Where the C module is built, the mapping is a
    # ReadMap instead: it maps READ_HEADROOM past the data (legal past EOF; only touching a
    # page wholly past EOF is a SIGBUS) and exports only [0, size), which ``extend`` moves up
    # as appends land, so a read after an append costs no syscall until the data outgrows the
    # headroom. Its ``len`` is the exported length, as an mmap's is the mapped one, so
    # everything below (retiring, the shrink rule of ``_drop_tail``) reads the same; like an
    # mmap it holds a descriptor of its own (a dup), so ``held_fds`` and the budget are as before.

    def buffer(self, end: int) -> mmap.mmap | memoryview:
        """A read-only buffer (the mapping) valid for [0, ``end``), ``end`` <= ``size``. Typed as
        an mmap for protocol.records' ``Buffer``, which cannot name a storage type: a ReadMap
        offers what it is read through, the buffer protocol, ``len`` and slicing."""
        if end <= 0:
            return memoryview(_NOTHING)
        return self._mapping(end)  # type: ignore[return-value]  # (no cast() call per read)

    def _mapping(self, end: int) -> Mapping:
        m = self._map
        if m is None or len(m) < end:
            if m is not None and read_maps and type(m) is ReadMap and m.capacity >= self.size:
                m.extend(self.size)  # the headroom holds it: no new mapping
                return m
            if m is not None:
                self._retire_map(m)
            self._prune_retired()
            m = None
            if read_maps:
                size = self.size
                capacity = size + min(max(size, READ_HEADROOM_MIN), READ_HEADROOM_MAX)
                capacity += -capacity % PAGE_SIZE
                try:
                    m = ReadMap(self._file(), capacity, size)
                except OSError as exc:  # the headroom's address space refused (ulimit -v): as before
                    if exc.errno != errno.ENOMEM:
                        raise
            if m is None:
                m = mmap.mmap(self._file(), self.size, access=mmap.ACCESS_READ)
            self._map = m
            if self.on_open is not None:
                self.on_open()
        return m

    def slice(self, start: int, end: int) -> memoryview:
        """Zero-copy view of [start, end)."""
        if end <= start:
            return memoryview(_NOTHING)
        return memoryview(self.buffer(end))[start:end]

    def _retire_map(self, m: Mapping) -> None:
        """``m``, the current mapping, is replaced: closed, or kept until its views are gone."""
        self._map = None
        if not try_close(m):
            self._retired.append(m)

    def _prune_retired(self) -> None:
        if self._retired:
            self._retired[:] = [m for m in self._retired if not try_close(m)]

    # -- files ---------------------------------------------------------------------------

    def _file(self) -> int:
        """Our descriptor, reopened if ``release_fd`` closed it."""
        if self._fd < 0:
            if self._closed:
                raise ValueError(f"{self.path}: closed")
            self._fd = fileio.open(self._path, os.O_RDWR)
            if self.on_open is not None:
                self.on_open()
        return self._fd

    def is_zeros(self, start: int, end: int) -> bool:
        """Whether [start, end) (within ``size``) is all zero bytes: what a write window,
        preallocation or a truncation leaves. Holes are skipped unread (lseek SEEK_DATA: a write
        window's tail is one, up to WINDOW_BYTES per partition to read after a crash otherwise);
        a file system without SEEK_DATA reports everything as data, and all of it is read."""
        buf, fd = self.buffer(end), self._file()
        while start < end:
            stop = end
            try:
                start = os.lseek(fd, start, os.SEEK_DATA)
                if start >= end:
                    return True
                stop = min(end, os.lseek(fd, start, os.SEEK_HOLE))
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but holes from start on
                    return True
            stop = min(stop, start + _ZERO_CHUNK)
            if buf[start:stop] != bytes(stop - start):  # a copy, from an mmap or a ReadMap alike
                return False
            start = stop
        return True

    def release_fd(self) -> None:
        """Map all ``size`` bytes, then close our descriptor: reads go on through the mapping
        (which holds its own). For segments that only serve reads."""
        self.buffer(self.size)
        if self._fd >= 0:
            fileio.close(self._fd)
            self._fd = -1

    def close_fds(self) -> None:
        """Give up our descriptor and the mapping (kept until its views are gone if read):
        the file reopens on next use, as it was (sizes kept, nothing re-read)."""
        if self._map is not None:
            self._retire_map(self._map)
        self._prune_retired()
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            fileio.close(fd)

    @property
    def held_fds(self) -> int:
        """Descriptors held: ours (unless released) and the current mapping's."""
        return (self._fd >= 0) + (self._map is not None)

    def dup_fd(self) -> int:
        """A descriptor of the file the caller owns (to fsync elsewhere)."""
        return fileio.dup(self._fd) if self._fd >= 0 else fileio.open(self._path, os.O_RDONLY)

    def close(self) -> list[Mapping]:
        """Close the file; returns the mappings still exported (the next FileRecords of this
        file must know them before it shrinks the file)."""
        if not self._closed:
            self._closed = True
            self.close_window()
            self.close_fds()
        return self._retired
