"""A follower's steady state (ReplicaFetcher._fetch_steady, issue 29: one partition in an
incremental fetch session, its request patched into one encoded before and its answer read in
place) held to the general way (``_fetch_any``, ReplicaFetcher.lean = False), its reference.

Two followers of one partition, each with its own log and BrokerConnection on a transport that
keeps what is written, get the same random leader answers (records at the log end or not, whole
or cut or corrupt, errors of the partition or of the whole fetch, another session id or none,
partitions not asked for, aborted transactions, a lost connection) and the same events between
and during fetches (a fetch state replaced or removed, the log start moved, a new connection, a
Fetch version without the steady state or no Fetch at all, time passing, the session epoch at
its wrap, a follower quota throttling): every
request written is the same byte for byte, and so is every outcome (returned or raised) and all
state after it (session, fetch state, log)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

import broker.fetcher as fetcher_module
from broker.fetcher import PartitionFetchState, ReplicaFetcher
from broker.partition import Partition
from broker.replication_quota import ReplicationQuotaManager
from protocol.api_keys import ApiKey
from protocol.client.connection import BrokerConnection
from protocol.clock import MockTime
from protocol.fast_codecs import FetchPartitionData, encode_fetch_response, parse_request_header
from protocol.fetch_session import MAX_EPOCH
from protocol.records import Record, build_batch
from storage import Log, LogConfig
from tests.broker.test_fetcher_eager import KeptTransport, fetch_offsets

KEY = ("topic", 2)
DIR = f"{KEY[0]}-{KEY[1]}"


class Follower:
    def __init__(self, directory: Path, time: MockTime, lean: bool) -> None:
        self.time = time
        self.log = Log.open(directory, LogConfig(), time=time)
        self.partition = Partition(KEY[0], KEY[1], local_broker_id=2, time=time)
        self.partition.log = self.log
        self.quota = ReplicationQuotaManager("follower", time, samples=2, window_seconds=1, bound=100)
        manager = SimpleNamespace(broker_id=2, time=time, backoff_ms=1000, topic_stats=None, follower_quota=self.quota,
                                  on_truncated_below_recovery_point=None, fetch_wait_max_ms=500, fetch_min_bytes=1,
                                  fetch_max_bytes=1 << 20, fetch_response_max_bytes=10 << 20,
                                  socket_timeout_ms=30000)
        self.fetcher = ReplicaFetcher(manager, 1, "127.0.0.1", 9)  # type: ignore[arg-type]
        self.fetcher.lean = lean
        self.steady_fetches = 0
        steady = self.fetcher._fetch_steady

        def counted(*args):
            self.steady_fetches += 1
            return steady(*args)
        self.fetcher._fetch_steady = counted  # type: ignore[method-assign]
        self.add_state(0)
        self.connect(11)

    def add_state(self, leader_epoch: int) -> None:
        state = PartitionFetchState(self.partition, leader_epoch)
        state.truncating = False
        self.fetcher.partitions[KEY] = state

    def connect(self, version: int) -> None:
        self.conn = BrokerConnection("127.0.0.1", 9, time=self.time)
        self.conn.api_versions = {ApiKey.FETCH: (4, version)} if version else {}  # (0: a broker without Fetch)
        self.transport = KeptTransport()
        self.conn.connection_made(self.transport)

    def snapshot(self) -> tuple:
        session = self.fetcher.session
        log = self.log
        return (session.session_id, session.epoch, dict(session.session_partitions),
                [(k, s.leader_epoch, s.truncating, s.delayed_until_ms, s.lag) for k, s in self.fetcher.partitions.items()],
                log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point,
                [(e.epoch, e.start_offset) for e in log.leader_epoch_cache._entries],
                [(s.base_offset, s.size) for s in log.segments],
                self.fetcher._throttled_until_ms, self.quota.throttled_fetches, self.quota.byte_rate())


def outcome(task: asyncio.Task) -> tuple:
    if not task.done():
        return ("pending",)
    exc = task.exception()
    if exc is not None:
        return ("raised", type(exc).__name__, str(exc))
    return ("returned", task.result())


async def turns(n: int = 4) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


_errors = st.sampled_from([1, 6, 74, 75, 3])  # OFFSET_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER, FENCED_/UNKNOWN_LEADER_EPOCH, ...
# mostly nothing (a follower's steady state), each of the others now and then
_events = st.sampled_from(["none"] * 24 + ["time"] * 4 + ["not-truncating"] * 3 + ["new-epoch"] * 3 + [
    "replace", "remove", "log-start", "reconnect", "version-10", "no-fetch", "epoch-wrap", "truncating", "throttle",
    "unthrottle"])
_answers = st.sampled_from(["records"] * 48 + ["hw"] * 4 + ["nothing"] * 4 + [
    "empty", "partition-error", "top-error", "other-session", "no-session", "wrong-partition", "two-partitions",
    "two-topics", "other-topic", "aborted", "cut", "corrupt", "gap", "two-batches", "lost", "truncated-frame", "bad-size"])


def answer(data, leo: int, log_start: int, session_id: int, version: int, cid: int) -> bytes | None:
    """A random leader answer to the request with correlation id ``cid``; None: the connection is lost."""
    kind = data.draw(_answers, label="answer")
    if kind == "lost":
        return None
    n = data.draw(st.integers(1, 5), label="records")
    epoch = data.draw(st.sampled_from([0, 0, 1, 2]), label="batch epoch")
    hw = data.draw(st.integers(max(0, leo - 2), leo + n + 2), label="hw")
    start = data.draw(st.sampled_from([log_start, log_start, 0, min(hw, log_start + 1)]), label="log start")

    def batch(base: int, count: int = n) -> bytes:
        return build_batch([Record(value=b"v" * 30, timestamp=1000 + base)] * count, base_offset=base,
                           partition_leader_epoch=epoch)
    records: bytes | None = batch(leo)
    error, top_error, aborted = 0, 0, None
    sid = session_id or data.draw(st.sampled_from([7, 99, 1 << 30]), label="session id")
    partitions = [(KEY[0], [KEY[1]])]
    if kind == "hw":
        records = data.draw(st.sampled_from([None, b""]), label="no records")
    elif kind == "bad-size":
        records = None
    elif kind == "nothing":
        partitions = []
    elif kind == "empty":
        partitions, records = [], None
    elif kind == "partition-error":
        error, records = data.draw(_errors, label="error"), None
    elif kind == "top-error":
        top_error = data.draw(st.sampled_from([70, 71, 6]), label="top error")  # SESSION_ID_NOT_FOUND, INVALID_EPOCH
        partitions = []
    elif kind == "other-session":
        sid = sid + 1
    elif kind == "no-session":
        sid = 0
    elif kind == "wrong-partition":
        partitions = [(KEY[0], [data.draw(st.sampled_from([0, KEY[1] + 1]), label="partition")])]
    elif kind == "two-partitions":
        partitions = [(KEY[0], [KEY[1], KEY[1] + 1])]
    elif kind == "two-topics":
        partitions = [(KEY[0], [KEY[1]]), ("other", [KEY[1]])]
    elif kind == "other-topic":
        partitions = [("tupic", [KEY[1]])]  # (a name as long as ours)
    elif kind == "aborted":
        aborted = data.draw(st.sampled_from([[], [(5, leo)]]), label="aborted")
    elif kind == "cut":
        records = batch(leo)[:-3]
    elif kind == "corrupt":
        corrupt = bytearray(batch(leo))
        corrupt[-1] ^= 1
        records = bytes(corrupt)
    elif kind == "gap":
        records = batch(leo + 2)
    elif kind == "two-batches":
        records = batch(leo) + batch(leo + n, 2)
    responses = [(topic, [FetchPartitionData(p, error, hw, hw, start, records, aborted) for p in parts])
                 for topic, parts in partitions]
    chunks, _n = encode_fetch_response(version, cid, responses, error_code=top_error, session_id=sid)
    frame = b"".join(bytes(c) for c in chunks)
    if kind == "bad-size":  # a records size below -1 (null): malformed
        frame = frame[:-4] + (-2).to_bytes(4, "big", signed=True)
    if kind == "truncated-frame":  # a body cut short, its size patched: malformed
        frame = frame[:len(frame) - data.draw(st.integers(1, 12), label="cut")]
        frame = (len(frame) - 4).to_bytes(4, "big") + frame[4:]
    return frame


def apply(event: str, followers: list[Follower], wrap: int) -> None:
    for f in followers:
        state = f.fetcher.partitions.get(KEY)
        if event == "time":
            f.time.sleep(1000)  # (replica.fetch.backoff.ms)
        elif event == "replace" and state is not None:
            f.add_state(state.leader_epoch)
        elif event == "new-epoch":
            f.add_state(state.leader_epoch + 1 if state is not None else 1)
        elif event == "remove":
            f.fetcher.remove_partitions([KEY])
        elif event == "log-start" and f.log.high_watermark > f.log.log_start_offset:
            f.log.maybe_increment_log_start_offset(f.log.log_start_offset + 1)
        elif event == "reconnect":
            f.conn.close()
            f.connect(11)
        elif event == "version-10":
            f.conn.close()
            f.connect(10)
        elif event == "no-fetch":
            f.conn.close()
            f.connect(0)
        elif event == "epoch-wrap" and f.fetcher.session.epoch > 0:
            f.fetcher.session.epoch = MAX_EPOCH - wrap
        elif event == "truncating" and state is not None:
            state.truncating = True
        elif event == "not-truncating" and state is not None:
            state.truncating = False
        elif event == "throttle":  # (the quota is exceeded once 100 bytes/s came)
            f.quota.update_topic(KEY[0], "*", broker_id=2)
        elif event == "unthrottle":
            f.quota.update_topic(KEY[0], None, broker_id=2)


async def scenario(directory: Path, data) -> int:
    time = MockTime()
    followers = [Follower(directory / "lean" / DIR, time, True), Follower(directory / "general" / DIR, time, False)]
    tasks: list[asyncio.Task] = []
    try:
        for _step in range(data.draw(st.integers(1, 30), label="steps")):
            apply(data.draw(_events, label="event"), followers, data.draw(st.integers(1, 2), label="wrap"))
            tasks = [asyncio.get_running_loop().create_task(f.fetcher._fetch(f.conn)) for f in followers]
            await turns()
            written = [f.transport.frames[-1] if f.transport.frames and not t.done() else None
                       for f, t in zip(followers, tasks)]
            assert written[0] == written[1]
            if written[0] is not None:
                during = data.draw(st.sampled_from(["none"] * 30 + ["replace", "new-epoch", "remove"]), label="during")
                apply(during, followers, 1)
                lean = followers[0]
                header = parse_request_header(memoryview(written[0])[4:], flexible=False)
                frame = answer(data, lean.log.log_end_offset, lean.log.log_start_offset, lean.fetcher.session.session_id,
                               header.api_version, header.correlation_id)
                for f in followers:
                    if frame is None:
                        f.conn.connection_lost(None)
                    else:
                        f.conn.data_received(frame)
                await turns()
                for f in followers:
                    if frame is None:
                        f.connect(11)
            assert outcome(tasks[0]) == outcome(tasks[1])
            assert followers[0].snapshot() == followers[1].snapshot(), (followers[0].snapshot(), followers[1].snapshot())
        assert [len(f.transport.frames) for f in followers[:1]] == [len(f.transport.frames) for f in followers[1:]]
        assert followers[1].steady_fetches == 0
        return followers[0].steady_fetches
    finally:
        for f in followers:
            f.conn.close()
            f.log.close()
        await asyncio.gather(*tasks, return_exceptions=True)  # (a scenario cut short by hypothesis)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_steady_state_fetches_as_the_general_way(data) -> None:
    with tempfile.TemporaryDirectory(prefix="kbroker-lean-fetch-") as directory:
        asyncio.run(scenario(Path(directory), data))


async def _steady_fetches() -> None:
    time = MockTime()
    with tempfile.TemporaryDirectory(prefix="kbroker-lean-fetch-") as directory:
        follower = Follower(Path(directory) / DIR, time, True)
        fetcher = follower.fetcher
        general = []
        handle = fetcher._handle_response
        fetcher._handle_response = lambda *args: general.append(args) or handle(*args)  # type: ignore[method-assign]

        async def fetch(records: bytes | None, sends: bool = True, nothing: bool = False) -> None:
            """A fetch (of our partition at its log end when ``sends``, else of no partition),
            answered with ``records`` and the high watermark at the log end (or ``nothing``)."""
            task = asyncio.get_running_loop().create_task(fetcher._fetch(follower.conn))
            await turns()
            cid, offsets = fetch_offsets(follower.transport.frames[-1])
            assert offsets == ([follower.log.log_end_offset] if sends else [])
            leo = follower.log.log_end_offset
            parts = [] if nothing else [(KEY[0], [FetchPartitionData(KEY[1], 0, leo, leo, 0, records)])]
            chunks, _n = encode_fetch_response(11, cid, parts, session_id=99)
            follower.conn.data_received(b"".join(bytes(c) for c in chunks))
            await turns()
            assert task.result() is True

        try:
            follower.fetcher.manager.follower_quota = None
            for i in range(6):
                leo = follower.log.log_end_offset
                await fetch(build_batch([Record(value=b"v", timestamp=1)] * 3, base_offset=leo, partition_leader_epoch=0))
                assert follower.log.log_end_offset == leo + 3 and follower.log.high_watermark == leo
                assert fetcher.session.epoch == i + 1
            # the full fetch that starts the session goes the general way; every next one the steady way
            assert len(general) == 1 and follower.steady_fetches == 5
            await fetch(None)  # the high watermark alone (null records): the steady way too
            assert follower.log.high_watermark == follower.log.log_end_offset == 18
            # the session epoch wraps from the largest int32 to 1: after no partition, and after ours
            fetcher.session.epoch = MAX_EPOCH
            await fetch(None, sends=False, nothing=True)
            assert fetcher.session.epoch == 1
            fetcher.session.epoch = MAX_EPOCH
            await fetch(build_batch([Record(value=b"v", timestamp=1)], base_offset=18, partition_leader_epoch=0),
                        sends=False)
            assert fetcher.session.epoch == 1 and follower.log.log_end_offset == 19
            assert len(general) == 1 and follower.steady_fetches == 8
        finally:
            follower.conn.close()
            follower.log.close()


def test_a_steady_follower_fetches_without_the_general_way() -> None:
    asyncio.run(_steady_fetches())


async def _layout_and_release(monkeypatch) -> None:
    time = MockTime()
    with tempfile.TemporaryDirectory(prefix="kbroker-lean-fetch-") as directory:
        follower = Follower(Path(directory) / DIR, time, True)
        fetcher = follower.fetcher
        fetcher.manager.follower_quota = None

        async def fetch() -> None:
            task = asyncio.get_running_loop().create_task(fetcher._fetch(follower.conn))
            await turns()
            cid, _offsets = fetch_offsets(follower.transport.frames[-1])
            leo = follower.log.log_end_offset
            batch = build_batch([Record(value=b"v", timestamp=1)], base_offset=leo, partition_leader_epoch=0)
            chunks, _n = encode_fetch_response(11, cid, [(KEY[0], [FetchPartitionData(KEY[1], 0, leo, leo, 0, batch)])],
                                               session_id=99)
            follower.conn.data_received(b"".join(bytes(c) for c in chunks))
            await turns()
            assert task.result() is True

        try:
            # a request layout the patch offsets do not fit (here: two bytes more at its end, as a
            # rack id would add) is never patched: the general way fetches
            encode = fetcher_module.encode_fetch_request
            monkeypatch.setattr(fetcher_module, "encode_fetch_request", lambda *a: bytes(encode(*a)) + b"\0\0")
            for _ in range(3):
                await fetch()
            assert follower.steady_fetches == 0 and fetcher._steady is None and follower.log.log_end_offset == 3
            monkeypatch.setattr(fetcher_module, "encode_fetch_request", encode)
            await fetch()
            assert follower.steady_fetches == 1 and fetcher._steady is not None and follower.log.log_end_offset == 4
            # the steady state's requests are let go with their connection and their partition
            fetcher._drop_connection()
            assert fetcher._steady is None
            follower.connect(11)
            await fetch()
            await fetch()
            assert fetcher._steady is not None
            fetcher.remove_partitions([KEY])
            assert fetcher._steady is None
        finally:
            follower.conn.close()
            follower.log.close()


def test_a_layout_the_patches_do_not_fit_and_released_states_go_the_general_way(monkeypatch) -> None:
    asyncio.run(_layout_and_release(monkeypatch))
