"""broker/_tls_read.c, the read of a TLS listener's SSLObjects (every whole record in one call),
against its reference, _ssl's own read: the same plaintext after every chunk of the wire, the
same answers at the end (close_notify, a corrupted record), whatever the record sizes, the
wire's chunks and the size of the reads."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from broker import network
from broker.network import FastSSLObject


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    from cli.certs import make_certs

    directory: Path = tmp_path_factory.mktemp("tls-read")
    keystore = make_certs(directory, ["localhost"], [])["localhost"]
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(keystore)
    server.sslobject_class = FastSSLObject
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(directory / "ca.pem")
    return server, client


def pair(contexts, record_reader: bool, version: ssl.TLSVersion):
    """A server and a client SSLObject after their handshake; the server's reads with the
    record reader and keeps its buffers, or (``record_reader`` False) is as CPython makes it:
    _ssl's read, buffers released when empty."""
    server_ctx, client_ctx = contexts
    server_ctx.maximum_version = version
    FastSSLObject.use_record_reader = FastSSLObject.keep_buffers = record_reader
    try:
        s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
        server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
        client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    finally:
        FastSSLObject.use_record_reader = FastSSLObject.keep_buffers = True
    for _ in range(6):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return server, client, s_in, c_out


def drain(server, size: int) -> tuple[bytes, str]:
    """Read as uvloop's SSLProtocol does (``_do_read__buffered``): read(n, buffer) until the
    buffer is full, 0 or an exception; what was read and how it ended."""
    buffer = memoryview(bytearray(size))
    got = 0
    end = "full"
    try:
        while got < size:
            n = server.read(size - got, buffer[got:])
            if not n:
                end = "eof"
                break
            got += n
    except ssl.SSLWantReadError:
        end = "want-read"
    except ssl.SSLError as exc:
        end = f"{type(exc).__name__}: {exc.reason}"
    return bytes(buffer[:got]), end


def run(contexts, record_reader, version, pieces, cuts, size, ending):
    server, client, s_in, c_out = pair(contexts, record_reader, version)
    if record_reader:
        assert type(server.read).__name__ == "Reader"
    for piece in pieces:
        client.write(piece)
    wire = c_out.read()
    if ending == "close_notify":
        try:
            client.unwrap()
        except ssl.SSLWantReadError:
            pass
        wire += c_out.read()
    elif ending == "corrupt":
        wire += b"\x17\x03\x03\x00\x20" + bytes(32)
    steps = []
    start = 0
    for cut in sorted({min(len(wire), int(c * len(wire))) for c in cuts} | {len(wire)}):
        s_in.write(wire[start:cut])
        start = cut
        while True:
            data, end = drain(server, size)
            steps.append((data, end))
            if end != "full":
                break
    return steps


@pytest.mark.skipif(network._RECORD_READER is None, reason="run by test_the_record_reader_is_built")
@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(st.integers(1, 40_000).map(lambda n: bytes([n % 251]) * n), min_size=1, max_size=12),
       cuts=st.lists(st.floats(0, 1), max_size=6), size=st.sampled_from([1, 100, 16384, 50_000, 256 << 10]),
       ending=st.sampled_from(["none", "close_notify", "corrupt"]),
       version=st.sampled_from([ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]))
def test_the_record_reader_reads_what_ssl_reads(contexts, pieces, cuts, size, ending, version):
    reference = run(contexts, False, version, pieces, cuts, size, ending)
    fast = run(contexts, True, version, pieces, cuts, size, ending)
    # The same bytes after each chunk of the wire, the same end; the reader may take in one
    # call what _ssl's read hands out a record at a time, never more or less.
    read = b"".join(d for d, _ in reference)
    assert b"".join(d for d, _ in fast) == read and b"".join(pieces).startswith(read)
    assert fast[-1][1] == reference[-1][1]

    def per_chunk(steps):
        out, acc = [], b""
        for data, end in steps:
            acc += data
            if end != "full":
                out.append((acc, end))
                acc = b""
        return out
    assert per_chunk(fast) == per_chunk(reference)
    if ending == "none":
        assert b"".join(d for d, _ in fast) == b"".join(pieces)


def test_the_record_reader_is_built():
    """make test-deps builds broker/_tls_read.c and binds it to the loaded _ssl's OpenSSL."""
    assert network._RECORD_READER is not None, "broker._tls_read is not built: run `make test-deps`"


def test_the_record_reader_reads_every_whole_record_in_one_call(contexts):
    server, client, s_in, c_out = pair(contexts, True, ssl.TLSVersion.TLSv1_3)
    for i in range(31):  # a Produce request as librdkafka writes it
        client.write(bytes([i]) * (70 if i % 2 else 1024))
    wire = c_out.read()
    s_in.write(wire[:-10])  # the last record not whole yet
    buffer = memoryview(bytearray(1 << 18))
    assert server.read(len(buffer), buffer) == 15 * 70 + 15 * 1024
    with pytest.raises(ssl.SSLWantReadError):
        server.read(1 << 17, buffer[1 << 17:])
    s_in.write(wire[-10:])
    assert server.read(len(buffer), buffer) == 1024
    with pytest.raises(ssl.SSLWantReadError):  # no buffer: _ssl's read answers
        server.read(5)


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
@pytest.mark.parametrize("wire", ["nothing", "part of a record"])
def test_a_read_with_no_whole_record_raises_what_ssl_raises_without_asking_it(contexts, version, wire):
    """uvloop reads until SSLWantReadError, so every read of a TLS connection ends with one: the
    reader raises it itself (_ssl's read would read again and build it with a message, a reason
    and a library: 8.6 µs against 3.7 a read, raise and catch included, at load 19), with _ssl's
    errno and message (the source line _ssl appends aside), and the connection reads on as
    before."""
    def outcome(record_reader):
        server, client, s_in, c_out = pair(contexts, record_reader, version)
        client.write(b"w" * 3000)
        data = c_out.read()
        if wire == "part of a record":
            s_in.write(data[:100])
        buffer = memoryview(bytearray(4000))
        with pytest.raises(ssl.SSLWantReadError) as raised:
            server.read(len(buffer), buffer)
        s_in.write(data[100:] if wire == "part of a record" else data)
        assert server.read(len(buffer), buffer) == 3000 and bytes(buffer[:3000]) == b"w" * 3000
        return raised.value
    fast, reference = outcome(True), outcome(False)
    assert type(fast) is type(reference) is ssl.SSLWantReadError
    assert fast.errno == reference.errno == ssl.SSL_ERROR_WANT_READ
    assert reference.strerror.startswith(fast.strerror + " (_ssl.c:")  # _ssl's own message names its line
    assert fast.args == (ssl.SSL_ERROR_WANT_READ, "The operation did not complete (read)")  # the reader's, not _ssl's


def test_other_objects_get_no_record_reader():
    if network._RECORD_READER is None:
        pytest.skip("not built")
    assert network._RECORD_READER(object()) is None
    assert network._RECORD_READER(ssl.MemoryBIO()) is None


def test_a_corrupted_record_read_after_good_ones_leaves_no_error_for_another_connection(contexts):
    """OpenSSL's error queue is the thread's, and SSL_get_error() trusts it: a failed record
    read after whole ones (the reader returns what it read) must not leave its error there,
    or the next connection the event loop thread reads sees SSL_ERROR_SSL where it had nothing
    yet (SSLWantReadError) and is closed for another connection's garbage."""
    a, a_client, a_in, a_out = pair(contexts, True, ssl.TLSVersion.TLSv1_3)
    b, b_client, b_in, b_out = pair(contexts, True, ssl.TLSVersion.TLSv1_3)
    a_client.write(b"x" * 1000)
    a_in.write(a_out.read() + b"\x17\x03\x03\x00\x20" + bytes(32))  # a whole record, then garbage
    buffer = memoryview(bytearray(1 << 16))
    assert a.read(len(buffer), buffer) == 1000
    with pytest.raises(ssl.SSLWantReadError):  # b has nothing yet: nothing else to say
        b.read(len(buffer), buffer)
    b_client.write(b"y" * 10)
    b_in.write(b_out.read())
    assert b.read(len(buffer), buffer) == 10 and bytes(buffer[:10]) == b"y" * 10
    with pytest.raises(ssl.SSLError) as failed:  # a's garbage is still a's, reported on its next read
        a.read(len(buffer), buffer)
    assert failed.value.reason == "DECRYPTION_FAILED_OR_BAD_RECORD_MAC"  # the reason _ssl's read gives


@pytest.mark.parametrize("n", [0, -1, 5000])
def test_reads_of_other_sizes_are_ssl_s_own(contexts, n):
    """A size that is not 1..len(buffer) is _ssl's read's to answer (whatever it answers)."""
    def outcome(record_reader):
        server, client, s_in, c_out = pair(contexts, record_reader, ssl.TLSVersion.TLSv1_3)
        client.write(b"m" * 3000)
        s_in.write(c_out.read())
        buffer = bytearray(1000)
        try:
            return server.read(n, buffer), bytes(buffer)
        except Exception as exc:  # noqa: BLE001 - compared, whatever it is
            return type(exc).__name__, str(exc)
    assert outcome(True) == outcome(False)


def test_a_listener_connection_keeps_its_tls_buffers(contexts):
    """CPython's _ssl sets SSL_MODE_RELEASE_BUFFERS: OpenSSL frees a connection's read buffer
    after every record read (no read-ahead) and its write buffer after every write, a malloc and
    a free of about 17 KB each. A listener's SSLObject (FastSSLObject) keeps them."""
    helper = network._TLS_HELPER
    assert helper is not None, "broker._tls_read is not built: run `make test-deps`"
    plain_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    assert helper.releases_buffers(plain_ctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_side=True)._sslobj)
    server, client, s_in, c_out = pair(contexts, True, ssl.TLSVersion.TLSv1_3)
    assert helper.releases_buffers(server._sslobj) is False
    client.write(b"r" * 3000)  # and reads as before (the equivalence test reads both ways at length)
    s_in.write(c_out.read())
    buffer = memoryview(bytearray(4000))
    assert server.read(len(buffer), buffer) == 3000 and bytes(buffer[:3000]) == b"r" * 3000
    released, *_ = pair(contexts, False, ssl.TLSVersion.TLSv1_3)
    assert helper.releases_buffers(released._sslobj) is True


def test_other_objects_keep_no_buffers():
    helper = network._TLS_HELPER
    assert helper is not None  # built (setup.py); the test beside it asserts so too
    assert helper.keep_buffers(object()) is False and helper.releases_buffers(object()) is None
    assert helper.keep_buffers(ssl.MemoryBIO()) is False and helper.releases_buffers(ssl.MemoryBIO()) is None


def partial_tail(wire: bytes) -> int:
    """The bytes of ``wire`` (TLS records from a record's start) after its last whole record."""
    pos = 0
    while pos + 5 <= len(wire) and pos + 5 + int.from_bytes(wire[pos + 3:pos + 5], "big") <= len(wire):
        pos += 5 + int.from_bytes(wire[pos + 3:pos + 5], "big")
    return len(wire) - pos


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(st.integers(1, 40_000).map(lambda n: bytes([n % 251]) * n), min_size=1, max_size=12),
       cuts=st.lists(st.floats(0, 1), max_size=8),
       version=st.sampled_from([ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]))
def test_the_reader_leaves_part_of_a_record_in_the_incoming_buffer(contexts, pieces, cuts, version):
    """A read takes every whole record and leaves the part of one in the incoming buffer (OpenSSL
    is not asked for it: it could only answer "want read"); the plaintext comes out whole."""
    server, client, s_in, c_out = pair(contexts, True, version)
    for piece in pieces:
        client.write(piece)
    wire = c_out.read()
    total = sum(len(p) for p in pieces)
    got = start = 0
    plaintext = bytearray()
    for cut in sorted({int(c * len(wire)) for c in cuts} | {len(wire)}):
        s_in.write(wire[start:cut])
        start = cut
        while True:
            data, end = drain(server, 256 << 10)
            got += len(data)
            plaintext += data
            if end != "full":
                break
        assert end == "want-read"
        assert s_in.pending == partial_tail(wire[:cut])
    assert got == total and bytes(plaintext) == b"".join(pieces)
