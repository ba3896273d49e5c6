"""A follower's fetcher sends its next Fetch inside the read of the previous response
(protocol/client/eager.py), on MockTime, the leader played through a BrokerConnection whose
transport keeps what is written: when ``data_received`` of a response with new records
returns, they are in the follower's log and the next Fetch, at the new log end, is written
(the one that moves the leader's high watermark and its acks=all produces), before the loop
turn goes on to the other reads it holds."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.fetcher import PartitionFetchState, ReplicaFetcher, _whole_batches
from broker.partition import Partition
from protocol.api_keys import ApiKey
from protocol.client.connection import BrokerConnection
from protocol.clock import MockTime
from protocol.fast_codecs import (FetchPartition, FetchPartitionData, FetchRequest, decode_fetch_request,
                                  encode_fetch_response, parse_request_header)
from protocol.records import Record, build_batch
from storage import Log, LogConfig
from tests.support import LOOP_FACTORIES, run_on

VERSION = 11


class KeptTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[bytes] = []

    def writelines(self, chunks) -> None:
        self.frames.append(b"".join(bytes(c) for c in chunks))

    def get_extra_info(self, name, default=None):
        return default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def fetch_offsets(frame: bytes) -> tuple[int, list[int]]:
    """(correlation id, the fetch offsets) of a written Fetch request frame."""
    header = parse_request_header(memoryview(frame)[4:], flexible=False)
    assert header.api_key == ApiKey.FETCH
    request = decode_fetch_request(header.api_version, memoryview(frame)[4:], header.size)
    return header.correlation_id, [fp.fetch_offset for _t, parts in request.topics for fp in parts]


def response_frame(correlation_id: int, records: bytes, high_watermark: int) -> bytes:
    chunks, _n = encode_fetch_response(VERSION, correlation_id, [("t", [FetchPartitionData(
        0, 0, high_watermark, high_watermark, 0, records)])])
    return b"".join(bytes(c) for c in chunks)


def read_into(conn: BrokerConnection, data: bytes, read_size: int) -> None:
    """A transport reading ``data`` into the connection (asyncio.BufferedProtocol), at most
    ``read_size`` bytes a read."""
    pos = 0
    while pos < len(data):
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(data) - pos, read_size)
        buf[:n] = data[pos:pos + n]
        pos += n
        conn.buffer_updated(n)


@pytest.mark.parametrize("read_size", [0, 1000, 1 << 20], ids=["data_received", "reads-of-1000", "one-read"])
@pytest.mark.parametrize("loop_factory", list(LOOP_FACTORIES.values()), ids=list(LOOP_FACTORIES))
def test_the_next_fetch_leaves_in_the_read_of_the_response(tmp_path, loop_factory, read_size) -> None:
    """On asyncio's loop and on uvloop's (the broker's); the response handed over as a chunk
    (data_received) or read into the connection (get_buffer / buffer_updated, as uvloop reads it)."""
    run_on(loop_factory, _the_next_fetch_leaves_in_the_read_of_the_response(tmp_path, read_size))


async def _the_next_fetch_leaves_in_the_read_of_the_response(tmp_path, read_size: int = 0) -> None:
    time = MockTime()
    log = Log.open(tmp_path / "t-0", LogConfig(), time=time)
    partition = Partition("t", 0, local_broker_id=2, time=time)
    partition.log = log
    manager = SimpleNamespace(broker_id=2, time=time, backoff_ms=1000, topic_stats=None, follower_quota=None,
                              on_truncated_below_recovery_point=None, fetch_wait_max_ms=500, fetch_min_bytes=1,
                              fetch_max_bytes=1 << 20, fetch_response_max_bytes=10 << 20, socket_timeout_ms=30000)
    fetcher = ReplicaFetcher(manager, 1, "127.0.0.1", 9)  # type: ignore[arg-type]
    state = PartitionFetchState(partition, leader_epoch=0)
    state.truncating = False
    fetcher.partitions[partition.key] = state
    conn = BrokerConnection("127.0.0.1", 9, time=time)
    conn.api_versions = {ApiKey.FETCH: (4, VERSION)}
    transport = KeptTransport()
    conn.connection_made(transport)
    fetcher._conn = conn
    loop = asyncio.get_running_loop()
    fetcher._task = loop.create_task(fetcher._run())
    try:
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(transport.frames) == 1
        cid, offsets = fetch_offsets(transport.frames[0])
        assert offsets == [0]

        batch = build_batch([Record(value=b"v" * 500, timestamp=1)] * 5, base_offset=0, partition_leader_epoch=0)
        seen_at_return = loop.create_future()

        def deliver() -> None:  # the event loop's read of the leader's answer (no task running)
            if read_size:
                read_into(conn, response_frame(cid, batch, 0), read_size)
            else:
                conn.data_received(response_frame(cid, batch, 0))
            seen_at_return.set_result((log.log_end_offset, list(transport.frames)))
        loop.call_soon(deliver)
        leo, frames = await seen_at_return
        assert leo == 5
        assert len(frames) == 2, "the next Fetch waited for a later turn of the loop"
        assert fetch_offsets(frames[1])[1] == [5]
    finally:
        fetcher._stopping = True
        fetcher._task.cancel()
        await asyncio.gather(fetcher._task, return_exceptions=True)
        conn.close()
        log.close()


def test_a_fetch_is_sent_at_the_version_of_the_latest_api_versions_answer() -> None:
    """BrokerConnection.fetch keeps the Fetch version it negotiated, for the ApiVersions answer it
    came from only: a new answer (a reconnect's renegotiation) is asked again."""
    time = MockTime()
    conn = BrokerConnection("127.0.0.1", 9, time=time)
    transport = KeptTransport()
    conn.connection_made(transport)
    request = FetchRequest(VERSION, 2, 500, 1, 1 << 20, 0, 0, -1, [("t", [FetchPartition(0, 0, 0, 0, 1 << 20)])], [],
                           "")

    async def sent_version(api_versions) -> int:
        conn.api_versions = api_versions
        task = asyncio.get_running_loop().create_task(conn.fetch(request))
        await asyncio.sleep(0)
        header = parse_request_header(memoryview(transport.frames[-1])[4:], flexible=False)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return header.api_version

    async def main() -> list[int]:
        return [await sent_version({ApiKey.FETCH: (4, 11)}), await sent_version({ApiKey.FETCH: (4, 9)}),
                await sent_version({ApiKey.FETCH: (4, 11)})]
    try:
        assert asyncio.run(main()) == [11, 9, 11]
    finally:
        conn.close()


def test_whole_batches_keeps_complete_batches_only() -> None:
    """A fetched blob of one whole batch is kept whole; a partial batch after whole ones, or a
    batch length that claims more than is there or less than a header, ends what is kept."""
    one = build_batch([Record(value=b"v" * 50, timestamp=1)] * 3, base_offset=0)
    two = build_batch([Record(value=b"w", timestamp=1)] * 2, base_offset=3)
    assert bytes(_whole_batches(memoryview(one))) == one
    assert bytes(_whole_batches(memoryview(one + two))) == one + two
    assert bytes(_whole_batches(memoryview(one + two[:70]))) == one
    assert bytes(_whole_batches(memoryview(one[:-1]))) == b""
    assert bytes(_whole_batches(memoryview(one[:40]))) == b""
    longer = bytearray(one)
    longer[8:12] = (len(one) - 12 + 1).to_bytes(4, "big")  # one byte more than the blob holds
    assert bytes(_whole_batches(memoryview(longer))) == b""
    shorter = bytearray(one + two)
    shorter[8:12] = (40).to_bytes(4, "big")  # less than a header: no batch from there on
    assert bytes(_whole_batches(memoryview(shorter))) == b""


def test_an_answer_without_a_whole_batch_backs_off(tmp_path, caplog) -> None:
    """A non-empty answer that holds no whole batch (a leader answers its first batch whole,
    KIP-74, so this is a broken answer) appends nothing and backs the partition off with a
    log line, instead of asking for the same offset again at once, for ever, silently."""
    time = MockTime()
    log = Log.open(tmp_path / "t-0", LogConfig(), time=time)
    partition = Partition("t", 0, local_broker_id=2, time=time)
    partition.log = log
    manager = SimpleNamespace(broker_id=2, time=time, backoff_ms=1000, topic_stats=None, follower_quota=None)
    fetcher = ReplicaFetcher(manager, 1, "127.0.0.1", 9)  # type: ignore[arg-type]
    state = PartitionFetchState(partition, leader_epoch=0)
    batch = build_batch([Record(value=b"a", timestamp=1)] * 10, base_offset=0, partition_leader_epoch=0)
    try:
        with caplog.at_level("INFO", logger="broker.fetcher"):
            fetcher._process_partition(partition.key, state, FetchPartitionData(
                0, 0, 10, 10, 0, memoryview(batch)[:-1]))
        assert log.log_end_offset == 0
        assert state.delayed_until_ms == time.monotonic_ms() + 1000
        assert "no whole batch" in caplog.text
        # a whole batch is taken as before
        state.delayed_until_ms = 0
        fetcher._process_partition(partition.key, state, FetchPartitionData(0, 0, 10, 10, 0, memoryview(batch)))
        assert log.log_end_offset == 10
    finally:
        log.close()
