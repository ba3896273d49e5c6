"""``kbroker sim``: run seeds of the simulator (cli/main.py names this module by string: no
production module imports sim/).

    kbroker sim --seed S [--trace]            one seed; --trace prints every event as it happens
    kbroker sim --seeds N [--first F] [-j J]  seeds F .. F+N-1 on J processes; a summary at the end
    kbroker sim ... --bug NAME                with one of sim/bugs.py's re-introduced bugs
    kbroker sim ... --duration S --brokers N  the scenario's length and size
    kbroker sim ... --reassign on|off         the reassignment workload always / never (default: the seed's pick)

A seed with a violation prints the seed, each failed check and the last events of its
trace; the exit status is 1 if any seed failed. Replay one with ``kbroker sim --seed S
--trace``: the same events, the same trace hash, on any machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterator

from .bugs import BUGS
from .runner import Options, Result, run_seed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds (default %(default)s)")
    parser.add_argument("--first", type=int, default=1, help="the first seed of the range (default %(default)s)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="processes to run seeds on (default %(default)s)")
    parser.add_argument("--trace", action="store_true", help="print every event of the run as it happens")
    parser.add_argument("--tail", type=int, default=40, help="trace lines printed with a violation (default %(default)s)")
    parser.add_argument("--bug", action="append", default=[], choices=sorted(BUGS),
                        help="re-introduce this bug (sim/bugs.py; repeatable)")
    parser.add_argument("--duration", type=float, default=Options.duration_s,
                        help="simulated seconds of workload (default %(default)s)")
    parser.add_argument("--brokers", type=int, default=Options.brokers, help="brokers (default %(default)s)")
    parser.add_argument("--no-faults", action="store_true", help="run the workload without faults")
    parser.add_argument("--reassign", choices=("seed", "on", "off"), default="seed",
                        help="the reassignment workload: as the seed picks, always, never (default %(default)s)")
    parser.add_argument("--stop-on-failure", action="store_true", help="stop at the first seed with a violation")


def _options(args: argparse.Namespace, verbose: bool = False) -> Options:
    return Options(brokers=args.brokers, duration_s=args.duration, faults=not args.no_faults, verbose=verbose,
                   bugs=tuple(args.bug), reassign={"on": True, "off": False}.get(args.reassign))


def report(result: Result, tail: int, out: Any = sys.stdout) -> None:
    print(f"seed {result.seed}: {len(result.violations)} violation(s), trace {result.trace_hash}", file=out)
    for v in result.violations:
        print(f"  [{v.check}] at {v.time:.6f}s: {v.detail}", file=out)
    print(f"  last {min(tail, len(result.tail))} events:", file=out)
    for line in result.tail[-tail:]:
        print(f"    {line}", file=out)
    print(f"  replay: kbroker sim --seed {result.seed} --trace" + "".join(f" --bug {b}" for b in result.bugs), file=out)


def _worker(job: tuple[int, Options]) -> tuple[Result, float]:
    seed, options = job
    started = time.process_time()
    result = run_seed(seed, options)
    return result, time.process_time() - started


def run(args: argparse.Namespace) -> int:
    if args.seed is not None:
        options = _options(args, verbose=args.trace)
        started = time.process_time()
        result = run_seed(args.seed, options)
        cpu = time.process_time() - started
        if result.violations:
            report(result, args.tail)
        print(f"seed {result.seed}: trace {result.trace_hash}, {result.events} events, {result.steps} steps, "
              f"{result.sim_seconds:.1f} simulated s, {cpu:.2f} s CPU; {result.stats}")
        return 1 if result.violations else 0
    options = _options(args)
    seeds = range(args.first, args.first + args.seeds)
    failed: list[Result] = []
    cpu = sim_seconds = 0.0
    wall = time.monotonic()
    done = 0
    jobs = [(seed, options) for seed in seeds]
    lost: list[int] = []  # seeds whose worker process died (a crash of the interpreter)
    if args.jobs > 1:
        # (Not multiprocessing.Pool: a worker that dies takes its job with it and the pool
        # waits for its result forever; this executor reports the death as BrokenProcessPool.)
        pool = ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("fork"))
        results = _unordered(pool, args.jobs, _worker, jobs, lost)
    else:
        pool = None
        results = map(_worker, jobs)
    try:
        for result, seconds in results:
            done += 1
            cpu += seconds
            sim_seconds += result.sim_seconds
            if result.violations:
                failed.append(result)
                report(result, args.tail)
                sys.stdout.flush()
                if args.stop_on_failure:
                    break
            if done % 100 == 0:
                print(f"... {done} seeds, {len(failed)} failed, {done / (time.monotonic() - wall):.2f} seeds/s",
                      file=sys.stderr, flush=True)
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    if lost:
        print(f"seeds {', '.join(map(str, lost[:20]))}{' ...' if len(lost) > 20 else ''}: a worker process died "
              f"running them (replay one with kbroker sim --seed S)", flush=True)
    elapsed = time.monotonic() - wall
    print(f"{done} seeds ({args.first}..{args.first + done - 1}){' with ' + ', '.join(args.bug) if args.bug else ''}: "
          f"{len(failed)} with violations{f', {len(lost)} lost to a dead worker' if lost else ''}{' (' + ', '.join(str(r.seed) for r in failed[:20]) + ')' if failed else ''}; "
          f"{elapsed:.1f} s wall, {done / elapsed:.2f} seeds/s on {args.jobs} process(es); {cpu / max(done, 1):.2f} s CPU "
          f"and {sim_seconds / max(done, 1):.1f} simulated s per seed")
    return 1 if failed or lost else 0


def _unordered(pool: ProcessPoolExecutor, workers: int, fn: Callable[[tuple[int, Any]], Any],
               jobs: list[tuple[int, Any]], lost: list[int]) -> Iterator[Any]:
    """The jobs' results as they finish, at most two jobs queued per worker; once a worker
    has died, the seeds not done go to ``lost`` and the iteration ends."""
    pending: dict[Future[Any], int] = {}
    todo = iter(jobs)
    limit = 2 * workers
    broken = False
    while True:
        while not broken and len(pending) < limit:
            job = next(todo, None)
            if job is None:
                break
            try:
                pending[pool.submit(fn, job)] = job[0]
            except BrokenProcessPool:  # marked broken before its pending futures are failed
                broken = True
                lost.append(job[0])
        if not pending:
            lost.extend(seed for seed, _options in todo)
            return
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in sorted(done, key=lambda f: pending[f]):
            seed = pending.pop(future)
            try:
                yield future.result()
            except BrokenProcessPool:
                broken = True
                lost.append(seed)
        if broken:
            lost.extend(sorted(pending.values()))
            lost.extend(seed for seed, _options in todo)
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description="Run the deterministic simulator.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
