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
        buf = self._buf
        owned = bool(buf)
        if owned:
            # A partial frame is waiting: grow it in place (amortised O(1) per byte; copying it
            # anew on every feed would make a large frame arriving in small chunks quadratic).
            buf += data
            data = buf
        view = memoryview(data)
        end = len(view)
        pos = 0
        try:
            while end - pos >= 4:
                (size,) = _SIZE.unpack_from(view, pos)
                self._check(size)
                stop = pos + 4 + size
                if stop > end:
                    break
                frames.append(bytearray(view[pos + 4:stop]))
                pos = stop
        finally:
            view.release()
        if pos == end:
            self._buf = bytearray()
        elif owned:
            if pos:
                del buf[:pos]
            self._buf = buf
        else:
            self._buf = bytearray(memoryview(data)[pos:])
        return frames

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
