"""Kafka's ``AbstractRequest.getErrorResponse``: the response that gives one error to
everything a request asked about, for when a handler fails unexpectedly (the request is
answered UNKNOWN_SERVER_ERROR and the connection stays open).

Kafka writes one per request class; here one walk over the schemas does it, because a
response mirrors its request: each array of structs in the request (topics, partitions,
resources) has a counterpart in the response (the one of the same name, else the only one on both sides),
each element echoes the request element's identifying fields (name, topic, partition index,
resource type and name) and carries ``error_code`` / ``error_message``; offsets and
timestamps are -1 and every other field has its default.
"""

from __future__ import annotations

from typing import Any, Sequence

from protocol.schema import Field

# Request field name -> the response field that echoes it, where Kafka renamed it.
_ALIASES = {"partition": ("partition", "partition_index", "index"), "index": ("index", "partition_index"),
            "partition_index": ("partition_index", "partition", "index"), "topic": ("topic", "name"),
            "name": ("name", "topic")}
_MINUS_ONE = ("offset", "timestamp", "base_offset", "log_append_time_ms", "log_start_offset", "high_watermark",
              "last_stable_offset", "end_offset", "leader_epoch", "leader_id", "producer_id", "producer_epoch",
              "committed_offset", "committed_leader_epoch", "node_id", "generation_id")


def _active(fields: Sequence[Field], version: int) -> list[Field]:
    return [f for f in fields if f.active(version)]


def _struct_arrays(fields: Sequence[Field]) -> list[Field]:
    return [f for f in fields if f.type.startswith("[]") and f.fields]


# Response array -> the request arrays it answers, where Kafka named them differently and the
# request has other arrays too (Fetch v7+: topics and forgotten_topics_data).
_ARRAY_ALIASES = {"responses": ("topics", "topic_data")}


def _counterpart(resp_field: Field, resp_arrays: list[Field], req_arrays: list[Field]) -> Field | None:
    for name in (resp_field.name, *_ARRAY_ALIASES.get(resp_field.name, ())):
        for f in req_arrays:
            if f.name == name:
                return f
    return req_arrays[0] if len(req_arrays) == 1 and len(resp_arrays) == 1 else None


def _mirror(resp_fields: Sequence[Field], req_fields: Sequence[Field], req: Any, version: int, code: int,
            message: str | None) -> dict:
    resp_active = _active(resp_fields, version)
    out: dict = {}
    names = {f.name for f in resp_active}
    for f in resp_active:
        if f.name == "error_code":
            out["error_code"] = code
        elif f.name == "error_message":
            out["error_message"] = message
        elif f.type == "records":
            out[f.name] = b""  # Kafka never sends null records (librdkafka rejects them)
        elif f.name in _MINUS_ONE and f.type in ("int32", "int64", "int16"):
            out[f.name] = -1
    if req is None:
        return out
    req_active = _active(req_fields, version)
    for rf in req_active:
        if rf.type.startswith("[]") or rf.fields:
            continue
        for alias in _ALIASES.get(rf.name, (rf.name,)):
            if alias in names and alias not in out:
                value = req.get(rf.name)
                if value is not None:
                    out[alias] = value
                break
    req_arrays = _struct_arrays(req_active)
    resp_arrays = _struct_arrays(resp_active)
    for f in resp_arrays:
        counterpart = _counterpart(f, resp_arrays, req_arrays)
        elements = req.get(counterpart.name) if counterpart is not None else None
        out[f.name] = [_mirror(f.fields, counterpart.fields, el, version, code, message)  # type: ignore[union-attr]
                       for el in (elements or [])]
    return out


def error_response_body(api: Any, version: int, request: Any, code: int, message: str | None = None) -> dict:
    """The body of ``api``'s response (version ``version``) that answers every part of the
    parsed ``request`` with ``code``."""
    return _mirror(api.response.fields, api.request.fields, request, version, code, message)
