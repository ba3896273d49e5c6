"""Length-prefixed framing (int32 size, then that many bytes), sans-I/O.

``Framer.feed(data)`` returns the complete frames found so far, each a fresh ``bytearray``
(writable, so the broker can stamp offsets into produce batches in place); a partial frame
waits in the buffer. Frames that lie wholly inside one received chunk are sliced straight
out of it (one copy); only a frame that straddles chunks is assembled in the buffer.
A size above ``max_size`` raises ``FrameTooLarge`` before anything is allocated for it.

``gather=True`` (a client reading responses it asked for: a follower's fetches) holds the
chunks of a frame that straddles them (slices of ``bytes`` chunks, no copy; other chunks,
which the caller may reuse, are copied) and joins them once the frame is whole: one copy of
every byte, where growing the buffer and slicing the frame out of it copies it twice or more
(a 1 MB fetch response arrives in ~16 chunks).

``buffer()`` / ``filled(n)`` (a gathering framer read by an ``asyncio.BufferedProtocol``: the
client's connections) take reads into the framer itself: a read lands in the framer's read
buffer, whose whole frames ``filled`` slices out (one copy: ``feed`` gets a chunk the transport
made first, a second copy); the rest of a frame begun there (up to ``DIRECT_MAX`` bytes) is read
straight into that frame's own bytearray, no copy at all.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")

# protocol/_produce_codec.c's split_frames where it is built (feed's loop in one call: every
# request a broker reads, issue 29), else None; feed's loop below is its reference.
try:
    from ._produce_codec import split_frames as _split_frames
except ImportError:
    _split_frames = None  # type: ignore[assignment]

READ_BUFFER_SIZE = 64 * 1024  # ``buffer()``'s read buffer (a framer's own, made on its first read)
DIRECT_MAX = 16 << 20  # a frame up to this size is allocated whole once its size is known; larger ones gather


class FrameTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the {limit}-byte limit")
        self.size = size
        self.limit = limit


class NegativeFrameSize(Exception):
    pass


class Framer:
    __slots__ = ("max_size", "partial", "gather", "_frame", "_need", "_filled", "_into", "_read")

    def __init__(self, max_size: int, gather: bool = False) -> None:
        self.max_size = max_size
        # What ``feed`` holds of a partial frame (its size prefix included), empty when none: a
        # framer that does not gather holds nothing else, so its ``buffered`` is len(partial)
        # (the broker's connections read it after every read, issue 29). Gathering, only a size
        # prefix split across chunks.
        self.partial = bytearray()
        self.gather = gather
        self._frame: list[bytes | memoryview] | None = None  # gather: the chunks of the partial frame's body
        self._need = self._filled = 0  # its size, and the bytes of it held
        self._into: memoryview | None = None  # filled(): the partial frame's own bytearray, read into
        self._read: memoryview | None = None  # buffer()'s read buffer

    def _check(self, size: int) -> None:
        if size < 0:
            raise NegativeFrameSize(f"negative frame size {size}")
        if size > self.max_size:
            raise FrameTooLarge(size, self.max_size)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytearray]:
        if self.gather:
            return self._feed_gathered(data)
        if not self.partial and _split_frames is not None:
            split = _split_frames(data, self.max_size)
            if split is not None:  # (None: a size feed's loop refuses, raising)
                frames, pos = split
                if pos < len(data):
                    self.partial = bytearray(memoryview(data)[pos:])  # a partial frame (or size prefix)
                return frames
        frames = []
        view = memoryview(data)
        try:
            pos = self._complete(view, frames) if self.partial else 0
            end = len(view)
            while end - pos >= 4:
                (size,) = _SIZE.unpack_from(view, pos)
                if size < 0 or size > self.max_size:
                    self._check(size)  # raises
                stop = pos + 4 + size
                if stop > end:
                    break
                frames.append(bytearray(view[pos + 4:stop]))
                pos = stop
            if pos < end:
                self.partial = bytearray(view[pos:])  # a partial frame (or size prefix): kept from here on
        finally:
            view.release()
        return frames

    # -- reads into the framer (asyncio.BufferedProtocol) -----------------------------------

    def buffer(self) -> memoryview:
        """Where the next read goes (``get_buffer``); then call ``filled`` with its size."""
        into = self._into
        if into is not None:
            return into[self._filled:]
        read = self._read
        if read is None:
            read = self._read = memoryview(bytearray(READ_BUFFER_SIZE))
        return read

    def filled(self, n: int) -> list[bytearray]:
        """``n`` bytes were read into ``buffer()``: the frames now whole, as ``feed`` returns them."""
        into = self._into
        if into is not None:
            self._filled += n
            if self._filled < len(into):
                return []
            frame = into.obj
            into.release()
            self._into = None
            return [frame]  # type: ignore[list-item]  # (a memoryview of a bytearray: its obj is one)
        read = self._read
        assert read is not None and self.gather, "filled() without buffer()"
        if n >= 4 and self._frame is None and not self.partial:
            # A read of exactly one whole frame (a follower's every Fetch response at low or half
            # load, issue 29): _feed_gathered's answer, without its loop.
            (size,) = _SIZE.unpack_from(read, 0)
            if size == n - 4 and size <= self.max_size:
                return [bytearray(read[4:n])]
        frames = self._feed_gathered(read[:n])
        parts = self._frame
        if parts is not None and self._need <= DIRECT_MAX:
            # a frame begun in this read: its own bytearray now, the next reads land in it
            frame = bytearray(self._need)
            pos = 0
            for part in parts:
                frame[pos:pos + len(part)] = part
                pos += len(part)
            self._frame = None
            self._into = memoryview(frame)
        return frames

    def _ungather(self) -> None:
        """``feed`` after ``filled`` left a frame to read into: its bytes so far become gathered parts."""
        into = self._into
        assert into is not None
        self._frame, self._need = [bytes(into[:self._filled])], len(into)
        into.release()
        self._into = None

    def _feed_gathered(self, data: bytes | bytearray | memoryview) -> list[bytearray]:
        if self._into is not None:
            self._ungather()
        frames: list[bytearray] = []
        owned = type(data) is bytes  # immutable: its slices can be held without a copy
        view = memoryview(data)
        end = len(view)
        pos = 0
        while pos < end:
            parts = self._frame
            if parts is not None:  # the rest of a frame: its chunks are held, joined once whole
                n = min(self._need - self._filled, end - pos)
                parts.append(view[pos:pos + n] if owned else bytes(view[pos:pos + n]))
                self._filled += n
                pos += n
                if self._filled < self._need:
                    break
                frames.append(bytearray().join(parts))
                for part in parts:
                    if isinstance(part, memoryview):
                        part.release()
                self._frame = None
                continue
            buf = self.partial
            if buf or end - pos < 4:  # a size prefix split across chunks
                take = min(4 - len(buf), end - pos)
                buf += view[pos:pos + take]
                pos += take
                if len(buf) < 4:
                    break
                (size,) = _SIZE.unpack_from(buf, 0)
                self._check(size)
                self.partial = bytearray()
                if size == 0:
                    frames.append(bytearray())
                else:
                    self._frame, self._need, self._filled = [], size, 0
                continue
            (size,) = _SIZE.unpack_from(view, pos)
            self._check(size)
            stop = pos + 4 + size
            if stop <= end:  # wholly in this chunk: sliced out (one copy)
                frames.append(bytearray(view[pos + 4:stop]))
                pos = stop
            else:
                self._frame, self._need, self._filled = [], size, 0
                pos += 4
        if not owned:
            view.release()
        return frames

    def _complete(self, view: memoryview, frames: list[bytearray]) -> int:
        """A partial frame is waiting: grow it in place with what of ``view`` it still lacks
        (amortised O(1) per byte; copying it anew on every feed would make a large frame
        arriving in small chunks quadratic), and hand it out once whole. Only the pending
        frame's bytes are copied into the buffer: the frames after it are sliced out of
        ``view`` like any others. Returns how much of ``view`` was taken."""
        buf = self.partial
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
            self.partial = bytearray()
        return taken

    @property
    def buffered(self) -> int:
        """Bytes of the partial frame received so far (its size prefix included)."""
        if self._frame is not None or self._into is not None:
            return 4 + self._filled
        return len(self.partial)

    @property
    def missing(self) -> int:
        """Bytes the partial frame still lacks, once its size prefix is in (the peer is bound to
        send at least that many more); 0 with no partial frame or part of a prefix only."""
        if self._frame is not None:
            return self._need - self._filled
        if self._into is not None:
            return len(self._into) - self._filled
        buf = self.partial
        if len(buf) < 4:
            return 0
        size: int = _SIZE.unpack_from(buf, 0)[0]
        return max(0, 4 + size - len(buf))

    @property
    def pending_frame_size(self) -> int:
        """Bytes the partial frame in the buffer will take when whole (size prefix included),
        or what is buffered while its size prefix is incomplete; 0 with nothing buffered."""
        if self._frame is not None:
            return 4 + self._need
        if self._into is not None:
            return 4 + len(self._into)
        buf = self.partial
        if len(buf) < 4:
            return len(buf)
        size: int = _SIZE.unpack_from(buf, 0)[0]
        return 4 + max(0, size)


def frame(*parts: bytes) -> bytes:
    """Prefix the concatenation of ``parts`` with its int32 size."""
    body = b"".join(parts)
    return _SIZE.pack(len(body)) + body
