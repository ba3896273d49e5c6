"""The length-prefix Framer, h11-style: whole input, a byte at a time, many frames per chunk,
trailing partial data kept; oversized and negative sizes refused before any allocation."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, strategies as st

from protocol.framing import Framer, FrameTooLarge, NegativeFrameSize, frame

from .kafka_values import FAST

BODIES = [b"", b"a", b"\x00\x00\x00\x04", bytes(range(256)) * 3]
STREAM = b"".join(frame(b) for b in BODIES)


def feed_all(framer: Framer, chunks) -> list[bytes]:
    return [bytes(f) for chunk in chunks for f in framer.feed(chunk)]


def test_frame_helper() -> None:
    assert frame(b"ab", b"c") == b"\x00\x00\x00\x03abc"
    assert frame() == b"\x00\x00\x00\x00"


def test_whole_input() -> None:
    framer = Framer(1 << 20)
    frames = framer.feed(STREAM)
    assert [bytes(f) for f in frames] == BODIES
    assert all(type(f) is bytearray for f in frames)  # writable: offsets are stamped in place
    assert framer.buffered == 0


@pytest.mark.parametrize("gather", [False, True])
def test_byte_at_a_time(gather) -> None:
    framer = Framer(1 << 20, gather=gather)
    out, boundaries, pos = [], set(), 0
    for b in BODIES:
        pos += 4 + len(b)
        boundaries.add(pos)
    for i in range(len(STREAM)):
        got = framer.feed(STREAM[i:i + 1])
        assert len(got) == (1 if i + 1 in boundaries else 0), i  # a frame appears with its last byte, not before
        out += [bytes(f) for f in got]
        if i + 1 in boundaries:
            assert framer.buffered == 0
    assert out == BODIES


def test_many_frames_in_one_chunk_then_a_partial_tail() -> None:
    framer = Framer(1 << 20)
    tail = frame(b"tail-frame")
    got = framer.feed(STREAM + tail[:7])
    assert [bytes(f) for f in got] == BODIES
    assert framer.buffered == 7
    assert framer.feed(b"") == []
    assert [bytes(f) for f in framer.feed(tail[7:] + tail[:2])] == [b"tail-frame"]
    assert framer.buffered == 2  # part of the next size prefix is kept, too
    assert [bytes(f) for f in framer.feed(tail[2:])] == [b"tail-frame"]


@pytest.mark.parametrize("gather", [False, True])
@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(0, 60), max_size=12),
       st.sampled_from([bytes, bytearray, memoryview]))
@FAST
def test_any_chunking_gives_the_same_frames(gather, bodies, cuts, kind) -> None:
    stream = b"".join(frame(b) for b in bodies)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    framer = Framer(100, gather=gather)
    got = []
    for a, b in zip(points, points[1:]):
        frames = framer.feed(kind(stream[a:b]))
        assert all(type(f) is bytearray for f in frames)
        got += [bytes(f) for f in frames]
        # what is held is the partial frame's bytes so far, size prefix included
        assert framer.buffered == b - sum(4 + len(x) for x in got)
    assert got == bodies and framer.buffered == 0


@pytest.mark.parametrize("gather", [False, True])
@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(0, 60), max_size=12))
@FAST
def test_missing_is_exactly_what_the_partial_frame_still_lacks(gather, bodies, cuts) -> None:
    """``missing`` (what SO_RCVLOWAT is set from): once a partial frame's size prefix is in, the
    bytes of that frame the stream has not delivered yet, never more; 0 before."""
    stream = b"".join(frame(b) for b in bodies)
    ends, pos = [], 0
    for b in bodies:
        pos += 4 + len(b)
        ends.append(pos)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    framer = Framer(100, gather=gather)
    for a, b in zip(points, points[1:]):
        framer.feed(stream[a:b])
        held = framer.buffered
        if held >= 4:
            end = next(e for e in ends if e > b)  # the frame being read ends there
            assert framer.missing == end - b
        else:
            assert framer.missing == 0
    assert framer.missing == 0


def test_frames_do_not_alias_the_callers_chunk() -> None:
    chunk = bytearray(frame(b"abc"))
    (f,) = Framer(10).feed(chunk)
    chunk[4:7] = b"xyz"
    assert f == b"abc"


def test_a_large_frame_in_small_chunks_grows_one_buffer() -> None:
    """The partial frame is appended to in place, not copied anew on every feed (quadratic)."""
    framer = Framer(1 << 20)
    data = frame(b"x" * 100_000)
    chunks = [data[i:i + 1000] for i in range(0, len(data), 1000)]
    assert framer.feed(chunks[0]) == []
    held = framer.partial
    for chunk in chunks[1:-1]:
        assert framer.feed(chunk) == []
        assert framer.partial is held
    assert [bytes(f) for f in framer.feed(chunks[-1])] == [b"x" * 100_000]
    assert framer.buffered == 0


def test_max_size_is_inclusive() -> None:
    assert [bytes(f) for f in Framer(3).feed(frame(b"abc"))] == [b"abc"]
    with pytest.raises(FrameTooLarge) as info:
        Framer(3).feed(frame(b"abcd"))
    assert (info.value.size, info.value.limit) == (4, 3)


def test_oversized_frame_is_refused_from_its_prefix_without_allocating() -> None:
    framer = Framer(100 * 1024 * 1024)
    prefix = struct.pack(">i", 2**31 - 1)  # a "2 GiB" frame: the largest size an int32 can say
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge) as info:
            framer.feed(prefix)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.size == 2**31 - 1
    assert peak < 64 * 1024


def test_oversized_size_split_across_feeds() -> None:
    framer = Framer(10)
    prefix = struct.pack(">i", 11)
    assert framer.feed(prefix[:3]) == []
    with pytest.raises(FrameTooLarge):
        framer.feed(prefix[3:])


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_negative_size_raises(size) -> None:
    with pytest.raises(NegativeFrameSize):
        Framer(10).feed(struct.pack(">i", size) + b"rest")


# -- gather=True (a client's responses): the same frames (the tests above run in both modes),
# each byte copied once ----------


def test_a_gathered_frame_holds_its_chunks_and_joins_them_once() -> None:
    """Chunks of ``bytes`` are held as they are (no copy) until the frame is whole, then joined
    once (a 1 MB fetch response: one copy of each byte, not two)."""
    framer = Framer(1 << 20, gather=True)
    data = frame(b"x" * 100_000) + frame(b"next")
    chunks = [data[i:i + 1000] for i in range(0, len(data), 1000)]
    assert framer.feed(chunks[0]) == []
    assert framer.pending_frame_size == 100_004
    for i, chunk in enumerate(chunks[1:-1], 1):
        assert framer.feed(chunk) == []
        assert len(framer._frame) == i + 1 and framer._frame[-1].obj is chunk  # a view of it, not a copy
    [big, small] = framer.feed(chunks[-1])
    assert type(big) is bytearray and big == b"x" * 100_000 and small == b"next"
    assert framer.buffered == 0 and framer.pending_frame_size == 0


def test_gathered_frames_do_not_alias_a_reused_chunk() -> None:
    framer = Framer(100, gather=True)
    chunk = bytearray(frame(b"abcdef")[:6])
    assert framer.feed(chunk) == []
    chunk[4:6] = b"zz"  # the caller's buffer is reused
    assert [bytes(f) for f in framer.feed(memoryview(b"cdef"))] == [b"abcdef"]


def test_gathered_oversized_and_negative_sizes_are_refused_before_allocating() -> None:
    framer = Framer(10, gather=True)
    assert framer.feed(struct.pack(">i", 11)[:3]) == []
    with pytest.raises(FrameTooLarge):
        framer.feed(struct.pack(">i", 11)[3:])
    with pytest.raises(NegativeFrameSize):
        Framer(10, gather=True).feed(struct.pack(">i", -1) + b"rest")
    framer = Framer(100 * 1024 * 1024, gather=True)
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge):
            framer.feed(struct.pack(">i", 2**31 - 1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


# -- reads into the framer: buffer() / filled() (asyncio.BufferedProtocol) ----------------------


def read_into(framer: Framer, stream: bytes, reads) -> list[bytes]:
    """A transport reading ``stream`` into ``framer.buffer()``, each read at most the size asked
    (``reads``: the sizes offered, cycled; 0 = as much as the buffer takes)."""
    got: list[bytes] = []
    pos, i = 0, 0
    while pos < len(stream):
        buf = framer.buffer()
        assert len(buf) > 0 and not buf.readonly
        want = reads[i % len(reads)] if reads else 0
        i += 1
        n = min(len(buf), len(stream) - pos, want or len(buf))
        buf[:n] = stream[pos:pos + n]
        pos += n
        frames = framer.filled(n)
        assert all(type(f) is bytearray for f in frames)
        got += [bytes(f) for f in frames]
        assert framer.buffered == pos - sum(4 + len(x) for x in got)
    return got


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(0, 700), max_size=12),
       st.sampled_from([4, 64, 100, 1 << 20]))
@FAST
def test_reads_into_the_framer_give_the_frames_feed_gives(bodies, reads, direct_max) -> None:
    """Any read sizes, frames split anywhere (their size prefixes too), frames up to DIRECT_MAX
    read into their own bytearray and larger ones gathered: the frames ``feed`` gives."""
    import protocol.framing as framing
    stream = b"".join(frame(b) for b in bodies)
    saved = framing.DIRECT_MAX, framing.READ_BUFFER_SIZE
    framing.DIRECT_MAX, framing.READ_BUFFER_SIZE = direct_max, 128
    try:
        framer = Framer(1000, gather=True)
        assert read_into(framer, stream, reads) == bodies
    finally:
        framing.DIRECT_MAX, framing.READ_BUFFER_SIZE = saved
    assert framer.buffered == 0 and framer.missing == 0


def test_the_rest_of_a_begun_frame_is_read_straight_into_it() -> None:
    """A frame whose start came with a read gets its own bytearray: the next reads land in it
    (buffer() is a view of it, no read buffer in between), and it is the frame handed out."""
    body = bytes(range(256)) * 400  # 100 KiB: more than one read buffer
    stream = frame(b"x") + frame(body)
    framer = Framer(1 << 20, gather=True)
    first = framer.buffer()
    first[:len(stream[:20_000])] = stream[:20_000]
    assert [bytes(f) for f in framer.filled(20_000)] == [b"x"]
    assert framer.buffered == 20_000 - 5 and framer.missing == len(body) - (20_000 - 9)
    rest = framer.buffer()
    assert len(rest) == framer.missing
    target = rest.obj
    rest[:] = stream[20_000:]
    (f,) = framer.filled(len(rest))
    assert f is target and bytes(f) == body
    assert framer.buffered == 0
    again = framer.buffer()
    assert again.obj is first.obj  # back to the read buffer


def test_frames_read_into_the_framer_do_not_alias_its_read_buffer() -> None:
    framer = Framer(100, gather=True)
    buf = framer.buffer()
    buf[:7] = frame(b"abc")
    (f,) = framer.filled(7)
    buf = framer.buffer()
    buf[:7] = frame(b"xyz")
    assert bytes(f) == b"abc" and [bytes(g) for g in framer.filled(7)] == [b"xyz"]


def test_feed_after_a_read_into_the_framer_goes_on_with_its_frame() -> None:
    framer = Framer(100, gather=True)
    stream = frame(b"0123456789") + frame(b"ab")
    framer.buffer()[:6] = stream[:6]
    assert framer.filled(6) == []
    assert [bytes(f) for f in framer.feed(stream[6:])] == [b"0123456789", b"ab"]


def test_sizes_read_into_the_framer_are_checked_before_allocating() -> None:
    framer = Framer(100, gather=True)
    framer.buffer()[:4] = struct.pack(">i", 101)
    with pytest.raises(FrameTooLarge):
        framer.filled(4)
    framer = Framer(100, gather=True)
    framer.buffer()[:4] = struct.pack(">i", -1)
    with pytest.raises(NegativeFrameSize):
        framer.filled(4)


def _feed_all(chunks, max_size, compiled):
    """Every feed's frames or error, and what stays buffered, with protocol/_produce_codec.c's
    split_frames (compiled) or feed's own loop (its reference)."""
    import protocol.framing as framing
    saved = framing._split_frames
    if not compiled:
        framing._split_frames = None
    try:
        f = Framer(max_size)
        out = []
        for chunk in chunks:
            try:
                out.append([bytes(x) for x in f.feed(chunk)])
            except (FrameTooLarge, NegativeFrameSize) as exc:
                out.append((type(exc), str(exc)))
                f = Framer(max_size)
            out.append((f.buffered, f.pending_frame_size))
        return out
    finally:
        framing._split_frames = saved


def test_the_compiled_split_is_built() -> None:
    import protocol.framing as framing
    assert framing._split_frames is not None, "protocol._produce_codec is not built: run `make test-deps`"


@given(st.lists(st.binary(max_size=12), max_size=6), st.lists(st.integers(0, 80), max_size=5),
       st.lists(st.sampled_from([b"\xff\xff\xff\xfe", b"\x00\x00\x01\x00", b"\x00\x00\x00\x00", b"\x00"]), max_size=2),
       st.integers(0, 20), st.sampled_from(["bytes", "view", "bytearray"]))
def test_the_compiled_split_feeds_as_the_python_loop(bodies, cuts, junk, max_size, kind) -> None:
    """Framer.feed through split_frames gives the frames, errors (a negative or too large size)
    and partial state feed's Python loop gives, however the stream is cut."""
    stream = b"".join(frame(b) for b in bodies) + b"".join(junk)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in zip(points, points[1:])]
    chunks = [memoryview(c) if kind == "view" else bytearray(c) if kind == "bytearray" else c for c in chunks]
    assert _feed_all(chunks, max_size, True) == _feed_all(chunks, max_size, False)


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=8), st.binary(max_size=6), st.integers(1, 12))
@FAST
def test_reads_of_one_whole_frame_each_give_the_frames(bodies, partial, cut) -> None:
    """filled()'s shortcut (a read that is exactly one frame: a follower's Fetch response) gives
    a copy of the frame, not a view of the read buffer the next read overwrites; after a read
    that left part of a frame (or of its size), the next whole-frame-sized read goes on with it."""
    framer = Framer(1000, gather=True)
    for body in bodies:
        data = frame(body)
        buf = framer.buffer()
        buf[:len(data)] = data
        frames = framer.filled(len(data))
        assert [bytes(f) for f in frames] == [body] and all(type(f) is bytearray for f in frames)
        buf[:len(data)] = b"\xee" * len(data)
        assert bytes(frames[0]) == body
    stream = frame(partial) + frame(bodies[0])
    cut = min(cut, len(partial) + 3)  # inside the first frame: its size, or its body
    got: list[bytes] = []
    for read in (stream[:cut], stream[cut:cut + 4 + len(bodies[0])], stream[cut + 4 + len(bodies[0]):]):
        while read:  # (one read, unless a begun frame's own bytearray takes less)
            buf = framer.buffer()
            n = min(len(buf), len(read))
            buf[:n] = read[:n]
            got += [bytes(f) for f in framer.filled(n)]
            read = read[n:]
    assert got == [partial, bodies[0]]
    assert framer.buffered == 0 and framer.missing == 0


def _reads(framer: Framer, reads: list[bytes]) -> list[bytes]:
    got: list[bytes] = []
    for read in reads:
        buf = framer.buffer()
        assert len(buf) >= len(read)
        buf[:len(read)] = read
        got += [bytes(f) for f in framer.filled(len(read))]
    return got


def test_a_read_that_only_looks_like_one_whole_frame_goes_on_with_the_begun_one() -> None:
    """filled()'s shortcut is for a read that starts a frame: the rest of a size prefix, or of
    a gathered frame's body, whose first 4 bytes read as the read's size less 4, is not one."""
    body = bytes(252)
    # a size prefix split after its first byte: the rest, 00 00 01, and the body's first byte,
    # 00, read as 256: the read is 260 bytes long
    assert _reads(Framer(1000, gather=True), [frame(b"\x00")[:1], frame(b"\x00")[1:] + frame(body)]) == \
        [b"\x00", body]
    import protocol.framing as framing
    saved = framing.DIRECT_MAX
    framing.DIRECT_MAX = 4  # (a frame above it is gathered: its parts held in _frame)
    try:
        gathered = b"ab" + struct.pack(">i", 4) + b"wxyz"
        data = frame(gathered)
        assert _reads(Framer(1000, gather=True), [data[:6], data[6:]]) == [gathered]  # 8 bytes, "4" first
    finally:
        framing.DIRECT_MAX = saved


def test_a_read_of_one_whole_frame_over_max_size_is_refused() -> None:
    framer = Framer(10, gather=True)
    data = frame(bytes(11))
    framer.buffer()[:len(data)] = data
    with pytest.raises(FrameTooLarge):
        framer.filled(len(data))
