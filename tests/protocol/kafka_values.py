"""Test helpers for tests/protocol: hypothesis strategies derived from our message DSL,
and conversions between construct Containers and plain values.

A strategy for ``Message`` version ``v`` draws a value tree (dicts, lists, scalars) that
the construct schema can build: every regular field set, nullable fields sometimes None,
arrays empty or not, strings with non-ASCII text, and, in flexible versions, tagged fields
sometimes absent and sometimes set to a value other than their default.
"""

from __future__ import annotations

import importlib
import pkgutil

from hypothesis import HealthCheck, settings, strategies as st

import protocol.messages as messages_pkg
from protocol.schema import Field, Message, version_range

# The examples per case: the whole of tests/protocol has to stay near 30 s on two cores.
FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
TEXT = st.text(max_size=8)  # any code point but surrogates: non-ASCII and multi-byte included
SHORT_LIST = 3


def all_messages() -> list[Message]:
    """Every Message defined in protocol/messages, by name."""
    found: dict[int, Message] = {}
    for mod in pkgutil.iter_modules(messages_pkg.__path__):
        module = importlib.import_module(f"{messages_pkg.__name__}.{mod.name}")
        for value in vars(module).values():
            if isinstance(value, Message):
                found[id(value)] = value
    return sorted(found.values(), key=lambda m: m.name)


def is_nullable(f: Field, v: int) -> bool:
    lo, hi = version_range(f.nullable)
    return lo <= v <= hi


def _scalar(t: str):
    if t in _INT_BITS:
        bits = _INT_BITS[t]
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if t == "uint16":
        return st.integers(0, 0xFFFF)
    if t == "bool":
        return st.booleans()
    if t == "uuid":
        return st.uuids()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return TEXT
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    raise AssertionError(f"no strategy for type {t}")


def field_strategy(f: Field, v: int):
    t = f.type
    if t.startswith("[]"):
        inner = t[2:]
        item = struct_strategy(f.fields, v) if f.fields else _scalar(inner)
        s = st.lists(item, max_size=SHORT_LIST)
    else:
        s = struct_strategy(f.fields, v) if f.fields else _scalar(t)
    if is_nullable(f, v):
        s = st.none() | s
    return s


def struct_strategy(fields, v: int, flexible: bool = True):
    regular, optional = {}, {}
    for f in fields:
        if not f.active(v):
            continue
        if f.is_tagged(v):
            if flexible:
                default = f.default_value(v)
                optional[f.name] = field_strategy(f, v).filter(lambda x, d=default: plain(x) != plain(d))
        else:
            regular[f.name] = field_strategy(f, v)
    return st.fixed_dictionaries(regular, optional=optional)


def message_strategy(msg: Message, v: int):
    return struct_strategy(msg.fields, v, msg.is_flexible(v))


def plain(x):
    """Containers and other dicts -> dict, lists -> list, recursively (construct's Container
    compares keys it hides, like ``_io``; plain dicts make failures readable)."""
    if isinstance(x, dict):
        return {k: plain(val) for k, val in x.items() if not (isinstance(k, str) and k.startswith("_"))}
    if isinstance(x, list):
        return [plain(i) for i in x]
    if isinstance(x, (memoryview, bytearray)):
        return bytes(x)
    return x


def with_absent(fields, out: dict, v: int) -> dict:
    """Add the fields not in version ``v`` at their defaults, as parsing does (a name that is
    active at ``v`` in another declaration keeps its value)."""
    for f in fields:
        if not f.active(v) and f.name not in out:
            out[f.name] = plain(f.default_value(v))
    return out


def complete(fields, tree, v: int):
    """The value a decoder must return for ``tree``: absent tagged fields, and fields the
    version does not have, at their defaults."""
    out = {}
    for f in fields:
        if not f.active(v):
            continue
        if f.name not in tree:
            out[f.name] = plain(f.default_value(v))
            continue
        val = tree[f.name]
        if f.fields and val is not None:
            val = [complete(f.fields, i, v) for i in val] if f.type.startswith("[]") else complete(f.fields, val, v)
        out[f.name] = plain(val)
    return with_absent(fields, out, v)


def first_difference(a: bytes, b: bytes) -> str:
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (f"first difference at byte {n} (lengths {len(a)} vs {len(b)}):\n"
            f"  ours  ...{bytes(a[max(0, n - 8):n + 16]).hex(' ')}\n"
            f"  other ...{bytes(b[max(0, n - 8):n + 16]).hex(' ')}")
