"""The results of a replay: a JSON file with the OpenMessaging Benchmark's TestResult field names
(per-window lists sampled every ``window`` seconds — 10 s, as OMB — and whole-run aggregates;
latencies in milliseconds, publish delay in microseconds, rates per second), plus kbroker's own
breakdown per API, per broker and error counts by Kafka error code; a rich console table; PNG
plots (throughput over time, latency percentiles over time, latency CDF) and one self-contained
HTML report embedding them.

    OUT/result.json   OUT/throughput.png   OUT/latency.png   OUT/cdf.png   OUT/report.html
"""

from __future__ import annotations

import base64
import html
import json
import sys
from pathlib import Path
from typing import Any

from protocol.errors import ErrorCode

from . import hist

QUANTILES = {"50pct": 0.5, "75pct": 0.75, "95pct": 0.95, "99pct": 0.99, "999pct": 0.999, "9999pct": 0.9999}
QUANTILE_MAP = [0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999]


def error_name(code: int) -> str:
    try:
        return ErrorCode(int(code)).name
    except ValueError:
        return str(code)


def _stats(h: dict[int, int], scale: float) -> dict[str, float]:
    """Avg, percentiles and Max of a histogram (µs) in the unit ``1/scale`` µs (1000: ms)."""
    out = {"Avg": (hist.mean(h) or 0.0) / scale}
    for name, q in QUANTILES.items():
        out[name] = (hist.percentile(h, q) or 0.0) / scale
    out["Max"] = (hist.maximum(h) or 0.0) / scale
    return {k: round(v, 3) for k, v in out.items()}


def _hist_keys(h: Any) -> dict[int, int]:
    return {int(k): int(v) for k, v in (h or {}).items()}


def build_result(raw: dict[str, Any]) -> dict[str, Any]:
    """OMB's TestResult fields from the merged statistics of a replay (loadgen/replay.py)."""
    run = raw["run"]
    window_s = float(run.get("window_s", 10.0))
    windows = {int(k): v for k, v in raw["windows"].items()}
    last = max(windows) if windows else -1
    result: dict[str, Any] = {
        "workload": run.get("workload"),
        "driver": "kbroker-loadgen",
        "messageSize": run.get("message_size") or 0,
        "topics": len(run.get("topics", [])),
        "partitions": max(run.get("partitions", {}).values(), default=0),
        "producersPerTopic": run.get("producer_tasks", 0) // max(1, len(run.get("topics", [])) or 1),
        "consumersPerTopic": run.get("consumer_tasks", 0),
        "sampleRateMillis": int(window_s * 1000),
    }
    series: dict[str, list[float]] = {k: [] for k in ("publishRate", "publishErrorRate", "consumeRate", "backlog")}
    for kind in ("publishLatency", "publishDelayLatency", "endToEndLatency"):
        for q in ["Avg", *QUANTILES, "Max"]:
            series[f"{kind}{q}"] = []
    produced = consumed = 0
    for w in range(last + 1):
        win = windows.get(w) or {}
        series["publishRate"].append(round(win.get("published", 0) / window_s, 3))
        series["publishErrorRate"].append(round(win.get("errors", 0) / window_s, 3))
        series["consumeRate"].append(round(win.get("consumed", 0) / window_s, 3))
        produced += win.get("published", 0)
        consumed += win.get("consumed", 0)
        series["backlog"].append(max(0, produced * max(1, run.get("consumer_tasks", 1)) - consumed)
                                 if run.get("consumer_tasks") else 0)
        for kind, key, scale in (("publishLatency", "publish", 1000.0), ("publishDelayLatency", "delay", 1.0),
                                 ("endToEndLatency", "e2e", 1000.0)):
            for q, v in _stats(_hist_keys(win.get(key)), scale).items():
                series[f"{kind}{q}"].append(v)
    result.update(series)
    totals = raw.get("totals") or {}
    hists = raw.get("hists") or {}
    for kind, key, scale in (("PublishLatency", "publish", 1000.0), ("PublishDelayLatency", "delay", 1.0),
                             ("EndToEndLatency", "e2e", 1000.0)):
        h = _hist_keys(hists.get(key))
        for q, v in _stats(h, scale).items():
            result[f"aggregated{kind}{q}"] = v
        result[f"aggregated{kind}Quantiles"] = {str(q): round((hist.percentile(h, q) or 0.0) / scale, 3)
                                                for q in QUANTILE_MAP}
    elapsed = max(run.get("send_elapsed_s") or run.get("elapsed_s") or 1e-9, 1e-9)
    errors = {error_name(int(code)): int(n) for code, n in sorted(raw["errors"].items(), key=lambda kv: int(kv[0]))}
    result["kbroker"] = {
        "run": run,
        "totals": {k: v for k, v in totals.items() if not isinstance(v, dict)},
        "errors": errors,
        "errorCount": sum(errors.values()),
        "publishRateOverall": round(totals.get("records", 0) / elapsed, 1),
        "perApi": {name: {"requests": a["requests"], "records": a["records"], "errors": a["errors"],
                          **{f"latency{q}": v for q, v in _stats(_hist_keys(a["publish"]), 1000.0).items()}}
                   for name, a in sorted(raw["apis"].items())},
        "perBroker": {str(node): {"requests": b["requests"], "records": b["records"], "bytes": b["bytes"],
                                  "errors": b["errors"],
                                  **{f"latency{q}": v for q, v in _stats(_hist_keys(b["publish"]), 1000.0).items()}}
                      for node, b in sorted(raw["brokers"].items(), key=lambda kv: int(kv[0]))},
        "publishLatencyCdf": hist.cdf(_hist_keys(hists.get("publish"))),
        "endToEndLatencyCdf": hist.cdf(_hist_keys(hists.get("e2e"))),
    }
    return result


def write(raw: dict[str, Any], out: Path, plots: bool = True, extra_plots: dict[str, bytes] | None = None
          ) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result = build_result(raw)
    written = {"result": out / "result.json"}
    written["result"].write_text(json.dumps(result, indent=1) + "\n")
    if plots:
        images = render_plots(result)
        images.update(extra_plots or {})
        for name, png in images.items():
            (out / f"{name}.png").write_bytes(png)
            written[name] = out / f"{name}.png"
        written["html"] = out / "report.html"
        written["html"].write_text(render_html(result, images))
    return written


def _png(fig: Any) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return buf.getvalue()


def render_plots(result: dict[str, Any]) -> dict[str, bytes]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = result["sampleRateMillis"] / 1000
    t = [i * window for i in range(len(result["publishRate"]))]
    images = {}
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(t, result["publishRate"], marker="o", label="publish")
    ax.plot(t, result["consumeRate"], marker="s", label="consume")
    ax.set_xlabel("time (s, window start)")
    ax.set_ylabel("records/s")
    ax.set_title("Throughput")
    ax.legend()
    ax.grid(alpha=0.3)
    images["throughput"] = _png(fig)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for q in ("50pct", "99pct", "999pct"):
        ax.plot(t, result[f"publishLatency{q}"], marker=".", label=f"publish p{q[:-3]}")
    ax.plot(t, result["endToEndLatency99pct"], marker="x", label="end-to-end p99")
    ax.set_xlabel("time (s, window start)")
    ax.set_ylabel("ms")
    ax.set_title("Latency percentiles per window")
    ax.legend()
    ax.grid(alpha=0.3)
    images["latency"] = _png(fig)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for name, key in (("publish", "publishLatencyCdf"), ("end-to-end", "endToEndLatencyCdf")):
        points = result["kbroker"][key]
        if points:
            ax.plot([v / 1000 for v, _ in points], [f for _, f in points], label=name)
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction ≤")
    ax.set_title("Latency CDF")
    ax.legend()
    ax.grid(alpha=0.3)
    images["cdf"] = _png(fig)
    return images


def scale_plot(points: list[tuple[int, float, float]]) -> bytes:
    """Throughput and p99 against the scale factor: [(scale, records/s, p99 ms)]."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = [p[0] for p in points]
    ax.plot(xs, [p[1] for p in points], marker="o", color="tab:blue")
    ax.set_xlabel("scale (copies of each recorded connection)")
    ax.set_ylabel("records/s", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(xs, [p[2] for p in points], marker="s", color="tab:red")
    ax2.set_ylabel("publish p99 (ms)", color="tab:red")
    ax.set_title("Throughput and p99 vs scale")
    ax.grid(alpha=0.3)
    return _png(fig)


def _table(rows: list[list[Any]], head: list[str]) -> str:
    cells = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def summary_rows(result: dict[str, Any]) -> list[list[Any]]:
    k = result["kbroker"]
    t = k["totals"]
    return [
        ["records sent", t.get("records", 0)], ["records acknowledged", t.get("records_acked", 0)],
        ["records consumed", t.get("consumed", 0)], ["requests", t.get("requests", 0)],
        ["errors", k["errorCount"]], ["publish rate (records/s, whole run)", k["publishRateOverall"]],
        ["publish latency p50 / p99 / p99.9 / max (ms)",
         f"{result['aggregatedPublishLatency50pct']} / {result['aggregatedPublishLatency99pct']} / "
         f"{result['aggregatedPublishLatency999pct']} / {result['aggregatedPublishLatencyMax']}"],
        ["end-to-end latency p50 / p99 / max (ms)",
         f"{result['aggregatedEndToEndLatency50pct']} / {result['aggregatedEndToEndLatency99pct']} / "
         f"{result['aggregatedEndToEndLatencyMax']}"],
        ["tasks (producer + consumer)", f"{k['run']['producer_tasks']} + {k['run']['consumer_tasks']}"],
        ["scale / speed / acks", f"{k['run']['scale']} / {k['run']['speed']} / {k['run']['acks'] or 'recorded'}"],
        ["Spark master", k["run"].get("master")],
    ]


def render_html(result: dict[str, Any], images: dict[str, bytes]) -> str:
    k = result["kbroker"]
    parts = [f"<h1>kbroker load test: {html.escape(str(result['workload']))}</h1>",
             "<h2>Summary</h2>", _table(summary_rows(result), ["", ""])]
    for name, png in images.items():
        parts.append(f"<h2>{html.escape(name)}</h2><img alt='{html.escape(name)}' "
                     f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    parts.append("<h2>Per broker</h2>" + _table(
        [[n, b["requests"], b["records"], b["bytes"], b["errors"], b["latency50pct"], b["latency99pct"]]
         for n, b in k["perBroker"].items()], ["broker", "requests", "records", "bytes", "errors", "p50 ms", "p99 ms"]))
    parts.append("<h2>Per API</h2>" + _table(
        [[n, a["requests"], a["records"], a["errors"], a["latency50pct"], a["latency99pct"]] for n, a in k["perApi"].items()],
        ["API", "requests", "records", "errors", "p50 ms", "p99 ms"]))
    parts.append("<h2>Errors by code</h2>" + (_table([[n, c] for n, c in k["errors"].items()], ["error", "count"])
                                              if k["errors"] else "<p>none</p>"))
    windows = [[i * result["sampleRateMillis"] / 1000, result["publishRate"][i], result["consumeRate"][i],
                result["backlog"][i], result["publishLatency50pct"][i], result["publishLatency99pct"][i],
                result["endToEndLatency99pct"][i]] for i in range(len(result["publishRate"]))]
    parts.append("<h2>Windows</h2>" + _table(windows, ["t (s)", "publish/s", "consume/s", "backlog", "p50 ms", "p99 ms",
                                                        "e2e p99 ms"]))
    style = ("body{font-family:sans-serif;margin:2em;max-width:1000px}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}img{max-width:100%}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>kbroker load test</title><style>{style}</style>"
            f"</head><body>{''.join(parts)}</body></html>\n")


def print_table(raw_or_result: dict[str, Any], written: dict[str, Path] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    result = raw_or_result if "kbroker" in raw_or_result else build_result(raw_or_result)
    console = Console(file=sys.stderr)
    table = Table(title=f"kbroker load test: {result['workload']}")
    table.add_column("")
    table.add_column("", justify="right")
    for label, value in summary_rows(result):
        table.add_row(str(label), str(value))
    console.print(table)
    if result["kbroker"]["errors"]:
        errors = Table(title="errors by code")
        errors.add_column("error")
        errors.add_column("count", justify="right")
        for name, n in result["kbroker"]["errors"].items():
            errors.add_row(name, str(n))
        console.print(errors)
    if written:
        for name, path in written.items():
            console.print(f"{name}: {path}")
