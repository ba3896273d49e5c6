"""The replay job's options, shared by ``spark-submit loadgen/replay.py`` and ``kbroker loadgen
replay`` (which adds ``--master`` and ``--conf`` and runs spark-submit). No heavy imports here:
the CLI builds its parser from this module."""

from __future__ import annotations

import argparse


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recording", required=True, help="recording directory (kbroker record / loadgen synth)")
    p.add_argument("--bootstrap", required=True, help="HOST:PORT[,HOST:PORT...] of the cluster to load")
    p.add_argument("--scale", type=int, default=1, help="copies of each recorded connection (default 1)")
    p.add_argument("--speed", default="1.0", help="recorded inter-arrival times divided by this, or max (default 1.0)")
    p.add_argument("--acks", choices=["all", "-1", "1", "0"], help="override the recorded acks")
    p.add_argument("--duration", type=float, help="stop sending after this many seconds (per task)")
    p.add_argument("--depth", type=int, default=5, help="requests in flight per connection (default 5)")
    p.add_argument("--topic-map", action="append", default=[], metavar="FROM=TO", help="replay FROM's records into TO")
    p.add_argument("--consumers", type=int, default=1, help="consumers measuring end-to-end latency (default 1)")
    p.add_argument("--raw", action="store_true",
                   help="the target only frames (bench/: shared/bench/frame_server.py): the recorded produce frames "
                        "are sent as they are, with no Metadata, no topic creation and no consumers")
    p.add_argument("--tasks", type=int, default=0,
                   help="Spark tasks sharing the connections, each driving its share at once on its own event loop "
                        "(default: as many as Spark has slots; more than that is warned about: they would queue)")
    p.add_argument("--replication-factor", type=int, default=-1, help="for topics the replay creates (default: broker's)")
    p.add_argument("--no-create-topics", dest="create_topics", action="store_false",
                   help="fail instead of creating the recording's topics when missing")
    p.add_argument("--idle-timeout", type=float, default=15.0, help="consumers stop after this long without records")
    p.add_argument("--window", type=float, default=10.0, help="seconds per result window (default 10, as OMB)")
    p.add_argument("--out", help="result directory (default ./loadgen-results/<timestamp>)")
    p.add_argument("--name", help="workload name in the result (default: the recording's)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar on the driver")
    p.add_argument("--no-report", dest="report", action="store_false", help="only the JSON result, no plots/HTML")


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.scale < 1 or args.depth < 1 or args.consumers < 0 or args.tasks < 0:
        p.error("--scale and --depth must be >= 1, --consumers and --tasks >= 0")
    if args.speed != "max":
        try:
            if float(args.speed) <= 0:
                raise ValueError
        except ValueError:
            p.error("--speed is a positive number or max")
    for m in args.topic_map:
        if "=" not in m:
            p.error(f"--topic-map {m}: expected FROM=TO")


def replay_argv(args: argparse.Namespace) -> list[str]:
    """The replay.py command line for parsed options (what ``kbroker loadgen replay`` passes on)."""
    argv = ["--recording", args.recording, "--bootstrap", args.bootstrap, "--scale", str(args.scale),
            "--speed", str(args.speed), "--depth", str(args.depth), "--consumers", str(args.consumers),
            "--replication-factor", str(args.replication_factor), "--idle-timeout", str(args.idle_timeout),
            "--window", str(args.window), "--tasks", str(args.tasks)]
    for flag in ("acks", "duration", "out", "name"):
        value = getattr(args, flag)
        if value is not None:
            argv += [f"--{flag}", str(value)]
    for m in args.topic_map:
        argv += ["--topic-map", m]
    if not args.create_topics:
        argv.append("--no-create-topics")
    if getattr(args, "raw", False):
        argv.append("--raw")
    if not args.progress:
        argv.append("--no-progress")
    if not args.report:
        argv.append("--no-report")
    return argv
