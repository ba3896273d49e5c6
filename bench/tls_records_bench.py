#!/usr/bin/env python3
"""What a TLS record costs the broker, counted in instructions (bench/instructions.py: callgrind,
a count, the same however busy the machine is). The broker's TLS is the event loop's: an
SSLObject over memory BIOs, each buffer handed to the transport written on its own, read by
uvloop's SSLProtocol with SSLObject.read until SSLWantReadError (a call per record with _ssl's
read, one for all with broker/_tls_read.c's); this bench drives an SSLObject pair the same
way in process, without sockets, so that OpenSSL's and Python's work per record is all that is
counted. Numbers, never pass/fail.

Read side, one Produce request of 15 records of 1 KiB (16.5 KB), as the broker decrypts it:
* ``librdkafka``: in 31 TLS records, as librdkafka (confluent-kafka, kcat) sends it: it calls
  SSL_write per buffer segment, a record's header and its value being two segments (31 records per
  request is what the broker read from confluent-kafka in bench/security_bench.py's produce);
* ``whole``: in 2 records, as a client that writes a request at once sends it (16 KiB a record);
  both read as uvloop's SSLProtocol reads (read(n, buffer) until SSLWantReadError) through
  _ssl's read, a record a call, and (``-records``) through broker/_tls_read.c's, every whole
  record in one call.
Write side, what the broker encrypts:
* ``answers-per-buffer`` / ``answers-records``: the Produce answers of one read (11, as read from
  confluent-kafka), a record per answer (uvloop's writelines of them as they are) vs through
  broker/network.py's tls_writes (runs of small buffers joined: here one record);
* ``fetch-per-buffer`` / ``fetch-records``: a Fetch answer of one partition (78 bytes of headers,
  200 KB of records, an empty trailer), the same two ways.

    python bench/tls_records_bench.py [--n 40]
"""

from __future__ import annotations

import argparse
import ssl
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from instructions import available, measured, per_iteration  # noqa: E402

SIDES = ["librdkafka", "librdkafka-records", "whole", "whole-records",
         "answers-per-buffer", "answers-records", "fetch-per-buffer", "fetch-records"]
REQUEST = [b"p" * 150] + [b"h" * 70 if i % 2 == 0 else b"v" * 1024 for i in range(30)]  # 31 segments
ANSWERS = [[b"a" * 60] for _ in range(11)]
FETCH = [b"f" * 78, bytes(200_000), b""]


def tls_pair(record_reader: bool = False):
    from broker.network import FastSSLObject
    from cli.certs import make_certs

    directory = Path(tempfile.mkdtemp(prefix="tls-records-bench-"))
    keystore = make_certs(directory, ["localhost"], [])["localhost"]
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(keystore)
    server_ctx.sslobject_class = FastSSLObject  # the listeners' (broker/network.py)
    FastSSLObject.use_record_reader = record_reader
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(directory / "ca.pem")
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(6):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    try:
        client.read(1)  # TLS 1.3: takes the session tickets in
    except ssl.SSLWantReadError:
        pass
    return server, client, s_in, s_out, c_out


def child(side: str, count: int) -> None:
    from broker.network import tls_writes

    server, client, s_in, s_out, c_out = tls_pair(record_reader=side.endswith("-records"))
    sslobj = server._sslobj  # what uvloop calls for writes (broker/network.py's FastSSLObject binds the same)
    buffer = memoryview(bytearray(256 << 10))
    if side.startswith(("librdkafka", "whole")):
        wires = []
        for _ in range(count):
            for piece in (REQUEST if side.startswith("librdkafka") else [b"".join(REQUEST)]):
                client.write(piece)
            wires.append(c_out.read())
        it = iter(wires)
        read = server.read  # FastSSLObject's: _ssl's read, or broker/_tls_read.c's with -records

        def step() -> None:  # uvloop's SSLProtocol._do_read__buffered: read until SSLWantReadError
            s_in.write(next(it))
            wants = len(buffer)
            got = read(wants, buffer)
            try:
                while got < wants:
                    n = read(wants - got, buffer[got:])
                    if not n:
                        break
                    got += n
            except ssl.SSLWantReadError:
                pass
            assert got == sum(map(len, REQUEST))
        measured(step, count)
        return
    buffers = [b for answer in ANSWERS for b in answer] if side.startswith("answers") else FETCH

    def write() -> None:
        for piece in (tls_writes(buffers) if side.endswith("records") else buffers):
            if len(piece):
                sslobj.write(piece)
        s_out.read()
    measured(write, count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=40, help="iterations counted per side (on top of 20)")
    parser.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        child(args._child[0], int(args._child[1]))
        return 0
    if not available():
        print("valgrind is not installed: no counts")
        return 1
    counts = {}
    for side in SIDES:
        counts[side] = per_iteration([sys.executable, __file__, "--_child", side], n=args.n, low=20)
        print(f"{side}: {counts[side]:,.0f} instructions per iteration", flush=True)
    print(f"read: a produce request in 31 records (librdkafka) costs {counts['librdkafka'] / counts['whole']:.2f}x "
          f"one in 2 records, {(counts['librdkafka'] - counts['whole']) / 29:,.0f} instructions per extra record")
    print(f"read with broker/_tls_read.c: {counts['librdkafka-records']:,.0f} vs {counts['librdkafka']:,.0f} instructions "
          f"({counts['librdkafka-records'] / counts['librdkafka']:.2f}x) in 31 records, {counts['whole-records']:,.0f} vs "
          f"{counts['whole']:,.0f} in 2; {(counts['librdkafka-records'] - counts['whole-records']) / 29:,.0f} "
          f"instructions per extra record")
    for what in ("answers", "fetch"):
        records, per_buffer = counts[f"{what}-records"], counts[f"{what}-per-buffer"]
        print(f"write {what}: tls_writes {records:,.0f} vs a record per buffer {per_buffer:,.0f} instructions "
              f"({records / per_buffer:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
