"""The replay engine gives up on requests a broker never answers (Params.timeout_ms, Kafka's
request.timeout.ms): a broker that stops answering (stopped, hung, a dead peer whose connection
stays open) must not hold a replay forever."""

from __future__ import annotations

import socket
import threading
import time

from loadgen import engine
from loadgen.recording import read_connection
from loadgen.synth import synthesize

REQUEST_TIMED_OUT, NETWORK_EXCEPTION = engine.REQUEST_TIMED_OUT, engine.NETWORK_EXCEPTION


def test_requests_a_broker_never_answers_time_out_and_the_replay_ends(tmp_path):
    # 5 produce requests (40 records, 8 to a batch of batchSize 1000), sent as fast as the window allows.
    workload = tmp_path / "w.yaml"
    workload.write_text("name: mute\ntopics: 1\npartitionsPerTopic: 1\nmessageSize: 100\nbatchSize: 1000\n"
                        "maxRecords: 40\n")
    synthesize(workload, tmp_path / "rec", topic_prefix="mute")
    rows = [(r["send_time_us"], r["api_version"], r["frame"]) for r in read_connection(tmp_path / "rec", 0).to_pylist()]
    assert len(rows) == 5
    # A listener that never accepts: the kernel completes the handshake and takes the requests into
    # the socket, and nothing ever answers (a stopped broker, as tests/loadgen/test_replay.py's).
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    port = mute.getsockname()[1]
    params = engine.Params(bootstrap=f"127.0.0.1:{port}", speed=None, depth=2, timeout_ms=300, raw=True,
                           job_start=time.time())
    done: dict = {}
    replay = threading.Thread(target=lambda: done.setdefault("stats", engine.run_producer(params, rows, 0)), daemon=True)
    started = time.monotonic()
    try:
        replay.start()
        replay.join(10)
        assert not replay.is_alive(), "the replay waits for a broker that never answers"
    finally:
        mute.close()  # the connection's handshake done, unaccepted: reset, which ends a replay still waiting
        replay.join(20)
    stats = done["stats"]
    # The window (depth 2) timed out, and the sink (raw: no other broker to go to) was given up on
    # with the other three requests.
    assert stats["errors"] == {REQUEST_TIMED_OUT: 2, NETWORK_EXCEPTION: 3}, stats["errors"]
    assert stats["totals"]["errors"] == 5 and stats["totals"]["records_acked"] == 0
    assert stats["totals"]["requests"] == 2
    assert time.monotonic() - started < 10
