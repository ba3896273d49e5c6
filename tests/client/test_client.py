"""protocol.client: connection-level behaviour against tiny in-process fake brokers, and the
client, producer and consumer against a real broker (``bootstrap``, see conftest.py)."""

from __future__ import annotations

import asyncio
import collections
import random
import struct
import time

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from protocol.api_keys import ApiKey
from protocol.client import (BrokerConnection, Consumer, KafkaClient, KafkaConnectionError, LogTruncationError, Network,
                             Producer, murmur2, murmur2_partition)
from protocol.clock import MockTime
from protocol.compression import Compression
from protocol.errors import (ErrorCode, InvalidPartitionsError, OffsetOutOfRangeError, OutOfOrderSequenceNumberError,
                             RequestTimedOutError, TopicAlreadyExistsError, UnknownTopicOrPartitionError,
                             UnsupportedVersionError)
from protocol.framing import Framer
from protocol.fast_codecs import (FetchPartition, FetchPartitionData, FetchRequest, decode_fetch_request,
                              decode_produce_request, encode_fetch_response, encode_produce_response,
                              parse_request_header)
from protocol.messages import APIS, request_is_flexible
from protocol.records import Record, build_batch, decode_batch, iter_batch_headers
from tests.support import free_port

CLOSE = object()  # a FakeBroker reply: drop the connection instead of answering


def response(correlation_id: int, body: bytes) -> bytes:
    """A response frame's content with a v0 header."""
    return struct.pack(">i", correlation_id) + body


def api_versions_body(version: int, ranges: dict[int, tuple[int, int]], error: int = 0) -> bytes:
    return APIS[ApiKey.API_VERSIONS].response.build(version, {"error_code": error, "api_keys": [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in ranges.items()]})


BROKER_RANGES = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 12), ApiKey.FETCH: (4, 17)}


class FakeBroker:
    """An asyncio server on 127.0.0.1 that hands each request to ``respond(header, body)``,
    which returns the response content after the size (see ``response``), None for no
    answer, or CLOSE. ApiVersions is answered from BROKER_RANGES unless ``respond`` does."""

    def __init__(self, respond) -> None:
        self.respond = respond
        self.requests: list[tuple[int, int]] = []
        self.received = asyncio.Event()
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}

    async def __aenter__(self) -> "FakeBroker":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info) -> None:
        self._server.close()
        for writer in self._connections.values():
            writer.close()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections[asyncio.current_task()] = writer
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                header = parse_request_header(frame, flexible_for=request_is_flexible)
                self.requests.append((header.api_key, header.api_version))
                self.received.set()
                reply = self.respond(header, frame[header.size:])
                if reply is None and header.api_key == ApiKey.API_VERSIONS:
                    reply = response(header.correlation_id, api_versions_body(header.api_version, BROKER_RANGES))
                if reply is CLOSE:
                    return
                if reply is not None:
                    writer.write(struct.pack(">i", len(reply)) + reply)
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


def one_partition_metadata(version: int, correlation_id: int, port: int) -> bytes:
    """A Metadata answer: broker 1 at 127.0.0.1:``port``, leading topic "t"'s one partition."""
    return response(correlation_id, APIS[ApiKey.METADATA].response.build(version, {
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": port}], "controller_id": 1,
        "topics": [{"error_code": 0, "name": "t", "partitions": [{
            "error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
            "replica_nodes": [1], "isr_nodes": [1]}]}]}))


def never_answer(header, body):
    return None


# ---------------------------------------------------------------------------------------------
# Connections, against fake brokers

@pytest.mark.parametrize("their_api_versions, expected_versions", [
    ((0, 2), [3, 2]),  # the broker lists ApiVersions 0-2: retry with v2
    (None, [3, 0]),    # it lists nothing for ApiVersions: retry with v0
])
async def test_api_versions_falls_back_per_kip511(their_api_versions, expected_versions):
    highest = their_api_versions[1] if their_api_versions else 0

    def respond(header, body):
        if header.api_version > highest:  # KIP-511: error 35 with a v0 body listing ApiVersions' range
            listed = {ApiKey.API_VERSIONS: their_api_versions} if their_api_versions else {}
            return response(header.correlation_id, api_versions_body(0, listed, ErrorCode.UNSUPPORTED_VERSION))
        return response(header.correlation_id, api_versions_body(header.api_version, BROKER_RANGES))

    async with FakeBroker(respond) as fake:
        conn = BrokerConnection("127.0.0.1", fake.port)
        await conn.connect()
        assert fake.requests == [(ApiKey.API_VERSIONS, v) for v in expected_versions]
        assert conn.api_versions[ApiKey.METADATA] == (0, 12)
        assert conn.version_for(ApiKey.METADATA) == APIS[ApiKey.METADATA].max_version  # ours is the lower max
        assert conn.version_for(ApiKey.FETCH) == 11
        assert conn.version_for(ApiKey.FETCH, max_v=9) == 9
        with pytest.raises(UnsupportedVersionError, match="does not support Produce"):
            conn.version_for(ApiKey.PRODUCE)
        conn.close()


@pytest.mark.parametrize("their_max", [-1, -32768])
async def test_api_versions_fallback_never_goes_below_zero(their_max):
    """A broker that answers UNSUPPORTED_VERSION listing a negative ApiVersions max: the client
    gives up with UnsupportedVersionError (it sent a ValueError out of connect(), building a v-1
    request)."""
    def respond(header, body):
        listed = {ApiKey.API_VERSIONS: (0, their_max)}
        return response(header.correlation_id, api_versions_body(0, listed, ErrorCode.UNSUPPORTED_VERSION))

    async with FakeBroker(respond) as fake:
        conn = BrokerConnection("127.0.0.1", fake.port)
        with pytest.raises(UnsupportedVersionError, match=f"ApiVersions v0-{their_max}"):
            await conn.connect()
        assert fake.requests == [(ApiKey.API_VERSIONS, 3)]
        assert not conn.connected


async def test_version_for_without_overlap_names_both_ranges():
    def respond(header, body):
        if header.api_key == ApiKey.API_VERSIONS:
            ranges = {**BROKER_RANGES, ApiKey.FETCH: (12, 17)}
            return response(header.correlation_id, api_versions_body(header.api_version, ranges))

    async with FakeBroker(respond) as fake:
        conn = BrokerConnection("127.0.0.1", fake.port)
        await conn.connect()
        assert fake.requests == [(ApiKey.API_VERSIONS, 3)]  # v3 accepted: no fallback
        with pytest.raises(UnsupportedVersionError, match="4-11.*12-17"):
            conn.version_for(ApiKey.FETCH)
        conn.close()


async def test_pending_requests_fail_when_the_broker_closes_the_connection():
    async with FakeBroker(lambda header, body: CLOSE if header.api_key == ApiKey.METADATA else None) as fake:
        conn = BrokerConnection("127.0.0.1", fake.port)
        await conn.connect()
        results = await asyncio.gather(conn.request(ApiKey.METADATA, {"topics": []}),
                                       conn.request(ApiKey.METADATA, {"topics": []}), return_exceptions=True)
        assert [type(r) for r in results] == [KafkaConnectionError] * 2
        assert results[0].retriable and results[0].invalid_metadata
        assert not conn.connected
        with pytest.raises(KafkaConnectionError):
            await conn.request(ApiKey.METADATA, {"topics": []})


async def test_a_response_out_of_order_closes_the_connection():
    def respond(header, body):
        if header.api_key == ApiKey.METADATA:
            return response(header.correlation_id + 1, b"")

    async with FakeBroker(respond) as fake:
        conn = BrokerConnection("127.0.0.1", fake.port)
        await conn.connect()
        with pytest.raises(KafkaConnectionError, match="out of sync"):
            await conn.request(ApiKey.METADATA, {"topics": []})
        assert not conn.connected


async def test_requests_time_out_on_the_injected_clock():
    clock = MockTime()
    async with FakeBroker(never_answer) as fake:
        conn = BrokerConnection("127.0.0.1", fake.port, time=clock, request_timeout_ms=1000)
        await conn.connect()
        fake.received.clear()
        request = asyncio.ensure_future(conn.request(ApiKey.METADATA, {"topics": []}))
        await asyncio.wait_for(fake.received.wait(), 10)
        clock.sleep(999)
        assert not request.done()
        clock.sleep(1)
        with pytest.raises(RequestTimedOutError):
            await request
        assert not conn.connected


async def test_connect_failure_is_a_connection_error():
    conn = BrokerConnection("127.0.0.1", free_port())
    with pytest.raises(KafkaConnectionError, match="cannot connect"):
        await conn.connect()


# ---------------------------------------------------------------------------------------------
# The consumer's fetches, against two fake brokers on a MockTime that never moves

class _TwoFakeBrokers:
    """Brokers 1 and 2 as FakeBrokers answering through ``respond(node, header, body)``; their
    ports once entered."""

    def _start_brokers(self) -> None:
        self.ports: dict[int, int] = {}
        self.brokers = {node: FakeBroker(lambda header, body, node=node: self.respond(node, header, body))
                        for node in (1, 2)}

    async def __aenter__(self):
        for node, fake in self.brokers.items():
            await fake.__aenter__()
            self.ports[node] = fake.port
        return self

    async def __aexit__(self, *exc_info) -> None:
        for fake in self.brokers.values():
            await fake.__aexit__(*exc_info)

    def versions(self, header, extra: dict[int, tuple[int, int]]) -> bytes:
        """An ApiVersions answer: BROKER_RANGES and ``extra``."""
        return response(header.correlation_id, api_versions_body(header.api_version, {**BROKER_RANGES, **extra}))

    def metadata(self, header, leader: int, epoch: int) -> bytes:
        """A Metadata answer: brokers 1 and 2, replicas of "t"-0 (both in sync), ``leader``
        leading it in ``epoch``."""
        return response(header.correlation_id, APIS[ApiKey.METADATA].response.build(header.api_version, {
            "brokers": [{"node_id": n, "host": "127.0.0.1", "port": port} for n, port in self.ports.items()],
            "controller_id": 1, "topics": [{"error_code": 0, "name": "t", "partitions": [{
                "error_code": 0, "partition_index": 0, "leader_id": leader, "leader_epoch": epoch,
                "replica_nodes": [1, 2], "isr_nodes": [1, 2]}]}]}))


class TwoLeaders(_TwoFakeBrokers):
    """Brokers 1 and 2, leading "t"-0 and "t"-1. Broker 1 answers a Fetch of "t"-0 at an
    offset in ``serve`` with one record there (the value says the offset) and holds any other
    (a long poll the clock never ends); broker 2 never answers a Fetch (dead without a reset)."""

    def __init__(self, serve: range) -> None:
        self.serve = serve
        self.leaderless = 0  # how many Metadata answers name no leader for "t"-0
        self.coordinator = 1  # FindCoordinator's answer
        self.fetches: dict[int, list[int]] = {1: [], 2: []}  # node -> fetch offsets of its partition
        self._start_brokers()

    def respond(self, node: int, header, body: bytes):
        if header.api_key == ApiKey.METADATA:
            leaderless, self.leaderless = self.leaderless > 0, max(0, self.leaderless - 1)
            return response(header.correlation_id, APIS[ApiKey.METADATA].response.build(header.api_version, {
                "brokers": [{"node_id": n, "host": "127.0.0.1", "port": port} for n, port in self.ports.items()],
                "controller_id": 1, "topics": [{"error_code": 0, "name": "t", "partitions": [{
                    "error_code": 0, "partition_index": p, "leader_id": -1 if leaderless and p == 0 else p + 1,
                    "leader_epoch": 0,
                    "replica_nodes": [p + 1], "isr_nodes": [p + 1]} for p in (0, 1)]}]}))
        if header.api_key == ApiKey.API_VERSIONS:
            return response(header.correlation_id, api_versions_body(header.api_version, {
                **BROKER_RANGES, ApiKey.FIND_COORDINATOR: (0, 2)}))
        if header.api_key == ApiKey.FIND_COORDINATOR:
            return response(header.correlation_id, APIS[ApiKey.FIND_COORDINATOR].response.build(header.api_version, {
                "error_code": 0, "error_message": None, "node_id": self.coordinator, "host": "127.0.0.1",
                "port": self.ports[self.coordinator]}))
        if header.api_key != ApiKey.FETCH:
            return None
        request = decode_fetch_request(header.api_version, body, 0)
        [(_topic, [part])] = request.topics
        self.fetches[node].append(part.fetch_offset)
        if node != 1 or part.fetch_offset not in self.serve:
            return None
        batch = build_batch([Record(0, 1000, None, b"%d" % part.fetch_offset)], base_offset=part.fetch_offset)
        chunks, _size = encode_fetch_response(header.api_version, header.correlation_id, [
            ("t", [FetchPartitionData(0, 0, 100, 100, 0, batch, None)])])
        return b"".join(bytes(c) for c in chunks)[4:]


async def test_a_dead_leader_holds_back_only_its_own_partitions():
    """Issue 28 (b): the consumer hands out each node's fetch as it completes. Broker 2 never
    answers, yet each poll returns "t"-0's next record without the clock moving (on the
    injected clock the dead fetch never times out: a poll waiting for it would never return),
    and broker 2 keeps its one Fetch in flight."""
    clock = MockTime()
    async with TwoLeaders(range(3)) as fakes:
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            consumer = Consumer(client)
            consumer.assign([("t", 0), ("t", 1)])
            consumer.seek(("t", 0), 0)
            consumer.seek(("t", 1), 0)
            start = clock.monotonic_ms()
            for offset in range(3):
                # (wait_for only bounds a hang: the clock it would take is never advanced)
                batch = await asyncio.wait_for(consumer.getmany(5000), 10)
                assert {tp: [(r.offset, r.value) for r in rs] for tp, rs in batch.items()} == {
                    ("t", 0): [(offset, b"%d" % offset)]}
                assert await consumer.position(("t", 0)) == offset + 1
            assert clock.monotonic_ms() == start
            assert await consumer.position(("t", 1)) == 0
            assert fakes.fetches[2] == [0]
            consumer.close()


async def test_a_fetch_answer_for_a_partition_seeked_meanwhile_is_dropped():
    clock = MockTime()
    async with TwoLeaders(range(10)) as fakes:
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            consumer = Consumer(client)
            consumer.assign([("t", 0)])
            consumer.seek(("t", 0), 0)
            assert await consumer.getmany(0) == {}  # the Fetch at offset 0 is sent, not answered yet
            consumer.seek(("t", 0), 5)
            batch = await asyncio.wait_for(consumer.getmany(5000), 10)
            assert [r.offset for r in batch[("t", 0)]] == [5]  # offset 0's answer was dropped
            assert fakes.fetches[1] == [0, 5]
            assert await consumer.position(("t", 0)) == 6
            consumer.close()


async def test_a_loop_of_getmany_0_lets_its_fetches_run():
    """A poll with no time left still awaits once, as Kafka's poll(0) polls the network once:
    a loop of getmany(0) (cli/consume.py polls so when less than 1 ms is left) gets the
    records, where polls that never awaited never let the Fetch they started be sent."""
    clock = MockTime()
    async with TwoLeaders(range(1)) as fakes:
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            consumer = Consumer(client)
            consumer.assign([("t", 0)])
            consumer.seek(("t", 0), 0)
            batch: dict = {}
            for _ in range(10000):  # (bounded: a poll that never awaits would loop for ever)
                batch = await consumer.getmany(0)
                if batch:
                    break
            assert fakes.fetches[1] == [0]
            assert [r.offset for r in batch[("t", 0)]] == [0]
            consumer.close()


async def test_the_group_coordinator_gets_a_connection_of_its_own():
    """Broker 1 leads "t"-0 and coordinates group "g". The consumer's Fetch to it is parked
    (the fake holds it; a broker answers a connection's requests in order, so a request
    behind it would wait up to max_wait_ms): the coordinator connection is another one, as
    Java's clients address the coordinator as a node id of its own."""
    from protocol.client.group import find_coordinator

    clock = MockTime()
    async with TwoLeaders(range(0)) as fakes:
        fakes.coordinator = 1
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            consumer = Consumer(client)
            consumer.assign([("t", 0)])
            consumer.seek(("t", 0), 0)
            for _ in range(10000):  # until the Fetch is parked at broker 1
                await consumer.getmany(0)
                if fakes.fetches[1]:
                    break
            assert fakes.fetches[1] == [0]
            coordinator = await find_coordinator(client, "g", 1000)
            assert (coordinator.host, coordinator.port) == ("127.0.0.1", fakes.ports[1])
            assert coordinator is not await client.connection(1)
            assert coordinator is await client.coordinator_connection(1)  # (pooled too)
            consumer.close()


async def test_a_partition_without_a_leader_at_the_first_poll_refreshes_at_once():
    """The bootstrap metadata names no leader for "t"-0: the first poll refreshes the metadata
    at once and fetches from the leader it names, without the clock moving (a poll that
    waited out its timeout before refreshing would never return on this clock)."""
    clock = MockTime()
    async with TwoLeaders(range(1)) as fakes:
        fakes.leaderless = 1
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            assert client.cluster.leader("t", 0) < 0
            consumer = Consumer(client)
            consumer.assign([("t", 0)])
            consumer.seek(("t", 0), 0)
            start = clock.monotonic_ms()
            batch = await asyncio.wait_for(consumer.getmany(5000), 10)  # (a hang guard)
            assert [r.offset for r in batch[("t", 0)]] == [0]
            assert clock.monotonic_ms() == start
            consumer.close()


async def test_a_failed_positions_reset_is_raised_by_the_poll_and_a_seek_recovers():
    """auto_offset_reset="none" and no position: the reset's background task fails, and the
    poll that finds it done raises its error (the task's slot emptied: after a seek the next
    poll fetches, with no failure raised again)."""
    clock = MockTime()
    async with TwoLeaders(range(1)) as fakes:
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            consumer = Consumer(client, auto_offset_reset="none")
            consumer.assign([("t", 0)])
            with pytest.raises(OffsetOutOfRangeError, match="has no position and auto_offset_reset is none"):
                await asyncio.wait_for(consumer.getmany(5000), 10)  # (wait_for: a hang guard)
            consumer.seek(("t", 0), 0)
            batch = await asyncio.wait_for(consumer.getmany(5000), 10)
            assert [r.offset for r in batch[("t", 0)]] == [0]
            consumer.close()


class LeaderMoves(_TwoFakeBrokers):
    """Brokers 1 and 2 with a log each for "t"-0 ({offset: (value, leader epoch)}); the
    metadata names ``leader`` in ``epoch``. A Fetch to the leader at an offset of its log gets
    that record (a batch of its epoch), elsewhere it is held; a Fetch to the other broker gets
    NOT_LEADER_OR_FOLLOWER. OffsetsForLeaderEpoch is answered from the leader's log, as Kafka's
    endOffsetFor: the largest epoch <= the one asked for and where the next one starts (or the
    log end)."""

    def __init__(self, logs: dict[int, dict[int, tuple[bytes, int]]]) -> None:
        self.logs = logs
        self.leader, self.epoch = 1, 0
        self.reelect_on_ask = False  # the first OffsetsForLeaderEpoch finds the leader in a newer epoch
        self.offsets_for_leader_epoch = (0, 3)  # the versions the brokers speak
        self.asked: list[tuple[int, int, int]] = []  # OffsetsForLeaderEpoch: (node, current epoch, epoch)
        self.fetches: list[tuple[int, int, int]] = []  # (node, offset, current leader epoch)
        self._start_brokers()

    def end_offset_for(self, node: int, epoch: int) -> tuple[int, int]:
        log = self.logs[node]
        end = max(log, default=-1) + 1
        epochs = sorted({e for _v, e in log.values()})
        below = [e for e in epochs if e <= epoch]
        above = [min(o for o, (_v, e) in log.items() if e == n) for n in epochs if n > epoch]
        if not below and not above:
            return -1, -1
        return (below[-1] if below else epoch), (min(above) if above else end)

    def respond(self, node: int, header, body: bytes):
        if header.api_key == ApiKey.API_VERSIONS:
            return self.versions(header, {ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offsets_for_leader_epoch})
        if header.api_key == ApiKey.METADATA:
            return self.metadata(header, self.leader, self.epoch)
        if header.api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            api = APIS[ApiKey.OFFSET_FOR_LEADER_EPOCH]
            request = api.request.parse(header.api_version, body)
            [topic] = request.topics
            [part] = topic.partitions
            self.asked.append((node, part.current_leader_epoch, part.leader_epoch))
            if self.reelect_on_ask:
                self.reelect_on_ask = False
                self.epoch += 1
            epoch, end = self.end_offset_for(node, part.leader_epoch)
            error = 0 if node == self.leader else ErrorCode.NOT_LEADER_OR_FOLLOWER
            if part.current_leader_epoch < self.epoch:
                error = ErrorCode.FENCED_LEADER_EPOCH
            return response(header.correlation_id, api.response.build(header.api_version, {"topics": [{
                "topic": "t", "partitions": [{"error_code": error, "partition": 0, "leader_epoch": epoch,
                                              "end_offset": end}]}]}))
        if header.api_key != ApiKey.FETCH:
            return None
        request = decode_fetch_request(header.api_version, body, 0)
        [(_topic, [part])] = request.topics
        self.fetches.append((node, part.fetch_offset, part.current_leader_epoch))
        if node != self.leader:
            data = FetchPartitionData(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif part.fetch_offset in self.logs[node]:
            value, epoch = self.logs[node][part.fetch_offset]
            data = FetchPartitionData(0, 0, 100, 100, 0, build_batch(
                [Record(0, 1000, None, value)], base_offset=part.fetch_offset, partition_leader_epoch=epoch), None)
        else:
            return None
        chunks, _size = encode_fetch_response(header.api_version, header.correlation_id, [("t", [data])])
        return b"".join(bytes(c) for c in chunks)[4:]


async def consume_until_leader_moves(fakes: LeaderMoves, consumer: Consumer, n: int) -> list[tuple[int, bytes]]:
    """``n`` records from broker 1 (epoch 0); then broker 2 leads in epoch 1."""
    got: list[tuple[int, bytes]] = []
    while len(got) < n:
        batch = await asyncio.wait_for(consumer.getmany(5000), 10)  # (a hang guard: the clock never moves)
        got += [(r.offset, r.value) for rs in batch.values() for r in rs]
    fakes.leader, fakes.epoch = 2, 1
    return got


@pytest.mark.parametrize("diverged", [True, False])
async def test_a_position_is_validated_after_a_leader_change_kip_320(diverged):
    """Broker 1 led epoch 0 with records 0-4; broker 2 takes over in epoch 1 with a log that
    either diverges from offset 3 (epoch 1 from there: records 3 and 4 never reached it) or
    holds all five. After the leader change the consumer asks broker 2 for the end of epoch 0
    (current epoch 1) before fetching again: diverged, it goes back to offset 3 (the first
    offset known to diverge) and reads broker 2's records there; else it goes on at 5."""
    old = {o: (b"old-%d" % o, 0) for o in range(5)}
    if diverged:
        new = {**{o: old[o] for o in range(3)}, **{o: (b"new-%d" % o, 1) for o in range(3, 6)}}
    else:
        new = {**old, 5: (b"new-5", 1)}
    clock = MockTime()
    async with LeaderMoves({1: old, 2: new}) as fakes:
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            consumer = Consumer(client, retry_backoff_ms=0)  # (the clock never moves: no backoff to wait out)
            consumer.assign([("t", 0)])
            consumer.seek(("t", 0), 0)
            assert await consume_until_leader_moves(fakes, consumer, 5) == [(o, b"old-%d" % o) for o in range(5)]
            batch = await asyncio.wait_for(consumer.getmany(5000), 10)
            got = [(r.offset, r.value) for rs in batch.values() for r in rs]
            assert fakes.asked == [(2, 1, 0)]
            if diverged:
                assert got == [(3, b"new-3")]
                assert consumer.truncation_resets[("t", 0)] == 1
            else:
                assert got == [(5, b"new-5")]
                assert consumer.truncation_resets[("t", 0)] == 0
            # Every Fetch to broker 2 came after the validation and carried epoch 1.
            assert [(o, e) for n, o, e in fakes.fetches if n == 2] == [(3 if diverged else 5, 1)]
            consumer.close()


async def test_a_validation_fenced_by_a_newer_epoch_is_asked_again_under_it():
    """The new leader is elected again while the consumer validates: FENCED_LEADER_EPOCH, a
    metadata refresh, and the position is validated under epoch 2 (asking under epoch 1 again
    would be fenced for ever: the simulator's seed 35, a read_committed observer stuck)."""
    old = {o: (b"old-%d" % o, 0) for o in range(5)}
    new = {**{o: old[o] for o in range(3)}, 3: (b"new-3", 1)}
    clock = MockTime()
    async with LeaderMoves({1: old, 2: new}) as fakes:
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            consumer = Consumer(client, retry_backoff_ms=0)
            consumer.assign([("t", 0)])
            consumer.seek(("t", 0), 0)
            await consume_until_leader_moves(fakes, consumer, 5)
            fakes.reelect_on_ask = True
            batch = await asyncio.wait_for(consumer.getmany(5000), 10)
            assert [(r.offset, r.value) for rs in batch.values() for r in rs] == [(3, b"new-3")]
            assert fakes.asked[0] == (2, 1, 0) and fakes.asked[-1] == (2, 2, 0)
            assert [(o, e) for n, o, e in fakes.fetches if n == 2] == [(3, 2)]
            consumer.close()


async def test_positions_are_not_validated_by_a_broker_without_offsets_for_leader_epoch_v3():
    """As Kafka's consumer: a leader without OffsetsForLeaderEpoch v3 (before Kafka 2.3)
    cannot validate a position, so it is taken as valid without asking (not a failed poll)."""
    old = {o: (b"old-%d" % o, 0) for o in range(5)}
    clock = MockTime()
    async with LeaderMoves({1: old, 2: {**old, 5: (b"new-5", 1)}}) as fakes:
        fakes.offsets_for_leader_epoch = (0, 2)
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            consumer = Consumer(client, retry_backoff_ms=0)
            consumer.assign([("t", 0)])
            consumer.seek(("t", 0), 0)
            await consume_until_leader_moves(fakes, consumer, 5)
            batch = await asyncio.wait_for(consumer.getmany(5000), 10)
            assert [(r.offset, r.value) for rs in batch.values() for r in rs] == [(5, b"new-5")]
            assert fakes.asked == []
            consumer.close()


async def test_metadata_with_an_older_leader_epoch_does_not_replace_a_newer_one():
    """KIP-320: a lagging broker's Metadata naming an older leader epoch leaves the newer
    partition metadata in place; a newer epoch replaces it."""
    async with LeaderMoves({1: {}, 2: {}}) as fakes:
        fakes.leader, fakes.epoch = 2, 1
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=MockTime()) as client:
            fakes.leader, fakes.epoch = 1, 0
            await client.refresh_metadata(["t"])
            meta = client.cluster.partition("t", 0)
            assert (meta.leader, meta.leader_epoch) == (2, 1)
            await client.refresh_metadata()  # (all topics: the same guard)
            assert client.cluster.leader("t", 0) == 2
            fakes.leader, fakes.epoch = 1, 2
            await client.refresh_metadata(["t"])
            meta = client.cluster.partition("t", 0)
            assert (meta.leader, meta.leader_epoch) == (1, 2)


async def test_log_truncation_raises_without_a_reset_policy():
    old = {o: (b"old-%d" % o, 0) for o in range(5)}
    new = {**{o: old[o] for o in range(3)}, 3: (b"new-3", 1)}
    clock = MockTime()
    async with LeaderMoves({1: old, 2: new}) as fakes:
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", time=clock) as client:
            consumer = Consumer(client, retry_backoff_ms=0, auto_offset_reset="none")
            consumer.assign([("t", 0)])
            consumer.seek(("t", 0), 0)
            await consume_until_leader_moves(fakes, consumer, 5)
            with pytest.raises(LogTruncationError) as raised:
                await asyncio.wait_for(consumer.getmany(5000), 10)
            assert raised.value.divergent_offsets == {("t", 0): (5, 3)}
            assert await consumer.position(("t", 0)) == 5  # not moved: the application decides
            consumer.seek(("t", 0), 3)
            batch = await asyncio.wait_for(consumer.getmany(5000), 10)
            assert [(r.offset, r.value) for rs in batch.values() for r in rs] == [(3, b"new-3")]
            consumer.close()


async def test_idempotent_retries_keep_their_sequence_and_a_hole_restarts_the_producer_id():
    """Against a fake broker that answers the Produce requests with NOT_LEADER_OR_FOLLOWER,
    NONE, OUT_OF_ORDER_SEQUENCE_NUMBER, NONE: the retry resends the same producer id and
    sequence; the out-of-order batch fails its records, and the producer takes a new producer
    id, whose sequences start again at 0."""
    errors = iter([ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NONE, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                   ErrorCode.NONE])
    producer_ids = iter(range(1000, 1010))
    sent = []  # (producer id, base sequence, values) of each Produce request's batch
    ranges = {**BROKER_RANGES, ApiKey.PRODUCE: (3, 7), ApiKey.INIT_PRODUCER_ID: (0, 1)}

    def respond(header, body):
        version, cid = header.api_version, header.correlation_id
        if header.api_key == ApiKey.API_VERSIONS:
            return response(cid, api_versions_body(version, ranges))
        if header.api_key == ApiKey.METADATA:
            return one_partition_metadata(version, cid, fake.port)
        if header.api_key == ApiKey.INIT_PRODUCER_ID:
            return response(cid, APIS[ApiKey.INIT_PRODUCER_ID].response.build(version, {
                "error_code": 0, "producer_id": next(producer_ids), "producer_epoch": 0}))
        [(topic, [(partition, records)])] = decode_produce_request(version, memoryview(body), 0).topics
        batch, records = decode_batch(records)
        sent.append((batch.producer_id, batch.base_sequence, [r.value for r in records]))
        return encode_produce_response(version, cid, [(topic, [(partition, next(errors), len(sent), -1, 0)])])[4:]

    async with FakeBroker(respond) as fake:
        async with KafkaClient(f"127.0.0.1:{fake.port}", retry_backoff_ms=1) as client:
            producer = Producer(client, acks=-1, enable_idempotence=True, retry_backoff_ms=1)
            results = []
            for value in (b"a", b"b", b"c"):
                future = await producer.send("t", value)
                await producer.flush()
                results.append(future.exception() or future.result().offset)
            await producer.close()
    assert sent == [(1000, 0, [b"a"]), (1000, 0, [b"a"]), (1000, 1, [b"b"]), (1001, 0, [b"c"])]
    assert results[0] == 2 and results[2] == 4
    assert isinstance(results[1], OutOfOrderSequenceNumberError)
    assert fake.requests.count((ApiKey.INIT_PRODUCER_ID, 1)) == 2


async def test_a_lingering_batch_wakes_the_sender_once_at_its_linger_end():
    """A new batch that only its linger can make ready does not wake the sender, which would
    only compute that deadline: the sender's timer is moved to the linger end instead. A
    response with nothing queued behind it does not wake the sender either. Each record is then
    one sender wake-up (three before: at the new batch, at its linger end, at its response), and
    a request leaves the producer's in-flight requests as it ends, not in a loop turn after."""
    clock = MockTime()
    ranges = {**BROKER_RANGES, ApiKey.PRODUCE: (3, 7)}
    produced = []

    def respond(header, body):
        version, cid = header.api_version, header.correlation_id
        if header.api_key == ApiKey.API_VERSIONS:
            return response(cid, api_versions_body(version, ranges))
        if header.api_key == ApiKey.METADATA:
            return one_partition_metadata(version, cid, fake.port)
        [(topic, [(partition, records)])] = decode_produce_request(version, memoryview(body), 0).topics
        produced.append([r.value for r in decode_batch(records)[1]])
        return encode_produce_response(version, cid, [(topic, [(partition, 0, len(produced) - 1, -1, 0)])])[4:]

    async with FakeBroker(respond) as fake:
        async with KafkaClient(f"127.0.0.1:{fake.port}", time=clock) as client:
            producer = Producer(client, acks=1, linger_ms=50)
            offsets = []
            for value in (b"a", b"b", b"c"):
                future = await producer.send("t", value)
                assert not producer._wakeup.is_set()  # (set at once before)
                clock.sleep(49)
                assert not producer._wakeup.is_set()
                clock.sleep(1)  # the linger end: the timer wakes the sender, which sends the batch
                assert producer._wakeup.is_set()
                offsets.append((await future).offset)
                assert not producer._wakeup.is_set()  # nothing queued: the response wakes no one (set before)
                assert not producer._requests  # the request left them in its finally, not in a done callback's turn
            await producer.close()
    assert offsets == [0, 1, 2] and produced == [[b"a"], [b"b"], [b"c"]]


def test_murmur2_matches_the_java_client():
    # Values from Kafka's UtilsTest.testMurmur2 (signed Java ints).
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    for data, expected in cases.items():
        assert murmur2(data) == expected & 0xFFFFFFFF, data
    rng = random.Random(7)
    for _ in range(500):
        key = rng.randbytes(rng.randrange(0, 40))
        assert murmur2(key) == kafka_python_murmur2(key)
        assert murmur2_partition(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7


# ---------------------------------------------------------------------------------------------
# Against a broker

async def fetch_raw(client: KafkaClient, topic: str, partition: int, offset: int = 0):
    """The records blob of one Fetch of the partition, undecoded."""
    conn = await client.leader_connection(topic, partition)
    request = FetchRequest(11, -1, 100, 1, 50_000_000, 0, 0, -1,
                           [(topic, [FetchPartition(partition, -1, offset, -1, 50_000_000)])], [], "")
    [(_name, [data])] = (await conn.fetch(request)).responses
    assert data.error_code == 0
    return data.records


def delivered(futures: list[asyncio.Future]) -> list:
    """The RecordMetadata of every send; raises the first failure, having looked at them all
    (so that asyncio does not log each unretrieved exception)."""
    failures = [f.exception() for f in futures]
    first = next((e for e in failures if e is not None), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]


async def consume(consumer: Consumer, count: int, timeout_s: float = 60) -> list:
    """At least ``count`` records from ``consumer``, partitions interleaved as fetched."""
    records = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records arrived"
        for batch in (await consumer.getmany(1000)).values():
            records.extend(batch)
    return records


async def test_bootstrap_skips_dead_servers_and_reads_the_cluster(bootstrap, new_topic):
    host, port = bootstrap.rsplit(":", 1)
    async with KafkaClient([f"127.0.0.1:{free_port()}", bootstrap]) as client:
        cluster = client.cluster
        assert cluster.controller_id in cluster.brokers
        assert any(b.port == int(port) for b in cluster.brokers.values())
        node = next(iter(cluster.brokers))
        conn = await client.connection(node)
        assert conn is await client.connection(node)  # pooled
        assert conn.api_versions[ApiKey.API_VERSIONS][1] >= 3
        assert conn.version_for(ApiKey.METADATA) == min(8, conn.api_versions[ApiKey.METADATA][1])

        topic = await new_topic(partitions=3)
        await client.refresh_metadata([topic])
        partitions = client.cluster.topics[topic].partitions
        assert sorted(partitions) == [0, 1, 2]
        for p in partitions.values():
            assert p.error_code == 0 and p.leader in cluster.brokers and p.leader_epoch >= 0
            assert p.replicas == [p.leader] and p.isr == [p.leader]
        assert (await client.leader_connection(topic, 1)).port == cluster.brokers[partitions[1].leader].port


async def test_create_describe_delete_topics(client, topic_name):
    await client.create_topics([(topic_name, 3, 1, {"retention.ms": "3600000"})])
    assert await client.partitions_for(topic_name) == [0, 1, 2]
    configs = {entry.name: entry for entry in await client.describe_configs(topic_name)}
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == 1  # a topic config
    with pytest.raises(TopicAlreadyExistsError, match=topic_name):
        await client.create_topics([(topic_name, 1, 1, None)])
    with pytest.raises(InvalidPartitionsError):
        await client.create_topics([(topic_name + "-x", 0, 1, None)])

    await client.delete_topics([topic_name])
    deadline = time.monotonic() + 30
    while topic_name in (await client.refresh_metadata()).topics:
        assert time.monotonic() < deadline, "the deleted topic stays in the metadata"
    with pytest.raises(UnknownTopicOrPartitionError):
        await client.delete_topics([topic_name])


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_10000_records_come_back_identical_and_in_order(client, new_topic, codec):
    topic = await new_topic(partitions=3)
    base_ts = 1_700_000_000_000

    def record(i: int):
        key = None if i % 10 == 0 else b"key-%d" % (i % 97)
        value = None if i % 1000 == 999 else b"value-%d-" % i * (1 + i % 5)
        headers = [("i", b"%d" % i), ("null", None)] if i % 3 else []
        return key, value, headers, base_ts + i

    producer = Producer(client, acks=-1, compression=codec, linger_ms=20)
    futures = []
    for i in range(10000):
        key, value, headers, ts = record(i)
        futures.append(await producer.send(topic, value, key=key, headers=headers, timestamp_ms=ts))
    await producer.close()

    expected = collections.defaultdict(list)
    for i, meta in enumerate(delivered(futures)):
        key, value, headers, ts = record(i)
        assert meta.timestamp == ts
        if key is not None:
            assert meta.partition == murmur2_partition(key, 3)
        expected[meta.partition].append((meta.offset, key, value, headers, ts))
    for partition, records in expected.items():  # acked offsets follow the send order
        assert [r[0] for r in records] == list(range(len(records))), partition

    consumer = Consumer(client)
    consumer.assign([(topic, p) for p in range(3)])
    got = collections.defaultdict(list)
    for r in await consume(consumer, 10000):
        got[r.partition].append((r.offset, r.key, r.value, r.headers, r.timestamp))
    assert dict(got) == dict(expected)

    stored = {h.compression for _pos, h in iter_batch_headers(await fetch_raw(client, topic, 0))}
    assert stored == {Compression.parse(codec)}


async def test_seek_to_timestamp_and_offsets_for_times(client, new_topic):
    topic = await new_topic()
    base = 1_700_000_000_000
    producer = Producer(client, acks=-1, batch_size=512)  # several batches: the lookup must look inside one
    for i in range(100):
        await producer.send(topic, b"%d" % i, timestamp_ms=base + 10 * i)
    await producer.close()
    assert len(list(iter_batch_headers(await fetch_raw(client, topic, 0)))) > 2

    assert await client.list_offsets(topic, 0, base + 505) == (51, base + 510)
    assert await client.list_offsets(topic, 0, base) == (0, base)
    assert await client.list_offsets(topic, 0, base + 10_000) == (-1, -1)
    assert (await client.list_offsets(topic, 0, -2))[0] == 0
    assert (await client.list_offsets(topic, 0, -1))[0] == 100
    assert await client.offsets_for_times({(topic, 0): base + 991}) == {(topic, 0): None}

    consumer = Consumer(client)
    tp = (topic, 0)
    consumer.assign([tp])
    consumer.seek_to_timestamp(tp, base + 505)
    assert await consumer.position(tp) == 51
    first = (await consume(consumer, 1))[0]
    assert (first.offset, first.value, first.timestamp) == (51, b"51", base + 510)
    consumer.seek_to_timestamp(tp, base + 10_000)  # later than every record: the end
    assert await consumer.position(tp) == 100


async def test_consumer_positions_inside_a_batch_and_resets_when_out_of_range(client, new_topic):
    topic = await new_topic()
    tp = (topic, 0)
    producer = Producer(client, acks=-1, linger_ms=60_000)  # one batch, sent by close()'s flush
    for i in range(100):
        await producer.send(topic, b"%d" % i)
    await producer.close()
    assert len(list(iter_batch_headers(await fetch_raw(client, topic, 0)))) == 1

    consumer = Consumer(client, auto_offset_reset="earliest")
    consumer.assign([tp])
    consumer.seek(tp, 37)
    assert [r.offset for r in await consume(consumer, 63)] == list(range(37, 100))
    assert await consumer.position(tp) == 100

    consumer.seek(tp, 1000)  # OFFSET_OUT_OF_RANGE: back to the earliest offset
    records = []
    async with asyncio.timeout(60):
        async for record in consumer:
            records.append(record)
            if len(records) == 100:
                break
    assert [r.value for r in records] == [b"%d" % i for i in range(100)]

    latest = Consumer(client, auto_offset_reset="latest")
    latest.assign([tp])
    assert await latest.position(tp) == 100
    assert await latest.getmany(0) == {}


async def test_acks_0_resolves_once_written(client, new_topic):
    topic = await new_topic()
    producer = Producer(client, acks=0)
    futures = [await producer.send(topic, b"%d" % i) for i in range(100)]
    await producer.close()
    assert {m.offset for m in delivered(futures)} == {-1}
    consumer = Consumer(client)
    consumer.assign([(topic, 0)])
    assert [r.value for r in await consume(consumer, 100)] == [b"%d" % i for i in range(100)]


async def test_idempotent_producer_stamps_sequences(client, new_topic):
    topic = await new_topic(partitions=2)
    producer = Producer(client, acks=-1, enable_idempotence=True, batch_size=1024, linger_ms=0)
    futures = [await producer.send(topic, b"value-%d" % i, key=b"%d" % i) for i in range(2000)]
    await producer.close()
    delivered(futures)
    producers = set()
    for partition in range(2):
        headers = [h for _pos, h in iter_batch_headers(await fetch_raw(client, topic, partition))]
        assert len(headers) > 1
        next_sequence = 0
        for h in headers:
            producers.add((h.producer_id, h.producer_epoch))
            assert h.base_sequence == next_sequence
            next_sequence += h.records_count
    [(producer_id, epoch)] = producers
    assert producer_id >= 0 and epoch >= 0


class _TappedTransport:
    """A transport that notes the correlation ids of the Produce requests written through it."""

    def __init__(self, transport: asyncio.Transport, produce_ids: set[int]) -> None:
        self._transport = transport
        self._produce_ids = produce_ids

    def writelines(self, chunks) -> None:
        chunks = list(chunks)
        head = b"".join(bytes(c) for c in chunks[:2])
        api_key, _version, correlation_id = struct.unpack_from(">hhi", head, 4)
        if api_key == ApiKey.PRODUCE:
            self._produce_ids.add(correlation_id)
        self._transport.writelines(chunks)

    def __getattr__(self, name):
        return getattr(self._transport, name)


class LoseFirstProduceResponse(Network):
    """Delivers every request, but the connection drops just as the response to the first
    Produce arrives: the producer must retry a batch the broker has already written."""

    def __init__(self) -> None:
        self.lost = 0

    async def open_connection(self, host, port, protocol_factory, timeout_s):
        network = self

        class Tap(asyncio.Protocol):
            def __init__(self) -> None:
                self.inner = protocol_factory()
                self.framer = Framer(1 << 30)
                self.produce_ids: set[int] = set()

            def connection_made(self, transport) -> None:
                self.transport = transport
                self.inner.connection_made(_TappedTransport(transport, self.produce_ids))

            def data_received(self, data) -> None:
                for frame in self.framer.feed(data):
                    if not network.lost and struct.unpack_from(">i", frame)[0] in self.produce_ids:
                        network.lost += 1
                        self.transport.abort()
                        return
                    self.inner.data_received(struct.pack(">i", len(frame)) + frame)

            def connection_lost(self, exc) -> None:
                self.inner.connection_lost(exc)

        return await super().open_connection(host, port, Tap, timeout_s)


@pytest.mark.parametrize("idempotent, copies", [(True, 1), (False, 2)])
async def test_a_batch_retried_after_a_lost_response(bootstrap, new_topic, idempotent, copies):
    """Idempotent: the broker recognises the retried sequence, so the batch is written once
    and acknowledged with its first offsets. Otherwise the retry writes it again (at least
    once), right after the first copy."""
    topic = await new_topic()
    network = LoseFirstProduceResponse()
    async with KafkaClient(bootstrap, network=network) as client:
        producer = Producer(client, acks=-1, enable_idempotence=idempotent, retry_backoff_ms=10)
        futures = [await producer.send(topic, b"r%d" % i) for i in range(50)]
        await producer.close()
        assert [m.offset for m in delivered(futures)] == list(range(50 * (copies - 1), 50 * copies))
        assert network.lost == 1
        consumer = Consumer(client)
        consumer.assign([(topic, 0)])
        records = await consume(consumer, 50 * copies)
        assert [r.value for r in records] == [b"r%d" % i for i in range(50)] * copies
        assert await consumer.getmany(300) == {}  # and nothing behind them
        assert (await client.list_offsets(topic, 0, -1))[0] == 50 * copies
