"""The four record-batch codecs, all from cramjam (one wheel instead of four C bindings).

Codec ids are the low three bits of the batch attributes. The broker never calls this on
the data path (it stores compressed batches as they are); the client side, the dump tool
and offset-for-timestamp (which must look inside one batch) do.
"""

from __future__ import annotations

import enum
import struct

import cramjam


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | None) -> "Compression":
        if name is None:
            return cls.NONE
        if isinstance(name, int):
            return cls(name)
        key = name.strip().upper()
        if key in ("", "NONE", "UNCOMPRESSED"):
            return cls.NONE
        try:
            return cls[key]
        except KeyError:
            raise ValueError(f"unknown compression codec {name!r} (none, gzip, snappy, lz4, zstd)") from None


# The Java client (and kafka-python) frame snappy in xerial's format: a 16-byte header,
# then blocks of [int32 length][raw snappy]. Other clients send raw snappy; accept both.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")


def _snappy_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[start:start + _XERIAL_BLOCK])))
        out.append(_I32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: bytes) -> bytes:
    if not bytes(data[:8]) == _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(bytes(data)))
    pos, end, out = 16, len(data), []
    while pos < end:
        if pos + 4 > end:
            raise ValueError("truncated xerial snappy block header")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise ValueError("xerial snappy block runs past the data")
        out.append(bytes(cramjam.snappy.decompress_raw(bytes(data[pos:pos + size]))))
        pos += size
    return b"".join(out)


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(bytes(data)))
    if codec == Compression.SNAPPY:
        return _snappy_compress(data)
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(bytes(data)))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(bytes(data)))
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: Compression | int, data: bytes | memoryview) -> bytes:
    codec = Compression(codec)
    if codec == Compression.NONE:
        return bytes(data)
    try:
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(bytes(data)))
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(data)))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise ValueError(f"{codec.name.lower()} data does not decompress: {exc}") from exc
    raise ValueError(f"unknown compression codec {codec}")
