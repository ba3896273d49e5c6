"""Fetches parked on a partition are tried once at the end of a socket read, not at each append
(issue 29): a read holds several produces at full load, and a follower's fetch completed at
the first was answered with one batch while the rest waited a whole fetch round trip.
ReplicaManager.begin_read/end_read around the read (SocketServer.read_hooks), on real log
files and a MockTime."""

from __future__ import annotations

import pytest

from broker.network import KafkaConnection, SocketServer
from broker.partition import LeaderAndIsrState
from broker.replica_manager import FetchParams
from protocol.clock import MockTime
from protocol.errors import ErrorCode
from protocol.fast_codecs import FetchPartition
from protocol.records import Record, build_batch, iter_batch_headers
from storage import LogConfig
from tests.broker.replica_manager_support import replica_manager
from tests.broker.test_network import MockTransport, request


@pytest.fixture
def time():
    return MockTime()


@pytest.fixture
def rm(tmp_path, time):
    with replica_manager(tmp_path, time, LogConfig(min_insync_replicas=1)) as manager:
        error, results = manager.become_leader_or_follower(0, 1, [
            LeaderAndIsrState(t, 0, 1, 1, 0, [1, 2], 0, [1, 2]) for t in ("t", "u")])
        assert error == 0 and set(results.values()) == {0}
        yield manager


def produce(rm, topic="t", n=3):
    out: list = []
    rm.append_records(1000, 1, False, [(topic, [(0, bytearray(build_batch([Record(value=b"v", timestamp=1)] * n)))])],
                      out.append)
    assert out and out[0][0][1][0][1] == 0, out
    return out


def park_follower_fetch(rm, offset, topic="t", callback=None):
    """Broker 2's fetch of ``topic``-0 at ``offset`` (its log end: nothing to read), parked for 500 ms."""
    out: list = []
    op = rm.fetch_messages(FetchParams(2, 500, 1, 1 << 20, 0), [(topic, [FetchPartition(0, -1, offset, 0, 1 << 20)])],
                           callback or out.append)
    assert op is not None and out == []
    return out


def batch_offsets(answer):
    """The base offsets of the batches in a fetch answer's only partition."""
    [(_topic, [pd])] = answer
    assert pd.error_code == 0
    return [header.base_offset for _pos, header in iter_batch_headers(pd.records)]


def test_produces_of_one_read_complete_a_parked_follower_fetch_once_with_all_their_batches(rm):
    fetched = park_follower_fetch(rm, 0)
    rm.begin_read()
    for _ in range(3):
        produce(rm)
    assert fetched == []  # not at the first append: the read is not done
    rm.end_read()
    assert len(fetched) == 1 and batch_offsets(fetched[0]) == [0, 3, 6]
    assert rm.fetch_purgatory.delayed() == 0


def test_transaction_markers_of_one_read_complete_a_parked_follower_fetch_at_its_end(rm):
    fetched = park_follower_fetch(rm, 0)
    rm.begin_read()
    answered: list = []
    rm.append_txn_markers(1000, [(7, 0, True, 0, [("t", 0)]), (8, 0, False, 0, [("t", 0)])], answered.append)
    assert fetched == []
    rm.end_read()
    assert len(fetched) == 1 and batch_offsets(fetched[0]) == [0, 1]


def test_an_append_outside_a_read_completes_a_parked_fetch_at_once(rm):
    """Timers, coordinator callbacks, flush-thread futures: no read ends after them."""
    fetched = park_follower_fetch(rm, 0)
    produce(rm)
    assert len(fetched) == 1 and batch_offsets(fetched[0]) == [0]
    rm.begin_read()
    rm.end_read()  # a read that appended nothing changes nothing
    fetched = park_follower_fetch(rm, 3)
    produce(rm)
    assert len(fetched) == 1 and batch_offsets(fetched[0]) == [3]


def test_an_append_made_while_the_read_end_completes_fetches_completes_its_own_at_once(rm):
    """end_read stops deferring before it completes anything: an append a completion makes
    (none does today) is not recorded in a set nobody will look at again."""
    fetched_u = park_follower_fetch(rm, 0, topic="u")
    fetched_t = park_follower_fetch(rm, 0, callback=lambda answer: (fetched_t.append(answer), produce(rm, "u")))
    rm.begin_read()
    produce(rm)
    rm.end_read()
    assert len(fetched_t) == 1 and batch_offsets(fetched_t[0]) == [0]
    assert len(fetched_u) == 1 and batch_offsets(fetched_u[0]) == [0]
    fetched = park_follower_fetch(rm, 3, topic="u")
    produce(rm, "u")
    assert len(fetched) == 1  # and deferral is off afterwards


def test_a_partition_removed_before_the_read_ends_answers_what_waited_on_it(rm):
    fetched = park_follower_fetch(rm, 0)
    rm.begin_read()
    produce(rm)
    p = rm.partitions.pop(("t", 0))  # gone without a word to the purgatory (what StopReplica does first)
    rm.end_read()
    rm.partitions[("t", 0)] = p
    assert len(fetched) == 1 and fetched[0][0][1][0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- through the socket server's read hooks -----------------------------------------------------

class Apis:
    """api key 0: a produce of one batch of 3 to t-0 (acks=1); 1: broker 2's fetch of t-0 at the
    offset in its correlation id, parked until there is data; 3: a handler that fails."""

    def __init__(self, rm):
        self.rm = rm

    def handle(self, ctx):
        key = ctx.header.api_key
        if key == 0:
            self.rm.append_records(1000, 1, False, [("t", [(0, bytearray(build_batch([Record(value=b"v", timestamp=1)] * 3)))])],
                                   lambda results: ctx.send_response(b"produced;"))
        elif key == 1:
            offset = ctx.header.correlation_id
            self.rm.fetch_messages(
                FetchParams(2, 500, 1, 1 << 20, 0), [("t", [FetchPartition(0, -1, offset, 0, 1 << 20)])],
                lambda answer: ctx.send_response(b"fetched %r;" % batch_offsets(answer)))
        else:
            raise RuntimeError("a handler's bug")


def connect(server):
    conn = KafkaConnection(server, "PLAINTEXT")
    transport = MockTransport()
    conn.connection_made(transport)
    return conn, transport


@pytest.fixture
def server(rm, time):
    server = SocketServer(Apis(rm), max_request_size=1 << 20, max_inflight=10, time=time)
    server.read_hooks = (rm.begin_read, rm.end_read)
    return server


def test_a_read_of_produces_answers_the_parked_follower_once_in_its_writev_batch(rm, server):
    producer, produced = connect(server)
    follower, fetched = connect(server)
    follower.data_received(request(1, 0))
    assert fetched.written == []
    producer.data_received(request(0, 1) + request(0, 2) + request(0, 3))
    assert fetched.written == [b"fetched [0, 3, 6];"]
    assert produced.written == [b"produced;produced;produced;"]
    assert server.corked is None and rm._appended is None


def test_a_request_that_fails_in_a_read_does_not_leave_the_deferral_on(rm, server):
    """The failed request closes the connection and the read stops there: the read's end still
    tries what it appended, and later appends outside any read complete at once (left on, a
    follower would wait its whole max wait after each)."""
    producer, produced = connect(server)
    follower, fetched = connect(server)
    follower.data_received(request(1, 0))
    producer.data_received(request(0, 1) + request(3, 2) + request(0, 3))
    assert produced.closed
    assert fetched.written == [b"fetched [0];"]
    assert rm._appended is None
    follower.data_received(request(1, 3))
    produce(rm)  # a timer's or a callback's append
    assert fetched.written == [b"fetched [0];", b"fetched [3];"]


def test_a_failing_read_end_is_logged_and_the_read_is_still_answered(rm, server, caplog):
    def broken_end():
        raise RuntimeError("end_read's bug")
    server.read_hooks = (rm.begin_read, broken_end)
    producer, produced = connect(server)
    producer.data_received(request(0, 1))
    assert produced.written == [b"produced;"] and server.corked is None
    assert "end_read's bug" in caplog.text


def test_a_second_begin_keeps_what_the_read_recorded(rm):
    """Reads do not nest (the outer one runs the hooks), but a begin without its end must not
    drop the partitions already recorded: their fetches would wait their whole max wait."""
    fetched = park_follower_fetch(rm, 0)
    rm.begin_read()
    produce(rm)
    rm.begin_read()
    rm.end_read()
    assert len(fetched) == 1 and batch_offsets(fetched[0]) == [0]
