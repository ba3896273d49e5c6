"""Length-prefixed framing (int32 size, then that many bytes), sans-I/O.

``Framer.feed(data)`` returns the complete frames found so far, each a fresh ``bytearray``
(writable, so the broker can stamp offsets into produce batches in place); a partial frame
waits in the buffer. Frames that lie wholly inside one received chunk are sliced straight
out of it (one copy); only a frame that straddles chunks is assembled in the buffer.
A size above ``max_size`` raises ``FrameTooLarge`` before anything is allocated for it.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the {limit}-byte limit")
        self.size = size
        self.limit = limit


class NegativeFrameSize(Exception):
    pass


class Framer:
    __slots__ = ("max_size", "_buf")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()

    def _check(self, size: int) -> None:
        if size < 0:
            raise NegativeFrameSize(f"negative frame size {size}")
        if size > self.max_size:
            raise FrameTooLarge(size, self.max_size)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytearray]:
        frames: list[bytearray] = []
        view = memoryview(data)
        try:
            pos = self._complete(view, frames) if self._buf else 0
            end = len(view)
            while end - pos >= 4:
                (size,) = _SIZE.unpack_from(view, pos)
                self._check(size)
                stop = pos + 4 + size
                if stop > end:
                    break
                frames.append(bytearray(view[pos + 4:stop]))
                pos = stop
            if pos < end:
                self._buf = bytearray(view[pos:])  # a partial frame (or size prefix): kept from here on
        finally:
            view.release()
        return frames

    def _complete(self, view: memoryview, frames: list[bytearray]) -> int:
        """A partial frame is waiting: grow it in place with what of ``view`` it still lacks
        (amortised O(1) per byte; copying it anew on every feed would make a large frame
        arriving in small chunks quadratic), and hand it out once whole. Only the pending
        frame's bytes are copied into the buffer: the frames after it are sliced out of
        ``view`` like any others. Returns how much of ``view`` was taken."""
        buf = self._buf
        taken = 0
        if len(buf) < 4:
            taken = min(4 - len(buf), len(view))
            buf += view[:taken]
            if len(buf) < 4:
                return taken
        size: int = _SIZE.unpack_from(buf, 0)[0]
        self._check(size)
        need = min(4 + size - len(buf), len(view) - taken)
        buf += view[taken:taken + need]
        taken += need
        if len(buf) == 4 + size:
            del buf[:4]  # cheap: a bytearray drops its head by moving its start
            frames.append(buf)
            self._buf = bytearray()
        return taken

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def pending_frame_size(self) -> int:
        """Bytes the partial frame in the buffer will take when whole (size prefix included),
        or what is buffered while its size prefix is incomplete; 0 with nothing buffered."""
        buf = self._buf
        if len(buf) < 4:
            return len(buf)
        size: int = _SIZE.unpack_from(buf, 0)[0]
        return 4 + max(0, size)


def frame(*parts: bytes) -> bytes:
    """Prefix the concatenation of ``parts`` with its int32 size."""
    body = b"".join(parts)
    return _SIZE.pack(len(body)) + body
