"""The file operations a crash can undo, in one place: storage/'s seam to the disk.

storage/ (and the broker's and controller's own files: directory locks, meta.properties)
creates, writes, truncates, fsyncs, renames and removes files only through this module,
looking each function up at the call (``fileio.pwrite(fd, data, position)``), so that a
simulated disk can stand in for the real one: sim/disk.py keeps what a crash would lose
(everything written since the last fsync) and ``install`` swaps every function at once,
giving back the previous set. Reads (mmap, pread, fstat) go to the files directly: a read
sees the page cache either way.

Production runs os's functions themselves: a call costs what ``os.pwrite`` costs (one
module attribute lookup). ``write_windows`` False sends appends that would go through a
write window (file_records.py: a writable mapping, which a simulated disk cannot see)
down the plain ``pwrite`` path.
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import shutil
from pathlib import Path
from typing import Any, Callable

StrPath = str | os.PathLike[str]

open = os.open
close = os.close
dup = os.dup
pwrite = os.pwrite
write = os.write
fsync = os.fsync
ftruncate = os.ftruncate
replace = os.replace
rename = os.rename
unlink = os.unlink
rmtree = shutil.rmtree
# The file system's total, used and free bytes of a path (the broker's heartbeat reports each
# log dir's: the controller's partition autobalancer): the simulated disk answers its own.
disk_usage = shutil.disk_usage


def modified_ms(path: StrPath) -> int:
    """When ``path`` was last written (its mtime), in milliseconds: what retention.ms goes by
    for a segment without timestamps."""
    return os.stat(path).st_mtime_ns // 1_000_000


def _libc_call(name: str, argtypes: tuple[str, ...], *args: int) -> None:
    """Call the C library's ``name`` through ctypes (looked up on the first call, then kept; its
    ``argtypes`` named as ctypes types): OSError from errno where it returns nonzero, EOPNOTSUPP
    where the C library has no such function. For the calls the os module lacks."""
    function = _libc_functions.get(name)
    if function is None:
        import ctypes
        try:
            function = getattr(ctypes.CDLL(None, use_errno=True), name)
        except AttributeError:
            raise OSError(errno.EOPNOTSUPP, f"{name}: not in this C library") from None
        function.argtypes = tuple(getattr(ctypes, t) for t in argtypes)
        function.restype = ctypes.c_int
        _libc_functions[name] = function
    if function(*args) != 0:
        import ctypes
        code = ctypes.get_errno()
        raise OSError(code, f"{name}: {os.strerror(code)}")


_libc_functions: dict[str, Any] = {}


def _fallocate_keep_size(fd: int, offset: int, length: int) -> None:
    """Reserve the blocks of [offset, offset + length) of ``fd``'s file, its size unchanged
    (fallocate(2) with FALLOC_FL_KEEP_SIZE: what log.preallocate asks for). OSError where the
    file system or the C library cannot (EOPNOTSUPP, ENOSPC, ...). The os module has no
    fallocate with flags (posix_fallocate extends the size), so libc's is called through ctypes."""
    _libc_call("fallocate", ("c_int", "c_int", "c_int64", "c_int64"), fd, _FALLOC_FL_KEEP_SIZE, offset, length)


_FALLOC_FL_KEEP_SIZE = 1
fallocate: Callable[[int, int, int], None] = _fallocate_keep_size


def _sync_file_range_write(fd: int, offset: int, length: int) -> None:
    """Start writeback of [offset, offset + length) of ``fd``'s file and return without waiting
    for it (sync_file_range(2) with SYNC_FILE_RANGE_WRITE): no flush, nothing is made durable
    (``kbroker.log.writeback.bytes``, file_records.py). OSError where it cannot be called."""
    _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def _sync_file_range(fd: int, offset: int, length: int, flags: int) -> None:
    _libc_call("sync_file_range", ("c_int", "c_int64", "c_int64", "c_uint"), fd, offset, length, flags)


def _sync_file_range_wait(fd: int, offset: int, length: int) -> None:
    """Write [offset, offset + length) back and wait until it is (sync_file_range with
    WAIT_BEFORE | WRITE | WAIT_AFTER: the pages are clean after, so a drop frees them; no flush of
    the disk's cache or the file's metadata, nothing is made durable)."""
    _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WAIT_BEFORE | _SYNC_FILE_RANGE_WRITE
                     | _SYNC_FILE_RANGE_WAIT_AFTER)


def _drop_cached(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to drop the clean page cache of [offset, offset + length) of ``fd``'s file
    (posix_fadvise POSIX_FADV_DONTNEED; pages still dirty, under writeback or mapped stay)."""
    os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


_SYNC_FILE_RANGE_WAIT_BEFORE = 1
_SYNC_FILE_RANGE_WRITE = 2
_SYNC_FILE_RANGE_WAIT_AFTER = 4
sync_file_range_write: Callable[[int, int, int], None] = _sync_file_range_write
sync_file_range_wait: Callable[[int, int, int], None] = _sync_file_range_wait
drop_cached: Callable[[int, int, int], None] = _drop_cached


class WritebackJob:
    """One file's writeback state, shared by its owner (on the event loop) and the writeback
    thread: at most one job of a file is queued at a time (``pending``; its owner widens the next
    one instead of queueing more, so a slow disk never piles up jobs or their descriptors); the
    first error of a job is kept in ``failed`` for the owner to read."""

    __slots__ = ("pending", "failed")

    def __init__(self) -> None:
        self.pending = False
        self.failed: BaseException | None = None


class WritebackThread:
    """One daemon thread (started on first use) that runs writeback jobs off the caller's
    thread: starting a writeback walks the range's dirty pages and allocates their blocks, which
    took the event loop ~10 µs per 16 KiB appended (bench/replication_bench.py). A job names its
    file by its path, opened by the thread for the job and closed after (a queued job holds no
    descriptor; an error its calls see is that descriptor's, not the owner's, whose fsync still
    sees a failed writeback; a file gone meanwhile is skipped). ``write``: start the writeback of
    that range, not waiting; ``drop``: write that range back and wait (so its pages are clean),
    then drop its page cache."""

    def __init__(self) -> None:
        self._jobs: Any = None
        self.worked = False  # a job's calls succeeded once (file_records: what a later error means)

    def submit(self, state: WritebackJob, file: str, write: tuple[int, int] | None,
               drop: tuple[int, int] | None) -> None:
        if self._jobs is None:
            import queue
            import threading
            jobs: Any = queue.SimpleQueue()
            threading.Thread(target=self._run, args=(jobs,), name="log-writeback", daemon=True).start()
            self._jobs = jobs  # only once its thread runs (a failed start leaves none)
        state.pending = True
        self._jobs.put((state, file, write, drop))

    def barrier(self, timeout: float = 10.0) -> None:
        """Wait until the jobs submitted so far ran (tests)."""
        if self._jobs is not None:
            import threading
            done = threading.Event()
            self._jobs.put(done)
            done.wait(timeout)

    def _run(self, jobs: Any) -> None:
        while True:
            job = jobs.get()
            if not isinstance(job, tuple):
                job.set()  # a barrier
                continue
            state, file, write, drop = job
            fd = -1
            try:
                fd = os.open(file, os.O_RDONLY)
                if write is not None:
                    sync_file_range_write(fd, *write)
                if drop is not None:
                    sync_file_range_wait(fd, *drop)
                    drop_cached(fd, *drop)
                self.worked = True
            except FileNotFoundError:
                pass  # a segment deleted meanwhile: nothing left to write back or drop
            except Exception as exc:  # noqa: BLE001 - the owner logs it and stops; this thread goes on
                state.failed = exc
            finally:
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                state.pending = False


writeback_thread = WritebackThread()

write_windows = True
# The thread pool a clean shutdown fsyncs many logs on (log_manager.flush_all): an inline one
# under the simulator, which runs no threads.
thread_pool: Callable[..., concurrent.futures.Executor] = concurrent.futures.ThreadPoolExecutor

_SWAPPABLE = ("open", "close", "dup", "pwrite", "write", "fsync", "ftruncate", "fallocate", "replace", "rename",
              "unlink", "rmtree", "modified_ms", "write_windows", "thread_pool", "disk_usage")


def install(functions: dict[str, Any]) -> dict[str, Any]:
    """Replace the named functions (a subset of this module's); returns what they were, for
    ``install`` to put back."""
    unknown = set(functions) - set(_SWAPPABLE)
    if unknown:
        raise ValueError(f"storage.fileio has no {', '.join(sorted(unknown))}")
    here = globals()
    previous = {name: here[name] for name in functions}
    here.update(functions)
    return previous


def unlink_if_exists(path: StrPath) -> None:
    try:
        unlink(path)
    except FileNotFoundError:
        pass


def touch(path: StrPath) -> None:
    """Create ``path`` empty if it does not exist (its contents are left alone if it does)."""
    close(open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def write_all(fd: int, data: Any) -> None:
    """``write`` until all of ``data`` is written (short writes go on where they stopped)."""
    view = memoryview(data)
    while view:
        view = view[write(fd, view):]


def append_to(path: StrPath, data: Any) -> None:
    """Write ``data`` at the end of ``path`` (created if missing)."""
    fd = open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        end = os.fstat(fd).st_size
        view = memoryview(data)
        while view:
            done = pwrite(fd, view, end)
            view, end = view[done:], end + done
    finally:
        close(fd)


def listdir(path: StrPath) -> list[str]:
    """The names in ``path``, sorted: the same order on every file system (a directory's
    own order depends on the file system, and the order logs are loaded in is seen)."""
    return sorted(os.listdir(path))


class FileWriter:
    """A file written front to back through ``write`` in chunks of ``buffer_size`` (what
    the log cleaner writes a cleaned segment with): ``write``, then ``sync`` and ``close``."""

    def __init__(self, path: Path, buffer_size: int = 1 << 20) -> None:
        self.fd = open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._buffer = bytearray()
        self._size = buffer_size

    def write(self, data: Any) -> None:
        self._buffer += data
        if len(self._buffer) >= self._size:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            write_all(self.fd, self._buffer)
            self._buffer = bytearray()

    def sync(self) -> None:
        self.flush()
        fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            close(fd)

    def __enter__(self) -> "FileWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
