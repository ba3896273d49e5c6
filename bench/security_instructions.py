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

``--whole``: then the same records again from kbroker's client writing each Produce request whole
(bench/security_bench.py's ``produce_whole``: one SSL_write, one TLS record per 15-record request,
where librdkafka writes 31), on each listener: what the broker pays per record over TLS when the
client does not fragment its requests.

Read the counts knowing that callgrind counts a ``rep movsb`` / ``rep stosb`` (glibc's memcpy and
memset of a few KB and more) once per byte: the copies of the TLS path (uvloop's MemoryBIO.write:
BIO_write's memset and memcpy, about 2,100 instructions per record) weigh more here than in time.
First counts (-n 3000, 200 requests of 15 records; a read then held 4 to 11 requests, so the
cost per read is all but absent): PLAINTEXT 7,566 and SASL_SSL 24,017 instructions per record
(librdkafka, 31 TLS records a request: SSL_read_ex 13,900 per record, EVP_DecryptUpdate 4,600 of
them); written whole, PLAINTEXT 7,737 and SASL_SSL 15,409 (SSL_read_ex 5,100, EVP_DecryptUpdate
2,700: the AES-GCM itself). So each TLS record beyond the first costs the broker about 4,400
instructions in OpenSSL 3.0's record layer (EVP_CipherInit_ex, EVP_CIPHER_CTX_get_iv_length,
OSSL_PARAM lookups, error marks, two BIO_reads), two per record librdkafka produces. main
(155f1bf) beside it: 7,646 / 23,967 and 7,770 / 15,454 (broker/_tls_read.c's own SSLWantReadError
saves per read, and reads were few here).

``--clients kafka-python,aiokafka``: then each of these clients produces ``-n`` records and reads
them back, in a process of its own (bench/security_bench.py's ``produce_consume_child``), on each
listener; both write a request whole (one send, one TLS record of 15 records), aiokafka one request
at a time. First counts (-n 6000, 18:20 UTC 30 Nov 2026): kafka-python PLAINTEXT 7,593 / SASL_SSL
15,154 per record produced (a read held 0.8 requests), aiokafka 9,282 / 17,835 (a read per request:
the read's own work, about 32,000 instructions, is the request's alone; over TLS each answer is a
record of its own too, about 14,000 more); consumed, 292 / 8,540 and 196 / 6,279. ``--everything``
counts the whole process between the dumps, not only ``uv__read``.

    python bench/security_instructions.py [-n 6000] [--whole] [--clients LIST] [--everything] [--peer CHECKOUT]

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
sys.path.insert(0, str(REPO / "bench"))

from cli.certs import make_certs  # noqa: E402
from controller.launcher import BrokerProcess, free_port  # noqa: E402

SIDES = ("PLAINTEXT", "SASL_SSL")


def measure(repo: Path, n: int, whole: bool = False, clients: tuple[str, ...] = (),
            everything: bool = False) -> dict[str, float]:
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
    broker.prefix = ["valgrind", "--tool=callgrind", *([] if everything else ["--toggle-collect=uv__read"]),
                     f"--callgrind-out-file={out}"]
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
        if whole:
            from security_bench import produce_whole

            for side in SIDES:
                def counted(_pid: int, records: int, run, side: str = side) -> None:
                    dump()
                    run()
                    per_record[f"{side} whole"] = dump() / records
                produce_whole(confs[side]["bootstrap.servers"], confs[side], "t", n, broker.pid, warmup=35,
                              measure=counted)
                print(f"{repo} {side}, requests written whole: {per_record[side + ' whole']:,.0f} instructions per "
                      f"record", flush=True)
        for client in clients:
            from security_bench import produce_consume_child

            for side in SIDES:
                counts = []

                def counted(_pid: int, records: int, run) -> None:
                    dump()
                    run()
                    counts.append(dump() / records)
                topic = f"{client}-{side}"
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(300)
                produce_consume_child(client, confs[side], topic, n, broker.pid, measure=counted)
                per_record[f"{side} {client}"], per_record[f"{side} {client} consume"] = counts
                print(f"{repo} {side}, {client}: {counts[0]:,.0f} instructions per record produced, {counts[1]:,.0f} "
                      f"per record consumed", flush=True)
    finally:
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return per_record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=6000)
    parser.add_argument("--peer", type=Path)
    parser.add_argument("--whole", action="store_true", help="also kbroker's client writing each request whole")
    parser.add_argument("--clients", default="", metavar="LIST",
                        help="also these Python clients (kafka-python, aiokafka; comma-separated), each in a process "
                        "of its own (bench/_security_client.py): produce, then consume")
    parser.add_argument("--everything", action="store_true",
                        help="count every instruction of the broker process between the dumps, not only uv__read's "
                        "(the event loop's own work per wake-up too, and its timers and threads)")
    args = parser.parse_args()
    clients = tuple(c for c in args.clients.split(",") if c)
    results = {REPO: measure(REPO, args.n, args.whole, clients, args.everything)}
    if args.peer:
        results[args.peer] = measure(args.peer, args.n, args.whole, clients, args.everything)
    for repo, counts in results.items():
        for kind in ("",) + ((" whole",) if args.whole else ()) + tuple(
                f" {c}{w}" for c in clients for w in ("", " consume")):
            plain, secure = counts["PLAINTEXT" + kind], counts["SASL_SSL" + kind]
            label = {"": "", " whole": ", requests written whole"}.get(kind, f",{kind}")
            print(f"{repo}{label}: PLAINTEXT {plain:,.0f}, SASL_SSL {secure:,.0f} "
                  f"instructions per record; PLAINTEXT / SASL_SSL {plain / secure:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
