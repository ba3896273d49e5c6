#!/usr/bin/env python3
"""Broker instructions per record produced over PLAINTEXT and over SASL_SSL, counted by callgrind
in a real broker process (a count, not a time: the same however busy the shared machine is).

The broker runs under valgrind's callgrind, which counts only inside libuv's ``uv__read`` (the
event loop's read of a socket, and everything it sets off: the TLS read, the request's handling,
its answer's encryption and write); timers and the log's background threads are left out.
confluent-kafka produces ``-n`` records of 1 KiB (batch.size 16 KiB, linger.ms 5, acks=1, one
partition, about 15 records a Produce request) over each listener after 500 to warm up (the
connection, the SASL login, metadata); ``callgrind_control -d`` dumps the count before and after.
Slow: the broker starts in a few minutes under valgrind.

    python bench/security_instructions.py [-n 6000] [--peer CHECKOUT]

``--peer``: the same for another checkout's broker (main before a change), run after this one's.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cli.certs import make_certs  # noqa: E402
from controller.launcher import BrokerProcess, free_port  # noqa: E402

SIDES = ("PLAINTEXT", "SASL_SSL")


def measure(repo: Path, n: int) -> dict[str, float]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    directory = Path(tempfile.mkdtemp(prefix="security-instructions-"))
    keystore = make_certs(directory / "certs", ["localhost"], [])["localhost"]
    ports = {side: free_port() for side in SIDES}
    out = directory / "callgrind.out"
    broker = BrokerProcess(directory / "data", ports["PLAINTEXT"], 1, {
        "listeners": ",".join(f"{k}://127.0.0.1:{v}" for k, v in ports.items()),
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}, repo=repo)
    broker.start(60)  # formatted and started once without valgrind, then again under it
    broker.stop()
    broker.prefix = ["valgrind", "--tool=callgrind", "--toggle-collect=uv__read", f"--callgrind-out-file={out}"]
    broker.start(1200)
    confs = {"PLAINTEXT": {"bootstrap.servers": broker.bootstrap},
             "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "sasl_ssl",
                          "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench", "sasl.password": "bench-secret",
                          "ssl.ca.location": str(directory / "certs" / "ca.pem")}}

    def dump() -> int:
        """The count since the last dump (callgrind zeroes it at each dump)."""
        subprocess.run(["callgrind_control", "-d", str(broker.pid)], capture_output=True, timeout=600)
        time.sleep(1)
        latest = max(glob.glob(f"{out}*"), key=os.path.getmtime)
        with open(latest) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        raise RuntimeError(f"no total in {latest}")

    per_record = {}
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bench-secret")]).values():
            f.result(300)
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(300)
        for side in SIDES:
            producer = Producer({**confs[side], "acks": "1", "linger.ms": 5, "batch.size": 16384,
                                 "queue.buffering.max.messages": 200000})
            for count, counted in ((500, False), (n, True)):
                if counted:
                    dump()
                for _ in range(count):
                    while True:
                        try:
                            producer.produce("t", b"x" * 1024, partition=0)
                            break
                        except BufferError:
                            producer.poll(0.01)
                assert producer.flush(600) == 0
            per_record[side] = dump() / n
            print(f"{repo} {side}: {per_record[side]:,.0f} instructions per record", flush=True)
    finally:
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return per_record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=6000)
    parser.add_argument("--peer", type=Path)
    args = parser.parse_args()
    results = {REPO: measure(REPO, args.n)}
    if args.peer:
        results[args.peer] = measure(args.peer, args.n)
    for repo, counts in results.items():
        print(f"{repo}: PLAINTEXT {counts['PLAINTEXT']:,.0f}, SASL_SSL {counts['SASL_SSL']:,.0f} instructions per "
              f"record; PLAINTEXT / SASL_SSL {counts['PLAINTEXT'] / counts['SASL_SSL']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
