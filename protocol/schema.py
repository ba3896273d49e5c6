"""A small declarative layer that turns Kafka-style field lists into construct schemas.

Each API is written once, as Kafka's JSON schemas describe it (field, type, versions,
nullable versions, tags), and ``Message.schema(version)`` builds the interpreted construct
struct for one version: flexible versions swap in compact strings/arrays/bytes and a
tagged-field block. The definitions live in ``protocol/messages/``; tests check them
field by field against the reference JSON and byte for byte against kafka-python.

Names are Kafka's, in snake_case (``ThrottleTimeMs`` -> ``throttle_time_ms``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Sequence

from construct import Construct, ConstructError, Container

from . import primitives as P

MAX_VERSION = 0x7FFF
Buffer = bytes | bytearray | memoryview


def version_range(spec: str | None) -> tuple[int, int]:
    """'3+' -> (3, MAX), '0-5' -> (0, 5), '4' -> (4, 4), 'none' -> empty range (1, 0)."""
    if spec is None or spec == "none":
        return (1, 0)
    spec = spec.strip()
    if spec.endswith("+"):
        return (int(spec[:-1]), MAX_VERSION)
    if "-" in spec:
        lo, hi = spec.split("-")
        return (int(lo), int(hi))
    return (int(spec), int(spec))


def _in(rng: tuple[int, int], v: int) -> bool:
    return rng[0] <= v <= rng[1]


_PRIMITIVES: dict[str, tuple[Construct, Any]] = {
    "int8": (P.Int8, 0), "int16": (P.Int16, 0), "uint16": (P.UInt16, 0), "int32": (P.Int32, 0),
    "int64": (P.Int64, 0), "float64": (P.Float64, 0.0), "bool": (P.Bool, False), "uuid": (P.UUIDType, P.ZERO_UUID),
}
_NULL = object()  # "default is null"


@dataclass
class Field:
    """One field. ``type`` is a primitive name, 'string', 'bytes', 'records', '[]<primitive>',
    or '[]Struct'/'Struct' together with ``fields``."""

    name: str
    type: str
    versions: str = "0+"
    nullable: str | None = None
    default: Any = None
    tag: int | None = None
    tagged: str | None = None
    fields: Sequence["Field"] = field(default_factory=list)
    flexible: str | None = None  # per-field override (RequestHeader.client_id: 'none')

    def __post_init__(self) -> None:
        self._versions = version_range(self.versions)
        self._nullable = version_range(self.nullable)
        self._tagged = version_range(self.tagged)
        self._flex_override = None if self.flexible is None else version_range(self.flexible)

    def active(self, v: int) -> bool:
        return _in(self._versions, v)

    def is_tagged(self, v: int) -> bool:
        return self.tag is not None and _in(self._tagged, v)

    def default_value(self, v: int) -> Any:
        nullable = _in(self._nullable, v)
        if self.default is not None:
            if self.default == "null":
                return None
            return self.default
        base = self.type[2:] if self.type.startswith("[]") else self.type
        if self.type.startswith("[]"):
            return []
        if base in _PRIMITIVES:
            return _PRIMITIVES[base][1]
        if base == "string":
            return ""
        if base == "records":  # Kafka: records default to null, bytes to empty
            return None if nullable else b""
        if base == "bytes":
            return b""
        # A struct defaults to a fresh instance with each of its fields at its own default, as
        # Kafka's generated code does (``new LeaderIdAndEpoch()``): an absent tagged struct
        # decodes to that, and a struct equal to it is not written.
        return Container((f.name, f.default_value(v)) for f in self.fields if f.active(v))

    def construct_for(self, v: int, flexible: bool) -> Construct:
        if self._flex_override is not None:
            flexible = flexible and _in(self._flex_override, v)
        nullable = _in(self._nullable, v)
        t = self.type
        if t.startswith("[]"):
            inner = t[2:]
            if inner in _PRIMITIVES:
                sub = _PRIMITIVES[inner][0]
            elif inner == "string":
                sub = P.KString(compact=flexible)
            else:
                sub = build_struct(inner, self.fields, v, flexible)
            return P.KArray(sub, compact=flexible, nullable=nullable)
        if t in _PRIMITIVES:
            return _PRIMITIVES[t][0]
        if t == "string":
            return P.KString(compact=flexible, nullable=nullable)
        if t in ("bytes", "records"):
            return P.KBytes(compact=flexible, nullable=nullable)
        return build_struct(t, self.fields, v, flexible)


def build_struct(name: str, fields: Sequence[Field], v: int, flexible: bool) -> P.TaggedStruct:
    regular: list[P.FieldSpec] = []
    tagged: dict[int, P.FieldSpec] = {}
    absent: list[tuple[str, Any]] = []
    for f in fields:
        if not f.active(v):
            if not any(g.name == f.name and g.active(v) for g in fields):
                absent.append((f.name, f.default_value(v)))
            continue
        entry = (f.name, f.construct_for(v, flexible), f.default_value(v))
        tag = f.tag if f.is_tagged(v) else None
        if flexible and tag is not None:
            tagged[tag] = entry
        elif tag is not None:
            continue  # tagged-only fields do not exist in non-flexible versions
        else:
            regular.append(entry)
    return P.TaggedStruct(name, regular, tagged, flexible, absent)


class SchemaError(ValueError):
    """Bytes that do not decode as the message/version claimed."""


class Message:
    """An API message (request or response) over its valid versions."""

    def __init__(self, name: str, api_key: int | None, valid: str, flexible: str, fields: Sequence[Field]) -> None:
        self.name = name
        self.api_key = api_key
        self.valid = version_range(valid)
        self.flexible_range = version_range(flexible)
        self.fields = list(fields)
        self._schemas: dict[int, P.TaggedStruct] = {}

    @property
    def min_version(self) -> int:
        return self.valid[0]

    @property
    def max_version(self) -> int:
        return self.valid[1]

    def is_flexible(self, version: int) -> bool:
        return _in(self.flexible_range, version)

    def schema(self, version: int) -> P.TaggedStruct:
        s = self._schemas.get(version)
        if s is None:
            if not _in(self.valid, version):
                raise ValueError(f"{self.name} v{version} is outside {self.valid[0]}-{self.valid[1]}")
            s = build_struct(self.name, self.fields, version, self.is_flexible(version))
            self._schemas[version] = s
        return s

    def parse(self, version: int, data: Buffer, offset: int = 0) -> Container:
        """Decode ``data[offset:]``; trailing bytes are ignored, as Kafka does."""
        stream = io.BytesIO(data if offset == 0 else memoryview(data)[offset:])
        try:
            return self.schema(version)._parsereport(stream, {}, self.name)
        except ConstructError as exc:
            raise SchemaError(f"{self.name} v{version}: {exc}") from None

    def parse_with_size(self, version: int, data: Buffer, offset: int = 0) -> tuple[Container, int]:
        stream = io.BytesIO(memoryview(data)[offset:])
        try:
            obj = self.schema(version)._parsereport(stream, {}, self.name)
        except ConstructError as exc:
            raise SchemaError(f"{self.name} v{version}: {exc}") from None
        return obj, stream.tell()

    def build(self, version: int, obj: Any) -> bytes:
        stream = io.BytesIO()
        self.schema(version)._build(obj, stream, {}, self.name)
        return stream.getvalue()

    def __repr__(self) -> str:
        return f"<Message {self.name} v{self.valid[0]}-{self.valid[1]}>"


@dataclass(frozen=True)
class Api:
    """A request/response pair under one API key, with the range this broker speaks."""

    key: int
    name: str
    request: Message
    response: Message
    min_version: int
    max_version: int
    advertised_min: int | None = None  # a lower advertised floor (Produce 0-2: advertised, rejected)

    @property
    def advertise(self) -> tuple[int, int]:
        lo = self.min_version if self.advertised_min is None else self.advertised_min
        return (lo, self.max_version)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version
