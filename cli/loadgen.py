"""``kbroker record`` and ``kbroker loadgen synth|replay|report``: the load-testing commands.

Client-side only: they import loadgen/ and protocol/ (never broker/, storage/ or controller/).
pyarrow, pyspark and matplotlib come with the ``loadgen`` extra (``pip install 'kbroker[loadgen]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from cli.common import UsageError


def _logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _need(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise UsageError(f"{module} is not installed: pip install 'kbroker[loadgen]'") from None


def record(args: argparse.Namespace) -> int:
    _need("pyarrow")
    from loadgen.tap import TapProxy, parse_address

    _logging(args.log_level)
    try:
        listen, upstream = parse_address(args.listen), parse_address(args.upstream.split(",")[0])
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    async def main() -> int:
        tap = await TapProxy(listen, upstream, Path(args.out), advertised_host=args.advertised_host,
                             broker_port_base=args.broker_port_base).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"recording: clients bootstrap at {tap.advertised_host}:{tap.port}; Ctrl-C stops", file=sys.stderr,
              flush=True)
        try:
            if args.duration:
                await asyncio.wait_for(stop.wait(), args.duration)
            else:
                await stop.wait()
        except TimeoutError:
            pass
        await tap.stop()
        m = tap.manifest()
        print(f"recorded {m['requests']} requests on {len(m['connections'])} connections in {args.out}",
              file=sys.stderr)
        return 0

    return asyncio.run(main())


def synth(args: argparse.Namespace) -> int:
    _need("pyarrow")
    _need("yaml")
    from loadgen.synth import WorkloadError, synthesize

    _logging("WARNING")
    try:
        m = synthesize(Path(args.workload), Path(args.out), duration_s=args.duration, topic_prefix=args.topic_prefix,
                       seed=args.seed, max_records=args.max_records)
    except (WorkloadError, OSError) as exc:
        raise UsageError(str(exc)) from None
    print(f"{m['records']} records in {m['requests']} Produce requests on {len(m['connections'])} connections, "
          f"topics {', '.join(m['topics'][:3])}{' ...' if len(m['topics']) > 3 else ''} -> {args.out}", file=sys.stderr)
    return 0


def spark_submit() -> str:
    """spark-submit: $SPARK_HOME's, the one on $PATH, or the one pyspark ships."""
    import os
    import shutil

    home = os.environ.get("SPARK_HOME")
    if home and Path(home, "bin", "spark-submit").is_file():
        return str(Path(home, "bin", "spark-submit"))
    found = shutil.which("spark-submit")
    if found:
        return found
    _need("pyspark")
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def replay_command(args: argparse.Namespace) -> list[str]:
    from loadgen import options

    script = Path(__file__).resolve().parent.parent / "loadgen" / "replay.py"
    cmd = [spark_submit(), "--master", args.master, "--name", "kbroker-loadgen-replay"]
    if not any(c.startswith("spark.log.level=") for c in args.conf):
        cmd += ["--conf", "spark.log.level=WARN"]  # Spark's INFO lines would drown the progress bar
    for conf in args.conf:
        cmd += ["--conf", conf]
    return cmd + [str(script), *options.replay_argv(args)]


def replay(args: argparse.Namespace) -> int:
    """Run loadgen/replay.py through spark-submit, the executors on this interpreter."""
    import os
    import subprocess

    if args.master.startswith("local") is False and "://" not in args.master and args.master != "yarn":
        raise UsageError(f"--master {args.master}: expected local[N], spark://HOST:PORT or another Spark master URL")
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cmd = replay_command(args)
    return subprocess.run(cmd, env=env).returncode
