"""Every Message in protocol/messages against Kafka's own JSON message definitions.

The JSON files in ``tests/protocol/schemas/`` are Apache Kafka's (Apache-2.0, headers kept),
copied from shared/kafka-protocol/schemas (the APIs) and shared/kafka-protocol/records (the
KRaft metadata records) so that a fresh clone can run this; ElectLeaders, which the shared
copy lacks, is Kafka 3.9's. For every version the JSON declares valid, each field
(recursively into structs) must agree with our DSL on name and order, type, whether it is
present, nullable, tagged (and its tag), its per-field flexible override, and its default.
A failure lists every disagreement.

kbroker's own tagged fields (tags from ``KBROKER_TOPIC_CONFIGS_TAG`` up, documented in
protocol/messages/control.py) are not Kafka's and are left out of the comparison; a test
below pins where they are.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.messages import APIS, control, request_is_flexible, response_is_flexible
from protocol.schema import MAX_VERSION, Field, Message, version_range

from .kafka_values import all_messages

SCHEMA_DIR = Path(__file__).parent / "schemas"
_COMMENT_LINE = re.compile(r"^\s*//.*$", re.MULTILINE)
_INT_TYPES = {"int8", "int16", "uint16", "int32", "int64"}


def load_kafka_json(name: str) -> dict:
    """A Kafka message JSON with its // comment lines removed and commonStructs inlined."""
    data = json.loads(_COMMENT_LINE.sub("", (SCHEMA_DIR / f"{name}.json").read_text()))
    common = {s["name"]: s["fields"] for s in data.get("commonStructs", [])}

    def inline(fields):
        for f in fields:
            struct_name = f["type"].removeprefix("[]")
            if "fields" not in f and struct_name in common:
                f["fields"] = common[struct_name]
            inline(f.get("fields", []))

    inline(data["fields"])
    return data


def snake(name: str) -> str:
    """Kafka's CamelCase field names in our snake_case: timeoutMs -> timeout_ms, Enable2Pc -> enable2_pc,
    isKRaftController -> is_kraft_controller ("KRaft" is one word)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name.replace("KRaft", "Kraft")).lower()


MESSAGES = all_messages()

# Messages with no Kafka JSON to compare with: the __transaction_state records are not in
# shared/kafka-protocol (tests/protocol/test_transaction_log.py checks them against bytes).
NO_REFERENCE: dict[str, str] = {
    "TransactionLogKey": "no Kafka JSON in shared/kafka-protocol",
    "TransactionLogValue": "no Kafka JSON in shared/kafka-protocol",
}


def kafka_fields(fields: list[Field]) -> list[Field]:
    """``fields`` without kbroker's own tagged fields (tags from KBROKER_TOPIC_CONFIGS_TAG up)."""
    return [f for f in fields if f.tag is None or f.tag < control.KBROKER_TOPIC_CONFIGS_TAG]


def _in(spec: str | None, v: int) -> bool:
    lo, hi = version_range(spec)
    return lo <= v <= hi


def json_default(f: dict, v: int):
    """The default Kafka's generator gives a field (MessageDataGenerator.fieldDefault)."""
    t, raw = f["type"], f.get("default", "")
    if raw == "null":
        return None
    if t.startswith("[]"):
        return []
    if "fields" in f:  # a struct: a fresh instance, each field at its default
        return {snake(sub["name"]): json_default(sub, v) for sub in f["fields"] if _in(sub["versions"], v)}
    if t in _INT_TYPES:  # a few files give numbers rather than strings ("default": -1)
        return int(raw, 0) if isinstance(raw, str) and raw else int(raw or 0)
    if t == "bool":
        return raw == "true"
    if t == "float64":
        return float(raw or 0)
    if t == "uuid":
        return uuid.UUID(int=0)
    if t == "string":
        return raw
    if t == "bytes":
        return b""
    if t == "records":
        return None
    raise AssertionError(f"unknown JSON type {t}")


def ours_default(f: Field, v: int):
    value = f.default_value(v)
    if isinstance(value, dict):  # a construct Container: compare as a plain dict, recursively
        return {k: (dict(x) if isinstance(x, dict) else x) for k, x in value.items()}
    return value


def compare_fields(path: str, json_fields: list[dict], ours: list[Field], v: int, flexible: bool) -> list[tuple]:
    """Disagreements at version ``v``, each (path, attribute, ours, json)."""
    out = []
    jactive = [f for f in json_fields if _in(f["versions"], v)]
    oactive = [f for f in kafka_fields(ours) if f.active(v)]
    jnames = [snake(f["name"]) for f in jactive]
    onames = [f.name for f in oactive]
    if jnames != onames:
        out.append((path or "<top>", "fields", onames, jnames))
    jby = {snake(f["name"]): f for f in jactive}
    for of in oactive:
        jf = jby.get(of.name)
        if jf is None:
            continue
        p = f"{path}.{of.name}" if path else of.name
        jtagged = "tag" in jf and _in(jf.get("taggedVersions"), v)
        jflex = flexible and _in(jf.get("flexibleVersions", "0+"), v)
        oflex = flexible and (of.flexible is None or _in(of.flexible, v))
        checks = [
            ("type", of.type, jf["type"]),
            ("nullable", _in(of.nullable, v), _in(jf.get("nullableVersions"), v)),
            ("tagged", of.is_tagged(v), jtagged),
            # A few files give the tag as a string ("tag": "0").
            ("tag", of.tag if of.is_tagged(v) else None, int(jf["tag"]) if jtagged else None),
            ("flexible", oflex, jflex),
            ("default", ours_default(of, v), json_default(jf, v)),
        ]
        out += [(p, attr, o, j) for attr, o, j in checks if o != j]
        if "fields" in jf or of.fields:
            # Tagged structs are always written in the compact form.
            sub_flex = flexible or jtagged
            out += compare_fields(p + ("[]" if jf["type"].startswith("[]") else ""), jf.get("fields", []),
                                  list(of.fields), v, sub_flex)
    return out


def _versions_text(vs: list[int]) -> str:
    runs, start = [], vs[0]
    for a, b in zip(vs, vs[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return "v" + ",".join(runs)


def render(mismatches: dict[tuple, list[int]]) -> str:
    return "\n".join(f"  {_versions_text(vs)} {path}: {attr}: ours={o!r} kafka={j!r}"
                     for (path, attr, o, j), vs in mismatches.items())


# The NO_REFERENCE messages are checked elsewhere (against bytes), not listed here as skipped.
@pytest.mark.parametrize("msg", [m for m in MESSAGES if m.name not in NO_REFERENCE], ids=lambda m: m.name)
def test_message_matches_kafka_json(msg: Message) -> None:
    js = load_kafka_json(msg.name)
    assert js["name"] == msg.name
    assert js.get("apiKey") == msg.api_key, f"{msg.name}: apiKey ours={msg.api_key} kafka={js.get('apiKey')}"
    jlo, jhi = version_range(js["validVersions"])
    # Ours may start lower (Produce 0-2: advertised, rejected), never higher, and must end where Kafka does.
    assert msg.min_version <= jlo and msg.max_version == jhi, (
        f"{msg.name}: valid ours={msg.valid} kafka={(jlo, jhi)}")
    found: dict[tuple, list[int]] = {}
    for v in range(jlo, jhi + 1):
        jflex = _in(js["flexibleVersions"], v)
        problems = [("<message>", "flexible", msg.is_flexible(v), jflex)] if msg.is_flexible(v) != jflex else []
        problems += compare_fields("", js["fields"], msg.fields, v, jflex)
        for key in problems:
            found.setdefault(tuple(repr(x) if isinstance(x, (list, dict)) else x for x in key), []).append(v)
    assert not found, f"{msg.name} disagrees with {msg.name}.json:\n{render(found)}"


def test_every_fixture_has_a_message_and_back() -> None:
    fixtures = {p.stem for p in SCHEMA_DIR.glob("*.json")}
    ours = {m.name for m in MESSAGES} - set(NO_REFERENCE)
    assert set(NO_REFERENCE) <= {m.name for m in MESSAGES}, "stale NO_REFERENCE entries"
    assert fixtures == ours, f"fixtures without a Message: {fixtures - ours}; Messages without a fixture: {ours - fixtures}"


def test_fixtures_keep_the_apache_license_header() -> None:
    for p in SCHEMA_DIR.glob("*.json"):
        assert "Licensed to the Apache Software Foundation" in p.read_text().split("{", 1)[0], p.name


@pytest.mark.parametrize("api", APIS.values(), ids=lambda a: a.name)
def test_advertised_ranges_lie_within_the_messages(api) -> None:
    lo, hi = api.advertise
    assert lo <= api.min_version <= api.max_version == hi
    for msg in (api.request, api.response):
        assert msg.api_key == api.key, f"{api.name}: {msg.name} has api key {msg.api_key}"
        assert msg.min_version <= lo and hi <= msg.max_version, (
            f"{api.name} advertises {lo}-{hi} but {msg.name} is valid for {msg.min_version}-{msg.max_version}")
        for v in range(lo, hi + 1):
            msg.schema(v)  # builds, for every advertised version
    assert api.request.flexible_range == api.response.flexible_range


def test_snake_case_conversion() -> None:
    assert snake("timeoutMs") == "timeout_ms"
    assert snake("Enable2Pc") == "enable2_pc"
    assert snake("ThrottleTimeMs") == "throttle_time_ms"
    assert snake("TopicId") == "topic_id"


def test_the_checker_reports_a_planted_mismatch() -> None:
    """The comparison itself must be able to fail: a nullable flag flipped deep inside a struct."""
    js = load_kafka_json("ProduceRequest")
    records = js["fields"][3]["fields"][2]["fields"][1]
    assert records["name"] == "Records"
    records["nullableVersions"] = "none"
    from protocol.messages import produce
    problems = compare_fields("", js["fields"], produce.REQUEST.fields, 5, False)
    assert problems == [("topic_data[].partition_data[].records", "nullable", True, False)]


def test_version_range_parsing() -> None:
    assert version_range("3+") == (3, MAX_VERSION)
    assert version_range("0-5") == (0, 5)
    assert version_range("4") == (4, 4)
    lo, hi = version_range("none")
    assert lo > hi


@pytest.mark.parametrize("api", APIS.values(), ids=lambda a: a.name)
def test_header_versions_follow_the_schemas(api) -> None:
    """Request header v2 exactly for flexible requests; response header v1 likewise, except ApiVersions (always v0)."""
    lo, hi = api.request.valid
    for v in range(lo, hi + 1):
        assert request_is_flexible(api.key, v) is api.request.is_flexible(v)
        assert response_is_flexible(api.key, v) is (api.response.is_flexible(v) and api.key != ApiKey.API_VERSIONS)
    assert request_is_flexible(api.key, hi + 1) is False and request_is_flexible(api.key, lo - 1) is False


def test_flexibility_of_known_cases() -> None:
    assert request_is_flexible(ApiKey.API_VERSIONS, 3) and not response_is_flexible(ApiKey.API_VERSIONS, 3)
    assert request_is_flexible(ApiKey.METADATA, 9) and response_is_flexible(ApiKey.METADATA, 9)
    assert not request_is_flexible(ApiKey.PRODUCE, 8) and request_is_flexible(ApiKey.PRODUCE, 9)
    assert not request_is_flexible(ApiKey.SASL_HANDSHAKE, 1)  # not an API we speak


def test_kbroker_tagged_fields_are_only_where_documented() -> None:
    """The extensions: UpdateMetadata's TopicState.topic_configs, tag 10000, and its
    metadata_records, tag 10001, both v6+ (control.py); BrokerHeartbeat's log_dir_usage, tag
    10000, v0+ (lifecycle.py: the controller's partition autobalancer)."""
    found = []

    def walk(path, fields):
        for f in fields:
            if f.tag is not None and f.tag >= control.KBROKER_TOPIC_CONFIGS_TAG:
                found.append((path + f.name, f.tag, f.tagged))
            walk(f"{path}{f.name}.", f.fields)

    for msg in MESSAGES:
        walk(f"{msg.name}.", msg.fields)
    assert sorted(found) == [("BrokerHeartbeatRequest.log_dir_usage", 10000, "0+"),
                             ("UpdateMetadataRequest.metadata_records", 10001, "6+"),
                             ("UpdateMetadataRequest.topic_states.topic_configs", 10000, "6+")]
    req = control.UPDATE_METADATA_REQUEST
    topic = {"topic_name": "t", "partition_states": [], "topic_configs": [{"name": "retention.ms", "value": "1"}]}
    body = {"controller_id": 1, "controller_epoch": 1, "topic_states": [topic], "live_brokers": []}
    assert req.parse(8, req.build(8, body)).topic_states[0].topic_configs[0].value == "1"
    # Kafka's own layout, as another parser sees it: the same bytes without the tag.
    plain_bytes = req.build(8, {**body, "topic_states": [{**topic, "topic_configs": []}]})
    assert len(req.build(8, body)) > len(plain_bytes)
    assert req.build(5, body) == req.build(5, {**body, "topic_states": [{**topic, "topic_configs": []}]})
