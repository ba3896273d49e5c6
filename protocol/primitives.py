"""construct building blocks for Kafka's wire types.

construct has fixed-width integers and an unsigned LEB128 ``VarInt``; Kafka adds
nullable strings and bytes (length -1), compact variants (unsigned varint of length+1,
0 meaning null) and tagged-field blocks. These classes are interpreted construct only:
each read goes through ``stream_read``, which checks that the bytes are really there, so a
truncated message fails instead of parsing short (construct's ``.compile()`` generates
readers without that check, so these are never compiled).
"""

from __future__ import annotations

import uuid
from typing import IO, Any, Callable, Iterable

from construct import (Adapter, Construct, Container, Flag, Float64b, Int8sb, Int16sb, Int16ub, Int32sb,
                       Int64sb, StreamError, VarInt)
from construct.core import stream_read, stream_write

Int8 = Int8sb
Int16 = Int16sb
UInt16 = Int16ub
Int32 = Int32sb
Int64 = Int64sb
Float64 = Float64b
Bool = Flag


class _UVarInt(Construct):
    """Kafka's unsigned varint (compact lengths, tagged fields): LEB128 like construct's
    ``VarInt``, but at most 5 bytes, as ``ByteUtils.readUnsignedVarint`` enforces (construct
    would read any number of continuation bytes)."""

    def _parse(self, stream: IO[bytes], context: Any, path: str) -> int:
        result = shift = 0
        while True:
            b: int = stream_read(stream, 1, path)[0]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift > 28:
                raise StreamError("unsigned varint longer than 5 bytes", path=path)

    def _build(self, obj: int, stream: IO[bytes], context: Any, path: str) -> int:
        built: int = VarInt._build(obj, stream, context, path)
        return built


UVarInt = _UVarInt()

_INT16 = Int16sb
_INT32 = Int32sb


class _Sized(Construct):
    """A length-prefixed value: int16/int32 length (-1 = null), or compact uvarint (0 = null)."""

    def __init__(self, *, compact: bool, nullable: bool, wide: bool) -> None:
        super().__init__()
        self.compact = compact
        self.nullable = nullable
        self.prefix = _INT32 if wide else _INT16

    def _read_length(self, stream: IO[bytes], context: Any, path: str) -> int:
        n: int
        if self.compact:
            n = UVarInt._parsereport(stream, context, path) - 1
        else:
            n = self.prefix._parsereport(stream, context, path)
        if n < -1:
            raise StreamError(f"negative length {n}", path=path)
        if n == -1 and not self.nullable:
            raise StreamError("null where the field is not nullable", path=path)
        return n

    def _write_length(self, n: int, stream: IO[bytes], context: Any, path: str) -> None:
        if n == -1 and not self.nullable:
            raise StreamError("None given for a non-nullable field", path=path)
        if self.compact:
            UVarInt._build(n + 1, stream, context, path)
        else:
            self.prefix._build(n, stream, context, path)


class KString(_Sized):
    """Kafka string: UTF-8 with an int16 length (or compact); -1/0 is null where nullable."""

    def __init__(self, *, compact: bool = False, nullable: bool = False) -> None:
        super().__init__(compact=compact, nullable=nullable, wide=False)

    def _parse(self, stream: IO[bytes], context: Any, path: str) -> str | None:
        n = self._read_length(stream, context, path)
        if n == -1:
            return None
        raw: bytes = stream_read(stream, n, path)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StreamError(f"string is not UTF-8: {exc}", path=path) from None

    def _build(self, obj: str | None, stream: IO[bytes], context: Any, path: str) -> str | None:
        if obj is None:
            self._write_length(-1, stream, context, path)
            return obj
        data = obj.encode("utf-8")
        if not self.compact and len(data) > 32767:
            raise StreamError("string longer than 32767 bytes", path=path)
        self._write_length(len(data), stream, context, path)
        stream_write(stream, data, len(data), path)
        return obj


class KBytes(_Sized):
    """Kafka bytes (int32 length or compact), returned as ``bytes``; also used for ``records``."""

    def __init__(self, *, compact: bool = False, nullable: bool = False) -> None:
        super().__init__(compact=compact, nullable=nullable, wide=True)

    def _parse(self, stream: IO[bytes], context: Any, path: str) -> bytes | None:
        n = self._read_length(stream, context, path)
        if n == -1:
            return None
        data: bytes = stream_read(stream, n, path)
        return data

    def _build(self, obj: bytes | bytearray | memoryview | None, stream: IO[bytes], context: Any, path: str
               ) -> bytes | bytearray | memoryview | None:
        if obj is None:
            self._write_length(-1, stream, context, path)
            return obj
        data = bytes(obj)
        self._write_length(len(data), stream, context, path)
        stream_write(stream, data, len(data), path)
        return obj


class KArray(_Sized):
    """Kafka array: int32 count (or compact uvarint count+1); null where nullable."""

    def __init__(self, subcon: Construct, *, compact: bool = False, nullable: bool = False) -> None:
        super().__init__(compact=compact, nullable=nullable, wide=True)
        self.subcon = subcon

    def _parse(self, stream: IO[bytes], context: Any, path: str) -> list[Any] | None:
        n = self._read_length(stream, context, path)
        if n == -1:
            return None
        sub = self.subcon
        return [sub._parsereport(stream, context, path) for _ in range(n)]

    def _build(self, obj: Iterable[Any] | None, stream: IO[bytes], context: Any, path: str) -> Iterable[Any] | None:
        if obj is None:
            self._write_length(-1, stream, context, path)
            return obj
        items = list(obj)
        self._write_length(len(items), stream, context, path)
        for item in items:
            self.subcon._build(item, stream, context, path)
        return obj


class _UUID(Adapter):
    def _decode(self, obj: bytes, context: Any, path: str) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(obj))

    def _encode(self, obj: uuid.UUID | bytes | bytearray | None, context: Any, path: str) -> bytes:
        if obj is None:
            return bytes(16)
        if isinstance(obj, (bytes, bytearray)):
            return bytes(obj)
        return obj.bytes


class _Bytes16(Construct):
    def _parse(self, stream: IO[bytes], context: Any, path: str) -> bytes:
        data: bytes = stream_read(stream, 16, path)
        return data

    def _build(self, obj: bytes, stream: IO[bytes], context: Any, path: str) -> bytes:
        stream_write(stream, obj, 16, path)
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        return 16


UUIDType = _UUID(_Bytes16())
ZERO_UUID = uuid.UUID(int=0)


# (name, construct, default) of one field of a TaggedStruct. Constructs are untyped (Any).
FieldSpec = tuple[str, Any, Any]


class TaggedStruct(Construct):
    """A Kafka struct: fields in order, then (flexible versions) a tagged-field block.

    ``fields`` is a list of (name, construct, default); ``tagged`` maps tag -> (name, construct,
    default). Parsing yields one ``Container`` holding regular and known tagged fields alike
    (unknown tags are skipped, as Kafka does); building takes a dict/Container and uses the
    default for anything missing, so callers fill only what they mean. Tagged fields equal to
    their default are not written. ``absent`` lists (name, default) of fields the message has
    only in other versions: parsing sets them to their defaults, so handlers read every field
    the same way whatever the version.
    """

    def __init__(self, name: str, fields: list[FieldSpec], tagged: dict[int, FieldSpec], flexible: bool,
                 absent: Iterable[tuple[str, Any]] = ()) -> None:
        super().__init__()
        self.struct_name = name
        self.fields = fields
        self.tagged = tagged
        self.flexible = flexible
        self.absent = tuple(absent)

    def _parse(self, stream: IO[bytes], context: Any, path: str) -> Any:  # a construct Container
        obj = Container()
        for name, default in self.absent:
            obj[name] = _copy_default(default)
        for name, con, _default in self.fields:
            obj[name] = con._parsereport(stream, context, f"{path} -> {name}")
        if self.flexible:
            for _tag, (name, _con, default) in self.tagged.items():
                obj[name] = _copy_default(default)
            # Writers send tags in ascending order, but Kafka's generated readers accept any
            # order (and a repeated tag overrides the earlier one); so do we.
            count = UVarInt._parsereport(stream, context, path)
            for _ in range(count):
                tag = UVarInt._parsereport(stream, context, path)
                size = UVarInt._parsereport(stream, context, path)
                data = stream_read(stream, size, path)
                known = self.tagged.get(tag)
                if known is not None:
                    name, con, _default = known
                    obj[name] = con.parse(data)
        return obj

    def _build(self, obj: Any, stream: IO[bytes], context: Any, path: str) -> Any:
        get: Callable[[str, Any], Any] = obj.get if hasattr(obj, "get") else (lambda k, d: getattr(obj, k, d))
        for name, con, default in self.fields:
            value = get(name, _MISSING)
            if value is _MISSING:
                value = _copy_default(default)
            con._build(value, stream, context, f"{path} -> {name}")
        if self.flexible:
            present = []
            for tag in sorted(self.tagged):
                name, con, default = self.tagged[tag]
                value = get(name, _MISSING)
                if value is _MISSING or value == default:
                    continue
                present.append((tag, con.build(value)))
            UVarInt._build(len(present), stream, context, path)
            for tag, data in present:
                UVarInt._build(tag, stream, context, path)
                UVarInt._build(len(data), stream, context, path)
                stream_write(stream, data, len(data), path)
        return obj


_MISSING = object()


def _copy_default(default: Any) -> Any:
    """Defaults are shared by every parse and build: hand out copies of the mutable ones."""
    if isinstance(default, list):
        return [_copy_default(x) for x in default]
    if isinstance(default, dict):
        return Container((k, _copy_default(x)) for k, x in default.items())
    return default
