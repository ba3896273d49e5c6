"""The simulated disk: real files for the page cache, and a record of what a crash would lose.

Installed as storage/'s file operations (storage/fileio.py), ``SimDisk`` lets every write go
to a real file under the run's directory (reads, mmap included, see it as they would see
the page cache) and remembers, per file, what is not durable yet:

* ``durable_size``: the file's size at its last fsync (or when first written here);
* ``undo``: the durable bytes that later writes or truncations overwrote, to put back;
* ``last_write``: the last write since the fsync, of which a crash may keep a torn prefix.

fsync makes a file durable (its record is dropped). ``crash(machine, power_loss=True)``
puts every file of the machine back to its durable content, then, at the PRNG's choice,
applies a prefix of the last unsynced write: the torn write. A process crash
(``power_loss=False``, kill -9) keeps the page cache: nothing is lost. Either way the
machine's descriptors are closed (its locks go with them), and a descriptor the disk did not
open, or already closed, is refused (EBADF) without a system call: the process's number may
belong to another file by now (code of a crashed process finalized after the run, say).

Creating, renaming and removing files and directories is durable at once (a file system
with ordered metadata); only file contents are lost.

Faults, per machine (``faults[machine]``): ``enospc`` (writes and file creations fail with
ENOSPC), ``eio`` (a write or fsync fails with EIO with this probability).
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage import fileio

from .loop import WALL_CLOCK_START_MS


_UNKNOWN = object()  # (``fds.get``'s default: a descriptor this disk did not open, or closed)


def _bad_descriptor(fd: int) -> OSError:
    return OSError(errno.EBADF, f"Bad file descriptor (simulated: {fd} is not open)")


class _FileState:
    __slots__ = ("durable_size", "undo", "last_write")

    def __init__(self, durable_size: int) -> None:
        self.durable_size = durable_size
        self.undo: list[tuple[int, bytes]] = []
        self.last_write: tuple[int, bytes] | None = None


@dataclass
class DiskFaults:
    enospc: bool = False
    eio: float = 0.0  # probability that a write or an fsync fails with EIO

    @property
    def any(self) -> bool:
        return self.enospc or self.eio > 0


class SimDisk:
    def __init__(self, root: Path, rng: Any, clock: Any, trace: Any = None) -> None:
        self.root = os.path.abspath(root)
        self._machines: dict[Any, str] = {}  # path -> the machine (top directory) it is on
        self.rng = rng
        self.clock = clock  # the SimLoop (``_now``)
        self.trace = trace
        self.states: dict[str, _FileState] = {}
        self.fds: dict[int, str | None] = {}  # descriptor -> path (None: the file was removed)
        self.fd_machine: dict[int, str] = {}
        self.modified: dict[str, int] = {}  # path -> simulated wall ms of its last change
        self.faults: dict[str, DiskFaults] = {}
        self.writes = 0
        self.fsyncs = 0
        self._previous: dict[str, Any] | None = None
        self.sealed = False  # close_all: the run is over, nothing reaches the files any more

    # -- installation --------------------------------------------------------------------
    def install(self) -> None:
        self._previous = fileio.install({
            "open": self.open, "close": self.close, "dup": self.dup, "pwrite": self.pwrite, "write": self.write,
            "fsync": self.fsync, "ftruncate": self.ftruncate, "replace": self.replace, "rename": self.rename,
            "unlink": self.unlink, "rmtree": self.rmtree, "modified_ms": self.modified_ms, "write_windows": False,
            "disk_usage": self.disk_usage})

    def uninstall(self) -> None:
        if self._previous is not None:
            fileio.install(self._previous)
            self._previous = None

    def disk_usage(self, path: Any) -> Any:
        """A file system of 1 TiB, empty, or full while the machine has the ENOSPC fault: the
        same answer every run (the real disk's usage would make the run depend on the host)."""
        total = 1 << 40
        faults = self.faults.get(self.machine_of(os.path.abspath(path)))
        used = total if faults is not None and faults.enospc else 0
        return shutil._ntuple_diskusage(total, used, total - used)  # type: ignore[attr-defined]

    # -- helpers ---------------------------------------------------------------------------
    def machine_of(self, path: str) -> str:
        machine = self._machines.get(path)
        if machine is None:
            machine = os.path.relpath(path, self.root).split(os.sep, 1)[0]
            if len(self._machines) < 65536:  # (a cache: the same files are written again and again)
                self._machines[path] = machine
        return machine

    def _now_ms(self) -> int:
        return WALL_CLOCK_START_MS + int(self.clock._now * 1000.0)

    def _fault(self, path: str | None, op: str) -> None:
        if path is None:
            return
        faults = self.faults.get(self.machine_of(path))
        if faults is None or not faults.any:
            return
        if faults.enospc and op in ("write", "create"):
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")
        if faults.eio and op in ("write", "fsync") and self.rng.random() < faults.eio:
            raise OSError(errno.EIO, "Input/output error (simulated)")

    def _state(self, path: str, fd: int) -> _FileState:
        state = self.states.get(path)
        if state is None:
            state = self.states[path] = _FileState(os.fstat(fd).st_size)
        return state

    def _save(self, state: _FileState, path: str, start: int, end: int) -> None:
        """Keep the durable bytes of [start, end) (within the durable size) for a crash to put back."""
        end = min(end, state.durable_size)
        if start >= end:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            old = os.pread(fd, end - start, start)
        finally:
            os.close(fd)
        state.undo.append((start, old))

    # -- the file operations ---------------------------------------------------------------
    def _check_sealed(self) -> None:
        if self.sealed:
            raise OSError(errno.EROFS, "the simulated disk is sealed: the run is over")

    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        self._check_sealed()
        p = os.path.abspath(path)
        if flags & os.O_CREAT and not os.path.lexists(p):
            self._fault(p, "create")
            self.modified[p] = self._now_ms()
        elif flags & os.O_TRUNC and os.path.isfile(p):
            state = self.states.get(p)
            if state is None:
                state = self.states[p] = _FileState(os.stat(p).st_size)
            self._save(state, p, 0, state.durable_size)
            state.last_write = None
            self.modified[p] = self._now_ms()
        fd = os.open(p, flags, mode)
        self.fds[fd] = p
        self.fd_machine[fd] = self.machine_of(p)
        return fd

    def close(self, fd: int) -> None:
        if self.fds.pop(fd, _UNKNOWN) is _UNKNOWN:
            raise _bad_descriptor(fd)
        self.fd_machine.pop(fd, None)
        os.close(fd)

    def dup(self, fd: int) -> int:
        self._check_sealed()
        if fd not in self.fds:
            raise _bad_descriptor(fd)
        new = os.dup(fd)
        self.fds[new] = self.fds.get(fd)
        self.fd_machine[new] = self.fd_machine.get(fd, "?")
        return new

    def pwrite(self, fd: int, data: Any, position: int) -> int:
        path = self.fds.get(fd, _UNKNOWN)
        if path is _UNKNOWN:
            raise _bad_descriptor(fd)
        self._fault(path, "write")
        if path is None:
            return os.pwrite(fd, data, position)
        state = self._state(path, fd)
        n = len(data)
        self._save(state, path, position, position + n)
        done = os.pwrite(fd, data, position)
        state.last_write = (position, bytes(memoryview(data)[:done]))
        self.modified[path] = self._now_ms()
        self.writes += 1
        return done

    def write(self, fd: int, data: Any) -> int:
        if fd not in self.fds:
            raise _bad_descriptor(fd)
        position = os.lseek(fd, 0, os.SEEK_CUR)
        done = self.pwrite(fd, data, position)
        os.lseek(fd, position + done, os.SEEK_SET)
        return done

    def fsync(self, fd: int) -> None:
        path = self.fds.get(fd, _UNKNOWN)
        if path is _UNKNOWN:
            raise _bad_descriptor(fd)
        self._fault(path, "fsync")
        self.fsyncs += 1
        if path is not None:
            self.states.pop(path, None)

    def ftruncate(self, fd: int, length: int) -> None:
        path = self.fds.get(fd, _UNKNOWN)
        if path is _UNKNOWN:
            raise _bad_descriptor(fd)
        if path is None:
            os.ftruncate(fd, length)
            return
        state = self._state(path, fd)
        self._save(state, path, length, state.durable_size)
        os.ftruncate(fd, length)
        last = state.last_write
        if last is not None and last[0] + len(last[1]) > length:
            state.last_write = (last[0], last[1][:max(0, length - last[0])]) if last[0] < length else None
        self.modified[path] = self._now_ms()

    def _move(self, src: str, dst: str) -> None:
        """The records of ``src`` (a file, or everything under a directory) now belong to ``dst``."""
        prefix = src + os.sep
        for table in (self.states, self.modified):
            table.pop(dst, None)  # type: ignore[attr-defined]
            for key in [k for k in table if k == src or k.startswith(prefix)]:
                table[dst + key[len(src):]] = table.pop(key)  # type: ignore[index]
        for fd, path in list(self.fds.items()):
            if path is not None and (path == src or path.startswith(prefix)):
                self.fds[fd] = dst + path[len(src):]
            elif path == dst:
                self.fds[fd] = None  # the file replaced: its descriptors write to an orphan

    def replace(self, src: Any, dst: Any) -> None:
        self._check_sealed()
        s, d = os.path.abspath(src), os.path.abspath(dst)
        os.replace(s, d)
        self._move(s, d)

    def rename(self, src: Any, dst: Any) -> None:
        self._check_sealed()
        s, d = os.path.abspath(src), os.path.abspath(dst)
        os.rename(s, d)
        self._move(s, d)

    def _forget(self, path: str) -> None:
        prefix = path + os.sep
        for table in (self.states, self.modified):
            for key in [k for k in table if k == path or k.startswith(prefix)]:
                del table[key]  # type: ignore[attr-defined]
        for fd, p in list(self.fds.items()):
            if p is not None and (p == path or p.startswith(prefix)):
                self.fds[fd] = None

    def unlink(self, path: Any, *, dir_fd: Any = None) -> None:
        self._check_sealed()
        p = os.path.abspath(path)
        os.unlink(p)
        self._forget(p)

    def rmtree(self, path: Any, ignore_errors: bool = False, onerror: Any = None) -> None:
        self._check_sealed()
        p = os.path.abspath(path)
        self._forget(p)
        shutil.rmtree(p, ignore_errors=ignore_errors, onerror=onerror)

    def modified_ms(self, path: Any) -> int:
        return self.modified.get(os.path.abspath(path), WALL_CLOCK_START_MS)

    # -- crashes ---------------------------------------------------------------------------
    def crash(self, machine: str, power_loss: bool) -> list[str]:
        """The machine's process died (and, with ``power_loss``, the machine lost power):
        close its descriptors; with power lost, put its files back to what is durable plus,
        maybe, a torn prefix of each file's last write. Returns the files that lost bytes
        (paths relative to the machine's directory), sorted."""
        for fd in sorted(fd for fd, m in self.fd_machine.items() if m == machine):
            self.fds.pop(fd, None)
            self.fd_machine.pop(fd, None)
            try:
                os.close(fd)
            except OSError:
                pass
        if not power_loss:
            return []
        base = os.path.join(self.root, machine) + os.sep
        lost = []
        for path in sorted(p for p in self.states if p.startswith(base)):
            state = self.states.pop(path)
            if not os.path.isfile(path):
                continue
            fd = os.open(path, os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
                for position, old in reversed(state.undo):
                    os.pwrite(fd, old, position)
                os.ftruncate(fd, state.durable_size)
                last = state.last_write
                kept = 0
                if last is not None and last[1] and self.rng.random() < 0.5:
                    kept = self.rng.randrange(1, len(last[1]) + 1)
                    os.pwrite(fd, last[1][:kept], last[0])
                # Lost: durable bytes overwritten, or unsynced ones beyond the durable size not all
                # given back by the torn write (only when it was the one unsynced write, kept whole).
                whole = last is not None and kept == len(last[1]) and last[0] == state.durable_size \
                    and last[0] + kept == size
                changed = bool(state.undo) or (size > state.durable_size and not whole)
            finally:
                os.close(fd)
            if changed:
                lost.append(os.path.relpath(path, base))
        if self.trace is not None:
            self.trace.event(machine, "disk-crash", f"{len(lost)} files lost unsynced bytes: "
                             + ", ".join(lost[:8]) + (" ..." if len(lost) > 8 else ""))
        return lost

    def close_all(self) -> None:
        """The run is over: every descriptor closed, and the disk sealed (no open, rename,
        replace, unlink or rmtree reaches a file after this: a dead process's clean-up run by
        the garbage collector cannot touch a live incarnation's files)."""
        self.sealed = True
        for fd in sorted(self.fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()
        self.fd_machine.clear()
