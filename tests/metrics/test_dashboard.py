"""deploy/grafana/kbroker.json: a well-formed dashboard whose every query names metrics a
kbroker node actually exports (read from a live combined node's /metrics after traffic);
deploy/prometheus.yml is a scrape config promtool accepts. (The Prometheus test also runs
every query against a real Prometheus.)"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from broker.config import KafkaConfig
from controller.kafka_raft_server import KafkaRaftServer
from protocol.client import KafkaClient
from tests.metrics.test_endpoint import aget

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "kbroker.json"

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "inf", "nan"}


def dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    out = []
    for panel in board["panels"]:
        for target in panel["targets"]:
            out.append((panel["title"], target["expr"]))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (label matchers, grouping labels, range
    durations, strings, functions and keywords removed)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def exported_names(page: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(page):
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type in ("histogram", "summary"):
            names.update(family.name + s for s in ("_bucket", "_sum", "_count"))
        for sample in family.samples:
            names.add(sample.name)
    return names


def test_metric_names_are_extracted_from_promql():
    assert metric_names('histogram_quantile(0.99, sum by (request, le) (rate(a_b_bucket{x="y"}[$__rate_interval])))') \
        == {"a_b_bucket"}
    assert metric_names("sum(x_total) / max(y) > 0") == {"x_total", "y"}


async def test_every_dashboard_query_names_an_exported_metric(tmp_path):
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["schemaVersion"] >= 30 and board["panels"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        assert p["title"] and p["type"] in ("timeseries", "stat") and p["targets"] and p["gridPos"]["w"] > 0
    node = KafkaRaftServer(KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
                                        "metrics.listener": "http://127.0.0.1:0"}))
    await node.startup()
    try:
        async with KafkaClient(f"127.0.0.1:{node.bound_port()}") as client:
            await client.create_topics([("d", 1, 1, None)])
        proc = await asyncio.create_subprocess_exec("kcat", "-b", f"127.0.0.1:{node.bound_port()}", "-P", "-t", "d",
                                                    stdin=subprocess.PIPE)
        await proc.communicate(b"a\nb\n")
        _status, _ctype, body = await aget(node.metrics.port, "/metrics")
    finally:
        await node.shutdown()
    exported = exported_names(body.decode())
    missing = {(title, name) for title, expr in dashboard_queries() for name in metric_names(expr)
               if name not in exported}
    assert not missing, f"dashboard queries name metrics nobody exports: {sorted(missing)}"
    assert len({n for _t, e in dashboard_queries() for n in metric_names(e)}) >= 20


def test_the_local_scrape_config_is_valid():
    assert shutil.which("promtool"), "make test-deps installs Debian's prometheus (promtool)"
    check = subprocess.run(["promtool", "check", "config", str(REPO / "deploy" / "prometheus.yml")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
