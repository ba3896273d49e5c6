"""The recording format, shared by the tap (``kbroker record``), the synthesizer
(``kbroker loadgen synth``) and the replay job.

A recording is a directory:

    traffic/
      manifest.json                      duration, request counts per API, topics, connections
      connection_id=0/frames.parquet     one Parquet file per recorded connection (hive layout,
      connection_id=1/frames.parquet     so Spark and pyarrow read ``connection_id`` as a column)

One row per request frame, in the order the client sent them:

    client_id         the request header's client id (null if the client sent none)
    upstream          host:port of the broker the connection went to
    broker_id         that broker's node id as Metadata named it (-1: the bootstrap address)
    send_time_us      monotonic clock (µs) when the frame was read from the client
    api_key, api_version, correlation_id    from the request header
    frame             the request exactly as sent, without its 4-byte size prefix
    response_time_us  monotonic clock (µs) when the response arrived (null: none came, acks=0)
    response_size     the response's size in bytes, without its size prefix (null: none came)

Rows are written in row groups as responses arrive, so a long recording is not held in memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

FORMAT = "kbroker-recording"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
FRAMES_FILE = "frames.parquet"

SCHEMA = pa.schema([
    ("client_id", pa.string()),
    ("upstream", pa.string()),
    ("broker_id", pa.int32()),
    ("send_time_us", pa.int64()),
    ("api_key", pa.int16()),
    ("api_version", pa.int16()),
    ("correlation_id", pa.int32()),
    ("frame", pa.binary()),
    ("response_time_us", pa.int64()),
    ("response_size", pa.int32()),
])
COLUMNS = SCHEMA.names
ROW_GROUP = 2000


def connection_dir(out: Path, connection_id: int) -> Path:
    return out / f"connection_id={connection_id}"


class ConnectionWriter:
    """The Parquet file of one connection. ``add`` takes complete rows (dicts with COLUMNS)."""

    def __init__(self, out: Path, connection_id: int) -> None:
        self.path = connection_dir(out, connection_id) / FRAMES_FILE
        self._rows: list[dict[str, Any]] = []
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0

    def add(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        self.rows += 1
        if len(self._rows) >= ROW_GROUP:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.path, SCHEMA, compression="zstd")
        self._writer.write_table(pa.Table.from_pylist(self._rows, schema=SCHEMA))
        self._rows = []

    def close(self) -> None:
        self.flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    data = {"format": FORMAT, "version": FORMAT_VERSION, **manifest}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(out / MANIFEST)


def read_manifest(recording: Path) -> dict[str, Any]:
    path = Path(recording) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{recording} is not a recording: no {MANIFEST}") from None
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} manifest")
    if data.get("version", 0) > FORMAT_VERSION:
        raise ValueError(f"{path}: format version {data['version']} is newer than this kbroker reads ({FORMAT_VERSION})")
    return data


def connection_ids(recording: Path) -> list[int]:
    ids = []
    for d in Path(recording).glob("connection_id=*"):
        if (d / FRAMES_FILE).is_file():
            ids.append(int(d.name.partition("=")[2]))
    return sorted(ids)


def read_connection(recording: Path, connection_id: int) -> pa.Table:
    return pq.read_table(connection_dir(Path(recording), connection_id) / FRAMES_FILE)


def read_all(recording: Path) -> pa.Table:
    """Every row of the recording with its ``connection_id`` column (pyarrow, no Spark)."""
    tables = []
    for cid in connection_ids(recording):
        t = read_connection(recording, cid)
        tables.append(t.append_column("connection_id", pa.array([cid] * t.num_rows, pa.int32())))
    if not tables:
        return SCHEMA.empty_table().append_column("connection_id", pa.array([], pa.int32()))
    return pa.concat_tables(tables)


def api_name(key: int) -> str:
    """Kafka's name of an API key ("Produce"), or "ApiKey<n>" for one kbroker does not know."""
    from protocol.messages import APIS

    api = APIS.get(key)
    return api.name if api is not None else f"ApiKey{key}"


def summarize(rows: Iterable[tuple[int, int]]) -> dict[str, int]:
    """{API name: request count} from (api_key, count) pairs."""
    out: dict[str, int] = {}
    for key, n in rows:
        name = api_name(key)
        out[name] = out.get(name, 0) + n
    return dict(sorted(out.items()))
