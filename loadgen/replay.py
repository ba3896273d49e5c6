"""The Spark replay job:

    spark-submit loadgen/replay.py --recording traffic/ --bootstrap HOST:PORT[,...] --scale 20 --speed 2.0|max
                                   [--acks all|1|0] [--duration S] [--out DIR] ...

(``kbroker loadgen replay ...`` runs spark-submit for you, ``--master local[*]`` by default.)

The driver reads the recording as a DataFrame, counts its records per partition (a first, small
job over batch headers), creates missing topics, notes each partition's end offset, and fans the
recording out: one Spark task per (recorded connection × scale copy), placed by a partitioner so
each task gets exactly one, plus ``--consumers`` consumer tasks (first, so that they run while
the producers do). Each task runs loadgen/engine.py and returns per-window, per-broker, per-API
statistics with mergeable histograms; Spark merges them (reduceByKey) and the driver writes the
report (loadgen/report.py). A progress bar on the driver follows the tasks through Spark's status
tracker.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script by spark-submit: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen import engine, hist, options  # noqa: E402
from loadgen.recording import read_manifest  # noqa: E402

log = logging.getLogger("kbroker.loadgen")
REPO = Path(__file__).resolve().parent.parent
# How long a barrier stage's tasks wait at the barrier for the slowest one to prepare its
# frames (engine.run_many): Spark's spark.barrier.sync.timeout defaults to 365 days, so a task
# hung in prepare() would hold the others, and the replay, forever; past this the barrier
# fails and so does the stage (spark.task.maxFailures 1).
BARRIER_SYNC_TIMEOUT_S = 600
SPARK_CONF = {
    "spark.task.maxFailures": "1",
    "spark.ui.showConsoleProgress": "false",
    "spark.barrier.sync.timeout": f"{BARRIER_SYNC_TIMEOUT_S}s",
}


def configured(builder: Any) -> Any:
    """A SparkSession builder with the replay's settings (``SPARK_CONF``)."""
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    return builder


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="replay.py", description="Replay a kbroker recording at scale on Spark.")
    options.add_replay_arguments(p)
    args = p.parse_args(argv)
    options.check(p, args)
    return args


def params_of(args: argparse.Namespace, job_start: float) -> engine.Params:
    acks = None if args.acks is None else (-1 if args.acks == "all" else int(args.acks))
    return engine.Params(bootstrap=args.bootstrap, speed=None if args.speed == "max" else float(args.speed), acks=acks,
                         depth=args.depth, topic_map=dict(m.split("=", 1) for m in args.topic_map),
                         duration_s=args.duration, window_s=args.window, job_start=job_start, raw=args.raw,
                         stamp_timestamps=not args.raw)


def package_zip(directory: Path) -> Path:
    """protocol/ and loadgen/ in one zip for the executors (``addPyFile``): a cluster's
    workers need not have kbroker installed, only its dependencies."""
    path = directory / "kbroker-loadgen.zip"
    with zipfile.ZipFile(path, "w") as z:
        for package in ("protocol", "loadgen"):
            for f in sorted((REPO / package).rglob("*.py")):
                z.write(f, f.relative_to(REPO))
    return path


async def _prepare_cluster(args: argparse.Namespace, partitions: dict[str, int]) -> dict[tuple[str, int], int]:
    """Create the topics that are missing; the end offset of every partition written to."""
    from protocol.client import KafkaClient

    async with KafkaClient(args.bootstrap, client_id="kbroker-loadgen-driver") as client:
        await client.refresh_metadata()
        missing = [(t, n, args.replication_factor, None) for t, n in sorted(partitions.items())
                   if t not in client.cluster.topics]
        if missing and args.create_topics:
            await client.create_topics(missing)
            await client.refresh_metadata()
        for t, n in partitions.items():
            have = client.cluster.topics.get(t)
            if have is None:
                raise SystemExit(f"replay.py: topic {t} does not exist (and --no-create-topics)")
            if len(have.partitions) < n:
                raise SystemExit(f"replay.py: topic {t} has {len(have.partitions)} partitions, the recording writes {n}")
        found = await client.offsets_for_times({(t, p): -1 for t, n in partitions.items() for p in range(n)})
        return {(tp.topic, tp.partition): (v[0] if v else 0) for tp, v in found.items()}


class Progress:
    """A rich progress bar over the job's tasks (Spark's status tracker), on the driver."""

    def __init__(self, sc: Any, total: int, enabled: bool) -> None:
        self.sc, self.total, self.enabled = sc, total, enabled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Progress":
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join(5)

    def _run(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

        tracker = self.sc.statusTracker()
        with Bar(TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn(),
                 TextColumn("{task.fields[running]} running"), transient=False) as bar:
            task = bar.add_task("replay", total=self.total, running=0)
            while not self._stop.wait(0.5):
                done = running = 0
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is not None and info.numTasks == self.total:
                        done, running = info.numCompletedTasks, info.numActiveTasks
                bar.update(task, completed=done, running=running)
            bar.update(task, completed=self.total, running=0)


def _flatten(stats: dict[str, Any]) -> list[tuple[Any, Any]]:
    """A task's statistics as (key, value) pairs for reduceByKey."""
    out: list[tuple[Any, Any]] = [(("w", w), v) for w, v in stats.pop("windows").items()]
    out += [(("b", b), v) for b, v in stats.pop("brokers").items()]
    out += [(("a", a), v) for a, v in stats.pop("apis").items()]
    out += [(("e", code), n) for code, n in stats.pop("errors").items()]
    out.append((("t",), stats))
    return out


def plan_text(producers: int, consumers: int, tasks: int, slots: int, scale: int) -> str:
    """What the replay will run, said before it starts, with a warning where the plan cannot
    reach the recorded concurrency (more tasks than Spark runs at once)."""
    text = (f"replay plan: {producers} producer connection(s) (scale {scale}) and {consumers} consumer(s) at once, "
            f"on {tasks} Spark task(s), {-(-(producers + consumers) // tasks)} at most per task's event loop; "
            f"Spark runs {slots} task(s) at a time")
    if tasks > slots:
        text += (f"\nWARNING: {tasks} tasks on {slots} slots: {tasks - slots} of them wait for a free slot, so their "
                 f"connections start late and the scaled rate is not reached; use --tasks {slots} or more executor "
                 "cores")
    return text


def run_replay(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run the replay on ``spark`` (a SparkSession); returns the merged statistics and the
    description of the run (loadgen/report.py turns them into the result)."""
    from pyspark.sql import functions as F

    manifest = read_manifest(Path(args.recording))
    sc = spark.sparkContext
    t_prepare = time.monotonic()
    df = spark.read.parquet(str(Path(args.recording).resolve())).where(F.col("api_key") == 0) \
        .select("connection_id", "send_time_us", "api_version", "frame")
    topic_map = dict(m.split("=", 1) for m in args.topic_map)
    # 1. What the recording writes (records per (topic, partition), from batch headers) and its
    #    connections: one small job.
    def summary(r: Any) -> list[tuple[Any, int]]:
        return [((None, r.connection_id), 0), *engine.frame_summary(r.api_version, bytes(r.frame))]

    if Path(args.recording).is_dir():  # the driver sees the files: no Spark job needed for this
        from loadgen.recording import read_all

        table = read_all(Path(args.recording))
        totals: dict[Any, int] = {}
        for cid, key, version, frame in zip(table.column("connection_id").to_pylist(), table.column("api_key").to_pylist(),
                                            table.column("api_version").to_pylist(), table.column("frame").to_pylist()):
            if key != 0:
                continue
            for k, n in [((None, cid), 0), *engine.frame_summary(version, frame)]:
                totals[k] = totals.get(k, 0) + n
        counted = list(totals.items())
    else:
        counted = df.rdd.flatMap(summary).reduceByKey(lambda a, b: a + b).collect()
    connections = sorted(k[1] for k, _n in counted if k[0] is None)
    per_partition = {k: n for k, n in counted if k[0] is not None}
    recorded_records = sum(per_partition.values())
    partitions: dict[str, int] = {}
    for (t, p), _n in per_partition.items():
        t = topic_map.get(t, t)
        partitions[t] = max(partitions.get(t, 0), p + 1)
    for t, n in (manifest.get("partitions") or {}).items():
        t = topic_map.get(t, t)
        if t in partitions:
            partitions[t] = max(partitions[t], int(n))
    if args.raw:  # a framing-only sink: nothing to create, nobody to consume
        partitions = {}
    start_offsets = asyncio.run(_prepare_cluster(args, partitions)) if partitions else {}
    # 2. The plan: every (connection, copy) and consumer runs at once, as recorded. A Spark
    #    task drives many of them on its own event loop; there are as many tasks as Spark has
    #    slots (--tasks to choose), each key placed round-robin, the consumers first.
    keys: list[tuple[Any, ...]] = [("c", i) for i in range(args.consumers if partitions else 0)]
    keys += [("p", c, copy) for copy in range(args.scale) for c in connections]
    slots = max(1, int(sc.defaultParallelism))
    n_tasks = max(1, min(args.tasks or slots, len(keys)))
    index = {k: i % n_tasks for i, k in enumerate(keys)}
    plan = plan_text(len(keys) - args.consumers if partitions else len(keys), args.consumers if partitions else 0,
                     n_tasks, slots, args.scale)
    print(plan, file=sys.stderr, flush=True)
    job_start = time.time()
    prepare_s = time.monotonic() - t_prepare
    params = params_of(args, job_start)
    expected = recorded_records * args.scale
    idle = args.idle_timeout
    scale = args.scale
    consumer_partitions = [(k, start_offsets) for k in keys if k[0] == "c"]

    def fan_out(r: Any) -> list[tuple[tuple[Any, ...], Any]]:
        row = (r.send_time_us, r.api_version, bytes(r.frame))
        return [(("p", r.connection_id, copy), row) for copy in range(scale)]

    # One shuffle places every frame of (connection, copy) in its task's partition.
    frames = df.rdd.flatMap(fan_out)
    tasks = sc.parallelize(consumer_partitions, max(1, len(consumer_partitions))).union(frames) \
        .partitionBy(n_tasks, lambda k: index[k])

    # A barrier stage (all tasks launched at once) when Spark can run every task at once: the
    # tasks start sending together once every one has prepared its frames.
    use_barrier = n_tasks <= slots

    def run_task(items: Any) -> Any:
        barrier = None
        if use_barrier:
            from pyspark import BarrierTaskContext

            barrier = functools.partial(engine.common_start, BarrierTaskContext.get().allGather)
        consumers: list[Any] = []
        producer_rows: dict[tuple[Any, ...], list[Any]] = {}
        for key, value in items:
            if key[0] == "c":  # each consumer reads every partition: one subscription each
                consumers.append((value, expected, idle))
            else:
                producer_rows.setdefault(key, []).append(value)
        producers = [(rows, key[2]) for key, rows in producer_rows.items()]
        out: list[tuple[Any, Any]] = []
        for stats in engine.run_many(params, producers, consumers, barrier):
            out += _flatten(stats)
        return out

    with Progress(sc, n_tasks, args.progress):
        stage = tasks.barrier().mapPartitions(run_task) if use_barrier else tasks.mapPartitions(run_task)
        merged = stage.reduceByKey(hist.merge).collect()
    elapsed = time.time() - job_start
    result: dict[str, Any] = {"windows": {}, "brokers": {}, "apis": {}, "errors": {}, "totals": {}, "hists": {}}
    for key, value in merged:
        kind = key[0]
        if kind == "w":
            result["windows"][key[1]] = value
        elif kind == "b":
            result["brokers"][key[1]] = value
        elif kind == "a":
            result["apis"][key[1]] = value
        elif kind == "e":
            result["errors"][key[1]] = value
        else:
            result["totals"] = value["totals"]
            result["hists"] = {k: value[k] for k in ("publish", "e2e", "delay")}
    result["run"] = {
        "recording": str(args.recording), "bootstrap": args.bootstrap, "scale": args.scale, "speed": args.speed,
        "acks": args.acks, "depth": args.depth, "tasks": n_tasks, "slots": slots, "plan": plan,
        # producers and consumers (each a connection of its own; OMB's producers/consumers per topic)
        "producer_tasks": len(keys) - len(consumer_partitions), "consumer_tasks": len(consumer_partitions),
        "recorded_records": recorded_records, "expected_records": expected,
        "elapsed_s": elapsed, "prepare_s": prepare_s,
        "send_elapsed_s": max(0.0, result["totals"].get("send_end_max", 0) - result["totals"].get("send_start_min", 0)),
        "window_s": args.window, "topics": sorted(partitions), "partitions": partitions,
        "master": sc.master, "workload": args.name or (manifest.get("workload") or {}).get("name")
        or Path(args.recording).name, "message_size": manifest.get("message_size"),
        "spark_version": sc.version, "recording_source": manifest.get("source"),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    from loadgen import report
    from protocol.errors import KafkaError

    out = Path(args.out or Path("loadgen-results") / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    spark = configured(SparkSession.builder.appName("kbroker-loadgen-replay")).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.sparkContext.addPyFile(str(package_zip(out)))
    startup_s = time.monotonic() - t0
    try:
        result = run_replay(spark, args)
    except KafkaError as exc:
        print(f"replay.py: {args.bootstrap}: {exc}", file=sys.stderr)
        return 2
    finally:
        t1 = time.monotonic()
        spark.stop()
        log.info("spark stopped in %.1f s", time.monotonic() - t1)
    result["run"]["spark_startup_s"] = startup_s
    t1 = time.monotonic()
    written = report.write(result, out, plots=args.report)
    result["run"]["report_s"] = time.monotonic() - t1
    report.print_table(result, written)
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
