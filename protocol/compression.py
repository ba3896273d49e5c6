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


def _snappy_decompress(data: bytes, max_size: int | None = None) -> bytes:
    if not bytes(data[:8]) == _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(bytes(data)))
    pos, end, out, total = 16, len(data), [], 0
    while pos < end:
        if pos + 4 > end:
            raise ValueError("truncated xerial snappy block header")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise ValueError("xerial snappy block runs past the data")
        block = bytes(data[pos:pos + size])
        if max_size is not None:
            try:
                total += cramjam.snappy.decompress_raw_len(block)  # read from the block's header
            except Exception as exc:
                raise ValueError(f"snappy data does not decompress: {exc}") from exc
            if total > max_size:
                raise ValueError(f"snappy data decompresses to more than {max_size} bytes")
        try:
            out.append(bytes(cramjam.snappy.decompress_raw(block)))
        except Exception as exc:
            raise ValueError(f"snappy data does not decompress: {exc}") from exc
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


def _too_small(exc: Exception) -> bool:
    """cramjam's complaint when a ``decompress_into`` output buffer is too small."""
    text = str(exc)
    return "whole buffer" in text or "smaller than required" in text


def decompress_bounded(codec: Compression | int, data: bytes | memoryview, max_size: int) -> bytes:
    """``decompress``, refusing (ValueError) data that decompresses to more than ``max_size``
    bytes without ever holding more: a small compressed batch can expand to gigabytes (a
    decompression bomb). Decompresses into a buffer that grows 8x per try, up to the limit."""
    codec = Compression(codec)
    if codec == Compression.NONE:
        return bytes(data)
    raw = bytes(data)
    if codec == Compression.SNAPPY and raw[:8] == _XERIAL_MAGIC:
        return _snappy_decompress(raw, max_size)
    into = {Compression.GZIP: cramjam.gzip.decompress_into, Compression.LZ4: cramjam.lz4.decompress_into,
            Compression.ZSTD: cramjam.zstd.decompress_into, Compression.SNAPPY: cramjam.snappy.decompress_raw_into}[codec]
    size = min(max_size, max(64 * 1024, 8 * len(raw)))
    while True:
        out = bytearray(size + 1)  # one spare byte: a result that fills ``size`` exactly is not cut short
        try:
            n = into(raw, out)
        except Exception as exc:  # cramjam's DecompressionError
            if _too_small(exc) and size < max_size:
                size = min(max_size, size * 8)
                continue
            if _too_small(exc):
                raise ValueError(f"{codec.name.lower()} data decompresses to more than {max_size} bytes") from None
            raise ValueError(f"{codec.name.lower()} data does not decompress: {exc}") from exc
        if n > size:
            if size >= max_size:
                raise ValueError(f"{codec.name.lower()} data decompresses to more than {max_size} bytes")
            size = min(max_size, size * 8)
            continue
        return bytes(memoryview(out)[:n])


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
